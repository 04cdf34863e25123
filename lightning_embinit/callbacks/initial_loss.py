"""The initial-loss monitor: how far above ln n does training start? ([S]; docs/concepts.md#tied-head)

A uniform predictor over n classes has cross-entropy ln n. A tied LM whose embeddings have a
large std σ starts far above it: ≈ ln(e^{dσ} + n − 1) ≈ dσ when dσ ≫ ln n (σ = 1/√d gives
≈ √d).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from typing_extensions import override

from lightning_embinit.callbacks.loggers import log_scalars
from lightning_embinit.callbacks.summary import MONITORS
from lightning_embinit.checks import check_int
from lightning_embinit.diagnostics.initial_loss import tied_initial_loss, token_std
from lightning_embinit.init.freezing import measured_slots
from lightning_embinit.init.host import EmbeddingSlot, discover_slots, select_slots
from lightning_embinit.init.sharding import whole_table

DIRECTIONS = (
    "remove the rows' shared directions before standardizing (transforms=['remove_top'] or ['whiten'], "
    "docs/concepts.md#shared-directions; embinit inspect predicts the loss each would give)"
)
HEAD_COUNTERMEASURES = "untie the output head, or keep the tie with head='tied_orthogonal' or head='tied_half_swap'"
COUNTERMEASURES = f"initialize the embedding with log_n_over_d (σ = ln n / d, [S] (a)), {HEAD_COUNTERMEASURES}"


def sequence_length(batch: Any) -> int | None:
    """Dim 1 of a batch's inputs: ``batch["input_ids"]``, the first item of a tuple/list, or the tensor itself."""
    if isinstance(batch, Mapping):
        batch = batch.get("input_ids")
    elif isinstance(batch, Sequence) and not isinstance(batch, str) and batch:
        batch = batch[0]
    return int(batch.shape[1]) if isinstance(batch, torch.Tensor) and batch.dim() >= 2 else None


def _call_with_length(method: Any, length: int | None) -> float | None:
    """``method(length=length)`` when it takes ``length`` and it is known, else ``method()``; None without one."""
    if not callable(method):
        return None
    try:
        takes_length = "length" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        takes_length = False
    return method(length=length) if takes_length and length is not None else method()


class InitialLossMonitor(Callback):
    """Log ``init_loss``, ``ln_vocab``, ``init_loss_ratio`` (= init_loss / ln n) and the predictions.

    ``init_loss`` is the mean of the losses ``training_step`` returned for the batches of the first optimizer step
    (computed before any update; Lightning's division by ``accumulate_grad_batches`` undone under automatic
    optimization), averaged over ranks: no extra forward pass. The first ``track_steps`` optimizer steps' losses are
    kept alike in ``step_losses`` (checkpointed) and logged at each of those steps (logger step = optimizer step −
    1, as ``train_loss``) as ``init_phase_loss``, ``loss_over_ln_vocab`` and ``ln_vocab``; the one-off values reach
    every logger once, at the first step. n: ``vocab_size``; else the rows of the ``slot`` named or of the tied
    slot; else the ``out_features`` of the module's last ``nn.Linear``; else those of a single embedding table.

    Predictions, from the weights at the first batch: ``init_loss_predicted`` (``predicted``) is
    ln(e^{dσ} + n − 1) (``docs/concepts.md``) for a tied slot, σ its std over non-padding rows;
    ``init_loss_predicted_model`` (``predicted_model``) is ``pl_module.initial_loss_prediction()`` when defined (as
    :class:`~lightning_embinit.models.TiedEmbeddingLM`), given ``length=`` (:func:`sequence_length`) when it takes
    it. ``init_loss_random_tokens`` (``random_tokens``) is ``pl_module.initial_loss_probe()`` when defined: the
    model's own loss on uniform random tokens at the start (its forward, no assumption on the rows), what [S]'s
    formula predicts for i.i.d. rows. A warning (once, rank zero) fires when init_loss > ln n + ``margin``;
    :meth:`summary`: the one-off values.
    """

    summary_key = MONITORS

    def __init__(
        self,
        vocab_size: int | None = None,
        slot: str | None = None,
        track_steps: int = 100,
        margin: float = 1.0,
        warn: bool = True,
    ) -> None:
        if vocab_size is not None and vocab_size < 2:
            raise ValueError(f"vocab_size must be ≥ 2, got {vocab_size}")
        check_int("track_steps", track_steps, minimum=1)
        self.vocab_size = vocab_size
        self.slot = slot
        self.track_steps = track_steps
        self.margin = margin
        self.warn = warn
        self.init_loss: float | None = None
        self.ln_vocab: float | None = None
        self.predicted: float | None = None
        self.predicted_model: float | None = None
        self.random_tokens: float | None = None
        self.step_losses: list[float] = []
        self._warned = False
        self._tied: EmbeddingSlot | None = None
        self._tied_sigma: float | None = None
        self._pending = [0.0, 0]
        self._step_at_start = 0
        self._active = False
        self._predict = False

    def _resolve(self, pl_module: nn.Module) -> None:
        if self.slot is not None:
            slots = select_slots(pl_module, [self.slot])
        else:
            try:
                slots = discover_slots(pl_module)
            except ValueError:
                slots = {}
            slots, _ = measured_slots(pl_module, slots)  # a frozen teacher beside the student is left out
        tied = [s for s in slots.values() if s.is_tied]
        chosen = slots[self.slot] if self.slot is not None else (tied[0] if tied else None)
        self._tied = chosen if chosen is not None and chosen.is_tied else None
        n = self.vocab_size
        if n is None and chosen is not None:
            n = chosen.num_embeddings
        if n is None:
            linears = [m for m in pl_module.modules() if isinstance(m, nn.Linear)]
            if linears:
                n = linears[-1].out_features
            elif len(slots) == 1:
                n = next(iter(slots.values())).num_embeddings
        if n is None or n < 2:
            raise ValueError(
                f"InitialLossMonitor cannot tell the number of classes of {type(pl_module).__name__}: "
                "pass vocab_size=, or slot= naming its embedding table"
            )
        self.ln_vocab = math.log(n)

    @torch.no_grad()
    def _predictions(self, pl_module: nn.Module, batch: Any) -> None:
        """Set σ, ``predicted`` ([S]), ``predicted_model`` and ``random_tokens`` from the current weights."""
        tied = self._tied
        # every rank runs this at the first batch, so gathering a sharded table (a collective) matches
        self._tied_sigma = None if tied is None else token_std(whole_table(tied.weight), tied.padding_idx)
        self.predicted = (
            None if tied is None else tied_initial_loss(tied.num_embeddings, tied.embedding_dim, self._tied_sigma)
        )
        length = sequence_length(batch)
        self.predicted_model = _call_with_length(getattr(pl_module, "initial_loss_prediction", None), length)
        self.random_tokens = _call_with_length(getattr(pl_module, "initial_loss_probe", None), length)

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        tracking = len(self.step_losses) < self.track_steps and trainer.global_step == len(self.step_losses)
        self._active = tracking and (self.init_loss is not None or trainer.global_step == 0)
        self._pending = [0.0, 0]
        if not self._active:
            return
        self._resolve(pl_module)
        self._predict = self.init_loss is None

    @override
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step_at_start = trainer.global_step
        if self._predict:  # the first batch: the weights are still the initial ones
            self._predict = False
            self._predictions(pl_module, batch)

    @override
    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._active:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            scale = trainer.accumulate_grad_batches if pl_module.automatic_optimization else 1
            self._pending[0] += float(loss.detach().float()) * scale
            self._pending[1] += 1
        if trainer.global_step > self._step_at_start:
            self._flush(trainer, pl_module)

    def _flush(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        local_sum, local_count = self._pending
        self._pending = [0.0, 0]
        # every rank reaches this at the same optimizer step, so the collective is matched
        totals = torch.tensor([local_sum, float(local_count)], dtype=torch.float64, device=pl_module.device)
        totals = trainer.strategy.reduce(totals, reduce_op="sum")
        if totals[1].item() == 0:
            return
        loss = (totals[0] / totals[1]).item()
        if not self.step_losses and self.init_loss is None:
            self.init_loss = loss
            self._log_initial(trainer, pl_module)
        self.step_losses.append(loss)
        # straight to the loggers: a value self.log-ged from a callback is re-written at every later
        # step of the epoch, which would extend the curve past track_steps with a stale value
        step_values = {"init_phase_loss": loss, "ln_vocab": self.ln_vocab, "loss_over_ln_vocab": loss / self.ln_vocab}
        log_scalars(trainer, step_values, trainer.global_step - 1)
        if len(self.step_losses) >= self.track_steps:
            self._active = False

    def summary(self) -> dict[str, float]:
        """The one-off values once measured: ``init_loss``, ``ln_vocab``, ``init_loss_ratio`` and the predictions
        there are (``init_loss_predicted``, ``init_loss_predicted_model``, ``init_loss_random_tokens``)."""
        if self.init_loss is None:
            return {}
        values = {
            "init_loss": self.init_loss,
            "ln_vocab": self.ln_vocab,
            "init_loss_ratio": self.init_loss / self.ln_vocab,
            "init_loss_predicted": self.predicted,
            "init_loss_predicted_model": self.predicted_model,
            "init_loss_random_tokens": self.random_tokens,
        }
        return {name: value for name, value in values.items() if value is not None}

    def _log_initial(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The one-off values: to every logger once, at the first step (whatever ``log_every_n_steps``), and to
        ``trainer.callback_metrics`` (``logger=False``: ``self.log`` would write them again at every logging step)."""
        values = self.summary()
        log_scalars(trainer, values, trainer.global_step - 1)
        for name, value in values.items():
            pl_module.log(name, value, on_step=True, on_epoch=False, logger=False)
        if self.warn and not self._warned and self.init_loss > self.ln_vocab + self.margin:
            self._warned = True
            rank_zero_warn(self.warning_message())

    def warning_message(self) -> str:
        """Why the initial loss is high and what to do about it."""
        head = (
            f"initial loss {self.init_loss:.3f} is above ln n = {self.ln_vocab:.3f} "
            f"(a uniform predictor) by more than {self.margin:g}"
        )
        if self._tied is None or self._tied_sigma is None:
            return f"{head}; check the scale of the output layer's weights and of its inputs."
        d, sigma = self._tied.embedding_dim, self._tied_sigma
        if d * sigma <= self.ln_vocab and self.shares_directions():
            return (
                f"{head}. Likely cause: the output head is tied to embedding {self._tied.name!r}, whose rows share "
                f"directions: at σ = {sigma:.4g} (dσ = {d * sigma:.2f} ≤ ln n = {self.ln_vocab:.2f}) i.i.d. rows would "
                f"start at [S]'s {self.predicted:.3f}, but the model's own loss on random tokens is "
                f"{self.random_tokens:.3f}, so it predicts the current token again. Countermeasures: {DIRECTIONS}, "
                f"or {HEAD_COUNTERMEASURES}."
            )
        return (
            f"{head}. Likely cause: the output head is tied to embedding {self._tied.name!r} whose initial std "
            f"σ = {sigma:.4g} is large: dσ = {d * sigma:.2f} {'>' if d * sigma > self.ln_vocab else '≤'} "
            f"ln n = {self.ln_vocab:.2f}, so the initial model predicts the current token again "
            f"([S]: loss ≈ ln(e^(dσ) + n − 1)). Countermeasures: {COUNTERMEASURES}."
        )

    def shares_directions(self) -> bool:
        """Whether the model's loss on random tokens lies more than ``margin`` above [S]'s prediction for i.i.d. rows
        of the table's σ: the rows share directions, which standardizing does not change."""
        known = self.random_tokens is not None and self.predicted is not None
        return known and self.random_tokens > self.predicted + self.margin

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "init_loss": self.init_loss,
            "ln_vocab": self.ln_vocab,
            "predicted": self.predicted,
            "predicted_model": self.predicted_model,
            "random_tokens": self.random_tokens,
            "step_losses": list(self.step_losses),
            "warned": self._warned,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.init_loss = state_dict["init_loss"]
        self.ln_vocab = state_dict["ln_vocab"]
        self.predicted = state_dict.get("predicted")
        self.predicted_model = state_dict.get("predicted_model")
        self.random_tokens = state_dict.get("random_tokens")
        self.step_losses = list(state_dict["step_losses"])
        self._warned = bool(state_dict.get("warned", False))
