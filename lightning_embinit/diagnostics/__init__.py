"""Diagnostics of embedding initialization (the measures of docs/concepts.md): torch-only math, no Lightning.

- :mod:`.variance` — table statistics raw and scaled against the positional encoding ([K] Tables 2, 6, 8);
- :mod:`.absorption` — how much of the token and position signals survive s · x + P;
- :mod:`.lexical` — analogy and similarity probes after each chain of modifications ([K] Table 4);
- :mod:`.initial_loss` — the initial loss of a tied LM, ln(e^{dσ} + n − 1), and its bigram generalization;
- :mod:`.learning_speed` — TensorBoard's smoothing and the first crossing of a threshold ([KB] Table 2);
- :mod:`.figures` — histograms, PCA scatters and learning curves (matplotlib, Agg canvas);
- :mod:`.inspect` — the report of ``embinit inspect``.

The Lightning callbacks in :mod:`lightning_embinit.callbacks` are thin adapters over these.
"""

from lightning_embinit.diagnostics.absorption import absorption, drowning, slot_absorption
from lightning_embinit.diagnostics.inspect import format_inspection, inspection
from lightning_embinit.diagnostics.learning_speed import CrossingTracker, first_crossing, tensorboard_smooth
from lightning_embinit.diagnostics.lexical import CHAINS, format_probe, lexical_probe
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
    "slot_absorption",
    "slot_statistics",
    "tensorboard_smooth",
]
