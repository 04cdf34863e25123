"""The ``embinit`` command: a LightningCLI over any LightningModule and LightningDataModule.

``embinit fit --config cfg.yaml``, ``embinit validate|test ...``, ``embinit fit --print_config``.
Models and data modules are chosen by ``class_path`` in the config; callbacks such as
``lightning_embinit.EmbeddingInitCallback`` go under ``trainer.callbacks``. Logs and checkpoints
go to ``trainer.default_root_dir`` (Lightning's default: ``lightning_logs/`` under the current
directory). ``embinit inspect ...`` checks a start without training (:mod:`lightning_embinit.inspect_cli`).
The LightningCLI itself lives in :mod:`lightning_embinit.lightning_cli`.
"""

from __future__ import annotations

import sys
from typing import Any

from lightning_embinit.lightning_cli import CHECKPOINT_TO_DATA, DATA_TO_MODEL_LINKS, EmbinitCLI, embinit_cli

__all__ = ["CHECKPOINT_TO_DATA", "DATA_TO_MODEL_LINKS", "EmbinitCLI", "embinit_cli", "main"]


def main(args: Any = None) -> int | None:
    """Entry point of the ``embinit`` console script and ``python -m lightning_embinit``.

    ``embinit inspect ...`` checks a start without training (:mod:`lightning_embinit.inspect_cli`);
    every other subcommand is LightningCLI's.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["inspect"]:
        from lightning_embinit.inspect_cli import main as inspect_main

        return inspect_main(argv[1:])
    embinit_cli(args, save_config_kwargs={"overwrite": True})
    return None
