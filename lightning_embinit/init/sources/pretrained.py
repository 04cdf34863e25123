"""The common shape of every pre-trained source: open a :class:`VectorSet`, then align (docs/concepts.md).

A source factory validates its options when the user names it (``resolve_source``) but opens files, downloads and
trains only in :meth:`PretrainedSource.build`. :class:`ArrayVectorSet` holds vectors in memory (or memory-mapped).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from lightning_embinit.init.sources.alignment import AlignmentOptions, align_to_slot, require_tokens
from lightning_embinit.init.sources.base import SourceMatrix, SourceRequest, VectorSet
from lightning_embinit.init.sources.row_reader import gather_rows, read_rows


@dataclass
class PretrainedSource:
    """A named pre-trained source: ``open_vectors(request)`` gives the vectors, alignment does the rest."""

    name: str
    open_vectors: Callable[[SourceRequest], VectorSet]
    alignment: AlignmentOptions = field(default_factory=AlignmentOptions)
    is_pretrained: bool = True
    cache_dir: str | None = None  # this source's own cache directory option, if it caches parsed files

    def build(self, request: SourceRequest) -> SourceMatrix:
        require_tokens(request, self.name)
        vectors = self.open_vectors(request)
        return align_to_slot(request, vectors, self.alignment, source_name=self.name)


@dataclass
class ArrayVectorSet:
    """A :class:`VectorSet` over a token list and a (V, D) numpy/torch matrix (memory-mapped is fine); with
    ``row_file`` (a cached ``.npy``) rows are read with positioned reads, so memory holds only the rows gathered."""

    tokens: Sequence[str]
    matrix: Any
    description: str
    special_tokens: Mapping[str, str] = field(default_factory=dict)
    index: Mapping[str, int] | None = None
    row_file: tuple[str, int] | None = None  # (path, data offset) of a float32 ``matrix`` on disk: read rows from it

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def lookup(self) -> Mapping[str, int]:
        if self.index is None:
            index: dict[str, int] = {}
            for row, token in enumerate(self.tokens):
                index.setdefault(token, row)
            self.index = index
        return self.index

    def gather(self, rows: Sequence[int]) -> torch.Tensor:
        if self.row_file is not None:
            count = int(self.matrix.shape[0])
            read_sorted = partial(read_rows, *self.row_file, (count, self.dim), torch.float32)
            return gather_rows(rows, count, read_sorted, where=self.description)
        if isinstance(self.matrix, torch.Tensor):
            return self.matrix[torch.as_tensor(list(rows), dtype=torch.long)].to(torch.float32)
        picked = np.asarray(self.matrix[np.asarray(rows, dtype=np.int64)], dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(picked))


def split_options(
    source_name: str, options: Mapping[str, Any], allowed: Sequence[str]
) -> tuple[AlignmentOptions, dict[str, Any]]:
    """Separate alignment options from a source's own; unknown keys raise, naming the valid ones."""
    remaining = dict(options)
    alignment = AlignmentOptions.pop_from(remaining)
    unknown = sorted(set(remaining) - set(allowed))
    if unknown:
        valid = sorted(set(allowed) | set(AlignmentOptions.KEYS))
        raise ValueError(f"source {source_name!r} got unknown option(s) {unknown}; valid options: {', '.join(valid)}")
    return alignment, remaining
