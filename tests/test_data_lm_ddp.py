"""LanguageModelDataModule under 2-process CPU DDP: each rank reads its own share of the windows."""

import lightning as L
import pytest
import torch

from lightning_embinit.data import LanguageModelDataModule
from tests.two_processes import ddp_strategy


class Recorder(L.LightningModule):
    """Saves every training window it is given, per rank."""

    def __init__(self, out_dir: str):
        super().__init__()
        self.out_dir = out_dir
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[0])
        return (self.weight * batch[0].float().mean()).sum()

    def on_train_epoch_end(self):
        torch.save(torch.cat(self.seen), f"{self.out_dir}/rank{self.global_rank}.pt")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


@pytest.mark.ddp
def test_ranks_read_disjoint_shares_that_cover_the_training_windows(tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("\n".join(" ".join(f"w{i}x{j}" for j in range(5)) for i in range(200)) + "\n")  # all distinct
    data = LanguageModelDataModule(train_files=str(text), val_files=str(text), seq_len=8, batch_size=4, min_freq=1)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=ddp_strategy(),
        max_epochs=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Recorder(str(tmp_path)), data)
    data.setup("fit")
    rows = {tuple(row.tolist()) for row in data.train_set.tensors[0]}
    shares = [{tuple(r.tolist()) for r in torch.load(tmp_path / f"rank{k}.pt")} for k in (0, 1)]
    assert len(rows) == len(data.train_set)  # every window is distinct text
    dropped = 2 * (data.hparams.batch_size - 1)  # each rank drops its last partial batch
    assert shares[0] | shares[1] <= rows and len(shares[0] | shares[1]) >= len(rows) - dropped
    assert len(shares[0] & shares[1]) <= 1  # DistributedSampler pads an odd count with one repeat
    assert abs(len(shares[0]) - len(shares[1])) <= 1
