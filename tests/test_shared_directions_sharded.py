"""The shared-direction transforms on a table sharded over two CPU processes (FSDP2, gloo): rank 0 builds and
transforms the whole table, each rank writes its slice; bit for bit the single-process build, the same report."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from lightning_embinit import initialize_embeddings
from tests.lazy_models import LazyLM, fully_shard, whole
from tests.test_sharded_tables import free_port
from tests.two_processes import run_two_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.timeout(300)]
RECIPE = {"source": "normal:0.5", "transforms": ["center", "whiten:0.01", "remove_top:2"], "standardize": "xavier"}
KEYS = ("mean", "std", "top_share", "top_k_share", "mean_cosine", "isotropy_rows")


def _worker(rank: int, directory: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2,))
        model = LazyLM()
        model.configure_model()
        fully_shard(model.embed, mesh)
        fully_shard(model, mesh)
        reports = initialize_embeddings(model, seed=3, **RECIPE)
        record = {"report": reports["embed"], "table": whole(model.embed.weight)}
        torch.save(record, os.path.join(directory, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_transforms_of_a_sharded_table_match_the_single_process_build(tmp_path):
    run_two_ranks(_worker, str(tmp_path), free_port())
    reference = LazyLM()
    reference.configure_model()
    expected = initialize_embeddings(reference, seed=3, **RECIPE)["embed"]
    assert expected["transforms"] == ["center", "whiten(0.01)", "remove_top(2)", "standardize(xavier)"]
    for rank in (0, 1):
        record = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert torch.equal(record["table"], reference.embed.weight.detach())
        assert {key: record["report"][key] for key in KEYS} == {key: expected[key] for key in KEYS}
