"""The reinforced-position-embedding encoder–decoder of [R] (the "proposed" model; docs/concepts.md#reinforced-model),
a plain ``nn.Module``.

Three changes to the baseline (:class:`~lightning_embinit.architectures.EncoderDecoder`):

1. Token normalization: TN(X_e) standardizes each feature column of a sequence's n×m token
   embeddings over its non-pad positions: (x − mean) / √(var + ε)
   (:mod:`lightning_embinit.modules.token_normalization`).
2. Concatenation: the first block's input is [TN(X_e) ‖ P], width 2m.
3. Values without concatenation: every attention takes queries and keys from its 2m-wide layer
   input, but values from the model input's normalized token embeddings — TN(X_e) of the source
   in encoder self-attention and decoder cross-attention, TN(Y_e) of the target prefix in decoder
   masked self-attention. So W^V is m → q·p, W^O q·p → 2m; residuals, norms, FFNs and the output
   layer (dense with bias) are 2m wide.

Target normalization (``target_normalization``): ``sequence`` (the paper's) takes each target
column's statistics over the whole target sequence, so the decoder input at position t depends on
later target tokens — teacher-forced losses leak the future, and step-by-step decoding (which
only has the prefix) differs from training. ``causal`` takes them over positions ≤ t: no leak,
and incremental decoding equals the full forward. The source side always uses the whole sentence.
"""

from __future__ import annotations

import torch

from lightning_embinit.architectures.config import ReinforcedEncoderDecoderConfig
from lightning_embinit.architectures.encoder_decoder import Seq2SeqArchitecture
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.blocks import DecoderCache, Dropout, TransformerStack
from lightning_embinit.modules.decoding import EncoderState
from lightning_embinit.modules.heads import OutputHead
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import build_positional, lookup_tokens
from lightning_embinit.modules.token_normalization import causal_token_normalize, token_normalize
from lightning_embinit.vocabulary import VocabularyLike


class ReinforcedEncoderDecoder(Seq2SeqArchitecture):
    """[R]'s proposed model (module docstring; :class:`ReinforcedEncoderDecoderConfig`): ``d_model`` is m
    (layers are 2m wide), ``qk_head_dim``/``v_head_dim`` are r and q, ``positional`` the concatenated P's kind.

    Slots ``src`` and ``tgt`` (or ``shared``) have ``input_scale`` 1: TN standardizes every column per sentence,
    so any factor s > 0 on the table cancels; their ``positional_encoding`` is None because P is concatenated,
    not added (no absorption of one signal by the other).
    """

    def __init__(
        self, config: ReinforcedEncoderDecoderConfig, src_vocab: VocabularyLike, tgt_vocab: VocabularyLike
    ) -> None:
        super().__init__(config, src_vocab, tgt_vocab)
        d, width = config.d_model, 2 * config.d_model
        self.src_embedding, self.tgt_embedding = self._token_tables(d)
        self.positional = build_positional(config.positional, config.max_len, d)
        self.input_dropout = Dropout(config.dropout)
        stack = {"pre_norm": False, **config.block_options(), "value_dim": d}
        self.encoder = TransformerStack(config.num_encoder_layers, width, config.num_heads, config.hidden_dim, **stack)
        self.decoder = TransformerStack(
            config.num_decoder_layers,
            width,
            config.num_heads,
            config.hidden_dim,
            causal=True,
            cross_attention=True,
            memory_dim=width,
            memory_value_dim=d,
            **stack,
        )
        self.head = OutputHead("untied", width, self.tgt_vocab.size, bias=True)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` ([A], [K]), token tables per ``embedding_init``."""
        init_non_embedding_(self, self.config.init_scheme)
        self._reset_token_tables(self.src_embedding, self.tgt_embedding)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        options = {"input_scale": 1.0, "positional_encoding": None}
        if self.config.share_embeddings:
            return {"shared": EmbeddingSlot("shared", self.src_embedding, **self.src_vocab.slot_arguments(), **options)}
        return {
            "src": EmbeddingSlot("src", self.src_embedding, **self.src_vocab.slot_arguments(), **options),
            "tgt": EmbeddingSlot("tgt", self.tgt_embedding, **self.tgt_vocab.slot_arguments(), **options),
        }

    def _concatenate(self, normalized: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Drop([TN ‖ P[offset : offset + L]]); the positional table raises past ``max_len``."""
        batch, length, _ = normalized.shape
        position = self.positional(length, offset).to(normalized.dtype).expand(batch, length, -1)
        return self.input_dropout(torch.cat((normalized, position), dim=-1))

    def encode(self, src: torch.Tensor) -> EncoderState:
        padding = src == self.src_vocab.pad_id
        values = token_normalize(lookup_tokens(self.src_embedding, src), padding, eps=self.config.tn_eps)
        memory = self.encoder(self._concatenate(values), padding_mask=padding, values=values)
        return EncoderState(memory, padding, values)

    def normalize_target(self, tgt_in: torch.Tensor, cache: DecoderCache | None = None) -> torch.Tensor:
        """TN(Y_e) of the decoder input per ``target_normalization`` (running sums kept in ``cache``)."""
        padding = tgt_in == self.pad_id
        embedded = lookup_tokens(self.tgt_embedding, tgt_in)
        eps = self.config.tn_eps
        if self.config.target_normalization == "sequence":
            if cache is not None:
                raise ValueError(
                    "target_normalization='sequence' cannot decode incrementally: each step renormalizes the prefix"
                )
            return token_normalize(embedded, padding, eps=eps)
        running = None
        if cache is not None and "tn_sum" in cache.state:
            running = (cache.state["tn_sum"], cache.state["tn_sum_sq"], cache.state["tn_count"])
        normalized, running = causal_token_normalize(embedded, padding, eps=eps, running=running)
        if cache is not None:
            cache.state.update(tn_sum=running[0], tn_sum_sq=running[1], tn_count=running[2])
        return normalized

    def decode(self, tgt_in: torch.Tensor, state: EncoderState, cache: DecoderCache | None = None) -> torch.Tensor:
        self.check_batch(tgt_in, state)
        offset = 0 if cache is None else cache.length
        values = self.normalize_target(tgt_in, cache)
        return self.decoder(
            self._concatenate(values, offset),
            state.memory,
            padding_mask=self.target_padding(tgt_in, cache),
            memory_padding_mask=state.padding_mask,
            values=values,
            memory_values=state.values,
            cache=cache,
        )

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden, self.tgt_embedding.weight)

    def new_cache(self) -> DecoderCache | None:
        """None under ``sequence`` normalization: every step renormalizes the whole prefix."""
        if self.config.target_normalization == "sequence":
            return None
        return self.decoder.new_cache()
