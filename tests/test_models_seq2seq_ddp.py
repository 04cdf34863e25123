"""Both translation models under 2-process CPU DDP (gloo) on a real Multi30k slice, with EmbeddingInitCallback."""

import json

import pytest
import torch
from lightning.pytorch import Callback

from lightning_embinit import EmbeddingInitCallback
from lightning_embinit.models import ReinforcedTransformerSeq2Seq, TransformerSeq2Seq
from tests.shared_data import require_shared_data
from tests.translation_helpers import TINY, TINY_REINFORCED, multi30k_data, settings, tokenizer_configs, trainer
from tests.two_processes import ddp_strategy

pytestmark = [pytest.mark.ddp, pytest.mark.timeout(300)]


def _checksum(module: torch.nn.Module) -> dict[str, float]:
    return {
        name: float(p.detach().double().abs().sum()) for name, p in module.state_dict().items() if p.is_floating_point()
    }


class RecordRanks(Callback):
    """Weights right after EmbeddingInitCallback's setup (before DDP could broadcast rank 0's), and at the end."""

    def __init__(self, directory):
        self.directory = directory
        self.record = {}

    def setup(self, trainer, pl_module, stage):
        slots = pl_module.embedding_slots()
        self.record["after_init"] = {name: float(slot.weight.detach().double().sum()) for name, slot in slots.items()}
        self.record["after_init_abs"] = {
            name: float(slot.weight.detach().double().abs().sum()) for name, slot in slots.items()
        }

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.record.setdefault("batches", []).append(batch["index"].tolist())

    def on_fit_end(self, trainer, pl_module):
        self.record["final"] = _checksum(pl_module)
        self.record["val_bleu"] = float(trainer.callback_metrics["val_bleu"])
        self.record["val_loss"] = float(trainer.callback_metrics["val_loss"])
        path = self.directory / f"rank{trainer.global_rank}.json"
        path.write_text(json.dumps(self.record))


@pytest.mark.parametrize("name", ["baseline", "reinforced"])
def test_two_process_fit_on_multi30k_keeps_ranks_identical(tmp_path, name):
    glove = require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")
    data = multi30k_data(examples=64, batch_size=8)
    if name == "baseline":
        model = TransformerSeq2Seq(
            **tokenizer_configs(data),
            **settings(TINY, architecture={"d_model": 50, "num_heads": 5}, optimizer={"lr": 1e-3}),
        )
        slots = {"src": {"source": "xavier_normal"}, "tgt": {"source": f"file:{glove}"}}
    else:
        model = ReinforcedTransformerSeq2Seq(
            **tokenizer_configs(data), **settings(TINY_REINFORCED, architecture={"d_model": 50})
        )
        slots = {"src": None, "tgt": {"source": f"file:{glove}"}}
    callback = EmbeddingInitCallback(source="xavier", slots=slots, standardize="xavier", verbose=False)  # no seed
    run = trainer(
        tmp_path,
        devices=2,
        strategy=ddp_strategy(),
        max_steps=3,
        limit_val_batches=2,
        val_check_interval=3,
        callbacks=[callback, RecordRanks(tmp_path)],
    )
    run.fit(model, data)
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["after_init"] == rank1["after_init"] and all(v > 0 for v in rank0["after_init_abs"].values())
    assert rank0["final"] == rank1["final"]
    assert rank0["val_bleu"] == rank1["val_bleu"] and rank0["val_loss"] == rank1["val_loss"]
    assert not set(map(tuple, rank0["batches"])) & set(map(tuple, rank1["batches"]))  # each rank its own pairs
