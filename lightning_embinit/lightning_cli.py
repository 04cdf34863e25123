"""The LightningCLI behind ``embinit fit|validate|test`` and ``embinit inspect --config``.

:class:`EmbinitCLI` links the datamodule's vocabulary, tokenizers and label names to the model's
arguments, hands a checkpoint's own ones to the datamodule with ``--ckpt_path``, and adds a progress
bar that knows the step budget. :func:`embinit_cli` builds it over any LightningModule and
LightningDataModule chosen by ``class_path``, as both commands do.
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml
from jsonargparse import get_loader, set_loader
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from lightning_embinit.callbacks.lightning_internals import LightningInternalsWarning
from lightning_embinit.callbacks.progress import StepBudgetProgressBar
from lightning_embinit.data.vocabulary import Vocabulary
from lightning_embinit.init.sources.checkpoint_file import load_checkpoint_file
from lightning_embinit.init.sources.vector_cache import CacheUnavailable, warn_cache_unavailable, writable_cache_dir
from lightning_embinit.models.module import EmbinitModule, class_from_path


DATA_TO_MODEL_LINKS = (
    ("vocabulary", "vocabulary"),
    ("src_tokenizer_config", "src_tokenizer"),
    ("tgt_tokenizer_config", "tgt_tokenizer"),
    ("tokenizer_config", "tokenizer"),
    ("label_names", "label_names"),
)
"""Datamodule attribute → model argument, linked when both exist (vocabularies and tokenizers are
known before the model is built, so its tables have their rows and token strings at setup)."""


class EmbinitCLI(LightningCLI):
    """LightningCLI with this package's defaults.

    The datamodule's vocabulary, tokenizers and label names (:data:`DATA_TO_MODEL_LINKS`: token
    strings by id built from the training text, tokenizer configs) are passed to the model's
    arguments of those names when both exist, so the embedding tables have their rows (and their
    token strings) before ``EmbeddingInitCallback`` runs at setup; models or datamodules without
    them are left alone.

    With ``--ckpt_path``, the checkpoint's hyperparameters configure the model as in LightningCLI,
    except its vocabulary, tokenizers and label names (:data:`CHECKPOINT_TO_DATA`): those go to the
    datamodule (when it takes them), so the links hand the model the checkpoint's token ids and
    labels rather than ones built from new text.
    """

    _checkpoint_config_read = False

    def add_arguments_to_parser(self, parser: Any) -> None:
        for source, target in DATA_TO_MODEL_LINKS:
            parser.link_arguments(f"data.{source}", f"model.init_args.{target}", apply_on="instantiate")

    def _checkpoint_path(self) -> tuple[str | None, str | None]:
        """(subcommand, its ``ckpt_path`` when that names an existing file)."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        return subcommand, ckpt_path if ckpt_path and Path(ckpt_path).is_file() else None

    def before_instantiate_classes(self) -> None:
        if self._checkpoint_path()[1] and not self._checkpoint_config_read:
            # LightningCLI calls its private _parse_ckpt_path, which this class overrides; a release that
            # renamed it would silently build the vocabulary from new text instead of the checkpoint's
            warnings.warn(
                "EmbinitCLI: LightningCLI no longer calls _parse_ckpt_path, so the checkpoint's vocabulary was not "
                "passed to the datamodule; token ids may differ from the checkpoint's. Pass "
                "--data.init_args.vocabulary=<the checkpoint's vocabulary file> explicitly.",
                LightningInternalsWarning,
                stacklevel=2,
            )

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, with :class:`StepBudgetProgressBar` when no progress bar is configured (no "Epoch 0/-2")."""
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer_config = config.get("trainer") or {}
        callbacks = kwargs.get("callbacks", trainer_config.get("callbacks"))
        callbacks = list(callbacks or []) if isinstance(callbacks, (list, tuple, type(None))) else [callbacks]
        if trainer_config.get("enable_progress_bar", True) is not False and importlib.util.find_spec("rich") is not None and not any(
            isinstance(callback, ProgressBar) for callback in callbacks
        ):
            kwargs["callbacks"] = [*callbacks, StepBudgetProgressBar()]
        return super().instantiate_trainer(**kwargs)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Every (sub)command's parser reads YAML with :data:`PARSER_MODE`: 0.1 configs' flat model settings load."""
        kwargs.setdefault("parser_mode", PARSER_MODE)
        return super().init_parser(**kwargs)

    def _parse_ckpt_path(self) -> None:
        self._checkpoint_config_read = True
        subcommand, ckpt_path = self._checkpoint_path()
        if ckpt_path is None:
            return
        checkpoint = load_checkpoint_file(ckpt_path, what="--ckpt_path")
        if not isinstance(checkpoint, Mapping):
            raise ValueError(f"--ckpt_path {ckpt_path} holds a {type(checkpoint).__name__}, not a Lightning checkpoint")
        hparams = dict(checkpoint.get("hyper_parameters", {}))
        hparams.pop("_instantiator", None)
        data = self.config[subcommand].get("data")
        data_arguments = data.get("init_args") if data is not None else None
        for name, write in CHECKPOINT_TO_DATA.items():
            value = hparams.pop(name, None)
            if value is None or data_arguments is None or name not in data_arguments:
                continue
            if name == "vocabulary" and data_arguments.vocabulary is not None:
                continue  # a vocabulary given on purpose stands
            data_arguments[name] = write(ckpt_path, name, value)
        if hparams:
            self.config = self.parser.parse_object({subcommand: {"model": self._model_arguments(subcommand, hparams)}}, self.config)

    def _model_arguments(self, subcommand: str, hparams: dict[str, Any]) -> dict[str, Any]:
        """The checkpoint's hyperparameters as the model's config: a package system's flat settings back in their
        ``architecture``/``optimizer`` groups; any other model's as extra keyword arguments, as LightningCLI does."""
        model = self.config[subcommand].get("model")
        class_path = hparams.pop("_class_path", None) or (model.get("class_path") if model is not None else None)
        if class_path is None:
            return hparams
        model_class = package_system(class_path)
        if model_class is not None:
            return {"class_path": class_path, "init_args": model_class.grouped_hyperparameters(hparams)}
        return {"class_path": class_path, "dict_kwargs": hparams}


def package_system(class_path: str) -> type[EmbinitModule] | None:
    """The package's Lightning system a ``class_path`` names (``TiedEmbeddingLM`` or a dotted path), else None."""
    found = class_from_path(class_path)
    return found if isinstance(found, type) and issubclass(found, EmbinitModule) else None


def group_model_settings(value: Any) -> Any:
    """A loaded config with a package system's flat settings under ``init_args`` (0.1.0.dev0 configs:
    ``d_model: 256`` next to ``beam_size``) moved into their ``architecture``/``optimizer`` groups; a whole config
    (``model:`` key) or a model's own (``class_path``/``init_args``). Anything else is returned as it is."""
    if not isinstance(value, dict):
        return value
    for model in (value.get("model"), value):
        if isinstance(model, dict) and isinstance(model.get("class_path"), str) and isinstance(model.get("init_args"), dict):
            system = package_system(model["class_path"])
            if system is not None:
                model["init_args"] = system.grouped_hyperparameters(model["init_args"])
    return value


def _load_yaml_with_model_groups(text: str) -> Any:
    return group_model_settings(get_loader("yaml")(text))


PARSER_MODE = "embinit_yaml"
"""jsonargparse's YAML loader followed by :func:`group_model_settings` (registered with ``jsonargparse.set_loader``)."""
set_loader(PARSER_MODE, _load_yaml_with_model_groups, (yaml.YAMLError,))


def embinit_cli(args: Any = None, **options: Any) -> EmbinitCLI:
    """:class:`EmbinitCLI` over any LightningModule and LightningDataModule (``class_path`` in the config);
    ``options`` go to LightningCLI (``run=False``, ``save_config_callback=None``, ...)."""
    return EmbinitCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        auto_configure_optimizers=False,
        **options,
    )


def _checkpoint_file(ckpt_path: str, name: str, suffix: str) -> Path:
    """Where a checkpoint's ``name`` is written once per checkpoint version (cache, else a temporary directory)."""
    stat = Path(ckpt_path).stat()
    key = hashlib.sha1(f"{Path(ckpt_path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    try:
        directory = writable_cache_dir("vocabularies")
    except CacheUnavailable as error:
        warn_cache_unavailable(error, f"the checkpoint's {name} is written to a temporary directory")
        directory = Path(tempfile.mkdtemp(prefix="embinit-vocabulary-"))
    return directory / f"{key}.{name}{suffix}"


def _vocabulary_file(ckpt_path: str, name: str, vocabulary: list[str]) -> str:
    """The checkpoint's vocabulary as a one-token-per-line file."""
    path = _checkpoint_file(ckpt_path, name, ".txt")
    if not path.exists():
        Vocabulary(vocabulary).write(path)
    return str(path)


def _tokenizer_file(ckpt_path: str, name: str, config: dict[str, Any]) -> str:
    """The checkpoint's tokenizer as a saved config, which the datamodule reads as its tokenizer spec."""
    from lightning_embinit.data.tokenization import TextTokenizer

    path = _checkpoint_file(ckpt_path, name, ".json")
    if not path.exists():
        TextTokenizer.from_config(config).save(path)
    return str(path)


CHECKPOINT_TO_DATA: dict[str, Callable[[str, str, Any], Any]] = {
    "vocabulary": _vocabulary_file,
    "src_tokenizer": _tokenizer_file,
    "tgt_tokenizer": _tokenizer_file,
    "tokenizer": _tokenizer_file,
    "label_names": lambda ckpt_path, name, value: list(value),
}
"""Model hyperparameters that go to the datamodule's argument of the same name with ``--ckpt_path``: a
checkpoint is evaluated on new text with its own token ids and labels. Vocabularies and tokenizers
travel as files (jsonargparse checks a list or dict in a config element by element, which takes
minutes for a 30k-token vocabulary)."""
