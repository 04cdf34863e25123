"""What a model family says about its token tables, and the registry of families (torch only).

A family adapter recognizes a module of a known architecture wherever it sits and describes each of its token tables
as the model uses it (:class:`TokenTable`, paths relative to that module); position and token-type tables are never
token tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from lightning_embinit.init.registry import Registry


@dataclass(frozen=True)
class TokenTable:
    """One token table of a recognized model, described as the model uses it.

    ``positions`` says in words what the model adds to the scaled token vectors ("learned table transformer.wpe",
    "none: rotary embeddings in attention", ...); ``positional_rows`` returns that additive (L, D) matrix, or None.
    ``tied`` names output layers sharing the table's weight (also torchtune's ``TiedLinear``, which does not hold it);
    ``output_layers`` the untied output layers over the same vocabulary (their biases follow them);
    ``vocabulary_biases`` the other tensors with one entry per token along their last dimension (a tied head's bias,
    BART's ``final_logits_bias``); ``after_resize(n, source_ids)`` keeps the model's record of its vocabulary size,
    and the tables that follow the token table, in step (``source_ids``: each new row's old row, −1 for a new token).
    ``input_scale_found_by`` and ``positions_found_by`` say in words how each was found (names and flags, the probe
    of :mod:`~lightning_embinit.init.families.probe`, or both agreeing).
    """

    path: str
    input_scale: float
    positions: str
    positional_rows: Callable[[], torch.Tensor | None] | None = None
    padding_idx: int | None = None
    tied: tuple[str, ...] = ()
    output_layers: tuple[str, ...] = ()
    vocabulary_biases: tuple[str, ...] = ()
    after_resize: Callable[[int, torch.Tensor | None], None] | None = None
    input_scale_found_by: str | None = None
    positions_found_by: str | None = None


@dataclass(frozen=True)
class Family:
    """A model family: whether a module is one of its models, and that model's token tables."""

    name: str
    matches: Callable[[nn.Module], bool]
    token_tables: Callable[[nn.Module], Sequence[TokenTable]]
    describe: Callable[[nn.Module], str]


FAMILIES: Registry[Family] = Registry("model family")
"""Model families by the name the report shows (``hugging_face``, ``litgpt``, ``torchtune``, ``nanogpt``)."""


def family_of(module: nn.Module) -> Family | None:
    """The registered family ``module`` belongs to, or None."""
    for name in FAMILIES:
        family = FAMILIES.create(name)
        if family.matches(module):
            return family
    return None


def recognized_models(root: nn.Module) -> list[tuple[str, nn.Module, Family]]:
    """(path, module, family) of the outermost modules inside ``root`` (``root`` included) that a family recognizes."""
    found: list[tuple[str, nn.Module, Family]] = []

    def visit(path: str, module: nn.Module) -> None:
        family = family_of(module)
        if family is not None:
            found.append((path, module, family))
            return
        for name, child in module.named_children():
            visit(f"{path}.{name}" if path else name, child)

    visit("", root)
    return found


def join(prefix: str, path: str) -> str:
    """``prefix.path`` (just ``path`` at the root)."""
    return f"{prefix}.{path}" if prefix else path


def module_path(root: nn.Module, target: nn.Module) -> str:
    """The dotted path of ``target`` inside ``root``."""
    for path, module in root.named_modules(remove_duplicate=False):
        if module is target:
            return path
    raise ValueError(f"{type(target).__name__} is not a submodule of {type(root).__name__}")


def learned_rows(table: nn.Embedding, offset: int = 0, *extra: nn.Embedding) -> Callable[[], torch.Tensor]:
    """The rows a learned position table adds from row ``offset`` on, plus each ``extra`` table's row 0."""

    def rows() -> torch.Tensor:
        added = table.weight.detach()[offset:]
        for other in extra:
            added = added + other.weight.detach()[0]
        return added

    return rows
