"""``VocabularyExtensionCallback``: fine-tune a trained model on text with tokens its vocabulary lacks.

At ``setup(stage="fit")`` it loads the weights of ``from_checkpoint`` (weights only: a fine-tune starts a fresh
optimizer, loops and step count) and extends each slot to the new vocabulary through
:mod:`lightning_embinit.init.extension` (every old row kept bit for bit; the new rows by ``rule``), built on global
rank 0 and broadcast. Where the vocabularies come from:

- old tokens: ``old_tokens=``, else the checkpoint's ``embinit`` record (this callback and ``EmbeddingInitCallback``
  write it), else the system's hyperparameters (``checkpoint_vocabularies``);
- new tokens: ``tokens=`` (a list, a file, a tokenizer, or a mapping slot → one of these), else the datamodule's
  ``vocabulary_for(slot)`` / ``vocabulary``, else the model's own (``embinit fit`` builds the model over the
  datamodule's vocabulary: the checkpoint's tensors are extended into its shapes);
- old tokenizer (``pieces``): ``old_tokenizer=`` (a tokenizer, a saved ``.json``, a directory or ``hf:<name>``), else
  the checkpoint's own.

``--ckpt_path`` keeps Lightning's meaning: it resumes a run (weights, optimizer, loops) with that run's shapes, so
resuming a fine-tune run works (:mod:`.lifecycle`), and one whose tables have other shapes fails in Lightning's
strict restore with a warning that says what to pass instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_embinit.callbacks.lifecycle import FitOnceCallback
from lightning_embinit.checks import check_choice
from lightning_embinit.init.distributed import run_on_rank_zero
from lightning_embinit.init.extension import (
    ExtensionPlan,
    extension_metrics,
    format_extension_report,
    freeze_old_rows,
    pin_old_rows,
)
from lightning_embinit.init.extension.checkpoint import extend_state, extension_jobs, load_extended_state, plan_job
from lightning_embinit.init.extension.extend import TRAINABLE_EXTENSION, apply_plan, finish_report
from lightning_embinit.init.extension.plan import check_pad_to_multiple_of
from lightning_embinit.init.extension.rules import new_bias_value, resolve_rule
from lightning_embinit.init.host import select_slots
from lightning_embinit.init.sources.checkpoint import CHECKPOINT_KEY
from lightning_embinit.init.sources.checkpoint_file import checked_file, load_checkpoint_file
from lightning_embinit.init.transforms import shared_direction_steps
from lightning_embinit.modules.decoding import eval_mode


class VocabularyExtensionCallback(FitOnceCallback):
    """Extend a trained model's vocabulary at ``setup(stage="fit")`` (module docstring).

    Args:
        from_checkpoint: the trained model's checkpoint (None: the model's own weights are the trained ones, e.g.
            ``TiedEmbeddingLM.load_from_checkpoint(...)``).
        rule, head_rule, bias, standardize, transforms, source_options: the new rows' start
            (:func:`~lightning_embinit.init.extension.extend_vocabulary`).
        slots: which slots (None: every slot of the model).
        tokens, old_tokens, old_tokenizer: the vocabularies (module docstring).
        trainable: ``True``, or ``"new_rows"``: only the new rows of the tables and their output layers learn (every
            other parameter frozen, the old rows masked and, for AdamW with weight decay, pinned after each step).
        allow_dropping: let the new vocabulary drop old tokens (their rows are lost).
        pad_to_multiple_of: when a table grows (the new ids pass its end), round its size up to a multiple of this; a
            padded table's rows past its tokens go to the new tokens first.
        seed: the generator seed of the new rows (None: drawn on global rank 0, and reported).
        probe: measure the probability the new tokens take on the first training batch (models with
            ``output_states(batch)``: the package's LM and translation systems).
        verbose: print the report on global rank 0.
    """

    def __init__(
        self,
        from_checkpoint: str | None = None,
        rule: str = "mean_cov",
        head_rule: str | None = None,
        bias: str | float = "mean",
        standardize: bool | str | float | None = None,
        transforms: Sequence[str] | None = None,
        slots: Sequence[str] | None = None,
        tokens: Any = None,
        old_tokens: Any = None,
        old_tokenizer: Any = None,
        trainable: bool | str = True,
        allow_dropping: bool = False,
        pad_to_multiple_of: int | None = None,
        source_options: Mapping[str, Any] | None = None,
        seed: int | None = 0,
        probe: bool = True,
        verbose: bool = True,
    ) -> None:
        super().__init__()
        check_choice("trainable=", trainable, TRAINABLE_EXTENSION)
        resolve_rule(rule, **dict(source_options or {}))
        if head_rule is not None:
            resolve_rule(head_rule)
        new_bias_value(bias, torch.zeros(1))
        shared_direction_steps(transforms)
        check_pad_to_multiple_of(pad_to_multiple_of)
        if from_checkpoint is not None:
            from_checkpoint = checked_file(from_checkpoint, f"from_checkpoint={os.fspath(from_checkpoint)!r}")
        self.from_checkpoint = from_checkpoint
        self.options = {
            "rule": rule,
            "head_rule": head_rule,
            "bias": bias,
            "standardize": standardize,
            "transforms": None if transforms is None else list(transforms),
            "source_options": dict(source_options or {}),
            "allow_dropping": allow_dropping,
            "pad_to_multiple_of": pad_to_multiple_of,
            "seed": seed,
        }
        self.slots, self.tokens, self.old_tokens, self.old_tokenizer = slots, tokens, old_tokens, old_tokenizer
        self.trainable, self.probe, self.verbose = trainable, probe, verbose
        self.added: dict[str, torch.Tensor] = {}
        self._frozen: dict[str, list[torch.nn.Parameter]] = {}

    summary_key = "vocabulary_extension"
    """Studies record :meth:`summary` under this key (``PublishesSummary``)."""

    @override
    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_frozen": {}}

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not self.begin_fit(pl_module, stage):
            return
        self._extend(trainer, pl_module)
        if self.trainable == "new_rows":
            masks = self.added
            if not masks or not any(bool(mask.any()) for mask in masks.values()):
                raise ValueError(
                    "trainable='new_rows' trains only the new rows, but the new vocabulary adds none: "
                    "nothing would train (use trainable=True)"
                )
            self._frozen = freeze_old_rows(
                pl_module, {name: (lambda name=name: _frozen_rows(masks, name)) for name in masks}
            )
        self.mark_done(pl_module)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Publish a fresh fit's report; pin the old rows for optimizers whose weight decay would move them despite
        the gradient mask."""
        super().on_train_start(trainer, pl_module)
        for name, tensors in self._frozen.items():
            for optimizer in trainer.optimizers:
                pin_old_rows(optimizer, tensors, lambda name=name: _frozen_rows(self.added, name))

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """A resume whose checkpoint has other shapes fails in Lightning's strict restore: say what to pass."""
        if self._active and trainer.ckpt_path and "size mismatch" in str(exception):
            rank_zero_warn(
                f"VocabularyExtensionCallback: --ckpt_path {trainer.ckpt_path} resumes a run, with its own shapes "
                "(Lightning restores weights, optimizer and loops after setup, strictly), and its tables differ from "
                "this model's. To fine-tune a trained model with new tokens, drop --ckpt_path and pass "
                "VocabularyExtensionCallback(from_checkpoint=<the trained model's checkpoint>)"
            )

    @override
    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        slots = checkpoint.setdefault(CHECKPOINT_KEY, {}).setdefault("slots", {})
        names = {id(p): n for n, p in pl_module.named_parameters()}
        for name, slot in select_slots(pl_module, list(self.added) or None).items():
            if slot.tokens is not None:
                slots.setdefault(name, {"parameter": names.get(id(slot.weight)), "tokens": list(slot.tokens)})

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

    @override
    def publish(self, trainer: Trainer) -> None:
        if self.verbose:
            rank_zero_info(format_extension_report(self.reports))
        for logger in trainer.loggers:
            logger.log_metrics(extension_metrics(self.reports), step=0)

    def _extend(self, trainer: Trainer, pl_module: LightningModule) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        checkpoint = self._read_checkpoint(pl_module)
        old_tokenizer = self.old_tokenizer
        if isinstance(old_tokenizer, (str, os.PathLike)):  # a saved tokenizer (.json), a directory or hf:<name>
            from lightning_embinit.text.tokenization import build_tokenizer

            old_tokenizer = build_tokenizer(os.fspath(old_tokenizer))
        state = None if checkpoint is None else dict(checkpoint["state_dict"])
        jobs = extension_jobs(
            pl_module,
            checkpoint,
            slots=self.slots,
            tokens=self.tokens,
            old_tokens=self.old_tokens,
            old_tokenizer=old_tokenizer,
            datamodule=datamodule,
        )
        plans = run_on_rank_zero(  # built on global rank 0 and broadcast; a failure there is raised on every rank
            lambda: {name: plan_job(pl_module, job, state, self.options) for name, job in jobs.items()},
            what="vocabulary extension",
            broadcast_object=lambda value: trainer.strategy.broadcast(value, src=0),
        )
        if state is not None:
            for name, job in jobs.items():
                if job.into_state:
                    extend_state(state, pl_module, job, plans[name])
            load_extended_state(pl_module, state, self.from_checkpoint)
        for name, job in jobs.items():
            if not job.into_state:
                apply_plan(pl_module, plans[name], tokenizer=job.tokenizer)
        self.added.clear()
        self.added.update({name: plan.added.clone() for name, plan in plans.items()})
        self.reports = {name: self._report(trainer, pl_module, datamodule, plan) for name, plan in plans.items()}

    def _read_checkpoint(self, pl_module: LightningModule) -> dict[str, Any] | None:
        if self.from_checkpoint is None:
            return None
        checkpoint = load_checkpoint_file(self.from_checkpoint, what="from_checkpoint", weights_only=False)
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), Mapping):
            raise ValueError(f"from_checkpoint {self.from_checkpoint}: not a Lightning checkpoint (no state_dict)")
        pl_module.on_load_checkpoint(checkpoint)  # as in Lightning's restore: the system sees the checkpoint first
        return checkpoint

    def _report(
        self, trainer: Trainer, pl_module: LightningModule, datamodule: Any, plan: ExtensionPlan
    ) -> dict[str, Any]:
        probe = None
        if (
            self.probe
            and trainer.global_rank == 0
            and callable(getattr(pl_module, "output_states", None))
            and callable(getattr(datamodule, "train_dataloader", None))
        ):
            batch = next(iter(datamodule.train_dataloader()))
            probe = lambda module: module.output_states(batch)  # noqa: E731
        with eval_mode(pl_module):
            return finish_report(pl_module, plan, probe)


def _frozen_rows(masks: Mapping[str, torch.Tensor], name: str) -> torch.Tensor | None:
    added = masks.get(name)
    return None if added is None else ~added
