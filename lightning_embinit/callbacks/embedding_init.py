"""``EmbeddingInitCallback``: initialize a model's embedding tables when ``fit`` sets up.

A thin adapter over :mod:`lightning_embinit.init`: it picks the slots, finds their token strings
(:mod:`lightning_embinit.init.tokens`), builds every matrix on global rank 0, broadcasts them so
all ranks hold identical weights, writes them only once all were built and checked, applies
freezing, and reports. It does nothing on validate, test or predict, nothing the second time, and
nothing when fit resumes from a checkpoint (whose weights and report stand).

Resume: Lightning restores a checkpoint after ``setup``, so the callback reads the running fit's
``ckpt_path`` (:mod:`.lightning_internals`) and confirms it with its own ``on_load_checkpoint``
during the restore; a disagreement raises at ``on_train_start`` (after every strategy's restore,
before the first step), a missing frame warns and builds.
"""

from __future__ import annotations

import os
import secrets
import weakref
from typing import Any, Mapping, Sequence

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_embinit.callbacks.lightning_internals import LightningInternalsWarning, NOT_FOUND, running_fit_checkpoint
from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.freezing import apply_trainability, decays, pin_rows
from lightning_embinit.init.pipeline import BuiltSlot, build_slot, recipes_for_slots, slot_report, write_slot
from lightning_embinit.init.recipe import InitRecipe, Trainable
from lightning_embinit.init.report import format_report, report_hyperparameters, report_metrics
from lightning_embinit.init.sources.base import Coverage, SourceMatrix
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
    """Initialize embedding tables at ``setup(stage="fit")`` and record how they were born.

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
        self._parameter_names: dict[str, str] = {}
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
        if stage != "fit" or pl_module in self._seen_modules:
            return
        slots, recipes = self._prepare(pl_module, getattr(trainer, "datamodule", None))
        self._seen_modules.add(pl_module)
        self._restored = False
        checkpoint = running_fit_checkpoint(trainer)
        if checkpoint is NOT_FOUND:
            rank_zero_warn(
                "EmbeddingInitCallback cannot tell whether this fit resumes from a checkpoint (no Trainer._run frame "
                "on the stack: setup called outside Trainer.fit, or a Lightning release that renamed it); it builds "
                "the embeddings now, and a checkpoint restored later replaces them and their report.",
                category=LightningInternalsWarning,
            )
            checkpoint = None
        self._awaiting_restore = checkpoint
        self.resumed = checkpoint is not None
        if self.resumed:
            rank_zero_info("EmbeddingInitCallback: fit resumes from a checkpoint; its embeddings and report stand.")
        else:
            self._write_and_report(slots, recipes, self._build_everywhere(trainer, slots, recipes))
            self._publish(trainer)
        self._apply_trainability(slots, recipes)

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        """Lightning restores a checkpoint into this fit (after ``setup``): its weights and report stand."""
        self._restored = True
        self.resumed = True

    def _check_restored(self) -> None:
        """After every restore (strategies such as FSDP restore after ``on_fit_start``), before the first step."""
        if self._awaiting_restore is not None and not self._restored:
            raise RuntimeError(
                f"EmbeddingInitCallback skipped building the embeddings because this fit was to resume from "
                f"{self._awaiting_restore}, but Lightning restored no checkpoint: the embeddings are not initialized. "
                "This Lightning release changed how fit resumes; please report it (lightning_embinit)."
            )
        self._awaiting_restore = None

    def initialize(self, module: torch.nn.Module, datamodule: Any = None) -> dict[str, dict[str, Any]]:
        """The callback's own path without a Trainer: resolve slots and tokens, build, check, write, freeze, report.

        Returns (and keeps in ``reports``) the report rows ``fit`` would produce for the same
        setting; ``datamodule`` supplies token strings and the training corpus as it does in ``fit``.
        """
        slots, recipes = self._prepare(module, datamodule)
        built, summary = self._build_local(slots, recipes, datamodule)
        self.seed_used = summary["seed"]
        self._write_and_report(slots, recipes, built)
        self._apply_trainability(slots, recipes)
        return self.reports

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Confirm a promised resume happened; pin frozen pre-trained rows for optimizers whose weight decay
        would move them despite the mask."""
        self._check_restored()
        for name, slot in self._slots.items():
            if self._recipes[name].trainable != "pretrained_rows":
                continue
            for optimizer in trainer.optimizers:
                if decays(optimizer, slot.weight):
                    pin_rows(optimizer, slot.weight, lambda name=name, masks=self._pretrained_rows: masks.get(name))

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = {
            "slots": {
                name: {
                    "parameter": self._parameter_names.get(name),
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

    def _prepare(self, module: torch.nn.Module, datamodule: Any) -> tuple[dict[str, EmbeddingSlot], dict[str, InitRecipe]]:
        """The slots with their token strings and recipes, every option checked against every table; no weight touched."""
        slots = select_slots(module, list(self.slot_recipes) or None)
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
        self._slots = slots
        self._recipes = recipes
        self._parameter_names = _parameter_names(module, slots)
        self._pretrained_rows = {}
        return slots, recipes

    def _build_local(
        self, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe], datamodule: Any
    ) -> tuple[dict[str, BuiltSlot], dict[str, Any]]:
        """Every slot's checked matrix and a broadcastable summary (seed, per-slot descriptions)."""
        seed = self.seed if self.seed is not None else secrets.randbelow(2**31)
        generator = torch.Generator().manual_seed(seed)
        built: dict[str, BuiltSlot] = {}
        for name, slot in slots.items():
            built[name] = build_slot(slot, recipes[name], generator=generator, corpus=corpus_for_slot(datamodule, name))
        return built, {"seed": seed, "slots": {name: _describe(b) for name, b in built.items()}}

    def _build_everywhere(
        self, trainer: Trainer, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe]
    ) -> dict[str, BuiltSlot]:
        """Build on global rank 0, then broadcast matrices, masks and descriptions to every rank."""
        distributed = trainer.world_size > 1 and dist.is_available() and dist.is_initialized()
        built: dict[str, BuiltSlot] = {}
        summary: dict[str, Any]
        failure: BaseException | None = None
        if trainer.global_rank == 0:
            try:
                built, summary = self._build_local(slots, recipes, getattr(trainer, "datamodule", None))
            except Exception as error:  # re-raised below on every rank, so no rank waits forever
                failure = error
                summary = {"error": f"{type(error).__name__}: {error}"}
        else:
            summary = {}
        if distributed:
            summary = trainer.strategy.broadcast(summary, src=0)
        if "error" in summary:
            if failure is not None:
                raise failure
            raise ValueError(f"embedding initialization failed on rank 0: {summary['error']}")
        self.seed_used = summary["seed"]
        if not distributed:
            return built
        device = trainer.strategy.root_device if dist.get_backend() == "nccl" else torch.device("cpu")
        for name, slot in slots.items():
            dtype = getattr(torch, summary["slots"][name]["dtype"])
            weight = built[name].matrix.weight if name in built else torch.empty(slot.num_embeddings, slot.embedding_dim, dtype=dtype)
            rows = built[name].matrix.pretrained_rows if name in built else torch.empty(slot.num_embeddings, dtype=torch.bool)
            weight, rows = _broadcast(weight, device), _broadcast(rows, device)
            built[name] = _rebuild(name, weight, rows, summary["slots"][name])
        return built

    def _write_and_report(
        self, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe], built: Mapping[str, BuiltSlot]
    ) -> None:
        for name, slot in slots.items():
            write_slot(slot, built[name].matrix.weight)
            self._pretrained_rows[name] = built[name].matrix.pretrained_rows.clone()
        self.reports = {name: slot_report(slot, built[name], recipes[name], seed=self.seed_used) for name, slot in slots.items()}
        for name, origin in self.token_origins.items():
            self.reports[name]["tokens_from"] = origin

    def _apply_trainability(self, slots: Mapping[str, EmbeddingSlot], recipes: Mapping[str, InitRecipe]) -> None:
        masks = self._pretrained_rows
        for name, slot in slots.items():
            message = apply_trainability(slot, recipes[name].trainable, lambda name=name: masks.get(name))
            if message:
                rank_zero_warn(f"EmbeddingInitCallback: {message}")

    def _publish(self, trainer: Trainer) -> None:
        if self.verbose:
            rank_zero_info(format_report(self.reports))
        for logger in trainer.loggers:
            logger.log_hyperparams(report_hyperparameters(self.reports))
            logger.log_metrics(report_metrics(self.reports), step=0)


def _describe(built: BuiltSlot) -> dict[str, Any]:
    coverage = built.matrix.coverage
    return {
        "source": built.source,
        "dtype": str(built.matrix.weight.dtype).removeprefix("torch."),
        "transforms": built.transforms,
        "coverage": coverage.as_dict() if coverage is not None else None,
    }


def _rebuild(name: str, weight: torch.Tensor, rows: torch.Tensor, description: Mapping[str, Any]) -> BuiltSlot:
    coverage = description["coverage"]
    if coverage is not None:
        coverage = Coverage(coverage["found"], coverage["total"], dict(coverage["by_rule"]), list(coverage["missing"]),
                            coverage.get("extra_rows", 0))
    matrix = SourceMatrix(weight, rows, description["source"], coverage)
    return BuiltSlot(name, matrix, description["source"], list(description["transforms"]))


def _broadcast(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    on_device = tensor.to(device).contiguous()
    dist.broadcast(on_device, src=0)
    return on_device.cpu()


def _parameter_names(module: torch.nn.Module, slots: Mapping[str, EmbeddingSlot]) -> dict[str, str]:
    names = {id(parameter): name for name, parameter in module.named_parameters(remove_duplicate=True)}
    return {slot_name: names.get(id(slot.weight), "") for slot_name, slot in slots.items()}
