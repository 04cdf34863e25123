"""The torch-only core (schemes, sources, alignment, transforms, statistics); nothing here imports Lightning, and the
callbacks in :mod:`lightning_embinit.callbacks` are thin adapters over it."""

from lightning_embinit.init.host import EmbeddingHost, EmbeddingSlot, discover_slots, select_slots, slot_from_path
from lightning_embinit.init.positional import sinusoidal_encoding
from lightning_embinit.init.registry import Registry
from lightning_embinit.init.schemes import SCHEMES, get_scheme
from lightning_embinit.init.sources import SOURCES, Coverage, SchemeSource, SourceMatrix, SourceRequest, resolve_source
from lightning_embinit.init.statistics import matrix_statistics

__all__ = [
    "SCHEMES",
    "SOURCES",
    "Coverage",
    "EmbeddingHost",
    "EmbeddingSlot",
    "Registry",
    "SchemeSource",
    "SourceMatrix",
    "SourceRequest",
    "discover_slots",
    "get_scheme",
    "matrix_statistics",
    "resolve_source",
    "select_slots",
    "sinusoidal_encoding",
    "slot_from_path",
]
