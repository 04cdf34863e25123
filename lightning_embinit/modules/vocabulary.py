"""A model's token vocabulary as its architecture sees it: table size, special-token ids and, when known,
the token strings by id (which pre-trained sources align by). Tokenizers live in :mod:`lightning_embinit.data`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SPECIAL_TOKENS: dict[str, str] = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}
"""Role → string of the special tokens; they take ids 0, 1, 2, 3 in this order."""


@dataclass(frozen=True)
class TokenVocabulary:
    """``size`` token ids; ``special_ids`` maps roles (``pad``, ``unk``, ``bos``, ``eos``, ``cls`` …) to ids;
    ``tokens`` names the ids (at most ``size`` strings; None when unknown) and ``special_tokens`` the roles'
    strings — what an :class:`~lightning_embinit.init.EmbeddingSlot` of the table takes."""

    size: int
    tokens: tuple[str, ...] | None = None
    special_ids: Mapping[str, int] = field(default_factory=dict)
    special_tokens: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tokens is not None:
            object.__setattr__(self, "tokens", tuple(str(token) for token in self.tokens))
            if len(self.tokens) > self.size:
                raise ValueError(f"{len(self.tokens)} token strings for a vocabulary of only {self.size} ids")
        if bad := {role: i for role, i in self.special_ids.items() if not 0 <= i < self.size}:
            raise ValueError(f"special-token ids {bad} are outside the vocabulary's {self.size} ids")

    @classmethod
    def numbered(cls, size: int) -> TokenVocabulary:
        """``size`` ids without strings whose first four are pad, unk, bos and eos (:data:`SPECIAL_TOKENS`' order)."""
        if size < len(SPECIAL_TOKENS) + 1:
            raise ValueError(
                f"a numbered vocabulary needs ≥ {len(SPECIAL_TOKENS) + 1} ids (pad, unk, bos, eos and a "
                f"token), got {size}"
            )
        return cls(size, special_ids={role: i for i, role in enumerate(SPECIAL_TOKENS)})

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], special_tokens: Mapping[str, str] | None = None) -> TokenVocabulary:
        """The vocabulary of a token list; ``special_tokens`` (role → string) must name tokens of the list;
        None: the roles of :data:`SPECIAL_TOKENS` whose strings are in the list."""
        tokens = [str(token) for token in tokens]
        index = {token: i for i, token in reversed(list(enumerate(tokens)))}
        if special_tokens is None:
            special_tokens = {role: token for role, token in SPECIAL_TOKENS.items() if token in index}
        elif missing := [token for token in special_tokens.values() if token not in index]:
            raise ValueError(f"special tokens {missing} are not in the vocabulary")
        ids = {role: index[token] for role, token in special_tokens.items()}
        return cls(len(tokens), tuple(tokens), ids, dict(special_tokens))

    @classmethod
    def of(cls, vocabulary: VocabularyLike, *, numbered: bool = False) -> TokenVocabulary:
        """A :class:`TokenVocabulary` as is; an int n: n ids with no strings, and no special tokens or, with
        ``numbered``, the package's first four (:meth:`numbered`)."""
        if isinstance(vocabulary, TokenVocabulary):
            return vocabulary
        if isinstance(vocabulary, bool) or not isinstance(vocabulary, int) or vocabulary < 1:
            raise ValueError(f"a vocabulary is a TokenVocabulary or a size ≥ 1, got {vocabulary!r}")
        return cls.numbered(vocabulary) if numbered else cls(vocabulary)

    def id_of(self, role: str) -> int | None:
        return self.special_ids.get(role)

    @property
    def pad_id(self) -> int | None:
        return self.special_ids.get("pad")

    def require(self, owner: str, *roles: str) -> None:
        """Raise ValueError unless every role has an id, naming what ``owner`` needs them for."""
        if missing := [role for role in roles if role not in self.special_ids]:
            raise ValueError(
                f"{owner} needs the special-token ids {list(roles)}; this vocabulary lacks {missing}: give a "
                "TokenVocabulary with special_ids, TokenVocabulary.numbered(size) (pad 0, unk 1, bos 2, eos 3) "
                "or TokenVocabulary.from_tokens(tokens)"
            )

    def same_tokens(self, other: TokenVocabulary) -> bool:
        return self.size == other.size and self.tokens == other.tokens

    def slot_options(self) -> dict[str, Any]:
        """What an :class:`~lightning_embinit.init.EmbeddingSlot` of this vocabulary's table takes from it."""
        return {
            "tokens": None if self.tokens is None else list(self.tokens),
            "padding_idx": self.pad_id,
            "special_tokens": dict(self.special_tokens),
        }


VocabularyLike = TokenVocabulary | int
"""What an architecture takes as a vocabulary: a :class:`TokenVocabulary`, or its size alone."""
