"""The two sparse weightings of a transplant's methods, on batches of rows:

- :func:`sparsemax` (Martins & Astudillo, "From Softmax to Sparsemax", ICML 2016): the Euclidean projection of a
  score vector z onto the probability simplex, p = max(z − τ, 0), τ from the sorted scores z₍₁₎ ≥ z₍₂₎ ≥ …:
  k(z) = max{k : 1 + k·z₍ₖ₎ > Σ_{j≤k} z₍ⱼ₎}, τ = (Σ_{j≤k(z)} z₍ⱼ₎ − 1) / k(z). FOCUS weighs anchor tokens by it.
- :func:`orthogonal_matching_pursuit` (Pati, Rezaiifar & Krishnaprasad 1993): y ≈ Σ_{j∈S} c_j·d_j with at most k
  atoms in S, grown one at a time (the atom of largest absolute ⟨r, d_j⟩/‖d_j‖ for the residual r), c the
  least-squares fit of y on the atoms of S after each step.
"""

from __future__ import annotations

import torch


def sparsemax(scores: torch.Tensor) -> torch.Tensor:
    """Sparsemax along the last dimension (module doc); rows sum to 1, most entries are exactly 0."""
    ordered, _ = torch.sort(scores, dim=-1, descending=True)
    ks = torch.arange(1, scores.shape[-1] + 1, device=scores.device, dtype=scores.dtype)
    cumulative = ordered.cumsum(dim=-1)
    support = (1 + ks * ordered) > cumulative
    k = support.sum(dim=-1, keepdim=True).clamp(min=1)
    tau = (cumulative.gather(-1, k - 1) - 1) / k.to(scores.dtype)
    return (scores - tau).clamp(min=0)


def orthogonal_matching_pursuit(
    targets: torch.Tensor, atoms: torch.Tensor, atoms_per_target: int, *, chunk: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row y of ``targets`` (T, d) as Σ c_j·atoms[j] over at most ``atoms_per_target`` rows of ``atoms`` (A, d)
    (module doc). Returns (T, k) atom indices and (T, k) float64 coefficients (k = min(atoms_per_target, A, d);
    a target reached exactly before k steps gets coefficients 0 on its remaining atoms)."""
    count, width = atoms.shape
    k = min(int(atoms_per_target), count, width)
    indices = torch.zeros(targets.shape[0], k, dtype=torch.long)
    coefficients = torch.zeros(targets.shape[0], k, dtype=torch.float64)
    if k == 0 or targets.shape[0] == 0:
        return indices, coefficients
    work = atoms.to(torch.float32)
    norms = work.norm(dim=1).clamp(min=1e-12)
    unit = work / norms.unsqueeze(1)
    for start in range(0, targets.shape[0], chunk):
        block = slice(start, start + chunk)
        indices[block], coefficients[block] = _pursue(targets[block].to(torch.float64), atoms, unit, k)
    return indices, coefficients


def _pursue(
    targets: torch.Tensor, atoms: torch.Tensor, unit: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """OMP for one block of targets, the least squares kept by a growing QR factorization of the chosen atoms
    (Gram–Schmidt, twice for stability; float32 as the atoms, the triangle in float64): r = y − Q Qᵀ y, and at the end
    R c = Qᵀ y."""
    rows, width = targets.shape
    work = targets.to(torch.float32)
    chosen = torch.zeros(rows, k, dtype=torch.long)
    taken = torch.zeros(rows, atoms.shape[0], dtype=torch.bool)
    basis = torch.zeros(rows, k, width, dtype=torch.float32)  # Q's columns as rows
    triangle = torch.eye(k, dtype=torch.float64).repeat(rows, 1, 1)
    residual = work.clone()
    for step in range(k):
        scores = (residual @ unit.T).abs_().masked_fill_(taken, -1.0)
        chosen[:, step] = scores.argmax(dim=1)
        taken.scatter_(1, chosen[:, step : step + 1], True)
        atom = atoms[chosen[:, step]].to(torch.float32)
        done = basis[:, :step]
        projection = (done * atom.unsqueeze(1)).sum(dim=2)  # (rows, step)
        vector = atom - (done * projection.unsqueeze(2)).sum(dim=1)
        again = (done * vector.unsqueeze(1)).sum(dim=2)
        vector = vector - (done * again.unsqueeze(2)).sum(dim=1)
        projection = projection + again
        length = vector.norm(dim=1)
        independent = length > 1e-6 * atom.norm(dim=1).clamp(min=1e-30)  # else the atom adds nothing: c = 0
        direction = torch.where(independent.unsqueeze(1), vector / length.clamp(min=1e-30).unsqueeze(1), 0.0)
        basis[:, step] = direction
        triangle[:, :step, step] = torch.where(independent.unsqueeze(1), projection, 0.0).double()
        triangle[:, step, step] = torch.where(independent, length, 1.0).double()
        residual -= (direction * residual).sum(dim=1, keepdim=True) * direction
    inner = (basis * work.unsqueeze(1)).sum(dim=2, keepdim=True).double()
    coefficients = torch.linalg.solve_triangular(triangle, inner, upper=True).squeeze(2)
    return chosen, coefficients
