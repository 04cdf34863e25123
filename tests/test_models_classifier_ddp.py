"""TransformerClassifier under 2-process CPU DDP (gloo) on a real SST-2 slice, with EmbeddingInitCallback."""

import json

import lightning as L
import pytest
import torch
from lightning.pytorch import Callback

from lightning_embinit import EmbeddingInitCallback
from lightning_embinit.data import ClassificationDataModule
from lightning_embinit.models import TransformerClassifier
from tests.shared_data import require_shared_data
from tests.two_processes import ddp_strategy

pytestmark = [pytest.mark.ddp, pytest.mark.timeout(300)]


class RecordRanks(Callback):
    """The token table right after EmbeddingInitCallback's setup (before DDP could broadcast rank 0's), and at the
    end."""

    def __init__(self, directory):
        self.directory = directory
        self.record = {"batches": []}

    def setup(self, trainer, pl_module, stage):
        weight = pl_module.embedding_slots()["tokens"].weight.detach().double()
        self.record["after_init"] = [float(weight.sum()), float(weight.abs().sum()), float(weight.std())]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.record["batches"].append(batch["index"].tolist())

    def on_fit_end(self, trainer, pl_module):
        self.record["final"] = {
            name: float(p.detach().double().abs().sum()) for name, p in pl_module.state_dict().items()
        }
        self.record["val"] = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
        (self.directory / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.record))


def test_two_process_fit_on_sst2_with_glove_keeps_ranks_identical(tmp_path):
    glove = require_shared_data("glove", "glove.6B.50d.sst2_subset.txt.gz")
    data = ClassificationDataModule(
        dataset="sst2", data_dir=str(require_shared_data("sst2")), max_examples=96, batch_size=8, min_freq=1, seed=0
    )
    L.seed_everything(0)
    model = TransformerClassifier(
        tokenizer=data.tokenizer_config,
        label_names=data.label_names,
        architecture={"d_model": 50, "num_heads": 5, "num_layers": 1, "ffn_dim": 64},
        optimizer={"lr": 1e-3},
    )
    callback = EmbeddingInitCallback(source=f"file:{glove}", standardize="xavier", verbose=False)  # no seed
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=ddp_strategy(),
        max_steps=3,
        limit_val_batches=2,
        val_check_interval=3,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[callback, RecordRanks(tmp_path)],
    )
    trainer.fit(model, data)
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    rows, dim = len(data.vocabulary), 50
    assert rank0["after_init"] == rank1["after_init"]
    assert rank0["after_init"][2] == pytest.approx((2 / (rows + dim)) ** 0.5, rel=0.02)  # standardized to Xavier's std
    assert rank0["final"] == rank1["final"]
    assert set(rank0["val"]) == {"val_loss", "val_acc", "val_f1"} and rank0["val"] == rank1["val"]
    assert 0 < rank0["val"]["val_acc"] < 1
    assert not {tuple(b) for b in rank0["batches"]} & {tuple(b) for b in rank1["batches"]}  # each rank its own rows
    assert torch.isfinite(torch.tensor(list(rank0["final"].values()))).all()
