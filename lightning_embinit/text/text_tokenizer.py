"""The tokenizer interface, :class:`TextTokenizer` (its kinds register by :attr:`TextTokenizer.kind`; see
:mod:`lightning_embinit.text.tokenization`), its word-level kind, and the word splitter :class:`WordTokenizer`:

- ``regex`` (default): words and single punctuation marks (:data:`WORD_PATTERN`): runs of letters/digits with
  inner apostrophes, hyphens, periods and colons ("don't", "well-known", "u.s", "4:00pm"), and every other
  non-space character alone.
- ``whitespace``: ``str.split()``, as GloVe/word2vec style pre-tokenized text expects.

Both lowercase first with ``lowercase=True``.
"""

from __future__ import annotations

import abc
import copy
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lightning_embinit.checks import check_choice, check_texts
from lightning_embinit.vocabulary import SPECIAL_ROLES, SPECIAL_TOKENS, Vocabulary

#: The ``regex`` word tokenizer: words (with inner apostrophes, dots, colons or hyphens) or one non-space symbol.
WORD_PATTERN = re.compile(r"\w+(?:['’.:\-]\w+)*|[^\w\s]", re.UNICODE)
WORD_TOKENIZERS = ("regex", "whitespace")


class WordTokenizer:
    """Text → list of word tokens (``regex`` or ``whitespace``, optional lowercasing)."""

    def __init__(self, kind: str = "regex", *, lowercase: bool = True) -> None:
        self.kind = check_choice("tokenizer", kind, WORD_TOKENIZERS)
        self.lowercase = lowercase

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        return WORD_PATTERN.findall(text) if self.kind == "regex" else text.split()


REQUIRED_ROLES = tuple(SPECIAL_TOKENS)
EXTRA_ROLES = SPECIAL_ROLES[len(REQUIRED_ROLES) :]
WORD_EXTRA_TOKENS = {role: f"<{role}>" for role in EXTRA_ROLES}
WORDPIECE_TOKENS = {role: f"[{role.upper()}]" for role in SPECIAL_ROLES} | {"bos": "[START]", "eos": "[END]"}
ROLE_FALLBACKS = {"bos": ("bos", "cls"), "eos": ("eos", "sep"), "pad": ("pad",), "unk": ("unk",)}
CONFIG_VERSION = 1


def _check_roles(roles: Sequence[str]) -> tuple[str, ...]:
    if bad := [r for r in roles if r not in EXTRA_ROLES]:
        raise ValueError(f"unknown special-token roles {bad}; optional roles: {', '.join(EXTRA_ROLES)}")
    return tuple(r for r in EXTRA_ROLES if r in roles)


def _one_text(text: Any, what: str) -> list[str]:
    if not isinstance(text, str):
        raise TypeError(
            f"{what} takes one string, got {type(text).__name__} ({text!r:.60}); "
            "a list of texts goes to the *_batch method"
        )
    return [text]


class TextTokenizer(abc.ABC):
    """Text ↔ ids for one side of the data; ``tokens`` are the embedding rows' token strings."""

    kind: ClassVar[str]
    _kinds: ClassVar[dict[str, type[TextTokenizer]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            TextTokenizer._kinds[cls.kind] = cls

    def __init__(self, tokens: Sequence[str], special_tokens: Mapping[str, str]) -> None:
        self.special_tokens = dict(special_tokens)
        present = set(tokens)
        if missing := [r for r in REQUIRED_ROLES if self.special_tokens.get(r) not in present]:
            raise ValueError(f"{self.kind} tokenizer: no token for the roles {missing} (needs {list(REQUIRED_ROLES)})")
        self.vocabulary = Vocabulary.from_tokens(tokens, self.special_tokens)
        """The token strings by id and the special tokens: what a model's embedding table is built over."""
        self.tokens = self.vocabulary.tokens
        self.role_ids = self.vocabulary.special_ids
        self.pad_id, self.unk_id = self.role_ids["pad"], self.role_ids["unk"]
        self.bos_id, self.eos_id = self.role_ids["bos"], self.role_ids["eos"]
        self.special_ids = frozenset(self.role_ids.values()) | self._other_special_ids()

    def _other_special_ids(self) -> frozenset[int]:
        return frozenset()

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, size={len(self)}, special_tokens={self.special_tokens})"

    # ------------------------------------------------------------------ encoding and decoding
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (one string); no bos/eos added."""
        return self.encode_batch(_one_text(text, "encode()"))[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text of a list of strings (a bare string or a non-string item: TypeError)."""
        return self._encode_batch(check_texts(texts, "encode_batch() texts"))

    @abc.abstractmethod
    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text (the fast path: Hugging Face tokenizers encode the batch in Rust)."""

    def tokenize(self, text: str) -> list[str]:
        """Token strings of ``text`` (the training corpus of embedding sources such as word2vec-trainset)."""
        return [self.tokens[i] for i in self.encode(text)]

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        tokens = self.tokens
        return [[tokens[i] for i in ids] for ids in self.encode_batch(texts)]

    def content_ids(self, ids: Sequence[int]) -> list[int]:
        """``ids`` without a leading bos, cut at the first eos, special tokens dropped; an id out of range raises."""
        ids = [int(i) for i in ids]
        if bad := [i for i in ids if not 0 <= i < len(self.tokens)]:
            raise ValueError(
                f"token ids {bad[:5]} are out of range for this {self.kind} tokenizer's {len(self.tokens)} "
                f"tokens (ids 0 … {len(self.tokens) - 1}); were the ids made with another vocabulary?"
            )
        if ids and ids[0] == self.bos_id:
            ids = ids[1:]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return [i for i in ids if i not in self.special_ids]

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenized text of ``ids`` (see :meth:`content_ids` for what is dropped)."""
        return self._detokenize(self.content_ids(ids))

    @abc.abstractmethod
    def _detokenize(self, ids: list[int]) -> str:
        """Text of content ids (no special tokens among them)."""

    @abc.abstractmethod
    def reference(self, text: str) -> str:
        """``text`` as this tokenizer round-trips it, with unknown pieces kept: a BLEU reference."""

    def input_template(self, *, pair: bool, add_cls: bool = False) -> list[tuple[str | int, int]]:
        """How a model input is assembled: ``("a", type)``, ``("b", type)`` or ``(special id, type)`` parts:
        ``[cls]? a`` and ``[cls]? a [sep] b`` (type ids 0 up to the separator, 1 after it)."""
        parts: list[tuple[str | int, int]] = []
        if add_cls:
            parts.append((self._role_id("cls", "add_cls=True"), 0))
        parts.append(("a", 0))
        if pair:
            parts += [(self._role_id("sep", "sentence pairs"), 0), ("b", 1)]
        return parts

    def _role_id(self, role: str, why: str) -> int:
        if role not in self.role_ids:
            raise ValueError(
                f"{why} needs a {role} token, but this {self.kind} tokenizer has none "
                f"(roles: {sorted(self.role_ids)}); build it with roles=('cls', 'sep')"
            )
        return self.role_ids[role]

    # ------------------------------------------------------------------ configuration
    @abc.abstractmethod
    def to_config(self) -> dict[str, Any]:
        """Complete JSON-serializable description; :meth:`from_config` rebuilds the same tokenizer."""

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_config` as JSON; ``build_tokenizer(path)`` reads it back."""
        with open(os.path.expanduser(os.fspath(path)), "w", encoding="utf-8") as handle:
            json.dump(self.to_config(), handle, ensure_ascii=False)

    def fingerprint(self) -> str:
        """A hex digest of :meth:`to_config`: equal fingerprints encode text identically."""
        return hashlib.sha256(json.dumps(self.to_config(), sort_keys=True).encode()).hexdigest()[:32]

    config_keys: ClassVar[tuple[str, ...]] = ("special_tokens",)
    """The keys a config of this kind must have."""

    @staticmethod
    def check_config(config: Any) -> type[TextTokenizer]:
        """The class of a tokenizer config's kind; ValueError for something else or a config that lacks keys."""
        if not isinstance(config, Mapping) or config.get("kind") not in TextTokenizer._kinds:
            kind = config.get("kind") if isinstance(config, Mapping) else type(config).__name__
            raise ValueError(f"not a tokenizer config (kind {kind!r}); kinds: {', '.join(TextTokenizer._kinds)}")
        kind = TextTokenizer._kinds[config["kind"]]
        if missing := [key for key in kind.config_keys if key not in config]:
            raise ValueError(
                f"incomplete {kind.kind} tokenizer config: no {missing} (keys: {sorted(config)}); "
                "a complete one comes from TextTokenizer.to_config() or .save()"
            )
        return kind

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TextTokenizer:
        """The tokenizer :meth:`to_config` described (no network, no files)."""
        return TextTokenizer.check_config(config)._from_config(copy.deepcopy(dict(config)))

    @classmethod
    @abc.abstractmethod
    def _from_config(cls, config: dict[str, Any]) -> TextTokenizer:
        """Rebuild this kind from its config."""

    # ------------------------------------------------------------------ constructors
    @classmethod
    def word(
        cls,
        texts: Sequence[str],
        *,
        min_freq: int = 2,
        max_size: int | None = None,
        lowercase: bool = True,
        tokenizer: str = "regex",
        roles: Sequence[str] = (),
    ) -> TextTokenizer:
        """Word level, vocabulary from ``texts`` (tokens seen ≥ ``min_freq`` times; docs/concepts.md#word-vectors)."""
        split = WordTokenizer(tokenizer, lowercase=lowercase)
        specials = {**SPECIAL_TOKENS, **{r: WORD_EXTRA_TOKENS[r] for r in _check_roles(roles)}}
        vocabulary = Vocabulary.build(map(split, texts), min_freq=min_freq, max_size=max_size, special_tokens=specials)
        return WordLevelTokenizer(vocabulary.tokens, specials, lowercase=lowercase, split=tokenizer)

    @classmethod
    def wordpiece(
        cls,
        texts: Sequence[str],
        *,
        vocab_size: int = 8000,
        min_frequency: int = 2,
        lowercase: bool = True,
        roles: Sequence[str] = (),
    ) -> TextTokenizer:
        """WordPiece trained on ``texts`` with the ``tokenizers`` library ([R]'s tutorial; see :mod:`.tokenization`)."""
        return cls._kinds["wordpiece"].train(
            texts, vocab_size=vocab_size, min_frequency=min_frequency, lowercase=lowercase, roles=_check_roles(roles)
        )

    @classmethod
    def pretrained(
        cls, name_or_path: str, *, restrict_to: Sequence[str] | None = None, min_freq: int = 1
    ) -> TextTokenizer:
        """A Hugging Face tokenizer by hub id or local directory; with ``restrict_to`` (training text), only the
        tokens it uses ≥ ``min_freq`` times (:meth:`~lightning_embinit.text.subword.PretrainedTokenizer.restricted`)."""
        tokenizer = cls._kinds["pretrained"].load(name_or_path)
        return tokenizer if restrict_to is None else tokenizer.restricted(restrict_to, min_freq=min_freq)


class WordLevelTokenizer(TextTokenizer):
    """Word tokens (:class:`WordTokenizer`) looked up in a fixed token list; unknown words → unk."""

    kind = "word"
    config_keys = ("tokens", "special_tokens")

    def __init__(
        self, tokens: Sequence[str], special_tokens: Mapping[str, str], *, lowercase: bool = True, split: str = "regex"
    ) -> None:
        super().__init__(Vocabulary(tokens, special_tokens).tokens, special_tokens)
        self.lowercase, self.split_kind = lowercase, split
        self.split = WordTokenizer(split, lowercase=lowercase)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        index, unk, split = self.vocabulary.index, self.unk_id, self.split
        return [[index.get(token, unk) for token in split(text)] for text in texts]

    def tokenize(self, text: str) -> list[str]:
        """The words of ``text`` before the vocabulary lookup (rare words keep their string)."""
        return self.split(_one_text(text, "tokenize()")[0])

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        return [self.split(text) for text in check_texts(texts, "tokenize_batch() texts")]

    def _detokenize(self, ids: list[int]) -> str:
        return " ".join(self.tokens[i] for i in ids)

    def reference(self, text: str) -> str:
        return " ".join(self.split(text))

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": CONFIG_VERSION,
            "tokens": list(self.tokens),
            "special_tokens": dict(self.special_tokens),
            "lowercase": self.lowercase,
            "tokenizer": self.split_kind,
        }

    @classmethod
    def _from_config(cls, config: dict[str, Any]) -> TextTokenizer:
        check_choice("tokenizer", config.get("tokenizer", "regex"), WORD_TOKENIZERS, hint="word tokenizer config")
        return cls(
            config["tokens"],
            config["special_tokens"],
            lowercase=bool(config.get("lowercase", True)),
            split=config.get("tokenizer", "regex"),
        )
