"""Read only a Hugging Face checkpoint's input-embedding tensor ([K]'s sub-word rows, docs/concepts.md#subword-rows).

The model is never instantiated. The tensor is found by :data:`EMBEDDING_PATTERNS` (``tensor=`` overrides); from
safetensors (or the one shard holding it) the rows asked for are read with positioned reads, so memory holds only
them; ``pytorch_model.bin`` (and its index) is the fallback, memory-mapped with ``weights_only=True``.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lightning_embinit.init.sources.row_reader import gather_rows, read_rows

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN = "pytorch_model.bin"

#: Key endings of input-embedding tensors, tried in order (a model prefix such as ``bert.`` may precede them).
EMBEDDING_PATTERNS = (
    "embeddings.word_embeddings.weight",  # BERT, mBERT, RoBERTa, ELECTRA, MiniLM, DistilBERT
    "shared.weight",  # T5, mT5, BART
    "encoder.embed_tokens.weight",  # T5 encoders saved without `shared`
    "wte.weight",  # GPT-2
    "embed_tokens.weight",  # LLaMA, Mistral, OPT, ...
    "word_embeddings.weight",  # BLOOM
    "embed_in.weight",  # GPT-NeoX
    "tok_embeddings.weight",  # original LLaMA layout
)

_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
}


def find_embedding_key(
    keys: Iterable[str],
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    vocab_size: int | None = None,
    explicit: str | None = None,
    where: str = "checkpoint",
) -> str:
    """The input-embedding tensor's key among ``keys`` (see :data:`EMBEDDING_PATTERNS`)."""
    keys = list(keys)
    if explicit is not None:
        if explicit not in keys:
            close = [k for k in keys if k.split(".")[-2:] == explicit.split(".")[-2:]][:5]
            raise ValueError(f"{where} has no tensor {explicit!r}{f'; similar: {close}' if close else ''}")
        return explicit
    for pattern in EMBEDDING_PATTERNS:
        candidates = [k for k in keys if k == pattern or k.endswith("." + pattern)]
        if shapes is not None:
            candidates = [k for k in candidates if len(shapes.get(k, ())) == 2]
        candidates = [k for k in candidates if "decoder." not in k] or candidates
        if vocab_size is not None and shapes is not None:
            candidates = [k for k in candidates if shapes[k][0] == vocab_size] or candidates
        if candidates:
            return min(candidates, key=lambda k: (len(k.split(".")), k))
    sample = [k for k in keys if "embed" in k][:8] or keys[:8]
    raise ValueError(
        f"no input-embedding tensor found in {where} ({len(keys)} tensors, e.g. {sample}); "
        f"known names end with {', '.join(EMBEDDING_PATTERNS)}; pass source_options tensor='<name>'"
    )


@dataclass
class EmbeddingTensor:
    """Where one 2-D tensor lives and how to read its rows without loading anything else."""

    path: str
    key: str
    shape: tuple[int, int]
    dtype: torch.dtype
    read_rows: Callable[[np.ndarray | None], torch.Tensor]

    def read(self, rows: Sequence[int] | None = None) -> torch.Tensor:
        """Rows (in the given order; all rows when None) in the stored dtype."""
        if rows is None:
            return self.read_rows(None)
        return gather_rows(rows, self.shape[0], self.read_rows, where=self.key)


def safetensors_header(path: str) -> tuple[dict[str, dict], int]:
    """The safetensors header (name → dtype, shape, data_offsets) and the byte offset of the data."""
    with open(path, "rb") as handle:
        size_bytes = handle.read(8)
        if len(size_bytes) != 8:
            raise ValueError(f"{path} is not a safetensors file (too short)")
        size = int.from_bytes(size_bytes, "little")
        if size > 100 << 20:
            raise ValueError(f"{path} is not a safetensors file (header of {size} bytes)")
        try:
            header = json.loads(handle.read(size))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(
                f"{path}: the safetensors header is incomplete or corrupt; the file is truncated or "
                "damaged — download it again"
            ) from None
    header.pop("__metadata__", None)
    return header, 8 + size


def safetensors_keys(path: str) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor in a safetensors file, read lazily with ``safe_open``."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except Exception as error:  # noqa: BLE001 - safetensors raises its own SafetensorError (and OSError)
        raise ValueError(
            f"{path}: not a readable safetensors file ({type(error).__name__}: {error}); the file is "
            "truncated or damaged — download it again"
        ) from None


def open_safetensors_tensor(
    path: str, key: str | None = None, *, vocab_size: int | None = None, explicit: str | None = None
) -> EmbeddingTensor:
    """The tensor ``key`` of a safetensors file (found by :func:`find_embedding_key` when None), read lazily."""
    if key is None:
        shapes = safetensors_keys(path)
        key = find_embedding_key(shapes, shapes=shapes, vocab_size=vocab_size, explicit=explicit, where=path)
    header, data_start = safetensors_header(path)
    if key not in header:
        raise ValueError(f"{path} has no tensor {key!r}")
    entry = header[key]
    shape = tuple(entry["shape"])
    if len(shape) != 2:
        raise ValueError(f"{path}: tensor {key!r} has shape {shape}, not (vocabulary, dim)")
    dtype = _SAFETENSORS_DTYPES.get(entry["dtype"])
    if dtype is None:
        raise ValueError(f"{path}: tensor {key!r} has unsupported dtype {entry['dtype']}")
    begin, end = entry["data_offsets"]
    if end - begin != shape[0] * shape[1] * dtype.itemsize:
        raise ValueError(f"{path}: tensor {key!r} has {end - begin} bytes for shape {shape}")
    offset = data_start + begin
    if os.path.getsize(path) < offset + (end - begin):
        raise ValueError(
            f"{path}: truncated: tensor {key!r} ends at byte {offset + end - begin}, but the file has "
            f"{os.path.getsize(path)} bytes — download it again"
        )

    def read(rows: np.ndarray | None) -> torch.Tensor:
        if sys.byteorder != "little":  # pragma: no cover - safetensors is little-endian
            from safetensors import safe_open

            with safe_open(path, framework="pt") as handle:
                full = handle.get_tensor(key)
            return full.clone() if rows is None else full[torch.from_numpy(rows)]
        return read_rows(path, offset, (shape[0], shape[1]), dtype, rows)

    return EmbeddingTensor(path, key, (shape[0], shape[1]), dtype, read)


def open_bin_tensor(
    path: str, key: str | None, *, vocab_size: int | None = None, explicit: str | None = None
) -> EmbeddingTensor:
    """The embedding tensor of a ``pytorch_model.bin`` (memory-mapped; only rows read are touched)."""
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:  # legacy (non-zip) serialization cannot be memory-mapped
            if "mmap" not in str(error) and "zip" not in str(error):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"{path}: refused: the file holds Python objects beyond tensors, which loading weights only does not "
            f"execute ({str(error).splitlines()[0]}). This source never unpickles code; if you trust the file, convert "
            "it once (load it with transformers and save_pretrained(..., safe_serialization=True)) and point the "
            "source at the safetensors copy"
        ) from None
    except Exception as error:  # noqa: BLE001 - a damaged zip or pickle surfaces as many types
        raise ValueError(
            f"{path}: not a readable PyTorch weights file ({type(error).__name__}: {error}); the file is "
            "truncated or damaged — download it again"
        ) from None
    if not isinstance(state, Mapping):
        raise ValueError(f"{path} does not hold a state dict")
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    key = key or find_embedding_key(tensors, shapes=shapes, vocab_size=vocab_size, explicit=explicit, where=path)
    tensor = tensors[key]
    if tensor.dim() != 2:
        raise ValueError(f"{path}: tensor {key!r} has shape {tuple(tensor.shape)}, not (vocabulary, dim)")

    def read_rows(rows: np.ndarray | None) -> torch.Tensor:
        return tensor.clone() if rows is None else tensor[torch.from_numpy(rows)]

    return EmbeddingTensor(path, key, (int(tensor.shape[0]), int(tensor.shape[1])), tensor.dtype, read_rows)


def locate_embedding(
    fetch: Callable[[str], str | None],
    *,
    vocab_size: int | None = None,
    tensor: str | None = None,
    where: str = "model",
) -> EmbeddingTensor:
    """The input-embedding tensor of a checkpoint whose files ``fetch(name)`` returns (None when absent), tried in
    order: the safetensors index (then only the shard holding the tensor), a single safetensors file, the ``.bin``
    index, a single ``pytorch_model.bin``."""
    for index_name, single_name, open_tensor in (
        (SAFETENSORS_INDEX, SAFETENSORS, open_safetensors_tensor),
        (BIN_INDEX, BIN, open_bin_tensor),
    ):
        index_path = fetch(index_name)
        if index_path is not None:
            with open(index_path, encoding="utf-8") as handle:
                weight_map = json.load(handle).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError(f"{index_path} has no weight_map")
            key = find_embedding_key(weight_map, explicit=tensor, where=index_path)
            shard = fetch(weight_map[key])
            if shard is None or not os.path.exists(shard):
                raise FileNotFoundError(f"{index_path} names shard {weight_map[key]!r}, which is missing")
            return open_tensor(shard, key)
        single = fetch(single_name)
        if single is not None:
            return open_tensor(single, None, vocab_size=vocab_size, explicit=tensor)
    raise FileNotFoundError(f"{where}: no {SAFETENSORS}, {SAFETENSORS_INDEX}, {BIN} or {BIN_INDEX} found")
