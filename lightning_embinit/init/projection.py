"""Dimension projections for pre-trained rows whose width D_s differs from the slot's D (docs/concepts.md#alignment;
docs/sources.md, "Projections").

Fitted on the rows a source found for a slot and applied to them: ``"pca"`` (D_s > D only) keeps the found rows'
coordinates along their top-D principal axes, centred, signs fixed; ``"random_orthogonal"`` (any sizes) multiplies
by a seeded Haar-random D_s×D matrix, an isometry for D ≥ D_s and a projection onto a random subspace for D < D_s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lightning_embinit.checks import check_choice

PROJECTIONS = ("pca", "random_orthogonal")


@dataclass(frozen=True)
class Projection:
    """A fitted linear map ``x ↦ (x − offset) @ matrix`` from width D_s to width D."""

    method: str
    matrix: torch.Tensor  # (D_s, D) float64
    offset: torch.Tensor  # (D_s,) float64
    description: str

    def apply(self, rows: torch.Tensor) -> torch.Tensor:
        """Project an (n, D_s) matrix to (n, D) float32."""
        return ((rows.to(torch.float64) - self.offset) @ self.matrix).to(torch.float32)


def fit_projection(
    method: str, rows: torch.Tensor, target_dim: int, *, generator: torch.Generator | None = None
) -> Projection:
    """Fit ``method`` (``"pca"`` or ``"random_orthogonal"``) on the found rows (n, D_s) for width ``target_dim``."""
    if check_choice("projection", method, PROJECTIONS) == "pca":
        return _fit_pca(rows, target_dim)
    source_dim = rows.shape[1]
    kind = "isometric embedding" if target_dim >= source_dim else "projection onto a random subspace"
    return Projection(
        "random_orthogonal",
        random_orthogonal_matrix(source_dim, target_dim, generator),
        torch.zeros(source_dim, dtype=torch.float64),
        f"random_orthogonal {source_dim}→{target_dim} ({kind})",
    )


def _fit_pca(rows: torch.Tensor, target_dim: int) -> Projection:
    n, source_dim = rows.shape
    if source_dim <= target_dim:
        raise ValueError(
            f"project='pca' reduces the dimension and needs D_s > D, got D_s={source_dim}, D={target_dim}; "
            "use project='random_orthogonal' to widen vectors"
        )
    if n < 2:
        raise ValueError(f"project='pca' needs at least 2 found rows to estimate principal axes, got {n}")
    data = rows.to(torch.float64)
    mean = data.mean(dim=0)
    centred = data - mean
    covariance = centred.T @ centred / n
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)  # ascending
    order = torch.argsort(eigenvalues, descending=True)[:target_dim]
    axes = eigenvectors[:, order]
    # Fix each axis's sign: its largest-magnitude component is positive.
    pivots = axes.abs().argmax(dim=0)
    signs = torch.sign(axes[pivots, torch.arange(target_dim)])
    axes = axes * torch.where(signs == 0, torch.ones_like(signs), signs)
    total = eigenvalues.clamp_min(0).sum().item()
    kept = eigenvalues[order].clamp_min(0).sum().item()
    fraction = kept / total if total > 0 else 1.0
    return Projection("pca", axes, mean, f"pca {source_dim}→{target_dim} (keeps {fraction:.1%} of the variance)")


def random_orthogonal_matrix(
    source_dim: int, target_dim: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A Haar-random (D_s, D) float64 matrix with orthonormal rows (D ≥ D_s) or columns (D < D_s)."""
    tall, short = max(source_dim, target_dim), min(source_dim, target_dim)
    gaussian = torch.randn(tall, short, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    diagonal = torch.sign(torch.diagonal(r))
    q = q * torch.where(diagonal == 0, torch.ones_like(diagonal), diagonal)
    return q if source_dim >= target_dim else q.T
