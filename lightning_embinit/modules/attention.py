"""Multi-head attention on :func:`torch.nn.functional.scaled_dot_product_attention`, with the key/value cache of
incremental decoding ([R]: per-head widths r and q, values of their own width; docs/concepts.md#reinforced-model).
Nothing here imports Lightning.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lightning_embinit.checks import check_positive_int, check_probability


class AttentionCache:
    """Keys and values of one attention layer, kept across incremental decoding steps: a ``static`` cache
    (cross-attention) is filled from the memory at the first call and reused; otherwise (self-attention) every call
    appends the new positions' keys and values."""

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

    softmax(Q Kᵀ / √r) V per head, Q = x W_Q, K = k W_K, V = v W_V, then the concatenated heads times W_O ([R]).
    ``qk_head_dim`` (r) and ``v_head_dim`` (q) default to ``embed_dim / num_heads``; ``key_dim`` / ``value_dim``:
    keys and values from inputs of another width ([R]'s "value without concatenation"). Projections that read the
    same input run as one GEMM.
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
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        if (qk_head_dim is None or v_head_dim is None) and embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.qk_head_dim = (
            embed_dim // num_heads if qk_head_dim is None else check_positive_int("qk_head_dim", qk_head_dim)
        )
        self.v_head_dim = embed_dim // num_heads if v_head_dim is None else check_positive_int("v_head_dim", v_head_dim)
        self.dropout = check_probability("attention dropout", dropout)
        self.q_proj = nn.Linear(embed_dim, num_heads * self.qk_head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim if key_dim is None else key_dim, num_heads * self.qk_head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim if value_dim is None else value_dim, num_heads * self.v_head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * self.v_head_dim, embed_dim, bias=bias)

    @staticmethod
    def _fused(x: torch.Tensor, *projections: nn.Linear) -> tuple[torch.Tensor, ...]:
        weight = torch.cat([p.weight for p in projections])
        bias = None if projections[0].bias is None else torch.cat([p.bias for p in projections])
        return F.linear(x, weight, bias).split([p.out_features for p in projections], dim=-1)

    def _heads(self, x: torch.Tensor, head_dim: int) -> torch.Tensor:
        return x.unflatten(-1, (self.num_heads, head_dim)).transpose(1, 2)  # (B, H, L, h)

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

        ``key=None`` is self-attention (keys from ``query``; values from ``value`` when given, else ``query``); a
        ``key`` is a memory (values from ``value``, else ``key``). With a ``cache`` the new keys/values are appended
        to (self-attention) or read from (a static cache, after its first call) the earlier steps'.
        """
        static = cache is not None and cache.static
        if key is None and not static:  # self-attention
            if value is None:
                q, k, v = self._fused(query, self.q_proj, self.k_proj, self.v_proj)
            else:
                q, k = self._fused(query, self.q_proj, self.k_proj)
                v = self.v_proj(value)
            k, v = self._heads(k, self.qk_head_dim), self._heads(v, self.v_head_dim)
            if cache is not None:
                k, v = cache.extend(k, v)
        elif static and cache.filled:  # a memory projected at the first step, read back
            q, k, v = self.q_proj(query), cache.key, cache.value
        elif key is None:
            raise ValueError("a static (cross-attention) cache is filled from a memory: pass key at the first step")
        else:  # a memory
            q = self.q_proj(query)
            k, v = (
                self._fused(key, self.k_proj, self.v_proj)
                if value is None or value is key
                else (self.k_proj(key), self.v_proj(value))
            )
            k, v = self._heads(k, self.qk_head_dim), self._heads(v, self.v_head_dim)
            if static:
                k, v = cache.extend(k, v)
        q = self._heads(q, self.qk_head_dim)
        lq, lk = q.shape[-2], k.shape[-2]
        mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # True = attend
        if causal and (mask is not None or lq != lk):
            if lq > 1:  # queries are the last lq of lk positions (incremental decoding)
                allowed = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
                mask = allowed if mask is None else mask & allowed
            causal = False
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=causal
        )
        return self.out_proj(out.transpose(1, 2).flatten(-2))
