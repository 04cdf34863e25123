"""InitialLossMonitor under 2-process CPU DDP (gloo): one value, the mean over ranks."""

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit.callbacks.initial_loss import InitialLossMonitor
from lightning_embinit.models import TiedEmbeddingLM
from tests.two_processes import ddp_strategy

VOCAB = 200


def rank_data():
    """8 windows; even ones (rank 0's share) repeat one token, odd ones (rank 1's) are random."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (8, 13), generator=generator)
    ids[0::2] = 7  # rank 0 sees "7 7 7 …": a tied model predicts the current token, so its loss is low
    return TensorDataset(ids[:, :-1], ids[:, 1:])


class RankData(L.LightningDataModule):
    """Rank r reads windows r, r + 2, ... in order (the trainer injects no sampler)."""

    def train_dataloader(self):
        inputs, targets = rank_data().tensors
        rank = self.trainer.global_rank
        return DataLoader(TensorDataset(inputs[rank::2], targets[rank::2]), batch_size=2, shuffle=False)


@pytest.mark.ddp
def test_monitor_reports_the_mean_of_per_rank_initial_losses(tmp_path):
    torch.manual_seed(0)
    model = TiedEmbeddingLM(
        vocab_size=VOCAB,
        architecture={"d_model": 64, "num_heads": 4, "num_layers": 1, "max_len": 16, "embedding_init": "normal:0.125"},
    )
    data = rank_data()
    with torch.no_grad():  # rank r's first batch: windows r and r + 2
        per_rank = [model.loss(model(data.tensors[0][[r, r + 2]]), data.tensors[1][[r, r + 2]]).item() for r in (0, 1)]
    assert abs(per_rank[0] - per_rank[1]) > 1.0  # the average is not trivially either rank's value
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=ddp_strategy(),
        use_distributed_sampler=False,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[InitialLossMonitor(track_steps=2)],
    )
    trainer.fit(model, RankData())
    logged = float(trainer.callback_metrics["init_loss"])
    assert logged == pytest.approx(sum(per_rank) / 2, rel=1e-5)
    assert float(trainer.callback_metrics["ln_vocab"]) == pytest.approx(torch.log(torch.tensor(VOCAB)).item())
