"""Encoder–decoder transformers as plain ``nn.Module`` s ([R]'s baseline, [K]'s translation testbed;
docs/concepts.md#reinforced-baseline, #kim-testbed).

:class:`Seq2SeqArchitecture` is what both share: the two sides' vocabularies, ``forward(src, tgt_in)``, and the
three methods decoding needs (``encode``, ``new_cache``, ``next_token_logits``;
:mod:`lightning_embinit.modules.decoding`). :class:`EncoderDecoder` is the vanilla post-LN model:

    X = s · E_src[x] + P,   Enc: X_M = LN(MHA(X) + X), X_E = LN(FFN(X_M) + X_M)
    Y = s · E_tgt[y] + P,   Dec: LN(MaskedMHA(Y) + Y), LN(CrossMHA(·, X_EN) + ·), LN(FFN(·) + ·)
    logits = Y_D W + b      (or tied to E_tgt)
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import torch
from torch import nn

from lightning_embinit.architectures.config import EncoderDecoderConfig, Seq2SeqConfig
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.blocks import DecoderCache, TransformerStack
from lightning_embinit.modules.decoding import EncoderState
from lightning_embinit.modules.heads import OutputHead
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import EmbeddingInput, fill_token_table_
from lightning_embinit.vocabulary import Vocabulary, VocabularyLike


class Seq2SeqArchitecture(nn.Module, abc.ABC):
    """An encoder–decoder over a source and a target vocabulary: a :class:`Vocabulary`, or a size whose
    first ids are the package's pad 0, unk 1, bos 2, eos 3 (:meth:`Vocabulary.numbered`).

    The target side needs ``pad``, ``bos`` and ``eos`` ids (decoding starts at ``bos`` and stops at ``eos``);
    the source side ``pad``. ``config.share_embeddings`` needs one vocabulary for both sides.
    """

    def __init__(self, config: Seq2SeqConfig, src_vocab: VocabularyLike, tgt_vocab: VocabularyLike) -> None:
        super().__init__()
        self.config = config
        self.src_vocab = Vocabulary.of(src_vocab, numbered=True)
        self.tgt_vocab = Vocabulary.of(tgt_vocab, numbered=True)
        self.src_vocab.require(f"{type(self).__name__}'s source side", "pad")
        self.tgt_vocab.require(f"{type(self).__name__}'s target side", "pad", "bos", "eos")
        if config.share_embeddings and not self.src_vocab.same_tokens(self.tgt_vocab):
            raise ValueError(
                "share_embeddings=True needs one vocabulary for both sides; got "
                f"{self.src_vocab.size} source and {self.tgt_vocab.size} target tokens (build one joint tokenizer)"
            )
        self.pad_id, self.bos_id, self.eos_id = (self.tgt_vocab.id(role) for role in ("pad", "bos", "eos"))

    def _token_tables(self, dim: int) -> tuple[nn.Embedding, nn.Embedding]:
        """The source and target tables (one table when ``share_embeddings``), pad rows per each vocabulary."""
        src = nn.Embedding(self.src_vocab.size, dim, padding_idx=self.src_vocab.pad_id)
        tgt = (
            src
            if self.config.share_embeddings
            else nn.Embedding(self.tgt_vocab.size, dim, padding_idx=self.tgt_vocab.pad_id)
        )
        return src, tgt

    def _reset_token_tables(self, *tables: nn.Embedding) -> None:
        """The token tables per ``embedding_init`` until EmbeddingInitCallback replaces them; pad rows 0."""
        for table in dict.fromkeys(tables):
            fill_token_table_(table, self.config.embedding_init)

    # ----------------------------------------------------------------- what each architecture defines
    @abc.abstractmethod
    def encode(self, src: torch.Tensor) -> EncoderState:
        """(B, S) source ids → what the decoder reads."""

    @abc.abstractmethod
    def decode(self, tgt_in: torch.Tensor, state: EncoderState, cache: DecoderCache | None = None) -> torch.Tensor:
        """(B, T) decoder input ids → (B, T, width) final hidden states (only the new positions with a cache)."""

    @abc.abstractmethod
    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states (…, width) → logits (…, ``|V_tgt|``)."""

    @abc.abstractmethod
    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """The token tables as :class:`~lightning_embinit.init.EmbeddingHost` slots."""

    # ----------------------------------------------------------------- shared
    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """(B, S) source ids + (B, T) decoder input ids → (B, T, ``|V_tgt|``) next-token logits."""
        return self.head_logits(self.decode(tgt_in, self.encode(src)))

    def target_slot(self) -> str:
        """The slot of the target vocabulary: ``shared`` with ``share_embeddings``, else ``tgt``."""
        return "shared" if self.config.share_embeddings else "tgt"

    def vocabulary_outputs(self) -> dict[str, tuple[str, ...]]:
        """Slot → the untied output layers whose rows follow its vocabulary (an untied head's)."""
        return {} if self.head.is_tied else {self.target_slot(): ("head.proj",)}

    def output_states(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """(B, T, width): what meets the output matrix at each decoder position
        (the head's transform for tied heads)."""
        hidden = self.decode(tgt_in, self.encode(src))
        return hidden if self.head.kind == "untied" else self.head.transform(hidden)

    def remap_vocabulary(self, slot: str, vocab: Vocabulary, new_id: Callable[[int | None], int | None]) -> None:
        """Follow a vocabulary extension of ``slot`` (its tables were rewritten): the side's vocabulary and its ids."""
        if slot in ("src", "shared"):
            self.src_vocab = vocab
        if slot in ("tgt", "shared"):
            self.tgt_vocab = vocab
            self.pad_id, self.bos_id, self.eos_id = (vocab.id(role) for role in ("pad", "bos", "eos"))

    def new_cache(self) -> DecoderCache | None:
        """An empty cache for incremental decoding, or None when the model must recompute each step."""
        return self.decoder.new_cache()

    def next_token_logits(self, tokens: torch.Tensor, state: EncoderState, cache: DecoderCache | None) -> torch.Tensor:
        """Logits of the token after ``tokens`` (the newest token with a cache, the whole prefix without)."""
        return self.head_logits(self.decode(tokens, state, cache)[:, -1])

    @staticmethod
    def check_batch(tgt_in: torch.Tensor, state: EncoderState) -> None:
        """Raise ValueError unless the decoder input has one row per source row."""
        if tgt_in.dim() != 2 or tgt_in.shape[0] != state.memory.shape[0]:
            raise ValueError(
                f"the target batch {tuple(tgt_in.shape)} must be (B, T) with one row per source row; the "
                f"source batch has B = {state.memory.shape[0]} rows"
            )

    def target_padding(self, tgt_in: torch.Tensor, cache: DecoderCache | None) -> torch.Tensor | None:
        """The decoder self-attention's key padding mask: True at pad. None with a cache: decoding never
        generates pad, and a mask of the new positions only would not cover the cached keys."""
        return None if cache is not None else tgt_in == self.pad_id


class EncoderDecoder(Seq2SeqArchitecture):
    """The post-LN encoder–decoder transformer of [R] / [K] (module docstring; :class:`EncoderDecoderConfig`).

    Slots: ``src`` and ``tgt`` (one ``shared`` slot when ``share_embeddings``), each with its tokens, input
    scale and positional encoding; the target's (or shared) slot names the head when it is tied.
    """

    def __init__(self, config: EncoderDecoderConfig, src_vocab: VocabularyLike, tgt_vocab: VocabularyLike) -> None:
        super().__init__(config, src_vocab, tgt_vocab)
        src_table, tgt_table = self._token_tables(config.d_model)
        inputs = {
            "scale": config.input_scale,
            "positional": config.positional,
            "max_len": config.max_len,
            "dropout": config.dropout,
            "scale_option": "input_scale",
        }
        self.src_input = EmbeddingInput(src_table, **inputs)
        self.tgt_input = EmbeddingInput(tgt_table, **inputs)
        stack = {"pre_norm": config.pre_norm, **config.block_options()}
        self.encoder = TransformerStack(
            config.num_encoder_layers, config.d_model, config.num_heads, config.hidden_dim, **stack
        )
        self.decoder = TransformerStack(
            config.num_decoder_layers,
            config.d_model,
            config.num_heads,
            config.hidden_dim,
            causal=True,
            cross_attention=True,
            **stack,
        )
        self.head = OutputHead(config.head, config.d_model, self.tgt_vocab.size, bias=config.head_bias)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` ([A], [K]), token tables per ``embedding_init``."""
        init_non_embedding_(self, self.config.init_scheme)
        self.head.reset_orthogonal()
        self._reset_token_tables(self.src_input.embedding, self.tgt_input.embedding)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        tied = ("head",) if self.head.is_tied else ()
        if self.config.share_embeddings:
            return {"shared": self.src_input.slot("shared", **self.src_vocab.slot_arguments(), tied_modules=tied)}
        return {
            "src": self.src_input.slot("src", **self.src_vocab.slot_arguments()),
            "tgt": self.tgt_input.slot("tgt", **self.tgt_vocab.slot_arguments(), tied_modules=tied),
        }

    def encode(self, src: torch.Tensor) -> EncoderState:
        padding = src == self.src_vocab.pad_id
        return EncoderState(self.encoder(self.src_input(src), padding_mask=padding), padding)

    def decode(self, tgt_in: torch.Tensor, state: EncoderState, cache: DecoderCache | None = None) -> torch.Tensor:
        self.check_batch(tgt_in, state)
        offset = 0 if cache is None else cache.length
        return self.decoder(
            self.tgt_input(tgt_in, offset),
            state.memory,
            padding_mask=self.target_padding(tgt_in, cache),
            memory_padding_mask=state.padding_mask,
            cache=cache,
        )

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden, self.tgt_input.embedding.weight)
