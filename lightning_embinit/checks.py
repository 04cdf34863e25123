"""Argument checks shared by every layer of the package; this module imports nothing from the package.

Each check returns the value it accepted and raises a ValueError that names the argument, the value and
what is valid (``d_model must be ≥ 1, got 0``). ``None`` is a value like any other: only a check
given ``optional=True`` accepts it (a number is never "unset" because it is 0).
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
from collections.abc import Collection, Iterable, Sequence
from typing import Any, TypeVar

#: The type of a value checked against its choices.
Choice = TypeVar("Choice")

#: File endings that mark an argument as a local path (vector, token and data files).
LOCAL_FILE_SUFFIXES = (".txt", ".vec", ".bin", ".gz", ".bz2", ".xz", ".zip", ".npy", ".w2v", ".kv", ".vocab", ".tsv")


def check_choice(kind: str, value: Choice, choices: Iterable[Any], *, hint: str = "") -> Choice:
    """``value`` if it is one of ``choices``, else a ValueError naming them:
    ``unknown <kind> 'x'; choose one of: a, b``.

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


# ---------------------------------------------------------------------------------------------- numbers
def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int | None = None, optional: bool = False) -> Any:
    """``value`` if it is an integer ≥ ``minimum`` (when given), else a ValueError: ``max_len must be ≥ 1, got 0``,
    ``max_len must be an integer ≥ 1, got 2.5``. ``optional``: None is accepted (and returned)."""
    if value is None and optional:
        return None
    integer = _is_integer(value)
    if not integer or (minimum is not None and value < minimum):
        wanted = "" if minimum is None else f"≥ {minimum}"
        wanted = (wanted if integer else f"an integer {wanted}").strip()
        raise ValueError(f"{name} must be {wanted}{' or None' if optional else ''}, got {value!r}")
    return int(value)


def check_positive_int(name: str, value: Any, *, optional: bool = False) -> Any:
    """An integer ≥ 1 (a size, a count of heads or layers); :func:`check_int`."""
    return check_int(name, value, minimum=1, optional=optional)


def check_non_negative_int(name: str, value: Any, *, optional: bool = False) -> Any:
    """An integer ≥ 0; :func:`check_int`."""
    return check_int(name, value, minimum=0, optional=optional)


def check_finite(name: str, value: Any, *, optional: bool = False) -> Any:
    """``value`` as a float if it is a finite real number, else a ValueError: ``length_penalty must be a finite
    number, got nan``."""
    if value is None and optional:
        return None
    if not _is_real(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number{' or None' if optional else ''}, got {value!r}")
    return float(value)


def check_range(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> Any:
    """``value`` as a float if it is a finite number in the interval from ``low`` to ``high`` (closed ends unless
    ``low_open``/``high_open``; an absent bound is unbounded), else a ValueError naming the interval:
    ``dropout must be in [0, 1), got 1.0``."""
    if value is None and optional:
        return None
    inside = _is_real(value) and math.isfinite(value)
    if inside and low is not None:
        inside = value > low if low_open else value >= low
    if inside and high is not None:
        inside = value < high if high_open else value <= high
    if not inside:
        left = "−∞" if low is None else f"{low:g}"
        right = "∞" if high is None else f"{high:g}"
        interval = (
            f"{'(' if low_open or low is None else '['}{left}, {right}{')' if high_open or high is None else ']'}"
        )
        raise ValueError(f"{name} must be in {interval}{' or None' if optional else ''}, got {value!r}")
    return float(value)


def check_probability(name: str, value: Any, *, optional: bool = False) -> Any:
    """A probability in [0, 1) — a dropout or a label smoothing (1 would leave nothing to learn from)."""
    return check_range(name, value, 0, 1, high_open=True, optional=optional)


# ---------------------------------------------------------------------------------------------- text
def check_texts(texts: Any, what: str = "texts") -> list[str]:
    """``texts`` as a list of strings. A bare string is a TypeError (it is not a list of sentences: pass
    ``[text]``), and so is an item that is not a string (the error names its index and type)."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(
            f"{what} must be a list of strings, got a single {type(texts).__name__} "
            f"({texts[:40]!r}); pass [text] for one sentence"
        )
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"{what} must be a list of strings, got {type(texts).__name__}") from None
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{index}] must be a string, got {type(text).__name__} ({text!r})")
    return texts


def config_fields(config: Any) -> list[str]:
    """The field names of a ``transformers`` config that a config mapping may set: its saved fields and their
    aliases (``attribute_map``: ``hidden_size`` for GPT-2's ``n_embd``), sorted."""
    names = {name for name in config.to_dict() if not name.startswith("_")} - {"transformers_version", "model_type"}
    return sorted(names | set(getattr(config, "attribute_map", {})))


def check_config_fields(config: Any, names: Iterable[str], what: str) -> None:
    """Raise ValueError when a name of ``names`` is no field of ``config`` (``transformers`` would keep it as a
    stray attribute the model never reads): the error names ``what``, the closest fields and every field. A field
    is one of :func:`config_fields` or another attribute of the config that is not a method."""
    known = config_fields(config)
    unknown = [
        name
        for name in names
        if name not in known and (not hasattr(config, name) or callable(getattr(type(config), name, None)))
    ]
    if unknown:
        close = [match for name in unknown for match in difflib.get_close_matches(name, known, n=2)]
        hint = f" (did you mean {', '.join(dict.fromkeys(close))}?)" if close else ""
        raise ValueError(
            f"{what}: the {config.model_type} config has no field {', '.join(map(repr, unknown))}{hint}; its fields: "
            f"{', '.join(known)}"
        )


FLAG_OFF = ("0", "false", "no", "off")
"""The values that turn an on/off environment variable off (any case)."""


def environment_flag(variable: str, *, default: bool = False) -> bool:
    """An on/off environment variable, read now: ``default`` when unset or empty, off for :data:`FLAG_OFF`, else
    on (``EMBINIT_DEBUG``, ``EMBINIT_KEEP_FREED_MEMORY``)."""
    value = os.environ.get(variable, "").strip().lower()
    return default if not value else value not in FLAG_OFF
