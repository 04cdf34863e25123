"""The ``embinit`` command: a LightningCLI over any LightningModule and LightningDataModule.

``embinit fit --config cfg.yaml``, ``embinit validate|test ...``, ``embinit fit --print_config``.
Models and data modules are chosen by ``class_path`` in the config; callbacks such as
``lightning_embinit.EmbeddingInitCallback`` go under ``trainer.callbacks``. Logs and checkpoints
go to ``trainer.default_root_dir`` (Lightning's default: ``lightning_logs/`` under the current
directory). ``embinit inspect ...`` checks a start without training (:mod:`lightning_embinit.inspect_cli`);
``embinit sweep|report ...`` run a study and tabulate it (:mod:`lightning_embinit.study_cli`).
The LightningCLI itself lives in :mod:`lightning_embinit.lightning_cli`.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["CHECKPOINT_TO_DATA", "DATA_TO_MODEL_LINKS", "EmbinitCLI", "embinit_cli", "main"]

_FROM_LIGHTNING_CLI = ("CHECKPOINT_TO_DATA", "DATA_TO_MODEL_LINKS", "EmbinitCLI", "embinit_cli")


def __getattr__(name: str) -> Any:
    """The LightningCLI names, imported on first use (``embinit sweep`` starts its trial server before Lightning loads)."""
    if name in _FROM_LIGHTNING_CLI:
        from lightning_embinit import lightning_cli

        return getattr(lightning_cli, name)
    raise AttributeError(f"module 'lightning_embinit.cli' has no attribute {name!r}")


def main(args: Any = None) -> int | None:
    """Entry point of the ``embinit`` console script and ``python -m lightning_embinit``.

    ``embinit inspect ...`` checks a start without training (:mod:`lightning_embinit.inspect_cli`),
    ``embinit sweep|report ...`` run and tabulate a study (:mod:`lightning_embinit.study_cli`); every other
    subcommand is LightningCLI's.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["inspect"]:
        from lightning_embinit.inspect_cli import main as inspect_main

        return inspect_main(argv[1:])
    if argv[:1] == ["sweep"]:
        from lightning_embinit.study_cli import sweep_main

        return sweep_main(argv[1:])
    if argv[:1] == ["report"]:
        from lightning_embinit.study_cli import report_main

        return report_main(argv[1:])
    from lightning_embinit.lightning_cli import embinit_cli

    embinit_cli(args, save_config_kwargs={"overwrite": True})
    return None
