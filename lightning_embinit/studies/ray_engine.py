"""The Ray engine: a study's trials as a Ray Tune run, on a local Ray instance or an existing cluster.

The same checks, plan and records as the local engine (:func:`~.plan.prepare_sweep`): a ``ray.tune.Tuner`` runs
a function trainable per pending trial, with ``{"cpu": threads}`` (and ``{"gpu": 1}`` per trial when asked), which
calls the same :func:`~.trial.run_trial` and reports the record through ``ray.tune.report``. The driver writes every
record into ``<results>/trials/`` from what the trials reported, so ``embinit report`` reads a Ray sweep as it reads a
local one even when the trials ran on other nodes (their logs and checkpoints stay where the results directory
lies on that node: use a shared filesystem to keep them too).

With ``ddp_workers`` > 1 (``--ddp-workers``) each Tune trial runs its trial as a Ray Train DDP run instead
(:mod:`.ray_train`). Needs the ``ray`` extra: ``pip install 'lightning_embinit[ray]'``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.local import available_cores
from lightning_embinit.studies.plan import prepare_sweep
from lightning_embinit.studies.progress import SweepProgress
from lightning_embinit.studies.ray_train import REPORTED_RECORD, ray_train_job, require_ray, run_ray_train_job
from lightning_embinit.studies.records import now, read_record, record_path, write_json
from lightning_embinit.studies.spec import Study, Trial
from lightning_embinit.studies.trial import failed_record, trial_job

try:
    from ray.tune import Callback as TuneCallback
except ImportError:  # the engine refuses to start (require_ray); the module still imports
    TuneCallback = object

_PROGRESS_BARS: dict[str, SweepProgress] = {}
"""The driver's progress bars by a callback's token."""


def run_study_on_ray(
    study: Study | str | Path,
    results_dir: str | Path,
    *,
    variant: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    gpus_per_trial: int = 0,
    address: str | None = None,
    retry_failed: bool = False,
    ddp_workers: int = 1,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run every pending trial of ``study``'s ``variant`` as a Ray Tune trial; return the records in trial order.

    ``threads``: CPUs per trial (default 1), ``gpus_per_trial``: GPUs per trial, ``workers``: at most this many
    trials at once (default: as many as the cluster's resources fit), ``address``: an existing cluster
    (``auto``, ``ray://head:10001``; default a local instance of this machine's cores). ``ddp_workers`` > 1: each
    trial is a DDP run of that many Ray Train workers (:mod:`.ray_train`), each with ``threads`` CPUs and
    ``gpus_per_trial`` GPUs; the Tune trial that starts it holds no CPU or GPU of its own.
    """
    require_ray()
    cpus = 1 if threads is None else threads
    if cpus < 1 or gpus_per_trial < 0 or (workers is not None and workers < 1) or ddp_workers < 1:
        raise StudyError(
            f"--threads must be ≥ 1, GPUs per trial ≥ 0, --workers ≥ 1 and --ddp-workers ≥ 1; got "
            f"{cpus}, {gpus_per_trial}, {workers}, {ddp_workers}"
        )
    plan = prepare_sweep(study, results_dir, variant=variant, retry_failed=retry_failed)
    results_dir = plan.results_dir.resolve()
    if ddp_workers > 1:
        jobs = [
            ray_train_job(
                trial, results_dir, num_workers=ddp_workers, gpus_per_worker=gpus_per_trial, cpus_per_worker=cpus
            )
            for trial in plan.to_run
        ]
        cpus, gpus_per_trial = 0, 0  # the Train workers hold the resources, not the Tune trial that waits on them
    else:
        jobs = [trial_job(trial, results_dir, cpus) for trial in plan.to_run]
    with SweepProgress(plan.study.name, total=len(plan.trials), skipped=plan.kept, enabled=progress) as bar:
        records = (
            _tune(
                jobs,
                results_dir,
                plan.study.name,
                variant,
                cpus=cpus,
                gpus=gpus_per_trial,
                workers=workers,
                address=address,
                bar=bar,
            )
            if jobs
            else {}
        )
        ordered = plan.ordered(records)
        bar.summary(ordered, results_dir, ran=len(jobs))
    return ordered


def ray_trial(config: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> None:
    """The function trainable: one trial in a Ray worker, its output to the trial's log, the record reported."""
    from ray import tune

    from lightning_embinit.studies.trial import run_trial
    from lightning_embinit.studies.worker import limit_threads, redirect_output

    job = jobs[int(config["trial_index"])]
    if job.get("cwd") and os.path.isdir(job["cwd"]):
        os.chdir(job["cwd"])  # relative data paths in the study resolve as they do for the local engine
    os.makedirs(os.path.dirname(job["log_file"]), exist_ok=True)
    if job.get("num_workers"):
        record = run_ray_train_job(job)
    else:
        redirect_output(job["log_file"])
        limit_threads(int(job["threads"]))
        record = run_trial(job["trial"], job["results_dir"], run_id=job["run_id"])
    numbers = {
        name: value
        for name, value in {**record.get("metrics", {}), **record.get("monitors", {})}.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    tune.report({**numbers, "status": record["status"], REPORTED_RECORD: json.dumps(record)})


def _tune(
    jobs: list[dict[str, Any]],
    results_dir: Path,
    name: str,
    variant: str | None,
    *,
    cpus: int,
    gpus: int,
    workers: int | None,
    address: str | None,
    bar: SweepProgress,
) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` as one Tune experiment; the record of each by trial id (a failed one for a trial that died)."""
    import ray
    from ray import tune

    started_here = not ray.is_initialized()
    if started_here:
        options = {"address": address} if address else {"num_cpus": available_cores(), "include_dashboard": False}
        ray.init(**options, configure_logging=False, log_to_driver=False)
    try:
        # A Tune trial needs some resource; one that waits on its Ray Train workers holds a byte of memory, no CPU
        resources = {"cpu": cpus, "gpu": gpus} if cpus or gpus else {"cpu": 0, "memory": 1}
        trainable = tune.with_resources(tune.with_parameters(ray_trial, jobs=jobs), resources)
        tuner = tune.Tuner(
            trainable,
            param_space={"trial_index": tune.grid_search(list(range(len(jobs))))},
            tune_config=tune.TuneConfig(max_concurrent_trials=workers),
            run_config=tune.RunConfig(
                name=f"{name}-{variant or 'default'}-{now().replace(':', '')}",
                storage_path=str(results_dir / "ray"),
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=0),
                callbacks=[_ProgressCallback(jobs, bar)],
            ),
        )
        grid = tuner.fit()
        return {
            job["trial"]["trial_id"]: _record_of(job, grid[index], results_dir)
            for index, job in enumerate(_jobs_in_grid_order(jobs, grid))
        }
    finally:
        _PROGRESS_BARS.clear()
        if started_here:
            ray.shutdown()


def _jobs_in_grid_order(jobs: list[dict[str, Any]], grid: Any) -> list[dict[str, Any]]:
    return [jobs[int(grid[index].config["trial_index"])] for index in range(len(grid))]


def _record_of(job: Mapping[str, Any], result: Any, results_dir: Path) -> dict[str, Any]:
    """The record a trial reported, written here; a ``failed`` record when its worker died before reporting."""
    reported = (result.metrics or {}).get(REPORTED_RECORD)
    trial_id = job["trial"]["trial_id"]
    if reported is not None:
        record = json.loads(reported)
    else:
        record = read_record(results_dir, trial_id)
        if record is None or record.get("run_id") != job["run_id"]:
            record = failed_record(
                Trial.from_dict(job["trial"]),
                results_dir,
                run_id=job["run_id"],
                error_type="RayTrialError",
                message=f"the Ray trial ended before reporting: {result.error!r}",
            )
    write_json(record_path(results_dir, trial_id), record)
    return read_record(results_dir, trial_id)  # as the local engine returns it: JSON-safe (non-finite as strings)


class _ProgressCallback(TuneCallback):
    """Tune callback driving the sweep's progress bar; it holds a token, not the bar (Tune pickles its callbacks
    with the experiment state, and a bar holds locks)."""

    def __init__(self, jobs: list[dict[str, Any]], bar: SweepProgress) -> None:
        self.jobs, self.token = jobs, uuid.uuid4().hex
        _PROGRESS_BARS[self.token] = bar

    def _job(self, trial: Any) -> dict[str, Any]:
        return self.jobs[int(trial.config["trial_index"])]["trial"]

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _PROGRESS_BARS[self.token].started(Trial.from_dict(self._job(trial)))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        reported = (trial.last_result or {}).get(REPORTED_RECORD)
        if reported is not None:
            _PROGRESS_BARS[self.token].finished(json.loads(reported))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _PROGRESS_BARS[self.token].finished(
            {
                "trial_id": self._job(trial)["trial_id"],
                "status": "failed",
                "error": {"type": "RayTrialError", "message": "the Ray trial ended before reporting"},
            }
        )
