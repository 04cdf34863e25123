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

from lightning_embinit.callbacks.lifecycle import AddedRowsCallback
from lightning_embinit.init.distributed import run_on_rank_zero
from lightning_embinit.init.extension import ExtensionPlan, extension_metrics, format_extension_report
from lightning_embinit.init.extension.checkpoint import extend_state, extension_jobs, load_extended_state, plan_job
from lightning_embinit.init.extension.extend import apply_plan, finish_report
from lightning_embinit.init.extension.plan import check_pad_to_multiple_of
from lightning_embinit.init.extension.rules import new_bias_value, resolve_rule
from lightning_embinit.init.transforms import shared_direction_steps
from lightning_embinit.modules.decoding import eval_mode


class VocabularyExtensionCallback(AddedRowsCallback):
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
        super().__init__(from_checkpoint, trainable)
        resolve_rule(rule, **dict(source_options or {}))
        if head_rule is not None:
            resolve_rule(head_rule)
        new_bias_value(bias, torch.zeros(1))
        shared_direction_steps(transforms)
        check_pad_to_multiple_of(pad_to_multiple_of)
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
        self.probe, self.verbose = probe, verbose

    summary_key = "vocabulary_extension"
    """Studies record :meth:`summary` under this key (``PublishesSummary``)."""

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not self.begin_fit(pl_module, stage):
            return
        self._extend(trainer, pl_module)
        self.mark_done(pl_module)

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
    def publish(self, trainer: Trainer) -> None:
        if self.verbose:
            rank_zero_info(format_extension_report(self.reports))
        for logger in trainer.loggers:
            logger.log_metrics(extension_metrics(self.reports), step=0)

    def _extend(self, trainer: Trainer, pl_module: LightningModule) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        checkpoint = self.read_checkpoint(pl_module)
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
        self.check_trainable({name: plan.added for name, plan in plans.items()}, "the new vocabulary adds none")
        if state is not None:
            for name, job in jobs.items():
                if job.into_state:
                    extend_state(state, pl_module, job.slot, job.outputs, plans[name])
            load_extended_state(pl_module, state, self.from_checkpoint)
        for name, job in jobs.items():
            if not job.into_state:
                apply_plan(pl_module, plans[name], tokenizer=job.tokenizer)
        self.reports = {name: self._report(trainer, pl_module, datamodule, plan) for name, plan in plans.items()}
        self.keep_added(pl_module, {name: plan.added.clone() for name, plan in plans.items()})

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
