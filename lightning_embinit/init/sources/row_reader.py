"""Positioned reads of rows of a row-major matrix stored in a file (safetensors, the vector cache's ``.npy``).

Reading with ``readinto`` straight into the output keeps memory to the rows asked for (a memory map would count every
page it touches, and the kernel's read-ahead, in the process's RSS). Consecutive rows are read as one run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

_READ_CHUNK = 64 << 20


def row_runs(sorted_rows: np.ndarray) -> list[tuple[int, int, int]]:
    """(first row, length, output row) of each run of consecutive rows in a sorted unique array."""
    if len(sorted_rows) == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_rows) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(sorted_rows)]))
    return [(int(sorted_rows[s]), int(e - s), int(s)) for s, e in zip(starts, ends)]


def read_rows(
    path: str | os.PathLike[str],
    data_offset: int,
    shape: tuple[int, int],
    dtype: torch.dtype,
    rows: Sequence[int] | np.ndarray | None = None,
) -> torch.Tensor:
    """Rows ``rows`` (sorted, unique; all when None) of a little-endian C-order matrix at ``data_offset``."""
    count = shape[0] if rows is None else len(rows)
    out = torch.empty(count, shape[1], dtype=dtype)
    row_bytes = shape[1] * out.element_size()
    buffer = out.view(torch.uint8).numpy().reshape(-1)
    runs = [(0, shape[0], 0)] if rows is None else row_runs(np.asarray(rows, dtype=np.int64))
    with open(path, "rb", buffering=0) as handle:
        for first_row, length, out_row in runs:
            handle.seek(data_offset + first_row * row_bytes)
            view = memoryview(buffer[out_row * row_bytes : (out_row + length) * row_bytes])
            done = 0
            while done < len(view):
                got = handle.readinto(view[done : done + _READ_CHUNK])
                if not got:
                    raise ValueError(f"{path}: unexpected end of file")
                done += got
    return out


def gather_rows(
    rows: Sequence[int] | np.ndarray, count: int, read_sorted: Callable[[np.ndarray], torch.Tensor], *, where: str
) -> torch.Tensor:
    """Rows ``rows`` (any order, repeats allowed) of a ``count``-row matrix, each distinct row read once by
    ``read_sorted(unique_rows)``; an index outside ``[0, count)`` raises ``IndexError`` naming ``where``."""
    wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
    if wanted.size and (wanted.min() < 0 or wanted.max() >= count):
        raise IndexError(f"{where}: row out of range [0, {count})")
    unique, inverse = np.unique(wanted, return_inverse=True)
    block = read_sorted(unique)
    if len(unique) == len(wanted) and np.array_equal(unique, wanted):
        return block
    return block[torch.from_numpy(inverse.reshape(-1))]
