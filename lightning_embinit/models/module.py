"""What every Lightning system of the package shares (:class:`LightningSystem`; a model's vocabulary from a tokenizer
or a size, :func:`resolve_tokenizer`), and the base of those over the package's own architectures
(:class:`EmbinitModule`): ``self.model``, a plain ``nn.Module`` of
:mod:`lightning_embinit.architectures`, and the two typed settings groups ``architecture`` and ``optimizer``
(:class:`~lightning_embinit.models.optimization.OptimizerConfig`), kept grouped as mappings in the hyperparameters (so
``type(model)(**model.hparams)`` builds the same model and loggers show ``architecture/d_model``).

Lightning evaluates under :func:`torch.inference_mode`, where a torchmetrics state becomes an inference tensor that a
later ``fit`` cannot update in place: :func:`refresh_metric_states` swaps such states for normal copies at the start
of every stage, so metrics survive any order of ``validate``/``test``/``predict``/``fit``.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, fields, replace
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn
from torchmetrics import Metric
from torchmetrics.aggregation import MeanMetric
from typing_extensions import override

from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.sources.checkpoint_file import (
    CLASS_KEY,
    UnsafeCheckpointError,
    load_checkpoint_file,
    saved_class,
)
from lightning_embinit.models.metrics import PerplexityFromLoss
from lightning_embinit.models.optimization import OptimizerConfig, configure_adam
from lightning_embinit.models.presets import preset_arguments
from lightning_embinit.text.tokenization import PretrainedTokenizer, TextTokenizer
from lightning_embinit.vocabulary import SPECIAL_TOKENS, Vocabulary


def class_from_path(class_path: str) -> Any:
    """The object ``pkg.module.Name`` (a bare ``Name``: in :mod:`lightning_embinit.models`) names, or None."""
    module_name, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name or "lightning_embinit.models"), name, None)
    except (ImportError, ValueError):
        return None


def check_checkpoint_class(cls: type, path: str) -> tuple[str, bool]:
    """Check the checkpoint file at ``path`` and that ``cls``, a class derived from it or its base saved it
    (:func:`saved_class`). Returns who saved it, for messages, and whether that is unverified (no class recorded, or
    one that does not import)."""
    try:
        checkpoint = load_checkpoint_file(path)
    except UnsafeCheckpointError:
        return "an unknown class", False  # not readable without trusting it; Lightning loads it as its own options say
    recorded = saved_class(checkpoint)
    if recorded is None:
        hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, Mapping) else None
        held = ", ".join(map(str, hparams)) if isinstance(hparams, Mapping) and hparams else "none"
        return f"a class it does not record; its hyper_parameters: {held}", True
    saver = class_from_path(recorded)
    if not isinstance(saver, type):
        return f"{recorded}, as it records, which does not import here", True
    if not (issubclass(saver, cls) or issubclass(cls, saver)):
        raise ValueError(
            f"checkpoint {path} was saved by {saver.__name__}, not by {cls.__name__}: load it with "
            f"{saver.__name__}.load_from_checkpoint({str(path)!r})"
        )
    return saver.__name__, False


def group_config(config_type: type, value: Any, group: str, default: Any) -> Any:
    """``value`` as a ``config_type``: an instance as is; a mapping of its fields applied to ``default`` (the
    system's default for the group, as the CLI applies a YAML group)."""
    if isinstance(value, config_type):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{group} must be a {config_type.__name__} or a mapping of its fields, got {type(value).__name__}"
        )
    names = [field.name for field in fields(config_type)]
    if unknown := sorted(set(value) - set(names)):
        raise ValueError(f"{group}: {config_type.__name__} has no field(s) {unknown}; fields: {', '.join(names)}")
    return replace(default, **value) if isinstance(default, config_type) else config_type(**value)


def refresh_metric_states(module: nn.Module) -> int:
    """Replace every metric state that is an inference tensor by a normal copy (made with inference mode off, so
    safe inside ``torch.inference_mode``); returns how many were replaced."""
    replaced = 0
    with torch.inference_mode(False):
        for metric in (metric for metric in module.modules() if isinstance(metric, Metric)):
            for name, state in metric.metric_state.items():
                states = state if isinstance(state, list) else [state]
                if any(isinstance(s, torch.Tensor) and s.is_inference() for s in states):
                    fresh = [s.clone() if isinstance(s, torch.Tensor) else s for s in states]
                    setattr(metric, name, fresh if isinstance(state, list) else fresh[0])
                    replaced += 1
    return replaced


def resolve_tokenizer(
    tokenizer: Any,
    vocab_size: int | None,
    *,
    option: str = "tokenizer",
    size_option: str = "vocab_size",
    min_size: int = 2,
) -> tuple[Any, int]:
    """(``TextTokenizer`` or None, table size) of a model's arguments: a tokenizer (or its ``to_config()`` dict), with
    which a size given next to it must agree, or a size ≥ ``min_size``; ``option``/``size_option`` name them."""
    if tokenizer is None:
        if vocab_size is None or vocab_size < min_size:
            raise ValueError(
                f"give {option} (a tokenizer config, TextTokenizer.to_config(); the CLI links the "
                f"datamodule's) or {size_option} ≥ {min_size}; got {size_option}={vocab_size}"
            )
        return None, vocab_size
    if not isinstance(tokenizer, TextTokenizer):
        tokenizer = TextTokenizer.from_config(tokenizer)
    if vocab_size is not None and vocab_size != len(tokenizer):
        raise ValueError(f"{size_option}={vocab_size} disagrees with the {option}'s {len(tokenizer)} tokens")
    return tokenizer, len(tokenizer)


def side_vocabulary(side: str, tokenizer: Any, vocab_size: int | None) -> tuple[TextTokenizer | None, Vocabulary]:
    """One side of a translation model: :func:`resolve_tokenizer` and the vocabulary (pad 0, unk 1, bos 2, eos 3
    without a tokenizer)."""
    tokenizer, size = resolve_tokenizer(
        tokenizer,
        vocab_size,
        option=f"{side}_tokenizer",
        size_option=f"{side}_vocab_size",
        min_size=len(SPECIAL_TOKENS) + 1,
    )
    return tokenizer, Vocabulary.numbered(size) if tokenizer is None else tokenizer.vocabulary


def followed_tokenizer(
    current: TextTokenizer | None, tokens: list[str], given: Any, *, option: str
) -> TextTokenizer | None:
    """The tokenizer of a side whose vocabulary became ``tokens``: ``given`` (its tokens must be ``tokens``), else a
    word-level ``current`` rebuilt over them (a sub-word one cannot be: ValueError); None without a tokenizer."""
    if given is not None:
        if isinstance(given, TextTokenizer):
            tokenizer = given
        elif isinstance(given, Mapping):
            tokenizer = TextTokenizer.from_config(given)
        else:  # a transformers tokenizer object, copied: wrapping it adds the roles it lacks
            name = getattr(given, "name_or_path", None) or type(given).__name__
            tokenizer = PretrainedTokenizer.from_hf(copy.deepcopy(given), name)
        if list(tokenizer.tokens) != list(tokens):
            raise ValueError(
                f"{option}: the given tokenizer's {len(tokenizer)} tokens are not the new vocabulary's {len(tokens)}"
            )
        return tokenizer
    if current is None:
        return None
    if current.kind != "word":
        raise ValueError(
            f"{option} is a {current.kind} tokenizer, which a token list cannot rebuild: pass the new tokenizer "
            "itself (extend_vocabulary(model, new_tokenizer), or a datamodule that has it)"
        )
    config = {**current.to_config(), "tokens": list(tokens)}
    return TextTokenizer.from_config(config)


def saved_tokenizer(config: Any) -> tuple[list[str] | None, TextTokenizer | None]:
    """(token strings, tokenizer) of a tokenizer config in a checkpoint's hyperparameters; (None, None) for None."""
    tokenizer = None if config is None else TextTokenizer.from_config(config)
    return (None if tokenizer is None else list(tokenizer.tokens), tokenizer)


def _clips(gradient_clip_val: float | None) -> bool:
    """Whether a ``gradient_clip_val`` asks for clipping (None: not set; 0, as in Lightning, clips nothing)."""
    return gradient_clip_val is not None and gradient_clip_val > 0


class LightningSystem(L.LightningModule):
    """What the package's Lightning systems share whatever network they train: token-loss metrics logged under one
    set of names, stage-safe metric states, tokenizers kept in the checkpoint, checkpoints that name their class,
    Adam per :attr:`optimizer_config`. The steps are a language model's ``_step(batch, stage)``; the classifier and
    translation systems override them."""

    optimizer_config: OptimizerConfig

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "val")

    @override
    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "test")

    def _set_tokenizer(self, name: str, tokenizer: TextTokenizer | None) -> None:
        """``self.<name>`` and its config in the hyperparameters: in the checkpoint, but not sent to loggers (a config
        is long, and a datamodule's tokenizer spec of the same name would clash with it there)."""
        setattr(self, name, tokenizer)
        self.hparams[name] = None if tokenizer is None else tokenizer.to_config()

    def _add_token_loss_metrics(self) -> None:
        """The metrics of :meth:`_log_token_loss`: the token-weighted loss per epoch, and perplexity."""
        self.train_loss_epoch = MeanMetric()
        self.val_loss, self.val_ppl = MeanMetric(), PerplexityFromLoss()
        self.test_loss, self.test_ppl = MeanMetric(), PerplexityFromLoss()

    def _log_token_loss(self, stage: str, loss: torch.Tensor, count: torch.Tensor, batch_size: int) -> None:
        """Log a mean loss over ``count`` tokens: ``train_loss`` (per step), ``train_loss_epoch``, ``val_``/``test_``
        ``loss`` and ``ppl`` (per epoch, token-weighted)."""
        value = loss.detach().float()
        if stage == "train":
            self.train_loss_epoch.update(value, weight=count)
            self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=batch_size)
            self.log("train_loss_epoch", self.train_loss_epoch, on_step=False, on_epoch=True, batch_size=batch_size)
            return
        for name in ("loss", "ppl"):
            metric = getattr(self, f"{stage}_{name}")
            metric.update(value, weight=count)
            show = stage == "val" and name == "loss"
            self.log(f"{stage}_{name}", metric, prog_bar=show, on_epoch=True, batch_size=batch_size)

    @override
    def on_fit_start(self) -> None:
        refresh_metric_states(self)

    on_train_start = on_validation_start = on_test_start = on_predict_start = on_fit_start

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CLASS_KEY] = f"{type(self).__module__}.{type(self).__qualname__}"

    @override
    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
        """Lightning's ``load_from_checkpoint`` after checking a local file first (:func:`check_checkpoint_class`):
        a damaged file, another class's checkpoint, or one that does not build or fit this class is a ValueError
        naming the file and the class that saved it (or its hyperparameters, when it does not tell)."""
        local = isinstance(checkpoint_path, (str, os.PathLike)) and "://" not in os.fspath(checkpoint_path)
        saver, unverified = (
            check_checkpoint_class(cls, os.fspath(checkpoint_path)) if local else ("an unknown class", False)
        )
        try:
            return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)
        except (RuntimeError, TypeError, ValueError) as error:
            if not ("Error(s) in loading state_dict" in str(error) if isinstance(error, RuntimeError) else unverified):
                raise
            hint = "; if another class saved it, load it with that class's load_from_checkpoint" if unverified else ""
            raise ValueError(
                f"checkpoint {checkpoint_path} does not fit {cls.__name__} (saved by {saver}{hint}): "
                f"{' '.join(str(error).split())[:400]}"
            ) from None

    @override
    def configure_optimizers(self) -> Any:
        """Adam per :attr:`optimizer_config` (:func:`~lightning_embinit.models.optimization.configure_adam`); torch's
        fused kernel except where gradients are clipped under a loss scale (the precision plugin's ``scaler``:
        ``16-mixed``): a fused step unscales the gradients itself, after clipping would have seen them scaled."""
        try:
            trainer = self.trainer
        except RuntimeError:  # called outside a Trainer (Lightning raises when none is attached)
            trainer = None
        scaled_clipping = (
            trainer is not None
            and getattr(trainer.precision_plugin, "scaler", None) is not None
            and _clips(trainer.gradient_clip_val)
        )
        return configure_adam(self.parameters(), self.optimizer_config, fused=not scaled_clipping)

    @override
    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Lightning's clipping, except a fused optimizer's under ``MixedPrecision`` without a loss scale
        (``bf16-mixed``): that plugin refuses to clip for any optimizer that unscales gradients itself, although there
        is no scale to undo, so those gradients are clipped here as Lightning's plain precision would (by norm or by
        value). Other plugins (FSDP's, DeepSpeed's: sharded gradients) clip as Lightning does."""
        plugin = self.trainer.precision_plugin
        unscaled_mixed = isinstance(plugin, MixedPrecision) and plugin.scaler is None
        if not (_clips(gradient_clip_val) and unscaled_mixed and optimizer.defaults.get("fused")):
            return super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if (gradient_clip_algorithm or "norm").lower() == "value":
            torch.nn.utils.clip_grad_value_(parameters, gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(parameters, gradient_clip_val)


class EmbinitModule(LightningSystem):
    """Base of the systems over the package's own architectures (module docstring): ``self.model``, its settings
    groups, slots and vocabulary changes. Subclasses set :attr:`architecture_config`, call :meth:`_configure` in
    ``__init__``, and call ``super()`` in the ``on_*_start`` hooks they override."""

    architecture_config: ClassVar[type]
    """The config type of the ``architecture`` group."""

    model: nn.Module

    def _configure(self, architecture: Any, optimizer: Any, *, own: Mapping[str, Any]) -> Any:
        """The architecture config (returned) and :attr:`optimizer_config` from the two groups (:func:`group_config`
        with the system's defaults); saves ``own`` (its other arguments) and both groups as the hyperparameters."""
        defaults = inspect.signature(type(self)).parameters
        config = group_config(self.architecture_config, architecture, "architecture", defaults["architecture"].default)
        optimizer = group_config(OptimizerConfig, optimizer, "optimizer", defaults["optimizer"].default)
        self.optimizer_config = optimizer.resolved(config.d_model)
        self.save_hyperparameters({**own, "architecture": asdict(config), "optimizer": asdict(self.optimizer_config)})
        return config

    @override
    def forward(self, *inputs: Any, **options: Any) -> Any:
        """The architecture's forward: ids → logits (:attr:`model`'s ``forward``)."""
        return self.model(*inputs, **options)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """The architecture's slots, with tied modules named by their path in this system (``model.head``)."""
        return {
            name: replace(slot, tied_modules=tuple(f"model.{module}" for module in slot.tied_modules))
            for name, slot in self.model.embedding_slots().items()
        }

    def vocabulary_outputs(self) -> dict[str, tuple[str, ...]]:
        """Slot → the untied output layers whose rows follow its vocabulary, by their path in this system."""
        return {
            slot: tuple(f"model.{path}" for path in paths) for slot, paths in self.model.vocabulary_outputs().items()
        }

    def prepare_vocabulary_change(self, change: Any) -> Callable[[], None]:
        """Check that this system can follow ``change`` (a :class:`~lightning_embinit.init.extension.VocabularyChange`
        that :func:`~lightning_embinit.init.extension.extend_vocabulary` writes) and return what to run after the
        write: the architecture's vocabulary, then ``_follow_vocabulary``'s tokenizers and hyperparameters."""
        vocab = Vocabulary.from_tokens(change.tokens, change.special_tokens or None)
        follow = self._follow_vocabulary(change, vocab)

        def commit() -> None:
            self.model.remap_vocabulary(change.slot, vocab, change.new_id)
            follow()

        return commit

    def _follow_vocabulary(self, change: Any, vocab: Vocabulary) -> Callable[[], None]:
        """A system's own part of :meth:`prepare_vocabulary_change` (its tokenizers and hyperparameters)."""
        return lambda: None

    def _follow_tokenizers(self, change: Any, names: Sequence[str]) -> Callable[[], None]:
        """:meth:`_follow_vocabulary` for the tokenizer attributes ``names`` (:func:`followed_tokenizer`, checked
        now) and their ``…vocab_size`` hyperparameters when given."""
        tokens, given = change.tokens, change.tokenizer
        tokenizers = {name: followed_tokenizer(getattr(self, name), tokens, given, option=name) for name in names}

        def follow() -> None:
            for name, tokenizer in tokenizers.items():
                self._set_tokenizer(name, tokenizer)
                size = name.replace("tokenizer", "vocab_size")
                if self.hparams.get(size) is not None:
                    self.hparams[size] = len(tokens)

        return follow

    @classmethod
    def checkpoint_vocabularies(cls, hparams: Mapping[str, Any]) -> dict[str, tuple[list[str] | None, Any]]:
        """Slot → (token strings by id, tokenizer or None) of a checkpoint of this system, from its hyperparameters."""
        return {}

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> EmbinitModule:
        """The preset ``name`` with ``overrides`` (:func:`~lightning_embinit.models.presets.preset_arguments`): a
        ``cls`` when it subclasses the preset's model (a user's variant), else the preset's model if a ``cls``."""
        target, arguments = preset_arguments(name, **overrides)
        if issubclass(cls, target):
            return cls(**arguments)
        if issubclass(target, cls):
            return target(**arguments)
        raise ValueError(f"preset {name!r} builds a {target.__name__}; call {target.__name__}.from_preset({name!r})")
