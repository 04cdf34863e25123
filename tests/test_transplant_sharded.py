"""A transplant on tables sharded over two CPU processes (gloo): a ``DTensor`` table (tensor-parallel style) rebuilt and
sharded again in place, by ``transplant_tokenizer`` and by ``TokenTransplantCallback`` (which gathers on every rank and
plans on rank 0), and FSDP2's ``fully_shard`` refused in place but written into through ``transplant_state`` into a
model built over the new vocabulary. Each rank's whole tables equal the single-process transplant, bit for bit."""

from __future__ import annotations

import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import nn

from lightning_embinit.init.transplant import transplant_tokenizer
from lightning_embinit.init.transplant.state import transplant_state, write_state
from tests.test_sharded_tables import free_port
from tests.two_processes import run_two_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.timeout(300)]

OLD = ["<pad>", "▁the", "▁cat", "▁sat", "s", "at", "▁on", "▁mat"] + [f"▁w{i}" for i in range(13)]
NEW = ["<pad>", "▁mat", "▁cats", "▁on", "▁dog", "▁the", "▁w3", "▁w1"]


class Bigram(nn.Module):
    def __init__(self, tokens: list[str], seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.vocabulary = list(tokens)
        self.embed = nn.Embedding(len(tokens), 8, padding_idx=0)
        self.head = nn.Linear(8, len(tokens))

    def vocabulary_outputs(self) -> dict[str, list[str]]:
        return {"embed": ["head"]}


def split(texts):
    pieces = {"cats": [2, 4], "dog": [1], " cats": [2, 4], " dog": [1]}
    return [pieces.get(text, []) for text in texts]


def reference() -> dict[str, torch.Tensor]:
    from lightning_embinit.init.transplant.tokenizers import TokenizerView

    model = Bigram(OLD)
    transplant_tokenizer(model, NEW, old_tokenizer=TokenizerView(OLD, {"pad": "<pad>"}, split), method="pieces")
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _worker(rank: int, directory: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import Shard, distribute_tensor

        from lightning_embinit.init.sharding import whole_table
        from lightning_embinit.init.transplant.tokenizers import TokenizerView

        mesh = init_device_mesh("cpu", (2,))
        old = TokenizerView(OLD, {"pad": "<pad>"}, split)
        model = Bigram(OLD)
        for module in (model.embed, model.head):
            module.weight = nn.Parameter(distribute_tensor(module.weight.detach(), mesh, [Shard(0)]))
        transplant_tokenizer(model, NEW, old_tokenizer=old, method="pieces")
        record = {
            "dtensor": {"embed.weight": whole_table(model.embed.weight), "head.weight": whole_table(model.head.weight)},
            "local": list(model.embed.weight.to_local().shape),
        }
        trained = Bigram(OLD)
        fresh = Bigram(NEW, seed=7)
        fully_shard(fresh, mesh=mesh)
        try:
            transplant_tokenizer(fresh, NEW, old_tokenizer=TokenizerView(NEW), method="mean")
            record["refused"] = ""
        except ValueError as error:
            record["refused"] = str(error)
        state, _ = transplant_state(fresh, trained.state_dict(), NEW, old_tokenizer=old, method="pieces")
        write_state(fresh, state)
        record["fsdp"] = {name: whole_table(tensor) for name, tensor in fresh.state_dict().items()}
        record["callback"] = _callback_swap(mesh, old)
        torch.save(record, os.path.join(directory, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _broadcast(value, src=0):
    holder = [value]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def _callback_swap(mesh, old) -> dict[str, torch.Tensor]:
    """The callback's swap at setup of a model whose tables are ``DTensor``s (a stand-in for the trainer: its
    strategy's broadcast)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    from lightning_embinit import TokenTransplantCallback
    from lightning_embinit.init.sharding import whole_table

    model = Bigram(OLD)
    for module in (model.embed, model.head):
        module.weight = nn.Parameter(distribute_tensor(module.weight.detach(), mesh, [Shard(0)]))
    callback = TokenTransplantCallback(tokenizer=NEW, old_tokenizer=old, method="pieces", verbose=False)
    callback.setup(SimpleNamespace(strategy=SimpleNamespace(broadcast=_broadcast), datamodule=None), model, "fit")
    return {"embed.weight": whole_table(model.embed.weight), "head.weight": whole_table(model.head.weight)}


def test_sharded_tables_match_the_single_process_transplant(tmp_path):
    run_two_ranks(_worker, str(tmp_path), free_port())
    expected = reference()
    for rank in (0, 1):
        record = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        for name in ("embed.weight", "head.weight"):
            assert torch.equal(record["dtensor"][name], expected[name]), name
            assert torch.equal(record["fsdp"][name], expected[name]), name
            assert torch.equal(record["callback"][name], expected[name]), name
        assert torch.equal(record["fsdp"]["head.bias"], expected["head.bias"])
        assert record["local"] == [4, 8]  # 8 new rows over two ranks
        assert "fully_shard" in record["refused"] and "transplant_state" in record["refused"]
