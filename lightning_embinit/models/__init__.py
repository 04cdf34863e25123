"""The Lightning systems (the user's entry points) over the plain-torch architectures of
:mod:`lightning_embinit.architectures`; the blocks and architectures are re-exported for the names users import
from here."""

from lightning_embinit.architectures import (
    POOLINGS,
    TARGET_NORMALIZATIONS,
    CausalLM,
    CausalLMConfig,
    EncoderClassifier,
    EncoderClassifierConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
    ReinforcedEncoderDecoder,
    ReinforcedEncoderDecoderConfig,
)
from lightning_embinit.diagnostics.initial_loss import predicted_initial_loss, tied_initial_loss
from lightning_embinit.models.classifier import TransformerClassifier
from lightning_embinit.models.metrics import CorpusBLEU, PerplexityFromLoss
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.models.presets import PRESETS, preset_arguments
from lightning_embinit.models.reinforced import ReinforcedTransformerSeq2Seq
from lightning_embinit.models.seq2seq import TransformerSeq2Seq
from lightning_embinit.models.seq2seq_module import Seq2SeqModule
from lightning_embinit.models.tied_lm import TiedEmbeddingLM
from lightning_embinit.modules.attention import AttentionCache, MultiHeadAttention
from lightning_embinit.modules.blocks import DecoderCache, FeedForward, TransformerBlock, TransformerStack
from lightning_embinit.modules.decoding import EncoderState, beam_search, greedy_decode
from lightning_embinit.modules.heads import HEADS, OutputHead
from lightning_embinit.modules.initialization import NON_EMBEDDING_SCHEMES, init_non_embedding_
from lightning_embinit.modules.inputs import EmbeddingInput, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from lightning_embinit.modules.token_normalization import token_normalize

__all__ = [
    "HEADS",
    "NON_EMBEDDING_SCHEMES",
    "POOLINGS",
    "PRESETS",
    "TARGET_NORMALIZATIONS",
    "beam_search",
    "greedy_decode",
    "init_non_embedding_",
    "predicted_initial_loss",
    "preset_arguments",
    "tied_initial_loss",
    "token_normalize",
    "AttentionCache",
    "CausalLM",
    "CausalLMConfig",
    "CorpusBLEU",
    "DecoderCache",
    "EmbeddingInput",
    "EncoderClassifier",
    "EncoderClassifierConfig",
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "EncoderState",
    "FeedForward",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "OptimizerConfig",
    "OutputHead",
    "PerplexityFromLoss",
    "ReinforcedEncoderDecoder",
    "ReinforcedEncoderDecoderConfig",
    "ReinforcedTransformerSeq2Seq",
    "Seq2SeqModule",
    "SinusoidalPositionalEncoding",
    "TiedEmbeddingLM",
    "TransformerBlock",
    "TransformerClassifier",
    "TransformerSeq2Seq",
    "TransformerStack",
]
