"""The ``embinit`` command: a LightningCLI over any LightningModule and LightningDataModule.

``embinit fit --config cfg.yaml``, ``embinit validate|test ...``, ``embinit fit --print_config``.
Models and data modules are chosen by ``class_path`` in the config; callbacks such as
``lightning_embinit.EmbeddingInitCallback`` go under ``trainer.callbacks``.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI


class EmbinitCLI(LightningCLI):
    """LightningCLI with this package's defaults.

    The datamodule's ``vocabulary`` (token strings by id, built from the training text) is passed
    to the model's ``vocabulary`` argument when both exist, so the embedding has its rows (and
    their token strings) before ``EmbeddingInitCallback`` runs at setup; models or datamodules
    without it are left alone.
    """

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.link_arguments("data.vocabulary", "model.init_args.vocabulary", apply_on="instantiate")


def main(args: Any = None) -> None:
    """Entry point of the ``embinit`` console script and ``python -m lightning_embinit``."""
    EmbinitCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
        auto_configure_optimizers=False,
    )
