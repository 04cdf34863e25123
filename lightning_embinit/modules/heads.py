"""Output heads of a language model and what they predict for the initial loss (Su, "Re-exploring Shared
Embeddings at the Output of Language Models" [S]; docs/concepts.md#tied-head, #tied-countermeasures).

Every head maps the final-normed hidden state h (B, L, D) to logits over the n tokens:

- ``tied``: h · Eᵀ, with E the input embedding;
- ``untied``: h · Wᵀ (+ b), W a separate n×D matrix;
- ``tied_orthogonal``: act(Q h + b) · Eᵀ, Q a D×D orthogonally initialized projection ([S] (c));
- ``tied_half_swap``: S[h] · Eᵀ, S[w] = w[D/2:] ∘ w[:D/2] ([S] (d)), no parameters;
- ``tied_shuffle``: h reshaped to (g, D/g), transposed and flattened again, then · Eᵀ; no parameters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lightning_embinit.checks import check_choice
from lightning_embinit.modules.blocks import ACTIVATION_FUNCTIONS, activation_fn

HEADS = ("tied", "untied", "tied_orthogonal", "tied_half_swap", "tied_shuffle")
HEAD_ACTIVATIONS = tuple(ACTIVATION_FUNCTIONS)  # none, relu, gelu, tanh


class OutputHead(nn.Module):
    """Logits from the normed hidden state; tied heads read the embedding matrix at call time."""

    def __init__(
        self,
        kind: str,
        dim: int,
        vocab_size: int,
        *,
        bias: bool = False,
        activation: str = "none",
        shuffle_groups: int = 2,
    ) -> None:
        super().__init__()
        self.kind = check_choice("output head", kind, HEADS)
        self.activation = activation
        self._act = activation_fn(activation, HEAD_ACTIVATIONS, what="head activation")
        self.shuffle_groups = shuffle_groups
        if kind == "tied_half_swap" and dim % 2:
            raise ValueError(f"tied_half_swap needs an even model dimension, got {dim}")
        if kind == "tied_shuffle" and (shuffle_groups < 2 or dim % shuffle_groups):
            raise ValueError(
                f"tied_shuffle needs shuffle_groups ≥ 2 dividing the dimension {dim}, got {shuffle_groups}"
            )
        width = {"untied": vocab_size, "tied_orthogonal": dim}.get(kind)  # the kinds with a projection
        self.proj = None if width is None else nn.Linear(dim, width, bias=bias)
        self.reset_orthogonal()

    @property
    def is_tied(self) -> bool:
        return self.kind != "untied"

    @torch.no_grad()
    def reset_orthogonal(self) -> None:
        """Q ← a random orthogonal matrix, b ← 0 (``tied_orthogonal`` only)."""
        if self.kind == "tied_orthogonal":
            nn.init.orthogonal_(self.proj.weight)
            if self.proj.bias is not None:
                self.proj.bias.zero_()

    def transform(self, h: torch.Tensor) -> torch.Tensor:
        """The vector that meets Eᵀ (tied kinds) — h itself for ``tied``."""
        if self.kind == "tied_half_swap":
            half = h.shape[-1] // 2
            return torch.cat((h[..., half:], h[..., :half]), dim=-1)
        if self.kind == "tied_shuffle":
            return h.unflatten(-1, (self.shuffle_groups, -1)).transpose(-1, -2).flatten(-2)
        if self.kind == "tied_orthogonal":
            return self._act(self.proj(h))
        return h

    def forward(self, h: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        if self.kind == "untied":
            return self.proj(h)
        return F.linear(self.transform(h), embedding_weight)

    def second_moment(self) -> float:
        """E[t²] of one entry of ``transform(h)`` for h with i.i.d. N(0, 1) entries."""
        if self.kind != "tied_orthogonal" or self.activation == "none":
            return 1.0
        z = torch.linspace(-10.0, 10.0, 20001, dtype=torch.float64)
        density = torch.exp(-0.5 * z.square()) / math.sqrt(2 * math.pi)
        return float((self._act(z).square() * density).sum() * (z[1] - z[0]))
