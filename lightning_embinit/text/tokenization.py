"""One tokenizer interface for translation and classification data (the tokenizations of docs/concepts.md).

:class:`TextTokenizer` has three kinds, chosen per side by a spec (:func:`build_tokenizer`):

- ``word``: :class:`~lightning_embinit.text.text_tokenizer.WordTokenizer` + a
  :class:`~lightning_embinit.vocabulary.Vocabulary` built from the training text with a minimum frequency
  ([K]: 2; 5 for IWSLT2017). Special tokens ``<pad> <unk> <bos> <eos>`` (ids 0–3), then ``<cls> <sep> <mask>``
  when asked for (``roles``).
- ``wordpiece``: a WordPiece vocabulary trained on the training text with the Hugging Face
  ``tokenizers`` library, as [R]'s tutorial builds its vocabularies: BERT normalization without
  accent stripping (German umlauts and ß survive), reserved tokens ``[PAD] [UNK] [START] [END]``
  as in the tutorial (then ``[CLS] [SEP] [MASK]`` when asked for). Unlike BERT's pre-tokenizer,
  word starts carry ``▁`` (``"▁mann"``, but ``"shirt"`` after the hyphen of ``"t-shirt"``), so
  decoding gives back the text's own spacing instead of ``"t - shirt ."``.
- ``pretrained``: any Hugging Face tokenizer (hub id or local directory, ``transformers.AutoTokenizer``);
  its token strings by id are ``TextTokenizer.tokens``, so ``source="hf:<same>"`` aligns row for row.
  Roles the tokenizer lacks come from its own tokens (bos → cls, eos → sep); a role with no token
  at all (e.g. GPT-2's pad, T5's bos) gets a new special token appended to the vocabulary.

``to_config()`` is complete JSON (a pretrained tokenizer embeds its ``save_pretrained`` files), so a
checkpoint decodes new text with its own ids, offline. WordPiece training is not deterministic
(the trainer breaks frequency ties in hash-map order), so processes must share one trained
tokenizer — the datamodules' cache does that (see :mod:`lightning_embinit.data.text_cache`).
The interface and the word kind live in :mod:`lightning_embinit.text.text_tokenizer`, the sub-word
kinds in :mod:`lightning_embinit.text.subword`; this module builds any of them from a spec.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lightning_embinit.text.subword import PretrainedTokenizer, WordPieceTokenizer
from lightning_embinit.text.text_tokenizer import TextTokenizer, WordLevelTokenizer

__all__ = [
    "SPEC_FORMS",
    "PretrainedTokenizer",
    "TextTokenizer",
    "WordLevelTokenizer",
    "WordPieceTokenizer",
    "build_tokenizer",
    "check_tokenizer_spec",
]

#: The accepted forms of a tokenizer spec, as error messages list them.
SPEC_FORMS = (
    "'word'",
    "'wordpiece'",
    "'hf:<hub id, local directory or known model name>'",
    "a local tokenizer directory",
    "a tokenizer config dict (TextTokenizer.to_config())",
    "the path of a saved config .json",
)
TextSource = Sequence[str] | Callable[[], Sequence[str]]


def _known_model_location(name: str) -> str:
    """``hf:minilm``, ``hf:bert``…: the names of :mod:`lightning_embinit.init.sources.hf` → directory or hub id."""
    from lightning_embinit.init.sources.hf import KNOWN_MODELS, _package_dir

    known = KNOWN_MODELS.get(name)
    if known is None or "/" in name or os.path.isdir(os.path.expanduser(name)):
        return name
    return _package_dir(known.package) or known.repo_ids[0]


WORD_OPTIONS = {"min_freq", "max_size", "lowercase", "word_tokenizer", "roles"}
WORDPIECE_OPTIONS = {"vocab_size", "min_freq", "lowercase", "roles"}
PRETRAINED_OPTIONS = {"restrict_vocabulary", "min_freq"}
BUILD_OPTIONS = WORD_OPTIONS | WORDPIECE_OPTIONS | PRETRAINED_OPTIONS


def check_tokenizer_spec(spec: Any, what: str = "tokenizer") -> None:
    """Raise now for a spec :func:`build_tokenizer` would refuse later (without loading or training anything)."""
    if isinstance(spec, (TextTokenizer, Mapping)):
        if isinstance(spec, Mapping):
            try:
                TextTokenizer.check_config(spec)
            except ValueError as error:
                raise ValueError(f"{what}: {error}") from None
        return
    if isinstance(spec, str) and (spec in ("word", "wordpiece") or spec.startswith("hf:")):
        return
    path = os.path.expanduser(spec) if isinstance(spec, str) and spec else ""
    if not (os.path.isdir(path) or (os.path.isfile(path) and path.endswith(".json"))):
        raise ValueError(f"{what}: unknown tokenizer spec {spec!r}; valid forms: {', '.join(SPEC_FORMS)}")


def build_tokenizer(
    spec: str | Mapping[str, Any] | TextTokenizer, texts: TextSource = (), **options: Any
) -> TextTokenizer:
    """A :class:`TextTokenizer` from a spec (see :data:`SPEC_FORMS`); ``texts`` train ``word``/``wordpiece``.

    ``options`` (each kind takes what applies to it; pretrained and saved tokenizers take none):
    ``min_freq`` (word: minimum count; wordpiece: the trainer's ``min_frequency``), ``max_size``
    (word), ``vocab_size`` (wordpiece), ``lowercase``, ``word_tokenizer`` (``regex``/``whitespace``),
    ``roles`` (extra special tokens: ``cls``, ``sep``, ``mask``), ``restrict_vocabulary``
    (pretrained: keep only the tokens ``texts`` use ≥ ``min_freq`` times, default 1). ``texts`` may
    be a callable, read only when a vocabulary is learned from it.
    """
    if unknown := sorted(set(options) - BUILD_OPTIONS):
        raise ValueError(f"unknown tokenizer options {unknown}; options: {', '.join(sorted(BUILD_OPTIONS))}")
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(spec, TextTokenizer):
        return spec
    if isinstance(spec, Mapping):
        return TextTokenizer.from_config(spec)
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"tokenizer spec {spec!r}: expected one of {', '.join(SPEC_FORMS)}")

    def training_text() -> Sequence[str]:
        return texts() if callable(texts) else texts

    if spec == "word":
        return TextTokenizer.word(
            training_text(),
            **{("tokenizer" if k == "word_tokenizer" else k): v for k, v in given.items() if k in WORD_OPTIONS},
        )
    if spec == "wordpiece":
        kwargs = {("min_frequency" if k == "min_freq" else k): v for k, v in given.items() if k in WORDPIECE_OPTIONS}
        return TextTokenizer.wordpiece(training_text(), **kwargs)
    restrict = (
        {"restrict_to": training_text(), "min_freq": given.get("min_freq", 1)}
        if given.get("restrict_vocabulary")
        else {}
    )
    if spec.startswith("hf:"):
        return TextTokenizer.pretrained(_known_model_location(spec[3:]), **restrict)
    path = os.path.expanduser(spec)
    if os.path.isdir(path):
        return TextTokenizer.pretrained(path, **restrict)
    if os.path.isfile(path) and path.endswith(".json"):
        with open(path, encoding="utf-8") as handle:
            try:
                return TextTokenizer.from_config(json.load(handle))
            except ValueError as error:
                raise ValueError(f"tokenizer config file {path}: {error}") from None
    raise ValueError(f"unknown tokenizer spec {spec!r}; valid forms: {', '.join(SPEC_FORMS)}")
