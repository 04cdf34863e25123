"""Other tables a model looks its token ids up in (NeoMME's ``value_embeddings``, Gemma 3n/4's
``embed_tokens_per_layer``): they are not the token table (their rows never reach the first layer as s·E + P, so
the callback leaves them alone), but they follow its vocabulary, as transformers' ``resize_token_embeddings`` grows
them. Found by the probe (another ``nn.Embedding`` that looked the same ids up, with as many rows) or by name.

When the token table's vocabulary changes, :func:`follower` gives each companion one row per new token: the old row
of the token that row now holds (found by matching the new table's rows bit for bit against the old table's, so a
reordered vocabulary is followed too), and the mean of the old rows for a new token (transformers' ``mean_resizing``
draws around that mean).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

NAMES = ("value_embeddings", "embed_tokens_per_layer")
SIZE_FIELDS = ("vocab_size_per_layer_input",)
"""Config fields that count a companion's rows (kept in step when they did before)."""
CHUNK = 4096


def by_name(model: nn.Module, table: nn.Embedding) -> list[str]:
    """Companions by name: ``nn.Embedding`` modules named in ``NAMES`` with as many rows as ``table``."""
    return [
        path
        for path, module in model.named_modules()
        if isinstance(module, nn.Embedding)
        and module.weight is not table.weight
        and path.rpartition(".")[2] in NAMES
        and module.num_embeddings == table.num_embeddings
    ]


def _integer_view(rows: torch.Tensor) -> torch.Tensor:
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[rows.element_size()]
    return rows.contiguous().view(bits).to(torch.int64)


def _keys(rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One int64 per row from its bits (equal rows, equal keys; wrapping integer arithmetic, so order-free)."""
    return torch.cat(
        [(_integer_view(rows[i : i + CHUNK]) * weights).sum(dim=1) for i in range(0, rows.shape[0], CHUNK)]
    )


def row_sources(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """For each row of ``new``: the index of a bit-identical row of ``old``, else −1."""
    weights = torch.randint(1, 2**31, (old.shape[1],), generator=torch.Generator().manual_seed(0)) * 2 + 1
    weights = weights.to(old.device)
    old_keys, new_keys = _keys(old.detach(), weights), _keys(new.detach(), weights)
    order = old_keys.argsort()
    ranked = old_keys[order]
    position = torch.searchsorted(ranked, new_keys).clamp(max=ranked.numel() - 1)
    source = order[position]
    same = ranked[position] == new_keys
    for start in range(0, new.shape[0], CHUNK):
        part = slice(start, start + CHUNK)
        candidates = _integer_view(old.detach()[source[part]])
        same[part] &= (candidates == _integer_view(new.detach()[part])).all(dim=1)
    return torch.where(same, source, torch.full_like(source, -1))


def follower(model: nn.Module, table: nn.Embedding, paths: Sequence[str]) -> Callable[[int, torch.Tensor | None], None]:
    """What to run after ``table`` was given a new vocabulary: grow each companion at ``paths`` in step (module
    docstring) and keep :data:`SIZE_FIELDS` counting them. Reads the table as it is now (the old vocabulary).
    ``follow(size, source_ids)``: each new row's old row (−1 for a new token), as the writer planned it; without them,
    found by matching the rows bit for bit (:func:`row_sources`)."""
    old = table.weight

    def follow(size: int, source_ids: torch.Tensor | None = None) -> None:
        new = table.weight
        if new is old or not paths:
            return
        sources = row_sources(old, new) if source_ids is None else source_ids.to(old.device)
        for path in paths:
            companion = model.get_submodule(path)
            if companion.weight.shape[0] == old.shape[0]:
                _grow(model, companion, sources, size)

    return follow


@torch.no_grad()
def _grow(model: nn.Module, companion: nn.Embedding, sources: torch.Tensor, size: int) -> None:
    previous = companion.weight
    rows = previous.detach()
    kept = sources >= 0
    grown = rows.mean(dim=0, dtype=torch.float32).to(rows.dtype).expand(sources.shape[0], -1).clone()
    grown[kept] = rows[sources[kept]]
    replacement = nn.Parameter(grown, requires_grad=previous.requires_grad)
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.weight is previous:
            module.weight, module.num_embeddings = replacement, size
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for field in SIZE_FIELDS:
        if getattr(config, field, None) == rows.shape[0]:
            setattr(config, field, size)
