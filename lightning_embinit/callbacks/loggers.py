"""Writing the monitors' numbers and figures straight to the trainer's loggers."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from matplotlib.figure import Figure

from lightning_embinit.diagnostics.figures import close


def figure_loggers(trainer: L.Trainer) -> list[TensorBoardLogger]:
    """The attached loggers that take figures and text (TensorBoard's ``add_figure`` / ``add_text``)."""
    return [logger for logger in trainer.loggers if isinstance(logger, TensorBoardLogger)]


def log_figure(trainer: L.Trainer, tag: str, figure: Figure, step: int) -> None:
    """``add_figure`` on every TensorBoard logger; the figure is released afterwards."""
    for logger in figure_loggers(trainer):
        logger.experiment.add_figure(tag, figure, global_step=step, close=False)
    close(figure)


def log_scalars(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
    """Numbers straight to every logger, at ``step``, whatever ``log_every_n_steps`` is."""
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=step)
