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

:class:`AddedRowsCallback` adds what the callbacks that change a trained model's vocabulary share: the trained weights
read from ``from_checkpoint``, the mask of the rows they built per slot, and ``trainable="new_rows"``.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_embinit.checks import check_choice
from lightning_embinit.init.extension import freeze_old_rows, pin_old_rows
from lightning_embinit.init.extension.checkpoint import record_vocabularies
from lightning_embinit.init.extension.extend import TRAINABLE_EXTENSION
from lightning_embinit.init.sources.checkpoint_file import checked_file, load_checkpoint_file


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


class AddedRowsCallback(FitOnceCallback):
    """A :class:`FitOnceCallback` that changes a trained model's vocabulary (the extension's and the transplant's).

    The trained weights are ``from_checkpoint``'s (weights only, :meth:`read_checkpoint`) or the model's own. Per slot
    ``added`` holds the mask of the rows the callback built; with ``trainable="new_rows"`` only those learn
    (:meth:`keep_added`): every other parameter is frozen, the other rows of the tables and their output layers are
    masked and, under an optimizer's weight decay, pinned after every step. The checkpoints of the fine-tune record
    the new vocabularies (the ``embinit`` key).
    """

    def __init__(self, from_checkpoint: str | os.PathLike[str] | None = None, trainable: bool | str = True) -> None:
        super().__init__()
        check_choice("trainable=", trainable, TRAINABLE_EXTENSION)
        if from_checkpoint is not None:
            from_checkpoint = checked_file(from_checkpoint, f"from_checkpoint={os.fspath(from_checkpoint)!r}")
        self.from_checkpoint, self.trainable = from_checkpoint, trainable
        self.added: dict[str, torch.Tensor] = {}
        self._frozen: dict[str, list[torch.nn.Parameter]] = {}

    @override
    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_frozen": {}}

    def read_checkpoint(self, pl_module: LightningModule) -> dict[str, Any] | None:
        """The checkpoint of ``from_checkpoint`` (None without one); the system sees it first, as in Lightning's
        restore (its ``on_load_checkpoint``)."""
        if self.from_checkpoint is None:
            return None
        checkpoint = load_checkpoint_file(self.from_checkpoint, what="from_checkpoint", weights_only=False)
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), Mapping):
            raise ValueError(f"from_checkpoint {self.from_checkpoint}: not a Lightning checkpoint (no state_dict)")
        pl_module.on_load_checkpoint(checkpoint)
        return checkpoint

    def check_trainable(self, added: Mapping[str, torch.Tensor], nothing_new: str) -> None:
        """Refuse ``trainable="new_rows"`` when no mask of ``added`` holds a built row (``nothing_new`` says why);
        called before anything is written."""
        if self.trainable == "new_rows" and not any(bool(mask.any()) for mask in added.values()):
            raise ValueError(
                f"trainable='new_rows' trains only the new rows, but {nothing_new}: nothing would train (use "
                "trainable=True); nothing was changed"
            )

    def keep_added(self, pl_module: LightningModule, added: Mapping[str, torch.Tensor]) -> None:
        """Keep the masks of the built rows per slot; with ``trainable="new_rows"``, freeze everything else."""
        self.added.clear()  # in place: the gradient hooks read this dict
        self.added.update(added)
        if self.trainable == "new_rows":
            self._frozen = freeze_old_rows(pl_module, {name: self._old_rows(name) for name in self.added})

    def _old_rows(self, name: str) -> Any:
        def rows() -> torch.Tensor | None:
            added = self.added.get(name)
            return None if added is None else ~added

        return rows

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Publish a fresh fit's report; pin the old rows for optimizers whose weight decay would move them despite
        the gradient mask."""
        super().on_train_start(trainer, pl_module)
        for name, tensors in self._frozen.items():
            for optimizer in trainer.optimizers:
                pin_old_rows(optimizer, tensors, self._old_rows(name))

    @override
    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        record_vocabularies(checkpoint, pl_module, list(self.added) or None)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"reports": self.reports, "added": dict(self.added)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.reports = dict(state_dict.get("reports", {}))
        self.added.clear()  # in place: the gradient hooks read this dict
        self.added.update(state_dict.get("added", {}))

    @override
    def discard(self) -> None:
        self.reports = {}
        self.added.clear()
