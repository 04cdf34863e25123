"""Test-only LightningModules that host embedding tables (real models live in the package)."""

from __future__ import annotations

import math

import torch
from lightning.pytorch import LightningModule, Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit.init import EmbeddingSlot, sinusoidal_encoding

VOCAB = ["<pad>", "<unk>", "the", "cat", "sat", "on", "mat", "dog", "ran", "far"]


class TwoSlotHost(LightningModule):
    """An encoder table and a decoder table whose output layer is tied to it."""

    def __init__(self, vocab_size: int = len(VOCAB), dim: int = 16, lr: float = 0.1, tokens: bool = True) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder_embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.decoder_embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.decoder_embedding.weight
        self.lr = lr
        self._tokens = [VOCAB[i] if i < len(VOCAB) else f"w{i}" for i in range(vocab_size)] if tokens else None

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        dim = self.hparams.dim
        return {
            "encoder": EmbeddingSlot(
                "encoder",
                self.encoder_embedding,
                tokens=self._tokens,
                positional_encoding=lambda: sinusoidal_encoding(32, dim),
                special_tokens={"pad": "<pad>", "unk": "<unk>"},
            ),
            "decoder": EmbeddingSlot("decoder", self.decoder_embedding, tokens=self._tokens, tied_modules=("head",)),
        }

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.hparams.dim)
        context = self.encoder_embedding(source).mean(dim=1, keepdim=True) * scale
        hidden = torch.tanh(self.mix(self.decoder_embedding(target) * scale + context))
        return self.head(hidden)

    def training_step(self, batch, batch_idx):
        source, target = batch
        logits = self(source, target[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), target[:, 1:].flatten(), ignore_index=0)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        source, target = batch
        logits = self(source, target[:, :-1])
        self.log("val_loss", nn.functional.cross_entropy(logits.flatten(0, 1), target[:, 1:].flatten(), ignore_index=0))

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class PlainEmbeddingModel(LightningModule):
    """No EmbeddingHost: tables are found by module path."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Module()
        self.body.word_embeddings = nn.Embedding(12, 8)
        self.proj = nn.Linear(8, 12)

    def training_step(self, batch, batch_idx):
        (tokens,) = batch
        return self.proj(self.body.word_embeddings(tokens)).logsumexp(-1).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NoEmbeddingModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0].float()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def token_loader(vocab_size: int = len(VOCAB), batches: int = 4, seed: int = 0) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(1, vocab_size, (8 * batches, 6), generator=generator)
    target = torch.randint(1, vocab_size, (8 * batches, 5), generator=generator)
    return DataLoader(TensorDataset(source, target), batch_size=8)


def make_trainer(tmp_path, callbacks, max_steps: int = 1, logger=False, **options) -> Trainer:
    """A quiet CPU trainer for callback tests; ``options`` override or extend the defaults."""
    settings = dict(
        accelerator="cpu",
        max_steps=max_steps,
        callbacks=callbacks,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    )
    settings.update(options)
    return Trainer(**settings)
