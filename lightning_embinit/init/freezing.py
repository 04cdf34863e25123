"""Whether an embedding table trains: frozen whole, or frozen only in its pre-trained rows; and which tables a writer
may change (:func:`tables_to_write`: a frozen table only when named).

Partial freezing is a gradient mask (a hook on the weight), which keeps SGD and Adam from moving the rows; for
optimizers that also decay weights the rows are pinned back after every step (:func:`pin_rows`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from lightning_embinit.init.families import recognized_models
from lightning_embinit.init.host import EmbeddingHost, EmbeddingSlot
from lightning_embinit.init.recipe import Trainable
from lightning_embinit.init.sharding import is_meta, is_sharded

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


def check_not_meta(slot: EmbeddingSlot, what: str) -> None:
    """Refuse a table on the meta device (a shape without values), naming the slot and what to do."""
    if is_meta(slot.weight):
        raise ValueError(
            f"slot {slot.name!r} is on the meta device (a shape without values), so there is nothing to {what} yet: "
            "materialize the model first (model.to_empty(device=...), then its own initialization), or build the "
            "tables in the LightningModule's configure_model and let fit materialize them (the callbacks write and "
            "measure them once it has); nothing was changed"
        )


def slot_models(root: nn.Module, slots: Mapping[str, EmbeddingSlot]) -> dict[str, str]:
    """Slot name → the path of the recognized model that holds its table, when ``root`` (no ``EmbeddingHost``) holds
    several recognized models (a teacher beside a student); ``{}`` otherwise."""
    if isinstance(root, EmbeddingHost):
        return {}
    models = recognized_models(root)
    if len(models) < 2:
        return {}
    owners = {}
    for path, model, _ in models:
        inside = {id(module) for module in model.modules()}
        owners |= {name: path for name, slot in slots.items() if id(slot.embedding) in inside}
    return owners


def tables_to_write(root: nn.Module, slots: Mapping[str, EmbeddingSlot]) -> tuple[dict[str, EmbeddingSlot], list[str]]:
    """Of the tables found without ``slots=``, those to write, and the frozen ones left alone (their names): a table
    with ``requires_grad=False`` (a frozen pre-trained teacher's) is written only when named. ``ValueError`` when every
    table is frozen, or when the rest belong to more than one recognized model (which to write is the user's call)."""
    frozen = [name for name, slot in slots.items() if not slot.weight.requires_grad]
    kept = {name: slot for name, slot in slots.items() if name not in frozen}
    if not kept:
        raise ValueError(
            f"every embedding table of {type(root).__name__} is frozen (requires_grad=False: {', '.join(frozen)}), and "
            "a frozen table is written only when named: pass slots=[...] to write it anyway; nothing was written"
        )
    owners = slot_models(root, kept)
    models: dict[str, list[str]] = {}
    for name, path in owners.items():
        models.setdefault(path, []).append(name)
    if len(models) > 1:
        listed = "; ".join(
            f"{path or 'the module itself'} ({type(root.get_submodule(path)).__name__}: {', '.join(names)})"
            for path, names in models.items()
        )
        raise ValueError(
            f"{type(root).__name__} holds {len(models)} models with trainable token tables: {listed}. Which to "
            f"initialize is your call (a pre-trained teacher beside a student must keep its weights): name the "
            f"tables with slots=[...], e.g. slots={list(models[list(models)[-1]])!r}, or freeze the teacher "
            "(teacher.requires_grad_(False): a frozen table is left alone); nothing was written"
        )
    return kept, frozen


def reference_models(root: nn.Module, slots: Mapping[str, EmbeddingSlot]) -> list[str]:
    """The slots of recognized models none of whose parameters trains (a frozen teacher), when ``root`` holds several
    recognized models and some other slot remains: what a monitor leaves out unless named."""
    owners = slot_models(root, slots)
    frozen_models = {
        path for path in set(owners.values()) if not any(p.requires_grad for p in root.get_submodule(path).parameters())
    }
    left = [name for name, path in owners.items() if path in frozen_models]
    return left if len(left) < len(slots) else []


def measured_slots(root: nn.Module, slots: Mapping[str, EmbeddingSlot]) -> tuple[dict[str, EmbeddingSlot], list[str]]:
    """The slots a monitor measures when none is named, and the names it leaves out: a frozen reference model's
    (:func:`reference_models`)."""
    left = reference_models(root, slots)
    return {name: slot for name, slot in slots.items() if name not in left}, left
