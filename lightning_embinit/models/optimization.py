"""The optimizer of [K] and [R] for every system (:class:`OptimizerConfig`, ``optimizer:`` in YAML;
:func:`configure_adam`): Adam with β = (0.9, 0.98), ε = 1e−9 and a constant learning rate or the Noam schedule
lr = m^−0.5 · min(step^−0.5, step · warmup^−1.5) (docs/concepts.md#reinforced-training).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch

from lightning_embinit.checks import (
    check_choice,
    check_non_negative_int,
    check_positive_int,
    check_probability,
    check_range,
)

LR_SCHEDULES = ("constant", "noam")


def noam_factor(step: int, warmup_steps: int) -> float:
    """min(s^{−1/2}, s · w^{−3/2}) · √w with s = step + 1: linear warmup to 1 at s = w, then ∝ 1/√s; with ``lr`` =
    m^{−1/2} · w^{−1/2} (:func:`noam_peak_lr`) the learning rate is Vaswani's ([R]) exactly."""
    s = step + 1
    return min(s**-0.5, s * warmup_steps**-1.5) * math.sqrt(warmup_steps)


def noam_peak_lr(d_model: int, warmup_steps: int) -> float:
    """The peak of [R]'s schedule, m^{−1/2} · w^{−1/2}: the ``lr`` that makes :func:`noam_factor` exact."""
    return check_positive_int("d_model", d_model) ** -0.5 * check_positive_int("warmup_steps", warmup_steps) ** -0.5


@dataclass(frozen=True)
class OptimizerConfig:
    """Adam and its learning-rate schedule ([K], [R]).

    Args:
        lr: the learning rate (the Noam schedule's peak); None with lr_schedule=noam: [R]'s peak
            d_model^−½ · warmup_steps^−½ for the model's width
        betas: Adam's β₁, β₂
        eps: Adam's ε
        weight_decay: L2 penalty (Adam's, not decoupled)
        lr_schedule: constant, or noam (linear warmup, then ∝ 1/√step; stepped per optimizer step)
        warmup_steps: the Noam schedule's warmup
    """

    lr: float | None = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    lr_schedule: str = "constant"
    warmup_steps: int = 4000

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))
        check_choice("lr schedule", self.lr_schedule, LR_SCHEDULES)
        check_non_negative_int("warmup_steps", self.warmup_steps)
        if self.lr_schedule == "noam" and self.warmup_steps < 1:
            raise ValueError(f"the noam schedule needs warmup_steps ≥ 1, got {self.warmup_steps}")
        check_range("lr", self.lr, 0, None, optional=True)
        if len(self.betas) != 2:
            raise ValueError(f"betas must be two numbers (β₁, β₂), got {self.betas}")
        for name, beta in zip(("betas[0]", "betas[1]"), self.betas):
            check_probability(name, beta)
        check_range("eps", self.eps, 0, None)
        check_range("weight_decay", self.weight_decay, 0, None)

    def resolved(self, d_model: int) -> OptimizerConfig:
        """This config with ``lr=None`` replaced by [R]'s Noam peak m^−½·w^−½ for ``d_model`` (:func:`noam_peak_lr`)."""
        if self.lr is not None:
            return self
        if self.lr_schedule != "noam":
            raise ValueError(
                f"lr=None stands for [R]'s Noam peak d_model^−½ · warmup_steps^−½ and needs lr_schedule='noam'; "
                f"give a number for lr_schedule={self.lr_schedule!r}"
            )
        return replace(self, lr=noam_peak_lr(d_model, self.warmup_steps))


def configure_adam(parameters: Iterable[torch.nn.Parameter], config: OptimizerConfig, *, fused: bool = True) -> Any:
    """Adam (torch's fused kernel on CPU and CUDA, unless ``fused=False``: ~4 % of a step of [K]'s model) and, for
    ``noam``, its per-step schedule, as ``LightningModule.configure_optimizers`` returns them."""
    parameters = list(parameters)
    fused = fused and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in parameters)
    optimizer = torch.optim.Adam(
        parameters,
        lr=config.lr,
        betas=config.betas,
        eps=config.eps,
        weight_decay=config.weight_decay,
        fused=fused or None,
    )
    if config.lr_schedule == "constant":
        return optimizer
    warmup = config.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: noam_factor(step, warmup))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
