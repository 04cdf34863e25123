"""The three monitors under 2-process CPU DDP (gloo): computed once, counted over both ranks."""

import csv

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor, LearningSpeedMonitor, LexicalProbe
from tests.host_models import VOCAB, TwoSlotHost
from tests.two_processes import ddp_strategy

pytestmark = [pytest.mark.ddp, pytest.mark.timeout(300)]


class UnevenRanks(L.LightningDataModule):
    """Rank 0 trains on 5 pairs, rank 1 on 6 (batch size 2: 2 + 2 + 1 against 2 + 2 + 2): 11 examples per epoch."""

    def _loader(self):
        rank = self.trainer.global_rank
        generator = torch.Generator().manual_seed(rank)
        source = torch.randint(1, len(VOCAB), (5 + rank, 6), generator=generator)
        target = torch.randint(1, len(VOCAB), (5 + rank, 5), generator=generator)
        return DataLoader(TensorDataset(source, target), batch_size=2)

    def train_dataloader(self):
        return self._loader()

    def val_dataloader(self):
        return self._loader()


def test_monitors_under_ddp(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("cat\tdog\t8.0\nsat\tran\t4.0\nmat\tfar\t1.0\nthe\ton\t2.0\n")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    callbacks = [
        EmbeddingInitCallback(source="xavier", seed=0, verbose=False),
        EmbeddingVarianceMonitor(slots=["encoder"], every_n_steps=2, sample_rows=8, neighbours=2),
        LexicalProbe(similarity=[str(pairs)], slot="encoder", chains=["raw", "raw+pe"], verbose=False),
        LearningSpeedMonitor("val_loss", 100.0, mode="min"),
        checkpoint,
    ]
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=ddp_strategy(),
        use_distributed_sampler=False,
        max_epochs=3,
        logger=CSVLogger(tmp_path, name="csv"),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        callbacks=callbacks,
    )
    trainer.fit(TwoSlotHost(), UnevenRanks())
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["callbacks"]  # written by rank zero
    speed = next(v for k, v in state.items() if k.startswith("LearningSpeedMonitor"))
    assert speed["examples_seen"] == 33  # 11 per epoch, summed over the ranks exactly
    assert speed["tracker"]["crossed_at_examples"] == 11 and speed["tracker"]["points"] == 3
    variance = next(v for k, v in state.items() if k.startswith("EmbeddingVarianceMonitor"))
    assert set(variance["start"]) == {"encoder"} and variance["start"]["encoder"]["pe_std"] > 0
    probe = next(v for k, v in state.items() if k.startswith("LexicalProbe"))
    assert probe["results"]["start"]["raw"]["similarity_count"] == {"pairs": 4}

    with open(tmp_path / "csv" / "version_0" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    steps = [int(r["step"]) for r in rows if r.get("embvar/encoder/std")]
    assert steps == [0, 2, 4, 6, 8, 9]  # rank zero alone logs: start, every 2 steps and the end
    assert [float(r["learning_speed/examples_seen"]) for r in rows if r.get("learning_speed/examples_seen")] == [
        11,
        22,
        33,
    ]
    assert len([r for r in rows if r.get("lexical/encoder/raw/similarity/pairs")]) == 2  # start and end, once each
