"""Sub-word tokenizers on the Hugging Face ``tokenizers`` backend: trained WordPiece and pretrained (see
:mod:`lightning_embinit.text.tokenization`); ``TextTokenizer.wordpiece``/``pretrained`` reach them by their kind."""

from __future__ import annotations

import copy
import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from lightning_embinit.text.text_tokenizer import (
    CONFIG_VERSION,
    REQUIRED_ROLES,
    ROLE_FALLBACKS,
    WORDPIECE_TOKENS,
    TextTokenizer,
)
from lightning_embinit.vocabulary import SPECIAL_ROLES, SPECIAL_TOKENS


class _BackendTokenizer(TextTokenizer):
    """Shared by WordPiece and pretrained: a ``tokenizers.Tokenizer`` without padding or truncation. ``subset``: the
    backend ids kept, by this tokenizer's id; any other encodes as unk (docs/concepts.md#subword-rows)."""

    def __init__(self, backend: Any, special_tokens: Mapping[str, str], subset: Sequence[int] | None = None) -> None:
        backend.no_padding()
        backend.no_truncation()
        self.backend = backend
        vocab = backend.get_vocab(with_added_tokens=True)
        size = max(backend.get_vocab_size(with_added_tokens=True), max(vocab.values()) + 1)
        by_id = {i: token for token, i in vocab.items()}
        tokens = [by_id.get(i, f"<unused id {i}>") for i in range(size)]  # ids the tokenizer never produces
        self.subset = None if subset is None else np.asarray(subset, dtype=np.int64)
        if self.subset is not None:
            tokens = [tokens[i] for i in self.subset]
            self.to_local = np.full(size, -1, dtype=np.int64)  # -1: not kept (unk once the unk id is known)
            self.to_local[self.subset] = np.arange(len(self.subset))
        super().__init__(tokens, special_tokens)
        if self.subset is not None:
            self.to_local[self.to_local < 0] = self.unk_id

    def _local(self, ids: Sequence[int]) -> list[int]:
        return list(ids) if self.subset is None else self.to_local[np.asarray(ids, dtype=np.int64)].tolist()

    def _backend_ids(self, ids: Sequence[int]) -> list[int]:
        return list(ids) if self.subset is None else self.subset[np.asarray(ids, dtype=np.int64)].tolist()

    def _other_special_ids(self) -> frozenset[int]:
        special = [i for i, token in self.backend.get_added_tokens_decoder().items() if token.special]
        return frozenset(i for i in self._local(special) if i >= 0)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self._local(encoding.ids) for encoding in self.backend.encode_batch(texts, add_special_tokens=False)]

    def _detokenize(self, ids: list[int]) -> str:
        return self.backend.decode(self._backend_ids(ids), skip_special_tokens=True)

    def _clean_up(self, text: str) -> str:
        return text

    def reference(self, text: str) -> str:
        encoding = self.backend.encode(text, add_special_tokens=False)
        ids = self._local(encoding.ids)
        if self.unk_id not in ids:
            return self.decode(ids)
        normalizer, pre_tokenizer = self.backend.normalizer, self.backend.pre_tokenizer
        pieces = []
        backend_unk = self._backend_ids([self.unk_id])[0]
        for i, own, token, (start, end) in zip(ids, encoding.ids, encoding.tokens, encoding.offsets):
            if own == backend_unk:  # the original text the model cannot spell, normalized and pre-tokenized
                span = normalizer.normalize_str(text[start:end]) if normalizer is not None else text[start:end]
                pieces.append(
                    "".join(piece for piece, _ in pre_tokenizer.pre_tokenize_str(span)) if pre_tokenizer else span
                )
            elif i == self.unk_id or i not in self.special_ids:  # (a token left out of a restricted vocabulary)
                pieces.append(token)
        decoder = self.backend.decoder
        return self._clean_up(decoder.decode(pieces) if decoder is not None else " ".join(pieces))


class WordPieceTokenizer(_BackendTokenizer):
    """A WordPiece vocabulary trained on the task's text (:meth:`TextTokenizer.wordpiece`)."""

    kind = "wordpiece"
    config_keys = ("tokenizer_json", "special_tokens")

    @classmethod
    def train(
        cls, texts: Sequence[str], *, vocab_size: int, min_frequency: int, lowercase: bool, roles: Sequence[str]
    ) -> WordPieceTokenizer:
        """A WordPiece vocabulary of ≤ ``vocab_size`` pieces seen ≥ ``min_frequency`` times in ``texts``."""
        if vocab_size < 1 or min_frequency < 1:
            raise ValueError(f"vocab_size and min_frequency must be ≥ 1, got {vocab_size} and {min_frequency}")
        specials = {r: WORDPIECE_TOKENS[r] for r in (*REQUIRED_ROLES, *roles)}
        if not any(text.strip() for text in texts):
            raise ValueError("cannot train a WordPiece vocabulary on empty text")
        backend = Tokenizer(models.WordPiece(unk_token=specials["unk"], continuing_subword_prefix="##"))
        backend.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.BertNormalizer(strip_accents=False, lowercase=lowercase)]
        )
        # spaces become "▁" word starts and punctuation is split off; the decoder drops the spaces WordPiece
        # puts between pieces and turns "▁" back into spaces, so decoding restores the text's own spacing
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
                pre_tokenizers.Punctuation(behavior="isolated"),
            ]
        )
        backend.decoder = decoders.Sequence(
            [
                decoders.WordPiece(prefix="##", cleanup=False),
                decoders.Replace(" ", ""),
                decoders.Metaspace(replacement="▁", prepend_scheme="always"),
            ]
        )
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            show_progress=False,
            special_tokens=list(specials.values()),
            continuing_subword_prefix="##",
        )
        backend.train_from_iterator(texts, trainer, length=len(texts))
        if (size := backend.get_vocab_size(with_added_tokens=True)) > vocab_size:
            raise ValueError(
                f"vocab_size={vocab_size} cannot be met: a WordPiece vocabulary holds its {len(specials)} special "
                f"tokens and every character of the training text, {size} tokens here; ask for "
                f"vocab_size ≥ {size} (well above it to learn whole words)"
            )
        return cls(backend, specials)

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": CONFIG_VERSION,
            "tokenizer_json": self.backend.to_str(),
            "special_tokens": dict(self.special_tokens),
        }

    @classmethod
    def _from_config(cls, config: dict[str, Any]) -> TextTokenizer:
        return cls(Tokenizer.from_str(config["tokenizer_json"]), config["special_tokens"])


class PretrainedTokenizer(_BackendTokenizer):
    """A Hugging Face tokenizer; decoding is its own ``decode(skip_special_tokens=True)``."""

    kind = "pretrained"
    config_keys = ("files", "special_tokens")

    @classmethod
    def load(cls, name_or_path: str) -> PretrainedTokenizer:
        """``transformers.AutoTokenizer`` (fast) of a hub id or local directory, wrapped."""
        from transformers import AutoTokenizer

        location = os.path.expanduser(name_or_path)
        try:
            hf = AutoTokenizer.from_pretrained(location if os.path.isdir(location) else name_or_path, use_fast=True)
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot load the Hugging Face tokenizer {name_or_path!r}: {error}") from None
        return cls.from_hf(hf, name_or_path)

    def __init__(self, hf: Any, special_tokens: Mapping[str, str], config: dict[str, Any]) -> None:
        self.hf = hf
        self._config = config
        super().__init__(copy.deepcopy(hf.backend_tokenizer), special_tokens, config.get("subset"))

    def restricted(self, texts: Sequence[str], *, min_freq: int = 1) -> PretrainedTokenizer:
        """Only the tokens ``texts`` use ≥ ``min_freq`` times, most frequent first, after the special tokens ([K]'s
        "vocabulary of N tokens built from the training data")."""
        if self.subset is not None:
            raise ValueError("this pretrained tokenizer is already restricted to a training vocabulary")
        if min_freq < 1:
            raise ValueError(f"min_freq must be ≥ 1, got {min_freq}")
        counts = Counter(i for ids in self.encode_batch(list(texts)) for i in ids)
        kept = sorted(
            (i for i, c in counts.items() if c >= min_freq and i not in self.special_ids), key=lambda i: (-counts[i], i)
        )
        if not kept:
            raise ValueError(f"no token of the training text occurs ≥ min_freq={min_freq} times")
        specials = dict.fromkeys([self.role_ids[role] for role in self.special_tokens] + sorted(self.special_ids))
        return PretrainedTokenizer(self.hf, self.special_tokens, {**self._config, "subset": [*specials, *kept]})

    @classmethod
    def from_hf(cls, hf: Any, name: str) -> PretrainedTokenizer:
        """Wrap a transformers fast tokenizer: fill the required roles, snapshot its files as the config."""
        if getattr(hf, "backend_tokenizer", None) is None:
            raise ValueError(
                f"tokenizer {name!r} has no fast (Rust) backend; a tokenizer.json or a convertible vocabulary is needed"
            )
        vocab = hf.get_vocab()
        special: dict[str, str] = {}
        for role in SPECIAL_ROLES:
            tokens = (getattr(hf, f"{candidate}_token", None) for candidate in ROLE_FALLBACKS.get(role, (role,)))
            token = next((token for token in tokens if isinstance(token, str) and token in vocab), None)
            if token is not None:
                special[role] = token
        if added := {role: SPECIAL_TOKENS[role] for role in REQUIRED_ROLES if role not in special}:
            hf.add_special_tokens({f"{role}_token": token for role, token in added.items()})
        special |= added
        special = {role: special[role] for role in SPECIAL_ROLES if role in special}
        if special["pad"] in (special["bos"], special["eos"]):
            raise ValueError(f"tokenizer {name!r}: its pad token {special['pad']!r} is also its bos or eos token")
        with tempfile.TemporaryDirectory() as directory:
            hf.save_pretrained(directory)
            files = {path.name: path.read_text(encoding="utf-8") for path in sorted(Path(directory).iterdir())}
        config = {"kind": cls.kind, "version": CONFIG_VERSION, "name": name, "files": files, "special_tokens": special}
        return cls(hf, special, config)

    def _detokenize(self, ids: list[int]) -> str:
        return self.hf.decode(self._backend_ids(ids), skip_special_tokens=True)

    def _clean_up(self, text: str) -> str:
        return self.hf.clean_up_tokenization(text) if getattr(self.hf, "clean_up_tokenization_spaces", False) else text

    def input_template(self, *, pair: bool, add_cls: bool = False) -> list[tuple[str | int, int]]:
        """The tokenizer's own post-processor layout, e.g. BERT's ``[CLS] a [SEP] b [SEP]`` with type ids."""
        encoding = self.backend.encode("a", "b" if pair else None, add_special_tokens=True)
        parts: list[tuple[str | int, int]] = []
        previous = None
        for i, sequence, type_id in zip(self._local(encoding.ids), encoding.sequence_ids, encoding.type_ids):
            if sequence is None:
                parts.append((i, type_id))
            elif sequence != previous:
                parts.append(("a" if sequence == 0 else "b", type_id))
            previous = sequence
        return parts

    def to_config(self) -> dict[str, Any]:
        return copy.deepcopy(self._config)

    @classmethod
    def _from_config(cls, config: dict[str, Any]) -> TextTokenizer:
        from transformers import AutoTokenizer

        with tempfile.TemporaryDirectory() as directory:
            for file, text in config["files"].items():
                if os.path.basename(file) != file:
                    raise ValueError(f"pretrained tokenizer config: bad file name {file!r}")
                (Path(directory) / file).write_text(text, encoding="utf-8")
            hf = AutoTokenizer.from_pretrained(directory, use_fast=True)
        return cls(hf, config["special_tokens"], config)
