"""Argument checks shared by every layer of the package; this module imports nothing from it."""

from __future__ import annotations

from typing import Collection, Iterable


def check_choice(kind: str, value: str, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices``, else a ValueError naming them: ``unknown <kind> 'x'; choose one of: a, b``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; choose one of: {', '.join(map(str, choices))}")
    return value


def check_known(kind: str, names: Iterable[str], known: Collection[str]) -> None:
    """Raise ValueError when any of ``names`` is not in ``known``: ``unknown <kind> ['x']; valid: a, b``."""
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"unknown {kind} {unknown}; valid: {', '.join(sorted(known))}")
