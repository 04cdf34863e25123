"""The reinforced-position-embedding encoder–decoder of [R] (the "proposed" model; docs/concepts.md#reinforced-model),
a plain ``nn.Module``. Three changes to the baseline (:class:`~lightning_embinit.architectures.EncoderDecoder`):

1. Token normalization: TN(X_e) standardizes each feature column of a sequence's n×m token embeddings over its
   non-pad positions, (x − mean) / √(var + ε) (:mod:`lightning_embinit.modules.token_normalization`).
2. Concatenation: the first block's input is [TN(X_e) ‖ P], width 2m.
3. Values without concatenation: every attention takes queries and keys from its 2m-wide input, but values from
   TN(X_e) of the source (encoder self-attention, decoder cross-attention) or TN(Y_e) of the target prefix (decoder
   self-attention): W^V is m → q·p, W^O q·p → 2m; residuals, norms, FFNs and the dense output layer are 2m wide.

``target_normalization="sequence"`` (the paper's) takes each target column's statistics over the whole target
sentence, which leaks later tokens into teacher-forced losses and makes step-by-step decoding differ from training;
``causal`` takes them over positions ≤ t: no leak, and incremental decoding equals the full forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lightning_embinit.architectures.config import ReinforcedEncoderDecoderConfig
from lightning_embinit.architectures.encoder_decoder import Seq2SeqArchitecture
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.blocks import DecoderCache, Dropout
from lightning_embinit.modules.heads import OutputHead
from lightning_embinit.modules.inputs import build_positional, lookup_tokens
from lightning_embinit.modules.token_normalization import causal_token_normalize, token_normalize
from lightning_embinit.vocabulary import VocabularyLike

TN_STATE = ("tn_sum", "tn_sum_sq", "tn_count")
"""The running sums of causal target normalization in a :class:`DecoderCache`'s ``state``."""


class ReinforcedEncoderDecoder(Seq2SeqArchitecture):
    """[R]'s proposed model (module docstring; :class:`ReinforcedEncoderDecoderConfig`): ``d_model`` is m.

    Slots ``src`` and ``tgt`` (or ``shared``) have ``input_scale`` 1 (TN cancels any factor s > 0 on the table) and
    no ``positional_encoding`` (P is concatenated, not added: no absorption).
    """

    def __init__(
        self, config: ReinforcedEncoderDecoderConfig, src_vocab: VocabularyLike, tgt_vocab: VocabularyLike
    ) -> None:
        super().__init__(config, src_vocab, tgt_vocab)
        d, width = config.d_model, 2 * config.d_model
        self.src_embedding, self.tgt_embedding = self._token_tables(d)
        self.positional = build_positional(config.positional, config.max_len, d)
        self.input_dropout = Dropout(config.dropout)
        self.encoder = config.stack(config.num_encoder_layers, value_dim=d)
        self.decoder = config.stack(
            config.num_decoder_layers,
            value_dim=d,
            causal=True,
            cross_attention=True,
            memory_dim=width,
            memory_value_dim=d,
        )
        self.head = OutputHead("untied", width, self.tgt_vocab.size, bias=True)
        self.reset_parameters()

    def token_tables(self) -> tuple[nn.Embedding, nn.Embedding]:
        return self.src_embedding, self.tgt_embedding

    def side_slot(self, name: str, side: str, **options: Any) -> EmbeddingSlot:
        table = getattr(self, f"{side}_embedding")
        return EmbeddingSlot(name, table, input_scale=1.0, positional_encoding=None, **options)

    def _concatenate(self, normalized: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Drop([TN ‖ P[offset : offset + L]]); the positional table raises past ``max_len``."""
        batch, length, _ = normalized.shape
        position = self.positional(length, offset).to(normalized.dtype).expand(batch, length, -1)
        return self.input_dropout(torch.cat((normalized, position), dim=-1))

    def encoder_input(self, src: torch.Tensor, padding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values = token_normalize(lookup_tokens(self.src_embedding, src), padding, eps=self.config.tn_eps)
        return self._concatenate(values), values

    def decoder_input(
        self, tgt_in: torch.Tensor, offset: int, cache: DecoderCache | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Drop([TN(Y_e) ‖ P]) and TN(Y_e) per ``target_normalization`` (the causal running sums kept in ``cache``)."""
        padding, eps = tgt_in == self.pad_id, self.config.tn_eps
        embedded = lookup_tokens(self.tgt_embedding, tgt_in)
        if self.config.target_normalization == "sequence":
            if cache is not None:
                raise ValueError(
                    "target_normalization='sequence' cannot decode incrementally: each step renormalizes the prefix"
                )
            values = token_normalize(embedded, padding, eps=eps)
        else:
            running = tuple(cache.state[key] for key in TN_STATE) if cache and TN_STATE[0] in cache.state else None
            values, running = causal_token_normalize(embedded, padding, eps=eps, running=running)
            if cache is not None:
                cache.state.update(zip(TN_STATE, running))
        return self._concatenate(values, offset), values

    def new_cache(self) -> DecoderCache | None:
        """None under ``sequence`` normalization: every step renormalizes the whole prefix."""
        if self.config.target_normalization == "sequence":
            return None
        return self.decoder.new_cache()
