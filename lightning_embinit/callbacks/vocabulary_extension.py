"""``VocabularyExtensionCallback``: fine-tune a trained model on text with tokens its vocabulary lacks (issue 18).

At ``setup(stage="fit")`` it loads the weights of ``from_checkpoint`` — weights only: a fine-tune starts a fresh
optimizer, fresh loops and step count — and extends each slot to the new vocabulary through
:mod:`lightning_embinit.init.extension` (every old row kept bit for bit; the new rows by ``rule``). The new rows
are built on global rank 0 and broadcast, so every rank holds identical tables.

- Old tokens: ``old_tokens=``, else the checkpoint's ``embinit`` record (this callback and
  ``EmbeddingInitCallback`` write it), else the system's hyperparameters (``checkpoint_vocabularies``).
- New tokens: ``tokens=`` (a list, a file, a tokenizer, or a mapping slot → one of these), else the datamodule's
  ``vocabulary_for(slot)`` / ``vocabulary``, else the model's own (``embinit fit`` builds the model over the
  datamodule's vocabulary, so it already has the new shapes: the checkpoint's tensors are extended into them).
- Old tokenizer (``pieces``): ``old_tokenizer=`` (a tokenizer object, a saved tokenizer ``.json``, a directory
  or ``hf:<name>``), else the checkpoint's own (translation and classification systems keep theirs).

``--ckpt_path`` keeps Lightning's meaning: it resumes a run — weights, optimizer, loops — with that run's shapes,
and Lightning restores it after ``setup``, strictly, with no public hook in between. Resuming a fine-tune run
(its checkpoints hold the extended tables) works: the callback leaves the weights to the restore and only
re-applies ``trainable``. A ``--ckpt_path`` whose tables have other shapes is refused at ``setup``, naming
``from_checkpoint``. Knowing at ``setup`` that a fit resumes reads Lightning's ``Trainer._run`` frame
(:mod:`.lightning_internals`).
"""

from __future__ import annotations

import os
import secrets
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_embinit.callbacks.lightning_internals import (
    NOT_FOUND,
    LightningInternalsWarning,
    check_resume_restored,
    running_fit_checkpoint,
)
from lightning_embinit.checks import check_choice
from lightning_embinit.init.distributed import run_on_rank_zero
from lightning_embinit.init.extension import (
    TRAINABLE_EXTENSION,
    ExtensionPlan,
    apply_plan,
    finish_report,
    freeze_old_rows,
    pin_old_rows,
    plan_extension,
    token_list,
)
from lightning_embinit.init.extension_report import extension_metrics, format_extension_report
from lightning_embinit.init.extension_rules import new_bias_value, resolve_rule, splitter_of
from lightning_embinit.init.extension_tables import SlotTables, output_layers, parameter_names, read_tables
from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.sources.checkpoint import CHECKPOINT_KEY
from lightning_embinit.init.sources.checkpoint_file import load_checkpoint_file


@dataclass
class _Job:
    """One slot's extension: where its old tensors are (the checkpoint's state or the model) and its vocabularies."""

    slot: EmbeddingSlot
    old_tokens: list[str]
    new_tokens: list[str]
    tokenizer: Any
    old_tokenizer: Any
    outputs: tuple[str, ...]
    into_state: bool
    old_padding: int | None


class VocabularyExtensionCallback(Callback):
    """Extend a trained model's vocabulary at ``setup(stage="fit")`` (module docstring).

    Args:
        from_checkpoint: the trained model's checkpoint, whose weights the fine-tune starts from (None: the model's
            own weights are the trained ones, e.g. ``TiedEmbeddingLM.load_from_checkpoint(...)``).
        rule, head_rule, bias, standardize, source_options: the new rows' start
            (:func:`~lightning_embinit.init.extension.extend_vocabulary`).
        slots: which slots (None: every slot of the model).
        tokens, old_tokens, old_tokenizer: the vocabularies (module docstring).
        trainable: ``True``, or ``"new_rows"``: only the new rows of the tables and their output layers learn (every
            other parameter frozen, the old rows masked and, for AdamW with weight decay, pinned after each step).
        allow_dropping: let the new vocabulary drop old tokens (their rows are lost).
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
        slots: Sequence[str] | None = None,
        tokens: Any = None,
        old_tokens: Any = None,
        old_tokenizer: Any = None,
        trainable: bool | str = True,
        allow_dropping: bool = False,
        source_options: Mapping[str, Any] | None = None,
        seed: int | None = 0,
        probe: bool = True,
        verbose: bool = True,
    ) -> None:
        check_choice("trainable=", trainable, TRAINABLE_EXTENSION)
        resolve_rule(rule, **dict(source_options or {}))
        if head_rule is not None:
            resolve_rule(head_rule)
        new_bias_value(bias, torch.zeros(1))
        if from_checkpoint is not None and not os.path.isfile(os.path.expanduser(os.fspath(from_checkpoint))):
            raise ValueError(f"from_checkpoint={os.fspath(from_checkpoint)!r}: no such file")
        self.from_checkpoint = None if from_checkpoint is None else os.path.expanduser(os.fspath(from_checkpoint))
        self.options = {
            "rule": rule,
            "head_rule": head_rule,
            "bias": bias,
            "standardize": standardize,
            "source_options": dict(source_options or {}),
            "allow_dropping": allow_dropping,
            "seed": seed,
        }
        self.slots, self.tokens, self.old_tokens, self.old_tokenizer = slots, tokens, old_tokens, old_tokenizer
        self.trainable, self.probe, self.verbose = trainable, probe, verbose
        self.reports: dict[str, dict[str, Any]] = {}
        self.added: dict[str, torch.Tensor] = {}
        self.resumed = False
        self._restored = False
        self._awaiting_restore: str | None = None
        self._frozen: dict[str, list[torch.nn.Parameter]] = {}
        self._seen: weakref.WeakSet[LightningModule] = weakref.WeakSet()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_seen": None, "_frozen": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._seen = weakref.WeakSet()

    # -- hooks -----------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit" or pl_module in self._seen:
            return
        self._seen.add(pl_module)
        resume = running_fit_checkpoint(trainer)
        if resume is NOT_FOUND:
            rank_zero_warn(
                "VocabularyExtensionCallback cannot tell whether this fit resumes (no Trainer._run frame on the "
                "stack); it extends the vocabulary now.",
                category=LightningInternalsWarning,
            )
            resume = None
        self.resumed = resume is not None
        self._restored, self._awaiting_restore = False, None
        if self.resumed:
            self._awaiting_restore = os.fspath(resume)
            self._resume(pl_module, self._awaiting_restore)
        else:
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

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        """Lightning restores the checkpoint this fit resumes (after ``setup``): its tables stand."""
        self._restored = True

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Confirm a promised resume happened; pin the old rows for optimizers whose weight decay would move them
        despite the gradient mask."""
        check_resume_restored(
            "VocabularyExtensionCallback",
            "the extension",
            self._awaiting_restore,
            self._restored,
            "the tables hold the model's constructor weights",
        )
        self._awaiting_restore = None
        for name, tensors in self._frozen.items():
            for optimizer in trainer.optimizers:
                pin_old_rows(optimizer, tensors, lambda name=name: _frozen_rows(self.added, name))

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        slots = checkpoint.setdefault(CHECKPOINT_KEY, {}).setdefault("slots", {})
        names = {id(p): n for n, p in pl_module.named_parameters()}
        for name, slot in select_slots(pl_module, list(self.added) or None).items():
            if slot.tokens is not None:
                slots.setdefault(name, {"parameter": names.get(id(slot.weight)), "tokens": list(slot.tokens)})

    def state_dict(self) -> dict[str, Any]:
        return {"reports": self.reports, "added": dict(self.added)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.reports = dict(state_dict.get("reports", {}))
        self.added.clear()  # in place: the gradient hooks read this dict
        self.added.update(state_dict.get("added", {}))

    # -- steps -----------------------------------------------------------------------------
    def _resume(self, pl_module: LightningModule, path: str) -> None:
        """A resumed fine-tune: its checkpoint must hold this model's shapes; its masks of new rows are read now."""
        checkpoint = load_checkpoint_file(path, what="--ckpt_path", weights_only=False)
        state = checkpoint.get("state_dict", {})
        for name, slot in select_slots(pl_module, self.slots).items():
            saved = next((state[key] for key in parameter_names(pl_module, slot.weight) if key in state), None)
            if saved is not None and saved.shape[0] != slot.num_embeddings:
                raise ValueError(
                    f"--ckpt_path {path} resumes a run, with its own shapes (Lightning restores weights, optimizer and "
                    f"loops after setup, strictly): its slot {name!r} has {saved.shape[0]} rows, this model "
                    f"{slot.num_embeddings}. "
                    "To fine-tune a trained model with new tokens, drop --ckpt_path and pass "
                    "VocabularyExtensionCallback(from_checkpoint=<the trained model's checkpoint>)"
                )
        own = checkpoint.get("callbacks", {}).get(self.state_key)
        if own is not None:
            self.load_state_dict(own)
        rank_zero_info("VocabularyExtensionCallback: fit resumes a fine-tune; its checkpoint's tables stand.")

    def _extend(self, trainer: Trainer, pl_module: LightningModule) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        checkpoint = self._read_checkpoint(pl_module)
        state = None if checkpoint is None else dict(checkpoint["state_dict"])
        jobs = self._jobs(pl_module, datamodule, checkpoint)
        plans = self._plans_everywhere(trainer, pl_module, jobs, state)
        if state is not None:
            for name, job in jobs.items():
                if job.into_state:
                    _extend_state(state, pl_module, job, plans[name])
            _load_state(pl_module, state, self.from_checkpoint)
        for name, job in jobs.items():
            if not job.into_state:
                apply_plan(pl_module, plans[name], tokenizer=job.tokenizer)
        self.added.clear()
        self.added.update({name: plan.added.clone() for name, plan in plans.items()})
        self.reports = {name: self._report(trainer, pl_module, datamodule, plan) for name, plan in plans.items()}
        self._publish(trainer)

    def _read_checkpoint(self, pl_module: LightningModule) -> dict[str, Any] | None:
        if self.from_checkpoint is None:
            return None
        checkpoint = load_checkpoint_file(self.from_checkpoint, what="from_checkpoint", weights_only=False)
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), Mapping):
            raise ValueError(f"from_checkpoint {self.from_checkpoint}: not a Lightning checkpoint (no state_dict)")
        pl_module.on_load_checkpoint(checkpoint)  # as in Lightning's restore: a system's legacy keys move first
        return checkpoint

    def _jobs(self, pl_module: LightningModule, datamodule: Any, checkpoint: dict[str, Any] | None) -> dict[str, _Job]:
        recorded = _recorded_vocabularies(pl_module, checkpoint)
        jobs = {}
        for name, slot in select_slots(pl_module, self.slots).items():
            new_tokens, tokenizer = _new_vocabulary(name, slot, self.tokens, datamodule)
            old_tokens, old_tokenizer = _old_vocabulary(name, slot, self.old_tokens, recorded, checkpoint is not None)
            into_state = checkpoint is not None and slot.num_embeddings != len(old_tokens)
            if into_state and slot.num_embeddings != len(new_tokens):
                raise ValueError(
                    f"slot {name!r}: the model's table has {slot.num_embeddings} rows, the checkpoint's "
                    f"vocabulary {len(old_tokens)} tokens and the new one {len(new_tokens)}: build the model "
                    "over the old or the new vocabulary"
                )
            old_padding = slot.padding_idx
            if into_state and slot.padding_idx is not None:
                old_padding = _index(old_tokens, new_tokens[slot.padding_idx], name, "padding token")
            given_splitter = _tokenizer_object(self.old_tokenizer)
            jobs[name] = _Job(
                slot,
                old_tokens,
                new_tokens,
                tokenizer or _datamodule_tokenizer(datamodule, name, new_tokens),
                old_tokenizer if given_splitter is None else given_splitter,
                output_layers(pl_module, slot),
                into_state,
                old_padding,
            )
        return jobs

    def _plans_everywhere(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        jobs: Mapping[str, _Job],
        state: Mapping[str, torch.Tensor] | None,
    ) -> dict[str, ExtensionPlan]:
        """Plans built on global rank 0 and broadcast; a failure there is raised on every rank."""
        return run_on_rank_zero(
            lambda: {name: self._plan(pl_module, job, state) for name, job in jobs.items()},
            what="vocabulary extension",
            broadcast_object=lambda value: trainer.strategy.broadcast(value, src=0),
        )

    def _plan(self, pl_module: LightningModule, job: _Job, state: Mapping[str, torch.Tensor] | None) -> ExtensionPlan:
        old = read_tables(pl_module, job.slot, job.outputs) if state is None else _state_tables(state, pl_module, job)
        options = dict(self.options)
        if options["seed"] is None:
            options["seed"] = secrets.randbelow(2**31)
        plan = plan_extension(
            old,
            slot=job.slot.name,
            old_tokens=job.old_tokens,
            new_tokens=job.new_tokens,
            padding_idx=job.old_padding,
            special_tokens=dict(job.slot.special_tokens),
            split=splitter_of(job.old_tokenizer, job.old_tokens),
            **options,
        )
        plan.report["seed"] = options["seed"]
        return plan

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
        was_training = pl_module.training
        pl_module.eval()
        try:
            return finish_report(pl_module, plan, probe)
        finally:
            pl_module.train(was_training)

    def _publish(self, trainer: Trainer) -> None:
        if self.verbose:
            rank_zero_info(format_extension_report(self.reports))
        for logger in trainer.loggers:
            logger.log_metrics(extension_metrics(self.reports), step=0)


def _frozen_rows(masks: Mapping[str, torch.Tensor], name: str) -> torch.Tensor | None:
    added = masks.get(name)
    return None if added is None else ~added


def _index(tokens: Sequence[str], token: str, slot: str, what: str) -> int:
    try:
        return list(tokens).index(token)
    except ValueError:
        raise ValueError(f"slot {slot!r}: the old vocabulary has no {what} {token!r}") from None


def _tokenizer_object(spec: Any) -> Any:
    """An ``old_tokenizer=`` given as a saved tokenizer (``.json``), a directory or ``hf:<name>``, loaded."""
    if isinstance(spec, (str, os.PathLike)):
        from lightning_embinit.text.tokenization import build_tokenizer

        return build_tokenizer(os.fspath(spec))
    return spec


def _datamodule_tokenizer(datamodule: Any, slot: str, tokens: Sequence[str]) -> Any:
    """The datamodule's tokenizer of ``slot`` (``<slot>_tokenizer``, ``src_tokenizer`` for ``shared``, ``tokenizer``)
    when its tokens are ``tokens``: what a translation or classification system keeps after the extension."""
    for attribute in (f"{slot}_tokenizer", "src_tokenizer" if slot == "shared" else "", "tokenizer"):
        found = getattr(datamodule, attribute, None) if attribute else None
        if isinstance(getattr(found, "tokens", None), list) and list(found.tokens) == list(tokens):
            return found
    return None


def _recorded_vocabularies(
    pl_module: LightningModule, checkpoint: Mapping[str, Any] | None
) -> dict[str, tuple[Any, Any]]:
    """Slot → (old tokens, old tokenizer) that a checkpoint records: the ``embinit`` key, then the system's hparams."""
    if checkpoint is None:
        return {}
    found: dict[str, tuple[Any, Any]] = {}
    reader = getattr(type(pl_module), "checkpoint_vocabularies", None)
    if callable(reader):
        found.update(reader(checkpoint.get("hyper_parameters") or {}))
    for name, record in ((checkpoint.get(CHECKPOINT_KEY) or {}).get("slots") or {}).items():
        if record.get("tokens") is not None:
            found[name] = (list(record["tokens"]), found.get(name, (None, None))[1])
    return found


def _old_vocabulary(
    name: str, slot: EmbeddingSlot, given: Any, recorded: Mapping[str, tuple[Any, Any]], from_checkpoint: bool
) -> tuple[list[str], Any]:
    spec = given.get(name) if isinstance(given, Mapping) else given
    if spec is not None:
        return token_list(spec)[0], None
    if from_checkpoint:
        tokens, tokenizer = recorded.get(name, (None, None))
        if tokens is None:
            raise ValueError(
                f"slot {name!r}: the checkpoint records no token strings for it (no `embinit` record and no "
                "vocabulary hyperparameter): pass old_tokens="
            )
        return list(tokens), tokenizer
    if slot.tokens is None:
        raise ValueError(f"slot {name!r} names no tokens: pass old_tokens= (its token strings by id)")
    return list(slot.tokens), None


def _new_vocabulary(name: str, slot: EmbeddingSlot, given: Any, datamodule: Any) -> tuple[list[str], Any]:
    spec = given.get(name) if isinstance(given, Mapping) else given
    if spec is not None:
        return token_list(spec)
    if callable(getattr(datamodule, "vocabulary_for", None)):
        try:
            return token_list(datamodule.vocabulary_for(name))[0], None
        except (KeyError, ValueError):
            pass
    vocabulary = getattr(datamodule, "vocabulary", None)
    if vocabulary is not None and not callable(vocabulary):
        return token_list(vocabulary)[0], None
    if slot.tokens is None:
        raise ValueError(f"slot {name!r}: no new vocabulary: pass tokens=, or use a datamodule with a vocabulary")
    return list(slot.tokens), None


def _state_tables(state: Mapping[str, torch.Tensor], pl_module: LightningModule, job: _Job) -> SlotTables:
    key = next((k for k in parameter_names(pl_module, job.slot.weight) if k in state), None)
    if key is None:
        raise ValueError(
            f"slot {job.slot.name!r}: the checkpoint has no tensor for its table "
            f"({parameter_names(pl_module, job.slot.weight)})"
        )
    return SlotTables(
        state[key],
        {path: state[f"{path}.weight"] for path in job.outputs},
        {path: state.get(f"{path}.bias") for path in job.outputs},
    )


def _extend_state(state: dict[str, torch.Tensor], pl_module: LightningModule, job: _Job, plan: ExtensionPlan) -> None:
    """The checkpoint's tensors of ``job``'s slot replaced by the extended ones (under every name the model
    gives them)."""
    tables = plan.assemble(_state_tables(state, pl_module, job))
    for key in parameter_names(pl_module, job.slot.weight):
        state[key] = tables.embedding
    for path in job.outputs:
        state[f"{path}.weight"] = tables.outputs[path]
        if tables.biases.get(path) is not None:
            state[f"{path}.bias"] = tables.biases[path]


def _load_state(pl_module: LightningModule, state: Mapping[str, torch.Tensor], path: str | None) -> None:
    try:
        pl_module.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise ValueError(
            f"from_checkpoint {path} does not fit {type(pl_module).__name__} beyond its vocabulary (other "
            f"sizes?): {' '.join(str(error).split())[:400]}"
        ) from None
