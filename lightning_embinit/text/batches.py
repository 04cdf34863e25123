"""Token ids in memory and in batches, shared by the datamodules and the systems' own inference: :class:`Ragged`
ids, :func:`pad_sequences`, and classification inputs (``[cls]? a [sep] b`` or a pretrained tokenizer's layout)
assembled from them (:class:`LabelledDataset`, :class:`ClassificationCollator`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset


class Ragged:
    """Integer sequences of different lengths in one flat array: sequence i is ``flat[offsets[i]:offsets[i+1]]``."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray) -> None:
        self.flat = np.asarray(flat, dtype=np.int32)
        self.offsets = np.asarray(offsets, dtype=np.int64)

    @classmethod
    def from_lists(cls, sequences: Sequence[Sequence[int]]) -> Ragged:
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((i for s in sequences for i in s), dtype=np.int32, count=int(offsets[-1]))
        return cls(flat, offsets)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i] : self.offsets[i + 1]]


def pad_sequences(sequences: Sequence[Sequence[int] | np.ndarray], pad_id: int) -> torch.Tensor:
    """(B, longest) long tensor of ``sequences`` right-padded with ``pad_id`` (dynamic padding)."""
    width = max((len(s) for s in sequences), default=0)
    out = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.as_tensor(np.asarray(sequence, dtype=np.int64))
    return out


def longest_first(len_a: np.ndarray, len_b: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept lengths after removing tokens from the longer text first, then from b and a in turn."""
    excess = np.maximum(len_a + len_b - budget, 0)
    first = np.minimum(excess, np.abs(len_a - len_b))
    rest = excess - first
    keep_a = len_a - np.where(len_a > len_b, first, 0) - rest // 2
    keep_b = len_b - np.where(len_b > len_a, first, 0) - (rest - rest // 2)
    return keep_a, keep_b


class LabelledDataset(Dataset):
    """Assembled model inputs of one split (template parts filled with the kept ids of a and b)."""

    def __init__(
        self,
        a: Ragged,
        b: Ragged | None,
        labels: np.ndarray,
        texts: Sequence[str],
        pairs: Sequence[str] | None,
        template: list[tuple[str | int, int]],
        max_length: int,
        rows: np.ndarray,
    ) -> None:
        self.a, self.b, self.labels, self.rows = a, b, labels, rows
        self.texts, self.pairs, self.template = texts, pairs, template
        specials = sum(isinstance(part, int) for part, _ in template)
        budget = max_length - specials
        len_a = a.lengths[rows]
        len_b = b.lengths[rows] if b is not None else np.zeros_like(len_a)
        self.keep_a, self.keep_b = (
            longest_first(len_a, len_b, budget) if b is not None else (np.minimum(len_a, budget), len_b)
        )
        self.lengths = self.keep_a + self.keep_b + specials

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.rows[i])
        pieces = {
            "a": self.a[row][: self.keep_a[i]],
            "b": self.b[row][: self.keep_b[i]] if self.b is not None else None,
        }
        ids, types = [], []
        for part, type_id in self.template:
            chunk = pieces[part] if isinstance(part, str) else np.array([part])
            ids.append(chunk)
            types.append(np.full(len(chunk), type_id))
        example = {
            "input_ids": np.concatenate(ids),
            "token_type_ids": np.concatenate(types),
            "label": int(self.labels[row]),
            "index": row,
            "text": self.texts[row],
        }
        if self.pairs is not None:
            example["text_pair"] = self.pairs[row]
        return example


@dataclass(frozen=True)
class ClassificationCollator:
    """Examples → the batch dict of the module doc."""

    pad_id: int
    pair: bool

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = {
            "input_ids": pad_sequences([e["input_ids"] for e in examples], self.pad_id),
            "labels": torch.tensor([e["label"] for e in examples], dtype=torch.long),
            "index": torch.tensor([e["index"] for e in examples], dtype=torch.long),
            "text": [e["text"] for e in examples],
        }
        if self.pair:
            batch["token_type_ids"] = pad_sequences([e["token_type_ids"] for e in examples], 0)
            batch["text_pair"] = [e["text_pair"] for e in examples]
        return batch
