"""Build, check, write and freeze embedding tables: the torch-only path the callback adapts.

Every slot's matrix is built and checked (shape, finiteness) before any weight is written, so
a failure leaves the model as it was. :func:`initialize_embeddings` is the whole path for
users without Lightning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.recipe import InitRecipe
from lightning_embinit.init.sources.base import SourceMatrix, SourceRequest
from lightning_embinit.init.statistics import MatrixStats, embedding_statistics, matrix_statistics


@dataclass
class BuiltSlot:
    """A slot's finished matrix and how it was made, ready to be written."""

    slot: str
    matrix: SourceMatrix
    source: str
    transforms: list[str] = field(default_factory=list)
    statistics: MatrixStats | None = None

    def written_statistics(self, slot: EmbeddingSlot) -> MatrixStats | None:
        """The statistics of the table as written, when writing cannot change them (no padding row, same dtype)."""
        if self.statistics is None or slot.padding_idx is not None or slot.weight.dtype != self.matrix.weight.dtype:
            return None
        return self.statistics


def check_matrix(weight: torch.Tensor, num_embeddings: int, embedding_dim: int, *, where: str) -> MatrixStats:
    """Raise ``ValueError`` unless ``weight`` is a finite (N, D) matrix; return its statistics."""
    if tuple(weight.shape) != (num_embeddings, embedding_dim):
        raise ValueError(
            f"{where}: built a matrix of shape {tuple(weight.shape)} for a table of shape ({num_embeddings}, {embedding_dim})"
        )
    stats = matrix_statistics(weight)
    if not all(math.isfinite(value) for value in (stats.min, stats.max, stats.mean, stats.std)):
        bad = (~torch.isfinite(weight).all(dim=1)).nonzero().flatten()
        raise ValueError(
            f"{where}: {bad.numel()} rows contain NaN or inf (first rows: {bad[:5].tolist()}); nothing was written"
        )
    return stats


def build_slot(
    slot: EmbeddingSlot,
    recipe: InitRecipe,
    *,
    generator: torch.Generator | None = None,
    corpus: Callable[[], Iterable[Sequence[str]]] | None = None,
) -> BuiltSlot:
    """The source's matrix for ``slot`` after the recipe's transforms, checked; no weight is touched."""
    source = recipe.validate(slot.num_embeddings, slot.embedding_dim, slot=slot.name)
    request = SourceRequest(
        slot_name=slot.name,
        num_embeddings=slot.num_embeddings,
        embedding_dim=slot.embedding_dim,
        tokens=slot.tokens,
        padding_idx=slot.padding_idx,
        special_tokens=dict(slot.special_tokens),
        generator=generator,
        corpus=corpus,
    )
    where = f"slot {slot.name!r}, source {source.name!r}"
    matrix = source.build(request)
    if tuple(matrix.weight.shape) != (slot.num_embeddings, slot.embedding_dim):
        check_matrix(matrix.weight, slot.num_embeddings, slot.embedding_dim, where=where)
    if matrix.coverage is not None and matrix.coverage.found == 0:
        raise ValueError(f"{where}: the source covers none of the slot's {matrix.coverage.total} tokens")
    steps = recipe.steps()
    for step in steps:
        matrix = step(matrix, request)
    statistics = check_matrix(matrix.weight, slot.num_embeddings, slot.embedding_dim, where=where)
    if slot.padding_idx is not None and bool(matrix.pretrained_rows[slot.padding_idx]):
        matrix.pretrained_rows = matrix.pretrained_rows.clone()
        matrix.pretrained_rows[slot.padding_idx] = False  # written as zeros, whatever the source held
    return BuiltSlot(slot.name, matrix, matrix.description, [step.describe() for step in steps], statistics)


@torch.no_grad()
def write_slot(slot: EmbeddingSlot, weight: torch.Tensor) -> None:
    """Copy ``weight`` into the table (casting to its dtype and device) and zero the padding row."""
    slot.weight.copy_(weight)
    if slot.padding_idx is not None:
        slot.weight[slot.padding_idx].zero_()


def freeze_rows(weight: nn.Parameter, frozen_rows: Callable[[], torch.Tensor | None]) -> RemovableHandle:
    """Zero the gradient of the rows where ``frozen_rows()`` is True (partial freezing by masking).

    The mask is read at every backward, so it may be filled after the hook is registered (as when
    a checkpoint restores it). Optimizers with decoupled weight decay (AdamW) still decay those rows.
    """

    def mask_gradient(gradient: torch.Tensor) -> torch.Tensor:
        rows = frozen_rows()
        if rows is None:
            return gradient
        keep = (~rows).to(device=gradient.device, dtype=gradient.dtype).unsqueeze(1)
        return gradient * keep

    return weight.register_hook(mask_gradient)


def slot_report(slot: EmbeddingSlot, built: BuiltSlot | None, recipe: InitRecipe, *, seed: int | None) -> dict[str, Any]:
    """One row of the init report: how the table was born and its statistics as written."""
    positional = slot.positional_encoding() if slot.positional_encoding is not None else None
    report: dict[str, Any] = {
        "slot": slot.name,
        "source": built.source if built else str(recipe.source),
        "transforms": list(built.transforms) if built else [],
        "num_embeddings": slot.num_embeddings,
        "embedding_dim": slot.embedding_dim,
        "trainable": recipe.trainable,
        "tied_modules": list(slot.tied_modules),
        "seed": seed,
    }
    report.update(
        embedding_statistics(
            slot.weight,
            input_scale=float(slot.input_scale),
            positional_encoding=positional,
            statistics=built.written_statistics(slot) if built else None,
        )
    )
    coverage = built.matrix.coverage if built else None
    report["coverage"] = coverage.as_dict() if coverage is not None else None
    report["pretrained_rows"] = int(built.matrix.pretrained_rows.sum()) if built else 0
    return report


def initialize_embeddings(
    module: nn.Module,
    recipe: InitRecipe | None = None,
    *,
    slots: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
    seed: int = 0,
    **options: Any,
) -> dict[str, dict[str, Any]]:
    """Initialize ``module``'s embedding tables without Lightning; returns the report per slot.

    ``options`` are :class:`InitRecipe` fields (``source="bert"``, ``standardize="xavier"``, ...);
    ``slots`` selects tables and may map a slot to its own overrides.
    """
    base = (recipe or InitRecipe()).updated(options, where="options")
    recipes = recipes_for_slots(base, slots)
    selected = select_slots(module, list(recipes) if recipes else None)
    generator = torch.Generator().manual_seed(seed)
    built = {name: build_slot(slot, recipes.get(name, base), generator=generator) for name, slot in selected.items()}
    reports = {}
    for name, slot in selected.items():
        write_slot(slot, built[name].matrix.weight)
        slot_recipe = recipes.get(name, base)
        if slot_recipe.trainable is False:
            slot.weight.requires_grad_(False)
        elif slot_recipe.trainable == "pretrained_rows":
            rows = built[name].matrix.pretrained_rows
            freeze_rows(slot.weight, lambda rows=rows: rows)
        reports[name] = slot_report(slot, built[name], slot_recipe, seed=seed)
    return reports


def recipes_for_slots(
    base: InitRecipe, slots: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None
) -> dict[str, InitRecipe]:
    """Slot name → recipe: ``base`` with each slot's overrides; empty when ``slots`` is None (all slots)."""
    if slots is None:
        return {}
    if isinstance(slots, str):
        slots = [slots]
    if isinstance(slots, Mapping):
        return {name: base.updated(overrides, where=f"options for slot {name!r}") for name, overrides in slots.items()}
    return {name: base for name in slots}
