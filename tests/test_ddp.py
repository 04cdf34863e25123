"""Two CPU processes on the gloo backend: every rank must hold the same initialized weights."""

import json

import pytest
import torch
from lightning.pytorch import Callback

from lightning_embinit import EmbeddingInitCallback
from tests.host_models import TwoSlotHost, make_trainer, token_loader
from tests.sources_for_tests import BrokenSource
from tests.two_processes import ddp_strategy

pytestmark = [pytest.mark.ddp, pytest.mark.timeout(300)]


class WriteChecksums(Callback):
    """Runs its setup right after EmbeddingInitCallback's, before DDP would broadcast rank 0's weights."""

    def __init__(self, directory):
        self.directory = directory

    def setup(self, trainer, pl_module, stage):
        init = next(c for c in trainer.callbacks if isinstance(c, EmbeddingInitCallback))
        record = {
            "encoder": float(pl_module.encoder_embedding.weight.double().sum()),
            "encoder_abs": float(pl_module.encoder_embedding.weight.double().abs().sum()),
            "decoder": float(pl_module.decoder_embedding.weight.double().sum()),
            "seed": init.seed_used,
            "report_std": init.reports["encoder"]["std"],
            "pretrained_rows": {
                name: rows.nonzero().flatten().tolist() for name, rows in init._pretrained_rows.items()
            },
        }
        (self.directory / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def ddp_trainer(tmp_path, callbacks, strategy=None):
    return make_trainer(tmp_path, callbacks, devices=2, strategy=strategy or ddp_strategy())


def test_every_rank_gets_identical_weights_without_a_seed(tmp_path):
    callback = EmbeddingInitCallback(
        source="xavier", slots={"encoder": None, "decoder": {"source": "normal:0.3"}}, verbose=False
    )
    trainer = ddp_trainer(tmp_path, [callback, WriteChecksums(tmp_path)], strategy="ddp_spawn")  # users' strategy
    trainer.fit(TwoSlotHost(lr=0.0), token_loader(batches=4))
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0 == rank1
    assert rank0["encoder_abs"] > 0 and rank0["seed"] is not None


def test_a_failure_on_rank_zero_stops_every_rank(tmp_path):
    callback = EmbeddingInitCallback(source=BrokenSource("nan"), verbose=False)
    with pytest.raises(Exception, match="rows contain NaN or inf"):
        ddp_trainer(tmp_path, [callback]).fit(TwoSlotHost(), token_loader(batches=4))


def test_a_pretrained_source_is_read_on_rank_zero_only_and_broadcast(tmp_path):
    from tests.shared_data import require_shared_data
    from tests.sources_for_tests import RankRecordingSource

    glove = require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")
    source = RankRecordingSource(f"file:{glove}", str(tmp_path))
    callback = EmbeddingInitCallback(
        source=source, standardize="xavier", trainable="pretrained_rows", seed=0, verbose=False
    )
    ddp_trainer(tmp_path, [callback, WriteChecksums(tmp_path)]).fit(
        TwoSlotHost(dim=50, lr=0.0), token_loader(batches=4)
    )
    assert sorted(p.name for p in tmp_path.glob("built-by-rank*")) == ["built-by-rank0"]
    assert (tmp_path / "built-by-rank0").read_text() == "11"  # one read per slot, encoder and decoder
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0 == rank1 and rank0["encoder_abs"] > 0
    assert rank0["pretrained_rows"]["encoder"] == list(
        range(2, 10)
    )  # the 8 words are in GloVe; <pad> and <unk> are not


class SaveTablesAtTrainStart(Callback):
    """Each rank's tables after every restore, before the first step."""

    def __init__(self, directory):
        self.directory = directory

    def on_train_start(self, trainer, pl_module):
        tables = {name: getattr(pl_module, name).weight.detach().cpu() for name in ("encoder_embedding", "head")}
        torch.save(tables, self.directory / f"start-rank{trainer.global_rank}.pt")


def test_a_resume_under_ddp_starts_every_rank_from_the_checkpoints_tables(tmp_path):
    """Every rank builds at setup (rank 0 reads, all write); Lightning's restore then replaces it bit for bit."""
    first = make_trainer(tmp_path, [EmbeddingInitCallback(source="xavier", seed=0, verbose=False)], max_steps=2)
    first.fit(TwoSlotHost(lr=0.5), token_loader())
    first.save_checkpoint(tmp_path / "run.ckpt")
    saved = torch.load(tmp_path / "run.ckpt", weights_only=False)["state_dict"]
    callback = EmbeddingInitCallback(source="ones", verbose=False)
    resumed = make_trainer(
        tmp_path, [callback, SaveTablesAtTrainStart(tmp_path)], devices=2, strategy=ddp_strategy(), max_steps=4
    )
    resumed.fit(TwoSlotHost(lr=0.0), token_loader(batches=4), ckpt_path=tmp_path / "run.ckpt")
    for rank in (0, 1):
        tables = torch.load(tmp_path / f"start-rank{rank}.pt")
        assert torch.equal(tables["encoder_embedding"], saved["encoder_embedding.weight"])
        assert torch.equal(tables["head"], saved["head.weight"])


class HFTables(Callback):
    """Each rank's Hugging Face token table right after the init callback's setup."""

    def __init__(self, directory):
        self.directory = directory

    def setup(self, trainer, pl_module, stage):
        table = pl_module.net.transformer.wte.weight.detach()
        record = {"sum": float(table.double().sum()), "abs": float(table.double().abs().sum())}
        (self.directory / f"hf-rank{trainer.global_rank}.json").write_text(json.dumps(record))


def test_a_hugging_face_model_gets_identical_tables_on_both_ranks(tmp_path):
    from tests.test_callback_families import Wrapped, gpt2

    callback = EmbeddingInitCallback(source="normal:0.3", verbose=False)  # the seed is drawn on rank 0
    ids = torch.randint(1, 200, (8, 12), generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=2)
    ddp_trainer(tmp_path, [callback, HFTables(tmp_path)]).fit(Wrapped(gpt2(200, 32)), data)
    ranks = [json.loads((tmp_path / f"hf-rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0] == ranks[1] and ranks[0]["abs"] > 0
