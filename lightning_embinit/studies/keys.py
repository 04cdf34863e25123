"""Dotted config keys, their overrides on a loaded LightningCLI config, ``${VAR:-default}`` and hashing.

A key walks the config as ``embinit fit``'s command line names it, plus list entries by index, by class name or
``[+]`` (appends); docs/studies.md#writing-a-study. An override replaces the value at its key; missing mappings on the
way are created (the LightningCLI parser then refuses a key it does not know). A study's grid (:func:`expand_grid`)
gives more settings: the product of its axes.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lightning_embinit.text_files import substitute_variables
from lightning_embinit.yaml_files import read_yaml

_SEGMENT = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")
APPEND = "+"
RAY_INSTALL = "pip install 'lightning_embinit[ray]'"
"""The install command every missing-Ray message names."""


class StudyError(ValueError):
    """A study, a setting or a results directory that cannot be run; raised before any trial starts."""


def split_key(key: str) -> list[str | int]:
    """``"a.b[0].c"`` → ``["a", "b", 0, "c"]``; a bracketed name stays a string selector (``"[Name]"``)."""
    parts: list[str | int] = []
    position = 0
    for match in _SEGMENT.finditer(key):
        between = key[position : match.start()]
        if between not in ("", "."):
            raise StudyError(f"malformed config key {key!r}")
        bracket, plain = match.groups()
        if bracket is not None:
            text = bracket.strip()
            parts.append(int(text) if text.lstrip("-").isdigit() else f"[{text}]")
        else:
            parts.append(int(plain) if plain.isdigit() else plain)
        position = match.end()
    if not parts or key[position:].strip("."):
        raise StudyError(f"malformed config key {key!r}")
    return parts


def class_path(entry: Any) -> str | None:
    """The ``class_path`` of a config entry (a mapping with one, or the bare string); None for anything else."""
    path = entry.get("class_path") if isinstance(entry, Mapping) else entry if isinstance(entry, str) else None
    return path if isinstance(path, str) else None


def _list_index(items: list[Any], part: str | int, key: str) -> int:
    if isinstance(part, int):
        if not -len(items) <= part < len(items):
            raise StudyError(f"key {key!r}: index {part} is outside the list of {len(items)} entries")
        return part
    name = part[1:-1]
    found = [
        i
        for i, entry in enumerate(items)
        if (path := class_path(entry)) is not None and (path == name or path.endswith("." + name))
    ]
    if len(found) != 1:
        classes = ", ".join(filter(None, map(class_path, items))) or "none"
        how = "no entry" if not found else f"{len(found)} entries"
        raise StudyError(
            f"key {key!r}: {how} with class {name!r} in the list (classes: {classes}); use an index such as [0]"
        )
    return found[0]


def _child(node: Any, part: str | int, key: str, create: bool) -> tuple[Any, str | int]:
    """(the container that holds ``part``, the index or key into it), turning a bare class path into a mapping."""
    if isinstance(node, list):
        return node, _list_index(node, part, key)
    if isinstance(node, dict):
        name = str(part)
        if name not in node and create:
            node[name] = {}
        if name not in node:
            raise StudyError(f"key {key!r}: no {name!r} in the config")
        return node, name
    raise StudyError(f"key {key!r}: {part!r} is inside {type(node).__name__} {node!r}, which has no keys")


def set_key(config: dict[str, Any], key: str, value: Any) -> None:
    """Put ``value`` at the dotted ``key`` of ``config`` (in place)."""
    parts = split_key(key)
    node: Any = config
    for part in parts[:-1]:
        container, index = _child(node, part, key, create=True)
        if isinstance(container[index], str) and class_path(container[index]):
            container[index] = {"class_path": container[index]}
        elif container[index] is None:
            container[index] = {}
        node = container[index]
    last = parts[-1]
    if last == f"[{APPEND}]":
        if not isinstance(node, list):
            raise StudyError(f"key {key!r}: [+] appends to a list, found {type(node).__name__}")
        node.append(copy.deepcopy(value))
        return
    if isinstance(node, list):
        node[_list_index(node, last, key)] = copy.deepcopy(value)
    elif isinstance(node, dict):
        node[str(last)] = copy.deepcopy(value)
    else:
        raise StudyError(f"key {key!r}: cannot set {last!r} inside {type(node).__name__} {node!r}")


def get_key(config: Mapping[str, Any], key: str) -> Any:
    """The value at the dotted ``key`` (StudyError when it is missing)."""
    node: Any = config
    for part in split_key(key):
        container, index = _child(node, part, key, create=False)
        node = container[index]
    return node


def apply_overrides(config: dict[str, Any], overrides: Iterable[tuple[str, Any]], *, where: str) -> dict[str, Any]:
    """``config`` with each (key, value) set in order; errors name ``where`` the override comes from."""
    for key, value in overrides:
        try:
            set_key(config, key, value)
        except StudyError as error:
            raise StudyError(f"{where}: {error}") from None
    return config


def substitute_environment(value: Any, *, where: str = "config") -> Any:
    """Every ``${NAME}`` / ``${NAME:-default}`` in the strings of ``value`` replaced from the environment."""
    if isinstance(value, str):
        try:
            return substitute_variables(value, where=where)
        except ValueError as error:
            raise StudyError(str(error)) from None
    if isinstance(value, Mapping):
        return {k: substitute_environment(v, where=where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [substitute_environment(v, where=where) for v in value]
    return value


def plain(value: Any) -> Any:
    """``value`` as JSON: mappings, lists, str, bool, None, finite numbers; NaN/±inf as ``"nan"``/``"inf"``/``"-inf"``,
    numpy/torch scalars as numbers, anything else as its ``str``."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:
        try:
            return plain(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def canonical(value: Any) -> str:
    """The one JSON text of ``value`` (sorted keys, no spaces) that hashes are taken of."""
    return json.dumps(plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any, length: int = 16) -> str:
    """The first ``length`` hex digits of the SHA-256 of :func:`canonical` ``(value)``."""
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()[:length]


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """The mapping in the YAML file ``path`` (empty file: {}); a StudyError naming ``what`` when it is missing, a
    directory, not text, not valid YAML (a key given twice included: :func:`~lightning_embinit.yaml_files.read_yaml`)
    or not a mapping."""
    try:
        data = read_yaml(path, what) or {}
    except ValueError as error:
        raise StudyError(str(error)) from None
    if not isinstance(data, Mapping):
        raise StudyError(f"{what} {path}: expected a mapping, got {type(data).__name__}")
    return dict(data)


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
