"""One trial, in the current process, through the code path of ``embinit fit``/``test``; any engine calls it.

:func:`run_trial` writes the trial's merged config to its run directory, builds the LightningCLI of
``embinit`` on it (``run=False``) with ``trainer.default_root_dir`` there, adds the protocol's
``ModelCheckpoint`` (unless the config has one with the same monitor and mode; one without a monitor goes) and a
``CSVLogger`` (unless the config has one), fits, and tests the best checkpoint (or validates it: protocol
``test: false``, or ``auto`` with a datamodule without a test split), then keeps it or deletes it (the protocol's
``checkpoints``). The record, written atomically to ``<results>/trials/<trial_id>.json``, holds what
docs/studies.md#records-and-the-report describes. A NaN or infinite loss or score fails the trial.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.model_helpers import is_overridden

from lightning_embinit.commands.lightning_cli import EmbinitCLI, embinit_cli
from lightning_embinit.quiet import quiet_lightning_noise
from lightning_embinit.studies.outcome import (
    EpochClock,
    checkpoint_position,
    cost_values,
    host,
    is_model_metric,
    number,
    read_curves,
    scalars,
    summaries,
    versions,
)
from lightning_embinit.studies.records import RECORD_SCHEMA, log_path, now, read_json, record_path, run_dir, write_json
from lightning_embinit.studies.spec import Protocol, Trial

TRACEBACK_LINES = 40


class TrialFailure(RuntimeError):
    """A trial that ran but cannot be scored: a non-finite loss or score, or no checkpoint kept."""


@dataclass(frozen=True)
class TrialLaunch:
    """How one worker of a trial runs, when an engine runs a trial on several workers (Ray Train's DDP); the default
    is the whole trial in this one process.

    ``rank`` 0 prepares the run directory, writes the config and the record; ``barrier`` waits for every worker;
    ``trainer_defaults`` go to LightningCLI (a strategy, plugins and callbacks the engine supplies; the config's own
    values win, so an engine removes ``trainer_keys`` from the config first); ``prepare`` receives the built Trainer
    and returns the one to use. With several workers an error is recorded (by rank 0) and then raised, so the engine
    stops every worker rather than leave them waiting in a collective."""

    rank: int = 0
    world_size: int = 1
    trainer_defaults: Mapping[str, Any] = field(default_factory=dict)
    trainer_keys: tuple[str, ...] = ()
    prepare: Callable[[Trainer], Trainer] | None = None
    barrier: Callable[[], None] | None = None


def describe(error: BaseException) -> dict[str, str]:
    """An exception as a record's ``error``: its type, message and the last lines of its traceback."""
    lines = "".join(traceback.format_exception(type(error), error, error.__traceback__)).splitlines()
    return {"type": type(error).__name__, "message": str(error), "traceback": "\n".join(lines[-TRACEBACK_LINES:])}


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def new_record(trial: Trial, results_dir: Path, *, run_id: str | None = None) -> dict[str, Any]:
    """The record of ``trial`` before it runs (``status: running``)."""
    return {
        "schema": RECORD_SCHEMA,
        **trial.to_dict(),
        "status": "running",
        "error": None,
        "metrics": {},
        "final": {},
        "trained": {},
        "monitors": {},
        "init_report": None,
        "curves": {},
        "checkpoint": None,
        "wall_time_s": None,
        "versions": versions(),
        "host": host(),
        "started": now(),
        "finished": None,
        "log": _relative(log_path(results_dir, trial.trial_id), results_dir),
        "run_dir": _relative(run_dir(results_dir, trial.trial_id), results_dir),
        "run_id": run_id,
    }


def own_record(job: Mapping[str, Any], reported: str | None = None) -> dict[str, Any] | None:
    """The record ``job``'s trial wrote under the job's run id (``reported``: the JSON record a Ray worker sent,
    written into the results directory first); None when the trial's process ended before writing one."""
    path = record_path(job["results_dir"], job["trial"]["trial_id"])
    if reported:
        write_json(path, json.loads(reported))
    record = read_json(path)
    return record if isinstance(record, dict) and record.get("run_id") == job["run_id"] else None


def failed_record(
    job: Mapping[str, Any], error_type: str, message: str, log_tail: str = "", started: str | None = None
) -> dict[str, Any]:
    """The ``failed`` record an engine writes for ``job``'s trial when its process ended before writing its own."""
    trial, results_dir = Trial.from_dict(job["trial"]), Path(job["results_dir"])
    record = new_record(trial, results_dir, run_id=job["run_id"])
    error = {"type": error_type, "message": message, "traceback": log_tail}
    record.update(status="failed", finished=now(), error=error, started=started or record["started"])
    return read_json(write_json(record_path(results_dir, trial.trial_id), record))


def trial_job(trial: Trial, results_dir: Path, threads: int, **extra: Any) -> dict[str, Any]:
    """What an engine hands a trial's process: the trial, where its record and log go, its run id, its threads
    and the sweep's working directory (relative data paths resolve from it), plus the engine's ``extra``."""
    return {
        "trial": trial.to_dict(),
        "results_dir": str(results_dir),
        "run_id": uuid.uuid4().hex,
        "log_file": str(log_path(results_dir, trial.trial_id)),
        "threads": threads,
        "cwd": os.getcwd(),
        **extra,
    }


def run_trial(
    trial: Trial | Mapping[str, Any],
    results_dir: str | Path,
    *,
    run_id: str | None = None,
    launch: TrialLaunch | None = None,
) -> dict[str, Any]:
    """Run ``trial`` here and now, write its record to ``<results_dir>/trials/<trial_id>.json`` and return it.

    Any exception (out of memory included) or a non-finite loss makes the record ``failed`` with the error;
    only an interrupt (Ctrl-C) passes through, as KeyboardInterrupt, and leaves no new record. ``launch``: this
    process is one worker of a multi-worker trial (:class:`TrialLaunch`); only its rank 0 writes the record.
    """
    trial = trial if isinstance(trial, Trial) else Trial.from_dict(trial)
    launch = launch or TrialLaunch()
    results_dir = Path(results_dir)
    record = new_record(trial, results_dir, run_id=run_id)
    start = time.perf_counter()
    failure: BaseException | None = None
    try:
        with quiet_lightning_noise():
            _fit_and_evaluate(trial, results_dir, record, launch)
        record["status"] = "done"
    except (Exception, SystemExit) as error:  # noqa: BLE001 - every failure is recorded, the sweep goes on
        if isinstance(error, SystemExit) and isinstance(error.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from error  # Lightning turns Ctrl-C into sys.exit(1): interrupted, not failed
        record["status"], record["error"], failure = "failed", describe(error), error
        print(f"trial {trial.trial_id} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    finally:
        record["wall_time_s"] = round(time.perf_counter() - start, 3)
        record["finished"] = now()
    if launch.rank == 0:
        write_json(record_path(results_dir, trial.trial_id), record)
    if failure is not None and launch.world_size > 1:
        raise failure
    return record


def write_config(trial: Trial, directory: Path, launch: TrialLaunch) -> None:
    """The trial's config as ``<directory>/config.yaml``, less the trainer keys the engine supplies (``launch``)."""
    config = trial.config
    if launch.trainer_keys:
        trainer = {key: value for key, value in (config.get("trainer") or {}).items() if key not in launch.trainer_keys}
        config = {**config, "trainer": trainer}
    (directory / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def build_cli(trial: Trial, directory: Path, launch: TrialLaunch) -> EmbinitCLI:
    """``embinit``'s LightningCLI on the trial's config (``<directory>/config.yaml``, written by rank 0), not run."""
    args = ["--config", str(directory / "config.yaml"), f"--trainer.default_root_dir={directory}"]
    if (trial.config.get("trainer") or {}).get("enable_progress_bar") is None:
        args.append("--trainer.enable_progress_bar=false")
    if trial.protocol.precision is not None:
        args.append(f"--trainer.precision={trial.protocol.precision}")
    with warnings.catch_warnings():  # the trial's own args, not the caller's sys.argv
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        return embinit_cli(
            args=args, run=False, save_config_kwargs={"overwrite": True}, trainer_defaults=dict(launch.trainer_defaults)
        )


def protocol_checkpoint(trainer: Trainer, protocol: Protocol, directory: Path) -> ModelCheckpoint:
    """The config's ``ModelCheckpoint`` on the protocol's monitor and mode, else a new one; without a ``dirpath`` of
    its own, it saves to ``<directory>/checkpoints``. A ``ModelCheckpoint`` without a monitor (Lightning's default
    when the config has none: the latest weights, beside the best) is removed: no study reads it."""
    checkpoints = str(directory / "checkpoints")
    trainer.callbacks = [
        callback
        for callback in trainer.callbacks
        if not (isinstance(callback, ModelCheckpoint) and callback.monitor is None)
    ]
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.save_top_k != 0:
            if (callback.monitor, callback.mode) == (protocol.monitor, protocol.mode):
                callback.dirpath = callback.dirpath or checkpoints
                return callback
    callback = ModelCheckpoint(
        dirpath=checkpoints, filename="best-{epoch}-{step}", monitor=protocol.monitor, mode=protocol.mode
    )
    trainer.callbacks.append(callback)
    return callback


def csv_metrics_file(trainer: Trainer, directory: Path) -> Path:
    """The ``metrics.csv`` of the trainer's CSVLogger; one is added (``<directory>/csv``) when it has none."""
    logger = next((logger for logger in trainer.loggers if isinstance(logger, CSVLogger)), None)
    if logger is None:
        logger = CSVLogger(save_dir=str(directory), name=None, version="csv")
        trainer.loggers = [*trainer.loggers, logger]
    return Path(logger.log_dir) / "metrics.csv"


def optimizer_steps(curves: dict[str, list[list[Any]]]) -> dict[str, list[list[Any]]]:
    """``curves`` (:func:`~.outcome.read_curves`) with every row's step the optimizer steps done when it was logged
    (``trainer.global_step``, as ``best_step`` and the checkpoints' names). Lightning's own rows, the ones with an
    epoch, carry one less (its logging step counts the batches before the one that logged); the callbacks' rows,
    logged with a step of their own, stay."""
    return {
        name: [
            [step + 1 if step is not None and epoch is not None else step, epoch, value] for step, epoch, value in rows
        ]
        for name, rows in curves.items()
    }


def has_test_split(datamodule: LightningDataModule | None) -> bool:
    """Whether the datamodule has a test loader (and, for the package's text datamodules, a test split)."""
    if datamodule is None or not is_overridden("test_dataloader", datamodule, LightningDataModule):
        return False
    try:
        splits = getattr(getattr(datamodule, "raw_splits", None), "splits", None)
    except (OSError, ValueError):
        return False
    return splits is None or "test" in splits


def _fit_and_evaluate(trial: Trial, results_dir: Path, record: dict[str, Any], launch: TrialLaunch) -> None:
    directory = run_dir(results_dir, trial.trial_id)
    if launch.rank == 0:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        write_config(trial, directory, launch)
    if launch.barrier is not None and launch.world_size > 1:
        launch.barrier()
    cli = build_cli(trial, directory, launch)
    trainer = cli.trainer if launch.prepare is None else launch.prepare(cli.trainer)
    checkpoint = protocol_checkpoint(trainer, trial.protocol, directory)
    metrics_file = csv_metrics_file(trainer, directory)
    clock = EpochClock()
    trainer.callbacks.append(clock)
    started = time.perf_counter()
    try:
        trainer.fit(cli.model, datamodule=cli.datamodule)
    finally:
        record["curves"] = optimizer_steps(read_curves(metrics_file))  # fit's: the best's evaluation goes to metrics
    fit_seconds = time.perf_counter() - started
    fit_metrics = scalars(trainer.callback_metrics)
    record["final"] = {name: value for name, value in fit_metrics.items() if is_model_metric(name)}
    steps = trainer.global_step
    record["trained"] = {"steps": steps, "epochs": trainer.current_epoch, "world_size": trainer.world_size}
    record["cost"] = cost_values(cli.model, clock, fit_seconds, steps)
    record.update(summaries(trainer, fit_metrics, record))
    _score_best(trainer, cli, checkpoint, trial.protocol, record)
    best = Path(checkpoint.best_model_path)
    if trial.protocol.checkpoints == "best":
        record["checkpoint"] = _relative(best, results_dir)
    if launch.rank == 0:
        kept = {best.resolve()} if trial.protocol.checkpoints == "best" else set()
        for path in {*directory.rglob("*.ckpt"), best}:
            if path.resolve() in kept:
                continue
            if path.is_dir():  # a sharded checkpoint
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _score_best(
    trainer: Trainer, cli: EmbinitCLI, checkpoint: ModelCheckpoint, protocol: Protocol, record: dict[str, Any]
) -> None:
    """``metrics``: the best checkpoint's score and position, then its test (or validation) metrics."""
    _check_finite(record["final"], "metrics at the end of fit")
    best = checkpoint.best_model_path
    if not best:
        logged = ", ".join(sorted(trainer.callback_metrics)) or "none"
        raise TrialFailure(
            f"no checkpoint was kept: the protocol's monitor {protocol.monitor!r} was never logged "
            f"(logged: {logged}); set protocol: {{monitor: ...}} in the study"
        )
    score = number(checkpoint.best_model_score)
    epoch, step = checkpoint_position(best)
    record["metrics"] = {f"best_{protocol.monitor}": score, "best_epoch": epoch, "best_step": step}
    _check_finite({f"best_{protocol.monitor}": score}, "best score")
    test = has_test_split(cli.datamodule) if protocol.test == "auto" else protocol.test
    evaluate = trainer.test if test else trainer.validate
    results = evaluate(cli.model, datamodule=cli.datamodule, ckpt_path=best, verbose=False)
    evaluated = scalars({name: value for result in results for name, value in result.items()})
    record["metrics"].update(evaluated)
    _check_finite(evaluated, "metrics of the best checkpoint")


def _check_finite(values: Mapping[str, Any], what: str) -> None:
    """TrialFailure naming each NaN or infinite number of ``values``."""
    problems = [
        f"{name} = {value}" for name, value in values.items() if isinstance(value, float) and not math.isfinite(value)
    ]
    if problems:
        raise TrialFailure(f"non-finite {what}: {', '.join(problems)}")
