"""Checking every trial's config with the parser ``embinit fit`` uses, before any trial starts.

Nothing is instantiated: :class:`ConfigChecker` is :class:`~lightning_embinit.lightning_cli.EmbinitCLI` whose
own parse and ``instantiate_classes`` do nothing, so its parser only validates (unknown keys, wrong types).
A refused config is traced to the first override that makes it fail, and the error names the setting,
where the override comes from, the key, the value and the parser's reason.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from lightning.pytorch import LightningDataModule, LightningModule

from lightning_embinit.lightning_cli import EmbinitCLI
from lightning_embinit.studies.keys import StudyError, set_key, substitute_environment
from lightning_embinit.studies.spec import Study, Trial

NOISE = ("Given value", "- Expected a <class 'NoneType'>")
"""Lines of a jsonargparse error that repeat the value or list the None it could also have been."""


class ConfigChecker(EmbinitCLI):
    """An :class:`EmbinitCLI` that parses no arguments and instantiates nothing: use :attr:`parser`."""

    def parse_arguments(self, parser: Any, args: Any) -> None:
        self.config = parser.get_defaults()

    def instantiate_classes(self) -> None:
        """Nothing: the checker only parses."""


def config_checker() -> ConfigChecker:
    return ConfigChecker(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        run=False,
        args=[],
        auto_configure_optimizers=False,
        seed_everything_default=False,
        load_from_checkpoint_support=False,
        parser_kwargs={"exit_on_error": False},
    )


def parser_reason(error: BaseException | str) -> str:
    """The part of a jsonargparse error that says what is wrong (the innermost class's complaint), on one line."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    for number, line in enumerate(lines):
        if "Problem with given class_path" in line:
            indent, rest = len(line) - len(line.lstrip()), lines[number + 1 :]
            end = next((i for i, inner in enumerate(rest) if len(inner) - len(inner.lstrip()) <= indent), len(rest))
            class_path = line.split("class_path", 1)[1].strip(" :'\"")
            return f"{class_path}: {parser_reason(chr(10).join(rest[:end]))}"
    kept = [line.strip() for line in lines if not line.strip().startswith(NOISE)]
    return " ".join(kept[:3])


def _blame(study: Study, trial: Trial, checker: ConfigChecker, error: BaseException) -> str:
    """The message for a refused trial config: the first override (in applying order) that the parser refuses."""
    where = f"study {study.name!r}, setting {trial.setting!r}"
    config = study.base_config()
    layers = [(f"base config {study.base if isinstance(study.base, str) else '(inline)'}", [])]
    layers += study.override_layers(trial.setting, trial.variant)
    for origin, overrides in layers:
        for key, value in [(None, None), *overrides]:
            if key is not None:
                set_key(config, key, value)
            try:
                checker.parser.parse_object(substitute_environment(config))
            except Exception as failure:  # noqa: BLE001 - the parser raises several types
                if key is None:
                    return f"{where}: {origin}: {parser_reason(failure)}"
                origin = "" if origin == f"setting {trial.setting!r}" else f" ({origin})"
                return f"{where}: key {key!r} = {value!r}{origin}: {parser_reason(failure)}"
    return f"{where}: {parser_reason(error)}"


def validate_trials(study: Study, trials: Iterable[Trial]) -> None:
    """Parse each setting's config (its first seed's: seeds only change seed values); StudyError on the
    first refused."""
    checker = config_checker()
    first_seeds: dict[str, Trial] = {}
    for trial in trials:
        first_seeds.setdefault(trial.setting, trial)
    for trial in first_seeds.values():
        try:
            checker.parser.parse_object(copy.deepcopy(trial.config))
        except Exception as error:  # noqa: BLE001 - jsonargparse raises ArgumentError, TypeError, ValueError
            raise StudyError(_blame(study, trial, checker, error)) from None
