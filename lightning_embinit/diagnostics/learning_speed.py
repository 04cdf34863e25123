"""Learning speed: training examples seen when a smoothed metric first crosses a threshold ([KB] Table 2,
docs/concepts.md#learning-speed), read off TensorBoard's smoothed curve (weight 0.6 in [KB]).

TensorBoard's scalar smoothing is a debiased exponential moving average: with weight w, every finite value v_t
updates m_t = w · m_{t−1} + (1 − w) · v_t (m_0 = 0) and the plotted value is m_t / (1 − w^k), k the number of finite
values so far; a non-finite value is plotted as it is and leaves the average alone. ``debias=False`` gives the
pre-2019 curve [KB] looked at: s_1 = v_1, s_t = w · s_{t−1} + (1 − w) · v_t.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lightning_embinit.checks import check_choice

MODES = ("max", "min")


def check_mode(mode: str) -> str:
    """``mode`` if it is ``max`` (higher is better) or ``min`` (lower is better), else a ValueError naming both."""
    return check_choice("mode", mode, MODES, hint="max: higher is better; min: lower is better")


def check_weight(weight: float) -> float:
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"the smoothing weight must be in [0, 1), got {weight}")
    return float(weight)


@dataclass
class ExponentialSmoothing:
    """TensorBoard's scalar smoothing, one value at a time (see the module docstring)."""

    weight: float = 0.6
    debias: bool = True
    accumulated: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        check_weight(self.weight)

    def update(self, value: float) -> float:
        """The smoothed value plotted for ``value``."""
        if not math.isfinite(value):
            return value
        if self.count == 0 and not self.debias:
            self.accumulated = value
        else:
            self.accumulated = self.weight * self.accumulated + (1.0 - self.weight) * value
        self.count += 1
        if not self.debias:
            return self.accumulated
        return self.accumulated / (1.0 - self.weight**self.count)


def tensorboard_smooth(values: Iterable[float], weight: float = 0.6, *, debias: bool = True) -> list[float]:
    """The curve TensorBoard plots for ``values`` at smoothing ``weight``."""
    smoothing = ExponentialSmoothing(weight, debias)
    return [smoothing.update(float(value)) for value in values]


def crossed(value: float, threshold: float, mode: str) -> bool:
    """``value`` reaches ``threshold``: ≥ for ``max`` (higher is better), ≤ for ``min``; NaN never does."""
    return value >= threshold if mode == "max" else value <= threshold


def first_crossing(
    values: Sequence[float], threshold: float, *, mode: str = "max", weight: float = 0.6, debias: bool = True
) -> int | None:
    """Index of the first point whose smoothed value reaches ``threshold``, or ``None``."""
    check_mode(mode)
    for index, smoothed in enumerate(tensorboard_smooth(values, weight, debias=debias)):
        if crossed(smoothed, threshold, mode):
            return index
    return None


CURVE_STATE = ("last_smoothed", "points", "crossed_at_examples", "crossed_at_step")
"""What a :class:`CrossingTracker` checkpoints besides its smoothing."""


@dataclass
class CrossingTracker:
    """Follows one metric's smoothed curve (:meth:`update`: each point with the training examples seen so far) and
    records where it first reaches the threshold (:attr:`crossed_at_examples`, :attr:`crossed_at_step`); the state
    round-trips through :meth:`state_dict`, so a resumed run continues the same curve."""

    threshold: float
    mode: str = "max"
    weight: float = 0.6
    debias: bool = True
    smoothing: ExponentialSmoothing = field(init=False)
    last_smoothed: float | None = None
    points: int = 0
    crossed_at_examples: int | None = None
    crossed_at_step: int | None = None

    def __post_init__(self) -> None:
        check_mode(self.mode)
        if not math.isfinite(self.threshold):
            raise ValueError(f"the threshold must be a finite number, got {self.threshold}")
        self.smoothing = ExponentialSmoothing(self.weight, self.debias)

    def reset(self) -> None:
        """Forget the curve and the crossing (a new run)."""
        self.smoothing = ExponentialSmoothing(self.weight, self.debias)
        self.last_smoothed, self.points, self.crossed_at_examples, self.crossed_at_step = None, 0, None, None

    def update(self, value: float, examples: int, step: int) -> bool:
        """Add a point; True when this point is the first crossing."""
        self.last_smoothed = self.smoothing.update(float(value))
        self.points += 1
        if self.crossed_at_examples is not None or not crossed(self.last_smoothed, self.threshold, self.mode):
            return False
        self.crossed_at_examples, self.crossed_at_step = int(examples), int(step)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"smoothing": asdict(self.smoothing), **{name: getattr(self, name) for name in CURVE_STATE}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        smoothing = state["smoothing"]
        if smoothing["weight"] != self.weight or smoothing["debias"] != self.debias:
            raise ValueError(
                f"the checkpoint's curve was smoothed with weight={smoothing['weight']}, debias={smoothing['debias']}; "
                f"this monitor uses weight={self.weight}, debias={self.debias}"
            )
        self.smoothing = ExponentialSmoothing(**smoothing)
        for name in CURVE_STATE:
            setattr(self, name, state[name])
        self.points = int(self.points)
