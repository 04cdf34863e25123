"""The steps of :mod:`lightning_embinit.init.engine` for one slot: build and check its matrix (shape, finiteness,
coverage) before any weight is written, write it, report it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.recipe import InitRecipe
from lightning_embinit.init.sharding import is_sharded, whole_table, write_whole
from lightning_embinit.init.sources.base import SourceMatrix, SourceRequest
from lightning_embinit.init.sources.vector_cache import cache_directory
from lightning_embinit.init.statistics import (
    MatrixStats,
    embedding_statistics,
    isotropy,
    matrix_statistics,
    rows_without,
)
from lightning_embinit.init.transforms import affine


@dataclass
class BuiltSlot:
    """A slot's finished matrix and how it was made, ready to be written."""

    slot: str
    matrix: SourceMatrix
    source: str
    transforms: list[str] = field(default_factory=list)
    statistics: MatrixStats | None = None


def check_matrix(
    weight: torch.Tensor, num_embeddings: int, embedding_dim: int, *, where: str, padding_idx: int | None = None
) -> MatrixStats:
    """Raise ``ValueError`` unless ``weight`` is a finite (N, D) matrix; return its statistics. ``padding_idx``: the
    slot's padding row that ``weight`` lacks, so errors name rows by the slot's own numbering."""
    if tuple(weight.shape) != (num_embeddings, embedding_dim):
        raise ValueError(
            f"{where}: built a matrix of shape {tuple(weight.shape)} "
            f"for a table of shape ({num_embeddings}, {embedding_dim})"
        )
    stats = matrix_statistics(weight)
    if not all(math.isfinite(value) for value in (stats.min, stats.max, stats.mean, stats.std)):
        bad = (~torch.isfinite(weight).all(dim=1)).nonzero().flatten()
        if padding_idx is not None:
            bad = bad + (bad >= padding_idx).long()
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
    source = recipe.resolved_source
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
    with cache_directory(recipe.cache_directory()):
        matrix = source.build(request)
        if tuple(matrix.weight.shape) != (slot.num_embeddings, slot.embedding_dim):
            check_matrix(matrix.weight, slot.num_embeddings, slot.embedding_dim, where=where)
        if matrix.coverage is not None and matrix.coverage.found == 0:
            raise ValueError(f"{where}: the source covers none of the slot's {matrix.coverage.total} tokens")
        steps = recipe.steps()
        body = matrix  # without the (zeroed) padding row, which transforms and their statistics never see
        if slot.padding_idx is not None:  # no local keeps the copy alive once a transform replaces it
            body = replace(
                matrix,
                weight=rows_without(matrix.weight, slot.padding_idx),
                pretrained_rows=rows_without(matrix.pretrained_rows, slot.padding_idx),
            )
        for step in steps:
            body = step(body, request)
    statistics = check_matrix(body.weight, *body.weight.shape, where=where, padding_idx=slot.padding_idx)
    matrix = _with_padding(matrix, body, slot.padding_idx)
    if source.is_pretrained and not bool(matrix.pretrained_rows.any()):
        raise ValueError(f"{where}: the source covers none of the slot's {slot.num_embeddings} tokens (padding aside)")
    return BuiltSlot(slot.name, matrix, matrix.description, [step.describe() for step in steps], statistics)


def _with_padding(full: SourceMatrix, body: SourceMatrix, padding_idx: int | None) -> SourceMatrix:
    """``body``'s rows put back around a zero padding row, which never counts as pre-trained."""
    if padding_idx is None:
        return body
    padding_idx %= full.weight.shape[0]
    keep = torch.ones(full.weight.shape[0], dtype=torch.bool)
    keep[padding_idx] = False
    weight, rows = full.weight, torch.zeros_like(keep)
    transformed_in_place = padding_idx in (0, weight.shape[0] - 1) and (
        body.weight.data_ptr() == rows_without(weight, padding_idx).data_ptr()
    )
    if not transformed_in_place:
        weight[keep] = body.weight
    weight[padding_idx] = 0
    rows[keep] = body.pretrained_rows
    return replace(body, weight=weight, pretrained_rows=rows)


def write_slot(slot: EmbeddingSlot, weight: torch.Tensor) -> None:
    """Copy ``weight`` into the table (its dtype and device; a ``DTensor``, its slice) with a zero padding row (zeroed
    in ``weight`` too); a bf16 table gets stochastically rounded values (fixed seed: every rank writes the same)."""
    if slot.weight.dtype == torch.bfloat16 and weight.dtype != torch.bfloat16:
        weight = affine(weight, 1.0, 0.0, out=torch.empty(weight.shape, dtype=torch.bfloat16))
    if slot.padding_idx is not None:
        weight[slot.padding_idx] = 0
    write_whole(slot.weight, weight)


def slot_report(
    slot: EmbeddingSlot, built: BuiltSlot | None, recipe: InitRecipe, *, seed: int | None
) -> dict[str, Any]:
    """One row of the init report: how the table was born, its statistics as written (every rank, if sharded)."""
    positional = slot.positional_encoding() if slot.positional_encoding is not None else None
    report: dict[str, Any] = {
        "slot": slot.name,
        "source": built.source if built else str(recipe.source),
        "source_name": recipe.resolved_source.name if built else str(recipe.source),
        "transforms": list(built.transforms) if built else [],
        "num_embeddings": slot.num_embeddings,
        "embedding_dim": slot.embedding_dim,
        "trainable": recipe.trainable if recipe.trainable is not True else bool(slot.weight.requires_grad),
        "tied_modules": list(slot.tied_modules),
        "seed": seed,
        "family": slot.family,
        "positions": slot.positions,
        "input_scale_found_by": slot.input_scale_found_by,
        "positions_found_by": slot.positions_found_by,
    }
    statistics = None  # the built matrix's own, when writing cannot change them (same dtype, not sharded)
    if built and not is_sharded(slot.weight) and slot.weight.dtype == built.matrix.weight.dtype:
        statistics = built.statistics
    if statistics is None:  # a sharded table is gathered on every rank alike, so the collective matches
        statistics = matrix_statistics(rows_without(whole_table(slot.weight), slot.padding_idx))
    report.update(embedding_statistics(statistics, input_scale=float(slot.input_scale), positional_encoding=positional))
    report.update(isotropy(rows_without(built.matrix.weight if built else whole_table(slot.weight), slot.padding_idx)))
    coverage = built.matrix.coverage if built else None
    report["coverage"] = coverage.as_dict() if coverage is not None else None
    report["pretrained_rows"] = int(built.matrix.pretrained_rows.sum()) if built else 0
    return report
