"""Translation and classification data under 2-process CPU DDP: disjoint, complete, equal shares every epoch
(and the bucketing's shares for larger worlds, rank by rank in one process)."""

import json

import lightning as L
import numpy as np
import pytest
import torch

from lightning_embinit.data import ClassificationDataModule, TranslationDataModule
from lightning_embinit.data.batching import BucketBatchSampler, EpochSampler
from tests.shared_data import require_shared_data
from tests.two_processes import ddp_strategy


class Recorder(L.LightningModule):
    """Writes, per rank, the example indices of every training and validation batch it was given."""

    def __init__(self, out_dir: str, key: str):
        super().__init__()
        self.out_dir, self.key = out_dir, key
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen = {"train": {}, "val": {}, "batches": {}}

    def training_step(self, batch, batch_idx):
        epoch = str(self.current_epoch)
        self.seen["train"].setdefault(epoch, []).extend(batch["index"].tolist())
        self.seen["batches"][epoch] = self.seen["batches"].get(epoch, 0) + 1
        return (self.weight * batch[self.key].float().mean()).sum()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.seen["val"].setdefault(f"{self.current_epoch}/{dataloader_idx}", []).extend(batch["index"].tolist())

    def on_fit_end(self):
        datamodule = self.trainer.datamodule
        self.seen["sampler"] = type(self.trainer.train_dataloader.batch_sampler.sampler).__name__
        self.seen["fingerprints"] = {
            name: datamodule.corpus.tokenizer(name).fingerprint() for name in sorted(datamodule.corpus.tokenizers)
        }
        with open(f"{self.out_dir}/rank{self.global_rank}.json", "w") as handle:
            json.dump(self.seen, handle)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit(tmp_path, model, data, epochs, use_distributed_sampler=True):
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=ddp_strategy(),
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        use_distributed_sampler=use_distributed_sampler,
    )
    trainer.fit(model, data)
    return [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]


@pytest.mark.ddp
def test_translation_shares_are_disjoint_complete_and_reshuffled(tmp_path):
    folder = str(require_shared_data("multi30k"))
    # WordPiece training differs from process to process: the ranks must still share one tokenizer (the cache)
    data = TranslationDataModule(
        data_dir=folder,
        max_examples=600,
        batch_size=16,
        src_tokenizer="wordpiece",
        vocab_size=1234,
        val_stem="test_2016_flickr",
        test_stem=None,
    )
    ranks = fit(tmp_path, Recorder(str(tmp_path), "src"), data, epochs=2)
    assert ranks[0]["fingerprints"] == ranks[1]["fingerprints"]
    assert (
        ranks[0]["sampler"] == "DistributedSampler"
    )  # Lightning injected it; the bucketing read rank and world from it
    for epoch in ("0", "1"):
        shares = [set(r["train"][epoch]) for r in ranks]
        assert not shares[0] & shares[1] and shares[0] | shares[1] == set(range(600))
        assert ranks[0]["batches"][epoch] == ranks[1]["batches"][epoch] == 19  # ⌈⌈600 / 16⌉ / 2⌉
        val = [r["val"][f"{epoch}/0"] for r in ranks]
        assert sorted(val[0] + val[1]) == list(range(600))  # every validation pair exactly once
    assert ranks[0]["train"]["0"] != ranks[0]["train"]["1"]  # set_epoch reshuffled


@pytest.mark.ddp
def test_classification_two_validation_sets_without_lightning_sampler(tmp_path):
    folder = require_shared_data("sst2")
    data = ClassificationDataModule(
        train_file=str(folder / "dev.tsv.gz"),
        val_files={"first": str(folder / "dev.tsv.gz"), "second": str(folder / "dev.tsv.gz")},
        max_examples=301,
        batch_size=32,
        eval_batch_size=1,
    )
    ranks = fit(tmp_path, Recorder(str(tmp_path), "input_ids"), data, epochs=1, use_distributed_sampler=False)
    assert ranks[0]["sampler"] == "EpochSampler"  # no sampler from Lightning: the world comes from torch.distributed
    shares = [set(r["train"]["0"]) for r in ranks]
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(range(301))
    assert ranks[0]["batches"]["0"] == ranks[1]["batches"]["0"] == 5  # ⌈⌈301 / 32⌉ / 2⌉
    for loader in ("0", "1"):  # eval_batch_size=1 and an odd count: 150 batches per rank, one of two examples
        val = [r["val"][f"0/{loader}"] for r in ranks]
        assert sorted(val[0] + val[1]) == list(range(301))  # each example scored once, none repeated


def shares(size, world, batch_size, shuffle):
    """Every rank's batches of one epoch (lengths vary, so the bucketing sorts)."""
    lengths = (np.arange(size) * 7) % 13
    return [
        list(
            BucketBatchSampler(EpochSampler(size), lengths, batch_size, shuffle=shuffle, num_replicas=world, rank=rank)
        )
        for rank in range(world)
    ]


def test_evaluation_batches_repeat_no_example_unless_there_are_fewer_than_ranks():
    for size, world, batch_size in [(1014, 4, 1), (7, 4, 1), (5, 4, 2), (1013, 3, 16), (8, 4, 1)]:
        ranks = shares(size, world, batch_size, shuffle=False)
        assert len({len(batches) for batches in ranks}) == 1  # the same number of batches on every rank: no hang
        assert sorted(i for batches in ranks for batch in batches for i in batch) == list(range(size))
        assert max(len(batch) for batches in ranks for batch in batches) <= max(batch_size, 2)
    assert [len(batches) for batches in shares(1014, 4, 1, shuffle=False)] == [253] * 4  # 4 · ⌊1014 / 4⌋ batches
    few = shares(3, 4, 1, shuffle=False)  # fewer examples than ranks: every rank still gets one, so one repeats
    assert [len(batches) for batches in few] == [1] * 4 and sorted({b[0] for (b,) in few}) == [0, 1, 2]
    training = shares(1014, 4, 1, shuffle=True)  # training keeps batch_size: two examples come twice
    assert [len(batches) for batches in training] == [254] * 4 and {
        len(b) for batches in training for b in batches
    } == {1}
