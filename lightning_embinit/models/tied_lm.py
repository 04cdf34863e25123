"""A causal pre-LN transformer language model with a configurable (tied) output head (SPEC §3).

    x_0 = s · E[t] + P          (s = ``embedding_scale``, √D by default; P per ``positional``)
    x_{l+1} = Block_l(x_l)      (pre-LN: x + Attn(LN x), then x + FFN(LN x); causal attention)
    logits = Head(Norm(x_L))    (``head``: tied, untied, tied_orthogonal, tied_half_swap, tied_shuffle)

With ``zero_init_residual=True`` every block is the identity at initialization, so a tied
model starts as the bigram p(j | i) ∝ exp(ŵ_i · w_j) and its initial loss is about
ln(e^{dσ} + n − 1) for N(0, σ²) embeddings (SPEC §3); :meth:`initial_loss_prediction` gives
the estimate for every head. The model is an :class:`~lightning_embinit.init.EmbeddingHost`
with one slot, ``"tokens"``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.aggregation import MeanMetric

from lightning_embinit.modules.vocabulary import SPECIAL_TOKENS
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.initial_loss import predicted_initial_loss, token_std
from lightning_embinit.modules.blocks import TransformerBlock, build_norm
from lightning_embinit.modules.heads import OutputHead
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import build_positional, embed_tokens, fill_token_table_, resolve_scale
from lightning_embinit.models.module import EmbinitModule, check_schedule


class PerplexityFromLoss(MeanMetric):
    """exp of the token-weighted mean cross-entropy: update with (mean loss, token count)."""

    def compute(self) -> torch.Tensor:
        return super().compute().exp()


def split_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) from a ``(inputs, targets)`` pair or a dict with ``input_ids`` and ``labels``/``targets``."""
    if isinstance(batch, Mapping):
        targets = batch.get("labels", batch.get("targets"))
        if "input_ids" not in batch or targets is None:
            raise ValueError("a dict batch needs 'input_ids' and 'labels' (or 'targets')")
        return batch["input_ids"], targets
    inputs, targets = batch
    return inputs, targets


class TiedEmbeddingLM(EmbinitModule):
    """Causal transformer LM. Give ``vocabulary`` (token strings, saved with the model) or ``vocab_size``.

    ``init_scheme`` initializes the non-embedding weights (SPEC §4: ``xavier``, ``hf``, ``he_ffn``);
    ``embedding_init`` (any scheme name, e.g. ``normal:0.0625``, ``log_n_over_d``) the token table
    until :class:`~lightning_embinit.callbacks.EmbeddingInitCallback` replaces it.
    Optimizer: Adam(β = ``betas``, ε = ``eps``); ``lr_schedule`` ``constant`` or ``noam`` (see
    :func:`~lightning_embinit.models.module.noam_factor`, stepped per optimizer step).
    """

    def __init__(
        self,
        vocabulary: list[str] | None = None,
        vocab_size: int | None = None,
        d_model: int = 256,
        num_heads: int = 4,
        num_layers: int = 2,
        ffn_dim: int | None = None,
        dropout: float = 0.0,
        max_len: int = 512,
        positional: str = "sinusoidal",
        positional_layout: str = "interleaved",
        norm: str = "layernorm",
        activation: str = "gelu",
        bias: bool = True,
        head: str = "tied",
        head_bias: bool = False,
        head_activation: str = "none",
        shuffle_groups: int = 2,
        zero_init_residual: bool = True,
        init_scheme: str = "xavier",
        embedding_init: str = "xavier",
        embedding_scale: str | float = "sqrt_d",
        special_tokens: dict[str, str] | None = None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
        lr_schedule: str = "constant",
        warmup_steps: int = 4000,
    ) -> None:
        super().__init__()
        tokens = None if vocabulary is None else [str(t) for t in vocabulary]
        if tokens is not None:
            if vocab_size is not None and vocab_size != len(tokens):
                raise ValueError(f"vocab_size={vocab_size} disagrees with a vocabulary of {len(tokens)} tokens")
            vocab_size = len(tokens)
        if vocab_size is None or vocab_size < 2:
            raise ValueError("TiedEmbeddingLM needs a vocabulary (list of token strings) or vocab_size ≥ 2")
        check_schedule(lr_schedule, warmup_steps)
        self.save_hyperparameters(ignore=["vocabulary"])
        self.hparams["vocabulary"] = tokens  # a plain list whatever sequence was given; reloads with the checkpoint
        self.vocabulary = tokens
        if special_tokens is None:
            special_tokens = {r: t for r, t in SPECIAL_TOKENS.items() if tokens is not None and t in tokens}
        elif tokens is not None and (missing := [t for t in special_tokens.values() if t not in tokens]):
            raise ValueError(f"special tokens {missing} are not in the vocabulary")
        self.special_tokens = dict(special_tokens)
        pad = self.special_tokens.get("pad")
        self.padding_idx = tokens.index(pad) if pad is not None and tokens is not None else None

        self.input_scale = resolve_scale(embedding_scale, d_model)
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=self.padding_idx)
        self.positional = build_positional(positional, max_len, d_model, layout=positional_layout)
        self.embed_dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model, num_heads, ffn_dim or 4 * d_model, pre_norm=True, activation=activation,
                norm=norm, bias=bias, dropout=dropout,
            )
            for _ in range(num_layers)
        )
        self.final_norm = build_norm(norm, d_model)
        self.head = OutputHead(
            head, d_model, vocab_size, bias=head_bias, activation=head_activation, shuffle_groups=shuffle_groups
        )
        self.train_loss_epoch = MeanMetric()
        self.val_loss = MeanMetric()
        self.val_ppl = PerplexityFromLoss()
        self.test_loss = MeanMetric()
        self.test_ppl = PerplexityFromLoss()
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` (+ zero residual branches), head, token table."""
        skip = [self.head.proj] if self.head.kind == "tied_orthogonal" else []
        init_non_embedding_(self, self.hparams.init_scheme, zero_init_residual=self.hparams.zero_init_residual, skip=skip)
        self.head.reset_orthogonal()
        fill_token_table_(self.token_embedding, self.hparams.embedding_init)

    # ----------------------------------------------------------------- EmbeddingHost
    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """One slot, ``"tokens"``: the input table, shared with the head unless ``head="untied"``."""
        positional = self.positional
        return {
            "tokens": EmbeddingSlot(
                name="tokens",
                embedding=self.token_embedding,
                tokens=self.vocabulary,
                padding_idx=self.padding_idx,
                input_scale=self.input_scale,
                positional_encoding=None if positional is None else positional.encoding,
                tied_modules=("head",) if self.head.is_tied else (),
                special_tokens=dict(self.special_tokens),
            )
        }

    # ----------------------------------------------------------------- model
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids → (B, L, n) next-token logits."""
        x = embed_tokens(self.token_embedding, input_ids, scale=self.input_scale, positional=self.positional)
        x = self.embed_dropout(x)
        for block in self.blocks:
            x = block(x, causal=True)
        return self.head(self.final_norm(x), self.token_embedding.weight)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy over non-padding targets."""
        ignore = -100 if self.padding_idx is None else self.padding_idx
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore)

    def _step(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
        inputs, targets = split_batch(batch)
        loss = self.loss(self(inputs), targets)
        if self.padding_idx is None:
            count = torch.tensor(targets.numel(), device=loss.device)
        else:
            count = (targets != self.padding_idx).sum()  # stays on the device: no sync per step
        return loss, count, inputs.shape[0]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, count, batch_size = self._step(batch)
        self.train_loss_epoch.update(loss.detach().float(), weight=count)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=batch_size)
        self.log("train_loss_epoch", self.train_loss_epoch, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._evaluate(batch, self.val_loss, self.val_ppl, "val")

    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._evaluate(batch, self.test_loss, self.test_ppl, "test")

    def _evaluate(self, batch: Any, loss_metric: MeanMetric, ppl_metric: PerplexityFromLoss, prefix: str) -> torch.Tensor:
        loss, count, batch_size = self._step(batch)
        loss_metric.update(loss.detach().float(), weight=count)
        ppl_metric.update(loss.detach().float(), weight=count)
        self.log(f"{prefix}_loss", loss_metric, prog_bar=prefix == "val", on_epoch=True, batch_size=batch_size)
        self.log(f"{prefix}_ppl", ppl_metric, on_epoch=True, batch_size=batch_size)
        return loss

    # ----------------------------------------------------------------- SPEC §3 estimate
    @torch.no_grad()
    def initial_loss_prediction(self, length: int | None = None) -> float | None:
        """Expected initial loss from the current weights, assuming identity blocks (SPEC §3).

        With h = Norm(s·w_i + P_p) the logit of token j is T(h) · w_j. For j ≠ i these are about
        N(0, D·σ²·m₂) (m₂ = E[T(h)²]; for ``untied`` D·σ_W² from the head matrix); the diagonal
        logit of a plain ``tied`` head is a_p = s·D·σ² / √(s²σ² + π_p²), π_p² the variance
        (LayerNorm) or mean square (RMSNorm) of the row P_p — dσ without a position signal.
        Returns :func:`~lightning_embinit.init.initial_loss.predicted_initial_loss` averaged over the
        first ``length`` positions — pass the sequence length trained on, as
        :class:`~lightning_embinit.callbacks.initial_loss.InitialLossMonitor` does; default
        ``max_len`` — or None when ``zero_init_residual`` is off (the blocks are then not the identity).
        """
        if not self.hparams.zero_init_residual:
            return None
        n, d = self.token_embedding.num_embeddings, self.token_embedding.embedding_dim
        if self.head.kind == "untied":
            variance = d * token_std(self.head.proj.weight) ** 2
            return predicted_initial_loss(n, variance)
        sigma2 = token_std(self.token_embedding.weight, self.padding_idx) ** 2
        variance = d * sigma2 * self.head.second_moment()
        if self.head.kind != "tied":
            return predicted_initial_loss(n, variance)
        s = self.input_scale
        if self.positional is None:
            pe_power = [0.0]
        else:
            rows = self.positional.encoding()[: length or self.hparams.max_len].double()
            centred = self.hparams.norm == "layernorm"
            pe_power = (rows.var(dim=1, unbiased=False) if centred else rows.square().mean(dim=1)).tolist()
        losses = [
            predicted_initial_loss(n, variance, s * d * sigma2 / math.sqrt(s * s * sigma2 + p) if sigma2 > 0 else 0.0)
            for p in pe_power
        ]
        return sum(losses) / len(losses)
