"""The raw text of a datamodule's splits, as read and before tokenization.

:class:`RawSplits` holds one :class:`SplitText` per split: its texts by field (``src``/``tgt`` for translation;
``a``, and ``b`` for sentence pairs, for classification) and label ids (classification). The tokenized corpus
keeps each field's ids under ``"<split>/<field>"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SplitText:
    """One split: line-aligned texts by field name, and the label ids of labelled text (None otherwise)."""

    fields: dict[str, list[str]]
    labels: np.ndarray | None = None


@dataclass(frozen=True)
class RawSplits:
    """Every split's text by split name, the rows left out per split for a blank text, and the label names
    (classification; empty otherwise)."""

    splits: Mapping[str, SplitText]
    blank: Mapping[str, int]
    label_names: tuple[str, ...] = ()

    def texts(self) -> dict[str, list[str]]:
        """``"<split>/<field>"`` → texts: what the corpus encodes and its cache key digests."""
        return {
            f"{name}/{field}": texts for name, split in self.splits.items() for field, texts in split.fields.items()
        }
