"""Transformer models built from the shared blocks in :mod:`lightning_embinit.models.blocks`."""

from lightning_embinit.init.initial_loss import predicted_initial_loss, tied_initial_loss
from lightning_embinit.models.blocks import (
    FeedForward,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    SinusoidalPositionalEncoding,
    TransformerBlock,
)
from lightning_embinit.models.heads import HEADS, OutputHead
from lightning_embinit.models.initialization import NON_EMBEDDING_SCHEMES, init_non_embedding_
from lightning_embinit.models.tied_lm import TiedEmbeddingLM

__all__ = [
    "HEADS",
    "NON_EMBEDDING_SCHEMES",
    "FeedForward",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "OutputHead",
    "SinusoidalPositionalEncoding",
    "TiedEmbeddingLM",
    "TransformerBlock",
    "init_non_embedding_",
    "predicted_initial_loss",
    "tied_initial_loss",
]
