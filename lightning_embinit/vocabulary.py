"""The package's one vocabulary type, shared by the datamodules, the tokenizers, the architectures and the
initialization core: token strings by id, the special tokens by role, and where the tokens came from."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from lightning_embinit.text_files import open_text

SPECIAL_TOKENS: dict[str, str] = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}
"""Role → string of the package's own special tokens; a built or numbered vocabulary gives them ids 0, 1, 2, 3."""

SPECIAL_ROLES = ("pad", "unk", "bos", "eos", "cls", "sep", "mask")
"""Every special-token role the package knows: :data:`SPECIAL_TOKENS`' four, then the optional ones."""


def read_token_file(path: str | os.PathLike[str], what: str = "token") -> list[str]:
    """One token per line, UTF-8, line k = id k − 1, ``\\r\\n`` endings accepted; empty lines at the end add none."""
    with open_text(os.path.expanduser(os.fspath(path)), what, newline="") as handle:
        lines = [line.removesuffix("\r") for line in handle.read().split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return lines


class Vocabulary(Sequence[str]):
    """``size`` token ids, ``tokens`` naming them (None when only the size is known), ``special_tokens`` (role →
    string), ``special_ids`` (role → id), ``origin`` (a file, a tokenizer …) and ``index`` (token → its first id).

    ``Vocabulary(tokens)`` is a word vocabulary: distinct non-empty strings that hold every special token (default:
    :data:`SPECIAL_TOKENS`). :meth:`from_tokens` takes any token list, :meth:`numbered` and :meth:`sized` a size.
    """

    def __init__(
        self, tokens: Iterable[str], special_tokens: Mapping[str, str] | None = None, *, origin: str = ""
    ) -> None:
        tokens = list(tokens)
        if bad := [t for t in tokens if not isinstance(t, str) or not t]:
            raise ValueError(f"vocabulary tokens must be non-empty strings; got {bad[:5]!r}")
        if len(set(tokens)) != len(tokens):
            repeated = [t for t, c in Counter(tokens).items() if c > 1]
            raise ValueError(f"a vocabulary cannot list the same token twice; repeated: {repeated[:10]!r}")
        self._set(len(tokens), tokens, SPECIAL_TOKENS if special_tokens is None else special_tokens, None, origin)

    def _set(
        self,
        size: int,
        tokens: list[str] | None,
        special_tokens: Mapping[str, str] | None,
        special_ids: Mapping[str, int] | None = None,
        origin: str = "",
    ) -> Vocabulary:
        """Every field from these; the special ids from the special tokens' strings unless given."""
        if tokens is not None and len(tokens) != size:
            raise ValueError(f"{len(tokens)} token strings for a vocabulary of {size} ids")
        self.size, self.tokens, self.origin = size, tokens, origin
        self.index = {} if tokens is None else {token: i for i, token in reversed(list(enumerate(tokens)))}
        self.special_tokens = dict(special_tokens or {})
        if special_ids is None and tokens is not None:
            if missing := [token for token in self.special_tokens.values() if token not in self.index]:
                raise ValueError(
                    f"special tokens {missing} are not in the vocabulary (it needs all of "
                    f"{list(self.special_tokens.values())})"
                )
            special_ids = {role: self.index[token] for role, token in self.special_tokens.items()}
        self.special_ids = dict(special_ids or {})
        if bad := {role: i for role, i in self.special_ids.items() if not 0 <= i < size}:
            raise ValueError(f"special-token ids {bad} are outside the vocabulary's {size} ids")
        return self

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_tokens(
        cls, tokens: Sequence[str], special_tokens: Mapping[str, str] | None = None, *, origin: str = ""
    ) -> Vocabulary:
        """The vocabulary of any token list (a repeated token's id is its first); ``special_tokens`` must name tokens
        of the list (None: the roles of :data:`SPECIAL_TOKENS` whose strings are in it)."""
        tokens = [str(token) for token in tokens]
        if special_tokens is None:
            present = set(tokens)
            special_tokens = {role: token for role, token in SPECIAL_TOKENS.items() if token in present}
        return cls.__new__(cls)._set(len(tokens), tokens, special_tokens, origin=origin)

    @classmethod
    def sized(
        cls, size: int, *, special_ids: Mapping[str, int] | None = None, special_tokens: Mapping[str, str] | None = None
    ) -> Vocabulary:
        """``size`` ids without strings, with the ``special_ids`` and ``special_tokens`` that are known."""
        return cls.__new__(cls)._set(size, None, special_tokens, special_ids)

    @classmethod
    def numbered(cls, size: int) -> Vocabulary:
        """``size`` ids without strings whose first four are pad, unk, bos and eos (:data:`SPECIAL_TOKENS`' order)."""
        if size < len(SPECIAL_TOKENS) + 1:
            raise ValueError(
                f"a numbered vocabulary needs ≥ {len(SPECIAL_TOKENS) + 1} ids (pad, unk, bos, eos and a "
                f"token), got {size}"
            )
        return cls.sized(size, special_ids={role: i for i, role in enumerate(SPECIAL_TOKENS)})

    @classmethod
    def of(cls, vocabulary: VocabularyLike, *, numbered: bool = False) -> Vocabulary:
        """A :class:`Vocabulary` as is; an int n: n ids without strings (``numbered``: :meth:`numbered`)."""
        if isinstance(vocabulary, Vocabulary):
            return vocabulary
        if isinstance(vocabulary, bool) or not isinstance(vocabulary, int) or vocabulary < 1:
            raise ValueError(f"a vocabulary is a Vocabulary or a size ≥ 1, got {vocabulary!r}")
        return cls.numbered(vocabulary) if numbered else cls.sized(vocabulary)

    @classmethod
    def read(cls, path: str | os.PathLike[str], special_tokens: Mapping[str, str] | None = None) -> Vocabulary:
        """A vocabulary file: UTF-8, one token per line, line k = id k − 1 (as :meth:`write` makes)."""
        path = os.path.expanduser(os.fspath(path))
        if not os.path.isfile(path):
            raise ValueError(f"vocabulary file not found: {path}")
        tokens = read_token_file(path, "vocabulary")
        if empty := [k + 1 for k, token in enumerate(tokens) if not token]:
            raise ValueError(f"vocabulary file {path}: empty line(s) {empty[:10]} (one token per line)")
        try:
            return cls(tokens, special_tokens, origin=f"file {path}")
        except ValueError as error:
            raise ValueError(f"vocabulary file {path}: {error}") from None

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        *,
        min_freq: int = 2,
        max_size: int | None = None,
        special_tokens: Mapping[str, str] | None = None,
    ) -> Vocabulary:
        """The special tokens, then the tokens of ``sentences`` seen ≥ ``min_freq`` times by descending frequency
        (ties by string), at most ``max_size`` rows in all."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be ≥ 1, got {min_freq}")
        specials = dict(SPECIAL_TOKENS if special_tokens is None else special_tokens)
        counts = Counter(token for sentence in sentences for token in sentence)
        if not counts:
            raise ValueError("cannot build a vocabulary from an empty corpus (no tokens)")
        for token in specials.values():
            counts.pop(token, None)
        words = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            if max_size <= len(specials):
                raise ValueError(f"max_size {max_size} leaves no room beside the {len(specials)} special tokens")
            words = words[: max_size - len(specials)]
        if not words:
            raise ValueError(
                f"the vocabulary would hold only the special tokens: no token occurs ≥ min_freq={min_freq} "
                f"times among {len(counts)} distinct tokens; lower min_freq or give more text"
            )
        return cls([*dict.fromkeys(specials.values()), *words], specials)

    # ------------------------------------------------------------------ saving
    def write(self, path: str | os.PathLike[str]) -> None:
        """Save the tokens as :meth:`read` reads them: one token per line, by id."""
        if bad := [t for t in self.tokens or () if "\n" in t or t.endswith("\r")]:
            raise ValueError(f"tokens {bad[:5]!r} contain a line break; they cannot be written one per line")
        with open(os.path.expanduser(os.fspath(path)), "w", encoding="utf-8", newline="") as handle:
            handle.write("".join(f"{token}\n" for token in self.tokens or ()))

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON (a checkpoint's hyperparameters keep it); :meth:`from_dict` rebuilds it."""
        return {
            "size": self.size,
            "tokens": None if self.tokens is None else list(self.tokens),
            "special_tokens": dict(self.special_tokens),
            "special_ids": dict(self.special_ids),
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vocabulary:
        """The vocabulary :meth:`to_dict` described."""
        tokens = data.get("tokens")
        return cls.__new__(cls)._set(
            int(data["size"]),
            None if tokens is None else [str(t) for t in tokens],
            data.get("special_tokens"),
            data.get("special_ids"),
            str(data.get("origin", "")),
        )

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):  # type: ignore[override]
        if self.tokens is None:
            raise IndexError(f"this vocabulary of {self.size} ids has no token strings")
        return self.tokens[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tokens or ())

    def __contains__(self, token: object) -> bool:
        return token in self.index

    def __eq__(self, other: object) -> bool:
        """Equal ids, token strings and special tokens (wherever each came from)."""
        if not isinstance(other, Vocabulary):
            return NotImplemented
        mine, theirs = self.to_dict(), other.to_dict()
        del mine["origin"], theirs["origin"]
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]

    def id(self, role: str) -> int | None:
        """The id of the special token playing ``role`` (``pad``, ``unk``, ``bos``, ``eos`` …), or None."""
        return self.special_ids.get(role)

    @property
    def pad_id(self) -> int | None:
        return self.special_ids.get("pad")

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Token strings → ids; unknown tokens map to ``<unk>`` (a ValueError without one)."""
        tokens, unk = list(tokens), self.id("unk")
        if unk is None and (unknown := [token for token in tokens if token not in self.index]):
            raise ValueError(f"token {unknown[0]!r} is not in the vocabulary and it has no unk token")
        return [self.index.get(token, unk) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self[i] for i in ids]

    def require(self, owner: str, *roles: str) -> None:
        """Raise ValueError unless every role has an id, naming what ``owner`` needs them for."""
        if missing := [role for role in roles if role not in self.special_ids]:
            raise ValueError(
                f"{owner} needs the special-token ids {list(roles)}; this vocabulary lacks {missing}: give "
                "Vocabulary.sized(size, special_ids=...), Vocabulary.numbered(size) (pad 0, unk 1, bos 2, eos 3) "
                "or Vocabulary.from_tokens(tokens)"
            )

    def same_tokens(self, other: Vocabulary) -> bool:
        return self.size == other.size and self.tokens == other.tokens

    def slot_arguments(self) -> dict[str, Any]:
        """What an :class:`~lightning_embinit.init.EmbeddingSlot` of this vocabulary's table takes from it."""
        return {
            "tokens": None if self.tokens is None else list(self.tokens),
            "padding_idx": self.pad_id,
            "special_tokens": dict(self.special_tokens),
        }


VocabularyLike = Vocabulary | int
"""What an architecture takes as a vocabulary: a :class:`Vocabulary`, or its size alone."""
