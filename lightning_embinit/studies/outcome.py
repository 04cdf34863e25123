"""What a finished (or failed) trial leaves behind, read into its record: metrics, callback summaries, curves, host."""

from __future__ import annotations

import csv
import math
import os
import platform
import re
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_embinit.callbacks.summary import MONITORS, PublishesSummary
from lightning_embinit.studies.claims import MODEL_METRIC
from lightning_embinit.studies.spec import package_version

CURVES_ONLY = re.compile(r"^(init_phase_loss|loss_over_ln_vocab)$|_smoothed$")
"""Per-step tracking curves: in ``curves``, not summed up as a monitor's value."""
INIT_REPORT_KEPT = ("std", "scaled_std", "ratio", "coverage", "top_share", "mean_cosine")
"""Of the init report's scalars (``embinit/<slot>/<key>``), the ones also kept as monitors; the rest stay in
``init_report``."""


def number(value: Any) -> float | None:
    """``value`` as a float (a one-element tensor too); None when it is not a number."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().item()) if value.numel() == 1 else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a metrics mapping (``trainer.callback_metrics``, a ``test`` result) as floats."""
    found = {name: number(value) for name, value in metrics.items()}
    return {name: value for name, value in found.items() if value is not None}


def is_model_metric(name: str) -> bool:
    return bool(MODEL_METRIC.search(name))


def is_monitor(name: str) -> bool:
    """A monitor's value worth a column of its own (not the model's metric, a tracking curve or init-report detail)."""
    if is_model_metric(name) or CURVES_ONLY.search(name):
        return False
    return not name.startswith("embinit/") or name.rsplit("/", 1)[-1] in INIT_REPORT_KEPT


def read_curves(metrics_csv: str | Path) -> dict[str, list[list[Any]]]:
    """Per logged metric of a CSVLogger's ``metrics.csv``, its ``[step, epoch, value]`` rows (epoch None when the
    row has none), in file order; an unreadable file gives {}."""
    curves: dict[str, list[list[Any]]] = {}
    try:
        with open(metrics_csv, newline="", encoding="utf-8") as stream:
            for row in csv.DictReader(stream):
                step, epoch = _int(row.get("step")), _int(row.get("epoch"))
                for name, text in row.items():
                    if name in ("step", "epoch") or name is None or text in (None, ""):
                        continue
                    try:
                        curves.setdefault(name, []).append([step, epoch, float(text)])
                    except ValueError:
                        continue
    except OSError:
        return {}
    return curves


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text not in (None, "") else None
    except ValueError:
        return None


def summaries(trainer: Trainer, fit_metrics: Mapping[str, float], record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's sections the callbacks fill at the end of fit: ``monitors``, then one per other ``summary_key``
    of the callbacks that publish a summary (:class:`~lightning_embinit.callbacks.summary.PublishesSummary`).

    ``monitors``: each monitor value's last logged one (:func:`is_monitor`, from ``record["curves"]``), then
    ``fit_metrics``', then the ``monitors`` summaries in callback order. Another key holds its one callback's
    summary, or ``callback_<i>`` → summary when several publish under it; a key the record already has for
    itself (``init_report`` aside, the init callback's) is a ValueError.
    """
    published: dict[str, list[dict[str, Any]]] = {}
    for callback in trainer.callbacks:
        if isinstance(callback, PublishesSummary):
            published.setdefault(callback.summary_key, []).append(callback.summary())
    taken = sorted(key for key in published if key in record and key not in (MONITORS, "init_report"))
    if taken:
        raise ValueError(f"callback summaries under keys the trial record holds for itself: {taken}")
    monitors = {name: rows[-1][2] for name, rows in record["curves"].items() if rows and is_monitor(name)}
    monitors.update({name: value for name, value in fit_metrics.items() if is_monitor(name)})
    for summary in published.pop(MONITORS, []):
        monitors.update(summary)
    sections = {
        key: found[0] if len(found) == 1 else {f"callback_{index}": summary for index, summary in enumerate(found)}
        for key, found in published.items()
    }
    return {MONITORS: monitors, **sections}


def checkpoint_position(path: str) -> tuple[int | None, int | None]:
    """(epoch, step) of a checkpoint: from its file name (``epoch=3-step=120``), else from the file itself."""
    name = Path(path).name
    epoch, step = re.search(r"epoch=(\d+)", name), re.search(r"step=(\d+)", name)
    if epoch and step:
        return int(epoch.group(1)), int(step.group(1))
    checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return checkpoint.get("epoch"), checkpoint.get("global_step")


def versions() -> dict[str, str]:
    return {
        "lightning_embinit": package_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
    }


def host() -> dict[str, Any]:
    """Where the trial ran: host name, platform, CPU count, the torch threads and the GPU (None on CPU)."""
    gpu = torch.cuda.get_device_name(torch.cuda.current_device()) if torch.cuda.is_available() else None
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": gpu,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


class EpochClock(Callback):
    """Wall seconds of each training epoch, its end-of-epoch validation included, and whether it ran all its batches."""

    def __init__(self) -> None:
        self.epochs: list[tuple[float, bool]] = []
        self._started, self._batches = 0.0, 0

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._started, self._batches = time.perf_counter(), 0

    @override
    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        self._batches += 1

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        expected = trainer.num_training_batches
        whole = not math.isfinite(expected) or self._batches >= expected
        self.epochs.append((time.perf_counter() - self._started, whole))


def cost_values(model: torch.nn.Module, clock: EpochClock, fit_seconds: float, steps: int) -> dict[str, Any]:
    """What the trial cost: ``parameters`` (all, tied tables once), ``trainable_parameters`` (``requires_grad`` at
    the end of fit), ``fit_s``, ``seconds_per_step``, and ``seconds_per_epoch`` over the epochs that ran all their
    batches (None when none did: a run shorter than an epoch)."""
    parameters = list(model.parameters())
    whole = [seconds for seconds, complete in clock.epochs if complete]
    return {
        "parameters": sum(p.numel() for p in parameters),
        "trainable_parameters": sum(p.numel() for p in parameters if p.requires_grad),
        "fit_s": round(fit_seconds, 3),
        "seconds_per_step": fit_seconds / steps if steps else None,
        "seconds_per_epoch": sum(whole) / len(whole) if whole else None,
        "whole_epochs": len(whole),
    }
