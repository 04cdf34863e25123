"""Transforms that remove the directions an embedding table's rows share (docs/concepts.md#shared-directions).

Word vectors are anisotropic: a large common mean and a few dominating directions (Mu & Viswanath, "All-but-the-Top:
Simple and Effective Postprocessing for Word Representations", ICLR 2018). Three linear maps remove them, each fitted
on the rows that ``rows`` selects (the pre-trained rows, in the pipeline) and applied to every row of ``matrix``:

- :func:`center`: x* = x − μ;
- :func:`remove_top` (all-but-the-top): x* = (x − μ) − Σ_{j≤k} (u_jᵀ(x − μ)) u_j, u_j the top principal directions;
- :func:`whiten` (ZCA): x* = (x − μ) U diag(c / √(λ_j + ε λ̄)) Uᵀ, c keeping the total variance Σλ_j.

Statistics come from :func:`~lightning_embinit.init.statistics.principal_directions` (chunked, float64
accumulation); the maps run in float32 (or wider) row blocks, into ``out`` (which may be the input), bf16 results
rounded stochastically — never a float64 copy of the table.
"""

from __future__ import annotations

import math

import torch

from lightning_embinit.init.statistics import (
    PrincipalDirections,
    default_top_k,
    principal_directions,
    round_to_bfloat16,
    row_mean,
    rows_per_block,
)

DEFAULT_WHITEN_EPS = 1e-3
"""ε of :func:`whiten`, relative to the mean variance λ̄: a direction of variance ≪ ελ̄ is amplified at most about
1/√ε ≈ 32 times as much as one of variance λ̄. Small, because one dominating direction inflates λ̄: word2vec trained
on the quick start's corpus has 99.9 % of its variance in one direction, and ε = 0.01 leaves the whitened table's
top direction at 5.5 times i.i.d. rows' share, ε = 0.001 at 1.2 times (docs/concepts.md#shared-directions)."""


def apply_linear_map(
    matrix: torch.Tensor,
    mean: torch.Tensor,
    project: torch.Tensor | None = None,
    *,
    remove: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """x* = (x − μ)·P − ((x − μ)·R)·Rᵀ row block by row block, in float32 (or wider), in ``matrix``'s dtype; ``P``
    (D × D, ``project``) and ``R`` (D × k, ``remove``) are skipped when ``None``. ``out`` may be ``matrix``; bf16
    results are rounded stochastically with ``generator`` (a fixed seed when ``None``)."""
    if out is None:
        out = torch.empty_like(matrix, memory_format=torch.contiguous_format)
    elif out.shape != matrix.shape:
        raise ValueError(f"out= must have the shape {tuple(matrix.shape)}, got {tuple(out.shape)}")
    compute = torch.promote_types(matrix.dtype, torch.float32)
    if out.dtype == torch.bfloat16 and generator is None:
        generator = torch.Generator().manual_seed(0)
    centre = mean.to(device=matrix.device, dtype=compute)
    project, remove = (None if m is None else m.to(device=matrix.device, dtype=compute) for m in (project, remove))
    step = rows_per_block(matrix.shape[1])
    for start in range(0, matrix.shape[0], step):
        block = matrix[start : start + step].to(compute) - centre
        if project is not None:
            block = block @ project
        if remove is not None:
            block -= (block @ remove) @ remove.T
        target = out[start : start + step]
        target.copy_(round_to_bfloat16(block.float(), generator) if target.dtype == torch.bfloat16 else block)
    return out


def center(
    matrix: torch.Tensor,
    *,
    rows: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """x* = x − μ, μ the mean of the rows ``rows`` selects (a bool mask or indices; all rows when ``None``)."""
    mean, _ = row_mean(matrix, rows)
    return apply_linear_map(matrix, mean, out=out, generator=generator)


def remove_top(
    matrix: torch.Tensor,
    k: int | None = None,
    *,
    rows: torch.Tensor | None = None,
    directions: PrincipalDirections | None = None,
    out: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """All-but-the-top (Mu & Viswanath 2018, Algorithm 1): centre, then remove the projections on the top ``k``
    principal directions u_1 … u_k of the centred selected rows: x* = (x − μ) − Σ_{j≤k} (u_jᵀ(x − μ)) u_j.
    ``k`` defaults to about D/100 (at least 1), the paper's choice. (The paper's Algorithm 1 writes u_jᵀ v(w) with the
    uncentred v(w); that differs by the constant Σ_j (u_jᵀμ) u_j, so the centred form used here has mean zero.)"""
    d = matrix.shape[-1]
    k = default_top_k(d) if k is None else k
    check_top_k(k, d)
    directions = directions or principal_directions(matrix, rows)
    return apply_linear_map(matrix, directions.mean, remove=directions.directions[:, :k], out=out, generator=generator)


def whitening_matrix(directions: PrincipalDirections, eps: float = DEFAULT_WHITEN_EPS) -> torch.Tensor:
    """W = U diag(c / √(λ_j + ε λ̄)) Uᵀ (ZCA: the whitening closest to the identity, so each dimension keeps most of
    its meaning), λ̄ the mean variance, c² = Σλ_j / Σ_j (λ_j / (λ_j + ε λ̄)) so that the total variance is kept."""
    check_whiten_eps(eps)
    variances = directions.variances
    mean_variance = float(variances.mean())
    if not mean_variance > 0:
        raise ValueError("cannot whiten rows that are all equal (their covariance is 0)")
    regularized = variances + eps * mean_variance
    scale = math.sqrt(float(variances.sum()) / float((variances / regularized).sum()))
    factors = scale / regularized.sqrt()
    return (directions.directions * factors) @ directions.directions.T


def whiten(
    matrix: torch.Tensor,
    eps: float = DEFAULT_WHITEN_EPS,
    *,
    rows: torch.Tensor | None = None,
    directions: PrincipalDirections | None = None,
    out: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """ZCA whitening with ε regularization, then scaled back to the rows' total variance
    (:func:`whitening_matrix`): x* = (x − μ)·W. The selected rows come out decorrelated, each principal direction with
    (nearly) the same variance λ̄; the element std of the centred table stays as it was."""
    directions = directions or principal_directions(matrix, rows)
    return apply_linear_map(matrix, directions.mean, whitening_matrix(directions, eps), out=out, generator=generator)


def check_top_k(k: object, embedding_dim: int | None = None) -> None:
    """Raise ``ValueError`` unless ``k`` is an integer with 1 ≤ k < D (k ≥ 1 only, without ``embedding_dim``)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"remove_top's k (directions to remove) must be an integer ≥ 1, got {k!r}")
    if embedding_dim is not None and k >= embedding_dim:
        raise ValueError(
            f"remove_top's k (directions to remove) must be below the table's width D = {embedding_dim}, got {k}; "
            f"without k it removes about D/100 ({default_top_k(embedding_dim)} here)"
        )


def check_whiten_eps(eps: object) -> None:
    """Raise ``ValueError`` unless ``eps`` is a finite number > 0."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(
            f"whiten's eps (regularization, relative to the mean variance) must be a finite number > 0, got {eps!r}; "
            f"the default is {DEFAULT_WHITEN_EPS}"
        )
