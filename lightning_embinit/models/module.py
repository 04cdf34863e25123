"""Lightning plumbing shared by every model of the package.

- Metric states that survive any order of ``validate``/``test``/``predict``/``fit``: Lightning
  evaluates under :func:`torch.inference_mode`, and a torchmetrics state computed or reset there
  becomes an inference tensor that a later ``fit`` (validation under ``no_grad``, training with
  autograd) cannot update in place. :func:`refresh_metric_states` swaps such states for normal
  copies at the start of every stage.
- The optimizer of SPEC §1–§2: Adam with β = (0.9, 0.98), ε = 1e−9 and a constant learning
  rate or the Noam schedule lr = m^−0.5 · min(step^−0.5, step · warmup^−1.5).
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from torch import nn
from torchmetrics import Metric

from lightning_embinit.checks import check_choice

LR_SCHEDULES = ("constant", "noam")


def noam_factor(step: int, warmup_steps: int) -> float:
    """min(s^{−1/2}, s · w^{−3/2}) · √w with s = step + 1: linear warmup to 1 at s = w, then ∝ 1/√s.

    With ``lr`` = m^{−1/2} · w^{−1/2} (:func:`noam_peak_lr`) the learning rate is Vaswani's (SPEC §2) exactly.
    """
    s = step + 1
    return min(s**-0.5, s * warmup_steps**-1.5) * math.sqrt(warmup_steps)


def noam_peak_lr(d_model: int, warmup_steps: int) -> float:
    """The peak of SPEC §2's schedule, m^{−1/2} · w^{−1/2}: the ``lr`` that makes :func:`noam_factor` exact."""
    return d_model**-0.5 * warmup_steps**-0.5


def check_schedule(lr_schedule: str, warmup_steps: int) -> None:
    """Raise ``ValueError`` for an unknown schedule or a Noam schedule without warmup."""
    check_choice("lr schedule", lr_schedule, LR_SCHEDULES)
    if lr_schedule == "noam" and warmup_steps < 1:
        raise ValueError(f"the noam schedule needs warmup_steps ≥ 1, got {warmup_steps}")


def refresh_metric_states(module: nn.Module) -> int:
    """Replace every metric state that is an inference tensor by a normal copy; returns how many were replaced.

    Safe inside ``torch.inference_mode`` (the copies are made with inference mode switched off).
    """
    replaced = 0
    with torch.inference_mode(False):
        for metric in module.modules():
            if not isinstance(metric, Metric):
                continue
            for name, state in metric.metric_state.items():
                if isinstance(state, torch.Tensor) and state.is_inference():
                    setattr(metric, name, state.clone())
                    replaced += 1
                elif isinstance(state, list) and any(isinstance(s, torch.Tensor) and s.is_inference() for s in state):
                    setattr(metric, name, [s.clone() if isinstance(s, torch.Tensor) else s for s in state])
                    replaced += 1
    return replaced


class EmbinitModule(L.LightningModule):
    """Base of the package's LightningModules: stage-safe metrics and the SPEC optimizer.

    Subclasses save ``lr``, ``betas``, ``eps``, ``weight_decay``, ``lr_schedule`` and
    ``warmup_steps`` as hyperparameters; subclasses that override a ``on_*_start`` hook call
    ``super()``.
    """

    def on_fit_start(self) -> None:
        refresh_metric_states(self)

    def on_train_start(self) -> None:
        refresh_metric_states(self)

    def on_validation_start(self) -> None:
        refresh_metric_states(self)

    def on_test_start(self) -> None:
        refresh_metric_states(self)

    def on_predict_start(self) -> None:
        refresh_metric_states(self)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "EmbinitModule":
        """A model configured as the preset ``name`` (:data:`~lightning_embinit.models.presets.PRESETS`), with
        ``overrides`` on top: an instance of ``cls`` when it subclasses the preset's model (a user's own
        variant), else of the preset's model when that subclasses ``cls``."""
        from lightning_embinit.models.presets import preset_arguments

        target, arguments = preset_arguments(name, **overrides)
        if issubclass(cls, target):
            return cls(**arguments)
        if issubclass(target, cls):
            return target(**arguments)
        raise ValueError(f"preset {name!r} builds a {target.__name__}; call {target.__name__}.from_preset({name!r})")

    def configure_optimizers(self) -> Any:
        """Adam(β = ``betas``, ε = ``eps``; torch's fused kernel on CPU and CUDA); ``lr_schedule`` ``constant`` or
        ``noam`` (stepped per optimizer step)."""
        hp = self.hparams
        parameters = list(self.parameters())
        # torch's fused Adam (CPU and CUDA): one kernel per step instead of several passes, ~4 % of a step of [K]'s model
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in parameters)
        optimizer = torch.optim.Adam(
            parameters, lr=hp.lr, betas=tuple(hp.betas), eps=hp.eps, weight_decay=hp.weight_decay, fused=fused or None,
        )
        if hp.lr_schedule == "constant":
            return optimizer
        warmup = hp.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: noam_factor(step, warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
