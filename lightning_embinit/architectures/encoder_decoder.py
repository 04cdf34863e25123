"""Encoder–decoder transformers as plain ``nn.Module`` s ([R]'s baseline, [K]'s translation testbed;
docs/concepts.md#reinforced-baseline, #kim-testbed).

:class:`Seq2SeqArchitecture` is what both share: the two sides' vocabularies, slots, encoder and decoder passes,
``forward(src, tgt_in)``, and the three methods decoding needs (``encode``, ``new_cache``, ``next_token_logits``;
:mod:`lightning_embinit.modules.decoding`); an architecture gives its tables and the stacks' inputs.
:class:`EncoderDecoder` is the vanilla post-LN model:

    X = s · E_src[x] + P,   Enc: X_M = LN(MHA(X) + X), X_E = LN(FFN(X_M) + X_M)
    Y = s · E_tgt[y] + P,   Dec: LN(MaskedMHA(Y) + Y), LN(CrossMHA(·, X_EN) + ·), LN(FFN(·) + ·)
    logits = Y_D W + b      (or tied to E_tgt)
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lightning_embinit.architectures.config import EncoderDecoderConfig, Seq2SeqConfig
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.blocks import DecoderCache
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

    # ----------------------------------------------------------------- what each architecture defines
    @abc.abstractmethod
    def token_tables(self) -> tuple[nn.Embedding, nn.Embedding]:
        """The source and the target token table (one table twice with ``share_embeddings``)."""

    @abc.abstractmethod
    def side_slot(self, name: str, side: str, **options: Any) -> EmbeddingSlot:
        """The :class:`~lightning_embinit.init.EmbeddingSlot` ``name`` of the ``side`` (``src``, ``tgt``) table."""

    @abc.abstractmethod
    def encoder_input(self, src: torch.Tensor, padding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, S) source ids → the encoder's input and the values its attention takes (None: from the input)."""

    @abc.abstractmethod
    def decoder_input(
        self, tgt_in: torch.Tensor, offset: int, cache: DecoderCache | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, T) decoder input ids from position ``offset`` → the decoder's input and its self-attention's values."""

    # ----------------------------------------------------------------- shared
    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` ([A], [K]); the token tables per ``embedding_init`` until
        EmbeddingInitCallback replaces them, pad rows 0."""
        init_non_embedding_(self, self.config.init_scheme)
        self.head.reset_orthogonal()
        for table in dict.fromkeys(self.token_tables()):
            fill_token_table_(table, self.config.embedding_init)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """Slots ``src`` and ``tgt`` (one ``shared`` slot when ``share_embeddings``) with their vocabularies; the
        target's (or shared) slot names the head when it is tied."""
        tied = ("head",) if self.head.is_tied else ()
        if self.config.share_embeddings:
            return {"shared": self.side_slot("shared", "src", **self.src_vocab.slot_arguments(), tied_modules=tied)}
        return {
            "src": self.side_slot("src", "src", **self.src_vocab.slot_arguments()),
            "tgt": self.side_slot("tgt", "tgt", **self.tgt_vocab.slot_arguments(), tied_modules=tied),
        }

    def encode(self, src: torch.Tensor) -> EncoderState:
        """(B, S) source ids → what the decoder reads."""
        padding = src == self.src_vocab.pad_id
        x, values = self.encoder_input(src, padding)
        return EncoderState(self.encoder(x, padding_mask=padding, values=values), padding, values)

    def decode(self, tgt_in: torch.Tensor, state: EncoderState, cache: DecoderCache | None = None) -> torch.Tensor:
        """(B, T) decoder input ids → (B, T, width) final hidden states (only the new positions with a cache).

        The target padding mask is None with a cache: decoding never generates pad, and a mask of the new
        positions only would not cover the cached keys."""
        if tgt_in.dim() != 2 or tgt_in.shape[0] != state.memory.shape[0]:
            raise ValueError(
                f"the target batch {tuple(tgt_in.shape)} must be (B, T) with one row per source row; the "
                f"source batch has B = {state.memory.shape[0]} rows"
            )
        x, values = self.decoder_input(tgt_in, 0 if cache is None else cache.length, cache)
        return self.decoder(
            x,
            state.memory,
            padding_mask=None if cache is not None else tgt_in == self.pad_id,
            memory_padding_mask=state.padding_mask,
            values=values,
            memory_values=state.values,
            cache=cache,
        )

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states (…, width) → logits (…, ``|V_tgt|``)."""
        return self.head(hidden, self.token_tables()[1].weight)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """(B, S) source ids + (B, T) decoder input ids → (B, T, ``|V_tgt|``) next-token logits."""
        return self.head_logits(self.decode(tgt_in, self.encode(src)))

    def vocabulary_outputs(self) -> dict[str, tuple[str, ...]]:
        """Slot → the untied output layers whose rows follow its vocabulary (an untied head's)."""
        return {} if self.head.is_tied else {"shared" if self.config.share_embeddings else "tgt": ("head.proj",)}

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


class EncoderDecoder(Seq2SeqArchitecture):
    """The post-LN encoder–decoder transformer of [R] / [K] (module docstring; :class:`EncoderDecoderConfig`); its
    slots carry each side's input scale and positional encoding."""

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
        self.encoder = config.stack(config.num_encoder_layers, pre_norm=config.pre_norm)
        self.decoder = config.stack(
            config.num_decoder_layers, pre_norm=config.pre_norm, causal=True, cross_attention=True
        )
        self.head = OutputHead(config.head, config.d_model, self.tgt_vocab.size, bias=config.head_bias)
        self.reset_parameters()

    def token_tables(self) -> tuple[nn.Embedding, nn.Embedding]:
        return self.src_input.embedding, self.tgt_input.embedding

    def side_slot(self, name: str, side: str, **options: Any) -> EmbeddingSlot:
        return getattr(self, f"{side}_input").slot(name, **options)

    def encoder_input(self, src: torch.Tensor, padding: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.src_input(src), None

    def decoder_input(self, tgt_in: torch.Tensor, offset: int, cache: DecoderCache | None) -> tuple[torch.Tensor, None]:
        return self.tgt_input(tgt_in, offset), None
