"""Lightning callbacks: thin adapters over the torch-only core in :mod:`lightning_embinit.init`."""

from lightning_embinit.callbacks.embedding_init import EmbeddingInitCallback

__all__ = ["EmbeddingInitCallback"]
