"""Token-embedding initialization for transformers, as PyTorch Lightning callbacks and modules."""

from lightning_embinit.callbacks import EmbeddingInitCallback
from lightning_embinit.init import EmbeddingHost, EmbeddingSlot
from lightning_embinit.init.pipeline import initialize_embeddings
from lightning_embinit.init.recipe import InitRecipe

__version__ = "0.1.0.dev0"

__all__ = ["EmbeddingHost", "EmbeddingInitCallback", "EmbeddingSlot", "InitRecipe", "initialize_embeddings"]
