"""The raw text of a datamodule's splits, as read and before tokenization.

:class:`RawSplits` holds one record per split: :class:`TextPairs` for translation, :class:`LabelledTexts`
for classification. A record names its texts by field (``src``/``tgt``, ``a``/``b``); the tokenized
corpus keeps each field's ids under ``"<split>/<field>"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np


@dataclass(frozen=True)
class TextPairs:
    """One split of parallel text: line-aligned source and target sentences."""

    src: list[str]
    tgt: list[str]

    def fields(self) -> dict[str, list[str]]:
        """The texts by field name."""
        return {"src": self.src, "tgt": self.tgt}


@dataclass(frozen=True)
class LabelledTexts:
    """One split of labelled text: sentences, their pair sentences (None for single sentences), label ids."""

    texts: list[str]
    pairs: list[str] | None
    labels: np.ndarray

    def fields(self) -> dict[str, list[str]]:
        """The texts by field name: ``a``, and ``b`` for sentence pairs."""
        return {"a": self.texts} if self.pairs is None else {"a": self.texts, "b": self.pairs}


#: One split's content: sentence pairs (translation) or labelled texts (classification).
Split = TypeVar("Split", TextPairs, LabelledTexts)


@dataclass(frozen=True)
class RawSplits(Generic[Split]):
    """Every split's text by split name, the rows left out per split for a blank text, and the label names
    (classification; empty otherwise)."""

    splits: Mapping[str, Split]
    blank: Mapping[str, int]
    label_names: tuple[str, ...] = ()

    def texts(self) -> dict[str, list[str]]:
        """``"<split>/<field>"`` → texts: what the corpus encodes and its cache key digests."""
        return {
            f"{name}/{field}": texts for name, split in self.splits.items() for field, texts in split.fields().items()
        }
