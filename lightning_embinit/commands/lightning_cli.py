"""The LightningCLI behind ``embinit fit|validate|test`` and ``embinit inspect --config``: :class:`EmbinitCLI`,
built over any LightningModule and LightningDataModule chosen by ``class_path`` (:func:`embinit_cli`).

Errors stay readable: the parser's (``--model.init_args.architecture.d_model abc``) end the command with one line
(:class:`EmbinitArgumentParser`), and :func:`error_summary` reduces jsonargparse's report of a refused class to its
reason, with long values (vocabularies, tokenizer configs) summarized by kind, size and first entries.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import operator
import os
import re
import sys
import tempfile
import typing
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jsonargparse import get_loader, set_loader
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from typing_extensions import override

from lightning_embinit.callbacks.lightning_internals import LightningInternalsWarning
from lightning_embinit.callbacks.progress import StepBudgetProgressBar
from lightning_embinit.checks import environment_flag
from lightning_embinit.init.sources import vector_cache
from lightning_embinit.init.sources.checkpoint_file import checked_file, load_checkpoint_file
from lightning_embinit.models.module import EmbinitModule, class_from_path
from lightning_embinit.vocabulary import Vocabulary
from lightning_embinit.yaml_files import load_yaml

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
    """LightningCLI with this package's defaults: the datamodule's vocabulary, tokenizers and label names go to the
    model (:data:`DATA_TO_MODEL_LINKS`); with ``--ckpt_path`` the checkpoint's hyperparameters configure the model
    as in LightningCLI, except :data:`CHECKPOINT_TO_DATA`, which go to the datamodule (the model gets the
    checkpoint's token ids and labels, not ones built from new text); a progress bar that knows the step budget.
    """

    _checkpoint_config_read = False
    _classes_ready = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """LightningCLI's; an exception raised before the subcommand runs (parsing, the checkpoint's settings,
        building the classes) carries ``CONFIG_ERROR = True``: the command reports it as bad input (exit 2)."""
        try:
            super().__init__(*args, **kwargs)
        except Exception as error:
            if not self._classes_ready:
                with contextlib.suppress(AttributeError):  # an exception type that takes no attributes stays unmarked
                    setattr(error, CONFIG_ERROR, True)
            raise

    @override
    def after_instantiate_classes(self) -> None:
        self._classes_ready = True
        super().after_instantiate_classes()

    @override
    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_core_arguments_to_parser(parser)
        ints_before_floats(parser)

    @override
    def add_arguments_to_parser(self, parser: Any) -> None:
        for source, target in DATA_TO_MODEL_LINKS:
            parser.link_arguments(f"data.{source}", f"model.init_args.{target}", apply_on="instantiate")

    def _checkpoint_path(self) -> tuple[str | None, str | None]:
        """(subcommand, its ``ckpt_path`` when that names an existing file)."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path and Path(ckpt_path).is_dir():
            checked_file(ckpt_path, f"--ckpt_path {ckpt_path}")
        return subcommand, ckpt_path if ckpt_path and Path(ckpt_path).is_file() else None

    @override
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

    @override
    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, with :class:`StepBudgetProgressBar` when no progress bar is configured (no "Epoch 0/-2")."""
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer_config = config.get("trainer") or {}
        callbacks = kwargs.get("callbacks", trainer_config.get("callbacks"))
        callbacks = list(callbacks or []) if isinstance(callbacks, (list, tuple, type(None))) else [callbacks]
        if (
            trainer_config.get("enable_progress_bar", True) is not False
            and importlib.util.find_spec("rich") is not None
            and not any(isinstance(callback, ProgressBar) for callback in callbacks)
        ):
            kwargs["callbacks"] = [*callbacks, StepBudgetProgressBar()]
        return super().instantiate_trainer(**kwargs)

    @override
    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Every (sub)command's parser is an :class:`EmbinitArgumentParser` (one-line errors) unless another
        ``parser_class`` was given."""
        if getattr(self, "parser_class", None) is LightningArgumentParser:
            self.parser_class = EmbinitArgumentParser
        return super().init_parser(**kwargs)

    @override
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
        if not hparams:
            return
        # the model's config: a package system's arguments (the groups as saved); any other model's extra keyword
        # arguments, as LightningCLI does
        model = self.config[subcommand].get("model")
        class_path = hparams.pop("_class_path", None) or (model.get("class_path") if model is not None else None)
        if class_path is not None:
            found = class_from_path(class_path)
            ours = isinstance(found, type) and issubclass(found, EmbinitModule)
            hparams = {"class_path": class_path, "init_args" if ours else "dict_kwargs": hparams}
        self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)


def ints_before_floats(parser: LightningArgumentParser) -> None:
    """Make ``parser`` try ``int`` before ``float`` for every ``--trainer.*`` argument whose type is a union of both.

    jsonargparse tries a union's types in their order, and Lightning's ``limit_val_batches: int | float | None``
    means one batch as ``1`` and every batch as ``1.0``. ``typing`` caches unions as equal whatever their order, so
    Lightning's ``Optional[Union[int, float]]`` can be the ``Union[float, int, None]`` another module built first
    (rich does, and a Ray Tune trial imports rich before Lightning): ``limit_val_batches: 1`` then parsed as 1.0,
    and a Ray trial validated on every batch. jsonargparse has no public way to set an argument's type after it is
    added, so this sets its ``ActionTypeHint``'s ``_typehint`` (to a ``types.UnionType``, which typing does not
    cache); where ``--trainer.limit_val_batches`` has no such attribute, a LightningInternalsWarning says so.
    """
    actions = parser._option_string_actions  # argparse's option → action table
    if not hasattr(actions.get("--trainer.limit_val_batches"), "_typehint"):
        warnings.warn(
            "EmbinitCLI: jsonargparse keeps --trainer.limit_val_batches's type elsewhere than in "
            "ActionTypeHint._typehint; an integer batch limit may parse as a float (1 → 1.0: every batch, not one)",
            LightningInternalsWarning,
            stacklevel=2,
        )
        return
    for option, action in actions.items():
        hint = getattr(action, "_typehint", None)
        members = (
            typing.get_args(hint) if option.startswith("--trainer.") and typing.get_origin(hint) is typing.Union else ()
        )
        if int in members and float in members and members.index(float) < members.index(int):
            ordered = [int if member is float else float if member is int else member for member in members]
            action._typehint = functools.reduce(operator.or_, ordered)


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


def _checkpoint_file(ckpt_path: str, name: str, value: Any) -> str:
    """The checkpoint's vocabulary (one token per line) or tokenizer (a saved config, which the datamodule reads as
    its tokenizer spec) as a file, written once per checkpoint version (cache, else a temporary directory)."""
    from lightning_embinit.text.tokenization import TextTokenizer

    key = vector_cache.file_key(ckpt_path, {})
    try:
        directory = vector_cache.writable_cache_dir("vocabularies")
    except vector_cache.CacheUnavailable as error:
        vector_cache.warn_cache_unavailable(error, f"the checkpoint's {name} is written to a temporary directory")
        directory = Path(tempfile.mkdtemp(prefix="embinit-vocabulary-"))
    path = directory / f"{key}.{name}{'.txt' if name == 'vocabulary' else '.json'}"
    if not path.exists():
        if name == "vocabulary":
            Vocabulary(value).write(path)
        else:
            TextTokenizer.from_config(value).save(path)
    return str(path)


CHECKPOINT_TO_DATA: dict[str, Callable[[str, str, Any], Any]] = {
    **{argument: _checkpoint_file for _, argument in DATA_TO_MODEL_LINKS},
    "label_names": lambda ckpt_path, name, value: list(value),
}
"""Model hyperparameters that go to the datamodule's argument of the same name with ``--ckpt_path``: a
checkpoint is evaluated on new text with its own token ids and labels. Vocabularies and tokenizers
travel as files (jsonargparse checks a list or dict in a config element by element, which takes
minutes for a 30k-token vocabulary)."""


# Readable errors ------------------------------------------------------------------------------------------------

LONG_VALUE, SHOWN_ENTRIES, ENTRY_WIDTH = 100, 3, 60
"""A bracketed value longer than LONG_VALUE characters is summarized: its kind, size and first entries
(cut at width)."""
CONFIG_ERROR = "embinit_config_error"
"""Attribute set (True) on an exception :class:`EmbinitCLI` raised before its subcommand ran: a config problem."""
DEBUG_VARIABLE = "EMBINIT_DEBUG"
"""``EMBINIT_DEBUG=1``: the commands re-raise their errors (a traceback) instead of printing one line."""

_CLOSING = {"(": ")", "[": "]", "{": "}"}
_STRUCTURE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value")
_NONE_ALTERNATIVE = "Expected a <class 'NoneType'>"
_CONTEXT = re.compile(r"""Parser key "([^"]+)":|Problem with given class_path '([^']+)':""")


def _skip(text: str, start: int) -> int:
    """The index after the bracketed span or quoted string that starts at ``text[start]``; -1 if it is not closed."""
    expected: list[str] = []
    quote, index = None, start
    while index < len(text):
        char = text[index]
        if quote is not None:
            index += char == "\\"  # an escaped character
            if char == quote:
                quote = None
                if not expected:
                    return index + 1
        elif char in "'\"":
            quote = char
        elif char in _CLOSING:
            expected.append(_CLOSING[char])
        elif char in ")]}":
            if not expected or char != expected.pop():
                return -1
            if not expected:
                return index + 1
        index += 1
    return -1


def _entries(inner: str) -> list[str]:
    """A bracket's content split at its top-level commas."""
    entries, start, index = [], 0, 0
    while index < len(inner):
        if inner[index] in "([{'\"":
            index = max(_skip(inner, index), index + 1)
            continue
        if inner[index] == ",":
            entries.append(inner[start:index].strip())
            start = index + 1
        index += 1
    return entries + ([inner[start:].strip()] if inner[start:].strip() else [])


def _summary(span: str, called: bool) -> str:
    """A long bracketed value as its kind, size and first entries (``[list of 14,261: '<pad>', '<unk>', …]``)."""
    entries = _entries(span[1:-1])
    is_dict = span[0] == "{" and entries and re.match(r"""('[^']*'|"[^"]*"|[\w.]+)\s*:""", entries[0])
    if called or is_dict:
        size = f"{len(entries):,} arguments" if called else f"dict of {len(entries):,} keys"
    else:
        size = f"{ {'[': 'list', '(': 'tuple'}.get(span[0], 'set') } of {len(entries):,}"
    shown = [summarize_values(entry) for entry in entries[:SHOWN_ENTRIES]]
    shown = [entry if len(entry) <= ENTRY_WIDTH else entry[: ENTRY_WIDTH - 1] + "…" for entry in shown]
    return f"{span[0]}{size}: {', '.join(shown)}{', …' if len(entries) > SHOWN_ENTRIES else ''}{span[-1]}"


def summarize_values(text: str, limit: int = LONG_VALUE) -> str:
    """``text`` with each bracketed value (a list, dict, tuple or ``Namespace(...)`` as Python prints it) longer
    than ``limit`` characters replaced by its kind, its size and its first entries; shorter ones are kept whole."""
    out, index = [], 0
    while index < len(text):
        end = _skip(text, index) if text[index] in _CLOSING else -1
        if end < 0:
            out.append(text[index])
            index += 1
            continue
        called = index > 0 and (text[index - 1].isalnum() or text[index - 1] in "_.")
        out.append(_summary(text[index:end], called) if end - index > limit else text[index:end])
        index = end
    return "".join(out)


def _reasons(text: str) -> list[str]:
    """The reasons in a jsonargparse report, each behind its keys and class paths (``model: <class>: key: reason``);
    the union's structure, the ``None`` alternative and the refused value itself are left out."""
    context: list[tuple[int, str]] = []
    reasons: list[str] = []
    for line in filter(str.strip, text.splitlines()):
        indent = len(line) - len(line.lstrip())
        while context and context[-1][0] >= indent:
            context.pop()
        item = line.strip()[2:] if line.strip().startswith("- ") else line.strip()
        found = _CONTEXT.fullmatch(item)
        if found:
            context.append((indent, found.group(1) or found.group(2)))
        elif not item.startswith(_STRUCTURE) and item != _NONE_ALTERNATIVE:
            reasons.append(": ".join([*(name for _, name in context), item]))
    return list(dict.fromkeys(reasons))


def error_summary(error: BaseException | str) -> str:
    """An error on one line: jsonargparse's report of a refused value reduced to its reasons (which key, which class,
    why), long values summarized (:func:`summarize_values`); any other message with its lines joined."""
    text = str(error)
    reasons = _reasons(text)
    line = re.sub(r'Parser key "([^"]+)":', r"\1:", " ".join(("; ".join(reasons) if reasons else text).split()))
    refused = re.search(r"^Given value: Namespace\(class_path='([\w.]+)'", text, re.MULTILINE)
    if reasons and refused and refused.group(1) not in line:
        line = f"{refused.group(1)}: {line}"
    return summarize_values(line) or type(error).__name__


def print_error(command: str, error: BaseException | str, hint: str = "") -> None:
    """``<command>: error: <error_summary>`` on one line of stderr (``hint`` appended)."""
    print(f"{command}: error: {error_summary(error)}{hint}", file=sys.stderr, flush=True)


def debug_requested() -> bool:
    """Whether :data:`DEBUG_VARIABLE` asks for tracebacks."""
    return environment_flag(DEBUG_VARIABLE)


CONFIG_MODE = "embinit_yaml"
"""The jsonargparse parser mode of :class:`EmbinitArgumentParser`: jsonargparse's YAML, a key given twice refused."""
set_loader(
    CONFIG_MODE, lambda text, path="": load_yaml(text, path or "<string>", get_loader("yaml")), (yaml.YAMLError,)
)


class EmbinitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, whose refusals end the command with one line of stderr (``embinit fit: error: ...``,
    :func:`error_summary`) and status 2, not with the usage and the whole refused value. A parser made with
    ``exit_on_error=False`` raises as jsonargparse's does; ``JSONARGPARSE_DEBUG`` keeps jsonargparse's report.
    Its config files (:data:`CONFIG_MODE`) may not give a key twice, and one that is not text is named. Options are
    never abbreviated (``allow_abbrev=False``, which jsonargparse's subcommand parsers inherit): ``--trainer.max_step``
    is refused, not read as ``--trainer.max_steps``."""

    def __init__(self, *args: Any, parser_mode: str = CONFIG_MODE, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, parser_mode=parser_mode, allow_abbrev=allow_abbrev, **kwargs)

    def parse_path(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().parse_path(path, *args, **kwargs)
        except UnicodeDecodeError as error:
            raise ValueError(
                f"config file {path} is not a text file (binary?): byte {error.start} is not UTF-8; give a YAML file"
            ) from None

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            super().error(message, ex)
        prog = str((getattr(ex, "subcommand_parser", None) or self).prog).replace(" [options]", "")
        print_error(prog, message, f" (`{prog} --help` lists the options)")
        sys.exit(2)
