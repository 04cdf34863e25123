"""Test-only LightningModules that create their tables in ``configure_model``, as Lightning's large-model guide
advises."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from lightning.pytorch import Callback, LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCABULARY = ["<pad>", "<unk>", "the", "cat", "sat", "on", "mat", "dog", "ran", "far"] + [f"w{i}" for i in range(41)]


class LazyLM(LightningModule):
    """A bigram LM (51 tokens, so two ranks get uneven shards of 26 and 25 rows) built in ``configure_model``.

    ``meta``: create the layers on the meta device (the strategy materializes them); ``shard``: apply
    FSDP2's ``fully_shard`` over the strategy's data-parallel mesh; ``extra``: a second table, ``frozen``.
    """

    def __init__(
        self,
        dim: int = 16,
        lr: float = 0.1,
        weight_decay: float = 0.0,
        meta: bool = False,
        shard: bool = False,
        extra: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.vocabulary = list(VOCABULARY)  # token strings, found by the callbacks as the model's `vocabulary`
        self.embed: nn.Embedding | None = None

    def configure_model(self) -> None:
        if self.embed is not None:  # Lightning asks for an idempotent hook
            return
        n, d = len(VOCABULARY), self.hparams.dim
        with torch.device("meta") if self.hparams.meta else contextlib.nullcontext():
            self.embed = nn.Embedding(n, d, padding_idx=0)
            self.head = nn.Linear(d, n)
            if self.hparams.extra:
                self.frozen = nn.Embedding(n, d)
        if self.hparams.shard:
            mesh = self.device_mesh["data_parallel"]
            fully_shard(self.embed, mesh=mesh)
            fully_shard(self, mesh=mesh)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens)
        if self.hparams.extra:
            hidden = hidden + self.frozen(tokens)
        return self.head(hidden)

    def training_step(self, batch, batch_idx):
        (tokens,) = batch
        logits = self(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), ignore_index=0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


def fully_shard(module: nn.Module, mesh) -> nn.Module:
    from torch.distributed.fsdp import fully_shard as shard

    return shard(module, mesh=mesh)


def lm_loader(batches: int = 4, seed: int = 0) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        TensorDataset(torch.randint(1, len(VOCABULARY), (8 * batches, 6), generator=generator)), batch_size=8
    )


def reference_tables(names=("embed",), **options) -> dict[str, torch.Tensor]:
    """The single-process build of the torch-only core (``initialize_embeddings``) on an unsharded LazyLM."""
    from lightning_embinit import initialize_embeddings

    model = LazyLM(extra="frozen" in names)
    model.configure_model()
    initialize_embeddings(model, **options)
    return {name: getattr(model, name).weight.detach().clone() for name in names}


def whole(weight: torch.Tensor) -> torch.Tensor:
    from lightning_embinit.init.sharding import whole_table

    return whole_table(weight).cpu().clone()


class TablesAtTrainStart(Callback):
    """Saves each rank's whole tables at train start and end (after every setup, before and after training)."""

    def __init__(self, directory, names=("embed",)) -> None:
        self.directory, self.names = Path(directory), tuple(names)

    def _save(self, trainer, pl_module, when: str) -> None:
        tables = {name: whole(getattr(pl_module, name).weight) for name in self.names}  # every rank: a collective
        torch.save(tables, self.directory / f"{when}-rank{trainer.global_rank}.pt")

    def on_train_start(self, trainer, pl_module):
        self._save(trainer, pl_module, "start")
        local = pl_module.embed.weight
        local = local.to_local() if hasattr(local, "to_local") else local
        (self.directory / f"local-rank{trainer.global_rank}.json").write_text(json.dumps(list(local.shape)))

    def on_train_end(self, trainer, pl_module):
        self._save(trainer, pl_module, "end")
