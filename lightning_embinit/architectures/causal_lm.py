"""A causal pre-LN transformer language model with a configurable (tied) output head ([S]), a plain ``nn.Module``:

    x_0 = s · E[t] + P          (s = ``embedding_scale``, √D by default; P per ``positional``)
    x_{l+1} = Block_l(x_l)      (pre-LN: x + Attn(LN x), then x + FFN(LN x); causal attention)
    logits = Head(Norm(x_L))    (``head``: tied, untied, tied_orthogonal, tied_half_swap, tied_shuffle)

With ``zero_init_residual=True`` every block is the identity at initialization, so a tied model starts as the
bigram p(j | i) ∝ exp(ŵ_i · w_j) and its initial loss is about ln(e^{dσ} + n − 1) for N(0, σ²) embeddings (Su,
"Re-exploring Shared Embeddings at the Output of Language Models" [S]; docs/concepts.md#tied-head);
:meth:`CausalLM.initial_loss_prediction` gives the estimate for every head. One slot, ``"tokens"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from lightning_embinit.architectures.config import CausalLMConfig
from lightning_embinit.checks import check_positive_int
from lightning_embinit.diagnostics.initial_loss import predicted_initial_loss, token_std
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.decoding import eval_mode
from lightning_embinit.modules.heads import OutputHead
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import EmbeddingInput, fill_token_table_
from lightning_embinit.vocabulary import Vocabulary, VocabularyLike


class CausalLM(nn.Module):
    """Causal transformer LM over ``vocab`` (module docstring; :class:`CausalLMConfig`); its ``pad`` id, when
    it has one, is the table's padding row."""

    def __init__(self, config: CausalLMConfig, vocab: VocabularyLike) -> None:
        super().__init__()
        self.config = config
        self.vocab = Vocabulary.of(vocab)
        self.padding_idx = self.vocab.pad_id
        d = config.d_model
        self.input = EmbeddingInput(
            nn.Embedding(self.vocab.size, d, padding_idx=self.padding_idx),
            scale=config.embedding_scale,
            positional=config.positional,
            layout=config.positional_layout,
            max_len=config.max_len,
            dropout=config.dropout,
            scale_option="embedding_scale",
        )
        self.stack = config.stack(config.num_layers, causal=True, pre_norm=True, bias=config.bias)
        self.head = OutputHead(
            config.head,
            d,
            self.vocab.size,
            bias=config.head_bias,
            activation=config.head_activation,
            shuffle_groups=config.shuffle_groups,
        )
        self.reset_parameters()

    @property
    def token_embedding(self) -> nn.Embedding:
        return self.input.embedding

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` (+ zero residual branches), head, token table."""
        skip = [self.head.proj] if self.head.kind == "tied_orthogonal" else []
        init_non_embedding_(self, self.config.init_scheme, zero_init_residual=self.config.zero_init_residual, skip=skip)
        self.head.reset_orthogonal()
        fill_token_table_(self.token_embedding, self.config.embedding_init)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """One slot, ``"tokens"``: the input table, shared with the head unless ``head="untied"``."""
        return {
            "tokens": self.input.slot(
                "tokens", **self.vocab.slot_arguments(), tied_modules=("head",) if self.head.is_tied else ()
            )
        }

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids → (B, L, n) next-token logits."""
        return self.head(self.stack(self.input(input_ids)), self.token_embedding.weight)

    def vocabulary_outputs(self) -> dict[str, tuple[str, ...]]:
        """Slot → the untied output layers whose rows follow its vocabulary (the ``untied`` head's)."""
        return {} if self.head.is_tied else {"tokens": ("head.proj",)}

    def output_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, L) ids → (B, L, D): what meets the output matrix (the head's transform of the final-normed state)."""
        hidden = self.stack(self.input(input_ids))
        return hidden if self.head.kind == "untied" else self.head.transform(hidden)

    def remap_vocabulary(self, slot: str, vocab: Vocabulary, new_id: Callable[[int | None], int | None]) -> None:
        """Follow a vocabulary extension of ``slot`` (its tables were rewritten): the vocabulary and padding id."""
        self.vocab = vocab
        self.padding_idx = vocab.pad_id

    @torch.no_grad()
    def initial_loss_prediction(self, length: int | None = None) -> float | None:
        """Expected initial loss from the current weights, assuming identity blocks ([S]).

        With h = Norm(s·w_i + P_p) the logit of token j is T(h) · w_j. For j ≠ i these are about
        N(0, D·σ²·m₂) (m₂ = E[T(h)²]; for ``untied`` D·σ_W² from the head matrix); the diagonal
        logit of a plain ``tied`` head is a_p = s·D·σ² / √(s²σ² + π_p²), π_p² the variance
        (LayerNorm) or mean square (RMSNorm) of the row P_p — dσ without a position signal.
        Returns :func:`~lightning_embinit.diagnostics.initial_loss.predicted_initial_loss` averaged over the
        first ``length`` positions (the sequence length trained on; default ``max_len``), or None when
        ``zero_init_residual`` is off (the blocks are then not the identity).
        """
        check_positive_int("length", length, optional=True)
        if not self.config.zero_init_residual:
            return None
        n, d = self.token_embedding.num_embeddings, self.token_embedding.embedding_dim
        if self.head.kind == "untied":
            return predicted_initial_loss(n, d * token_std(self.head.proj.weight) ** 2)
        sigma2 = token_std(self.token_embedding.weight, self.padding_idx) ** 2
        variance = d * sigma2 * self.head.second_moment()
        if self.head.kind != "tied":
            return predicted_initial_loss(n, variance)
        s = self.input.scale
        losses = [
            predicted_initial_loss(n, variance, s * d * sigma2 / math.sqrt(s * s * sigma2 + p) if sigma2 > 0 else 0.0)
            for p in self._positional_power(length)
        ]
        return sum(losses) / len(losses)

    def _positional_power(self, length: int | None) -> list[float]:
        """π_p² of the first ``length`` rows of P: their variance (LayerNorm) or mean square (RMSNorm);
        [0] without P."""
        if self.input.positional is None:
            return [0.0]
        rows = self.input.positional.encoding()[: self.config.max_len if length is None else length].double()
        centred = self.config.norm == "layernorm"
        return (rows.var(dim=1, unbiased=False) if centred else rows.square().mean(dim=1)).tolist()

    @torch.no_grad()
    def initial_loss_probe(self, length: int | None = None, *, batch_size: int = 16, seed: int = 0) -> float:
        """The model's own next-token loss on uniform random tokens against uniform random targets (eval mode).

        Data-free and assumption-free: where :meth:`initial_loss_prediction` assumes i.i.d. rows ([S]), this
        runs the forward pass itself, so rows that share directions — pre-trained vectors, even standardized — show
        their real start. Tokens and targets avoid the special ids; for i.i.d. rows it agrees with the prediction.
        """
        check_positive_int("length", length, optional=True)
        check_positive_int("batch_size", batch_size)
        length = min(length or self.config.max_len, self.config.max_len)
        ordinary = torch.tensor(sorted(set(range(self.vocab.size)) - set(self.vocab.special_ids.values())))
        if len(ordinary) == 0:
            ordinary = torch.arange(self.vocab.size)
        generator = torch.Generator().manual_seed(seed)
        draw = lambda: ordinary[torch.randint(len(ordinary), (batch_size, length), generator=generator)]  # noqa: E731
        inputs, targets = draw(), draw()
        device = self.token_embedding.weight.device
        with eval_mode(self):
            logits = self(inputs.to(device)).float()
        return float(nn.functional.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten()))
