"""Lightning callbacks: thin adapters over the torch-only core in :mod:`lightning_embinit.init`."""

from lightning_embinit.callbacks.embedding_init import EmbeddingInitCallback
from lightning_embinit.callbacks.initial_loss import InitialLossMonitor

__all__ = ["EmbeddingInitCallback", "InitialLossMonitor"]
