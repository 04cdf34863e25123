"""Token-embedding initialization for transformers, as PyTorch Lightning callbacks and modules.

``import lightning_embinit.init`` stays torch-only: the Lightning-facing names below are
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from lightning_embinit.init import EmbeddingHost, EmbeddingSlot
from lightning_embinit.init.engine import initialize_embeddings
from lightning_embinit.init.extension import extend_vocabulary
from lightning_embinit.init.recipe import InitRecipe

__version__ = (
    "0.1.0.dev0"  # the one place: pyproject.toml reads it ([tool.setuptools.dynamic]), `embinit --version` prints it
)

_LAZY = {
    "EmbeddingInitCallback": "lightning_embinit.callbacks",
    "InitialLossMonitor": "lightning_embinit.callbacks",
    "EmbeddingVarianceMonitor": "lightning_embinit.callbacks",
    "LexicalProbe": "lightning_embinit.callbacks",
    "LearningSpeedMonitor": "lightning_embinit.callbacks",
    "VocabularyExtensionCallback": "lightning_embinit.callbacks",
    "TiedEmbeddingLM": "lightning_embinit.models",
    "HuggingFaceLM": "lightning_embinit.models",
    "TransformerSeq2Seq": "lightning_embinit.models",
    "ReinforcedTransformerSeq2Seq": "lightning_embinit.models",
    "TransformerClassifier": "lightning_embinit.models",
    "LanguageModelDataModule": "lightning_embinit.data",
    "TranslationDataModule": "lightning_embinit.data",
    "ClassificationDataModule": "lightning_embinit.data",
    "TextTokenizer": "lightning_embinit.text",
}

__all__ = ["EmbeddingHost", "EmbeddingSlot", "InitRecipe", "initialize_embeddings", *_LAZY]
__all__ += ["extend_vocabulary"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lightning_embinit' has no attribute {name!r}")
