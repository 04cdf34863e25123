"""A model's token vocabulary as its architecture sees it: table size, special-token ids and, when known,
the token strings by id (which pre-trained sources align by). Tokenizers live in :mod:`lightning_embinit.data`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

SPECIAL_TOKENS: dict[str, str] = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}
"""Role → string of the special tokens; they take ids 0, 1, 2, 3 in this order."""
