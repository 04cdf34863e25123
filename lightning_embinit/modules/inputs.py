"""What the first layer of every model sees: s · E[ids] + P (docs/concepts.md#transformer-input).

- :class:`EmbeddingInput`: token lookup (:func:`lookup_tokens`, ids checked against the table),
  input scale s (:func:`resolve_scale`: √D, 1/√D, 1 or a number) and positional rows
  (:func:`embed_tokens`); :func:`fill_token_table_` (re)initializes a token table;
- positional encodings by name (:data:`POSITIONALS`, :func:`build_positional`): sinusoidal in
  Vaswani's interleaved or the tutorial's half layout ([R]), learned, or none (docs/concepts.md#sinusoidal-encoding);

Nothing here imports Lightning.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lightning_embinit.checks import check_choice, check_finite, check_positive_int
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.positional import LAYOUTS, canonical_layout, sinusoidal_encoding
from lightning_embinit.init.schemes import get_scheme
from lightning_embinit.modules.blocks import Dropout

POSITIONALS = ("interleaved", "half", "halves", "sinusoidal", "learned", "none")
"""Positional encodings by name: sinusoidal ``interleaved`` (Vaswani, [K]) or ``half`` (sines then
cosines, the TensorFlow tutorial's, [R]; ``halves`` is the same), ``sinusoidal`` (a layout given
apart), ``learned`` (a trainable table) or ``none``."""


def check_length(length: int, max_len: int) -> None:
    """The one sequence-length check of the positional tables: ``length`` positions fit in ``max_len``."""
    if length > max_len:
        raise ValueError(f"sequence length {length} exceeds max_len={max_len}")


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed P (``layout`` ``interleaved``, [K], or ``half``, [R]): added to the (scaled) token vectors."""

    def __init__(self, max_len: int, dim: int, *, layout: str = "interleaved") -> None:
        super().__init__()
        self.layout = canonical_layout(layout)
        self.register_buffer("table", sinusoidal_encoding(max_len, dim, layout=layout), persistent=False)

    def encoding(self) -> torch.Tensor:
        """The (max_len, D) matrix P."""
        return self.table

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        """Rows ``offset … offset + length − 1`` of P (``ValueError`` past ``max_len``)."""
        check_length(offset + length, self.table.shape[0])
        return self.table[offset : offset + length]


class LearnedPositionalEmbedding(nn.Module):
    """A trainable (max_len, D) table of position vectors (GPT-2 style)."""

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_len, dim))
        nn.init.normal_(self.weight, std=0.02)

    def encoding(self) -> torch.Tensor:
        return self.weight.detach()

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        """Rows ``offset … offset + length − 1`` (``ValueError`` past ``max_len``)."""
        check_length(offset + length, self.weight.shape[0])
        return self.weight[offset : offset + length]


def build_positional(kind: str, max_len: int, dim: int, *, layout: str = "interleaved") -> nn.Module | None:
    """The positional module for a :data:`POSITIONALS` name (``none`` → None).

    ``interleaved`` and ``half`` (alias ``halves``) are sinusoidal tables in that layout;
    ``sinusoidal`` is a sinusoidal table in ``layout``; ``learned`` a trainable table.
    """
    check_choice("positional encoding", kind, POSITIONALS)
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(max_len, dim, layout=layout)
    if kind in LAYOUTS:
        return SinusoidalPositionalEncoding(max_len, dim, layout=kind)
    if kind == "learned":
        return LearnedPositionalEmbedding(max_len, dim)
    return None


def lookup_tokens(embedding: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    """``embedding(ids)``; an id outside the table raises ``ValueError`` naming it and the table's size.

    The check costs nothing on the normal path: torch's own ``IndexError`` is caught and explained.
    """
    try:
        return embedding(ids)
    except IndexError:
        bad = ids[(ids < 0) | (ids >= embedding.num_embeddings)]
        raise ValueError(
            f"token id {int(bad.flatten()[0]) if bad.numel() else '?'} is outside the embedding's vocabulary "
            f"of {embedding.num_embeddings} tokens (valid ids: 0 … {embedding.num_embeddings - 1}); "
            f"{bad.numel()} id(s) out of range in a batch of shape {tuple(ids.shape)}: were the inputs encoded "
            "with another vocabulary?"
        ) from None


def resolve_scale(scale: str | float, dim: int, *, option: str = "embedding_scale") -> float:
    """The token-vector multiplier: ``"sqrt_d"`` → √D (Vaswani, [K]), ``"inv_sqrt_d"`` → 1/√D
    ([R] as written), ``"none"`` → 1, or a number. ``option``: the caller's name for the
    argument, named by the ``ValueError`` for anything else."""
    check_positive_int("the table's dimension", dim)
    if isinstance(scale, str):
        named = {"sqrt_d": math.sqrt(dim), "inv_sqrt_d": 1 / math.sqrt(dim), "none": 1.0}
        if scale in named:
            return named[scale]
        try:
            scale = float(scale)
        except ValueError:
            raise ValueError(f"{option} must be 'sqrt_d', 'inv_sqrt_d', 'none' or a number, got {scale!r}") from None
    return check_finite(option, scale)


def embed_tokens(
    embedding: nn.Embedding, ids: torch.Tensor, *, scale: float, positional: nn.Module | None, offset: int = 0
) -> torch.Tensor:
    """s · E[ids] + P[offset : offset + L]: (B, L) ids → (B, L, D), before the input dropout."""
    x = lookup_tokens(embedding, ids)
    if scale != 1.0:
        x = x * scale
    if positional is not None:
        x = x + positional(ids.shape[1], offset)
    return x


@torch.no_grad()
def fill_token_table_(table: nn.Embedding, scheme: str) -> None:
    """Fill a token table per the embedding scheme ``scheme`` (e.g. ``xavier``, ``normal:0.02``) until
    ``EmbeddingInitCallback`` replaces it; its padding row (if any) is 0."""
    get_scheme(scheme).fill_(table.weight)
    if table.padding_idx is not None:
        table.weight[table.padding_idx].zero_()


class EmbeddingInput(nn.Module):
    """x = Drop(s · E[ids] + P[offset : offset + L]) — the transformer input (docs/concepts.md#transformer-input).

    ``embedding`` may be shared with another input (one table for source and target) or a tied
    output layer; ``scale`` is :func:`resolve_scale`'s (``scale_option``: the caller's name for it, in
    errors), ``positional`` a :data:`POSITIONALS` name (``layout``: the sinusoidal layout of ``sinusoidal``).
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        *,
        scale: str | float = "sqrt_d",
        positional: str = "interleaved",
        layout: str = "interleaved",
        max_len: int = 512,
        dropout: float = 0.0,
        scale_option: str = "scale",
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.scale = resolve_scale(scale, embedding.embedding_dim, option=scale_option)
        self.max_len = max_len
        self.positional = build_positional(positional, max_len, embedding.embedding_dim, layout=layout)
        self.dropout = Dropout(dropout)

    def positional_encoding(self) -> Callable[[], torch.Tensor] | None:
        """The callable an :class:`~lightning_embinit.init.EmbeddingSlot` takes (None when no P is added)."""
        return None if self.positional is None else self.positional.encoding

    def slot(self, name: str, **options: Any) -> EmbeddingSlot:
        """An :class:`~lightning_embinit.init.EmbeddingSlot` for this input's table, its scale and P."""
        return EmbeddingSlot(
            name=name,
            embedding=self.embedding,
            input_scale=self.scale,
            positional_encoding=self.positional_encoding(),
            **options,
        )

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, L) ids → (B, L, D); ``offset`` is the position of the first id (incremental decoding)."""
        return self.dropout(
            embed_tokens(self.embedding, ids, scale=self.scale, positional=self.positional, offset=offset)
        )
