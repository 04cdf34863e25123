"""Sinusoidal positional encodings: Vaswani's, as [K], and the TensorFlow tutorial's, as [R]
(docs/concepts.md#sinusoidal-encoding)."""

from __future__ import annotations

import torch

LAYOUTS = ("interleaved", "halves", "half")
"""Accepted layout names; ``halves`` (the earlier name) and ``half`` are the same layout."""
_CANONICAL = {"interleaved": "interleaved", "halves": "half", "half": "half"}


def canonical_layout(layout: str) -> str:
    """``interleaved`` or ``half`` for any accepted name; a ValueError listing them otherwise."""
    if layout not in _CANONICAL:
        raise ValueError(
            f"unknown positional layout {layout!r}; known layouts: {', '.join(LAYOUTS)} "
            "(halves and half are the same: sines, then cosines)"
        )
    return _CANONICAL[layout]


def sinusoidal_encoding(
    length: int, dim: int, *, layout: str = "interleaved", base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The (length, dim) sinusoidal encoding P. ``interleaved`` (Vaswani, [K]): P[i, 2k] = sin(i / base^{2k/D}),
    P[i, 2k+1] = cos(i / base^{2k/D}); ``half`` (alias ``halves``; TensorFlow tutorial, [R]): P[i, k] = sin(i·ω_k),
    P[i, k + D/2] = cos(i·ω_k), ω_k = base^{−2k/D}."""
    layout = canonical_layout(layout)
    if dim % 2:
        raise ValueError(f"a sinusoidal encoding needs an even dimension, got {dim}")
    if length < 1:
        raise ValueError(f"a positional encoding needs length ≥ 1, got {length}")
    positions = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    frequencies = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = positions * frequencies
    encoding = torch.empty(length, dim, dtype=torch.float64)
    if layout == "interleaved":
        encoding[:, 0::2] = angles.sin()
        encoding[:, 1::2] = angles.cos()
    else:
        encoding[:, : dim // 2] = angles.sin()
        encoding[:, dim // 2 :] = angles.cos()
    return encoding.to(dtype)
