"""The process one trial of the local engine runs in: its output to the trial's log, its threads and GPU, then
:func:`~.trial.run_trial`. It ends itself when the sweep that started it is gone."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import torch

from lightning_embinit.studies.trial import run_trial

PARENT_CHECK_S = 1.0


def redirect_output(path: str) -> None:
    """fds 1 and 2 (and so ``print``, warnings, Lightning's logging) into ``path``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    os.close(descriptor)


def limit_threads(threads: int) -> None:
    """The trial's thread budget for torch, OpenMP, MKL and tokenizers."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:
        pass


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


def run_job(job: Mapping[str, Any]) -> None:
    """Run one trial as the local engine hands it over: ``trial`` (its dict), ``results_dir``, ``run_id``,
    ``log_file``, ``threads``, ``gpu`` (None: leave CUDA_VISIBLE_DEVICES), ``sweep_pid``, and the sweep's
    ``environment`` and ``cwd`` (which replace those this process inherited from the server it was forked from)."""
    if job.get("environment") is not None:
        os.environ.clear()
        os.environ.update(job["environment"])
    if job.get("cwd"):
        os.chdir(job["cwd"])
    redirect_output(job["log_file"])
    _end_with(int(job["sweep_pid"]))
    if job.get("gpu") is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(job["gpu"])
    limit_threads(int(job["threads"]))
    try:
        run_trial(job["trial"], job["results_dir"], run_id=job["run_id"])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
