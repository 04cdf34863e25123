"""Issue 19 on two CPU processes (gloo): configure_model under DDP, raw FSDP2, and Lightning's ModelParallelStrategy.

Each compares what every rank holds with the single-process build of the torch-only core, bit for bit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor, LexicalProbe, initialize_embeddings
from tests.host_models import make_trainer
from tests.lazy_models import LazyLM, TablesAtTrainStart, fully_shard, lm_loader, reference_tables, whole
from tests.sources_for_tests import EvenRowsSource, RankMarkedScheme
from tests.two_processes import ddp_strategy, run_two_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parent.parent
SLOTS = {"embed": None, "frozen": {"trainable": False}}
PAIRS = "cat\tdog\t8.0\nsat\tran\t4.0\nmat\tfar\t1.0\nthe\ton\t2.0\n"


def tables(directory: Path, when: str) -> list[dict[str, torch.Tensor]]:
    return [torch.load(directory / f"{when}-rank{rank}.pt") for rank in (0, 1)]


def test_tables_made_in_configure_model_under_ddp(tmp_path):
    """Built at on_fit_start on rank 0 only, the same on both ranks; a frozen table stays put under weight decay."""
    init = EmbeddingInitCallback(
        source=RankMarkedScheme("normal:0.5", str(tmp_path)), seed=5, slots=SLOTS, verbose=False
    )
    callbacks = [
        init,
        EmbeddingVarianceMonitor(every_n_steps=None, figures=False),
        TablesAtTrainStart(tmp_path, names=("embed", "frozen")),
        ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True),
    ]
    trainer = make_trainer(
        tmp_path, callbacks, max_steps=3, devices=2, strategy=ddp_strategy(), enable_checkpointing=True
    )
    trainer.fit(LazyLM(extra=True, weight_decay=0.1), lm_loader())

    expected = reference_tables(names=("embed", "frozen"), source="normal:0.5", seed=5, slots=SLOTS)
    start, end = tables(tmp_path, "start"), tables(tmp_path, "end")
    for name in ("embed", "frozen"):
        assert torch.equal(start[0][name], expected[name]) and torch.equal(start[1][name], expected[name])
    assert torch.equal(end[0]["frozen"], expected["frozen"]) and torch.equal(end[1]["frozen"], expected["frozen"])
    assert not torch.equal(end[0]["embed"], expected["embed"])  # the other table trains
    assert sorted(p.name for p in tmp_path.glob("built-by-rank*")) == ["built-by-rank0"]
    assert (tmp_path / "built-by-rank0").read_text() == "11"  # one read per table
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["callbacks"]
    assert state[init.state_key]["reports"]["frozen"]["trainable"] is False
    variance = next(v for k, v in state.items() if k.startswith("EmbeddingVarianceMonitor"))
    assert variance["start"]["embed"]["std"] == pytest.approx(
        expected["embed"][1:].double().std(unbiased=False).item(), rel=1e-6
    )


def _fully_shard_worker(rank: int, directory: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2,))
        model = LazyLM()
        model.configure_model()
        fully_shard(model.embed, mesh)
        fully_shard(model, mesh)
        before = whole(model.embed.weight)
        try:
            EmbeddingInitCallback(source=EvenRowsSource(), trainable="pretrained_rows", verbose=False).initialize(model)
            refused = ""
        except ValueError as error:
            refused = str(error)
        untouched = torch.equal(before, whole(model.embed.weight))
        init = EmbeddingInitCallback(
            source=RankMarkedScheme("normal:0.5", directory), standardize="xavier", seed=7, verbose=False
        )
        reports = init.initialize(model)
        record = {
            "refused": refused,
            "untouched": untouched,
            "reports": reports,
            "table": whole(model.embed.weight),
            "local": list(model.embed.weight.to_local().shape),
            "variance": EmbeddingVarianceMonitor(figures=False).measure(model),
            "probe": LexicalProbe(
                similarity=[os.path.join(directory, "pairs.tsv")], chains=["raw"], verbose=False
            ).probe(model),
        }
        loss = model.training_step((next(iter(lm_loader()))[0],), 0)
        loss.backward()
        record["grad"] = list(model.embed.weight.grad.to_local().shape)
        torch.save(record, os.path.join(directory, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_fully_shard_tables_match_the_single_process_build(tmp_path):
    """Raw FSDP2 on a CPU mesh through the torch-only API: each rank writes its shard of the one matrix."""
    (tmp_path / "pairs.tsv").write_text(PAIRS)
    run_two_ranks(_fully_shard_worker, str(tmp_path), free_port())
    reference = LazyLM()
    reference.configure_model()
    expected = initialize_embeddings(reference, source="normal:0.5", standardize="xavier", seed=7)["embed"]
    variance = EmbeddingVarianceMonitor(figures=False).measure(reference)
    probe = LexicalProbe(similarity=[str(tmp_path / "pairs.tsv")], chains=["raw"], verbose=False).probe(reference)
    records = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    for rank, record in enumerate(records):
        assert torch.equal(record["table"], reference.embed.weight.detach())  # bit for bit
        assert record["local"] == [26 - rank, 16] and record["grad"] == [26 - rank, 16]  # 51 rows: uneven shards
        assert {k: record["reports"]["embed"][k] for k in ("mean", "std", "min", "max")} == {
            k: expected[k] for k in ("mean", "std", "min", "max")
        }
        assert record["variance"] == variance and record["probe"] == probe  # the monitors gather the whole table
        assert (
            "sharded" in record["refused"]
            and "trainable=True or trainable=False" in record["refused"]
            and record["untouched"]
        )
    assert sorted(p.name for p in tmp_path.glob("built-by-rank*")) == ["built-by-rank0"]


def run_model_parallel(directory: Path, devices: int, accelerator: str) -> None:
    """Lightning's ModelParallelStrategy launches its ranks by re-running a script: tests/model_parallel_run.py."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "model_parallel_run.py"), str(directory), str(devices), accelerator],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def check_model_parallel_run(directory: Path, ranks: int) -> None:
    """Meta-device tables materialized by Lightning, sharded by fully_shard, written and resumed as the issue asks."""
    expected = reference_tables(
        names=("embed", "frozen"), source="normal:0.5", standardize="xavier", seed=5, slots=SLOTS
    )
    first = [torch.load(directory / "first" / f"start-rank{rank}.pt") for rank in range(ranks)]
    ends = [torch.load(directory / "first" / f"end-rank{rank}.pt") for rank in range(ranks)]
    resumed = [torch.load(directory / "second" / f"start-rank{rank}.pt") for rank in range(ranks)]
    for rank in range(ranks):
        assert all(torch.equal(first[rank][name], expected[name]) for name in expected)
        assert torch.equal(ends[rank]["frozen"], expected["frozen"])  # frozen under weight decay
        assert all(torch.equal(resumed[rank][name], ends[rank][name]) for name in expected)  # never re-initialized
    local = [json.loads((directory / "first" / f"local-rank{rank}.json").read_text()) for rank in range(ranks)]
    assert sum(shape[0] for shape in local) == 51 and all(shape[1] == 16 for shape in local)
    assert (directory / "built-by-rank0").read_text() == "11" and not (directory / "built-by-rank1").exists()
    record, second = (json.loads((directory / name).read_text()) for name in ("first.json", "second.json"))
    assert record["reports"]["embed"]["std"] == pytest.approx(
        expected["embed"][1:].double().std(unbiased=False).item(), rel=1e-6
    )
    assert record["variance"]["embed"]["std"] == record["reports"]["embed"]["std"]
    assert record["init_loss"] is not None and record["requires_grad"] is False
    assert second["resumed"] and second["reports"]["embed"]["source"] == "normal:0.5"


def test_model_parallel_strategy_on_two_cpu_processes(tmp_path):
    run_model_parallel(tmp_path, 2, "cpu")
    check_model_parallel_run(tmp_path, 2)
