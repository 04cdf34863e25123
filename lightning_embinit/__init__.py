"""Token-embedding initialization for transformers, as PyTorch Lightning callbacks and modules.

Every name below is imported on first use: ``import lightning_embinit`` (and so ``embinit --help``) loads
neither torch nor Lightning, and ``import lightning_embinit.init`` stays torch-only.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = (
    "0.1.0.dev0"  # the one place: pyproject.toml reads it ([tool.setuptools.dynamic]), `embinit --version` prints it
)

_LAZY = {
    "EmbeddingHost": "lightning_embinit.init",
    "EmbeddingSlot": "lightning_embinit.init",
    "InitRecipe": "lightning_embinit.init.recipe",
    "initialize_embeddings": "lightning_embinit.init.engine",
    "extend_vocabulary": "lightning_embinit.init.extension",
    "transplant_tokenizer": "lightning_embinit.init.transplant",
    "EmbeddingInitCallback": "lightning_embinit.callbacks",
    "InitialLossMonitor": "lightning_embinit.callbacks",
    "EmbeddingVarianceMonitor": "lightning_embinit.callbacks",
    "LexicalProbe": "lightning_embinit.callbacks",
    "LearningSpeedMonitor": "lightning_embinit.callbacks",
    "VocabularyExtensionCallback": "lightning_embinit.callbacks",
    "TokenTransplantCallback": "lightning_embinit.callbacks",
    "TiedEmbeddingLM": "lightning_embinit.models",
    "HuggingFaceLM": "lightning_embinit.models",
    "TransformerSeq2Seq": "lightning_embinit.models",
    "ReinforcedTransformerSeq2Seq": "lightning_embinit.models",
    "TransformerClassifier": "lightning_embinit.models",
    "LanguageModelDataModule": "lightning_embinit.data",
    "TranslationDataModule": "lightning_embinit.data",
    "ClassificationDataModule": "lightning_embinit.data",
    "TextTokenizer": "lightning_embinit.text",
    "quiet_lightning": "lightning_embinit.quiet",
    "keep_freed_memory": "lightning_embinit.host_memory",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lightning_embinit' has no attribute {name!r}")
