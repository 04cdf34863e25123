"""Statistics of embedding tables and positional encodings (SPEC §1, [K] Tables 2, 6, 8).

Means and stds are over all N·D elements. They are exact for large float32 and bf16 tables:
two passes over row blocks, each row's partial sum taken in float32 (D terms at most) and
accumulated in float64, the second pass on values centred by the first pass's mean, so a
large mean does not cancel the variance.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterator

import torch

_CHUNK_ELEMENTS = 1 << 22
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

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _row_blocks(matrix: torch.Tensor) -> Iterator[torch.Tensor]:
    flat = matrix.reshape(-1, matrix.shape[-1]) if matrix.dim() > 1 else matrix.reshape(1, -1)
    rows = max(1, _CHUNK_ELEMENTS // max(flat.shape[1], 1))
    return iter(flat.split(rows))


def _accumulator_dtype(matrix: torch.Tensor) -> torch.dtype:
    return torch.float32 if matrix.shape[-1] <= _MAX_FLOAT32_ROW else torch.float64


def matrix_statistics(matrix: torch.Tensor) -> MatrixStats:
    """Mean, population std, min and max of all elements of ``matrix`` (any float dtype, any device)."""
    if matrix.numel() == 0:
        raise ValueError("statistics of an empty matrix are undefined")
    matrix = matrix.detach()
    partial = _accumulator_dtype(matrix)
    total = 0.0
    low, high = math.inf, -math.inf
    for block in _row_blocks(matrix):
        total += block.sum(dim=1, dtype=partial).sum(dtype=torch.float64).item()
        block_min, block_max = torch.aminmax(block)
        low, high = min(low, block_min.item()), max(high, block_max.item())
    mean = total / matrix.numel()
    squares = 0.0
    for block in _row_blocks(matrix):
        centred = block.to(partial) - mean
        squares += centred.square().sum(dim=1).sum(dtype=torch.float64).item()
    return MatrixStats(mean=mean, std=math.sqrt(squares / matrix.numel()), min=low, max=high, numel=matrix.numel())


def embedding_statistics(
    weight: torch.Tensor, *, input_scale: float, positional_encoding: torch.Tensor | None = None
) -> dict[str, float | None]:
    """The per-slot numbers of the init report.

    ``scaled_*`` describe ``input_scale · X`` (√D in Vaswani's input, SPEC §1); ``pe_std`` is the
    positional encoding's own std and ``ratio`` = σ(scaled X) / σ(P): far above 1 the tokens drown
    the position signal, far below it the positions drown the word–word structure ("absorption").
    """
    raw = matrix_statistics(weight)
    scaled = raw.scaled(input_scale)
    report: dict[str, float | None] = {
        "mean": raw.mean,
        "std": raw.std,
        "min": raw.min,
        "max": raw.max,
        "input_scale": input_scale,
        "scaled_mean": scaled.mean,
        "scaled_std": scaled.std,
        "scaled_min": scaled.min,
        "scaled_max": scaled.max,
        "pe_std": None,
        "pe_min": None,
        "pe_max": None,
        "ratio": None,
    }
    if positional_encoding is not None:
        pe = matrix_statistics(positional_encoding)
        report.update(pe_std=pe.std, pe_min=pe.min, pe_max=pe.max, ratio=scaled.std / pe.std if pe.std > 0 else math.inf)
    return report
