"""Reading the model arguments of the example YAMLs, whose settings sit in ``architecture:``/``optimizer:`` groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GROUPS = ("architecture", "optimizer")


def flat_init_args(init_args: Mapping[str, Any]) -> dict[str, Any]:
    """A model's ``init_args`` with its settings groups merged in, as a preset's flat arguments name them."""
    flat = {key: value for key, value in init_args.items() if key not in GROUPS}
    for group in GROUPS:
        overlap = flat.keys() & dict(init_args.get(group) or {}).keys()
        assert not overlap, f"{sorted(overlap)} given both flat and in {group}"
        flat.update(init_args.get(group) or {})
    return flat
