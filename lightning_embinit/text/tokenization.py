"""One tokenizer interface for translation and classification data (the tokenizations of docs/concepts.md).

:class:`TextTokenizer` has three kinds, chosen per side by a spec (:func:`build_tokenizer`):

- ``word``: :class:`~lightning_embinit.text.text_tokenizer.WordTokenizer` + a vocabulary of the training text's
  words seen ≥ ``min_freq`` times ([K]: 2; 5 for IWSLT2017). Special tokens ``<pad> <unk> <bos> <eos>`` (ids 0–3),
  then ``<cls> <sep> <mask>`` when asked for (``roles``).
- ``wordpiece``: trained on the training text with the Hugging Face ``tokenizers`` library as [R]'s tutorial does:
  BERT normalization without accent stripping (umlauts and ß survive), reserved tokens ``[PAD] [UNK] [START]
  [END]`` (then ``[CLS] [SEP] [MASK]`` when asked for). Word starts carry ``▁`` (``"▁mann"``, but ``"shirt"`` after
  the hyphen of ``"t-shirt"``), so decoding gives back the text's own spacing instead of ``"t - shirt ."``.
- ``pretrained``: any Hugging Face tokenizer (hub id or local directory); its token strings by id are
  ``TextTokenizer.tokens``, so ``source="hf:<same>"`` aligns row for row. Missing roles come from its own tokens
  (bos → cls, eos → sep), else a new special token is appended (e.g. GPT-2's pad, T5's bos).

``to_config()`` is complete JSON (a pretrained tokenizer embeds its ``save_pretrained`` files), so a checkpoint
decodes new text offline. WordPiece training is not deterministic (frequency ties break in hash-map order), so
processes share one trained tokenizer through the datamodules' cache (:mod:`lightning_embinit.data.text_cache`).
The kinds live in :mod:`.text_tokenizer` and :mod:`.subword`; this module builds any of them from a spec, and a
datamodule's :class:`TokenizerPlan` says how to get one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from lightning_embinit.text.subword import PretrainedTokenizer, WordPieceTokenizer
from lightning_embinit.text.text_tokenizer import TextTokenizer, WordLevelTokenizer

__all__ = [
    "SPEC_FORMS",
    "PretrainedTokenizer",
    "TextTokenizer",
    "TokenizerPlan",
    "TokenizerSpec",
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
TokenizerSpec = str | dict[str, Any]
"""A tokenizer spec a datamodule takes: one of :data:`SPEC_FORMS`."""


def _known_model_location(name: str) -> str:
    """``hf:minilm``, ``hf:bert``… (:mod:`lightning_embinit.init.sources.hf`'s names) → directory or hub id."""
    from lightning_embinit.init.sources.hf import KNOWN_MODELS, _package_dir

    known = KNOWN_MODELS.get(name)
    if known is None or "/" in name or os.path.isdir(os.path.expanduser(name)):
        return name
    return _package_dir(known.package) or known.repo_ids[0]


TRAINED_OPTIONS = {
    "word": {"min_freq", "max_size", "lowercase", "word_tokenizer", "roles"},
    "wordpiece": {"vocab_size", "min_freq", "lowercase", "roles"},
}
"""The ``build_tokenizer`` options each trained kind takes; a pretrained tokenizer takes ``restrict_vocabulary`` and
``min_freq``."""
BUILD_OPTIONS = {"restrict_vocabulary", "min_freq"}.union(*TRAINED_OPTIONS.values())


def _spec_form(spec: Any) -> str | None:
    """Which form ``spec`` is: ``tokenizer``, ``config``, ``word``, ``wordpiece``, ``hf``, ``directory``, ``file``."""
    if isinstance(spec, TextTokenizer):
        return "tokenizer"
    if isinstance(spec, Mapping):
        return "config"
    if not isinstance(spec, str) or not spec:
        return None
    if spec in TRAINED_OPTIONS:
        return spec
    if spec.startswith("hf:"):
        return "hf"
    path = os.path.expanduser(spec)
    if os.path.isdir(path):
        return "directory"
    return "file" if os.path.isfile(path) and path.endswith(".json") else None


def check_tokenizer_spec(spec: Any, what: str = "tokenizer") -> None:
    """Raise now for a spec :func:`build_tokenizer` would refuse later (without loading or training anything)."""
    form = _spec_form(spec)
    if form is None:
        raise ValueError(f"{what}: unknown tokenizer spec {spec!r}; valid forms: {', '.join(SPEC_FORMS)}")
    if form == "config":
        try:
            TextTokenizer.check_config(spec)
        except ValueError as error:
            raise ValueError(f"{what}: {error}") from None


def build_tokenizer(
    spec: str | Mapping[str, Any] | TextTokenizer, texts: TextSource = (), **options: Any
) -> TextTokenizer:
    """A :class:`TextTokenizer` from a spec (see :data:`SPEC_FORMS`); ``texts`` (or a callable giving them, called
    only when needed) train ``word``/``wordpiece``.

    ``options`` (each kind takes those of :data:`TRAINED_OPTIONS` that apply to it): ``min_freq`` (word: minimum
    count; wordpiece: the trainer's ``min_frequency``), ``max_size``, ``vocab_size``, ``lowercase``,
    ``word_tokenizer``, ``roles`` (extra special tokens: ``cls``, ``sep``, ``mask``); a pretrained tokenizer takes
    ``restrict_vocabulary`` (keep only the tokens ``texts`` use ≥ ``min_freq`` times, default 1).
    """
    if unknown := sorted(set(options) - BUILD_OPTIONS):
        raise ValueError(f"unknown tokenizer options {unknown}; options: {', '.join(sorted(BUILD_OPTIONS))}")
    given = {k: v for k, v in options.items() if v is not None}
    form = _spec_form(spec)
    if form in ("tokenizer", "config"):
        return spec if form == "tokenizer" else TextTokenizer.from_config(spec)  # type: ignore[return-value]
    if form is None and (not isinstance(spec, str) or not spec):
        raise ValueError(f"tokenizer spec {spec!r}: expected one of {', '.join(SPEC_FORMS)}")
    training_text = texts if callable(texts) else lambda: texts
    if form in TRAINED_OPTIONS:
        renamed = {"word_tokenizer": "tokenizer"} if form == "word" else {"min_freq": "min_frequency"}
        kwargs = {renamed.get(k, k): v for k, v in given.items() if k in TRAINED_OPTIONS[form]}
        return (TextTokenizer.word if form == "word" else TextTokenizer.wordpiece)(training_text(), **kwargs)
    restrict = (
        {"restrict_to": training_text(), "min_freq": given.get("min_freq", 1)}
        if given.get("restrict_vocabulary")
        else {}
    )
    if form in ("hf", "directory"):
        location = _known_model_location(spec[3:]) if form == "hf" else os.path.expanduser(spec)
        return TextTokenizer.pretrained(location, **restrict)
    if form == "file":
        path = os.path.expanduser(spec)
        with open(path, encoding="utf-8") as handle:
            try:
                return TextTokenizer.from_config(json.load(handle))
            except ValueError as error:
                raise ValueError(f"tokenizer config file {path}: {error}") from None
    raise ValueError(f"unknown tokenizer spec {spec!r}; valid forms: {', '.join(SPEC_FORMS)}")


@dataclass
class TokenizerPlan:
    """How to get one tokenizer: a spec (:func:`build_tokenizer`), its options, and the training text it learns from."""

    spec: TokenizerSpec
    options: dict[str, Any]
    training_text: Callable[[], list[str]]

    @property
    def trained(self) -> bool:
        """Whether the tokenizer learns its vocabulary from the training text (word level, WordPiece)."""
        return isinstance(self.spec, str) and self.spec in TRAINED_OPTIONS

    @cached_property
    def ready(self) -> TextTokenizer:
        """The tokenizer of a spec that needs no training (pretrained, or a saved config), loaded once."""
        return build_tokenizer(self.spec)

    def key(self) -> dict[str, Any]:
        """What identifies the tokenizer: its options and kind, or the fingerprint of the tokenizer it starts from."""
        options = {k: v for k, v in sorted(self.options.items()) if v is not None}
        if self.trained:
            return {"spec": self.spec, "options": options}
        return {"fingerprint": self.ready.fingerprint(), "options": options}

    def build(self, name: str) -> TextTokenizer:
        """The tokenizer ``name``: trained on its text, loaded, or loaded and restricted to the training text."""
        if self.trained:
            return build_tokenizer(self.spec, self.training_text, **self.options)
        ready = self.ready
        if not self.options.get("restrict_vocabulary"):
            return ready
        if not isinstance(ready, PretrainedTokenizer) or ready.subset is not None:
            raise ValueError(
                f"restrict_vocabulary=True applies to a full pretrained tokenizer; {name!r} is a "
                f"{ready.kind} tokenizer{' already restricted' if ready.kind == 'pretrained' else ''}"
            )
        return ready.restricted(
            self.training_text(), min_freq=1 if self.options.get("min_freq") is None else self.options["min_freq"]
        )
