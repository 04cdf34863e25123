"""The initial loss of a language model whose output reuses its input embedding (``docs/concepts.md``, "The tied
head and the initial loss"; Su Jianlin, "Re-exploring Shared Embeddings at the Output of Language Models").

Torch-only math shared by :class:`~lightning_embinit.models.TiedEmbeddingLM` (its own
prediction) and :class:`~lightning_embinit.callbacks.InitialLossMonitor` (the logged one).
"""

from __future__ import annotations

import math

import torch

from lightning_embinit.init.statistics import matrix_statistics, rows_without


def token_std(weight: torch.Tensor, padding_idx: int | None = None) -> float:
    """Population std of an embedding table's elements, leaving out the padding row (the σ of ln(e^{dσ} + n − 1))."""
    return matrix_statistics(rows_without(weight.detach(), padding_idx)).std


def predicted_initial_loss(n: int, logit_var: float, diagonal_logit: float = 0.0) -> float:
    """Expected cross-entropy of a model that is a bigram p(j | i) ∝ exp(logit_ij) at init.

    The next token's logit and the n − 1 others are i.i.d. N(0, s²) (s² = ``logit_var``), the
    current token's own logit is ``diagonal_logit`` = a. Averaging e^{logit} gives e^{s²/2}, so

        loss ≈ ln(e^{a} + (n − 1) · e^{s²/2}).

    For a tied head with σ-normal embeddings and no additive position signal, a = dσ; dropping
    the off-diagonal spread (s² → 0, w_i · w_k ≈ 0) gives ln(e^{dσ} + n − 1).
    Untied and decorrelated tied heads have a ≈ 0: ln n + s²/2 ≈ ln n.
    """
    if n < 2:
        raise ValueError(f"a vocabulary needs at least 2 tokens, got {n}")
    rest = math.log(n - 1) + logit_var / 2
    high, low = max(diagonal_logit, rest), min(diagonal_logit, rest)
    return high + math.log1p(math.exp(low - high))


def tied_initial_loss(n: int, d: int, sigma: float) -> float:
    """ln(e^{dσ} + n − 1), the initial loss of a tied LM with N(0, σ²) embeddings."""
    return predicted_initial_loss(n, 0.0, d * sigma)
