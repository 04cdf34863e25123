"""Statistics of embedding tables and positional encodings ([K] Tables 2, 6, 8; docs/concepts.md#table-statistics),
and how much a table's rows share directions: the mean row, the principal directions, isotropy
(docs/concepts.md#shared-directions).

Means and stds are over all N·D elements, exact for large float32 and bf16 tables: one pass over row blocks, on
values shifted by an estimate of the mean (so a large mean does not cancel the variance), each row's partial sums
taken in float32 (D terms at most) and accumulated in float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

CHUNK_ELEMENTS = 1 << 22
"""Elements per block (16 MiB of float32) for every chunked pass over a table."""
_MAX_FLOAT32_ROW = 1 << 16


@dataclass(frozen=True)
class MatrixStats:
    """Element statistics of a matrix; ``std`` is the population std (divide by N·D)."""

    mean: float
    std: float
    min: float
    max: float
    numel: int

    def scaled(self, factor: float) -> MatrixStats:
        """The statistics of ``factor · X``, derived without another pass."""
        low, high = sorted((self.min * factor, self.max * factor))
        return MatrixStats(self.mean * factor, self.std * abs(factor), low, high, self.numel)


def as_rows(matrix: torch.Tensor) -> torch.Tensor:
    """``matrix`` as a 2-D (rows, last dimension) view."""
    return matrix.reshape(-1, matrix.shape[-1]) if matrix.dim() > 1 else matrix.reshape(1, -1)


def rows_per_block(width: int) -> int:
    """How many rows of ``width`` elements make a block of about :data:`CHUNK_ELEMENTS`."""
    return max(1, CHUNK_ELEMENTS // max(width, 1))


def row_blocks(matrix: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Consecutive row blocks of about :data:`CHUNK_ELEMENTS` elements."""
    rows = as_rows(matrix)
    return rows.split(rows_per_block(rows.shape[1]))


def rows_without(weight: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    """``weight`` without its padding row: a view when the padding row is first or last, else a copy."""
    if padding_idx is None:
        return weight
    padding_idx %= weight.shape[0]
    if padding_idx == 0:
        return weight[1:]
    if padding_idx == weight.shape[0] - 1:
        return weight[:-1]
    return torch.cat((weight[:padding_idx], weight[padding_idx + 1 :]))


def matrix_statistics(matrix: torch.Tensor) -> MatrixStats:
    """Mean, population std, min and max of all elements of ``matrix`` (any float dtype, any device), in one pass of
    shifted sums: with c near the mean, Σ(x − c) and Σ(x − c)² carry no cancellation, and mean = c + Σ(x − c)/n,
    var = Σ(x − c)²/n − (Σ(x − c)/n)²."""
    if matrix.numel() == 0:
        raise ValueError("statistics of an empty matrix are undefined")
    matrix = matrix.detach()
    wide = matrix.dtype == torch.float64 or matrix.shape[-1] > _MAX_FLOAT32_ROW  # a row's partial sum in float64
    partial = torch.float64 if wide else torch.float32
    rows = as_rows(matrix)
    sample = rows[:: max(1, rows.shape[0] // 1024)]  # a strided sample, whose mean centres the single pass
    shift = torch.tensor(sample.to(torch.float64).mean().item(), dtype=partial).item()
    total, squares = 0.0, 0.0
    low, high = math.inf, -math.inf
    buffer: torch.Tensor | None = None
    for block in row_blocks(matrix):
        if buffer is None:
            buffer = torch.empty(block.shape, dtype=partial, device=block.device)
        centred = torch.sub(block.to(partial), shift, out=buffer[: block.shape[0]])
        total += centred.sum(dim=1).sum(dtype=torch.float64).item()
        squares += centred.square_().sum(dim=1).sum(dtype=torch.float64).item()
        block_min, block_max = torch.aminmax(block)
        low, high = min(low, block_min.item()), max(high, block_max.item())
    count = matrix.numel()
    offset = total / count
    variance = max(squares / count - offset * offset, 0.0)
    return MatrixStats(mean=shift + offset, std=math.sqrt(variance), min=low, max=high, numel=count)


def embedding_statistics(
    weight: torch.Tensor | MatrixStats, *, input_scale: float, positional_encoding: torch.Tensor | None = None
) -> dict[str, float | None]:
    """The per-slot numbers of the init report, of a table or of its known statistics.

    ``scaled_*`` describe ``input_scale · X`` (√D in Vaswani's input, as [K]); ``pe_std`` is the positional encoding's
    std and ``ratio`` = σ(scaled X) / σ(P): far above 1 the tokens drown the position signal, far below it the
    positions drown the word–word structure ("absorption").
    """
    raw = weight if isinstance(weight, MatrixStats) else matrix_statistics(weight)
    scaled = raw.scaled(input_scale)
    report: dict[str, float | None] = {key: getattr(raw, key) for key in ("mean", "std", "min", "max")}
    report["input_scale"] = input_scale
    report |= {f"scaled_{key}": getattr(scaled, key) for key in ("mean", "std", "min", "max")}
    report |= dict.fromkeys(("pe_std", "pe_min", "pe_max", "ratio"))
    if positional_encoding is not None:
        pe = matrix_statistics(positional_encoding)
        report.update(
            pe_std=pe.std, pe_min=pe.min, pe_max=pe.max, ratio=scaled.std / pe.std if pe.std > 0 else math.inf
        )
    return report


# -- shared directions: the mean row, the principal directions, isotropy (docs/concepts.md#shared-directions) -------

ISOTROPY_MULTIPLY_ADDS = 1 << 33
"""Multiply-adds the report's isotropy may cost (N·D² for the covariance, a few seconds on 2 cores); above, a sample
of rows within the same budget."""


def round_to_bfloat16(values: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Stochastic rounding of float32 to bf16: add uniform noise below bf16's last bit, then truncate. Unbiased
    (E[round(x)] = x), so a standardized bf16 table keeps its target std (round-to-nearest leaves a ~1e-4 bias)."""
    noise = torch.randint(0, 1 << 16, values.shape, generator=generator, dtype=torch.int32)
    return ((values.view(torch.int32) + noise) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)


def selected_blocks(matrix: torch.Tensor, rows: torch.Tensor | None = None) -> Iterator[torch.Tensor]:
    """Row blocks of about :data:`CHUNK_ELEMENTS` elements holding only the rows that the bool mask (or index
    vector) ``rows`` selects; all rows when ``None``. Only one block is copied at a time."""
    matrix = as_rows(matrix.detach())
    if rows is not None and rows.dtype == torch.bool:
        if rows.shape != (matrix.shape[0],):
            raise ValueError(f"a row mask must have one entry per row ({matrix.shape[0]}), got {tuple(rows.shape)}")
        rows = rows.nonzero().flatten()
    if rows is None:
        yield from row_blocks(matrix)
        return
    rows = rows.to(matrix.device)
    for chunk in rows.split(rows_per_block(matrix.shape[1])):
        yield matrix.index_select(0, chunk)


def row_mean(matrix: torch.Tensor, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """The mean row μ = (1/n) Σ x_i over the selected rows (float64, on the matrix's device) and their count n."""
    total = torch.zeros(matrix.shape[-1], dtype=torch.float64, device=matrix.device)
    count = 0
    for block in selected_blocks(matrix, rows):
        total += block.sum(dim=0, dtype=torch.float64)
        count += block.shape[0]
    if count == 0:
        raise ValueError("the mean row of no rows is undefined")
    return total / count, count


@dataclass(frozen=True)
class PrincipalDirections:
    """The mean row μ and the eigen-decomposition of the rows' covariance C = (1/n) Σ (x_i − μ)ᵀ(x_i − μ) = U Λ Uᵀ:
    ``variances`` λ_1 ≥ … ≥ λ_D (float64), ``directions`` U (D × D, column j the direction of λ_j), ``rows`` n."""

    mean: torch.Tensor
    variances: torch.Tensor
    directions: torch.Tensor
    rows: int

    def top_share(self, k: int = 1) -> float:
        """Σ_{j≤k} λ_j / Σ_j λ_j: the share of the variance in the top ``k`` principal directions."""
        total = float(self.variances.sum())
        return float(self.variances[:k].sum()) / total if total > 0 else math.nan


def principal_directions(matrix: torch.Tensor, rows: torch.Tensor | None = None) -> PrincipalDirections:
    """:class:`PrincipalDirections` of the selected rows (a bool mask or indices; all when ``None``), exact and
    chunked: a pass for μ (float64 sums), a pass for C (each block centred in float32, its D×D product accumulated in
    float64), then ``eigh`` of C in float64. Memory: one block and two D×D float64 matrices, never a float64 copy
    of the table."""
    mean, count = row_mean(matrix, rows)
    compute = torch.promote_types(matrix.dtype, torch.float32)
    centre = mean.to(compute)
    covariance = torch.zeros(matrix.shape[-1], matrix.shape[-1], dtype=torch.float64, device=matrix.device)
    for block in selected_blocks(matrix, rows):
        centred = block.to(compute) - centre
        covariance += (centred.T @ centred).to(torch.float64)
    covariance /= count
    variances, directions = torch.linalg.eigh(covariance)
    return PrincipalDirections(mean, variances.flip(0).clamp_min(0.0), directions.flip(1), count)


def mean_cosine(matrix: torch.Tensor, rows: torch.Tensor | None = None) -> float:
    """The mean cosine between distinct rows, exact in one pass: with u_i = x_i/‖x_i‖ over the n non-zero rows,
    mean_{i≠j} cos(x_i, x_j) = (‖Σ_i u_i‖² − Σ_i ‖u_i‖²) / (n(n − 1)); NaN with fewer than two non-zero rows."""
    total = torch.zeros(matrix.shape[-1], dtype=torch.float64, device=matrix.device)
    squares, count = 0.0, 0
    for block in selected_blocks(matrix, rows):
        block = block.to(torch.promote_types(block.dtype, torch.float32))
        norms = torch.linalg.vector_norm(block, dim=1)
        units = block[norms > 0] / norms[norms > 0].unsqueeze(1)
        total += units.sum(dim=0, dtype=torch.float64)
        squares += units.square().sum(dtype=torch.float64).item()
        count += units.shape[0]
    if count < 2:
        return math.nan
    return (float(total.square().sum()) - squares) / (count * (count - 1))


def default_top_k(embedding_dim: int) -> int:
    """Mu & Viswanath's number of dominating directions to remove: about D/100, at least 1."""
    return max(1, round(embedding_dim / 100))


def iid_top_share(rows: int, embedding_dim: int) -> float:
    """The top direction's share of variance expected of i.i.d. rows: λ_1 ≈ σ²(1 + √(D/n))² (the Marchenko–Pastur
    edge) over Σλ ≈ Dσ², so (1 + √(D/n))² / D; a table far above it shares directions."""
    return min(1.0, (1 + math.sqrt(embedding_dim / rows)) ** 2 / embedding_dim)


def isotropy(
    matrix: torch.Tensor, *, top_k: int | None = None, max_multiply_adds: int = ISOTROPY_MULTIPLY_ADDS
) -> dict[str, float | int]:
    """How much the rows share directions (Mu & Viswanath, "All-but-the-Top", 2018): ``top_share`` (the top principal
    direction's share of the variance), ``top_k_share`` (the top ``top_k``'s, default :func:`default_top_k`),
    ``iid_top_share`` (what i.i.d. rows of this shape would give) and ``mean_cosine`` (exact, every row). The
    covariance uses every row unless N·D² exceeds ``max_multiply_adds``; then the singular values of a seeded sample
    of ``max_multiply_adds // D²`` rows (at least k + 2), counted in ``isotropy_rows`` (``iid_top_share`` is for that
    many rows)."""
    n, d = as_rows(matrix).shape
    top_k = default_top_k(d) if top_k is None else top_k
    if n * d * d > max_multiply_adds:  # the sample's singular values: (its rows)² · D multiply-adds, no D×D matrix
        size = min(n, max(top_k + 2, max_multiply_adds // (d * d)))
        sample = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:size].sort().values
        rows = as_rows(matrix.detach()).index_select(0, sample.to(matrix.device)).double()
        variances = torch.linalg.svdvals(rows - rows.mean(dim=0)).square() / size
    else:
        variances, size = principal_directions(matrix).variances, n
    total = float(variances.sum())
    return {
        "top_share": float(variances[0]) / total if total > 0 else math.nan,
        "top_k": top_k,
        "top_k_share": float(variances[:top_k].sum()) / total if total > 0 else math.nan,
        "iid_top_share": iid_top_share(size, d),
        "mean_cosine": mean_cosine(matrix),
        "isotropy_rows": size,
    }
