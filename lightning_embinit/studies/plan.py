"""What every engine does around its trials. Before the first starts: read and check the study, claim the results
directory (for the whole sweep), and split its trials into those to run and the records kept from earlier runs.
While they run: a bar over the study's trials with the ETA, a line per finished trial, and the summary at the end.

Every trial's config is checked with the parser ``embinit fit`` uses (:class:`ConfigChecker`), instantiating nothing;
a refused config is traced to the first override that makes it fail, and the error names the setting, where the
override comes from, the key, the value and the parser's reason.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import socket
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningDataModule, LightningModule
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lightning_embinit.commands.lightning_cli import EmbinitCLI
from lightning_embinit.studies.keys import StudyError, set_key, substitute_environment
from lightning_embinit.studies.records import (
    STUDY_FILE,
    check_results_dir,
    now,
    read_json,
    read_record,
    study_summary,
    write_json,
)
from lightning_embinit.studies.spec import Study, Trial

NOISE = ("Given value", "- Expected a <class 'NoneType'>")
"""Lines of a jsonargparse error that repeat the value or list the None it could also have been."""


class ConfigChecker(EmbinitCLI):
    """An :class:`EmbinitCLI` that parses no arguments and instantiates nothing: use :attr:`parser`."""

    def parse_arguments(self, parser: Any, args: Any) -> None:
        self.config = parser.get_defaults()

    def instantiate_classes(self) -> None:
        """Nothing: the checker only parses."""


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
    checker = ConfigChecker(
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
    first_seeds: dict[str, Trial] = {}
    for trial in trials:
        first_seeds.setdefault(trial.setting, trial)
    for trial in first_seeds.values():
        try:
            checker.parser.parse_object(copy.deepcopy(trial.config))
        except Exception as error:  # noqa: BLE001 - jsonargparse raises ArgumentError, TypeError, ValueError
            raise StudyError(_blame(study, trial, checker, error)) from None


@dataclass(frozen=True)
class SweepPlan:
    """A checked study's trials for one variant: all of them, those to run, and the records kept."""

    study: Study
    variant: str | None
    results_dir: Path
    trials: list[Trial]
    to_run: list[Trial]
    kept: list[dict[str, Any]]

    def ordered(self, records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The kept records and ``records`` (by trial id) in the study's trial order."""
        found = {**{record["trial_id"]: record for record in self.kept}, **records}
        return [found[trial.trial_id] for trial in self.trials if trial.trial_id in found]


LOCK_FILE = ".sweep.lock"
"""In a results directory: the sweep that holds it (pid, host, start time), empty when none does."""


@contextmanager
def hold_results_dir(results_dir: Path) -> Iterator[None]:
    """Hold ``<results_dir>/.sweep.lock`` (``flock``, released even when the sweep is killed) for the block; a
    StudyError naming the holder when another sweep holds it. A lock file a killed sweep left is taken over with a
    warning."""
    results_dir.mkdir(parents=True, exist_ok=True)
    with open(results_dir / LOCK_FILE, "a+", encoding="utf-8") as handle:
        handle.seek(0)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StudyError(
                f"results directory {results_dir} is in use by another sweep ({_holder(handle.read())}): wait for it "
                "to end, or choose another --results directory"
            ) from None
        if left := handle.read().strip():
            warnings.warn(
                f"results directory {results_dir}: taking over the lock of a sweep that ended without releasing it "
                f"({_holder(left)})",
                stacklevel=2,
            )
        handle.truncate(0)
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": now()}))
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)


def _holder(text: str) -> str:
    try:
        found = json.loads(text)
        return f"pid {found['pid']} on host {found['host']}, started {found['started']}"
    except (ValueError, TypeError, KeyError):
        return "its pid not yet written"


@contextmanager
def prepare_sweep(
    study: Study | str | Path, results_dir: str | Path, *, variant: str | None = None, retry_failed: bool = False
) -> Iterator[SweepPlan]:
    """Check everything a sweep needs before any trial starts — the study, every trial's config (the ``embinit``
    parser), the results directory — then hold the results directory for the block (:func:`hold_results_dir`),
    write ``study.json`` and plan the trials; StudyError when one fails.

    A record with the trial's config hash is kept when ``done``, or ``failed`` without ``retry_failed``; a changed
    config (another hash) or a missing record runs."""
    study = study if isinstance(study, Study) else Study.from_yaml(study)
    results_dir = Path(results_dir)
    trials = study.trials(variant)
    validate_trials(study, trials)
    with hold_results_dir(results_dir):
        check_results_dir(results_dir, study, variant)
        write_json(results_dir / STUDY_FILE, study_summary(study, variant, trials, read_json(results_dir / STUDY_FILE)))
        to_run, kept = [], []
        for trial in trials:
            record = read_record(results_dir, trial.trial_id)
            same = record is not None and record.get("config_hash") == trial.config_hash
            if same and (record.get("status") == "done" or (record.get("status") == "failed" and not retry_failed)):
                kept.append(record)
            else:
                to_run.append(trial)
        yield SweepPlan(study, variant, results_dir, trials, to_run, kept)


def outcome_line(record: dict[str, Any]) -> str:
    """One line about a finished trial: its id, status, wall time and the protocol's best score or its error."""
    wall = record.get("wall_time_s")
    timing = f"{wall:.1f} s" if isinstance(wall, (int, float)) else "-"
    if record.get("status") == "done":
        scores = ", ".join(
            f"{name} {value:.4g}"
            for name, value in (record.get("metrics") or {}).items()
            if name.startswith(("best_", "test_")) and isinstance(value, float)
        )
        return f"done    {record['trial_id']}  {timing}  {scores}"
    error = record.get("error") or {}
    message = next(iter(str(error.get("message") or "").strip().splitlines()), "")
    return f"FAILED  {record['trial_id']}  {timing}  {error.get('type')}: {message}  (log: {record.get('log')})"


class SweepProgress:
    """A rich progress bar over a study's trials (finished earlier ones count as done), on stderr."""

    def __init__(self, study: str, *, total: int, skipped: Sequence[dict[str, Any]], enabled: bool = True) -> None:
        self.study, self.total, self.skipped, self.enabled = study, total, list(skipped), enabled
        self.console = Console(stderr=True, highlight=False)
        self.counts = {"done": 0, "failed": 0}
        self.running: list[str] = []
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("done {task.fields[done]} · failed {task.fields[failed]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[running]}"),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.study, total=self.total, completed=len(self.skipped), done=0, failed=0, running=""
            )
        if self.skipped:
            self.console.print(f"{self.study}: {len(self.skipped)} of {self.total} trials finished earlier, skipped")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _update(self, advance: int = 0) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=advance, running=escape(", ".join(self.running)), **self.counts)

    def started(self, trial_id: str) -> None:
        self.running.append(trial_id)
        self._update()

    def finished(self, record: dict[str, Any]) -> None:
        if record["trial_id"] in self.running:
            self.running.remove(record["trial_id"])
        self.counts["done" if record.get("status") == "done" else "failed"] += 1
        self.console.print(escape(outcome_line(record)), soft_wrap=True)
        self._update(advance=1)

    def summary(self, records: Sequence[dict[str, Any]], results_dir: Path, *, ran: int) -> None:
        """Counts (done / failed this run, skipped, failed earlier and not retried) and each failure's error."""
        kept_failed = sum(record.get("status") == "failed" for record in self.skipped)
        parts = [
            f"ran {ran}: {self.counts['done']} done, {self.counts['failed']} failed",
            f"{len(self.skipped) - kept_failed} skipped (finished earlier)",
        ]
        if kept_failed:
            parts.append(f"{kept_failed} failed earlier, not retried (--retry-failed reruns them)")
        self._update()
        self.console.print(
            f"{self.study}: " + "; ".join(parts) + f". Records: {results_dir / 'trials'}", soft_wrap=True
        )
        for record in records:
            if record.get("status") != "done":
                self.console.print(escape("  " + outcome_line(record)), soft_wrap=True)
