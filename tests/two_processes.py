"""The 2-process CPU DDP that the multi-process tests run (gloo), with ranks that start warm.

Lightning's ``ddp_spawn`` starts each rank as a fresh interpreter that imports torch and Lightning again (5-6 s a
rank on the project's 2-core machine). :func:`ddp_strategy` is the same :class:`DDPStrategy` and launcher with
``start_method="forkserver"``: the ranks fork from the server that ``embinit sweep`` starts for its trials
(:func:`lightning_embinit.studies.local.start_trial_server`: torch, Lightning and the package imported once per test
process; spawn where there is no forkserver). The server runs no torch operation, so the ranks start with no OpenMP
thread pool (``ddp_fork`` from the test process itself deadlocks in the ranks' first ``layer_norm``). What differs
from ``ddp_spawn``: the ranks do not receive the test process's global state (RNG states, deterministic flags) or
its environment changes made after the server started; Lightning hands the ranks the trainer, model and port either
way. ``test_ddp.py`` keeps one test on ``ddp_spawn`` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.multiprocessing
from lightning.pytorch.strategies import DDPStrategy

from lightning_embinit.studies.local import start_method, start_trial_server


def ddp_strategy(**options) -> DDPStrategy:
    """:class:`DDPStrategy` for 2 CPU processes on gloo whose ranks fork from the preloaded trial server."""
    start_trial_server()
    return DDPStrategy(start_method=start_method(), process_group_backend="gloo", **options)


def run_two_ranks(worker: Callable[..., None], *args: Any) -> None:
    """``torch.multiprocessing.spawn(worker, args, nprocs=2)`` with the ranks forked from the preloaded trial server."""
    start_trial_server()
    torch.multiprocessing.start_processes(worker, args=args, nprocs=2, start_method=start_method())
