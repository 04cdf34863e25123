"""How a model names its embedding tables ("slots"): :class:`EmbeddingHost`'s ``embedding_slots()``, else
:func:`discover_slots` (known model families, else every ``nn.Embedding``), or :func:`slot_from_path`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from lightning_embinit.init.families import TokenTable, join, recognized_models

ANY_EMBEDDING = "every nn.Embedding (no known model family)"
"""The ``family`` of slots found in a module with no recognized model: its tables are guesses."""


@dataclass
class EmbeddingSlot:
    """One embedding table of a model and what is known about it.

    ``input_scale`` multiplies the token vectors before the positional encoding is added (√D by default,
    docs/concepts.md#transformer-input); ``positional_encoding`` returns that (L, D) matrix (``None``: none added).
    ``tied_modules`` are output layers whose weight *is* this table's. ``tokens`` names the rows by id; rows past the
    last token are out-of-vocabulary rows for pre-trained sources. A known family's slot also carries ``family``,
    ``positions`` (in words), and what follows the table when its vocabulary changes: the untied ``output_layers``, the
    ``vocabulary_biases`` (one entry per token) and ``after_resize(n, source_ids)`` (the model's vocabulary size and
    the tables that follow), and how its scale and positions were found (``input_scale_found_by``,
    ``positions_found_by``: names and flags, or a probe of the model's own forward).
    """

    name: str
    embedding: nn.Embedding
    tokens: Sequence[str] | None = None
    padding_idx: int | None = None
    input_scale: float | None = None
    positional_encoding: Callable[[], torch.Tensor | None] | None = None
    tied_modules: tuple[str, ...] = ()
    special_tokens: Mapping[str, str] = field(default_factory=dict)
    family: str | None = None
    positions: str | None = None
    output_layers: tuple[str, ...] = ()
    vocabulary_biases: tuple[str, ...] = ()
    after_resize: Callable[[int, torch.Tensor | None], None] | None = None
    input_scale_found_by: str | None = None
    positions_found_by: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.embedding, nn.Embedding):
            raise ValueError(f"slot {self.name!r}: expected an nn.Embedding, got {type(self.embedding).__name__}")
        if self.padding_idx is None:
            self.padding_idx = self.embedding.padding_idx
        if self.input_scale is None:
            self.input_scale = math.sqrt(self.embedding_dim)
        if self.tokens is not None and len(self.tokens) > self.num_embeddings:
            raise ValueError(
                f"slot {self.name!r}: {len(self.tokens)} token strings for a table of only {self.num_embeddings} rows"
            )

    @property
    def num_embeddings(self) -> int:
        return self.embedding.num_embeddings

    @property
    def embedding_dim(self) -> int:
        return self.embedding.embedding_dim

    @property
    def weight(self) -> nn.Parameter:
        return self.embedding.weight

    @property
    def is_tied(self) -> bool:
        return bool(self.tied_modules)


@runtime_checkable
class EmbeddingHost(Protocol):
    """A module that names its embedding tables."""

    def embedding_slots(self) -> Mapping[str, EmbeddingSlot]:
        """Slot name → slot, in a stable order."""
        ...


def tied_modules_of(root: nn.Module, embedding: nn.Embedding) -> tuple[str, ...]:
    """Dotted paths of the modules (other than ``embedding``) whose ``weight`` is the embedding's weight."""
    return tuple(
        name
        for name, module in root.named_modules()
        if module is not embedding and getattr(module, "weight", None) is embedding.weight
    )


def slot_from_path(root: nn.Module, path: str, *, name: str | None = None, **options: object) -> EmbeddingSlot:
    """A slot for the ``nn.Embedding`` at dotted ``path`` inside ``root`` (``"model.embeddings.word_embeddings"``)."""
    try:
        module = root.get_submodule(path)
    except AttributeError:
        raise ValueError(f"no module at path {path!r} in {type(root).__name__}") from None
    if not isinstance(module, nn.Embedding):
        raise ValueError(f"module at {path!r} is a {type(module).__name__}, not an nn.Embedding")
    options.setdefault("tied_modules", tied_modules_of(root, module))
    return EmbeddingSlot(name=name or path, embedding=module, **options)  # type: ignore[arg-type]


def family_slot(root: nn.Module, prefix: str, family: str, table: TokenTable) -> EmbeddingSlot:
    """The slot of a recognized model's token table, named by its path inside ``root``."""
    path = join(prefix, table.path)
    embedding = root.get_submodule(path)
    return EmbeddingSlot(
        name=path,
        embedding=embedding,
        padding_idx=table.padding_idx,
        input_scale=table.input_scale,
        positional_encoding=table.positional_rows,
        tied_modules=tuple(dict.fromkeys([*tied_modules_of(root, embedding), *(join(prefix, t) for t in table.tied)])),
        family=family,
        positions=table.positions,
        output_layers=tuple(join(prefix, layer) for layer in table.output_layers),
        vocabulary_biases=tuple(join(prefix, bias) for bias in table.vocabulary_biases),
        after_resize=table.after_resize,
        input_scale_found_by=table.input_scale_found_by,
        positions_found_by=table.positions_found_by,
    )


def discover_slots(root: nn.Module) -> dict[str, EmbeddingSlot]:
    """Slots for a module: a host's own, else every known model's token tables, else every ``nn.Embedding``."""
    if isinstance(root, EmbeddingHost):
        slots = dict(root.embedding_slots())
    elif recognized := recognized_models(root):
        slots = {}
        for prefix, model, family in recognized:
            for table in family.token_tables(model):
                slot = family_slot(root, prefix, f"{family.name}: {family.describe(model)}", table)
                slots[slot.name] = slot
    else:
        slots = {
            path: slot_from_path(root, path, family=ANY_EMBEDDING)
            for path, module in root.named_modules()
            if isinstance(module, nn.Embedding)
        }
    if not slots:
        raise ValueError(
            f"{type(root).__name__} has no embedding tables: it neither implements "
            "EmbeddingHost.embedding_slots() nor contains an nn.Embedding (tables that a LightningModule creates in "
            "configure_model() exist only once Lightning has called it)"
        )
    return slots


def select_slots(root: nn.Module, names: Sequence[str] | None) -> dict[str, EmbeddingSlot]:
    """The slots named in ``names`` (all when ``None``); a name may also be a dotted module path."""
    available = discover_slots(root)
    if names is None:
        return available
    selected: dict[str, EmbeddingSlot] = {}
    for name in names:
        if name in available:
            selected[name] = available[name]
            continue
        try:
            selected[name] = slot_from_path(root, name)
        except ValueError:
            raise ValueError(
                f"unknown slot {name!r}; known slots: {', '.join(available)} (or a dotted path to an nn.Embedding)"
            ) from None
    return selected
