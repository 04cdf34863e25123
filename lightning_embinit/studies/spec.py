"""A study: a base LightningCLI config, named settings (overrides of config keys), seeds, a protocol, variants.

The YAML under ``examples/studies/`` and :class:`Study` are the same thing; docs/studies.md#writing-a-study gives the
keys, the order in which overrides apply and what the config hash covers. Besides those: ``blocks`` maps a reference
to the settings measured against it instead (other widths), ``claims`` lists :mod:`.claims`' claims, a variant may
set its own ``seeds``, and keys starting with ``x-`` are ignored (a place for YAML anchors).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from lightning_embinit.checks import check_choice, check_known
from lightning_embinit.studies.claims import Claim, read_claims
from lightning_embinit.studies.keys import (
    StudyError,
    apply_overrides,
    check_mapping,
    check_overrides,
    digest,
    expand_grid,
    read_yaml_mapping,
    split_key,
    substitute_environment,
)
from lightning_embinit.studies.metric_names import check_claim_metrics
from lightning_embinit.studies.statistics import block_references

VARIANT_KEYS = ("overrides", "seeds", "description", "settings")
TEST_CHOICES = ("auto", True, False)
CHECKPOINT_POLICIES = ("none", "best")
PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")  # Trainer(precision=...)
SEED_LIMIT = 2**32
"""Seeds are below this: ``seed_everything`` (numpy's generator) takes 0 to 2**32 − 1."""


def package_version() -> str:
    try:
        return metadata.version("lightning_embinit")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class Protocol:
    """How a trial is scored ([K]'s default): keep the checkpoint with the best ``monitor`` (``mode``), then test it
    (``test``: ``"auto"`` when the datamodule has a test split, ``True``, or ``False``: validate it instead).
    ``checkpoints``: what stays on disk once it is scored, ``"none"`` or ``"best"``; ``precision``: every trial's
    ``trainer.precision`` (``PRECISIONS``, e.g. ``bf16-mixed`` on CPUs with bf16 units; docs/studies.md)."""

    monitor: str = "val_loss"
    mode: str = "min"
    test: bool | str = "auto"
    checkpoints: str = "none"
    precision: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.monitor, str) or not self.monitor:
            raise StudyError(f"protocol monitor: expected a logged metric's name (e.g. val_loss), got {self.monitor!r}")
        check_choice("protocol mode", self.mode, ("min", "max"))
        check_choice("protocol test", self.test, TEST_CHOICES)
        check_choice("protocol checkpoints", self.checkpoints, CHECKPOINT_POLICIES)
        check_choice("protocol precision", self.precision, (None, *PRECISIONS))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Protocol:
        data = check_mapping("protocol", data)
        check_known("protocol key", data, tuple(cls.__dataclass_fields__))
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The protocol's keys; ``precision`` only when set (the config hash of a study without it is unchanged)."""
        return {key: value for key, value in asdict(self).items() if key != "precision" or value is not None}

    def check_precision(self, config: Mapping[str, Any], where: str) -> None:
        """A trial config's own ``trainer.precision`` must agree with the protocol's (StudyError otherwise)."""
        own = (config.get("trainer") or {}).get("precision")
        if self.precision is not None and own is not None and str(own) != self.precision:
            raise StudyError(
                f"{where}: trainer.precision {own!r} disagrees with protocol precision {self.precision!r}: set one"
            )


@dataclass(frozen=True)
class Variant:
    """A size of the study (``smoke``, ``medium``, ``full``): overrides for every setting, its own seeds, and
    optionally only some of the settings (``settings``: their names; empty: all)."""

    overrides: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    description: str = ""
    settings: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "variant") -> Variant:
        """``{seeds, description, settings: [...], overrides: {...}}``; dotted keys next to them are overrides too."""
        data = check_mapping(where, data)
        overrides = {
            **check_overrides(f"{where}, overrides", data.pop("overrides", None)),
            **check_overrides(where, {k: v for k, v in data.items() if k not in VARIANT_KEYS}),
        }
        chosen = data.get("settings") or ()
        if isinstance(chosen, str) or not all(isinstance(name, str) for name in chosen):
            raise StudyError(f"{where}, settings: expected a list of setting names, got {chosen!r}")
        return cls(
            overrides=overrides,
            seeds=_seeds(data.get("seeds"), f"{where}, seeds"),
            description=str(data.get("description", "")),
            settings=tuple(chosen),
        )


@dataclass(frozen=True, kw_only=True)
class Trial:
    """One setting × one seed of a study, with its merged config (environment substituted) and hash; its fields
    open its record, in this order."""

    study: str = ""
    study_hash: str = ""
    variant: str | None = None
    setting: str
    seed: int
    trial_id: str
    config_hash: str
    overrides: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any]
    protocol: Protocol = field(default_factory=Protocol)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        return cls(**{**data, "protocol": Protocol.from_dict(data.get("protocol"))})


def _seeds(values: Any, where: str) -> tuple[int, ...]:
    values = [values] if isinstance(values, int) and not isinstance(values, bool) else values or ()
    if not isinstance(values, (list, tuple)):
        raise StudyError(f"{where}: expected a list of integers such as [0, 1, 2], got {values!r}")
    bad = [v for v in values if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < SEED_LIMIT]
    if bad:
        raise StudyError(
            f"{where}: expected integers from 0 to {SEED_LIMIT - 1} (the range seed_everything takes), got {bad}"
        )
    if len(set(values)) != len(values):
        raise StudyError(f"{where}: {values} repeat a seed")
    return tuple(values)


def trial_id(setting: str, seed: int) -> str:
    """A file-name-safe id: the setting's name (other characters as ``_``) and the seed."""
    return f"{re.sub(r'[^A-Za-z0-9._=,+-]+', '_', setting)}-seed{seed}"


@dataclass(frozen=True, kw_only=True)
class Study:
    """A study (see the module doc); :meth:`from_yaml` reads one, :meth:`trials` lists its trials for a variant.
    Its fields but ``path`` (the file it was read from) are the keys of its YAML, in this order."""

    name: str
    description: str = ""
    base: str | dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    grid: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    seed_keys: tuple[str, ...] = ()
    reference: str | None = None
    blocks: dict[str, list[str]] = field(default_factory=dict)
    protocol: Protocol = field(default_factory=Protocol)
    variants: dict[str, Variant] = field(default_factory=dict)
    claims: tuple[Claim, ...] = ()
    path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise StudyError(f"a study's name must be a non-empty string, got {self.name!r}")
        where = f"study {self.name!r}"
        if not isinstance(self.description, str):
            raise StudyError(f"{where}: description must be a string, got {self.description!r}")
        settings = {
            str(name): check_overrides(f"{where}, setting {name!r}", value)
            for name, value in check_mapping(f"{where}, settings", self.settings).items()
        }
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "grid", check_mapping(f"{where}, grid", self.grid))
        object.__setattr__(self, "seeds", _seeds(self.seeds, f"{where}, seeds"))
        object.__setattr__(self, "overrides", check_overrides(f"{where}, overrides", self.overrides))
        if isinstance(self.seed_keys, str) or not all(isinstance(key, str) for key in self.seed_keys or ()):
            raise StudyError(f"{where}, seed_keys: expected a list of config keys, got {self.seed_keys!r}")
        object.__setattr__(self, "seed_keys", tuple(self.seed_keys or ()))
        for key in self.seed_keys:
            split_key(key)
        variants = {
            str(k): v if isinstance(v, Variant) else Variant.from_dict(v, f"{where}, variant {k!r}")
            for k, v in check_mapping(f"{where}, variants", self.variants).items()
        }
        object.__setattr__(self, "variants", variants)
        if not isinstance(self.protocol, Protocol):
            object.__setattr__(self, "protocol", Protocol.from_dict(self.protocol))
        names = self.setting_names()
        if not names:
            raise StudyError(f"{where} has no settings: give settings: (name → overrides) or grid:")
        if self.reference is not None:
            check_choice("reference setting", self.reference, names)
        object.__setattr__(self, "blocks", _blocks(self.blocks, names, self.reference or names[0], where))
        for variant_name, variant in self.variants.items():
            _check_subset(variant, variant_name, names, self.references(), where)
        object.__setattr__(self, "claims", read_claims(self.claims, names, self.protocol, where))
        if self.claims and (configs := self._written_configs()) is not None:
            check_claim_metrics(self.claims, configs, where)

    # ------------------------------------------------------------------ reading and writing
    @classmethod
    def from_yaml(cls, path: str | Path) -> Study:
        """The study in a YAML file; a relative ``base`` is read from the file's directory."""
        path = Path(path)
        data = {"name": path.stem, **read_yaml_mapping(path, "study file")}
        try:
            return cls.from_dict(data, root=path.parent, path=str(path))
        except StudyError as error:
            raise StudyError(f"study file {path}: {error}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, root: str | Path | None = None, path: str | None = None) -> Study:
        """A study from its mapping; a relative ``base`` path is taken from ``root`` (default: the current
        directory). Any value that cannot make a study raises a StudyError naming it."""
        try:
            data = {
                key: value for key, value in check_mapping("a study", data).items() if not str(key).startswith("x-")
            }
            check_known("study key", data, STUDY_KEYS)
            if "name" not in data or "base" not in data:
                raise StudyError("a study needs a name and a base config")
            base = data["base"]
            if isinstance(base, (str, Path)):
                base = str((Path(root or ".") / Path(base).expanduser()).resolve())
            elif not isinstance(base, Mapping):
                raise StudyError(f"base: expected a config path or mapping, got {base!r}")
            return cls(**{**data, "base": copy.deepcopy(base)}, path=path)
        except StudyError:
            raise
        except (ValueError, TypeError) as error:
            raise StudyError(str(error)) from None

    def to_dict(self) -> dict[str, Any]:
        """The study as its YAML mapping (``base`` as an absolute path or the inline config)."""
        data = asdict(self)
        del data["path"]
        return {**data, "protocol": self.protocol.to_dict()}

    @property
    def study_hash(self) -> str:
        return digest(self.to_dict())

    # ------------------------------------------------------------------ settings and trials
    def all_settings(self) -> dict[str, dict[str, Any]]:
        """Setting name → its overrides: ``settings`` in order, then the grid's."""
        grid = expand_grid(self.grid)
        clash = sorted(set(grid) & set(self.settings))
        if clash:
            raise StudyError(f"study {self.name!r}: settings {clash} are named both in settings: and by the grid")
        return {**self.settings, **grid}

    def setting_names(self) -> list[str]:
        return list(self.all_settings())

    @property
    def reference_setting(self) -> str:
        """The setting differences are measured against: ``reference``, else the first."""
        return self.reference or self.setting_names()[0]

    def references(self) -> dict[str, str]:
        """Each setting but the references → the setting it is measured against: its block's, else the study's."""
        return block_references(self.blocks, self.setting_names(), self.reference_setting)

    def variant(self, name: str | None) -> Variant:
        """The variant called ``name`` (None: no variant, the study as written)."""
        if name is None:
            return Variant()
        try:
            return self.variants[check_choice("variant", name, self.variants)]
        except ValueError as error:
            raise StudyError(f"study {self.name!r}: {error}") from None

    def override_layers(self, setting: str, variant: str | None) -> list[tuple[str, list[tuple[str, Any]]]]:
        """(where, [(key, value), ...]) in the order they are applied to the base for ``setting``."""
        layers = [("study overrides", list(self.overrides.items()))]
        if variant is not None:
            layers.append((f"variant {variant!r}", list(self.variant(variant).overrides.items())))
        layers.append((f"setting {setting!r}", list(self.all_settings()[setting].items())))
        return layers

    def base_config(self) -> dict[str, Any]:
        """The base config as a mapping."""
        if isinstance(self.base, Mapping):
            return copy.deepcopy(dict(self.base))
        return read_yaml_mapping(self.base, f"study {self.name!r}: base config")

    def _written_configs(self) -> dict[str, dict[str, Any]] | None:
        """Each setting's config as the study is written (no variant, no seed), for the checks made when it is read;
        None when the base cannot be read or an override applied (:meth:`trials` names the problem)."""
        try:
            base, configs = self.base_config(), {}
            for setting in self.setting_names():
                config = copy.deepcopy(base)
                for where, layer in self.override_layers(setting, None):
                    apply_overrides(config, layer, where=where)
                configs[setting] = config  # unsubstituted: a variable may be set only where the trials run
        except (StudyError, ValueError, TypeError, OSError):
            return None
        return configs

    def trials(self, variant: str | None = None) -> list[Trial]:
        """Every setting × seed of ``variant`` (None: the study as written), settings in order, seeds inside."""
        seeds = self.variant(variant).seeds or self.seeds
        if not seeds:
            where = f"variant {variant!r} nor the study" if variant else "the study"
            raise StudyError(f"study {self.name!r} has no seeds: neither {where} gives seeds: [0, 1, 2]")
        base, trials = self.base_config(), []
        hashed = {"protocol": self.protocol.to_dict(), "version": package_version()}
        shared = {"study": self.name, "study_hash": self.study_hash, "variant": variant, "protocol": self.protocol}
        chosen = self.variant(variant).settings
        for setting, overrides in self.all_settings().items():
            if chosen and setting not in chosen:
                continue
            template = copy.deepcopy(base)
            for where, layer in self.override_layers(setting, variant):
                apply_overrides(template, layer, where=f"study {self.name!r}, {where}")
            for seed in seeds:
                config = copy.deepcopy(template)
                for key in ("seed_everything", *self.seed_keys):
                    apply_overrides(config, [(key, seed)], where=f"study {self.name!r}, seed_keys")
                resolved = substitute_environment(config, where=f"study {self.name!r}, setting {setting!r}")
                self.protocol.check_precision(resolved, f"study {self.name!r}, setting {setting!r}")
                trial = Trial(
                    **shared,
                    setting=setting,
                    seed=seed,
                    trial_id=trial_id(setting, seed),
                    config=resolved,
                    config_hash=digest({"config": resolved, "seed": seed, **hashed}),
                    overrides=copy.deepcopy(overrides),
                )
                trials.append(trial)
        owners: dict[str, str] = {}
        for trial in trials:
            if owners.setdefault(trial.trial_id, trial.setting) != trial.setting:
                raise StudyError(
                    f"settings {owners[trial.trial_id]!r} and {trial.setting!r} share the file name "
                    f"{trial.trial_id!r}: rename one"
                )
        configs = {trial.setting: trial.config for trial in trials}
        check_claim_metrics(self.claims, configs, f"study {self.name!r}")
        return trials


def _check_subset(variant: Variant, name: str, names: list[str], references: Mapping[str, str], where: str) -> None:
    """A variant's ``settings`` are the study's, each with the setting it is measured against."""
    for setting in variant.settings:
        check_choice(f"{where}, variant {name!r}: setting", setting, names)
    lacking = sorted(
        {references[s] for s in variant.settings if s in references and references[s] not in variant.settings}
    )
    if lacking:
        raise StudyError(
            f"{where}, variant {name!r}: its settings are measured against {', '.join(lacking)}, which it does not "
            "run: add them to its settings"
        )


def _blocks(blocks: Any, names: list[str], reference: str, where: str) -> dict[str, list[str]]:
    """``blocks`` checked: a reference setting → the settings measured against it, each setting in one block."""
    blocks = check_mapping(f"{where}, blocks", blocks)
    checked, placed = {}, {}
    for block_reference, members in blocks.items():
        check_choice(f"{where}, blocks: reference setting", block_reference, names)
        if isinstance(members, str) or not isinstance(members, (list, tuple)) or len(set(members)) != len(members):
            raise StudyError(f"{where}, blocks: {block_reference!r} needs a list of distinct settings, got {members!r}")
        for member in members:
            check_choice(f"{where}, block {block_reference!r}: setting", member, names)
            if member == reference or member in blocks:
                raise StudyError(f"{where}, block {block_reference!r}: {member!r} is a reference, not a member")
            if placed.setdefault(member, block_reference) != block_reference:
                raise StudyError(
                    f"{where}: setting {member!r} is in two blocks ({placed[member]!r}, {block_reference!r})"
                )
        checked[str(block_reference)] = list(members)
    return checked


STUDY_KEYS = tuple(f.name for f in fields(Study) if f.name != "path")
