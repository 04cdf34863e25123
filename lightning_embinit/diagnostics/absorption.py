"""Absorption: how much of the token signal and of the position signal survive x · s + P ([K];
docs/concepts.md#absorption).

On a sample of K non-padding rows w_i, each paired with a random position p_i, let x_i = s · w_i (s the slot's
input scale), P_i the positional row of p_i and z_i = x_i + P_i:

- semantic retention = mean_i cos(x_i, z_i): how far the sum still points along the token vector;
- positional retention = mean_i cos(P_i, z_i): the same for the position vector;
- neighbour survival = mean_i ``|N_k(x, i) ∩ N_k(z, i)|`` / k, N_k(v, i) the k nearest sampled rows of row i by
  cosine among v_1 … v_K: the share of each token's nearest-neighbour list that survives adding the positions.

For independent directions, cos(x, z) = r / √(1 + r²) and cos(P, z) = 1 / √(1 + r²) with r = ``|x| / |P|``. Token
vectors that drown the positions (GloVe or T5 at √D) are the starts [K] finds harmful: positional retention below
0.2 (r > 4.9) is flagged. Positions dominating the tokens are the normal regime of the Xavier start [K] recommends
(r ≈ 0.2–0.6, semantic retention 0.15–0.5); only a nearly invisible token signal (semantic retention below 0.05,
r < 1/20: σ = 0.001 or zeros) is flagged (:func:`drowning`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lightning_embinit.diagnostics.variance import positional_matrix, token_rows
from lightning_embinit.init.host import EmbeddingSlot

TOKENS_DROWN_POSITIONS = (
    "standardize the table to Xavier's range (standardize='xavier', [K] §3.4) or lower the input scale "
    "(e.g. input_scale='none' instead of √D; embedding_scale='none' in TiedEmbeddingLM)"
)
POSITIONS_DROWN_TOKENS = (
    "raise the input scale (e.g. input_scale='sqrt_d' instead of 1; embedding_scale='sqrt_d' in TiedEmbeddingLM), "
    "standardize to a larger target std "
    "(standardize=<std>), or scale the positional encoding down"
)


@dataclass(frozen=True)
class Absorption:
    semantic_retention: float
    positional_retention: float
    neighbour_survival: float
    sampled_rows: int
    neighbours: int


def _nearest(vectors: torch.Tensor, k: int) -> torch.Tensor:
    """(K, k) indices of each row's k most cosine-similar other rows."""
    unit = F.normalize(vectors, dim=1)
    similarity = unit @ unit.T
    similarity.fill_diagonal_(-math.inf)
    return similarity.topk(k, dim=1).indices


def absorption(tokens: torch.Tensor, positions: torch.Tensor, *, neighbours: int = 5) -> Absorption:
    """Retention and neighbour survival for scaled token vectors ``tokens`` (K, D) and their positional rows (K, D)."""
    if tokens.shape != positions.shape or tokens.dim() != 2:
        raise ValueError(
            f"tokens and positions must be (K, D) of one shape, got {tuple(tokens.shape)} and {tuple(positions.shape)}"
        )
    count = tokens.shape[0]
    if count < 2:
        raise ValueError(f"absorption needs at least 2 sampled rows, got {count}")
    if neighbours < 1:
        raise ValueError(f"neighbours must be ≥ 1, got {neighbours}")
    k = min(neighbours, count - 1)
    x = tokens.to(torch.float32)
    p = positions.to(device=x.device, dtype=torch.float32)
    z = x + p
    semantic = F.cosine_similarity(x, z, dim=1).mean().item()
    positional = F.cosine_similarity(p, z, dim=1).mean().item()
    before, after = _nearest(x, k), _nearest(z, k)
    survival = (before.unsqueeze(2) == after.unsqueeze(1)).any(dim=2).to(torch.float32).mean().item()
    return Absorption(semantic, positional, survival, count, k)


def slot_absorption(
    slot: EmbeddingSlot,
    *,
    sample_rows: int = 1024,
    neighbours: int = 5,
    seed: int = 0,
    max_position: int | None = None,
    positional: torch.Tensor | None = None,
) -> Absorption | None:
    """:func:`absorption` on ``sample_rows`` non-padding rows of ``slot`` at uniform positions < ``max_position``.

    None when the slot's model adds no positional encoding. The sample is drawn from a private
    generator seeded with ``seed`` (the same rows and positions at every call; the global RNG is untouched).
    """
    if sample_rows < 2:
        raise ValueError(f"sample_rows must be ≥ 2, got {sample_rows}")
    if positional is None:
        positional = positional_matrix(slot)
    if positional is None:
        return None
    if max_position is not None:
        if max_position < 1:
            raise ValueError(f"max_position must be ≥ 1, got {max_position}")
        positional = positional[:max_position]
    table = token_rows(slot)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(table.shape[0], generator=generator)[:sample_rows].sort().values
    positions = torch.randint(0, positional.shape[0], (rows.numel(),), generator=generator)
    tokens = table[rows.to(table.device)].to(torch.float32) * float(slot.input_scale)
    return absorption(tokens, positional[positions.to(positional.device)], neighbours=neighbours)


POSITIONAL_THRESHOLD = 0.2
SEMANTIC_THRESHOLD = 0.05


def check_threshold(name: str, value: float) -> float:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} is a cosine in (0, 1), got {value}")
    return float(value)


def drowning(
    result: Absorption,
    *,
    positional_threshold: float = POSITIONAL_THRESHOLD,
    semantic_threshold: float = SEMANTIC_THRESHOLD,
) -> tuple[str, str] | None:
    """(what drowns what, countermeasures) when a retention is below its threshold, else None (see the module doc)."""
    if result.positional_retention < positional_threshold:
        return (
            f"the token vectors drown the position signal (positional retention {result.positional_retention:.3f} "
            f"< {positional_threshold:g})",
            TOKENS_DROWN_POSITIONS,
        )
    if result.semantic_retention < semantic_threshold:
        return (
            f"the positional encoding drowns the token vectors (semantic retention {result.semantic_retention:.3f} "
            f"< {semantic_threshold:g}; nearest-neighbour survival {result.neighbour_survival:.3f})",
            POSITIONS_DROWN_TOKENS,
        )
    return None
