"""The vanilla post-LN encoder–decoder of SPEC §2 (the baseline, and [K]'s testbed of SPEC §1),
on :class:`~lightning_embinit.models.seq2seq_module.Seq2SeqModule`:

    X = s · E_src[x] + P,   Enc: X_M = LN(MHA(X) + X), X_E = LN(FFN(X_M) + X_M)
    Y = s · E_tgt[y] + P,   Dec: LN(MaskedMHA(Y) + Y), LN(CrossMHA(·, X_EN) + ·), LN(FFN(·) + ·)
    logits = Y_D W + b      (or tied to E_tgt)
"""

from __future__ import annotations

import torch

from lightning_embinit.checks import check_choice
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.blocks import DecoderCache, TransformerStack
from lightning_embinit.modules.decoding import EncoderState
from lightning_embinit.modules.heads import HEADS, OutputHead
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import EmbeddingInput, resolve_scale
from lightning_embinit.models.seq2seq_module import Seq2SeqModule, SideVocabulary, resolve_lr


class TransformerSeq2Seq(Seq2SeqModule):
    """The post-LN encoder–decoder transformer of SPEC §2 / [K] (module docstring).

    Sizes: ``d_model`` (m), ``num_heads`` (p), per-head query/key width ``qk_head_dim`` (r) and
    value width ``v_head_dim`` (q) (both m/p by default; SPEC §2's baseline uses r = q = m),
    ``ffn_dim`` (s). ``input_scale`` (s in s·X_e + P): ``sqrt_d``, ``inv_sqrt_d``, ``none`` or a
    number; ``positional``: ``interleaved``, ``half``, ``learned`` or ``none``. ``head``:
    ``untied`` (dense with bias, SPEC §2; default) or a tied head of :data:`~lightning_embinit.models.HEADS`.
    ``bleu_every_n_validations``: BLEU (greedy, or ``beam_size``) on every N-th validation in fit,
    0 = only in ``validate``/``test`` runs; ``bleu_references``: :data:`~lightning_embinit.models.seq2seq_module.BLEU_REFERENCES`. ``lr=None``
    with ``lr_schedule="noam"``: SPEC §2's peak m^−½·w^−½ for this ``d_model`` and ``warmup_steps``
    (:func:`~lightning_embinit.models.seq2seq_module.resolve_lr`; the number is what the hyperparameters keep).
    """

    def __init__(
        self,
        src_tokenizer: dict | None = None,
        tgt_tokenizer: dict | None = None,
        src_vocab_size: int | None = None,
        tgt_vocab_size: int | None = None,
        d_model: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 3,
        num_decoder_layers: int = 3,
        ffn_dim: int = 2048,
        qk_head_dim: int | None = None,
        v_head_dim: int | None = None,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        activation_dropout: float | None = None,
        max_len: int = 256,
        pre_norm: bool = False,
        activation: str = "relu",
        norm: str = "layernorm",
        positional: str = "interleaved",
        input_scale: str | float = "sqrt_d",
        share_embeddings: bool = False,
        head: str = "untied",
        head_bias: bool = True,
        init_scheme: str = "xavier",
        embedding_init: str = "xavier",
        label_smoothing: float = 0.0,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_decode_len: int | None = None,
        bleu_every_n_validations: int = 1,
        bleu_references: str = "tokenizer",
        lr: float | None = 2e-4,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
        lr_schedule: str = "constant",
        warmup_steps: int = 4000,
    ) -> None:
        super().__init__()
        check_choice("output head", head, HEADS)
        scale = resolve_scale(input_scale, d_model, option="input_scale")
        lr = resolve_lr(lr, lr_schedule, d_model, warmup_steps)  # before save_hyperparameters: it keeps the number
        self.save_hyperparameters(ignore=["src_tokenizer", "tgt_tokenizer"])  # configs: set below, not logged
        self._setup_seq2seq(src_tokenizer, tgt_tokenizer, src_vocab_size, tgt_vocab_size, share_embeddings=share_embeddings)
        src_table = self._token_table(self.src_vocab, d_model)
        tgt_table = src_table if share_embeddings else self._token_table(self.tgt_vocab, d_model)
        inputs = {"scale": scale, "positional": positional, "max_len": max_len, "dropout": dropout}
        self.src_input = EmbeddingInput(src_table, **inputs)
        self.tgt_input = EmbeddingInput(tgt_table, **inputs)
        stack = {
            "pre_norm": pre_norm, "norm": norm, "activation": activation, "dropout": dropout,
            "attention_dropout": attention_dropout, "activation_dropout": activation_dropout,
            "qk_head_dim": qk_head_dim, "v_head_dim": v_head_dim,
        }
        self.encoder = TransformerStack(num_encoder_layers, d_model, num_heads, ffn_dim, **stack)
        self.decoder = TransformerStack(num_decoder_layers, d_model, num_heads, ffn_dim, cross_attention=True, **stack)
        self.head = OutputHead(head, d_model, self.tgt_vocab.size, bias=head_bias)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` (SPEC §4), token tables per ``embedding_init``."""
        init_non_embedding_(self, self.hparams.init_scheme)
        self.head.reset_orthogonal()
        self._reset_token_tables(self.src_input.embedding, self.tgt_input.embedding)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """``src`` and ``tgt`` (one ``shared`` slot when ``share_embeddings``), each with its tokens,
        input scale and positional encoding; the target's (or shared) slot names the head when tied."""
        tied = ("head",) if self.head.is_tied else ()
        if self.hparams.share_embeddings:
            return {"shared": self._input_slot("shared", self.src_input, self.src_vocab, tied)}
        return {
            "src": self._input_slot("src", self.src_input, self.src_vocab, ()),
            "tgt": self._input_slot("tgt", self.tgt_input, self.tgt_vocab, tied),
        }

    def _input_slot(self, name: str, source: EmbeddingInput, side: SideVocabulary, tied: tuple[str, ...]) -> EmbeddingSlot:
        return source.slot(name, **side.slot_options(), tied_modules=tied)

    def encode(self, src: torch.Tensor) -> EncoderState:
        padding = src == self.src_vocab.pad_id
        return EncoderState(self.encoder(self.src_input(src), padding_mask=padding), padding)

    def decode(self, tgt_in: torch.Tensor, state: EncoderState, cache: DecoderCache | None = None) -> torch.Tensor:
        offset = 0 if cache is None else cache.length
        return self.decoder(
            self.tgt_input(tgt_in, offset), state.memory, padding_mask=self.target_padding(tgt_in, cache),
            memory_padding_mask=state.padding_mask, cache=cache,
        )

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden, self.tgt_input.embedding.weight)
