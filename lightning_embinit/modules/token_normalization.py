"""Token normalization TN of the reinforced transformer ("Efficient Transformer with Reinforced Position Embedding
for Language Models" [R]; docs/concepts.md#reinforced-model, #tn-leak): each feature column of a sequence's n×m
token embeddings standardized over its non-pad positions, over the whole sequence (:func:`token_normalize`,
the paper's) or over the positions ≤ t (:func:`causal_token_normalize`, no information from later tokens).
Nothing here imports Lightning."""

from __future__ import annotations

import torch

RunningStatistics = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _keep(x: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
    if padding_mask is None:
        return torch.ones(*x.shape[:2], 1, dtype=x.dtype, device=x.device)
    return (~padding_mask).unsqueeze(-1).to(x.dtype)


def token_normalize(x: torch.Tensor, padding_mask: torch.Tensor | None = None, *, eps: float = 1e-5) -> torch.Tensor:
    """TN ([R]): per sequence and feature, (x − mean) / √(var + ε) over the non-pad positions.

    (B, L, m) → (B, L, m) in ``x``'s dtype, computed in float32; padding positions are 0.
    Variance is the population variance (divide by n).
    """
    dtype, x = x.dtype, x.float()
    keep = _keep(x, padding_mask)
    count = keep.sum(1, keepdim=True).clamp_min(1.0)
    mean = (x * keep).sum(1, keepdim=True) / count
    centred = (x - mean) * keep
    variance = centred.square().sum(1, keepdim=True) / count
    return (centred * torch.rsqrt(variance + eps)).to(dtype)


def causal_token_normalize(
    x: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    eps: float = 1e-5,
    running: RunningStatistics | None = None,
) -> tuple[torch.Tensor, RunningStatistics]:
    """TN with statistics over the non-pad positions ≤ t (no information from later positions).

    ``running`` = (Σx, Σx², n) of the positions before ``x`` (incremental decoding); returns the
    normalized (B, L, m) and the running sums after ``x``. Computed in float32.
    """
    dtype, x = x.dtype, x.float()
    keep = _keep(x, padding_mask)
    kept = x * keep
    total, total_sq, count = kept.cumsum(1), kept.square().cumsum(1), keep.cumsum(1)
    if running is not None:
        total, total_sq, count = total + running[0], total_sq + running[1], count + running[2]
    n = count.clamp_min(1.0)
    mean = total / n
    variance = (total_sq / n - mean.square()).clamp_min(0.0)
    normalized = (x - mean) * torch.rsqrt(variance + eps) * keep
    return normalized.to(dtype), (total[:, -1:], total_sq[:, -1:], count[:, -1:])
