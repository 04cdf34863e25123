"""A system's settings groups (``architecture``, ``optimizer``) from what its constructor was given.

Each group is a frozen dataclass (:mod:`lightning_embinit.architectures.config`,
:class:`~lightning_embinit.models.optimization.OptimizerConfig`): given as an instance, or as a mapping of its
fields (a YAML group, a checkpoint). Flat keyword settings (``TransformerSeq2Seq(d_model=64, lr=1e-3)``, a
0.1.0.dev0 checkpoint's hyperparameters, :func:`~lightning_embinit.models.presets.preset_arguments`) go to the
one group that has a field of that name; a name no group has is an error that lists the valid ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields, is_dataclass, replace
from typing import Any


def field_names(config_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(config_type))


def as_config(config_type: type, value: Any, group: str, default: Any = None) -> Any:
    """``value`` as a ``config_type``: an instance as is; a mapping of its fields applied to ``default`` (the
    owner's default for the group, as the CLI applies a YAML group) or to the type's defaults."""
    if isinstance(value, config_type):
        return value
    if isinstance(value, Mapping):
        if unknown := sorted(set(value) - set(field_names(config_type))):
            raise ValueError(
                f"{group}: {config_type.__name__} has no field(s) {unknown}; "
                f"fields: {', '.join(field_names(config_type))}"
            )
        return replace(default, **value) if isinstance(default, config_type) else config_type(**value)
    raise TypeError(f"{group} must be a {config_type.__name__} or a mapping of its fields, got {type(value).__name__}")


def resolve_groups(
    owner: str,
    groups: Mapping[str, tuple[type, Any, Any]],
    settings: Mapping[str, Any],
    *,
    others: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Group name → config: each group's ``(config type, given value, owner's default)`` made a config
    (:func:`as_config`), then the flat ``settings`` applied to the group that has each name. ``others``: the
    owner's own arguments, listed in the error."""
    configs = {
        group: as_config(config_type, value, group, default) for group, (config_type, value, default) in groups.items()
    }
    group_of = {name: group for group, (config_type, _, _) in groups.items() for name in field_names(config_type)}
    if unknown := [name for name in settings if name not in group_of]:
        valid = sorted({*others, *group_of})
        raise TypeError(f"{owner}() got unexpected keyword argument(s) {unknown}; valid: {', '.join(valid)}")
    changes: dict[str, dict[str, Any]] = {}
    for name, value in settings.items():
        changes.setdefault(group_of[name], {})[name] = value
    return {group: replace(config, **changes.get(group, {})) for group, config in configs.items()}


def grouped_settings(groups: Mapping[str, type], flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flat_settings`: each name a group's config type has goes into that group's mapping
    (``{"architecture": {"d_model": 64}, "optimizer": {"lr": 1e-3}, "beam_size": 4}``), next to what a group
    mapping in ``flat`` already holds (the flat name wins); other names stay."""
    group_of = {name: group for group, config_type in groups.items() for name in field_names(config_type)}
    grouped = {name: value for name, value in flat.items() if name not in group_of}
    for group in groups:
        if isinstance(grouped.get(group), Mapping):
            grouped[group] = dict(grouped[group])
    for name, value in flat.items():
        if name in group_of:
            grouped.setdefault(group_of[name], {})[name] = value
    return grouped


def flat_settings(*configs: Any) -> dict[str, Any]:
    """Every field of the configs in one flat mapping (what the systems keep as hyperparameters)."""
    assert all(is_dataclass(config) for config in configs)
    return {name: value for config in configs for name, value in asdict(config).items()}
