"""Embedding sources: random schemes and pre-trained matrices aligned to a slot's vocabulary."""

from lightning_embinit.init.sources.base import (
    SOURCES,
    Coverage,
    EmbeddingSource,
    SchemeSource,
    SourceMatrix,
    SourceRequest,
    known_sources,
    resolve_source,
)

__all__ = [
    "SOURCES",
    "Coverage",
    "EmbeddingSource",
    "SchemeSource",
    "SourceMatrix",
    "SourceRequest",
    "known_sources",
    "resolve_source",
]
