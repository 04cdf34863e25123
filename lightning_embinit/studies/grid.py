"""A study's grid: more settings, the product of its axes (see :mod:`.spec`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from lightning_embinit.studies.keys import StudyError, split_key


def check_mapping(where: str, value: Any, what: str = "a mapping") -> dict[str, Any]:
    """``value`` as a dict (None: {}); a StudyError naming ``where`` when it is not a mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StudyError(f"{where}: expected {what}, got {value!r}")
    return dict(value)


def check_overrides(where: str, value: Any) -> dict[str, Any]:
    """``value`` as overrides (dotted config key → value; None: none); a StudyError naming ``where`` otherwise."""
    value = check_mapping(where, value, "a mapping of config keys to values")
    for key in value:
        if not isinstance(key, str):
            raise StudyError(f"{where}: config key {key!r} is not a string")
        split_key(key)
    return value


def _value_name(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def expand_grid(grid: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings of a grid: one per combination of its axes' values, named ``axis=value,axis=value``.

    An axis is a config key with a list of values (named by the key's last part, the whole key when two
    axes share it) or a name with a mapping of value names to overrides.
    """
    if not grid:
        return {}
    axes = []
    lasts = [str(split_key(axis)[-1]) if isinstance(values, list) else axis for axis, values in grid.items()]
    for (axis, values), last in zip(grid.items(), lasts):
        label = last if lasts.count(last) == 1 else axis
        if isinstance(values, Mapping):
            choices = [
                (str(name), check_overrides(f"grid axis {axis!r}, value {name!r}", group))
                for name, group in values.items()
            ]
        elif isinstance(values, list):
            choices = [(_value_name(value), {axis: value}) for value in values]
        else:
            raise StudyError(
                f"grid axis {axis!r}: expected a list of values or a mapping of named overrides, got {values!r}"
            )
        if not choices:
            raise StudyError(f"empty grid: axis {axis!r} has no values")
        axes.append([(f"{label}={name}", overrides) for name, overrides in choices])
    return {
        ",".join(name for name, _ in combo): {k: v for _, o in combo for k, v in o.items()}
        for combo in itertools.product(*axes)
    }
