"""The reinforced-position-embedding encoder–decoder of SPEC §2 ([R], the "proposed" model).

Three changes to the baseline (:class:`~lightning_embinit.models.TransformerSeq2Seq`):

1. Token normalization: TN(X_e) standardizes each feature column of a sequence's n×m token
   embeddings over its non-pad positions: (x − mean) / √(var + ε).
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
from lightning.pytorch.utilities import rank_zero_warn

from lightning_embinit.checks import check_choice
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.blocks import DecoderCache, Dropout, TransformerStack
from lightning_embinit.modules.decoding import EncoderState
from lightning_embinit.modules.heads import OutputHead
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import build_positional, lookup_tokens
from lightning_embinit.models.seq2seq_module import Seq2SeqModule, resolve_lr

TARGET_NORMALIZATIONS = ("sequence", "causal")
CONCATENATED_POSITIONALS = ("half", "halves", "interleaved", "learned")
LEAK_WARNING = (
    "target_normalization='sequence' (the paper's token normalization) standardizes each target sequence "
    "with statistics of all its positions, so a teacher-forced decoder position sees statistics of later "
    "target tokens: training and validation losses leak the future and are not comparable with the "
    "baseline's, and decoding (which sees only the prefix) differs from training. Compare BLEU from real "
    "decoding, or use target_normalization='causal'."
)
_leak_warned = False

RunningStatistics = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _keep(x: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
    if padding_mask is None:
        return torch.ones(*x.shape[:2], 1, dtype=x.dtype, device=x.device)
    return (~padding_mask).unsqueeze(-1).to(x.dtype)


def token_normalize(x: torch.Tensor, padding_mask: torch.Tensor | None = None, *, eps: float = 1e-5) -> torch.Tensor:
    """TN (SPEC §2): per sequence and feature, (x − mean) / √(var + ε) over the non-pad positions.

    (B, L, m) → (B, L, m) in ``x``'s dtype, computed in float32; padding positions are 0.
    Variance is the population variance (divide by n).
    """
    dtype, x = x.dtype, x.float()
    keep = _keep(x, padding_mask)
    count = keep.sum(1, keepdim=True).clamp_min(1.0)
    mean = (x * keep).sum(1, keepdim=True) / count
    centred = (x - mean) * keep
    variance = centred.square().sum(1, keepdim=True) / count
    return (centred * torch.rsqrt(variance + eps)).to(dtype)


def causal_token_normalize(
    x: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    eps: float = 1e-5,
    running: RunningStatistics | None = None,
) -> tuple[torch.Tensor, RunningStatistics]:
    """TN with statistics over the non-pad positions ≤ t (no information from later positions).

    ``running`` = (Σx, Σx², n) of the positions before ``x`` (incremental decoding); returns the
    normalized (B, L, m) and the running sums after ``x``. Computed in float32.
    """
    dtype, x = x.dtype, x.float()
    keep = _keep(x, padding_mask)
    kept = x * keep
    total, total_sq, count = kept.cumsum(1), kept.square().cumsum(1), keep.cumsum(1)
    if running is not None:
        total, total_sq, count = total + running[0], total_sq + running[1], count + running[2]
    n = count.clamp_min(1.0)
    mean = total / n
    variance = (total_sq / n - mean.square()).clamp_min(0.0)
    normalized = (x - mean) * torch.rsqrt(variance + eps) * keep
    return normalized.to(dtype), (total[:, -1:], total_sq[:, -1:], count[:, -1:])


class ReinforcedTransformerSeq2Seq(Seq2SeqModule):
    """SPEC §2's proposed model (module docstring). ``d_model`` is m (layers are 2m wide),
    ``qk_head_dim``/``v_head_dim`` are r and q, ``positional`` the concatenated P's kind (``half``:
    the tutorial's layout; ``interleaved``; ``learned``). Other arguments as
    :class:`~lightning_embinit.models.TransformerSeq2Seq`'s; defaults are ``reinforced_proposed``'s, with
    ``lr=None``: the Noam peak m^−½·w^−½ of this ``d_model`` and ``warmup_steps`` (SPEC §2).
    """

    def __init__(
        self,
        src_tokenizer: dict | None = None,
        tgt_tokenizer: dict | None = None,
        src_vocab_size: int | None = None,
        tgt_vocab_size: int | None = None,
        d_model: int = 64,
        num_heads: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        ffn_dim: int = 256,
        qk_head_dim: int | None = 64,
        v_head_dim: int | None = 64,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        activation_dropout: float | None = None,
        max_len: int = 128,
        activation: str = "relu",
        norm: str = "layernorm",
        positional: str = "half",
        target_normalization: str = "causal",
        tn_eps: float = 1e-5,
        share_embeddings: bool = False,
        init_scheme: str = "xavier",
        embedding_init: str = "xavier",
        label_smoothing: float = 0.0,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_decode_len: int | None = None,
        bleu_every_n_validations: int = 1,
        bleu_references: str = "tokenizer",
        lr: float | None = None,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
        lr_schedule: str = "noam",
        warmup_steps: int = 4000,
    ) -> None:
        super().__init__()
        check_choice("target_normalization", target_normalization, TARGET_NORMALIZATIONS)
        check_choice("positional encoding of the reinforced model (concatenated)", positional, CONCATENATED_POSITIONALS)
        lr = resolve_lr(lr, lr_schedule, d_model, warmup_steps)  # before save_hyperparameters: it keeps the number
        self.save_hyperparameters(ignore=["src_tokenizer", "tgt_tokenizer"])  # configs: set below, not logged
        self._setup_seq2seq(src_tokenizer, tgt_tokenizer, src_vocab_size, tgt_vocab_size, share_embeddings=share_embeddings)
        if target_normalization == "sequence":
            global _leak_warned
            if not _leak_warned:
                _leak_warned = True
                rank_zero_warn(LEAK_WARNING)
        width = 2 * d_model
        self.src_embedding = self._token_table(self.src_vocab, d_model)
        self.tgt_embedding = self.src_embedding if share_embeddings else self._token_table(self.tgt_vocab, d_model)
        self.positional = build_positional(positional, max_len, d_model)
        self.input_dropout = Dropout(dropout)
        stack = {
            "pre_norm": False, "norm": norm, "activation": activation, "dropout": dropout,
            "attention_dropout": attention_dropout, "activation_dropout": activation_dropout,
            "qk_head_dim": qk_head_dim, "v_head_dim": v_head_dim, "value_dim": d_model,
        }
        self.encoder = TransformerStack(num_encoder_layers, width, num_heads, ffn_dim, **stack)
        self.decoder = TransformerStack(
            num_decoder_layers, width, num_heads, ffn_dim, cross_attention=True, memory_dim=width,
            memory_value_dim=d_model, **stack,
        )
        self.head = OutputHead("untied", width, self.tgt_vocab.size, bias=True)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` (SPEC §4), token tables per ``embedding_init``."""
        init_non_embedding_(self, self.hparams.init_scheme)
        self._reset_token_tables(self.src_embedding, self.tgt_embedding)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """``src`` and ``tgt`` (or ``shared``). ``input_scale`` is 1: TN standardizes every column
        per sentence, so any factor s > 0 on the table cancels; ``positional_encoding`` is None
        because P is concatenated, not added (no absorption of one signal by the other)."""
        options = {"input_scale": 1.0, "positional_encoding": None}
        if self.hparams.share_embeddings:
            return {"shared": self._slot("shared", self.src_embedding, self.src_vocab, **options)}
        return {
            "src": self._slot("src", self.src_embedding, self.src_vocab, **options),
            "tgt": self._slot("tgt", self.tgt_embedding, self.tgt_vocab, **options),
        }

    def _concatenate(self, normalized: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Drop([TN ‖ P[offset : offset + L]]); the positional table raises past ``max_len``."""
        batch, length, _ = normalized.shape
        position = self.positional(length, offset).to(normalized.dtype).expand(batch, length, -1)
        return self.input_dropout(torch.cat((normalized, position), dim=-1))

    def encode(self, src: torch.Tensor) -> EncoderState:
        padding = src == self.src_vocab.pad_id
        values = token_normalize(lookup_tokens(self.src_embedding, src), padding, eps=self.hparams.tn_eps)
        memory = self.encoder(self._concatenate(values), padding_mask=padding, values=values)
        return EncoderState(memory, padding, values)

    def normalize_target(
        self, tgt_in: torch.Tensor, cache: DecoderCache | None = None
    ) -> torch.Tensor:
        """TN(Y_e) of the decoder input per ``target_normalization`` (running sums kept in ``cache``)."""
        padding = tgt_in == self.pad_id
        embedded = lookup_tokens(self.tgt_embedding, tgt_in)
        eps = self.hparams.tn_eps
        if self.hparams.target_normalization == "sequence":
            if cache is not None:
                raise ValueError("target_normalization='sequence' cannot decode incrementally: each step renormalizes the prefix")
            return token_normalize(embedded, padding, eps=eps)
        running = None
        if cache is not None and "tn_sum" in cache.state:
            running = (cache.state["tn_sum"], cache.state["tn_sum_sq"], cache.state["tn_count"])
        normalized, running = causal_token_normalize(embedded, padding, eps=eps, running=running)
        if cache is not None:
            cache.state.update(tn_sum=running[0], tn_sum_sq=running[1], tn_count=running[2])
        return normalized

    def decode(self, tgt_in: torch.Tensor, state: EncoderState, cache: DecoderCache | None = None) -> torch.Tensor:
        offset = 0 if cache is None else cache.length
        values = self.normalize_target(tgt_in, cache)
        return self.decoder(
            self._concatenate(values, offset), state.memory, padding_mask=self.target_padding(tgt_in, cache),
            memory_padding_mask=state.padding_mask, values=values, memory_values=state.values, cache=cache,
        )

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden, self.tgt_embedding.weight)

    def new_cache(self) -> DecoderCache | None:
        """None under ``sequence`` normalization: every step renormalizes the whole prefix."""
        if self.hparams.target_normalization == "sequence":
            return None
        return self.decoder.new_cache()
