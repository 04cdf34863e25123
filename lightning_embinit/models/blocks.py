"""Generic transformer building blocks shared by every model of the package.

One block serves the pre-LN causal LM of SPEC §3, the post-LN encoder–decoder of SPEC §2 and
the reinforced model's layers: ``pre_norm`` picks the layer-norm placement, ``causal`` is a
call-time flag, a block built with ``cross_attention=True`` attends to a memory, per-head widths
r and q are options, and values of their own width can be given at call time. Attention runs on
:func:`torch.nn.functional.scaled_dot_product_attention`; padding masks reach every attention.

- :class:`TransformerStack`: an encoder or a decoder (with incremental decoding through a
  :class:`DecoderCache` of :class:`AttentionCache` s), reused unchanged by every model;
- what the first layer sees (s · E[ids] + P) is :mod:`lightning_embinit.models.inputs`.

Nothing here imports Lightning.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

NORMS = ("layernorm", "rmsnorm")


def identity(x: torch.Tensor) -> torch.Tensor:
    """The ``none`` activation."""
    return x


ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "none": identity,
    "relu": F.relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
}
"""Every elementwise activation by name: the FFN's (:data:`ACTIVATIONS`) and the head's."""
ACTIVATIONS = ("relu", "gelu")


def check_choice(kind: str, value: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a ValueError naming them."""
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; choose one of: {', '.join(choices)}")
    return value


def build_norm(kind: str, dim: int, eps: float = 1e-5) -> nn.Module:
    """``layernorm`` (γ = 1, β = 0) or ``rmsnorm`` (γ = 1): x / rms(x) · γ."""
    check_choice("norm", kind, NORMS)
    return nn.LayerNorm(dim, eps=eps) if kind == "layernorm" else nn.RMSNorm(dim, eps=eps)


def activation_fn(
    kind: str, choices: tuple[str, ...] = ACTIVATIONS, *, what: str = "activation"
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function :data:`ACTIVATION_FUNCTIONS` maps ``kind`` to, if ``kind`` is one of ``choices``."""
    return ACTIVATION_FUNCTIONS[check_choice(what, kind, choices)]


class Dropout(nn.Dropout):
    """``nn.Dropout`` with a cheaper mask on CPU; other devices use :func:`torch.nn.functional.dropout`.

    torch's CPU dropout draws one Bernoulli variable per element, about a sixth of a training step
    of [K]'s model in ``benchmarks/bench_seq2seq.py``. Here one 64-bit random integer (torch's
    generator, so seeding works as usual) masks four elements: an element is kept when its 16-bit
    share is ≥ the threshold, so p is rounded to a multiple of 1/65536 (0.1 → 0.100006). Kept
    elements are scaled by 1/(1 − p), as in ``nn.Dropout``; the mask is kept as 0 or 1/(1 − p) in
    ``x``'s dtype, so forward and backward are one product each.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or x.device.type != "cpu" or not 0.0 < self.p < 1.0 or self.inplace:
            return super().forward(x)
        words = torch.randint(-(2**63), 2**63 - 1, ((x.numel() + 3) // 4,), dtype=torch.int64, device=x.device)
        shares = words.view(torch.int16)[: x.numel()].view(x.shape)
        scale, zero = x.new_full((), 1.0 / (1.0 - self.p)), x.new_zeros(())
        return x * torch.where(shares >= round(self.p * 65536) - 32768, scale, zero)


class AttentionCache:
    """Keys and values of one attention layer, kept across incremental decoding steps.

    A ``static`` cache (cross-attention) is filled from the memory at the first call and reused;
    otherwise (self-attention) every call appends the new positions' keys and values, so the
    keys/values of earlier steps are never recomputed.
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None

    @property
    def filled(self) -> bool:
        return self.key is not None

    def extend(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store (static) or append (self-attention) (B, H, L, h) keys/values; returns all of them."""
        if self.key is None or self.static:
            self.key, self.value = key, value
        else:
            self.key, self.value = torch.cat((self.key, key), dim=2), torch.cat((self.value, value), dim=2)
        return self.key, self.value

    def reorder_(self, indices: torch.Tensor) -> None:
        """Keep the batch rows ``indices`` (beam search: the surviving hypotheses' parents)."""
        if self.key is not None:
            self.key, self.value = self.key.index_select(0, indices), self.value.index_select(0, indices)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate query, key and value inputs (self- or cross-attention).

    softmax(Q Kᵀ / √r) V per head, Q = x W_Q, K = k W_K, V = v W_V, then the concatenated heads
    times W_O (SPEC §2). ``qk_head_dim`` (r) and ``v_head_dim`` (q) default to
    ``embed_dim / num_heads``; ``key_dim``/``value_dim`` let keys and values come from inputs of
    another width (SPEC §2's "value without concatenation"). Projections that read the same input
    run as one GEMM (Q, K, V for self-attention; Q, K when only the values differ; K, V for a memory).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        key_dim: int | None = None,
        value_dim: int | None = None,
        qk_head_dim: int | None = None,
        v_head_dim: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads must be ≥ 1, got {num_heads}")
        if (qk_head_dim is None or v_head_dim is None) and embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.qk_head_dim = qk_head_dim or embed_dim // num_heads
        self.v_head_dim = v_head_dim or embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, num_heads * self.qk_head_dim, bias=bias)
        self.k_proj = nn.Linear(key_dim or embed_dim, num_heads * self.qk_head_dim, bias=bias)
        self.v_proj = nn.Linear(value_dim or embed_dim, num_heads * self.v_head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * self.v_head_dim, embed_dim, bias=bias)

    @staticmethod
    def _fused(x: torch.Tensor, *projections: nn.Linear) -> tuple[torch.Tensor, ...]:
        weight = torch.cat([p.weight for p in projections])
        bias = None if projections[0].bias is None else torch.cat([p.bias for p in projections])
        return F.linear(x, weight, bias).split([p.out_features for p in projections], dim=-1)

    def _fused_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._fused(x, self.q_proj, self.k_proj, self.v_proj)

    def _heads(self, x: torch.Tensor, head_dim: int) -> torch.Tensor:
        return x.unflatten(-1, (self.num_heads, head_dim)).transpose(1, 2)  # (B, H, L, h)

    def _project_kv(self, key: torch.Tensor, value: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if value is None or value is key:
            k, v = self._fused(key, self.k_proj, self.v_proj)
        else:
            k, v = self.k_proj(key), self.v_proj(value)
        return self._heads(k, self.qk_head_dim), self._heads(v, self.v_head_dim)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        causal: bool = False,
        key_padding_mask: torch.Tensor | None = None,
        cache: AttentionCache | None = None,
    ) -> torch.Tensor:
        """(B, Lq, D) → (B, Lq, D). ``key_padding_mask`` is (B, Lk), True where a key is padding.

        ``key=None`` is self-attention (keys from ``query``; values from ``value`` when given, a
        width-``value_dim`` input, else from ``query``); a ``key`` is a memory (cross-attention;
        values from ``value``, else from ``key``). With a ``cache`` the new keys/values are appended
        to (self-attention) or read from (static cache, after its first call) the earlier steps'.
        """
        if cache is not None and cache.static:  # a memory: projected once, then read back
            q = self._heads(self.q_proj(query), self.qk_head_dim)
            if cache.filled:
                k, v = cache.key, cache.value
            elif key is None:
                raise ValueError("a static (cross-attention) cache is filled from a memory: pass key at the first step")
            else:
                k, v = cache.extend(*self._project_kv(key, value))
        elif key is None:
            if value is None:
                q, k, v = self._fused_qkv(query)
            else:
                q, k = self._fused(query, self.q_proj, self.k_proj)
                v = self.v_proj(value)
            q, k, v = self._heads(q, self.qk_head_dim), self._heads(k, self.qk_head_dim), self._heads(v, self.v_head_dim)
            if cache is not None:
                k, v = cache.extend(k, v)
        else:
            q = self._heads(self.q_proj(query), self.qk_head_dim)
            k, v = self._project_kv(key, value)
        lq, lk = q.shape[-2], k.shape[-2]
        mask = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask[:, None, None, :]  # True = attend
        if causal and (mask is not None or lq != lk):
            if lq > 1:  # queries are the last lq of lk positions (incremental decoding)
                allowed = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
                mask = allowed if mask is None else mask & allowed
            causal = False
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=causal
        )
        return self.out_proj(out.transpose(1, 2).flatten(-2))


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2 (SPEC §2; ``relu`` is the tutorial's), hidden width ``hidden_dim``."""

    def __init__(self, dim: int, hidden_dim: int, *, activation: str = "gelu", bias: bool = True, dropout: float = 0.0):
        super().__init__()
        self.activation = activation
        self._act = activation_fn(activation)
        self.fc1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.fc2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self._act(self.fc1(x))))


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention and an FFN, each a residual branch.

    Pre-LN (``pre_norm=True``):  x ← x + Drop(F(LN(x))) for each branch F.
    Post-LN (``pre_norm=False``, SPEC §2): x ← LN(x + Drop(F(x))).

    SPEC §2's options: per-head query/key width ``qk_head_dim`` (r) and value width
    ``v_head_dim`` (q); ``value_dim`` / ``memory_value_dim``: the width of a separate value input
    given at call time (``values`` for self-attention, ``memory_values`` for cross-attention) —
    the reinforced model's "value without concatenation"; ``memory_dim``: the memory's width.
    ``dropout`` acts on every residual branch, and on the attention weights and the FFN's hidden
    layer unless ``attention_dropout``/``activation_dropout`` say otherwise (``torch.nn.Transformer``'s
    placement; Vaswani et al. drop only the residual branches and the input: set both to 0).
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
        norm_eps: float = 1e-5,
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
        self.norm1 = build_norm(norm, dim, norm_eps)
        self.cross_attn = None
        self.norm_cross = None
        if cross_attention:
            self.cross_attn = MultiHeadAttention(
                dim, num_heads, key_dim=memory_dim, value_dim=memory_value_dim or memory_dim, **heads
            )
            self.norm_cross = build_norm(norm, dim, norm_eps)
        self.ffn = FeedForward(dim, hidden_dim, activation=activation, bias=bias, dropout=activation_dropout)
        self.norm2 = build_norm(norm, dim, norm_eps)
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
            x, self.norm1,
            lambda h: self.self_attn(h, None, values, causal=causal, key_padding_mask=padding_mask, cache=self_cache),
        )
        if self.cross_attn is not None:
            if memory is None and not (cross_cache is not None and cross_cache.filled):
                raise ValueError("a block with cross_attention=True needs a memory tensor")
            x = self._branch(
                x, self.norm_cross,
                lambda h: self.cross_attn(
                    h, memory, memory_values, key_padding_mask=memory_padding_mask, cache=cross_cache
                ),
            )
        return self._branch(x, self.norm2, self.ffn)


class DecoderCache:
    """Everything a decoder keeps between incremental steps: one self- and one (static)
    cross-attention :class:`AttentionCache` per layer, the number of positions already decoded
    (``length``), and model-specific running tensors (``state``, batch-first)."""

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
    """``num_layers`` :class:`TransformerBlock` s of width ``dim``, and a final norm when pre-LN.

    Encoder (``cross_attention=False``): bidirectional self-attention over a padded batch.
    Decoder (``cross_attention=True``): causal self-attention and attention to a memory, with
    incremental decoding through a :class:`DecoderCache`. ``values``/``memory_values`` (SPEC §2,
    reinforced model) go to every layer's self-/cross-attention. ``block_options`` are
    :class:`TransformerBlock`'s.
    """

    def __init__(
        self,
        num_layers: int,
        dim: int,
        num_heads: int,
        hidden_dim: int,
        *,
        cross_attention: bool = False,
        pre_norm: bool = False,
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
        **block_options: Any,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be ≥ 1, got {num_layers}")
        self.cross_attention = cross_attention
        self.layers = nn.ModuleList(
            TransformerBlock(
                dim, num_heads, hidden_dim, pre_norm=pre_norm, cross_attention=cross_attention, norm=norm,
                norm_eps=norm_eps, **block_options,
            )
            for _ in range(num_layers)
        )
        self.final_norm = build_norm(norm, dim, norm_eps) if pre_norm else None

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding with this (decoder) stack."""
        return DecoderCache(len(self.layers))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        padding_mask: torch.Tensor | None = None,
        memory_padding_mask: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        memory_values: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """(B, L, dim) → (B, L, dim). A decoder is causal; with ``cache`` ``x`` holds only the new positions."""
        for i, layer in enumerate(self.layers):
            x = layer(
                x, memory, causal=self.cross_attention, padding_mask=padding_mask,
                memory_padding_mask=memory_padding_mask, values=values, memory_values=memory_values,
                self_cache=None if cache is None else cache.self_attention[i],
                cross_cache=None if cache is None else cache.cross_attention[i],
            )
        if cache is not None:
            cache.length += x.shape[1]
        return x if self.final_norm is None else self.final_norm(x)
