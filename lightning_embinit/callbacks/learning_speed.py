"""``LearningSpeedMonitor``: training examples seen when a smoothed metric first crosses a threshold ([KB] Table 2).

A thin adapter over :class:`lightning_embinit.diagnostics.learning_speed.CrossingTracker`.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.data import extract_batch_size
from typing_extensions import override

from lightning_embinit.callbacks.loggers import log_scalars
from lightning_embinit.callbacks.summary import MONITORS
from lightning_embinit.checks import check_choice, check_int
from lightning_embinit.diagnostics.learning_speed import CrossingTracker, check_mode, check_weight

CHECK_ON = ("validation", "train_step")


class LearningSpeedMonitor(Callback):
    """Count training examples until ``monitor``, smoothed as TensorBoard does, first reaches ``threshold``.

    Args:
        monitor: a metric the module logs (``trainer.callback_metrics``), e.g. ``"val_acc"``, ``"val_loss"``.
        threshold: the score to reach.
        mode: ``"max"`` (higher is better: smoothed ≥ threshold) or ``"min"`` (smoothed ≤ threshold).
        smoothing: TensorBoard's smoothing weight (0.6 in [KB]).
        debias: TensorBoard's current debiased average (True) or the pre-2019 one (False).
        check_on: ``"validation"`` (a point after every validation run during fit) or ``"train_step"`` (a point
            every ``every_n_steps`` optimizer steps, default the trainer's ``log_every_n_steps``).

    Examples are the batch sizes of every training batch (``extract_batch_size``), each rank counting its own; at
    every point (and epoch end) the counts and rank zero's metric value are summed over ranks by one
    ``trainer.strategy.reduce``. Logged at every point: ``{prefix}/{monitor}_smoothed`` and
    ``{prefix}/examples_seen``; at the crossing: ``{prefix}/{monitor}/examples_to_threshold`` and
    ``.../steps_to_threshold`` (:attr:`crossed_at_examples`, :attr:`crossed_at_step`). Count, smoothing and
    crossing are checkpointed (a resumed run continues; a new ``fit`` counts from zero). :meth:`summary`
    (:class:`~lightning_embinit.callbacks.summary.PublishesSummary`) holds the crossing (None before) and the count.
    """

    summary_key = MONITORS

    def __init__(
        self,
        monitor: str,
        threshold: float,
        mode: str = "max",
        smoothing: float = 0.6,
        debias: bool = True,
        check_on: str = "validation",
        every_n_steps: int | None = None,
        prefix: str = "learning_speed",
    ) -> None:
        check_mode(mode)
        check_weight(smoothing)
        check_choice("check_on", check_on, CHECK_ON)
        check_int("every_n_steps", every_n_steps, minimum=1, optional=True)
        self.monitor = monitor
        self.check_on = check_on
        self.every_n_steps = every_n_steps
        self.prefix = prefix
        self.tracker = CrossingTracker(float(threshold), mode, smoothing, debias)
        self.examples_seen = 0
        self._pending = 0
        self._world_size = 1
        self._last_step: int | None = None

    @override
    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, threshold=self.tracker.threshold, mode=self.tracker.mode)

    @property
    def crossed_at_examples(self) -> int | None:
        return self.tracker.crossed_at_examples

    @property
    def crossed_at_step(self) -> int | None:
        return self.tracker.crossed_at_step

    def summary(self) -> dict[str, int | None]:
        """``{prefix}/{monitor}/examples_to_threshold`` and ``.../steps_to_threshold`` (None when not crossed), and
        ``{prefix}/examples_seen``."""
        base = f"{self.prefix}/{self.monitor}"
        return {
            f"{base}/examples_to_threshold": self.crossed_at_examples,
            f"{base}/steps_to_threshold": self.crossed_at_step,
            f"{self.prefix}/examples_seen": self.examples_seen,
        }

    def _sum_over_ranks(
        self, trainer: L.Trainer, pl_module: L.LightningModule, value: float | None
    ) -> tuple[int, float | None]:
        """(examples since the last sync, summed over ranks; rank zero's metric value). Every rank must call this."""
        present = value is not None and trainer.is_global_zero
        local = [float(self._pending), value if present else 0.0, 1.0 if present else 0.0]
        totals = trainer.strategy.reduce(
            torch.tensor(local, dtype=torch.float64, device=pl_module.device), reduce_op="sum"
        )
        self._pending = 0
        examples, total, count = (float(v) for v in totals.tolist())
        return int(round(examples)), (total if count > 0 else None)

    def _point(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        raw = trainer.callback_metrics.get(self.monitor)
        value = None if raw is None else float(raw)
        examples, value = self._sum_over_ranks(trainer, pl_module, value)
        self.examples_seen += examples
        if value is None:
            available = ", ".join(sorted(trainer.callback_metrics)) or "none"
            raise ValueError(
                f"LearningSpeedMonitor: metric {self.monitor!r} was not logged by {self.check_on} "
                f"(logged: {available}); log it with self.log({self.monitor!r}, ...) or change monitor="
            )
        step = trainer.global_step
        self._last_step = step
        crossed = self.tracker.update(value, self.examples_seen, step)
        scalars = {
            f"{self.prefix}/{self.monitor}_smoothed": self.tracker.last_smoothed,
            f"{self.prefix}/examples_seen": self.examples_seen,
        }
        if crossed:
            scalars[f"{self.prefix}/{self.monitor}/examples_to_threshold"] = self.examples_seen
            scalars[f"{self.prefix}/{self.monitor}/steps_to_threshold"] = step
            rank_zero_info(
                f"LearningSpeedMonitor: smoothed {self.monitor} reached {self.tracker.threshold:g} after "
                f"{self.examples_seen} training examples (step {step})"
            )
        if trainer.is_global_zero:
            log_scalars(trainer, scalars, step)

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            # a new fit counts from zero; Lightning restores a resumed run's count after setup (load_state_dict)
            self.tracker.reset()
            self.examples_seen, self._pending, self._last_step = 0, 0, None

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._world_size = trainer.world_size
        self._pending = 0

    @override
    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._pending += extract_batch_size(batch)
        if self.check_on != "train_step":
            return
        every = trainer.log_every_n_steps if self.every_n_steps is None else self.every_n_steps
        step = trainer.global_step
        if step > 0 and step % every == 0 and step != self._last_step:
            self._point(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        examples, _ = self._sum_over_ranks(trainer, pl_module, None)
        self.examples_seen += examples

    @override
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.check_on == "validation" and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._point(trainer, pl_module)

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.tracker.points == 0:
            rank_zero_warn(
                f"LearningSpeedMonitor saw no {'validation run' if self.check_on == 'validation' else 'logging step'} "
                f"in this fit, so {self.monitor!r} has no curve: enable validation, or use check_on='train_step' "
                "(with every_n_steps below the run's length) for a training metric"
            )

    @override
    def state_dict(self) -> dict[str, Any]:
        # examples since the last sum over ranks are counted on every rank alike (equal batch sizes, as a
        # DistributedSampler makes them); checkpoints written at epoch or validation end have none pending
        return {
            "examples_seen": self.examples_seen + self._pending * self._world_size,
            "tracker": self.tracker.state_dict(),
            "last_step": self._last_step,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.examples_seen = int(state_dict["examples_seen"])
        self._pending = 0
        self.tracker.load_state_dict(state_dict["tracker"])
        self._last_step = state_dict.get("last_step")
