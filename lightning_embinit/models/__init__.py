"""The Lightning systems (the user's entry points) over the plain-torch architectures of
:mod:`lightning_embinit.architectures`; their configs and the building blocks users import most are re-exported
from here (the rest from :mod:`lightning_embinit.modules` and :mod:`lightning_embinit.architectures`)."""

from lightning_embinit.architectures import (
    CausalLMConfig,
    EncoderClassifierConfig,
    EncoderDecoderConfig,
    ReinforcedEncoderDecoderConfig,
)
from lightning_embinit.diagnostics.initial_loss import tied_initial_loss
from lightning_embinit.models.classifier import TransformerClassifier
from lightning_embinit.models.hf_lm import HuggingFaceLM
from lightning_embinit.models.metrics import CorpusBLEU
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.models.presets import PRESETS, preset_arguments
from lightning_embinit.models.reinforced import ReinforcedTransformerSeq2Seq
from lightning_embinit.models.seq2seq import TransformerSeq2Seq
from lightning_embinit.models.seq2seq_module import Seq2SeqModule
from lightning_embinit.models.tied_lm import TiedEmbeddingLM
from lightning_embinit.modules.attention import MultiHeadAttention
from lightning_embinit.modules.blocks import FeedForward, TransformerBlock, TransformerStack
from lightning_embinit.modules.decoding import beam_search, greedy_decode
from lightning_embinit.modules.heads import HEADS
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import EmbeddingInput
from lightning_embinit.modules.token_normalization import token_normalize

__all__ = [
    "HEADS",
    "PRESETS",
    "beam_search",
    "greedy_decode",
    "init_non_embedding_",
    "preset_arguments",
    "tied_initial_loss",
    "token_normalize",
    "CausalLMConfig",
    "CorpusBLEU",
    "EmbeddingInput",
    "EncoderClassifierConfig",
    "EncoderDecoderConfig",
    "FeedForward",
    "HuggingFaceLM",
    "MultiHeadAttention",
    "OptimizerConfig",
    "ReinforcedEncoderDecoderConfig",
    "ReinforcedTransformerSeq2Seq",
    "Seq2SeqModule",
    "TiedEmbeddingLM",
    "TransformerBlock",
    "TransformerClassifier",
    "TransformerSeq2Seq",
    "TransformerStack",
]
