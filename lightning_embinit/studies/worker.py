"""The process one trial runs in: its output to the trial's log, its threads and GPU, then :func:`~.trial.run_trial`.
The local engine's trial process ends itself when the sweep that started it is gone; a Ray actor that runs one
trial after another puts back what each changed (:func:`trial_process_state`)."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from lightning_embinit.host_memory import keep_freed_memory_for_training
from lightning_embinit.studies.trial import run_trial

PARENT_CHECK_S = 1.0


def _end_with(pid: int) -> None:
    """Exit as soon as process ``pid`` (the sweep) or this process's parent is gone: a killed sweep leaves no
    trial running."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(70)
            except PermissionError:
                pass
            if os.getppid() != parent:
                os._exit(70)
            time.sleep(PARENT_CHECK_S)

    threading.Thread(target=watch, name="embinit-sweep-watch", daemon=True).start()


def enter_job(job: Mapping[str, Any], log_file: str | None = None) -> None:
    """This process set up for a trial's ``job``: the sweep's working directory (relative data paths in the study
    resolve from it, where it exists), fds 1 and 2 (and so ``print``, warnings, Lightning's logging) into
    ``log_file`` (default: the job's), the job's thread budget for torch, OpenMP, MKL and tokenizers, and freed memory
    kept for reuse (:mod:`lightning_embinit.host_memory`)."""
    if job.get("cwd") and os.path.isdir(job["cwd"]):
        os.chdir(job["cwd"])
    log_file = log_file or job["log_file"]
    os.makedirs(os.path.dirname(log_file), exist_ok=True)
    descriptor = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    os.close(descriptor)
    threads = int(job["threads"])
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(threads)
    keep_freed_memory_for_training()
    with contextlib.suppress(RuntimeError):  # torch refuses once inter-op work has started
        torch.set_num_interop_threads(threads)


def run_job(job: Mapping[str, Any]) -> None:
    """Run one trial as the local engine hands it over: ``trial`` (its dict), ``results_dir``, ``run_id``,
    ``log_file``, ``threads``, ``gpu`` (None: leave CUDA_VISIBLE_DEVICES), ``sweep_pid``, and the sweep's
    ``environment`` and ``cwd`` (which replace those this process inherited from the server it was forked from)."""
    os.environ.clear()
    os.environ.update(job["environment"])
    if job["gpu"] is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(job["gpu"])
    enter_job(job)
    _end_with(int(job["sweep_pid"]))
    try:
        run_trial(job["trial"], job["results_dir"], run_id=job["run_id"])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


@contextlib.contextmanager
def trial_process_state() -> Iterator[None]:
    """Run the block as a trial in a process that runs more than one (Tune's ``reuse_actors``), and put back after it
    what a trial changes process-wide: the environment (``enter_job``'s thread variables, Lightning's
    ``PL_GLOBAL_SEED``), the working directory, fds 1 and 2, the warning filters, torch's deterministic-algorithm,
    cuDNN and float32-matmul settings (Lightning's Trainer sets them globally). Entering also forgets which warnings
    were shown once, so each trial's log has the warnings it would have in a process of its own."""
    environment, cwd = dict(os.environ), os.getcwd()
    flags = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.get_float32_matmul_precision(),
    )
    sys.stdout.flush()
    sys.stderr.flush()
    output = (os.dup(1), os.dup(2))
    try:
        with warnings.catch_warnings():  # entering invalidates every module's registry of warnings shown once
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for descriptor, saved in zip((1, 2), output):
            os.dup2(saved, descriptor)
            os.close(saved)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environment)
        torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = flags[2], flags[3]
        torch.set_float32_matmul_precision(flags[4])
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
