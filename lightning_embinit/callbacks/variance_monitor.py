"""``EmbeddingVarianceMonitor``: the token table against the positional encoding while training ([K];
docs/concepts.md#absorption).

A thin adapter over :mod:`lightning_embinit.diagnostics.variance` and :mod:`~lightning_embinit.diagnostics.absorption`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_embinit.callbacks.loggers import figure_loggers, log_figure, log_scalars
from lightning_embinit.callbacks.strategies import tables_ready
from lightning_embinit.callbacks.summary import MONITORS
from lightning_embinit.checks import check_int
from lightning_embinit.diagnostics.absorption import (
    POSITIONAL_THRESHOLD,
    SEMANTIC_THRESHOLD,
    check_threshold,
    drowning,
    slot_absorption,
)
from lightning_embinit.diagnostics.figures import value_histogram
from lightning_embinit.diagnostics.variance import no_positions_note, positional_matrix, slot_statistics, token_rows
from lightning_embinit.init.freezing import check_not_meta, measured_slots
from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.sharding import whole_slot


class EmbeddingVarianceMonitor(Callback):
    """Log ``{prefix}/{slot}/{key}`` for each slot at train start, every ``every_n_steps`` steps and at train end
    (docs/diagnostics.md).

    Keys: ``mean``, ``std``, ``min``, ``max`` of the table (non-padding rows), the same with a ``scaled_`` prefix
    for s · X, ``pe_std``, ``pe_min``, ``pe_max``, ``pe_range`` of the positional encoding P, ``ratio`` =
    σ(s · X)/σ(P), and the absorption measures ``semantic_retention``, ``positional_retention`` and
    ``neighbour_survival`` (:func:`~lightning_embinit.diagnostics.absorption.slot_absorption`: ``sample_rows``
    rows at positions below ``max_position``, k = ``neighbours``, a private generator seeded with ``seed``). s and
    P are the model's own (a recognized family's, :mod:`lightning_embinit.init.families`, or the slot's); a model
    that adds no positions to the token vectors (rotary, ALiBi, relative-bias) logs
    ``no_additive_positional_encoding`` = 1 instead of the positional keys, and says so once per fit. Without
    ``slots``, a module holding several recognized models leaves out those none of whose parameters trains (a frozen
    teacher beside a student: its table never changes), as ``EmbeddingInitCallback`` leaves a frozen table alone.

    Computed on global rank zero (a sharded table is first gathered on every rank) without touching the weights,
    the train/eval mode or the global RNG. A warning (once) names the countermeasures when a retention falls below
    ``positional_threshold`` or ``semantic_threshold`` (:func:`~lightning_embinit.diagnostics.absorption.drowning`);
    with ``figures``, a histogram of s · X against P goes to TensorBoard loggers at start and end. ``start``,
    ``latest`` and the warning start afresh at every ``fit`` and are checkpointed; :meth:`summary` holds the latest
    values and those at the start (``..._at_start``).
    """

    summary_key = MONITORS

    def __init__(
        self,
        slots: Sequence[str] | None = None,
        every_n_steps: int | None = 500,
        sample_rows: int = 1024,
        neighbours: int = 5,
        max_position: int | None = None,
        positional_threshold: float = POSITIONAL_THRESHOLD,
        semantic_threshold: float = SEMANTIC_THRESHOLD,
        seed: int = 0,
        figures: bool = True,
        warn: bool = True,
        prefix: str = "embvar",
    ) -> None:
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps must be ≥ 1 or None (start and end only), got {every_n_steps}")
        check_int("sample_rows", sample_rows, minimum=2)
        check_int("neighbours", neighbours, minimum=1)
        check_int("max_position", max_position, minimum=1, optional=True)
        check_threshold("positional_threshold", positional_threshold)
        check_threshold("semantic_threshold", semantic_threshold)
        self.slot_names = None if slots is None else ([slots] if isinstance(slots, str) else list(slots))
        self.every_n_steps = every_n_steps
        self.sample_rows = sample_rows
        self.neighbours = neighbours
        self.max_position = max_position
        self.positional_threshold = positional_threshold
        self.semantic_threshold = semantic_threshold
        self.seed = seed
        self.figures = figures
        self.warn = warn
        self.prefix = prefix
        self.start: dict[str, dict[str, Any]] | None = None
        self.latest: dict[str, dict[str, Any]] | None = None
        self.latest_step: int | None = None
        self._warned = False
        self._told: set[str] = set()

    @override
    @property
    def state_key(self) -> str:
        return self._generate_state_key(slots=self.slot_names, prefix=self.prefix)

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            # unknown slot names fail now, or at train start for those configure_model makes
            tables_ready(pl_module, self.slot_names)
            # a new fit starts a new record; Lightning restores a resumed run's after setup (load_state_dict)
            self.start, self.latest, self.latest_step, self._warned = None, None, None, False
            self._told = set()

    @torch.no_grad()
    def measure(self, pl_module: torch.nn.Module) -> dict[str, dict[str, Any]]:
        """The numbers for every selected slot of ``pl_module`` now (every rank must call it when a table
        is sharded)."""
        return {name: self._measure_slot(slot) for name, slot in self._whole_slots(pl_module).items()}

    def _whole_slots(self, pl_module: torch.nn.Module) -> dict[str, EmbeddingSlot]:
        """The selected slots, a sharded table gathered whole (a collective: every rank calls this at the
        same point). Without ``slots``, a recognized model none of whose parameters trains (a frozen teacher beside a
        student) is left out, and said once per fit; a table on the meta device is refused."""
        slots, left = select_slots(pl_module, self.slot_names), []
        if self.slot_names is None:
            slots, left = measured_slots(pl_module, slots)
        if left:
            if "reference models" not in self._told:
                self._told.add("reference models")
                rank_zero_info(
                    f"EmbeddingVarianceMonitor: {', '.join(left)} belong to a model none of whose parameters trains "
                    "(a frozen teacher?): not measured; name them in slots=[...] to measure them"
                )
        for slot in slots.values():
            check_not_meta(slot, "measure")
        return {name: whole_slot(slot) for name, slot in slots.items()}

    def _measure_slot(self, slot: EmbeddingSlot) -> dict[str, Any]:
        positional = positional_matrix(slot)
        values = slot_statistics(slot, positional)
        measured = slot_absorption(
            slot,
            sample_rows=self.sample_rows,
            neighbours=self.neighbours,
            seed=self.seed,
            max_position=self.max_position,
            positional=positional,
        )
        for key in ("semantic_retention", "positional_retention", "neighbour_survival"):
            values[key] = None if measured is None else getattr(measured, key)
        if positional is None:
            values["no_additive_positional_encoding"] = 1.0
            if slot.name not in self._told:
                self._told.add(slot.name)
                rank_zero_info(
                    f"EmbeddingVarianceMonitor: slot {slot.name!r}: {no_positions_note(slot)}; the positional "
                    "numbers and absorption are not measured"
                )
        if self.warn and not self._warned and measured is not None:
            found = drowning(
                measured, positional_threshold=self.positional_threshold, semantic_threshold=self.semantic_threshold
            )
            if found is not None:
                self._warned = True
                rank_zero_warn(
                    f"EmbeddingVarianceMonitor: slot {slot.name!r}: {found[0]}; σ(s·X) = {values['scaled_std']:.4g}, "
                    f"σ(P) = {values['pe_std']:.4g}, ratio {values['ratio']:.4g} (absorption, [K]). "
                    f"Countermeasures: {found[1]}."
                )
        return values

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule, when: str) -> None:
        slots = self._whole_slots(pl_module)  # on every rank: gathering a sharded table is a collective
        if not trainer.is_global_zero:
            return
        step = trainer.global_step
        measured = {name: self._measure_slot(slot) for name, slot in slots.items()}
        self.latest, self.latest_step = measured, step
        if when == "start" and self.start is None:
            self.start = measured
        log_scalars(trainer, self._scalars(measured), step)
        if self.figures and when in ("start", "end") and figure_loggers(trainer):
            for name, slot in slots.items():
                self._log_histogram(trainer, slot, f"{self.prefix}/{name}/histogram_{when}", step)

    def _scalars(self, measured: dict[str, dict[str, Any]], suffix: str = "") -> dict[str, float]:
        """The numbers of ``measured`` as ``{prefix}/{slot}/{key}{suffix}`` (a value not measured, None, left out)."""
        return {
            f"{self.prefix}/{slot}/{key}{suffix}": float(value)
            for slot, values in measured.items()
            for key, value in values.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }

    def summary(self) -> dict[str, float]:
        """The latest values, named as logged, then those at the start of training (``..._at_start``)."""
        return {**self._scalars(self.latest or {}), **self._scalars(self.start or {}, "_at_start")}

    def _log_histogram(self, trainer: L.Trainer, slot: EmbeddingSlot, tag: str, step: int) -> None:
        positional = positional_matrix(slot)
        if positional is not None and self.max_position is not None:
            positional = positional[: self.max_position]
        scaled = token_rows(slot).to(torch.float32) * float(slot.input_scale)
        title = f"slot {slot.name!r}: s·X (s = {float(slot.input_scale):.3g}) against P, step {step}"
        log_figure(trainer, tag, value_histogram(scaled, positional, title=title), step)

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module, "start")

    @override
    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if self.every_n_steps is None or step == 0 or step % self.every_n_steps or step == self.latest_step:
            return
        self._record(trainer, pl_module, "step")

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module, "end")

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"start": self.start, "latest": self.latest, "latest_step": self.latest_step, "warned": self._warned}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.start = state_dict.get("start")
        self.latest = state_dict.get("latest")
        self.latest_step = state_dict.get("latest_step")
        self._warned = bool(state_dict.get("warned", False))
