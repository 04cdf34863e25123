"""A progress bar for step-budgeted runs (``max_steps`` without ``max_epochs``).

Lightning's :class:`~lightning.pytorch.callbacks.RichProgressBar` titles the bar
``Epoch {e}/{max_epochs − 1}``, which reads "Epoch 0/-2" when only ``max_steps`` bounds the run
(``max_epochs = −1``). This subclass titles such runs ``Epoch e · step s/max_steps`` through the
bar's public ``progress`` and ``train_progress_bar_id`` attributes; other runs look as in Lightning.
The bar leaves out the logger's version (``v_num``), which is not a metric of the run.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar
from typing_extensions import override


class StepBudgetProgressBar(RichProgressBar):
    """:class:`RichProgressBar` whose training title counts steps when no epoch limit is set, without ``v_num``."""

    @override
    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics

    def _retitle(self, trainer: L.Trainer) -> None:
        step_budgeted = trainer.max_epochs in (None, -1) and trainer.max_steps is not None and trainer.max_steps > 0
        if step_budgeted and self.progress is not None and self.train_progress_bar_id is not None:
            title = f"Epoch {trainer.current_epoch} · step {trainer.global_step}/{trainer.max_steps}"
            self.progress.update(self.train_progress_bar_id, description=title)

    @override
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._retitle(trainer)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._retitle(trainer)
