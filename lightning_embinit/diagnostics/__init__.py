"""Diagnostics of embedding initialization (the measures of docs/concepts.md): torch-only math, no Lightning; the
Lightning callbacks in :mod:`lightning_embinit.callbacks` are thin adapters over these.
"""

from lightning_embinit.diagnostics.absorption import absorption, drowning, slot_absorption
from lightning_embinit.diagnostics.initial_loss import random_token_loss
from lightning_embinit.diagnostics.inspect import format_inspection, inspection
from lightning_embinit.diagnostics.learning_speed import CrossingTracker, first_crossing, tensorboard_smooth
from lightning_embinit.diagnostics.lexical import CHAINS, format_probe, lexical_probe
from lightning_embinit.diagnostics.shared_directions import predict_transforms
from lightning_embinit.diagnostics.variance import positional_matrix, slot_statistics

__all__ = [
    "CHAINS",
    "CrossingTracker",
    "absorption",
    "drowning",
    "first_crossing",
    "format_inspection",
    "format_probe",
    "inspection",
    "lexical_probe",
    "positional_matrix",
    "predict_transforms",
    "random_token_loss",
    "slot_absorption",
    "slot_statistics",
    "tensorboard_smooth",
]
