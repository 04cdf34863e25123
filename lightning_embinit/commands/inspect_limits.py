"""What ``embinit inspect`` checks in a model config before it builds anything (docs/howto/inspect.md): sizes that
make a token table (``vocab_size`` ≥ 2, a hidden size ≥ 1, ...), a padding row inside the table, a litgpt width its
heads divide, and the memory the real tables will take (:func:`check_memory`).

Each refusal is one ValueError naming where the value came from (the config, ``--model-option``, a size option),
the field, the value and the valid range.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_embinit.checks import check_int

HF_SIZES = {
    "vocab_size": "vocab_size",
    "dim": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
}
"""The Hugging Face config field each size sets (``dim`` sets ``hidden_size``); a config's ``attribute_map`` turns it
into its own name (GPT-2's ``n_embd``)."""
LITGPT_SIZES = {
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "dim": ("n_embd",),
    "num_layers": ("n_layer",),
    "num_heads": ("n_head",),
}
"""Size option → the litgpt ``Config`` fields it sets."""
SIZE_MINIMUM = {"vocab_size": 2, "dim": 1, "num_layers": 1, "num_heads": 1}
"""The least value of each size: a table of 2 rows and 1 column, one layer, one head (the size options' own)."""
MEMORY_FACTOR = 3
"""``embinit inspect``'s peak memory over the bytes of the tables it makes real, an upper bound: measured 2.0 × for a
bare 500,000 × 256 shape and 2.2 × for a LLaMA config of that table drawn and standardized (the table, a drawn copy,
the statistics' work)."""


def _option(size: str) -> str:
    return f"--{size.replace('_', '-')}"


def _size_error(where: str, field: str, value: Any, size: str, what: str) -> ValueError:
    minimum = SIZE_MINIMUM[size]
    return ValueError(
        f"{where}: {field} must be an integer ≥ {minimum} ({what}), got {value!r}; set it with {_option(size)} N"
    )


WHAT = {
    "vocab_size": "the token table's rows",
    "dim": "the token vectors' width",
    "num_layers": "the layers",
    "num_heads": "the attention heads",
}


def check_hf_sizes(config: Any, where: str, options: Mapping[str, Any]) -> None:
    """ValueError for a Hugging Face ``config`` whose vocabulary, hidden size, layers or heads is no integer in range
    (:data:`SIZE_MINIMUM`), or whose ``pad_token_id`` is no row of its table. ``where`` names the config (``--hf-config
    DIR``); a field given with ``--model-option`` (``options``) is named as given."""
    own_names = getattr(config, "attribute_map", {}) or {}
    for size, field in HF_SIZES.items():
        value = getattr(config, field, None)
        if value is None:
            continue
        own = own_names.get(field, field)
        given = next((name for name in (own, field) if name in options), None)
        origin = f"--model-option {given}={options[given]}" if given else where
        try:
            check_int(own, value, minimum=SIZE_MINIMUM[size])
        except ValueError:
            raise _size_error(origin, own, value, size, WHAT[size]) from None
    rows, pad = getattr(config, "vocab_size", None), getattr(config, "pad_token_id", None)
    if pad is not None and isinstance(rows, int):
        origin = f"--model-option pad_token_id={options['pad_token_id']}" if "pad_token_id" in options else where
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < rows:
            raise ValueError(
                f"{origin}: pad_token_id {pad!r} is not a row of the {rows}-row token table (0 … {rows - 1}); "
                "set --model-option pad_token_id=ROW, or pad_token_id=null for no padding row"
            )


def litgpt_base(name: str) -> dict[str, Any]:
    """The fields of litgpt's config ``name`` (as ``Config.from_name`` finds it: a config name, or a hub model's
    ``name`` or ``org/name``), the dataclass defaults under them; ValueError listing the closest for an unknown one."""
    from litgpt.config import Config, configs, name_to_config

    found = name_to_config.get(name)
    if found is None:
        hub = {config["hf_config"]["name"]: config for config in configs}
        hub |= {f"{c['hf_config']['org']}/{c['hf_config']['name']}": c for c in configs}
        found = hub.get(name)
    if found is None:
        close = difflib.get_close_matches(name, list(name_to_config), n=3)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ValueError(f"unknown --litgpt-config {name!r}{hint} (litgpt.config.name_to_config lists them all)")
    defaults = {f.name: f.default for f in dataclasses.fields(Config) if f.default is not dataclasses.MISSING}
    return {**defaults, **found}


def check_litgpt_sizes(name: str, fields: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    """ValueError for litgpt config ``name`` with ``fields`` set (the size options' and ``options``) when a size is
    no integer in range, or ``n_embd`` is no multiple of ``n_head`` (without a ``head_size``), or ``n_head`` of
    ``n_query_groups``: litgpt's own asserts, named."""
    merged = {**litgpt_base(name), **fields}
    where = f"--litgpt-config {name}"
    for size, names in LITGPT_SIZES.items():
        for field in names:
            value = merged.get(field)
            if value is None and field == "padded_vocab_size":
                continue
            origin = f"--model-option {field}={options[field]}" if field in options else where
            try:
                check_int(field, value, minimum=SIZE_MINIMUM[size])
            except ValueError:
                raise _size_error(origin, field, value, size, WHAT[size]) from None
    width, heads, groups = merged["n_embd"], merged["n_head"], merged.get("n_query_groups")
    if merged.get("head_size") is None and width % heads:
        raise ValueError(
            f"{where}: n_embd {width} (--dim) is not a multiple of n_head {heads} (--num-heads), as litgpt's head size "
            f"n_embd / n_head must be; choose --dim {max(heads, width // heads * heads)} or "
            f"{(width // heads + 1) * heads}, or set --model-option head_size=N"
        )
    if groups is not None and (not isinstance(groups, int) or groups < 1 or heads % groups):
        raise ValueError(
            f"{where}: n_head {heads} is not a multiple of n_query_groups {groups!r}; set --model-option "
            "n_query_groups=G with G dividing the heads"
        )


# ---------------------------------------------------------------------------------------------- memory
def available_memory() -> int | None:
    """Bytes the machine can give now without swapping: ``MemAvailable`` of ``/proc/meminfo`` (Linux), else the free
    physical pages (``os.sysconf``), else None (unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(count: float) -> str:
    """``32768000000000`` → ``32.8 TB`` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.3g} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1000
    return f"{count:.3g} PB"  # pragma: no cover - the loop returns at TB


def check_memory(tables: Mapping[str, tuple[tuple[int, ...], Any]]) -> None:
    """ValueError when the tables ``embinit inspect`` would make real (name → (shape, torch dtype)) need, times
    :data:`MEMORY_FACTOR`, more than :func:`available_memory`; nothing is checked when that is unknown."""
    import torch

    sizes = {}
    for name, (shape, dtype) in tables.items():
        count = 1
        for extent in shape:
            count *= int(extent)
        sizes[name] = count * max(torch.empty((), dtype=dtype).element_size(), 4)  # the statistics work in float32
    needed, available = sum(sizes.values()) * MEMORY_FACTOR, available_memory()
    if available is None or needed <= available:
        return
    largest = max(sizes, key=sizes.__getitem__)
    shape, dtype = tables[largest]
    described = " × ".join(f"{int(extent):,}" for extent in shape)
    others = f" and {len(sizes) - 1} smaller" if len(sizes) > 1 else ""
    raise ValueError(
        f"the table {largest!r} ({described} {str(dtype).removeprefix('torch.')}){others} would take "
        f"{human_bytes(sum(sizes.values()))}, and inspect about {MEMORY_FACTOR} × that ({human_bytes(needed)}): more "
        f"than the {human_bytes(available)} this machine has available; inspect a smaller --vocab-size or --dim"
    )
