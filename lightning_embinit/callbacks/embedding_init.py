"""``EmbeddingInitCallback``: initialize a model's embedding tables when ``fit`` sets up.

A thin adapter over :mod:`lightning_embinit.init`: it picks the slots, finds their token strings
(:mod:`lightning_embinit.init.tokens`), builds every matrix on global rank 0, broadcasts them so
all ranks hold identical weights, writes them only once all were built and checked, applies
freezing, and reports. It does nothing on validate, test or predict, nothing the second time, and
nothing when fit resumes from a checkpoint (whose weights and report stand).

When: at ``setup(stage="fit")`` when the selected tables exist then; tables that the module
creates in ``configure_model`` (or that sit on the meta device until the strategy materializes
them) are built at ``on_fit_start``, the first callback hook after ``configure_model`` and the
strategy's setup, before any optimizer step (:mod:`.strategies`). Sharded tables (FSDP2's
``DTensor``) get each rank's slice of the one matrix (:mod:`lightning_embinit.init.sharding`).

Resume: Lightning restores a checkpoint after ``setup``, so the callback reads the running fit's
``ckpt_path`` (:mod:`.lightning_internals`) and confirms it with its own ``on_load_checkpoint``
during the restore; a disagreement raises at ``on_train_start`` (after every strategy's restore,
before the first step), a missing frame warns and builds.
"""

from __future__ import annotations

import os
import secrets
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_embinit.callbacks.lightning_internals import (
    NOT_FOUND,
    LightningInternalsWarning,
    check_resume_restored,
    running_fit_checkpoint,
)
from lightning_embinit.callbacks.strategies import check_no_meta, check_strategy, tables_ready, wrapped_for_ddp
from lightning_embinit.init.distributed import build_on_rank_zero, is_distributed
from lightning_embinit.init.freezing import apply_trainability, check_trainability, decays, pin_rows
from lightning_embinit.init.host import EmbeddingSlot, discover_slots, select_slots
from lightning_embinit.init.pipeline import BuiltSlot, build_slot, recipes_for_slots, slot_report, write_slot
from lightning_embinit.init.recipe import InitRecipe, Trainable
from lightning_embinit.init.report import format_report, report_hyperparameters, report_metrics
from lightning_embinit.init.sources.checkpoint import CHECKPOINT_KEY
from lightning_embinit.init.tokens import (
    TokenSpec,
    check_token_option,
    corpus_for_slot,
    missing_tokens_error,
    resolve_slot_tokens,
)
from lightning_embinit.init.transforms import StatisticsTarget


class EmbeddingInitCallback(Callback):
    """Initialize embedding tables when ``fit`` sets up and record how they were born.

    At ``setup(stage="fit")`` when the tables exist then, else at ``on_fit_start`` (tables created in
    ``configure_model``, or materialized from the meta device by the strategy).

    Args:
        source: a random scheme (``"xavier"``, ``"normal:0.01"``, ...), a pre-trained source name
            (``"bert"``, ``"glove"``, ``"hf:<dir>"``, ...) or an ``EmbeddingSource`` object.
        standardize: move the table onto a target's mean and std (Pre-trained_Xavier, [K] §3.4):
            a scheme name, a std, a ``(mean, std)`` pair or a matrix.
        match: move the table onto a reference source's statistics (Xavier_Pre-trained).
        shuffle: permute rows and columns (Pre-trained_Shuffled).
        scale: multiply the table by a constant.
        transforms: an explicit ordered list of ``"name[:argument]"`` steps instead of the four above.
        trainable: ``True``; ``False`` freezes the table (and any output layer tied to it);
            ``"pretrained_rows"`` freezes only rows a pre-trained source filled, by masking their gradient.
        slots: which tables: ``None`` (all), a list of slot names or dotted module paths, or a
            mapping slot → overrides of the options above (e.g. a different source per slot).
        seed: the generator seed; drawn at random (and reported) when ``None``.
        source_options: keyword options for a pre-trained source (``{"oov": "match"}``, ...).
        match_options, standardize_options: options of a reference source named by ``match=`` or
            ``standardize=`` (``{"project": "pca"}``, ...).
        tokens: token strings for tables whose model does not name them: a list (by id), a file
            with one token per line, a Hugging Face tokenizer name or directory (its vocabulary in
            id order), or a mapping slot → one of these. Else the datamodule's ``vocabulary_for(slot)``
            or ``vocabulary``, else the model's ``vocabulary`` attribute.
        cache_dir: where every source (main and reference) caches parsed vector files; else a file
            source's own ``cache_dir`` option, then ``$EMBINIT_CACHE_DIR``.
        verbose: print the report table on global rank 0.
    """

    def __init__(
        self,
        source: Any = "xavier",
        standardize: StatisticsTarget | None = None,
        match: StatisticsTarget | None = None,
        shuffle: bool = False,
        scale: float | None = None,
        trainable: Trainable = True,
        slots: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
        seed: int | None = None,
        source_options: Mapping[str, Any] | None = None,
        transforms: Sequence[str] | None = None,
        match_options: Mapping[str, Any] | None = None,
        standardize_options: Mapping[str, Any] | None = None,
        tokens: TokenSpec | Mapping[str, TokenSpec] | None = None,
        cache_dir: str | None = None,
        verbose: bool = True,
    ) -> None:
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        check_token_option(tokens)
        self.recipe = InitRecipe(
            source=source,
            source_options=dict(source_options or {}),
            standardize=standardize,
            match=match,
            shuffle=shuffle,
            scale=scale,
            transforms=transforms,
            trainable=trainable,
            match_options=dict(match_options or {}),
            standardize_options=dict(standardize_options or {}),
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        )
        self.slot_recipes = recipes_for_slots(self.recipe, slots)
        for name, recipe in (self.slot_recipes or {"": self.recipe}).items():
            recipe.check(slot=name)
        self.seed = seed
        self.tokens = tokens
        self.verbose = verbose
        self.reports: dict[str, dict[str, Any]] = {}
        self.token_origins: dict[str, str | None] = {}
        self.resumed = False
        self._awaiting_restore: Any = None
        self._restored = False
        self.seed_used: int | None = None
        self._pretrained_rows: dict[str, torch.Tensor] = {}
        self._slots: dict[str, EmbeddingSlot] = {}
        self._recipes: dict[str, InitRecipe] = {}
        self._masks: dict[str, Callable[[], torch.Tensor | None]] = {}
        self._deferred = False
        self._built_at_setup: set[int] | None = None
        self._seen_modules: weakref.WeakSet[LightningModule] = weakref.WeakSet()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_seen_modules"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._seen_modules = weakref.WeakSet()

    @property
    def state_key(self) -> str:
        return self._generate_state_key(slots=sorted(self.slot_recipes) or None)

    # -- hooks -----------------------------------------------------------------------------

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if pl_module in self._seen_modules:  # never a second time
            self._deferred, self._built_at_setup = False, None
            return
        check_strategy(trainer.strategy)
        self._restored, self._awaiting_restore, self._built_at_setup = False, None, None
        self._pretrained_rows, self._masks = {}, {}  # new ones: a restore into this fit fills them in place
        self._deferred = not tables_ready(pl_module, self._names())
        if not self._deferred:
            self._start(trainer, pl_module, deferred=False)
            self._built_at_setup = {id(slot.embedding) for slot in self._slots.values()}

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Build the tables that ``configure_model`` created (Lightning calls no callback hook between it and the
        strategy's setup, which materializes, wraps and creates the optimizers; the writes are in place)."""
        if self._deferred:
            self._deferred = False
            check_strategy(trainer.strategy, deferred=True)
            check_no_meta(pl_module, self._names(), trainer.strategy)
            self._start(trainer, pl_module, deferred=True)
        elif self._built_at_setup is not None:
            self._check_after_configure_model(pl_module)

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        """Lightning restores a checkpoint into this fit (after ``setup``): its weights and report stand."""
        self._restored = True
        self.resumed = True

    def _names(self) -> list[str] | None:
        return list(self.slot_recipes) or None

    def _start(self, trainer: Trainer, pl_module: LightningModule, *, deferred: bool) -> None:
        """Check, then build and report unless this fit resumes, then freeze (also on resume)."""
        slots, recipes = self._prepare(pl_module, getattr(trainer, "datamodule", None))
        self._seen_modules.add(pl_module)
        checkpoint = running_fit_checkpoint(trainer)
        if checkpoint is NOT_FOUND:
            if not self._restored:
                rank_zero_warn(
                    "EmbeddingInitCallback cannot tell whether this fit resumes from a checkpoint "
                    "(no Trainer._run frame on the stack: setup called outside Trainer.fit, "
                    "or a Lightning release that renamed it); it builds "
                    "the embeddings now, and a checkpoint restored later replaces them and their report.",
                    category=LightningInternalsWarning,
                )
            checkpoint = None
        self._awaiting_restore = None if self._restored else checkpoint
        self.resumed = self._restored or checkpoint is not None
        if self.resumed:
            rank_zero_info("EmbeddingInitCallback: fit resumes from a checkpoint; its embeddings and report stand.")
        else:
            self._write_and_report(slots, recipes, self._build_everywhere(trainer, slots, recipes))
            self._publish(trainer)
        self._apply_trainability(slots, recipes, by_mask=deferred and wrapped_for_ddp(trainer))

    def _check_after_configure_model(self, pl_module: LightningModule) -> None:
        """Tables built at setup: fail before training when configure_model added tables or sharded a partly
        frozen one."""
        for name, slot in self._slots.items():
            check_trainability(slot, self._recipes[name].trainable)
        if self.slot_recipes:
            return  # the tables were named
        try:
            late = [
                name
                for name, slot in discover_slots(pl_module).items()
                if id(slot.embedding) not in self._built_at_setup
            ]
        except ValueError:
            return
        if late:
            raise ValueError(
                f"EmbeddingInitCallback built {', '.join(self._slots)} at setup, "
                f"but configure_model created more embedding tables afterwards ({', '.join(late)}), "
                "which would train uninitialized: create every table in "
                "configure_model (all are then built at on_fit_start), or name the tables to build with slots=[...]"
            )

    def _check_restored(self) -> None:
        """After every restore (strategies such as FSDP restore after ``on_fit_start``), before the first step."""
        check_resume_restored(
            "EmbeddingInitCallback",
            "building the embeddings",
            self._awaiting_restore,
            self._restored,
            "the embeddings are not initialized",
        )
        self._awaiting_restore = None

    def initialize(self, module: torch.nn.Module, datamodule: Any = None) -> dict[str, dict[str, Any]]:
        """The callback's own path without a Trainer: resolve slots and tokens, build, check, write, freeze, report.

        Returns (and keeps in ``reports``) the report rows ``fit`` would produce for the same
        setting; ``datamodule`` supplies token strings and the training corpus as it does in ``fit``.
        Under ``torch.distributed`` every rank must call it: rank 0 builds, every rank writes the
        same matrices (a sharded table, its slice), as in ``fit``.
        """
        self._pretrained_rows, self._masks = {}, {}
        slots, recipes = self._prepare(module, datamodule)
        built, summary = build_on_rank_zero(slots, lambda: self._build_local(slots, recipes, datamodule))
        self.seed_used = summary["seed"]
        self._write_and_report(slots, recipes, built)
        self._apply_trainability(slots, recipes)
        return self.reports

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Confirm a promised resume happened; pin frozen rows for optimizers whose weight decay would move them
        despite the gradient mask."""
        self._check_restored()
        for name, rows in self._masks.items():
            weight = self._slots[name].weight
            for optimizer in trainer.optimizers:
                if decays(optimizer, weight):
                    pin_rows(optimizer, weight, rows)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        names = _parameter_names(pl_module, self._slots)
        checkpoint[CHECKPOINT_KEY] = {
            "slots": {
                name: {
                    "parameter": names.get(name),
                    "tokens": list(slot.tokens) if slot.tokens is not None else None,
                }
                for name, slot in self._slots.items()
            }
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "reports": self.reports,
            "seed": self.seed_used,
            "pretrained_rows": dict(self._pretrained_rows),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.reports = dict(state_dict.get("reports", {}))
        self.seed_used = state_dict.get("seed")
        self._pretrained_rows.clear()  # in place: the gradient hooks registered at setup read this dict
        self._pretrained_rows.update(state_dict.get("pretrained_rows", {}))

    # -- steps -----------------------------------------------------------------------------

    def _prepare(
        self, module: torch.nn.Module, datamodule: Any
    ) -> tuple[dict[str, EmbeddingSlot], dict[str, InitRecipe]]:
        """The slots with their token strings and recipes, every option checked against every table;
        no weight touched."""
        slots = select_slots(module, self._names())
        recipes = {name: self.slot_recipes.get(name, self.recipe) for name in slots}
        self.token_origins = {}
        for name in list(slots):
            slots[name], self.token_origins[name] = resolve_slot_tokens(
                slots[name], given=self.tokens, datamodule=datamodule, model=module
            )
        for name, slot in slots.items():
            source = recipes[name].validate(slot.num_embeddings, slot.embedding_dim, slot=name)
            if source.is_pretrained and slot.tokens is None:
                raise missing_tokens_error(name, source.name)
            check_trainability(slot, recipes[name].trainable)
        self._slots = slots
        self._recipes = recipes
        return slots, recipes

    def _build_local(
        self, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe], datamodule: Any
    ) -> tuple[dict[str, BuiltSlot], dict[str, Any]]:
        """Every slot's checked matrix, and the seed."""
        seed = self.seed if self.seed is not None else secrets.randbelow(2**31)
        generator = torch.Generator().manual_seed(seed)
        built: dict[str, BuiltSlot] = {}
        for name, slot in slots.items():
            built[name] = build_slot(slot, recipes[name], generator=generator, corpus=corpus_for_slot(datamodule, name))
        return built, {"seed": seed}

    def _build_everywhere(
        self, trainer: Trainer, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe]
    ) -> dict[str, BuiltSlot]:
        """Build on global rank 0, then broadcast matrices, masks and descriptions to every rank."""
        datamodule = getattr(trainer, "datamodule", None)
        if trainer.world_size > 1 and is_distributed():
            device = trainer.strategy.root_device if dist.get_backend() == "nccl" else torch.device("cpu")
            built, summary = build_on_rank_zero(
                slots,
                lambda: self._build_local(slots, recipes, datamodule),
                broadcast_object=lambda value: trainer.strategy.broadcast(value, src=0),
                device=device,
            )
        else:
            built, summary = self._build_local(slots, recipes, datamodule)
        self.seed_used = summary["seed"]
        return built

    def _write_and_report(
        self, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe], built: Mapping[str, BuiltSlot]
    ) -> None:
        for name, slot in slots.items():
            write_slot(slot, built[name].matrix.weight)
            self._pretrained_rows[name] = built[name].matrix.pretrained_rows.clone()
        self.reports = {
            name: slot_report(slot, built[name], recipes[name], seed=self.seed_used) for name, slot in slots.items()
        }
        for name, origin in self.token_origins.items():
            self.reports[name]["tokens_from"] = origin

    def _apply_trainability(
        self, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe], *, by_mask: bool = False
    ) -> None:
        """Freeze as each recipe says; remember the gradient masks whose rows decaying optimizers must pin."""
        masks = self._pretrained_rows
        for name, slot in slots.items():
            trainable = recipes[name].trainable
            message = apply_trainability(slot, trainable, lambda name=name: masks.get(name), by_mask=by_mask)
            if message:
                rank_zero_warn(f"EmbeddingInitCallback: {message}")
            if trainable == "pretrained_rows":
                self._masks[name] = lambda name=name: masks.get(name)
            elif trainable is False and by_mask:
                frozen = torch.ones(slot.num_embeddings, dtype=torch.bool)
                self._masks[name] = lambda rows=frozen: rows
                rank_zero_info(
                    f"EmbeddingInitCallback: slot {name!r} came from configure_model and DDP already counts it as "
                    "trainable, so it is frozen by a gradient mask (zero gradient, values pinned) instead of "
                    "requires_grad=False"
                )

    def _publish(self, trainer: Trainer) -> None:
        if self.verbose:
            rank_zero_info(format_report(self.reports))
        for logger in trainer.loggers:
            logger.log_hyperparams(report_hyperparameters(self.reports))
            logger.log_metrics(report_metrics(self.reports), step=0)


def _parameter_names(module: torch.nn.Module, slots: Mapping[str, EmbeddingSlot]) -> dict[str, str]:
    names = {id(parameter): name for name, parameter in module.named_parameters(remove_duplicate=True)}
    return {slot_name: names.get(id(slot.weight), "") for slot_name, slot in slots.items()}
