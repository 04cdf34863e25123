"""Statistics of embedding tables and positional encodings ([K] Tables 2, 6, 8; docs/concepts.md#table-statistics).

Means and stds are over all N·D elements, exact for large float32 and bf16 tables: one pass over row blocks, on
values shifted by an estimate of the mean (so a large mean does not cancel the variance), each row's partial sums
taken in float32 (D terms at most) and accumulated in float64.
"""

from __future__ import annotations

import math
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
