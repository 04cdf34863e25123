"""Transformer blocks shared by every model of the package: the pre-LN causal LM of [S], the post-LN encoder–decoder
of [R] and [K] and the reinforced model's layers (docs/concepts.md#tied-head, #reinforced-baseline,
#reinforced-model). :class:`TransformerStack` is an encoder or a decoder (incremental decoding through a
:class:`DecoderCache`); what the first layer sees (s · E[ids] + P) is :mod:`lightning_embinit.modules.inputs`.
Attention runs on :func:`torch.nn.functional.scaled_dot_product_attention`. Nothing here imports Lightning.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lightning_embinit.checks import check_choice
from lightning_embinit.modules.attention import AttentionCache, MultiHeadAttention

NORMS = ("layernorm", "rmsnorm")


def identity(x: torch.Tensor) -> torch.Tensor:
    """The ``none`` activation (a named function: modules that hold it pickle)."""
    return x


ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "none": identity,
    "relu": F.relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
}
"""Every elementwise activation by name: the FFN's (:data:`ACTIVATIONS`) and the head's."""
#: The activations a feed-forward block may use.
ACTIVATIONS = ("relu", "gelu")


def build_norm(kind: str, dim: int) -> nn.Module:
    """``layernorm`` (γ = 1, β = 0) or ``rmsnorm`` (γ = 1): x / rms(x) · γ, both with ε = 1e-5."""
    check_choice("norm", kind, NORMS)
    return nn.LayerNorm(dim, eps=1e-5) if kind == "layernorm" else nn.RMSNorm(dim, eps=1e-5)


def activation_fn(
    kind: str, choices: tuple[str, ...] = ACTIVATIONS, *, what: str = "activation"
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function :data:`ACTIVATION_FUNCTIONS` maps ``kind`` to, if ``kind`` is one of ``choices``."""
    return ACTIVATION_FUNCTIONS[check_choice(what, kind, choices)]


_BITS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
}
"""A float dtype → the integer dtype of its width, whose products with 0 or 1 build a mask of 0 or a fixed value."""


def float_bits(value: float, dtype: torch.dtype) -> int:
    """The bit pattern of ``value`` rounded to the float ``dtype`` (a :data:`_BITS` key), as a signed integer: what
    ``torch.tensor(value, dtype=dtype).view(_BITS[dtype]).item()`` gives, in plain Python (no tensor, no sync)."""
    if dtype == torch.float64:
        return struct.unpack("<q", struct.pack("<d", value))[0]
    if dtype == torch.float16:
        return struct.unpack("<h", struct.pack("<e", value))[0]
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if dtype == torch.bfloat16:  # round to nearest even on the upper 16 bits
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits - (1 << 16) if bits >= 1 << 15 else bits
    return bits - (1 << 32) if bits >= 1 << 31 else bits


@torch.library.custom_op("lightning_embinit::dropout_mask", mutates_args=(), tags=(torch.Tag.nondeterministic_seeded,))
def dropout_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """:class:`Dropout`'s CPU mask for ``x`` (module docstring). An operator of its own, so that ``torch.compile`` runs
    it as it is (Inductor's code for the bit views and its own random numbers are several times slower) and fuses
    only the products with the mask; seeded random: never merged with another call, never recomputed."""
    words = torch.randint(-(2**63), 2**63 - 1, ((x.numel() + 3) // 4,), dtype=torch.int64, device=x.device)
    keep = words.view(torch.int16)[: x.numel()].view(x.shape) >= round(p * 65536) - 32768
    scale = 1.0 / (1.0 - p)
    if (bits := _BITS.get(x.dtype)) is None:
        return torch.where(keep, x.new_full((), scale), x.new_zeros(()))
    return keep.to(bits).mul_(float_bits(scale, x.dtype)).view(x.dtype)


@dropout_mask.register_fake
def _(x: torch.Tensor, p: float) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


class Dropout(nn.Dropout):
    """``nn.Dropout`` with a cheaper mask on CPU (torch's draws one Bernoulli variable per element, about a sixth of a
    training step of [K]'s model in ``benchmarks/bench_seq2seq.py``); other devices use torch's.

    One 64-bit random integer (torch's generator, so seeding works as usual) masks four elements: an element is kept
    when its 16-bit share is ≥ the threshold, so p is rounded to a multiple of 1/65536 (0.1 → 0.100006). Kept
    elements are scaled by 1/(1 − p) as in ``nn.Dropout``, by one product with a mask of 0 or 1/(1 − p) (in the
    input's dtype, as torch's CPU dropout rounds it), built as integers: the kept flags times the bits of 1/(1 − p),
    read as floats (half the time of a ``torch.where``, the same mask).
    """

    def mask(self, x: torch.Tensor) -> torch.Tensor | None:
        """The CPU mask for ``x`` (0 or 1/(1 − p), ``x``'s dtype), or None where torch's dropout runs (evaluation,
        p = 0 or 1, ``inplace``, another device)."""
        if not self.training or x.device.type != "cpu" or not 0.0 < self.p < 1.0 or self.inplace:
            return None
        return dropout_mask(x.detach(), self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = self.mask(x)
        return super().forward(x) if mask is None else x * mask


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2 ([R]; ``relu`` is the tutorial's), hidden width ``hidden_dim``."""

    def __init__(self, dim: int, hidden_dim: int, *, activation: str = "gelu", bias: bool = True, dropout: float = 0.0):
        super().__init__()
        self._act = activation_fn(activation)
        self.fc1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.fc2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self._act(self.fc1(x))))


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention and an FFN, each a residual branch: x ← x + Drop(F(LN(x))) pre-LN,
    x ← LN(x + Drop(F(x))) post-LN ([R], [K]).

    [R]'s options: per-head widths ``qk_head_dim`` (r) and ``v_head_dim`` (q); ``value_dim`` /
    ``memory_value_dim``: the width of separate values given at call time (``values``, ``memory_values``: the
    reinforced model's "value without concatenation"); ``memory_dim``: the memory's width. ``dropout`` acts on every
    residual branch, and on the attention weights and the FFN's hidden layer unless ``attention_dropout`` /
    ``activation_dropout`` say otherwise (``torch.nn.Transformer``'s placement; Vaswani et al.'s: set both to 0).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        hidden_dim: int,
        *,
        pre_norm: bool = True,
        cross_attention: bool = False,
        activation: str = "gelu",
        norm: str = "layernorm",
        bias: bool = True,
        dropout: float = 0.0,
        qk_head_dim: int | None = None,
        v_head_dim: int | None = None,
        value_dim: int | None = None,
        memory_dim: int | None = None,
        memory_value_dim: int | None = None,
        attention_dropout: float | None = None,
        activation_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        activation_dropout = dropout if activation_dropout is None else activation_dropout
        heads = {"qk_head_dim": qk_head_dim, "v_head_dim": v_head_dim, "bias": bias, "dropout": attention_dropout}
        self.self_attn = MultiHeadAttention(dim, num_heads, value_dim=value_dim, **heads)
        self.norm1 = build_norm(norm, dim)
        self.cross_attn = None
        self.norm_cross = None
        if cross_attention:
            self.cross_attn = MultiHeadAttention(
                dim,
                num_heads,
                key_dim=memory_dim,
                value_dim=memory_dim if memory_value_dim is None else memory_value_dim,
                **heads,
            )
            self.norm_cross = build_norm(norm, dim)
        self.ffn = FeedForward(dim, hidden_dim, activation=activation, bias=bias, dropout=activation_dropout)
        self.norm2 = build_norm(norm, dim)
        self.dropout = Dropout(dropout)

    def residual_projections(self) -> list[nn.Linear]:
        """The layers whose outputs end a residual branch (zeroed by ``zero_init_residual``)."""
        layers = [self.self_attn.out_proj, self.ffn.fc2]
        if self.cross_attn is not None:
            layers.insert(1, self.cross_attn.out_proj)
        return layers

    def _branch(self, x: torch.Tensor, norm: nn.Module, fn) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        causal: bool = False,
        padding_mask: torch.Tensor | None = None,
        memory_padding_mask: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        memory_values: torch.Tensor | None = None,
        self_cache: AttentionCache | None = None,
        cross_cache: AttentionCache | None = None,
    ) -> torch.Tensor:
        """(B, L, dim) → (B, L, dim); masks are True at padding; caches for incremental decoding."""
        x = self._branch(
            x,
            self.norm1,
            lambda h: self.self_attn(h, None, values, causal=causal, key_padding_mask=padding_mask, cache=self_cache),
        )
        if self.cross_attn is not None:
            if memory is None and not (cross_cache is not None and cross_cache.filled):
                raise ValueError("a block with cross_attention=True needs a memory tensor")
            x = self._branch(
                x,
                self.norm_cross,
                lambda h: self.cross_attn(
                    h, memory, memory_values, key_padding_mask=memory_padding_mask, cache=cross_cache
                ),
            )
        return self._branch(x, self.norm2, self.ffn)


class DecoderCache:
    """What a decoder keeps between incremental steps: one self- and one (static) cross-attention
    :class:`AttentionCache` per layer, the positions decoded (``length``) and the model's running tensors
    (``state``, batch-first)."""

    def __init__(self, num_layers: int) -> None:
        self.self_attention = [AttentionCache() for _ in range(num_layers)]
        self.cross_attention = [AttentionCache(static=True) for _ in range(num_layers)]
        self.state: dict[str, torch.Tensor] = {}
        self.length = 0

    def reorder_(self, indices: torch.Tensor) -> None:
        """Keep batch rows ``indices`` everywhere (beam search)."""
        for cache in (*self.self_attention, *self.cross_attention):
            cache.reorder_(indices)
        self.state = {name: tensor.index_select(0, indices) for name, tensor in self.state.items()}


class TransformerStack(nn.Module):
    """``num_layers`` :class:`TransformerBlock` s of width ``dim`` (``block_options``: the block's), and a final norm
    when pre-LN. ``causal``: self-attention sees positions ≤ t only (a decoder, a language model), else the whole
    padded sequence (an encoder)."""

    def __init__(
        self,
        num_layers: int,
        dim: int,
        num_heads: int,
        hidden_dim: int,
        *,
        causal: bool = False,
        pre_norm: bool = False,
        norm: str = "layernorm",
        **block_options: Any,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be ≥ 1, got {num_layers}")
        self.causal = causal
        self.layers = nn.ModuleList(
            TransformerBlock(dim, num_heads, hidden_dim, pre_norm=pre_norm, norm=norm, **block_options)
            for _ in range(num_layers)
        )
        self.final_norm = build_norm(norm, dim) if pre_norm else None

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding with this (decoder) stack."""
        return DecoderCache(len(self.layers))

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None = None, *, cache: DecoderCache | None = None, **inputs: Any
    ) -> torch.Tensor:
        """(B, L, dim) → (B, L, dim); ``inputs`` go to every layer (:meth:`TransformerBlock.forward`'s masks and
        values); with ``cache`` ``x`` holds only the new positions."""
        for i, layer in enumerate(self.layers):
            if cache is not None:
                inputs.update(self_cache=cache.self_attention[i], cross_cache=cache.cross_attention[i])
            x = layer(x, memory, causal=self.causal, **inputs)
        if cache is not None:
            cache.length += x.shape[1]
        return x if self.final_norm is None else self.final_norm(x)
