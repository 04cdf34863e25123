"""``EmbeddingInitCallback``: initialize a model's embedding tables when ``fit`` sets up.

A thin adapter over :class:`~lightning_embinit.init.engine.EmbeddingInitializer`, which prepares the slots, builds
every matrix (on global rank 0, broadcast), writes, freezes and reports; the callback decides when: at
``setup(stage="fit")`` when the selected tables exist then, else (tables made in ``configure_model`` or on the meta
device) at ``on_fit_start``, before any optimizer step (:mod:`.strategies`). Nothing on validate, test or predict,
nothing the second time for a model; a resumed fit ends with the checkpoint's tables and report (:mod:`.lifecycle`).
Sharded tables (FSDP2's ``DTensor``) get each rank's slice of the one matrix (:mod:`lightning_embinit.init.sharding`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_embinit.callbacks.lifecycle import FitOnceCallback
from lightning_embinit.callbacks.strategies import check_no_meta, check_strategy, tables_ready, wrapped_for_ddp
from lightning_embinit.init.engine import EmbeddingInitializer, PreparedSlots, SlotSelection
from lightning_embinit.init.freezing import check_trainability, pin_rows
from lightning_embinit.init.host import discover_slots
from lightning_embinit.init.recipe import InitRecipe
from lightning_embinit.init.report import format_report, report_hyperparameters, report_metrics
from lightning_embinit.init.sources.checkpoint import CHECKPOINT_KEY
from lightning_embinit.init.tokens import TokenSpec


def bfloat16_tables_(prepared: PreparedSlots) -> None:
    """Turn the tables to be written to bf16 first under ``precision="bf16-true"``: Lightning turns the module after
    ``setup`` (rounding to nearest), so the write rounds them stochastically instead and the report describes them as
    they train."""
    for slot in prepared.slots.values():
        if slot.weight.dtype != torch.bfloat16 and type(slot.weight.data) is torch.Tensor:
            slot.weight.data = slot.weight.data.to(torch.bfloat16)


class EmbeddingInitCallback(FitOnceCallback):
    """Initialize embedding tables when ``fit`` sets up and record how they were born (module docstring).

    Args:
        slots: which tables: ``None`` (all), a list of slot names or dotted module paths, or a mapping
            slot → overrides of the recipe's fields (e.g. a different source per slot).
        seed: the generator seed; drawn at random on global rank 0 (and reported) when ``None``.
        tokens: token strings for tables whose model does not name them: a list (by id), a file with one token per
            line, a Hugging Face tokenizer name or directory (its vocabulary in id order), or a mapping slot → one
            of these. Else the datamodule's ``vocabulary_for(slot)`` or ``vocabulary``, else the model's
            ``vocabulary`` attribute.
        verbose: print the report table on global rank 0.
        **recipe: the fields of :class:`~lightning_embinit.init.recipe.InitRecipe` (``source``, ``standardize``,
            ``match``, ``shuffle``, ``scale``, ``transforms``, ``trainable``, ``*_options``, ``cache_dir``).
    """

    def __init__(
        self,
        *,
        slots: SlotSelection = None,
        seed: int | None = None,
        tokens: TokenSpec | Mapping[str, TokenSpec] | None = None,
        verbose: bool = True,
        **recipe: Any,
    ) -> None:
        super().__init__()
        self.initializer = EmbeddingInitializer(InitRecipe(**recipe), slots=slots, seed=seed, tokens=tokens)
        self.verbose = verbose
        self.prepared: PreparedSlots | None = None
        self.seed_used: int | None = None
        self._pretrained_rows: dict[str, torch.Tensor] = {}
        self._masks: dict[str, Callable[[], torch.Tensor | None]] = {}
        self._built_at_setup: set[int] | None = None  # the tables built at setup; None: at on_fit_start

    summary_key = "init_report"
    """Studies record :meth:`summary` under this key (``PublishesSummary``)."""

    @override
    @property
    def state_key(self) -> str:
        return self._generate_state_key(slots=sorted(self.initializer.slot_recipes) or None)

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._built_at_setup = None
        if not self.begin_fit(pl_module, stage):
            return
        check_strategy(trainer.strategy)
        self._pretrained_rows, self._masks = {}, {}  # new ones: a restore into this fit fills them in place
        if tables_ready(pl_module, self.initializer.slot_names):
            self._initialize(pl_module, getattr(trainer, "datamodule", None), trainer)
            self.mark_done(pl_module)
            self._built_at_setup = {id(slot.embedding) for slot in self.prepared.slots.values()}

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Build the tables that ``configure_model`` created (Lightning calls no callback hook between it and the
        strategy's setup, which materializes, wraps and creates the optimizers; the writes are in place)."""
        if not self._active:
            return
        if self._built_at_setup is None:
            check_strategy(trainer.strategy, deferred=True)
            check_no_meta(pl_module, self.initializer.slot_names, trainer.strategy)
            self._initialize(pl_module, getattr(trainer, "datamodule", None), trainer, deferred=True)
            self.mark_done(pl_module)
        else:
            self._check_after_configure_model(pl_module)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Publish a fresh fit's report; pin frozen rows for optimizers whose weight decay would move them despite
        the gradient mask."""
        super().on_train_start(trainer, pl_module)
        for name, rows in self._masks.items():
            weight = self.prepared.slots[name].weight
            for optimizer in trainer.optimizers:
                pin_rows(optimizer, weight, rows)

    def initialize(self, module: torch.nn.Module, datamodule: Any = None) -> dict[str, dict[str, Any]]:
        """The callback's setting without a Trainer: prepare, build, write, freeze; returns (and keeps in
        ``reports``) the report rows ``fit`` would produce. ``datamodule`` supplies token strings and the training
        corpus as in ``fit``. Under ``torch.distributed`` every rank must call it: rank 0 builds, every rank writes."""
        self._initialize(module, datamodule)
        return self.reports

    def _initialize(
        self, module: torch.nn.Module, datamodule: Any, trainer: Trainer | None = None, *, deferred: bool = False
    ) -> None:
        """Prepare; build and write unless a checkpoint was already restored into this fit; freeze (by a gradient
        mask for tables that ``configure_model`` created under a DDP wrapper)."""
        self.prepared = self.initializer.prepare(module, datamodule=datamodule)
        if trainer is not None and getattr(trainer, "precision", None) == "bf16-true":
            bfloat16_tables_(self.prepared)
        for message in self.prepared.skipped.values():
            rank_zero_warn(f"EmbeddingInitCallback: {message}")
        if trainer is None or not self.resumed:
            broadcast = None if trainer is None else lambda value: trainer.strategy.broadcast(value, src=0)
            initialized = self.initializer.write(
                self.prepared, *self.initializer.build(self.prepared, broadcast_object=broadcast)
            )
            self.reports, self.seed_used = initialized.reports, initialized.seed
            self._pretrained_rows.clear()  # in place: the gradient masks read this dict
            self._pretrained_rows.update(initialized.pretrained_rows)
        by_mask = deferred and wrapped_for_ddp(trainer)
        self._masks, messages = self.initializer.freeze(self.prepared, self._pretrained_rows, by_mask=by_mask)
        for message in messages:
            rank_zero_warn(f"EmbeddingInitCallback: {message}")
        for name, recipe in self.prepared.recipes.items():
            if by_mask and recipe.trainable is False:
                rank_zero_info(
                    f"EmbeddingInitCallback: slot {name!r} came from configure_model and DDP already counts it as "
                    "trainable, so it is frozen by a gradient mask (zero gradient, values pinned) instead of "
                    "requires_grad=False"
                )

    def _check_after_configure_model(self, pl_module: LightningModule) -> None:
        """Tables built at setup: fail before training when configure_model added tables or sharded a partly frozen
        one."""
        for name, slot in self.prepared.slots.items():
            check_trainability(slot, self.prepared.recipes[name].trainable)
        if self.initializer.slot_recipes:
            return  # the tables were named
        try:
            found = discover_slots(pl_module)
        except ValueError:
            return
        built, left = self._built_at_setup, self.prepared.skipped  # left: frozen, or too small for the tokens
        if late := [name for name, slot in found.items() if id(slot.embedding) not in built and name not in left]:
            raise ValueError(
                f"EmbeddingInitCallback built {', '.join(self.prepared.slots)} at setup, but configure_model created "
                f"more embedding tables afterwards ({', '.join(late)}), which would train uninitialized: create every "
                "table in configure_model (all are then built at on_fit_start), or name the tables to build with "
                "slots=[...]"
            )

    @override
    def discard(self) -> None:
        self.reports, self.seed_used = {}, None
        self._pretrained_rows.clear()

    @override
    def publish(self, trainer: Trainer) -> None:
        if self.verbose:
            rank_zero_info(format_report(self.reports))
        for logger in trainer.loggers:
            logger.log_hyperparams(report_hyperparameters(self.reports))
            logger.log_metrics(report_metrics(self.reports), step=0)

    @override
    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        slots = self.prepared.slots if self.prepared is not None else {}
        names = {id(parameter): name for name, parameter in pl_module.named_parameters()}
        checkpoint[CHECKPOINT_KEY] = {
            "slots": {
                name: {
                    "parameter": names.get(id(slot.weight), ""),
                    "tokens": None if slot.tokens is None else list(slot.tokens),
                }
                for name, slot in slots.items()
            }
        }

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"reports": self.reports, "seed": self.seed_used, "pretrained_rows": dict(self._pretrained_rows)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.reports = dict(state_dict.get("reports", {}))
        self.seed_used = state_dict.get("seed")
        self._pretrained_rows.clear()  # in place: the gradient masks read this dict
        self._pretrained_rows.update(state_dict.get("pretrained_rows", {}))
