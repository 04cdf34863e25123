"""``TokenTransplantCallback``: fine-tune a trained model with a new tokenizer, swapped at ``setup(stage="fit")``.

The sibling of :class:`~lightning_embinit.callbacks.vocabulary_extension.VocabularyExtensionCallback`, with its
lifecycle (:mod:`.lifecycle`): the swap runs once per model when ``fit`` sets up, built on global rank 0 and
broadcast; a resumed run gets its tables from Lightning's restore. The rows come from
:func:`~lightning_embinit.init.transplant.transplant_tokenizer` (docs/transplant.md). Where things come from:

- the new tokenizer: ``tokenizer=`` (an object or a directory), else the datamodule's ``tokenizer``;
- the trained weights: ``from_checkpoint`` (weights only), else the model's own. With a checkpoint, the model may be
  built over the new vocabulary (the CLI builds it over the datamodule's tokenizer): the checkpoint's tensors are
  rebuilt to its shapes and written tensor by tensor (a model sharded in ``configure_model`` takes them as they are);
  or over the old one, swapped in place;
- the old tokenizer: ``old_tokenizer=``, else the checkpoint's (the package's systems keep theirs in their
  hyperparameters, the fine-tunes of these callbacks their token strings), else the model's ``tokenizer`` before the
  swap, else the token strings the model's table names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_embinit.callbacks.lifecycle import AddedRowsCallback
from lightning_embinit.init.distributed import run_on_rank_zero
from lightning_embinit.init.extension.checkpoint import state_tables
from lightning_embinit.init.extension.tables import SlotTables, output_layers, read_tables
from lightning_embinit.init.transplant import format_transplant_report, transplant_metrics
from lightning_embinit.init.transplant.state import (
    built_over_new,
    checkpoint_old_tokenizer,
    transplant_state,
    write_state,
)
from lightning_embinit.init.transplant.tokenizers import tokenizer_view
from lightning_embinit.init.transplant.transplant import (
    TransplantOptions,
    check_not_fully_sharded,
    gathered,
    old_view,
    one_slot,
    plan_for_slot,
    write_plan,
)


class TokenTransplantCallback(AddedRowsCallback):
    """Swap a trained model's tokenizer at ``setup(stage="fit")`` (module docstring).

    Args:
        tokenizer: the new tokenizer (default: the datamodule's ``tokenizer``).
        old_tokenizer: the tokenizer the model was trained with (default: the model's own, else the checkpoint's).
        from_checkpoint: the trained model's Lightning checkpoint (None: the model's own weights are the trained ones).
        slot: the token table (needed when the model has several).
        trainable: ``True``, or ``"new_rows"``: only the built rows of the table and its output layers learn (the
            matched rows are masked and, under weight decay, pinned after every step).
        verbose: print the report on global rank 0.
        options: :func:`~lightning_embinit.init.transplant.transplant_tokenizer`'s (``method``, ``fallback``,
            ``match``, ``descriptions``, ``donor``, ``texts``, ``auxiliary``, ``standardize``, ``bias``, ``seed``).
    """

    summary_key = "token_transplant"
    """Studies record :meth:`summary` under this key (``PublishesSummary``)."""

    def __init__(
        self,
        tokenizer: Any = None,
        old_tokenizer: Any = None,
        from_checkpoint: str | None = None,
        slot: str | None = None,
        trainable: bool | str = True,
        verbose: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(from_checkpoint, trainable)
        self.settings = TransplantOptions(**options)
        self.settings.check()
        self.tokenizer, self.old_tokenizer, self.slot, self.verbose = tokenizer, old_tokenizer, slot, verbose

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not self.begin_fit(pl_module, stage):
            return
        report, added = self._swap(trainer, pl_module)
        self.reports = {report["slot"]: report}
        self.keep_added(pl_module, {report["slot"]: added})
        self.mark_done(pl_module)

    @override
    def publish(self, trainer: Trainer) -> None:
        for report in self.reports.values():
            if self.verbose:
                rank_zero_info(format_transplant_report(report))
            for logger in trainer.loggers:
                logger.log_metrics(transplant_metrics(report), step=0)

    def _new_tokenizer(self, trainer: Trainer, pl_module: LightningModule) -> Any:
        tokenizer = self.tokenizer
        if tokenizer is None:
            tokenizer = getattr(getattr(trainer, "datamodule", None), "tokenizer", None)
        if tokenizer is None:
            raise ValueError(
                "TokenTransplantCallback: no new tokenizer: pass tokenizer= (an object or a directory), or use a "
                "datamodule with a `tokenizer`"
            )
        return _package_tokenizer(tokenizer) if _keeps_package_tokenizer(pl_module) else tokenizer

    def _old_tokenizer(self, pl_module: LightningModule, target: Any, checkpoint: Mapping[str, Any] | None) -> Any:
        old_tokenizer = self.old_tokenizer
        if isinstance(old_tokenizer, (str, os.PathLike)) and _keeps_package_tokenizer(pl_module):
            old_tokenizer = _package_tokenizer(old_tokenizer)
        if old_tokenizer is None and checkpoint is not None:
            old_tokenizer = checkpoint_old_tokenizer(pl_module, target, checkpoint)
            if isinstance(old_tokenizer, Mapping):  # the package's tokenizer, by its config
                old_tokenizer = _package_tokenizer(old_tokenizer)
        return old_tokenizer

    def _swap(self, trainer: Trainer, pl_module: LightningModule) -> tuple[dict[str, Any], torch.Tensor]:
        """The swap (module docstring): (the report, the mask of built rows). Every refusal comes before anything is
        written; a sharded table is gathered on every rank (a collective), the plan built on global rank 0."""
        new = self._new_tokenizer(trainer, pl_module)
        checkpoint = self.read_checkpoint(pl_module)
        target = one_slot(pl_module, self.slot)
        old_tokenizer = self._old_tokenizer(pl_module, target, checkpoint)
        broadcast = lambda value: trainer.strategy.broadcast(value, src=0)  # noqa: E731
        nothing_new = "every token of the new tokenizer was matched to an old one"
        if checkpoint is not None and built_over_new(pl_module, target, checkpoint["state_dict"], _tokens(new)):
            state, plan = run_on_rank_zero(
                lambda: transplant_state(
                    pl_module,
                    checkpoint["state_dict"],
                    new,
                    old_tokenizer=old_tokenizer,
                    slot=self.slot,
                    **vars(self.settings),
                ),
                what="tokenizer transplant",
                broadcast_object=broadcast,
            )
            self.check_trainable({target.name: plan.added}, nothing_new)
            write_state(pl_module, state)
            return plan.report, plan.added.clone()
        check_not_fully_sharded(pl_module, target)
        view, old = tokenizer_view(new), old_view(pl_module, target, old_tokenizer)
        layers = output_layers(pl_module, target)
        tables = _trained_tables(pl_module, target, layers, checkpoint, len(view.tokens))
        plan = run_on_rank_zero(
            lambda: plan_for_slot(
                pl_module, target, view, old, layers, self.settings, tables=tables, old_padding=target.padding_idx
            ),
            what="tokenizer transplant",
            broadcast_object=broadcast,
        )
        self.check_trainable({target.name: plan.added}, nothing_new)
        if checkpoint is not None:
            pl_module.load_state_dict(checkpoint["state_dict"], strict=True)
        write_plan(pl_module, target, plan, view, old)
        return plan.report, plan.added.clone()


def _trained_tables(
    pl_module: LightningModule, target: Any, layers: tuple[str, ...], checkpoint: Mapping[str, Any] | None, new: int
) -> SlotTables:
    """The trained tensors of a swap in place: the checkpoint's (before the model holds them; its table must be the
    model's size), else the model's own, whole (a sharded one gathered on every rank: a collective)."""
    if checkpoint is None:
        return gathered(read_tables(pl_module, target, layers))
    tables = state_tables(checkpoint["state_dict"], pl_module, target, layers)
    if (rows := tables.embedding.shape[0]) != target.num_embeddings:
        raise ValueError(
            f"slot {target.name!r}: the model's table has {target.num_embeddings} rows, the checkpoint's {rows} and "
            f"the new tokenizer {new} tokens: build the model over the old or the new vocabulary; nothing was changed"
        )
    return tables


def _tokens(tokenizer: Any) -> list[str]:
    return tokenizer_view(tokenizer).tokens


def _keeps_package_tokenizer(pl_module: LightningModule) -> bool:
    """Whether the system keeps the package's ``TextTokenizer`` (it follows only one)."""
    from lightning_embinit.text.tokenization import TextTokenizer

    return isinstance(getattr(pl_module, "tokenizer", None), TextTokenizer)


def _package_tokenizer(spec: Any) -> Any:
    """The package's tokenizer of a directory, a saved ``.json`` or ``hf:<name>`` (or of a config, or one already)."""
    from lightning_embinit.text.tokenization import TextTokenizer, build_tokenizer

    if isinstance(spec, (str, os.PathLike)):
        return build_tokenizer(os.fspath(spec))
    return spec if isinstance(spec, TextTokenizer) or not isinstance(spec, Mapping) else build_tokenizer(spec)
