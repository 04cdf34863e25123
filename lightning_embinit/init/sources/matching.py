"""Step 1 of alignment: each slot token → a row of a pre-trained vector set, by named rules ([K], [KB];
docs/sources.md, "Matching rules"): ``special_map``, an exact match, then :data:`FALLBACKS` in the user's order. A rule
answers a token with a row, :data:`LATER` (the vector is made after matching) or None (the next rule is tried).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from lightning_embinit.init.sources.base import VectorSet

LATER = -1
"""A rule's answer for a token it takes whose vector is made after matching (composed, or the mean of pieces)."""

# Source-side spellings tried for a slot's special-token roles, after the source's own.
ROLE_CANDIDATES: dict[str, tuple[str, ...]] = {
    "pad": ("[PAD]", "<pad>", "<PAD>"),
    "unk": ("[UNK]", "<unk>", "<UNK>"),
    "bos": ("[CLS]", "<s>", "<bos>", "<BOS>"),
    "eos": ("[SEP]", "</s>", "<eos>", "<EOS>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>", "<MASK>"),
}
_ROLE_SYNONYMS = {"bos": ("bos", "cls"), "eos": ("eos", "sep"), "cls": ("cls", "bos"), "sep": ("sep", "eos")}


class MatchingOptions(Protocol):
    """What matching reads of :class:`~lightning_embinit.init.sources.alignment.AlignmentOptions`."""

    special_map: Mapping[str, str]

    @property
    def rules(self) -> tuple[str, ...]: ...


@dataclass
class Match:
    """Per named slot row: the source row (−1 when none) and the rule that matched; tokens to compose, and the
    ``pieces`` rule's source rows to average."""

    rows: list[int]
    rules: list[str | None]
    composed: dict[int, str] = field(default_factory=dict)
    pieces: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class _Context:
    """What the rules consult: the source's rows and special tokens, the slot's roles, what the vector set can do."""

    lookup: Mapping[str, int]
    source_special: Mapping[str, str]
    role_of_token: Mapping[str, str]
    explicit: Mapping[str, int]
    use_lower: bool
    compose: Callable[[Sequence[str]], Any] | None
    split: Callable[[Sequence[str]], Sequence[Sequence[int]]] | None

    @cached_property
    def lower_index(self) -> dict[str, int]:
        """Lower-cased token → row, the lowest row winning, whatever the order of ``lookup`` (a tokenizer's
        ``get_vocab()`` order varies from process to process)."""
        index: dict[str, int] = {}
        for key, value in sorted(self.lookup.items(), key=lambda item: item[1]):
            index.setdefault(key.lower(), value)
        return index

    def first_affix_variant(self, variant: str) -> int | None:
        """The row of ``variant``, else (with the ``lower`` rule in force) of its lower-cased form."""
        return self.lookup.get(variant, self.lookup.get(variant.lower()) if self.use_lower else None)


def _special(token: str, context: _Context) -> int | None:
    """The source's own token for the slot token's role (or a synonym's), else the first usual spelling it has."""
    role = context.role_of_token.get(token)
    names = _ROLE_SYNONYMS.get(role, (role,)) if role is not None else ()
    own = [context.source_special[name] for name in names if context.source_special.get(name)]
    candidates = own + [c for name in names for c in ROLE_CANDIDATES.get(name, ())]
    return next((context.lookup[c] for c in candidates if c in context.lookup), None)


def _lower(token: str, context: _Context) -> int | None:
    row = context.lookup.get(token.lower())
    return row if row is not None else context.lower_index.get(token.lower())


def _wordpiece(token: str, context: _Context) -> int | None:
    return context.first_affix_variant(token[2:] if token.startswith("##") and len(token) > 2 else "##" + token)


def _sentencepiece(token: str, context: _Context) -> int | None:
    return context.first_affix_variant(token[1:] if token.startswith("▁") and len(token) > 1 else "▁" + token)


def _pieces(token: str, context: _Context) -> int | None:
    """Split later by the source's tokenizer; never <bos> & co."""
    return LATER if context.split is not None and token not in context.role_of_token else None


def _ngrams(token: str, context: _Context) -> int | None:
    return LATER if context.compose is not None else None


Rule = Callable[[str, _Context], int | None]
"""A matching rule: (slot token, context) → a source row, :data:`LATER`, or None when it does not apply."""
FIRST_RULES: dict[str, Rule] = {
    "special_map": lambda token, context: context.explicit.get(token),
    "exact": lambda token, context: context.lookup.get(token),
}
"""The rules tried before the fallbacks, always."""
FALLBACKS: dict[str, Rule] = {
    "special": _special,
    "lower": _lower,
    "wordpiece": _wordpiece,
    "sentencepiece": _sentencepiece,
    "pieces": _pieces,
    "ngrams": _ngrams,
}
"""The fallback rules by name (module doc), in their default order."""
FALLBACK_RULES = tuple(FALLBACKS)
_RULES = {**FIRST_RULES, **FALLBACKS}


def match_tokens(
    tokens: Sequence[str], vectors: VectorSet, *, slot_special: Mapping[str, str], options: MatchingOptions
) -> Match:
    """Match each slot token to a row of ``vectors``: ``special_map``, exact, then ``options.rules`` in order."""
    lookup, fallbacks = vectors.lookup(), options.rules
    can_compose = "ngrams" in fallbacks and getattr(vectors, "can_compose", True)
    context = _Context(
        lookup=lookup,
        source_special=dict(vectors.special_tokens),
        role_of_token={token: role for role, token in slot_special.items()},
        explicit=_explicit_special_map(options.special_map, slot_special, lookup),
        use_lower="lower" in fallbacks,
        compose=getattr(vectors, "compose", None) if can_compose else None,
        split=getattr(vectors, "split_into_pieces", None) if "pieces" in fallbacks else None,
    )
    order = (*FIRST_RULES, *options.rules)
    rows: list[int] = []
    rules: list[str | None] = []
    for token in tokens:
        for rule in order:
            row = _RULES[rule](token, context)
            if row is not None:
                break
        else:
            row, rule = -1, None
        rows.append(row)
        rules.append(rule)
    composed = {position: tokens[position] for position, rule in enumerate(rules) if rule == "ngrams"}
    pieces = _split_into_pieces(tokens, rules, context.split)
    return Match(rows, rules, composed, pieces)


def _split_into_pieces(
    tokens: Sequence[str], rules: list[str | None], split: Callable[[Sequence[str]], Sequence[Sequence[int]]] | None
) -> dict[int, list[int]]:
    """Position → its pieces' rows for the ``pieces`` rule's tokens; an unsplittable one loses its rule."""
    pending = [position for position, rule in enumerate(rules) if rule == "pieces"]
    pieces: dict[int, list[int]] = {}
    for position, piece_rows in zip(pending, split([tokens[p] for p in pending]) if pending and split else ()):
        if piece_rows:
            pieces[position] = list(piece_rows)
        else:
            rules[position] = None
    return pieces


def _explicit_special_map(
    special_map: Mapping[str, str], slot_special: Mapping[str, str], lookup: Mapping[str, int]
) -> dict[str, int]:
    """``special_map`` keys are slot roles (``"pad"``) or slot token strings; values are source tokens."""
    resolved: dict[str, int] = {}
    for key, source_token in special_map.items():
        slot_token = slot_special.get(key, key)
        if source_token not in lookup:
            raise ValueError(f"special_map[{key!r}] = {source_token!r}, but the source has no token {source_token!r}")
        resolved[slot_token] = lookup[source_token]
    return resolved
