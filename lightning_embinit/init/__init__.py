"""The torch-only core (schemes, sources, alignment, transforms, statistics); nothing here imports Lightning, and the
callbacks in :mod:`lightning_embinit.callbacks` are thin adapters over it."""

from lightning_embinit.init.extension import (
    BIAS_RULES,
    ExtensionPlan,
    VocabularyChange,
    extend_vocabulary,
    plan_extension,
)
from lightning_embinit.init.extension import RULES as EXTENSION_RULES
from lightning_embinit.init.host import EmbeddingHost, EmbeddingSlot, discover_slots, select_slots, slot_from_path
from lightning_embinit.init.positional import sinusoidal_encoding
from lightning_embinit.init.registry import Registry
from lightning_embinit.init.schemes import SCHEMES, RandomScheme, get_scheme
from lightning_embinit.init.sources import (
    SOURCES,
    Coverage,
    EmbeddingSource,
    SchemeSource,
    SourceMatrix,
    SourceRequest,
    resolve_source,
)
from lightning_embinit.init.statistics import MatrixStats, embedding_statistics, matrix_statistics

__all__ = [
    "SCHEMES",
    "SOURCES",
    "Coverage",
    "EmbeddingHost",
    "EmbeddingSlot",
    "EmbeddingSource",
    "MatrixStats",
    "RandomScheme",
    "Registry",
    "SchemeSource",
    "SourceMatrix",
    "SourceRequest",
    "discover_slots",
    "embedding_statistics",
    "get_scheme",
    "matrix_statistics",
    "resolve_source",
    "select_slots",
    "sinusoidal_encoding",
    "slot_from_path",
]
__all__ += ["BIAS_RULES", "EXTENSION_RULES", "ExtensionPlan", "VocabularyChange", "extend_vocabulary", "plan_extension"]
