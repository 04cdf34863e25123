"""Argument checks shared by every layer of the package; this module imports nothing from it."""

from __future__ import annotations

from typing import Any, Collection, Iterable, Sequence, TypeVar

Choice = TypeVar("Choice")

LOCAL_FILE_SUFFIXES = (".txt", ".vec", ".bin", ".gz", ".bz2", ".xz", ".zip", ".npy", ".w2v", ".kv", ".vocab", ".tsv")


def check_choice(kind: str, value: Choice, choices: Iterable[Any], *, hint: str = "") -> Choice:
    """``value`` if it is one of ``choices``, else a ValueError naming them: ``unknown <kind> 'x'; choose one of: a, b``.

    A ``kind`` naming a keyword option ends in ``=`` and reads ``unknown <kind>='x'``; a ``hint``
    is added in parentheses (:func:`choice_error`).
    """
    choices = tuple(choices)
    if value not in choices:
        raise choice_error(kind, value, choices, hint=hint)
    return value


def choice_error(kind: str, value: Any, choices: Iterable[Any], *, hint: str = "") -> ValueError:
    """The error :func:`check_choice` raises, for a caller whose own test tells that ``value`` is no choice."""
    separator = "" if kind.endswith("=") else " "
    message = f"unknown {kind}{separator}{value!r}; choose one of: {', '.join(map(str, choices))}"
    return ValueError(f"{message} ({hint})" if hint else message)


def check_known(kind: str, names: Iterable[str], known: Collection[str]) -> None:
    """Raise ValueError when any of ``names`` is not in ``known``: ``unknown <kind> ['x']; valid: a, b``.

    The unknown names are listed once each in their order; the valid ones in the order of a sequence
    ``known``, sorted when ``known`` has no order (a set).
    """
    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if unknown:
        valid = known if isinstance(known, Sequence) else sorted(known)
        raise ValueError(f"unknown {kind} {unknown}; valid: {', '.join(valid)}")


def looks_like_local_path(spec: str) -> bool:
    """A spec meant as a local path rather than a name or hub id (``org/name``): absolute, relative,
    home-relative, or ending like a vector or token file (:data:`LOCAL_FILE_SUFFIXES`)."""
    return spec.startswith(("/", "./", "../", "~")) or spec.lower().endswith(LOCAL_FILE_SUFFIXES)
