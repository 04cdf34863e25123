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
- the old tokenizer: ``old_tokenizer=``, else the model's ``tokenizer`` before the swap, else the checkpoint's
  (the package's systems keep theirs in their hyperparameters).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_embinit.callbacks.lifecycle import FitOnceCallback
from lightning_embinit.checks import check_choice
from lightning_embinit.init.distributed import run_on_rank_zero
from lightning_embinit.init.extension import freeze_old_rows, pin_old_rows
from lightning_embinit.init.extension.tables import output_layers, parameter_names
from lightning_embinit.init.sources.checkpoint_file import checked_file, load_checkpoint_file
from lightning_embinit.init.transplant import format_transplant_report, transplant_metrics
from lightning_embinit.init.transplant.state import transplant_state, write_state
from lightning_embinit.init.transplant.tokenizers import tokenizer_view
from lightning_embinit.init.transplant.transplant import (
    TransplantOptions,
    old_view,
    one_slot,
    plan_for_slot,
    write_plan,
)

TRAINABLE = (True, "new_rows")


class TokenTransplantCallback(FitOnceCallback):
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
        super().__init__()
        check_choice("trainable=", trainable, TRAINABLE)
        self.settings = TransplantOptions(**options)
        self.settings.check()
        if from_checkpoint is not None:
            from_checkpoint = checked_file(from_checkpoint, f"from_checkpoint={os.fspath(from_checkpoint)!r}")
        self.tokenizer, self.old_tokenizer, self.from_checkpoint = tokenizer, old_tokenizer, from_checkpoint
        self.slot, self.trainable, self.verbose = slot, trainable, verbose
        self.added: dict[str, torch.Tensor] = {}
        self._frozen: dict[str, list[torch.nn.Parameter]] = {}

    @override
    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_frozen": {}}

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not self.begin_fit(pl_module, stage):
            return
        report, added = self._swap(trainer, pl_module)
        self.reports = {report["slot"]: report}
        self.added.clear()
        self.added[report["slot"]] = added
        if self.trainable == "new_rows":
            if not bool(added.any()):
                raise ValueError("trainable='new_rows' trains only the built rows, but every new token was matched")
            self._frozen = freeze_old_rows(pl_module, {report["slot"]: lambda: ~self.added[report["slot"]]})
        self.mark_done(pl_module)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        for name, tensors in self._frozen.items():
            for optimizer in trainer.optimizers:
                pin_old_rows(optimizer, tensors, lambda name=name: ~self.added[name])

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

    def _swap(self, trainer: Trainer, pl_module: LightningModule) -> tuple[dict[str, Any], torch.Tensor]:
        """The swap (module docstring): (the report, the mask of built rows)."""
        new = self._new_tokenizer(trainer, pl_module)
        checkpoint = self._read_checkpoint(pl_module)
        old_tokenizer = self.old_tokenizer
        if isinstance(old_tokenizer, (str, os.PathLike)) and _keeps_package_tokenizer(pl_module):
            old_tokenizer = _package_tokenizer(old_tokenizer)
        if old_tokenizer is None and checkpoint is not None:
            old_tokenizer = _checkpoint_tokenizer(pl_module, checkpoint)
        target = one_slot(pl_module, self.slot)
        if checkpoint is not None and _built_over(pl_module, target, checkpoint, tokenizer_view(new).tokens):
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
                broadcast_object=lambda value: trainer.strategy.broadcast(value, src=0),
            )
            write_state(pl_module, state)
            return plan.report, plan.added.clone()
        if checkpoint is not None:
            pl_module.load_state_dict(checkpoint["state_dict"], strict=True)
        view, old = tokenizer_view(new), old_view(pl_module, target, old_tokenizer)
        layers = output_layers(pl_module, target)
        plan = run_on_rank_zero(
            lambda: plan_for_slot(pl_module, target, view, old, layers, self.settings),
            what="tokenizer transplant",
            broadcast_object=lambda value: trainer.strategy.broadcast(value, src=0),
        )
        write_plan(pl_module, target, plan, view, old)
        return plan.report, plan.added.clone()

    def _read_checkpoint(self, pl_module: LightningModule) -> dict[str, Any] | None:
        if self.from_checkpoint is None:
            return None
        checkpoint = load_checkpoint_file(self.from_checkpoint, what="from_checkpoint", weights_only=False)
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), Mapping):
            raise ValueError(f"from_checkpoint {self.from_checkpoint}: not a Lightning checkpoint (no state_dict)")
        return checkpoint


def _built_over(pl_module: LightningModule, target: Any, checkpoint: Mapping[str, Any], tokens: list[str]) -> bool:
    """Whether the model is built over the new vocabulary (``tokens``), not the checkpoint's: its table has a row per
    new token, and either the checkpoint's has another size or the model names the new tokens."""
    if target.num_embeddings != len(tokens):
        return False
    state = checkpoint["state_dict"]
    key = next((name for name in parameter_names(pl_module, target.weight) if name in state), None)
    named = target.tokens is not None and list(target.tokens) == list(tokens)
    return named or key is None or state[key].shape[0] != target.num_embeddings


def _keeps_package_tokenizer(pl_module: LightningModule) -> bool:
    """Whether the system keeps the package's ``TextTokenizer`` (it follows only one)."""
    from lightning_embinit.text.tokenization import TextTokenizer

    return isinstance(getattr(pl_module, "tokenizer", None), TextTokenizer)


def _package_tokenizer(spec: Any) -> Any:
    """The package's tokenizer of a directory (or a config, or one already)."""
    from lightning_embinit.text.tokenization import TextTokenizer, build_tokenizer

    if isinstance(spec, (str, os.PathLike)):
        return build_tokenizer(os.fspath(spec))
    return spec if isinstance(spec, TextTokenizer) or not isinstance(spec, Mapping) else build_tokenizer(spec)


def _checkpoint_tokenizer(pl_module: LightningModule, checkpoint: Mapping[str, Any]) -> Any:
    """The old tokenizer a system's checkpoint keeps (its ``tokenizer`` hyperparameter), else its token strings."""
    hparams = checkpoint.get("hyper_parameters") or {}
    if isinstance(hparams.get("tokenizer"), Mapping):
        return _package_tokenizer(hparams["tokenizer"])
    reader = getattr(type(pl_module), "checkpoint_vocabularies", None)
    found = reader(hparams) if callable(reader) else {}
    tokens = next((tokens for tokens, _ in found.values() if tokens is not None), None)
    if tokens is None:
        raise ValueError(
            "TokenTransplantCallback: the checkpoint keeps no tokenizer or vocabulary: pass old_tokenizer="
        )
    return tokens
