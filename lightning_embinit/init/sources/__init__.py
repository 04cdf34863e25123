"""Embedding sources: random schemes and pre-trained matrices aligned to a slot's vocabulary."""

from lightning_embinit.init.sources.base import (
    SOURCES,
    Coverage,
    EmbeddingSource,
    SchemeSource,
    SourceMatrix,
    SourceRequest,
    resolve_source,
)

# Importing these modules registers their sources in SOURCES (docs/concepts.md#pretrained-sources).
from lightning_embinit.init.sources import checkpoint, hf, static, well_known, trainset  # noqa: E402,F401  isort: skip

__all__ = ["SOURCES", "Coverage", "EmbeddingSource", "SchemeSource", "SourceMatrix", "SourceRequest", "resolve_source"]
