"""What the first layer of every model sees: s · E[ids] + P (docs/concepts.md#transformer-input): token lookup
(:func:`lookup_tokens`), input scale s (:func:`resolve_scale`) and positional rows (:func:`build_positional`;
docs/concepts.md#sinusoidal-encoding) in :class:`EmbeddingInput`. Nothing here imports Lightning.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from lightning_embinit.checks import check_choice, check_finite, check_positive_int
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.positional import canonical_layout, sinusoidal_encoding
from lightning_embinit.init.schemes import get_scheme
from lightning_embinit.modules.blocks import Dropout

POSITIONALS = ("interleaved", "half", "halves", "sinusoidal", "learned", "none")
"""Positional encodings by name: sinusoidal ``interleaved`` (Vaswani, [K]) or ``half`` (sines then
cosines, the TensorFlow tutorial's, [R]; ``halves`` is the same), ``sinusoidal`` (a layout given
apart), ``learned`` (a trainable table) or ``none``."""


class PositionalTable(nn.Module):
    """A (max_len, D) table P of position vectors, ``weight``, whose rows are added to the (scaled) token vectors."""

    weight: torch.Tensor

    def encoding(self) -> torch.Tensor:
        """The (max_len, D) matrix P, detached."""
        return self.weight.detach()

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        """Rows ``offset … offset + length − 1`` of P (``ValueError`` past ``max_len``)."""
        if offset + length > self.weight.shape[0]:
            raise ValueError(f"sequence length {offset + length} exceeds max_len={self.weight.shape[0]}")
        return self.weight[offset : offset + length]


class SinusoidalPositionalEncoding(PositionalTable):
    """Fixed P (``layout`` ``interleaved``, [K], or ``half``, [R])."""

    def __init__(self, max_len: int, dim: int, *, layout: str = "interleaved") -> None:
        super().__init__()
        self.layout = canonical_layout(layout)
        self.register_buffer("weight", sinusoidal_encoding(max_len, dim, layout=layout), persistent=False)


class LearnedPositionalEmbedding(PositionalTable):
    """A trainable P (GPT-2 style)."""

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_len, dim))
        nn.init.normal_(self.weight, std=0.02)


def build_positional(kind: str, max_len: int, dim: int, *, layout: str = "interleaved") -> PositionalTable | None:
    """The positional module for a :data:`POSITIONALS` name (``none`` → None; ``sinusoidal`` in ``layout``)."""
    if check_choice("positional encoding", kind, POSITIONALS) == "none":
        return None
    if kind == "learned":
        return LearnedPositionalEmbedding(max_len, dim)
    return SinusoidalPositionalEncoding(max_len, dim, layout=layout if kind == "sinusoidal" else kind)


def lookup_tokens(embedding: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    """``embedding(ids)``; an id outside the table raises ``ValueError`` naming it and the table's size (torch's own
    ``IndexError``, caught and explained: nothing to pay on the normal path)."""
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
        self.positional = build_positional(positional, max_len, embedding.embedding_dim, layout=layout)
        self.dropout = Dropout(dropout)

    def slot(self, name: str, **options: Any) -> EmbeddingSlot:
        """An :class:`~lightning_embinit.init.EmbeddingSlot` for this input's table, its scale and P."""
        return EmbeddingSlot(
            name=name,
            embedding=self.embedding,
            input_scale=self.scale,
            positional_encoding=None if self.positional is None else self.positional.encoding,
            **options,
        )

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, L) ids → (B, L, D); ``offset`` is the position of the first id (incremental decoding)."""
        x = lookup_tokens(self.embedding, ids)
        if self.scale != 1.0:
            x = x * self.scale
        if self.positional is not None:
            x = x + self.positional(ids.shape[1], offset)
        return self.dropout(x)
