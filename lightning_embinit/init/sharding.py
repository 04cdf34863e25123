"""Embedding tables sharded over ranks: ``DTensor`` weights, as FSDP2's ``fully_shard`` and tensor parallelism make.
Each rank writes its own slice of the whole matrix without communication (:func:`write_whole`); reading the whole
table back (:func:`whole_table`, :func:`whole_slot`) is a collective. Plain tensors pass through unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist
from torch import nn

from lightning_embinit.init.host import EmbeddingSlot

if dist.is_available():
    from torch.distributed.tensor import DTensor, distribute_tensor
else:  # pragma: no cover - builds of torch without torch.distributed have no DTensor either
    DTensor = None  # type: ignore[assignment,misc]


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a ``DTensor`` (its rows or columns may live on other ranks)."""
    return DTensor is not None and isinstance(tensor, DTensor)


def is_meta(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` (or a DTensor's local slice) is on the meta device: it has a shape but no values."""
    local = tensor.to_local() if is_sharded(tensor) else tensor
    return bool(local.is_meta)


def whole_table(weight: torch.Tensor) -> torch.Tensor:
    """The whole table, detached: a DTensor is gathered (every rank of its mesh must call this)."""
    return weight.detach().full_tensor() if is_sharded(weight) else weight.detach()


@torch.no_grad()
def write_whole(weight: torch.Tensor, full: torch.Tensor) -> None:
    """Copy the whole matrix ``full`` into ``weight`` in place (casting), or a DTensor's own slice of it."""
    if tuple(full.shape) != tuple(weight.shape):
        raise ValueError(
            f"cannot write a matrix of shape {tuple(full.shape)} into a table of shape {tuple(weight.shape)}"
        )
    if is_sharded(weight):
        # this rank's slice, cut as the weight's own mesh and placements cut it: no communication
        weight.to_local().copy_(
            distribute_tensor(full, weight.device_mesh, weight.placements, src_data_rank=None).to_local()
        )
    else:
        weight.copy_(full)


def whole_slot(slot: EmbeddingSlot) -> EmbeddingSlot:
    """``slot``, or for a sharded table a copy whose (frozen) embedding holds the gathered whole table (for diagnostics;
    every rank of the mesh must call it)."""
    if not is_sharded(slot.weight):
        return slot
    full = whole_table(slot.weight)
    embedding = nn.Embedding(slot.num_embeddings, slot.embedding_dim, _weight=full, _freeze=True)
    return replace(slot, embedding=embedding)
