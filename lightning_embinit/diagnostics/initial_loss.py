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


@torch.no_grad()
def random_token_loss(
    weight: torch.Tensor,
    *,
    input_scale: float = 1.0,
    positional: torch.Tensor | None = None,
    padding_idx: int | None = None,
    norm: str = "layernorm",
    samples: int = 512,
    seed: int = 0,
    tokens: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> float:
    """The loss on uniform random tokens of a plain tied LM whose blocks are the identity at initialization ([S]'s
    setting: ``zero_init_residual``), from its table alone: h = Norm(s·w_i + P_p) (LayerNorm or RMSNorm, no affine,
    ε = 1e-5), logits h·Wᵀ, the target uniform over the non-padding rows, so per (i, p)

        loss = logsumexp_k(h · w_k) − h · w̄,   w̄ the mean non-padding row,

    averaged over ``samples`` seeded draws of a token i (not the padding row) and a position p of P (or over the given
    ``tokens`` and ``positions``). Unlike ln(e^{dσ} + n − 1) it assumes nothing of the rows: rows that share directions
    show their real start, as the model's own forward on random tokens does (``initial_loss_probe``)."""
    table = weight.detach().float()
    n, d = table.shape
    keep = torch.ones(n, dtype=torch.bool)
    if padding_idx is not None:
        keep[padding_idx % n] = False
    ordinary = keep.nonzero().flatten()
    if tokens is None:
        generator = torch.Generator().manual_seed(seed)
        tokens = ordinary[torch.randint(len(ordinary), (samples,), generator=generator)]
        length = 1 if positional is None else positional.shape[0]
        positions = torch.randint(length, (samples,), generator=generator)
    inputs = input_scale * table[tokens.to(table.device)]
    if positional is not None:
        inputs = inputs + positional.detach().float().to(table.device)[positions.to(table.device)]
    if norm == "layernorm":
        hidden = torch.nn.functional.layer_norm(inputs, (d,), eps=1e-5)
    elif norm == "rmsnorm":
        hidden = torch.nn.functional.rms_norm(inputs, (d,), eps=1e-5)
    else:
        raise ValueError(f"norm must be 'layernorm' or 'rmsnorm', got {norm!r}")
    target_mean = table[ordinary.to(table.device)].mean(dim=0)
    losses = [
        torch.logsumexp(part @ table.T, dim=1) - part @ target_mean for part in hidden.split(max(1, (1 << 22) // n))
    ]
    return float(torch.cat(losses).double().mean())
