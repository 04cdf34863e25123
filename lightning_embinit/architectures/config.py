"""Typed settings of the architectures: one frozen dataclass per architecture, on a shared base.

A config holds the network's shape and its initialization scheme, nothing about data, losses or optimizers: the
plain-torch architectures take it (``EncoderDecoder(EncoderDecoderConfig(d_model=256), …)``), the Lightning systems
as their ``architecture`` argument (``--model.init_args.architecture.d_model 256``). Every value is checked when the
config is made, before any weight exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from lightning_embinit.checks import (
    check_choice,
    check_non_negative_int,
    check_positive_int,
    check_probability,
    check_range,
)
from lightning_embinit.init.schemes import get_scheme
from lightning_embinit.modules.blocks import ACTIVATIONS, NORMS, TransformerStack
from lightning_embinit.modules.heads import HEAD_ACTIVATIONS, HEADS
from lightning_embinit.modules.initialization import NON_EMBEDDING_SCHEMES
from lightning_embinit.modules.inputs import POSITIONALS, resolve_scale


@dataclass(frozen=True)
class TransformerConfig:
    """What every architecture of the package shares.

    Args:
        d_model: the model width (m in [R]; D of the token table)
        num_heads: attention heads per layer
        ffn_dim: the feed-forward hidden width (None: 4 · d_model)
        dropout: on the input and every residual branch (and on attention weights and the FFN's hidden layer
            unless attention_dropout / activation_dropout say otherwise)
        attention_dropout: dropout on the attention weights (None: dropout)
        activation_dropout: dropout on the FFN's hidden layer (None: dropout)
        max_len: the most positions a sequence may have
        activation: the FFN's activation (relu, gelu)
        norm: layernorm or rmsnorm
        positional: the positional encoding (interleaved, half, sinusoidal, learned, none)
        init_scheme: the non-embedding weights (xavier as [K], hf, he_ffn; docs/concepts.md#non-embedding-init)
        embedding_init: the token tables' scheme until EmbeddingInitCallback replaces them (any scheme name)
    """

    d_model: int = 512
    num_heads: int = 8
    ffn_dim: int | None = 2048
    dropout: float = 0.1
    attention_dropout: float | None = None
    activation_dropout: float | None = None
    max_len: int = 256
    activation: str = "relu"
    norm: str = "layernorm"
    positional: str = "interleaved"
    init_scheme: str = "xavier"
    embedding_init: str = "xavier"

    positional_kind: ClassVar[str] = "positional encoding"
    positional_choices: ClassVar[tuple[str, ...]] = POSITIONALS

    def __post_init__(self) -> None:
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("norm", self.norm, NORMS)
        check_choice(self.positional_kind, self.positional, self.positional_choices)
        check_choice("non-embedding init scheme", self.init_scheme, NON_EMBEDDING_SCHEMES)
        get_scheme(self.embedding_init)
        for name in ("d_model", "num_heads", "max_len", *self.layer_counts):
            check_positive_int(name, getattr(self, name))
        check_positive_int("ffn_dim", self.ffn_dim, optional=True)
        check_probability("dropout", self.dropout)
        check_probability("attention_dropout", self.attention_dropout, optional=True)
        check_probability("activation_dropout", self.activation_dropout, optional=True)
        # per-head widths ≥ 1; where one is None, num_heads must divide the layer width (named as the user set it)
        given = [check_positive_int(name, getattr(self, name), optional=True) for name in self.head_dims]
        width = self.width_factor * self.d_model
        if (not given or None in given) and width % self.num_heads:
            what = (
                f"d_model={self.d_model}"
                if self.width_factor == 1
                else f"the layer width {self.width_factor} · d_model = {width} (d_model={self.d_model})"
            )
            fix = f", or give {' and '.join(self.head_dims)}" if self.head_dims else ""
            raise ValueError(f"{what} is not divisible by num_heads={self.num_heads}: change d_model or num_heads{fix}")

    layer_counts: ClassVar[tuple[str, ...]] = ()
    """The fields that count layers (each ≥ 1)."""
    head_dims: ClassVar[tuple[str, ...]] = ()
    """The fields that set per-head widths (None: the layer width / num_heads)."""
    width_factor: ClassVar[int] = 1
    """The layers' width in units of d_model (the reinforced model's layers are 2 · d_model wide)."""

    @property
    def hidden_dim(self) -> int:
        """The feed-forward width: ``ffn_dim``, or 4 · ``d_model``."""
        return 4 * self.d_model if self.ffn_dim is None else self.ffn_dim

    def stack(self, num_layers: int, **options: Any) -> TransformerStack:
        """A :class:`~lightning_embinit.modules.blocks.TransformerStack` of ``num_layers`` blocks of the layer width
        with this config's heads (and per-head widths), FFN, norm, activation and dropouts; ``options``: the
        architecture's own (``causal``, ``pre_norm``, ``cross_attention`` …)."""
        return TransformerStack(
            num_layers,
            self.width_factor * self.d_model,
            self.num_heads,
            self.hidden_dim,
            norm=self.norm,
            activation=self.activation,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation_dropout=self.activation_dropout,
            **{name: getattr(self, name) for name in self.head_dims},
            **options,
        )


@dataclass(frozen=True)
class Seq2SeqConfig(TransformerConfig):
    """What both encoder–decoders share (docs/concepts.md#reinforced-baseline, #reinforced-model).

    Args:
        num_encoder_layers: encoder blocks
        num_decoder_layers: decoder blocks
        qk_head_dim: r, the per-head query/key width (None: d_model / num_heads)
        v_head_dim: q, the per-head value width (None: d_model / num_heads)
        share_embeddings: one token table for source and target (one joint vocabulary)
    """

    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    qk_head_dim: int | None = None
    v_head_dim: int | None = None
    share_embeddings: bool = False

    layer_counts: ClassVar[tuple[str, ...]] = ("num_encoder_layers", "num_decoder_layers")
    head_dims: ClassVar[tuple[str, ...]] = ("qk_head_dim", "v_head_dim")


@dataclass(frozen=True)
class EncoderDecoderConfig(Seq2SeqConfig):
    """The vanilla encoder–decoder of [R] and [K] (:class:`~lightning_embinit.architectures.EncoderDecoder`).

    Args:
        pre_norm: pre-LN blocks and a final norm (False: post-LN, as [R] and [K])
        input_scale: s in s · E[t] + P: sqrt_d, inv_sqrt_d, none or a number
        head: untied (a dense layer, [R]) or a tied head (tied, tied_orthogonal, tied_half_swap, tied_shuffle)
        head_bias: the untied head's bias
    """

    pre_norm: bool = False
    input_scale: str | float = "sqrt_d"
    head: str = "untied"
    head_bias: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("output head", self.head, HEADS)
        resolve_scale(self.input_scale, self.d_model, option="input_scale")


CONCATENATED_POSITIONALS = ("half", "halves", "interleaved", "learned")
TARGET_NORMALIZATIONS = ("sequence", "causal")


@dataclass(frozen=True)
class ReinforcedEncoderDecoderConfig(Seq2SeqConfig):
    """[R]'s proposed model (:class:`~lightning_embinit.architectures.ReinforcedEncoderDecoder`); its
    defaults are ``reinforced_proposed``'s. Layers are 2 · d_model wide.

    Args:
        positional: the concatenated P's kind (half: the tutorial's layout; interleaved; learned)
        target_normalization: causal (statistics over positions ≤ t: no leak) or sequence (the paper's: the
            whole target sentence, which leaks the future into teacher-forced losses)
        tn_eps: ε of the token normalization
    """

    d_model: int = 64
    num_heads: int = 4
    ffn_dim: int | None = 256
    max_len: int = 128
    positional: str = "half"
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    qk_head_dim: int | None = 64
    v_head_dim: int | None = 64
    target_normalization: str = "causal"
    tn_eps: float = 1e-5

    positional_kind: ClassVar[str] = "positional encoding of the reinforced model (concatenated)"
    positional_choices: ClassVar[tuple[str, ...]] = CONCATENATED_POSITIONALS
    width_factor: ClassVar[int] = 2

    def __post_init__(self) -> None:
        check_choice("target_normalization", self.target_normalization, TARGET_NORMALIZATIONS)
        super().__post_init__()
        check_range("tn_eps", self.tn_eps, 0, None, low_open=True)


POOLINGS = ("cls", "mean")
CLS_SOURCES = ("auto", "tokenizer", "learned")
"""Where ``cls`` pooling's first vector comes from: ``tokenizer`` (the inputs' own first token), ``learned``
(a vector the model prepends) or ``auto`` (the tokenizer's when its inputs start with one, else learned)."""


@dataclass(frozen=True)
class EncoderClassifierConfig(TransformerConfig):
    """[K]'s encoder-only classifier (:class:`~lightning_embinit.architectures.EncoderClassifier`).

    Args:
        num_layers: encoder blocks
        pre_norm: pre-LN blocks and a final norm (False: [K]'s post-LN)
        input_scale: s in s · E[t] + P: sqrt_d, inv_sqrt_d, none or a number
        pooling: cls (the first position) or mean (over the non-padding positions)
        cls_source: auto, tokenizer or learned (where cls pooling's first vector comes from)
        num_segments: learned segment vectors indexed by token_type_ids (0: none)
    """

    max_len: int = 512
    num_layers: int = 3
    pre_norm: bool = False
    input_scale: str | float = "sqrt_d"
    pooling: str = "cls"
    cls_source: str = "auto"
    num_segments: int = 0

    layer_counts: ClassVar[tuple[str, ...]] = ("num_layers",)

    def __post_init__(self) -> None:
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("cls_source", self.cls_source, CLS_SOURCES)
        super().__post_init__()
        check_non_negative_int("num_segments", self.num_segments)
        resolve_scale(self.input_scale, self.d_model, option="input_scale")


@dataclass(frozen=True)
class CausalLMConfig(TransformerConfig):
    """The causal pre-LN language model of [S] (:class:`~lightning_embinit.architectures.CausalLM`).

    Args:
        positional: sinusoidal (in positional_layout), interleaved, half, learned or none
        num_layers: pre-LN blocks
        positional_layout: the sinusoidal layout of positional=sinusoidal (interleaved or half)
        embedding_scale: s in s · E[t] + P: sqrt_d, inv_sqrt_d, none or a number
        bias: biases in the blocks' linear layers
        head: tied, untied, tied_orthogonal, tied_half_swap or tied_shuffle (docs/concepts.md#tied-countermeasures)
        head_bias: the head's bias (untied, tied_orthogonal)
        head_activation: after tied_orthogonal's projection (none, relu, gelu, tanh)
        shuffle_groups: g of tied_shuffle
        zero_init_residual: every block the identity at initialization ([S]'s initial-loss regime)
    """

    d_model: int = 256
    num_heads: int = 4
    ffn_dim: int | None = None
    dropout: float = 0.0
    max_len: int = 512
    activation: str = "gelu"
    positional: str = "sinusoidal"
    num_layers: int = 2
    positional_layout: str = "interleaved"
    embedding_scale: str | float = "sqrt_d"
    bias: bool = True
    head: str = "tied"
    head_bias: bool = False
    head_activation: str = "none"
    shuffle_groups: int = 2
    zero_init_residual: bool = True

    layer_counts: ClassVar[tuple[str, ...]] = ("num_layers",)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int("shuffle_groups", self.shuffle_groups)
        check_choice("output head", self.head, HEADS)
        check_choice("head activation", self.head_activation, HEAD_ACTIVATIONS)
        resolve_scale(self.embedding_scale, self.d_model)
