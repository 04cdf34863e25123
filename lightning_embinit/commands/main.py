"""The ``embinit`` command: a LightningCLI over any LightningModule and LightningDataModule (``embinit fit --config
cfg.yaml``, ``embinit validate|test ...``; :mod:`lightning_embinit.commands.lightning_cli`), and the commands of
:data:`OTHER_COMMANDS`: ``inspect`` (:mod:`lightning_embinit.commands.inspect`), ``sweep|report``
(:mod:`lightning_embinit.commands.study`), ``translate|generate|classify`` (:mod:`lightning_embinit.commands.use`);
and ``predict`` (:mod:`lightning_embinit.commands.predict`: LightningCLI's ``predict``, its predictions written to
``--output``).

Exit status: 0 on success; 2 when the arguments or the config are refused (one line on stderr:
``embinit fit: error: ...``); 1 when the run itself fails (one line naming the exception; ``EMBINIT_DEBUG=1``
re-raises it with its traceback).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from lightning_embinit import __version__
from lightning_embinit.host_memory import keep_freed_memory_for_training
from lightning_embinit.quiet import quiet_lightning_noise

_FROM_LIGHTNING_CLI = ("CHECKPOINT_TO_DATA", "DATA_TO_MODEL_LINKS", "EmbinitCLI", "embinit_cli")

__all__ = [*_FROM_LIGHTNING_CLI, "main"]
OTHER_COMMANDS = {
    "inspect": ("lightning_embinit.commands.inspect", "main"),
    "sweep": ("lightning_embinit.commands.study", "sweep_main"),
    "report": ("lightning_embinit.commands.study", "report_main"),
    "translate": ("lightning_embinit.commands.use", "translate_main"),
    "generate": ("lightning_embinit.commands.use", "generate_main"),
    "classify": ("lightning_embinit.commands.use", "classify_main"),
    "transplant": ("lightning_embinit.commands.transplant", "transplant_main"),
}
"""The commands beside LightningCLI's: the module and function that run each, imported on use."""
MORE_COMMANDS = (
    "embinit also has: inspect (check an embedding start without training), sweep (run a study's "
    "trials), report (a study's tables and figures), translate, generate and classify (a trained model on text), "
    "transplant (a trained model with a new tokenizer); `embinit COMMAND --help` for each."
)
COMMANDS = ("fit", "validate", "test", "predict", *OTHER_COMMANDS)
LIGHTNING_COMMANDS = {
    "fit": "train a model (the config's trainer, model and data)",
    "validate": "one pass over the validation set (of a checkpoint with --ckpt_path)",
    "test": "one pass over the test set",
    "predict": "the model's predictions on the data, written to --output FILE",
}
"""LightningCLI's subcommands, described without importing Lightning (``embinit --help`` stays fast)."""


def __getattr__(name: str) -> Any:
    """The LightningCLI names, imported on first use (``embinit sweep`` starts its trial server before
    Lightning loads)."""
    if name in _FROM_LIGHTNING_CLI:
        from lightning_embinit.commands import lightning_cli

        return getattr(lightning_cli, name)
    raise AttributeError(f"module 'lightning_embinit.commands.main' has no attribute {name!r}")


def main(args: Any = None) -> int:
    """Entry point of the ``embinit`` console script and ``python -m lightning_embinit``: the exit status.
    :data:`OTHER_COMMANDS` run in their own modules, the others are LightningCLI's (:func:`lightning_main`)."""
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or not (argv[0] in COMMANDS or argv[0].startswith("-")):
        named = f"unknown command {argv[0]!r}; " if argv else ""
        print(
            f"embinit: error: {named}name a command: {', '.join(COMMANDS[:-1])} or {COMMANDS[-1]} "
            "(`embinit --help` lists them)",
            file=sys.stderr,
        )
        return 2
    if argv[:1] in (["--version"], ["-V"]):
        print(f"embinit (lightning_embinit) {__version__}")
        return 0
    if argv[0] in ("-h", "--help"):  # answered without importing Lightning (`embinit fit --help` lists a config's)
        print(
            f"usage: embinit [-h] [-V] {{{','.join(LIGHTNING_COMMANDS)}}} [--config CONFIG] ...\n"
            f"       embinit {{{','.join(OTHER_COMMANDS)}}} ...\n\ncommands:"
        )
        for command, description in LIGHTNING_COMMANDS.items():
            print(f"  {command:<10}{description}")
        print(f"\n{MORE_COMMANDS}\n`embinit fit --help` lists the config's options; -V, --version prints the version.")
        return 0
    with quiet_lightning_noise():
        if argv[0] == "predict":
            from lightning_embinit.commands.predict import predict_main

            return predict_main(argv[1:], lightning_main)
        if argv[0] in OTHER_COMMANDS:
            module, function = OTHER_COMMANDS[argv[0]]
            return getattr(importlib.import_module(module), function)(argv[1:])
        return lightning_main(args)


EVALUATING = ("validate", "test", "predict")
"""LightningCLI's subcommands that evaluate a checkpoint without training."""


def lightning_main(args: Sequence[str] | None = None, **options: Any) -> int:
    """``embinit fit|validate|test|predict ...`` (``args``; None: ``sys.argv``): 0 when the subcommand ran, 2 when
    the arguments or the config were refused, 1 when the run failed; each failure is one line on stderr.
    ``options`` go to :func:`~lightning_embinit.commands.lightning_cli.embinit_cli` (``parser_kwargs`` merged)."""
    from lightning_embinit.commands.lightning_cli import CONFIG_ERROR, debug_requested, embinit_cli, print_error

    argv = sys.argv[1:] if args is None else list(args)
    command = " ".join(["embinit", *[a for a in argv if not a.startswith("-")][:1]])
    keep_freed_memory_for_training()
    try:
        parser_kwargs = {"prog": "embinit", **options.pop("parser_kwargs", {})}
        with warnings.catch_warnings():
            if command.split()[-1] in EVALUATING:
                # ModelCheckpoint, restored from --ckpt_path into this run's new log directory, warns that its dirpath
                # changed and its best-k record is not reloaded: an evaluation writes no checkpoint, so it is moot
                warnings.filterwarnings("ignore", message="The dirpath has changed from")
            embinit_cli(args, save_config_kwargs={"overwrite": True}, parser_kwargs=parser_kwargs, **options)
    except Exception as error:
        if debug_requested():
            raise
        if getattr(error, CONFIG_ERROR, False):
            print_error(command, error)
            return 2
        print_error(command, f"{type(error).__name__}: {error}", " (EMBINIT_DEBUG=1 shows the traceback)")
        return 1
    return 0
