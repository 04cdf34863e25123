"""Studies: a base config × named settings × seeds, run as trials (``embinit sweep``) and tabulated
(``embinit report``); docs/studies.md. The names below are imported on first use, so
``import lightning_embinit.studies`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {
    "spec": ("Study", "Trial", "Protocol", "Variant"),
    "keys": ("expand_grid", "StudyError"),
    "trial": ("run_trial",),
    "local": ("run_study",),
    "records": ("read_records", "load_results", "ReportError"),
    "plan": ("validate_trials", "prepare_sweep", "SweepPlan"),
    "report": ("write_report",),
    "statistics": ("aggregate", "compare"),
    "ray_engine": ("run_study_on_ray",),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
