"""Transformer models built from the shared blocks in :mod:`lightning_embinit.modules.blocks`."""

from lightning_embinit.init.initial_loss import predicted_initial_loss, tied_initial_loss
from lightning_embinit.modules.attention import AttentionCache, MultiHeadAttention
from lightning_embinit.modules.blocks import DecoderCache, FeedForward, TransformerBlock, TransformerStack
from lightning_embinit.modules.inputs import EmbeddingInput, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from lightning_embinit.modules.decoding import EncoderState, beam_search, greedy_decode
from lightning_embinit.modules.heads import HEADS, OutputHead
from lightning_embinit.modules.initialization import NON_EMBEDDING_SCHEMES, init_non_embedding_
from lightning_embinit.models.tied_lm import TiedEmbeddingLM
from lightning_embinit.models.presets import PRESETS, preset_arguments
from lightning_embinit.models.seq2seq import TransformerSeq2Seq
from lightning_embinit.models.seq2seq_module import Seq2SeqModule
from lightning_embinit.models.reinforced import TARGET_NORMALIZATIONS, ReinforcedTransformerSeq2Seq, token_normalize
from lightning_embinit.models.translation_metrics import CorpusBLEU
from lightning_embinit.models.classifier import POOLINGS, TransformerClassifier

__all__ = [
    "AttentionCache",
    "CorpusBLEU",
    "DecoderCache",
    "EmbeddingInput",
    "EncoderState",
    "FeedForward",
    "HEADS",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "NON_EMBEDDING_SCHEMES",
    "OutputHead",
    "POOLINGS",
    "PRESETS",
    "ReinforcedTransformerSeq2Seq",
    "Seq2SeqModule",
    "SinusoidalPositionalEncoding",
    "TARGET_NORMALIZATIONS",
    "TiedEmbeddingLM",
    "TransformerBlock",
    "TransformerClassifier",
    "TransformerSeq2Seq",
    "TransformerStack",
    "beam_search",
    "greedy_decode",
    "init_non_embedding_",
    "predicted_initial_loss",
    "preset_arguments",
    "tied_initial_loss",
    "token_normalize",
]
