"""The one initialization engine: prepare, build, write, freeze, report (torch only).

:func:`initialize_embeddings` runs every step on a module; ``EmbeddingInitCallback`` runs the same
:class:`EmbeddingInitializer`, deciding only *when* (inside ``fit``) and how ranks share the build. Every matrix is
built and checked (shape, finiteness, coverage) before any weight is written, so a failure leaves the model as it was.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lightning_embinit.init.distributed import build_on_rank_zero
from lightning_embinit.init.freezing import (
    FrozenRows,
    apply_trainability,
    check_not_meta,
    check_trainability,
    tables_to_write,
)
from lightning_embinit.init.host import ANY_EMBEDDING, EmbeddingSlot, select_slots
from lightning_embinit.init.pipeline import BuiltSlot, build_slot, slot_report, write_slot
from lightning_embinit.init.recipe import InitRecipe
from lightning_embinit.init.tokens import (
    TableTooSmall,
    TokenSpec,
    check_token_option,
    corpus_for_slot,
    missing_tokens_error,
    resolve_slot_tokens,
)

Corpus = Callable[[], Iterable[Sequence[str]]]
SlotCorpus = Callable[[str], Iterable[Sequence[str]]]
"""Slot name → that slot's tokenized training text."""
SlotSelection = Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None
"""Which tables: None (all), slot names or dotted module paths, or a mapping slot → recipe overrides."""


@dataclass
class PreparedSlots:
    """The tables one initialization writes, with their token strings, checked recipes and training text."""

    slots: dict[str, EmbeddingSlot]
    recipes: dict[str, InitRecipe]
    token_origins: dict[str, str | None] = field(default_factory=dict)
    corpora: dict[str, Corpus | None] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    """Tables of an unrecognized model left as they are, with the reason: too small for the token list."""


@dataclass
class Initialized:
    """What writing left behind: the report per slot, the rows a pre-trained source filled, and the seed."""

    reports: dict[str, dict[str, Any]]
    pretrained_rows: dict[str, torch.Tensor]
    seed: int


class EmbeddingInitializer:
    """How a model's embedding tables are born: a recipe (per slot, optionally), the token strings and a seed.

    Args:
        recipe: the source, transforms and trainability of every selected slot (:class:`InitRecipe`).
        slots: which tables: ``None`` (all), slot names or dotted module paths, or a mapping slot → overrides of
            the recipe's fields (a different source per slot, say).
        seed: the generator seed; drawn at random (and reported) when ``None``.
        tokens: token strings for tables whose model does not name them: a list (by id), a one-token-per-line file,
            a Hugging Face tokenizer name or directory, or a mapping slot → one of these
            (:mod:`lightning_embinit.init.tokens`).
    """

    def __init__(
        self,
        recipe: InitRecipe | None = None,
        *,
        slots: SlotSelection = None,
        seed: int | None = None,
        tokens: TokenSpec | Mapping[str, TokenSpec] | None = None,
    ) -> None:
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        check_token_option(tokens)
        self.recipe = recipe or InitRecipe()
        if isinstance(slots, Mapping):
            self.slot_recipes = {
                name: self.recipe.updated(overrides, where=f"options for slot {name!r}")
                for name, overrides in slots.items()
            }
        else:
            self.slot_recipes = dict.fromkeys([slots] if isinstance(slots, str) else slots or (), self.recipe)
        for name, slot_recipe in (self.slot_recipes or {"": self.recipe}).items():
            slot_recipe.check(slot=name)
        self.seed = seed
        self.tokens = tokens

    @property
    def slot_names(self) -> list[str] | None:
        """The slots asked for by name, or None for every slot of the model."""
        return list(self.slot_recipes) or None

    def prepare(self, module: nn.Module, *, datamodule: Any = None, corpus: SlotCorpus | None = None) -> PreparedSlots:
        """The selected slots with their token strings (:func:`~lightning_embinit.init.tokens.resolve_slot_tokens`),
        each recipe checked against its table; no weight is touched. Without ``slots=``, a frozen table is left alone
        and tables of several recognized models are refused (:func:`~lightning_embinit.init.freezing.tables_to_write`).
        ``corpus(slot)`` (else the datamodule's ``training_corpus``) is the slot's tokenized training text."""
        prepared = PreparedSlots({}, {})
        found = select_slots(module, self.slot_names)
        if self.slot_names is None:
            found, frozen = tables_to_write(module, found)
            prepared.skipped = {name: FROZEN_NOTE.format(name=name) for name in frozen}
        too_small: dict[str, TableTooSmall] = {}
        for name, slot in found.items():
            check_not_meta(slot, "write")
            try:
                slot, prepared.token_origins[name] = resolve_slot_tokens(
                    slot, given=self.tokens, datamodule=datamodule, model=module
                )
            except TableTooSmall as error:
                if self.slot_names is not None or slot.family != ANY_EMBEDDING:
                    raise
                too_small[name] = error
                prepared.skipped[name] = f"{error.problem}: left as it is (a position or token-type table?)"
                continue
            recipe = self.slot_recipes.get(name, self.recipe)
            source = recipe.validate(slot.num_embeddings, slot.embedding_dim, slot=name)
            if source.is_pretrained and slot.tokens is None:
                raise missing_tokens_error(name, source.name, slot.family)
            check_trainability(slot, recipe.trainable)
            prepared.slots[name], prepared.recipes[name] = slot, recipe
            prepared.corpora[name] = (lambda n=name: corpus(n)) if corpus else corpus_for_slot(datamodule, name)
        if not prepared.slots:
            raise _no_table_fits(module, found, too_small)
        return prepared

    def build(
        self, prepared: PreparedSlots, *, broadcast_object: Callable[[Any], Any] | None = None
    ) -> tuple[dict[str, BuiltSlot], int]:
        """Every slot's checked matrix and the seed; under ``torch.distributed`` (every rank calls this) built on rank 0
        and broadcast (``broadcast_object``: how a picklable object travels)."""

        def build_here() -> tuple[dict[str, BuiltSlot], int]:
            seed = self.seed if self.seed is not None else secrets.randbelow(2**31)
            generator = torch.Generator().manual_seed(seed)
            built = {
                name: build_slot(slot, prepared.recipes[name], generator=generator, corpus=prepared.corpora.get(name))
                for name, slot in prepared.slots.items()
            }
            return built, seed

        return build_on_rank_zero(prepared.slots, build_here, broadcast_object=broadcast_object)

    def write(self, prepared: PreparedSlots, built: Mapping[str, BuiltSlot], seed: int) -> Initialized:
        """Write every built matrix into its table (zeroing the padding row) and report how each was born."""
        rows, reports = {}, {}
        for name, slot in prepared.slots.items():
            write_slot(slot, built[name].matrix.weight)
            rows[name] = built[name].matrix.pretrained_rows.clone()
            reports[name] = slot_report(slot, built[name], prepared.recipes[name], seed=seed)
            reports[name]["tokens_from"] = prepared.token_origins.get(name)
        return Initialized(reports, rows, seed)

    def freeze(
        self, prepared: PreparedSlots, pretrained_rows: Mapping[str, torch.Tensor], *, by_mask: bool = False
    ) -> tuple[dict[str, FrozenRows], list[str]]:
        """Freeze each table as its recipe says (:func:`~lightning_embinit.init.freezing.apply_trainability`;
        ``pretrained_rows`` is read at every backward). Returns the masks whose rows a weight-decaying optimizer must
        pin (:func:`~lightning_embinit.init.freezing.pin_rows`) and the warnings to show."""
        masks: dict[str, FrozenRows] = {}
        messages = []
        for name, slot in prepared.slots.items():
            trainable = prepared.recipes[name].trainable
            rows = lambda name=name: pretrained_rows.get(name)  # noqa: E731
            if (mask := apply_trainability(slot, trainable, rows, by_mask=by_mask)) is not None:
                masks[name] = mask
            if trainable is False and slot.is_tied:
                messages.append(
                    f"slot {name!r} is frozen, and so is the output layer tied to it "
                    f"({', '.join(slot.tied_modules)}): they share one weight. Untie the head to train it alone."
                )
        return masks, messages

    def run(self, module: nn.Module, *, datamodule: Any = None, corpus: SlotCorpus | None = None) -> Initialized:
        """Every step on ``module``, warning when a tied head freezes with its table."""
        prepared = self.prepare(module, datamodule=datamodule, corpus=corpus)
        initialized = self.write(prepared, *self.build(prepared))
        for message in [*prepared.skipped.values(), *self.freeze(prepared, initialized.pretrained_rows)[1]]:
            warnings.warn(message, stacklevel=3)
        return initialized


FROZEN_NOTE = (
    "slot {name!r} is frozen (requires_grad=False): left as it is (a pre-trained teacher's table?); a frozen table is "
    "written only when named in slots=[...]"
)


def _no_table_fits(
    module: nn.Module, found: Mapping[str, EmbeddingSlot], too_small: Mapping[str, TableTooSmall]
) -> ValueError:
    """The error when every table of an unrecognized model is shorter than its token list: the largest is most
    likely the token table, not resized after tokens were added to the tokenizer."""
    largest = max(too_small, key=lambda name: found[name].num_embeddings)
    problems = "; ".join(error.problem for error in too_small.values())
    rows = found[largest].num_embeddings
    return ValueError(
        f"{type(module).__name__} has no table that fits the token list: {problems}. If {largest!r} ({rows} rows) is "
        f"the token table, {too_small[largest].advice}; or name the token table with slots=[...]"
    )


def initialize_embeddings(
    module: nn.Module,
    recipe: InitRecipe | None = None,
    *,
    slots: SlotSelection = None,
    seed: int = 0,
    tokens: TokenSpec | Mapping[str, TokenSpec] | None = None,
    corpus: SlotCorpus | None = None,
    **options: Any,
) -> dict[str, dict[str, Any]]:
    """Initialize ``module``'s embedding tables without Lightning; returns the report per slot.

    ``options`` are :class:`InitRecipe` fields (``source="bert"``, ...); ``slots`` and ``tokens`` as
    :class:`EmbeddingInitializer`'s; ``corpus(slot)`` returns the slot's tokenized training text (for
    ``word2vec-trainset`` and coverage by frequency). With ``trainable="pretrained_rows"`` and an optimizer that decays
    weights, also call :func:`~lightning_embinit.init.freezing.pin_rows` on it (the callback does this itself). Under
    ``torch.distributed`` every rank must call this: rank 0 builds, every rank writes (a ``DTensor`` table, its slice).
    """
    base = (recipe or InitRecipe()).updated(options, where="options")
    initializer = EmbeddingInitializer(base, slots=slots, seed=seed, tokens=tokens)
    return initializer.run(module, corpus=corpus).reports
