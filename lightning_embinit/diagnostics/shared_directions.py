"""Rows that share directions, and what removing them would do to a tied LM's start
(docs/concepts.md#shared-directions).

The init report measures the table's isotropy (:func:`~lightning_embinit.init.statistics.isotropy`: the top principal
direction's share of the variance against i.i.d. rows', the mean cosine between rows). For a tied head,
:func:`predict_transforms` applies each transform of :mod:`lightning_embinit.init.directions` to a copy of the table,
standardizes it to Xavier's std ([K] §3.4) as ``InitRecipe(transforms=[...], standardize="xavier")`` would, and
evaluates its random-token loss with :func:`~lightning_embinit.diagnostics.initial_loss.random_token_loss` — before
any training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from lightning_embinit.diagnostics.initial_loss import random_token_loss
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.sharding import whole_table
from lightning_embinit.init.statistics import default_top_k, principal_directions, rows_without
from lightning_embinit.init.transforms import build_transform, resolve_target, standardize

SHARE_FACTOR = 5.0
"""The rows share directions when the top direction holds more than this multiple of i.i.d. rows' share…"""
COSINE_LIMIT = 0.1
"""…or when the mean cosine between rows exceeds this."""
CANDIDATES = ((), ("center",), ("remove_top",), ("whiten",))
"""The transform lists :func:`predict_transforms` evaluates, each followed by ``standardize:xavier``; ``()`` is the
standardization alone, the baseline."""
LOSS_MULTIPLY_ADDS = 1 << 32
"""Multiply-adds one random-token estimate may cost (samples · N · D); fewer samples for a large table."""
MAX_SAMPLES = 2048


def shares_directions(report: Mapping[str, Any]) -> bool | None:
    """Whether the report's isotropy says the rows share directions (:data:`SHARE_FACTOR`, :data:`COSINE_LIMIT`);
    None when the report has no isotropy."""
    if report.get("top_share") is None or report.get("mean_cosine") is None:
        return None
    top_share, cosine = report["top_share"], report["mean_cosine"]
    return bool(top_share > SHARE_FACTOR * report["iid_top_share"] or abs(cosine) > COSINE_LIMIT)


def estimate_samples(num_embeddings: int, embedding_dim: int) -> int:
    """Draws for :func:`random_token_loss`: ``MAX_SAMPLES``, fewer (at least 128) when N·D is large."""
    return max(128, min(MAX_SAMPLES, LOSS_MULTIPLY_ADDS // (num_embeddings * embedding_dim)))


def slot_loss_estimate(slot: EmbeddingSlot, weight: torch.Tensor | None = None, **options: Any) -> float:
    """:func:`random_token_loss` of ``weight`` (default: the slot's table, padding row included) with the slot's
    input scale, positional encoding (its first ``max_position`` rows) and padding row."""
    weight = whole_table(slot.weight) if weight is None else weight
    positional = slot.positional_encoding() if slot.positional_encoding is not None else None
    max_position = options.pop("max_position", None)
    if positional is not None and max_position is not None:
        positional = positional[:max_position]
    return random_token_loss(
        weight,
        input_scale=float(slot.input_scale),
        positional=positional,
        padding_idx=slot.padding_idx,
        samples=estimate_samples(*weight.shape),
        **options,
    )


@torch.no_grad()
def predict_transforms(
    slot: EmbeddingSlot,
    *,
    pretrained_rows: torch.Tensor | None = None,
    target: str = "xavier",
    max_position: int | None = None,
) -> list[dict[str, Any]]:
    """For each of :data:`CANDIDATES`: ``{"transforms": [..., "standardize:<target>"], "random_token_loss": x}``, the
    table's random-token loss after those transforms (fitted on ``pretrained_rows`` when given, as the pipeline
    fits them; else every non-padding row) and the standardization. The principal directions are computed once."""
    full = whole_table(slot.weight).float()
    table = rows_without(full, slot.padding_idx).clone()
    rows = None if pretrained_rows is None else rows_without(pretrained_rows.bool().cpu(), slot.padding_idx)
    if rows is not None and not bool(rows.any()):
        rows = None
    directions = principal_directions(table, rows)
    pretrained = torch.ones(table.shape[0], dtype=torch.bool) if rows is None else rows
    predictions = []
    for names in CANDIDATES:
        transformed = table.clone()
        for name in names:  # as the pipeline applies them (OOV rows re-centred), the directions computed once
            step = build_transform(name)
            transformed = step.apply_to_source(transformed, pretrained, directions=directions, generator=None)
        spread = resolve_target(target, *full.shape)  # the whole table's shape, as the pipeline's standardize
        standardized = standardize(transformed, spread) if float(transformed.std()) > 0 else transformed
        written = torch.zeros_like(full)
        keep = torch.ones(full.shape[0], dtype=torch.bool)
        if slot.padding_idx is not None:
            keep[slot.padding_idx] = False
        written[keep] = standardized.to(written.device)
        loss = slot_loss_estimate(slot, written, max_position=max_position)
        predictions.append({"transforms": [*names, f"standardize:{target}"], "random_token_loss": loss})
    return predictions


def describe_predictions(predictions: list[dict[str, Any]], embedding_dim: int) -> str:
    """The countermeasure's text: each transform list with its predicted random-token loss, best first."""
    baseline, *rest = predictions
    k = default_top_k(embedding_dim)
    ranked = sorted(rest, key=lambda p: p["random_token_loss"] if math.isfinite(p["random_token_loss"]) else math.inf)
    named = [
        f"transforms=[{p['transforms'][0]!r}] (predicted random-token loss {p['random_token_loss']:.2f})"
        for p in ranked
    ]
    return (
        "remove the shared directions before standardize='xavier' ([K]): "
        + ", ".join(named)
        + f"; standardized alone {baseline['random_token_loss']:.2f} (remove_top takes k = D/100 = {k} by default; "
        "--transforms in embinit inspect)"
    )
