"""The Ray engine (docs/studies.md#running-on-ray): a study's trials as a Ray Tune run of a function trainable, on a
local Ray instance or an existing cluster, with the local engine's checks, plan and records
(:mod:`lightning_embinit.studies.plan`).

Each Tune trial calls :func:`~.trial.run_trial` (or, with ``ddp_workers`` > 1, :mod:`.ray_train`) and reports the
record through ``ray.tune.report``; the driver writes every record into ``<results>/trials/``, wherever the trial ran.
Needs the ``ray`` extra: ``pip install 'lightning_embinit[ray]'``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.plan import SweepProgress, prepare_sweep
from lightning_embinit.studies.ray_train import REPORTED_RECORD, require_ray, run_ray_train_job
from lightning_embinit.studies.records import available_cores, finish_sweep, now
from lightning_embinit.studies.spec import Study
from lightning_embinit.studies.trial import failed_record, own_record, trial_job

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

    ``threads`` (default 1) and ``gpus_per_trial`` are per trial, ``workers`` caps the trials at once (default: as
    many as the cluster fits), ``address`` names a cluster (default a local instance); ``ddp_workers`` > 1 runs each
    trial on that many Ray Train workers (:mod:`.ray_train`) with those resources each. docs/studies.md#running-on-ray.
    Interrupted (Ctrl-C), it raises KeyboardInterrupt once Tune stopped the running trials, which get no record.
    """
    require_ray()
    cpus = 1 if threads is None else threads
    if cpus < 1 or gpus_per_trial < 0 or (workers is not None and workers < 1) or ddp_workers < 1:
        raise StudyError(
            f"--threads must be ≥ 1, GPUs per trial ≥ 0, --workers ≥ 1 and --ddp-workers ≥ 1; got "
            f"{cpus}, {gpus_per_trial}, {workers}, {ddp_workers}"
        )
    ddp = {"num_workers": ddp_workers, "gpus_per_worker": gpus_per_trial} if ddp_workers > 1 else {}
    # A Tune trial that waits on its Ray Train workers holds a byte of memory, no CPU: the workers hold the resources
    resources = {"cpu": 0, "memory": 1} if ddp else {"cpu": cpus, "gpu": gpus_per_trial}
    with (
        prepare_sweep(study, results_dir, variant=variant, retry_failed=retry_failed) as plan,
        SweepProgress(plan.study.name, total=len(plan.trials), skipped=plan.kept, enabled=progress) as bar,
    ):
        results_dir = plan.results_dir.resolve()
        jobs = [trial_job(trial, results_dir, cpus, **ddp) for trial in plan.to_run]
        run_name = f"{plan.study.name}-{variant or 'default'}-{now().replace(':', '')}"
        ordered = plan.ordered(_tune(jobs, results_dir, run_name, resources, workers, address, bar) if jobs else {})
        finish_sweep(results_dir, engine="ray", workers=workers, threads=cpus, ddp_workers=ddp_workers, ran=len(jobs))
        bar.summary(ordered, results_dir, ran=len(jobs))
    return ordered


def ray_trial(config: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> None:
    """The function trainable: one trial in a Ray worker, its output to the trial's log, the record reported."""
    from ray import tune

    from lightning_embinit.studies.trial import run_trial
    from lightning_embinit.studies.worker import enter_job, trial_process_state

    job = jobs[int(config["trial_index"])]
    with trial_process_state():  # Tune runs the next trial in this process (reuse_actors)
        if job.get("num_workers"):
            record = run_ray_train_job(job)
        else:
            enter_job(job)
            record = run_trial(job["trial"], job["results_dir"], run_id=job["run_id"])
    numbers = {
        name: value
        for name, value in {**record.get("metrics", {}), **record.get("monitors", {})}.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    tune.report({**numbers, "status": record["status"], REPORTED_RECORD: json.dumps(record)})


def start_ray(address: str | None = None) -> None:
    """Connect to the Ray cluster at ``address``, or start a local instance on this machine's cores whose workers
    run at this process's priority. Ray starts its workers at niceness 15, made for drivers that do the work; here
    the trials are the work, and at 15 anything else on the machine (another sweep, a test run) starves them:
    on 2 busy cores a 4-step Ray Train trial waited 6 minutes for its first actor."""
    import ray

    if address:
        ray.init(address=address, configure_logging=False, log_to_driver=False)
        return
    ray.init(
        num_cpus=available_cores(),
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        _system_config={"worker_niceness": os.nice(0)},  # Ray's RayConfig entry; RAY_worker_niceness sets the same
    )


def _tune(
    jobs: list[dict[str, Any]],
    results_dir: Path,
    run_name: str,
    resources: dict[str, int],
    workers: int | None,
    address: str | None,
    bar: SweepProgress,
) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` as one Tune experiment; the record of each by trial id (a failed one for a trial that died)."""
    import ray
    from ray import tune

    started_here = not ray.is_initialized()
    if started_here:
        start_ray(address)
    try:
        trainable = tune.with_resources(tune.with_parameters(ray_trial, jobs=jobs), resources)
        tuner = tune.Tuner(
            trainable,
            param_space={"trial_index": tune.grid_search(list(range(len(jobs))))},
            # reuse_actors: the next trial runs in a finished trial's process, which has torch and Lightning imported
            # (about 10 s a trial on 2 cores); ray_trial puts back what a trial changes process-wide
            tune_config=tune.TuneConfig(max_concurrent_trials=workers, reuse_actors=True),
            run_config=tune.RunConfig(
                name=run_name,
                storage_path=str(results_dir / "ray"),
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=0),
                callbacks=[_ProgressCallback(jobs, bar)],
            ),
        )
        with _tune_signal_handlers():
            results = tuner.fit()
        records, interrupted = {}, []
        for result in results:
            job = jobs[int(result.config["trial_index"])]
            record = own_record(job, (result.metrics or {}).get(REPORTED_RECORD))
            if record is None and result.error is None:
                # Ctrl-C: Tune's own SIGINT handler ends the run and fit() returns; the trials it stopped (or never
                # started) have neither a record nor an error. As on the local engine they are not failures.
                interrupted.append(job["trial"]["trial_id"])
                continue
            message = f"the Ray trial ended before reporting: {result.error!r}"
            records[job["trial"]["trial_id"]] = record or failed_record(job, "RayTrialError", message)
        if interrupted:
            raise KeyboardInterrupt(f"the Ray run was interrupted; not finished: {', '.join(interrupted)}")
        return records
    finally:
        _PROGRESS_BARS.clear()
        if started_here:
            ray.shutdown()


@contextmanager
def _tune_signal_handlers() -> Iterator[None]:
    """Give back the SIGINT and SIGUSR1 handlers ``Tuner.fit`` replaces: Tune installs its own for the run and
    leaves them installed when no signal came (Ray 2.x, ``ray.tune.tune._setup_signal_catching``; no public API
    restores them), so a later Ctrl-C in this process, on a local sweep say, would only log a Tune warning."""
    names = [name for name in ("SIGINT", "SIGUSR1") if hasattr(signal, name)]
    before = {name: signal.getsignal(getattr(signal, name)) for name in names}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():  # Tune installs none from another thread
            for name, handler in before.items():
                if handler is not None:  # None: installed outside Python, cannot be reinstalled from here
                    signal.signal(getattr(signal, name), handler)


class _ProgressCallback(TuneCallback):
    """Tune callback driving the sweep's progress bar; it holds a token, not the bar (Tune pickles its callbacks
    with the experiment state, and a bar holds locks)."""

    def __init__(self, jobs: list[dict[str, Any]], bar: SweepProgress) -> None:
        self.jobs, self.token = jobs, uuid.uuid4().hex
        _PROGRESS_BARS[self.token] = bar

    def _trial_id(self, trial: Any) -> str:
        return self.jobs[int(trial.config["trial_index"])]["trial"]["trial_id"]

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _PROGRESS_BARS[self.token].started(self._trial_id(trial))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        reported = (trial.last_result or {}).get(REPORTED_RECORD)
        if reported is not None:
            _PROGRESS_BARS[self.token].finished(json.loads(reported))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        error = {"type": "RayTrialError", "message": "the Ray trial ended before reporting"}
        _PROGRESS_BARS[self.token].finished({"trial_id": self._trial_id(trial), "status": "failed", "error": error})
