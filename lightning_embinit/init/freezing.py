"""Whether an embedding table trains: frozen whole, or frozen only in its pre-trained rows.

Partial freezing is a gradient mask (a hook on the weight), which keeps SGD and Adam from moving the rows; for
optimizers that also decay weights the rows are pinned back after every step (:func:`pin_rows`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.recipe import Trainable
from lightning_embinit.init.sharding import is_sharded

FrozenRows = Callable[[], "torch.Tensor | None"]


def freeze_rows(weight: nn.Parameter, frozen_rows: FrozenRows) -> RemovableHandle:
    """Zero the gradient of the rows where ``frozen_rows()`` is True (the entries, for a 1-D bias). The mask is read
    at every backward, so it may be filled later (a restored checkpoint); a tied output layer's rows freeze too."""

    def mask_gradient(gradient: torch.Tensor) -> torch.Tensor:
        rows = frozen_rows()
        if rows is None:
            return gradient
        keep = (~rows).to(device=gradient.device, dtype=gradient.dtype)
        return gradient * keep.view(-1, *([1] * (gradient.dim() - 1)))

    return weight.register_hook(mask_gradient)


def pin_rows(optimizer: torch.optim.Optimizer, weight: nn.Parameter, frozen_rows: FrozenRows) -> list[RemovableHandle]:
    """Put the frozen rows back after every ``optimizer.step()`` when ``optimizer`` decays ``weight`` (weight decay
    moves rows even at a zero gradient; other optimizers get no hook). Their values are taken before the first step."""
    if not any(
        group.get("weight_decay", 0) and any(parameter is weight for parameter in group["params"])
        for group in optimizer.param_groups
    ):
        return []
    pinned: dict[str, torch.Tensor] = {}

    def remember(opt: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        rows = frozen_rows()
        if rows is not None and "rows" not in pinned:
            pinned["rows"] = rows.to(weight.device)
            pinned["values"] = weight.detach()[pinned["rows"]].clone()

    @torch.no_grad()
    def restore(opt: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if "rows" in pinned:
            weight[pinned["rows"]] = pinned["values"]

    return [optimizer.register_step_pre_hook(remember), optimizer.register_step_post_hook(restore)]


def check_trainability(slot: EmbeddingSlot, trainable: Trainable) -> None:
    """Refuse a freezing the table cannot take, before any weight is touched."""
    if trainable == "pretrained_rows" and is_sharded(slot.weight):
        raise ValueError(
            f"slot {slot.name!r}: trainable='pretrained_rows' needs the whole table on every rank, but it is sharded "
            "(a DTensor, as FSDP2's fully_shard makes it), whose gradient hooks never run; choose trainable=True or "
            "trainable=False for a sharded table, or train it unsharded (DDP)"
        )


def apply_trainability(
    slot: EmbeddingSlot, trainable: Trainable, pretrained_rows: FrozenRows, *, by_mask: bool = False
) -> FrozenRows | None:
    """Freeze ``slot`` as ``trainable`` says; returns the gradient mask it set (the rows to pin, :func:`pin_rows`).
    ``by_mask``: a mask over all rows for ``trainable=False`` (a table DDP already registered as trainable)."""
    if trainable == "pretrained_rows":
        mask = pretrained_rows
    elif trainable is False and by_mask:
        every_row = torch.ones(slot.num_embeddings, dtype=torch.bool)
        mask = lambda: every_row  # noqa: E731
    else:
        if trainable is False:
            slot.weight.requires_grad_(False)
        return None
    freeze_rows(slot.weight, mask)
    return mask
