"""Studies: a base config × named settings × seeds, run as trials (``embinit sweep``) and tabulated
(``embinit report``).

:class:`Study` (:mod:`.spec`) is the YAML under ``examples/studies/``; :func:`run_study` (:mod:`.local`) runs
its trials on this machine, :func:`run_study_on_ray` (:mod:`.ray_engine`) on Ray Tune; :func:`run_trial`
(:mod:`.trial`) runs one in the current process, for any engine. The names below are imported on first
use, so ``import lightning_embinit.studies`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Study": "spec",
    "Trial": "spec",
    "Protocol": "spec",
    "Variant": "spec",
    "expand_grid": "grid",
    "StudyError": "keys",
    "run_trial": "trial",
    "run_study": "local",
    "read_records": "records",
    "validate_trials": "validate",
    "prepare_sweep": "plan",
    "SweepPlan": "plan",
    "write_report": "report",
    "aggregate": "statistics",
    "compare": "statistics",
    "load_results": "results",
    "ReportError": "results",
    "run_study_on_ray": "ray_engine",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
