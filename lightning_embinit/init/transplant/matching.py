"""Step 1 of a transplant: each new token → the old token that stands for the same text, by named kinds tried in
order (docs/transplant.md, "Matching"):

- ``special``: a new special token takes the old special token of its role (``bos``, ``eos``, ``pad``, ``unk``, …;
  ``bos`` and ``cls``, ``eos`` and ``sep`` stand in for each other), whatever either is spelled;
- ``exact``: the same string;
- ``normalized``: the same canonical form across spellings (``Ġmann`` = ``▁mann`` = WordPiece ``mann``; byte-level
  ``Ã`` = ``<0xC3>``; :mod:`.conventions`);
- ``case`` (asked for, not tried by default): the same canonical form once lower-cased (``ĠMann`` → ``▁mann``).

A matched token keeps its old row bit for bit; the rest are built by a method (:mod:`.methods`). Each kind's count
is in the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from lightning_embinit.checks import check_known
from lightning_embinit.init.sources.matching import ROLE_CANDIDATES
from lightning_embinit.init.transplant.conventions import canonical_form, case_key, detect_convention

MATCH_KINDS = ("special", "exact", "normalized", "case")
"""The kinds of match, in the order they are tried."""
DEFAULT_MATCH = ("special", "exact", "normalized")
"""The kinds tried unless told: ``case`` is asked for (on the benchmark it cost ``neighbors`` 0.06 bits per byte: a
row of another word's casing is a worse start, and a worse anchor, than a built one)."""
_ROLE_ORDER = ("eos", "bos", "pad", "unk", "sep", "cls", "mask")
"""A new token of several roles (GPT-2's ``<|endoftext|>`` is bos and eos) matches by the first of these."""
_SYNONYMS = {"bos": ("bos", "cls"), "cls": ("cls", "bos"), "eos": ("eos", "sep"), "sep": ("sep", "eos")}


@dataclass
class VocabularyMatch:
    """Per new id: the old id it copies (−1: none) and the kind of match (None: none); the spellings detected."""

    source_ids: torch.Tensor
    kinds: list[str | None]
    old_convention: str
    new_convention: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def unmatched(self) -> list[int]:
        """The new ids no kind matched (a method builds their rows)."""
        return [i for i, kind in enumerate(self.kinds) if kind is None]


def _role_match(role: str, old_special: Mapping[str, str], old_index: Mapping[str, int], new_token: str) -> int | None:
    """The old id of the old special token of ``role`` (or a synonym), else of a usual spelling of the role."""
    names = _SYNONYMS.get(role, (role,))
    own = [old_special[name] for name in names if old_special.get(name) in old_index]
    candidates = own + [new_token] + [c for name in names for c in ROLE_CANDIDATES.get(name, ())]
    return next((old_index[c] for c in candidates if c in old_index), None)


def _indices(
    old_tokens: Sequence[str], convention: str, skip: set[str]
) -> tuple[dict[tuple[bool, bytes], int], dict[tuple[bool, str], int]]:
    """Canonical form → old id and case key → old id (the lowest id wins), special tokens left out."""
    forms: dict[tuple[bool, bytes], int] = {}
    cases: dict[tuple[bool, str], int] = {}
    for old_id, token in enumerate(old_tokens):
        if token in skip or (form := canonical_form(token, convention)) is None:
            continue
        forms.setdefault(form, old_id)
        cases.setdefault(case_key(form), old_id)
    return forms, cases


def match_vocabularies(
    old_tokens: Sequence[str],
    new_tokens: Sequence[str],
    *,
    old_special: Mapping[str, str] | None = None,
    new_special: Mapping[str, str] | None = None,
    kinds: Sequence[str] = DEFAULT_MATCH,
    old_convention: str | None = None,
    new_convention: str | None = None,
) -> VocabularyMatch:
    """Match every new token to an old one by ``kinds`` (module doc); the spellings are detected unless given."""
    check_known("match kind(s)", kinds, MATCH_KINDS)
    old_special, new_special = dict(old_special or {}), dict(new_special or {})
    old_convention = old_convention or detect_convention(old_tokens, list(old_special.values()))
    new_convention = new_convention or detect_convention(new_tokens, list(new_special.values()))
    old_index = {token: old_id for old_id, token in reversed(list(enumerate(old_tokens)))}  # the lowest id wins
    role_of: dict[str, str] = {}
    for role in sorted(new_special, key=lambda r: _ROLE_ORDER.index(r) if r in _ROLE_ORDER else len(_ROLE_ORDER)):
        if isinstance(new_special[role], str):
            role_of.setdefault(new_special[role], role)
    forms, cases = _indices(old_tokens, old_convention, set(old_special.values()))
    rules: dict[str, Callable[[str], int | None]] = {
        "special": lambda t: _role_match(role_of[t], old_special, old_index, t) if t in role_of else None,
        "exact": lambda t: None if t in role_of else old_index.get(t),
        "normalized": lambda t: (
            None if t in role_of or (f := canonical_form(t, new_convention)) is None else forms.get(f)
        ),
        "case": lambda t: (
            None if t in role_of or (f := canonical_form(t, new_convention)) is None else cases.get(case_key(f))
        ),
    }
    order = [kind for kind in MATCH_KINDS if kind in kinds]
    sources, found = [], []
    for token in new_tokens:
        for kind in order:
            if (old_id := rules[kind](token)) is not None:
                break
        else:
            old_id, kind = -1, None
        sources.append(old_id)
        found.append(kind)
    counts = {kind: found.count(kind) for kind in order}
    return VocabularyMatch(torch.tensor(sources, dtype=torch.long), found, old_convention, new_convention, counts)
