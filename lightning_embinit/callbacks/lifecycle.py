"""When the package's callbacks change a model: once per model, when ``fit`` sets up, never over a resumed checkpoint.

Lightning restores a checkpoint after ``setup`` and ``configure_model`` (after ``on_fit_start`` for strategies
whose ``restore_checkpoint_after_setup`` is True: FSDP, DeepSpeed, ``ModelParallelStrategy``), and no public API
tells at ``setup`` whether the fit will restore one. So the work runs at ``setup`` (or ``on_fit_start``) every time;
on resume Lightning's restore replaces the tables with the checkpoint's, bit for bit, calls the callback's
``on_load_checkpoint`` (its own result is discarded) and ``load_state_dict`` (the checkpoint's report and masks come
back); the cost: docs/initialization.md#resume.

The report is published at ``on_train_start``, after every restore, for a fresh fit only. There the callback checks
the hook order through public API: ``trainer.ckpt_path`` (None for a fresh fit) must agree with whether
``on_load_checkpoint`` was called after ``setup``, else it raises before the first step.
"""

from __future__ import annotations

import weakref
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


class FitOnceCallback(Callback):
    """A callback whose work on a model runs once per model, when ``fit`` sets up (module docstring).

    Subclasses do their work from ``setup`` when :meth:`begin_fit` says so and call :meth:`mark_done` once it
    succeeded; they implement :meth:`discard` (forget the result a restore replaces) and :meth:`publish` (show the
    report of a fresh fit). The report per slot is ``reports``, also their :meth:`summary` (``PublishesSummary``).
    """

    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}
        self.resumed = False
        self._active = False
        self._done: weakref.WeakSet[LightningModule] = weakref.WeakSet()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_done": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._done = weakref.WeakSet()

    def summary(self) -> dict[str, dict[str, Any]]:
        """The report per slot (``reports``)."""
        return self.reports

    def begin_fit(self, pl_module: LightningModule, stage: str) -> bool:
        """At ``setup``: whether this is a fit of a model the callback has not changed yet (then it does its work)."""
        if stage != "fit":
            return False
        self.resumed = False
        self._active = pl_module not in self._done
        return self._active

    def mark_done(self, pl_module: LightningModule) -> None:
        """The work on ``pl_module`` succeeded: a later ``fit`` of it does nothing."""
        self._done.add(pl_module)

    def discard(self) -> None:
        """Forget the result a restored checkpoint replaces (its ``load_state_dict`` follows)."""

    def publish(self, trainer: Trainer) -> None:
        """Show and log the report of a fresh fit."""

    @override
    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        """Lightning restores a checkpoint into this fit: its tables, report and masks stand."""
        self.resumed = True
        if self._active:
            self.discard()

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """After every restore, before the first step: confirm the hook order, then publish a fresh fit's report."""
        if not self._active:
            return
        self._active = False
        restored = trainer.ckpt_path
        if bool(restored) != self.resumed:
            said = f"restored {restored}" if restored else "restored no checkpoint"
            raise RuntimeError(
                f"{type(self).__name__}: Lightning {said}, but it called on_load_checkpoint "
                f"{'after setup' if self.resumed else 'at no time after setup'}: this Lightning release restores "
                "checkpoints at another point of fit than the callback expects, so the tables may hold the wrong "
                "weights. Please report it (lightning_embinit)."
            )
        if not self.resumed:
            self.publish(trainer)
