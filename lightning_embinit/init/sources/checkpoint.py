"""``checkpoint:<path>``: self-pretraining from an earlier model's embeddings ([KB]; docs/concepts.md#self-pretraining).

Rows are taken *by token string* from a Lightning checkpoint or a plain state dict (loaded by :mod:`.checkpoint_file`)
through the ``checkpoint["embinit"]`` record ``EmbeddingInitCallback`` writes (docs/sources.md, "Self-pretraining from
a checkpoint"). A memory-mapped checkpoint is kept for :data:`KEEP_LOADED_S` seconds (one build round) for the next
slot reading the unchanged file; :func:`release_loaded` drops it at once. A legacy (non-zip) checkpoint is loaded per
slot.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import torch

from lightning_embinit.init.sources.base import SOURCES, SourceRequest, VectorSet
from lightning_embinit.init.sources.checkpoint_file import checked_file, load_checkpoint_file
from lightning_embinit.init.sources.pretrained import ArrayVectorSet, PretrainedSource, split_options
from lightning_embinit.vocabulary import read_token_file

CHECKPOINT_KEY = "embinit"
CHECKPOINT_OPTIONS = ("slot_map", "parameter", "tokens", "weights_only")
#: Seconds a memory-mapped checkpoint stays loaded for the next slot that reads the same unchanged file.
KEEP_LOADED_S = 60.0
Loaded = tuple[Mapping[str, torch.Tensor], Mapping[str, Any]]
_kept: dict[tuple[Any, ...], tuple[float, Loaded]] = {}  # at most one memory-mapped checkpoint


def release_loaded() -> None:
    """Drop the kept checkpoint (its memory map) now."""
    _kept.clear()


def load_checkpoint_once(path: str, *, weights_only: bool = True) -> Loaded:
    """(state dict, the ``embinit`` slot records) of a Lightning checkpoint or a plain state dict, read by
    :func:`~lightning_embinit.init.sources.checkpoint_file.load_checkpoint_file` (CRCs verified, errors named),
    reusing the memory-mapped result of the last call for an unchanged file."""
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, weights_only)
    now = time.monotonic()
    kept = _kept.get(key)
    if kept is not None and now - kept[0] < KEEP_LOADED_S:
        _kept[key] = (now, kept[1])
        return kept[1]
    _kept.clear()
    mapped: list[bool] = []
    loaded = load_checkpoint_file(
        path, weights_only=weights_only, mapped=mapped, trust_hint="pass source_options weights_only=False"
    )
    if not isinstance(loaded, Mapping):
        raise ValueError(f"checkpoint {path} holds a {type(loaded).__name__}, not a dict")
    state = loaded.get("state_dict", loaded)
    if not isinstance(state, Mapping):
        raise ValueError(f"checkpoint {path}: 'state_dict' is not a dict")
    record = loaded.get(CHECKPOINT_KEY) or {}
    slots = record.get("slots") if isinstance(record, Mapping) else None
    result = (state, slots if isinstance(slots, Mapping) else {})
    if mapped:
        _kept[key] = (now, result)
    return result


def checkpoint_vectors(path: str, request: SourceRequest, options: Mapping[str, Any], loaded: Loaded) -> VectorSet:
    state, slots = loaded
    slot_map = options.get("slot_map") or {}
    old_name = slot_map.get(request.slot_name, request.slot_name)
    record = slots.get(old_name) or {}
    parameter = options.get("parameter") or record.get("parameter")
    tokens = options.get("tokens")  # a list, or a file with one token per line
    if isinstance(tokens, (str, os.PathLike)):
        tokens = read_token_file(tokens)
    tokens = [str(token) for token in tokens] if tokens is not None else record.get("tokens")
    if not parameter:
        matrices = [k for k, v in state.items() if isinstance(v, torch.Tensor) and v.dim() == 2][:10]
        raise ValueError(
            f"checkpoint {path} has no embinit record for slot {old_name!r} (recorded slots: {sorted(slots)}); "
            f"pass source_options slot_map={{'{request.slot_name}': '<old slot>'}}, or parameter='<state dict key>' "
            f"and tokens=[...] (2-D tensors: {matrices})"
        )
    if parameter not in state:
        raise ValueError(f"checkpoint {path} has no tensor {parameter!r} (slot {old_name!r})")
    weight = state[parameter]
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError(f"checkpoint {path}: {parameter!r} is not a 2-D tensor")
    if tokens is None:
        raise ValueError(f"checkpoint {path}: no token strings for slot {old_name!r}; pass source_options tokens=")
    if len(tokens) != weight.shape[0]:
        raise ValueError(f"checkpoint {path}: {len(tokens)} tokens for {parameter!r} with {weight.shape[0]} rows")
    return ArrayVectorSet(
        tokens=list(tokens),
        matrix=weight,
        description=f"{os.path.basename(path)} [{parameter}, slot {old_name!r}, {weight.shape[0]}×{weight.shape[1]}]",
    )


@SOURCES.register(
    "checkpoint",
    takes_argument=True,
    summary="self-pretrain: rows by token string from an earlier model's checkpoint [KB]",
)
def checkpoint_source(path: str, **options: Any) -> PretrainedSource:
    alignment, own = split_options(f"checkpoint:{path}", options, CHECKPOINT_OPTIONS)
    path = os.path.expanduser(path)
    checked_file(path, f"source 'checkpoint:{path}'")
    if own.get("slot_map") is not None and not isinstance(own["slot_map"], Mapping):
        raise ValueError(f"slot_map must map new slot names to old ones, got {own['slot_map']!r}")

    def open_vectors(request: SourceRequest) -> VectorSet:
        loaded = load_checkpoint_once(path, weights_only=bool(own.get("weights_only", True)))
        return checkpoint_vectors(path, request, own, loaded)

    return PretrainedSource(f"checkpoint:{path}", open_vectors, alignment)
