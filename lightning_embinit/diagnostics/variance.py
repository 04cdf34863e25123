"""Token table against positional encoding: the statistics of [K] Tables 2, 6, 8 for one slot.

The numbers are those of the init report (:func:`~lightning_embinit.init.statistics.embedding_statistics`,
same code path): min, max, mean, std of the table over its non-padding rows, raw and multiplied
by the slot's input scale s; the positional encoding's std and range; and the ratio
σ(s · X) / σ(P). Far above 1 the token vectors drown the position signal, far below 1 the
positions drown the word–word structure ("absorption"; docs/concepts.md#table-statistics, #absorption).
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.sharding import is_sharded
from lightning_embinit.init.statistics import embedding_statistics, rows_without


def positional_matrix(slot: EmbeddingSlot) -> torch.Tensor | None:
    """The (L, D) positional encoding the slot's model adds, detached, or None."""
    if slot.positional_encoding is None:
        return None
    encoding = slot.positional_encoding()
    if encoding is None:
        return None
    if encoding.dim() != 2 or encoding.shape[1] != slot.embedding_dim:
        raise ValueError(
            f"slot {slot.name!r}: positional_encoding() returned shape {tuple(encoding.shape)}, "
            f"expected (length, {slot.embedding_dim})"
        )
    return encoding.detach()


def no_positions_note(slot: EmbeddingSlot) -> str:
    """Why a slot has no positional numbers, in words: what its model does instead (a recognized family's rotary,
    ALiBi or relative-bias positions), or that the slot declares no additive encoding."""
    if slot.positions is not None:
        return f"no additive positional encoding ({slot.positions.removeprefix('none: ')})"
    return "no additive positional encoding declared for this slot (EmbeddingSlot.positional_encoding)"


def token_rows(slot: EmbeddingSlot) -> torch.Tensor:
    """The slot's table without its padding row (a detached view when the padding row is first or last)."""
    weight = slot.weight.detach()
    if is_sharded(weight):
        raise ValueError(
            f"slot {slot.name!r}: the table is sharded over ranks (a DTensor); gather it first with "
            "lightning_embinit.init.sharding.whole_slot(slot), on every rank"
        )
    if weight.dim() != 2 or tuple(weight.shape) != (slot.num_embeddings, slot.embedding_dim):
        raise ValueError(
            f"slot {slot.name!r}: the weight has shape {tuple(weight.shape)}, not ({slot.num_embeddings}, "
            f"{slot.embedding_dim}); diagnostics need the whole table on one process: FSDP1 and DeepSpeed stage 3 "
            "split it into flat shards (use FSDP2, whose DTensor tables "
            "lightning_embinit.init.sharding.whole_slot gathers)"
        )
    return rows_without(weight, slot.padding_idx)


def slot_statistics(slot: EmbeddingSlot, positional: torch.Tensor | None = None) -> dict[str, Any]:
    """Raw and scaled table statistics, PE std/min/max/range and the ratio σ(s · X) / σ(P) for ``slot``.

    ``positional`` may pass the slot's positional matrix when the caller already has it.
    """
    if positional is None:
        positional = positional_matrix(slot)
    report = embedding_statistics(token_rows(slot), input_scale=float(slot.input_scale), positional_encoding=positional)
    report["pe_range"] = None if report["pe_std"] is None else report["pe_max"] - report["pe_min"]
    return report
