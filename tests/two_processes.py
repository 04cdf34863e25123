"""The 2-process CPU DDP that the multi-process tests run (gloo), with ranks that start warm.

Lightning's ``ddp_spawn`` starts each rank as a fresh interpreter that imports torch and Lightning again (5-6 s a
rank on the project's 2-core machine). :func:`ddp_strategy` is the same :class:`DDPStrategy` and launcher with
``start_method="forkserver"``: ``multiprocessing``'s fork server imports :data:`PRELOAD` once per test process and
forks each rank from it. The server runs no torch operation, so the ranks start with no OpenMP thread pool
(``ddp_fork`` from the test process itself deadlocks in the ranks' first ``layer_norm``). What differs from
``ddp_spawn``: the ranks do not receive the test process's global state (RNG states, deterministic flags) or its
environment changes made after the server started; Lightning hands the ranks the trainer, model and port either
way. ``test_ddp.py`` keeps one test on ``ddp_spawn`` itself.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

import torch.multiprocessing
from lightning.pytorch.strategies import DDPStrategy

PRELOAD = ("torch", "lightning.pytorch", "lightning_embinit", "transformers")


def ddp_strategy(**options) -> DDPStrategy:
    """:class:`DDPStrategy` for 2 CPU processes on gloo whose ranks fork from a preloaded server."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    return DDPStrategy(start_method="forkserver", process_group_backend="gloo", **options)


def run_two_ranks(worker: Callable[..., None], *args: Any) -> None:
    """``torch.multiprocessing.spawn(worker, args, nprocs=2)`` with the ranks forked from the preloaded server."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    torch.multiprocessing.start_processes(worker, args=args, nprocs=2, start_method="forkserver")
