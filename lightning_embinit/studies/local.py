"""The local engine: a study's trials as processes on this machine, ``workers`` at a time.

Each trial runs in a fresh process forked from a server that has imported the package once
(``multiprocessing``'s forkserver; spawn where there is none), so a crash, an out-of-memory kill or a
segfault ends that trial alone and is recorded with its exit code and log tail. Each gets a thread
budget (``threads``; workers × threads ≤ cores) and, when there are GPUs, one GPU of its own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.plan import SweepProgress, prepare_sweep
from lightning_embinit.studies.records import available_cores, finish_sweep, now
from lightning_embinit.studies.spec import Study, Trial

PRELOAD = (
    "lightning_embinit.studies.worker",
    "lightning_embinit.models",
    "lightning_embinit.data",
    "lightning_embinit.callbacks",
)
"""Modules the forkserver imports once, so that each trial's process starts with them."""
LOG_TAIL_LINES = 30


def thread_budget(workers: int, threads: int | None, cores: int | None = None) -> int:
    """Threads per trial: ``threads``, default cores // workers; StudyError when workers × threads > cores."""
    cores = cores or available_cores()
    if workers < 1:
        raise StudyError(f"--workers must be ≥ 1, got {workers}")
    threads = threads if threads is not None else max(1, cores // workers)
    if threads < 1:
        raise StudyError(f"--threads must be ≥ 1, got {threads}")
    if workers * threads > cores:
        raise StudyError(
            f"--workers {workers} × --threads {threads} = {workers * threads} threads, more than the "
            f"{cores} cores here: lower --workers or --threads"
        )
    return threads


def visible_gpus() -> list[str]:
    """The GPUs a trial can be given (``CUDA_VISIBLE_DEVICES`` entries, else indices); [] without CUDA."""
    import torch

    count = torch.cuda.device_count()
    given = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return given[:count] if given else [str(index) for index in range(count)]


def start_method() -> str:
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def start_trial_server() -> None:
    """Start the forkserver now (it imports :data:`PRELOAD` while the caller does other work)."""
    if start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    forkserver.ensure_running()


def run_study(
    study: Study | str | Path,
    results_dir: str | Path,
    *,
    variant: str | None = None,
    workers: int = 1,
    threads: int | None = None,
    retry_failed: bool = False,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run every trial of ``study``'s ``variant`` not finished in ``results_dir``; return the records in trial order.

    Everything is checked before any trial starts (the thread budget, every config, the results directory), then
    ``study.json`` is written; docs/studies.md#running-locally gives the resume, failure, interrupt and lock rules.
    Interrupted, it raises KeyboardInterrupt once the running trials stopped.
    """
    start_trial_server()
    threads = thread_budget(workers, threads)
    gpus = visible_gpus()
    if gpus and workers > len(gpus):
        raise StudyError(
            f"--workers {workers} but {len(gpus)} GPU(s): each trial gets a GPU of its own; "
            f"use --workers {len(gpus)} or fewer"
        )
    with (
        prepare_sweep(study, results_dir, variant=variant, retry_failed=retry_failed) as plan,
        SweepProgress(plan.study.name, total=len(plan.trials), skipped=plan.kept, enabled=progress) as bar,
    ):
        ordered = plan.ordered(_run_all(plan.to_run, plan.results_dir, workers, threads, gpus, bar))
        finish_sweep(plan.results_dir, engine="local", workers=workers, threads=threads, ran=len(plan.to_run))
        bar.summary(ordered, plan.results_dir, ran=len(plan.to_run))
    return ordered


def _run_all(
    trials: Sequence[Trial], results_dir: Path, workers: int, threads: int, gpus: list[str], bar: SweepProgress
) -> dict[str, dict[str, Any]]:
    """Run ``trials`` in processes, ``workers`` at a time; a finished process's record (or its failure) by trial id."""
    from lightning_embinit.studies.trial import trial_job  # here: the trial server starts before Lightning loads
    from lightning_embinit.studies.worker import run_job

    context = multiprocessing.get_context(start_method())
    pending, free_gpus = deque(trials), deque(gpus)
    running: dict[Any, tuple[Any, dict[str, Any], str]] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                trial = pending.popleft()
                gpu = free_gpus.popleft() if gpus else None
                job = trial_job(
                    trial, results_dir, threads, gpu=gpu, sweep_pid=os.getpid(), environment=dict(os.environ)
                )
                process = context.Process(target=run_job, args=(job,), name=f"embinit-trial-{trial.trial_id}")
                process.start()
                running[process.sentinel] = (process, job, now())
                bar.started(trial.trial_id)
            for sentinel in multiprocessing.connection.wait(list(running), timeout=1.0):
                process, job, started = running.pop(sentinel)
                process.join()
                if job["gpu"] is not None:
                    free_gpus.append(job["gpu"])
                results[job["trial"]["trial_id"]] = record = _collect(job, process.exitcode, started)
                bar.finished(record)
    except BaseException:
        processes = [process for process, _, _ in running.values()]
        for process in processes:  # as Ctrl-C: an interrupted trial writes no record (SIGTERM would record a failure)
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGINT)
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        raise
    return results


def _collect(job: dict[str, Any], exitcode: int | None, started: str) -> dict[str, Any]:
    """The record the trial's process wrote; a ``failed`` one written here when the process died before writing."""
    from lightning_embinit.studies.trial import failed_record, own_record

    record = own_record(job)
    if record is not None:
        return record
    how = f"code {exitcode}"
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in {s.value for s in signal.Signals} else str(-exitcode)
        how = f"signal {name}" + (" (killed: out of memory?)" if -exitcode == signal.SIGKILL else "")
    log = Path(job["log_file"])
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.exists() else []
    message = f"the trial's process ended with {how} before writing its record"
    return failed_record(job, "TrialProcessDied", message, "\n".join(tail), started)
