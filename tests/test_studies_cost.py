"""A trial's cost: the epoch clock counts whole epochs only, and the report puts cost in its own table."""

from __future__ import annotations

import time

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit.studies.outcome import EpochClock, cost_values


class SleepyRegression(L.LightningModule):
    """One linear layer; each training step sleeps ``pause`` seconds, so an epoch's time is known from below."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.layer, self.pause = torch.nn.Linear(3, 1), pause
        self.frozen = torch.nn.Linear(3, 2).requires_grad_(False)

    def training_step(self, batch, batch_idx):
        time.sleep(self.pause)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=2)  # 4 batches an epoch


@pytest.mark.parametrize("max_steps, whole", [(12, 3), (10, 2)])
def test_the_epoch_clock_times_whole_epochs_and_leaves_a_cut_one_out(max_steps, whole):
    model, clock = SleepyRegression(pause=0.02), EpochClock()
    trainer = L.Trainer(
        max_steps=max_steps,
        max_epochs=-1,
        callbacks=[clock],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    started = time.perf_counter()
    trainer.fit(model)
    fit_seconds = time.perf_counter() - started
    assert [complete for _, complete in clock.epochs] == [True] * whole + [False] * (len(clock.epochs) - whole)
    assert all(seconds >= 4 * 0.02 for seconds, complete in clock.epochs if complete)  # 4 steps of ≥ 20 ms each
    cost = cost_values(model, clock, fit_seconds, trainer.global_step)
    assert cost["whole_epochs"] == whole and cost["seconds_per_step"] == pytest.approx(fit_seconds / max_steps)
    assert cost["seconds_per_epoch"] == pytest.approx(sum(s for s, c in clock.epochs if c) / whole)
    assert cost["parameters"] == 3 + 1 + 6 + 2 and cost["trainable_parameters"] == 4  # the frozen layer not trainable
