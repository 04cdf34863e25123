"""Lightning callbacks: thin adapters over the torch-only core in :mod:`lightning_embinit.init`."""

from lightning_embinit.callbacks.embedding_init import EmbeddingInitCallback
from lightning_embinit.callbacks.initial_loss import InitialLossMonitor
from lightning_embinit.callbacks.learning_speed import LearningSpeedMonitor
from lightning_embinit.callbacks.lexical_probe import LexicalProbe
from lightning_embinit.callbacks.prediction_writer import PredictionWriter
from lightning_embinit.callbacks.summary import PublishesSummary
from lightning_embinit.callbacks.token_transplant import TokenTransplantCallback
from lightning_embinit.callbacks.variance_monitor import EmbeddingVarianceMonitor
from lightning_embinit.callbacks.vocabulary_extension import VocabularyExtensionCallback

__all__ = [
    "EmbeddingInitCallback",
    "EmbeddingVarianceMonitor",
    "InitialLossMonitor",
    "LearningSpeedMonitor",
    "LexicalProbe",
    "PublishesSummary",
]
__all__ += ["PredictionWriter", "VocabularyExtensionCallback"]
__all__ += ["TokenTransplantCallback"]
