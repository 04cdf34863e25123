"""What the callbacks need to know about Lightning's strategies and ``configure_model``.

Tables a module creates in ``configure_model`` (Lightning's advice for large models, a must under
``ModelParallelStrategy``) exist from ``on_fit_start`` on, after the strategy has materialized meta-device layers,
wrapped the model and created the optimizers; no callback hook runs in between. So a table built then is written in
place (optimizers and wrappers keep their references) and, under a DDP wrapper, frozen by a gradient mask rather
than ``requires_grad=False`` (:func:`wrapped_for_ddp`).
"""

from __future__ import annotations

from collections.abc import Sequence

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy, Strategy
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lightning_embinit.init.host import select_slots
from lightning_embinit.init.sharding import is_meta

SUPPORTED = (
    "single device, DDP (ddp, ddp_spawn), and ModelParallelStrategy (FSDP2: fully_shard in configure_model; "
    "tensor parallelism)"
)


def tables_ready(module: nn.Module, names: Sequence[str] | None) -> bool:
    """Whether the selected tables exist and hold values (not on the meta device) now, at ``setup``.

    False when they may still come: the module defines ``configure_model`` (tables created there), or
    a table is on the meta device (the strategy materializes it). Otherwise a missing table raises now.
    """
    try:
        slots = select_slots(module, names)
    except (ValueError, AttributeError):  # AttributeError: embedding_slots() names a table configure_model makes
        if isinstance(module, LightningModule) and type(module).configure_model is not LightningModule.configure_model:
            return False  # a module with its own configure_model, which may create the tables
        raise
    return not any(is_meta(slot.weight) for slot in slots.values())


def check_no_meta(module: nn.Module, names: Sequence[str] | None, strategy: Strategy) -> None:
    """Raise when a selected table is still on the meta device once the strategy has set the model up."""
    meta = [name for name, slot in select_slots(module, names).items() if is_meta(slot.weight)]
    if meta:
        raise ValueError(
            f"embedding tables {', '.join(meta)} are still on the meta device after {type(strategy).__name__} set the "
            "model up, so there is nothing to write into: Lightning materializes meta-device layers under "
            "ModelParallelStrategy; under other strategies create the tables on a real device (Trainer.init_module() "
            "or configure_model without torch.device('meta'))"
        )


def check_strategy(strategy: Strategy, *, deferred: bool = False) -> None:
    """Refuse strategies whose tables the callback cannot write, naming what works instead.

    ``deferred``: the tables are written after the strategy's setup (they came from ``configure_model``).
    """
    if isinstance(strategy, FSDPStrategy):
        raise ValueError(
            "EmbeddingInitCallback does not support FSDPStrategy (FSDP1): it flattens each table into a FlatParameter "
            "shard that no rank holds as a table. Use ModelParallelStrategy with torch.distributed.fsdp.fully_shard "
            f"in configure_model (FSDP2: each table a DTensor, written shard by shard), or DDP. Supported: {SUPPORTED}."
        )
    if isinstance(strategy, DeepSpeedStrategy) and (deferred or strategy.zero_stage_3):
        why = (
            "ZeRO stage 3 partitions every table"
            if strategy.zero_stage_3
            else (
                "the tables were created in configure_model, and DeepSpeed copies them into its fp32 master weights "
                "before any callback hook runs, so a later write would be undone by the first step"
            )
        )
        raise ValueError(
            f"EmbeddingInitCallback does not support DeepSpeedStrategy here: {why}. Use ModelParallelStrategy "
            "(FSDP2) or DDP, or DeepSpeed stage 1 or 2 with the tables created in the module's __init__ "
            f"(built at setup, before DeepSpeed starts). Supported: {SUPPORTED}."
        )


def wrapped_for_ddp(trainer: Trainer) -> bool:
    """Whether the strategy wrapped the model in ``DistributedDataParallel`` (whose reducer already counts every
    trainable parameter, so a table frozen later must keep ``requires_grad``)."""
    return isinstance(getattr(trainer.strategy, "model", None), DistributedDataParallel)
