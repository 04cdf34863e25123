"""Build every table once, on global rank 0, and give every rank the same matrices, masks of pre-trained rows and
summary (torch.distributed only); an error on rank 0 is raised on every rank, so no rank waits forever.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.pipeline import BuiltSlot
from lightning_embinit.init.sources.base import SourceMatrix


def is_distributed() -> bool:
    """Whether a default process group of more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def build_on_rank_zero(
    slots: Mapping[str, EmbeddingSlot],
    build: Callable[[], tuple[dict[str, BuiltSlot], Any]],
    *,
    broadcast_object: Callable[[Any], Any] | None = None,
) -> tuple[dict[str, BuiltSlot], Any]:
    """Run ``build`` (→ slot → built matrix, a picklable summary) on global rank 0 only; every rank (each calling this
    with the same slots) returns the same matrices, masks and summary. ``broadcast_object``: how a picklable object
    travels from rank 0 (default ``broadcast_object_list``); tensors travel on the CUDA device under NCCL, else the CPU.
    """
    if not is_distributed():
        return build()
    built: dict[str, BuiltSlot] = {}

    def build_and_describe() -> tuple[Any, dict[str, tuple]]:
        nonlocal built
        built, summary = build()
        described = {n: (b.source, b.matrix.weight.dtype, b.transforms, b.matrix.coverage) for n, b in built.items()}
        return summary, described

    summary, described = run_on_rank_zero(
        build_and_describe, what="embedding initialization", broadcast_object=broadcast_object
    )
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    for name, slot in slots.items():
        source, dtype, transforms, coverage = described[name]
        mine = built.get(name)
        weight = mine.matrix.weight if mine else torch.empty(slot.num_embeddings, slot.embedding_dim, dtype=dtype)
        rows = mine.matrix.pretrained_rows if mine else torch.empty(slot.num_embeddings, dtype=torch.bool)
        matrix = SourceMatrix(_broadcast(weight, device), _broadcast(rows, device), source, coverage)
        built[name] = BuiltSlot(name, matrix, source, list(transforms))
    return built, summary


def run_on_rank_zero(
    compute: Callable[[], Any], *, what: str, broadcast_object: Callable[[Any], Any] | None = None
) -> Any:
    """``compute()`` on global rank 0 only; every rank returns its (picklable) result. An error on rank 0 is raised
    there as it is and on every other rank as a ``ValueError`` naming ``what``. ``broadcast_object``: as in
    :func:`build_on_rank_zero`. Without a process group of several ranks this is ``compute()``."""
    if not is_distributed():
        return compute()
    answer: dict[str, Any] = {}
    failure: BaseException | None = None
    if dist.get_rank() == 0:
        try:
            answer = {"value": compute()}
        except Exception as error:  # re-raised below on every rank
            failure, answer = error, {"error": f"{type(error).__name__}: {error}"}
    answer = (broadcast_object or _broadcast_object)(answer)
    if "error" in answer:
        if failure is not None:
            raise failure
        raise ValueError(f"{what} failed on rank 0: {answer['error']}")
    return answer["value"]


def _broadcast_object(value: Any) -> Any:
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def _broadcast(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    on_device = tensor.to(device).contiguous()
    dist.broadcast(on_device, src=0)
    return on_device.cpu()
