"""The tensors a vocabulary extension reads and writes: a slot's embedding (and every module tied to it), each untied
output layer's weight rows and bias entries, and the slot's other vocabulary biases (one entry per token along the
last dimension). Writing replaces each tensor wherever the model holds it, so references to the modules stay valid;
an optimizer made before holds the old tensors, so make it after.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from lightning_embinit.init.host import EmbeddingSlot, select_slots, tied_modules_of
from lightning_embinit.init.statistics import rows_without


@dataclass
class SlotTables:
    """A slot's vocabulary-indexed tensors: the (N, D) embedding, per untied output layer (dotted path) its (N, D′)
    weight and its (N,) bias (None when it has none), and the other vocabulary biases by path (…, N)."""

    embedding: torch.Tensor
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    biases: dict[str, torch.Tensor | None] = field(default_factory=dict)
    vocabulary_biases: dict[str, torch.Tensor] = field(default_factory=dict)


def old_token_rows(tensor: torch.Tensor, named: int | None, padding_idx: int | None) -> torch.Tensor:
    """The rows (first dimension) of the old tokens: the first ``named`` (all when None; the rest are a padded
    table's rows without a token), the padding row left out."""
    return rows_without(tensor if named is None else tensor[:named], padding_idx)


def output_layers(root: nn.Module, slot: EmbeddingSlot, given: Sequence[str] | None = None) -> tuple[str, ...]:
    """The untied output layers whose rows follow ``slot``'s vocabulary: ``given``, else the host's
    ``vocabulary_outputs()[slot]``, else the ones the slot's model family names (never a layer by its width alone).
    Each must be an ``nn.Linear`` with one output per row of the table, not tied to it (``ValueError`` otherwise)."""
    if given is None:
        declared = getattr(root, "vocabulary_outputs", None)
        given = tuple(declared().get(slot.name, ())) if callable(declared) else slot.output_layers
    for path in given:
        try:
            module = root.get_submodule(path)
        except AttributeError:
            raise ValueError(f"slot {slot.name!r}: no output layer at {path!r} in {type(root).__name__}") from None
        if not isinstance(module, nn.Linear) or module.out_features != slot.num_embeddings:
            raise ValueError(
                f"slot {slot.name!r}: output layer {path!r} must be an nn.Linear with one output per row of "
                f"the table ({slot.num_embeddings}); got {module}"
            )
        if module.weight is slot.weight:
            raise ValueError(
                f"slot {slot.name!r}: {path!r} is tied to the table (it follows it anyway); name only untied layers"
            )
    return tuple(given)


def unclaimed_layers(
    root: nn.Module, slot: EmbeddingSlot, layers: Sequence[str], claimed: Iterable[str] = ()
) -> list[str]:
    """``nn.Linear`` layers as wide as the vocabulary, neither tied to the table nor among ``layers`` or ``claimed``
    (another slot's output layers: an encoder–decoder's decoder head belongs to the decoder's table)."""
    taken = {*layers, *claimed}
    return [
        path
        for path, module in root.named_modules()
        if isinstance(module, nn.Linear)
        and module.out_features == slot.num_embeddings
        and module.weight is not slot.weight
        and path not in taken
    ]


def warn_unclaimed(root: nn.Module, slot: EmbeddingSlot, layers: Sequence[str], *, stacklevel: int = 2) -> None:
    """Warn about the :func:`unclaimed_layers` of ``slot`` (the other slots' output layers and tied modules are
    theirs): each keeps its size when the vocabulary changes. ``stacklevel``: as the caller would pass it."""
    others = [other for name, other in select_slots(root, None).items() if name != slot.name]
    claimed = [path for other in others for path in (*other.output_layers, *other.tied_modules)]
    if unclaimed := unclaimed_layers(root, slot, layers, claimed):
        warnings.warn(
            f"slot {slot.name!r}: {', '.join(unclaimed)} has one output per row of the table but is neither tied to "
            "it nor named as its output layer, so it keeps its size; pass outputs=[...] if it is the output layer",
            stacklevel=stacklevel + 1,
        )


def read_tables(root: nn.Module, slot: EmbeddingSlot, outputs: Iterable[str]) -> SlotTables:
    """The slot's current tensors (detached views, not copies)."""
    layers = {path: root.get_submodule(path) for path in outputs}
    return SlotTables(
        slot.weight.detach(),
        {path: layer.weight.detach() for path, layer in layers.items()},
        {path: None if layer.bias is None else layer.bias.detach() for path, layer in layers.items()},
        {path: tensor_at(root, path).detach() for path in slot.vocabulary_biases},
    )


def tensor_at(root: nn.Module, path: str) -> torch.Tensor:
    """The parameter or buffer at dotted ``path``."""
    module_path, _, name = path.rpartition(".")
    module = root.get_submodule(module_path)
    found = module._parameters.get(name, module._buffers.get(name))
    if found is None:
        raise ValueError(f"no parameter or buffer at {path!r} in {type(root).__name__}")
    return found


def vocabulary_tensors(root: nn.Module, slot: EmbeddingSlot, outputs: Iterable[str]) -> dict[str, nn.Parameter]:
    """The slot's parameters whose rows follow the vocabulary, by what they are."""
    tensors = {f"slot {slot.name!r}": slot.weight}
    for path in outputs:
        layer = root.get_submodule(path)
        tensors[f"output layer {path!r}"] = layer.weight
        if layer.bias is not None:
            tensors[f"output layer {path!r} bias"] = layer.bias
    for path in slot.vocabulary_biases:
        tensors[f"vocabulary bias {path!r}"] = tensor_at(root, path)
    return tensors


def check_unhooked(root: nn.Module, slot: EmbeddingSlot, outputs: Iterable[str]) -> None:
    """Refuse a weight with gradient hooks (a frozen-rows mask), which have the old row count."""
    for what, weight in vocabulary_tensors(root, slot, outputs).items():
        if getattr(weight, "_backward_hooks", None):
            raise ValueError(
                f"{what} has gradient hooks (a frozen pre-trained-rows mask from trainable='pretrained_rows' or "
                "freeze_rows): extending it would drop the mask silently. Extend the vocabulary before freezing rows, "
                "or build the model without the mask (trainable=True) and freeze after extending"
            )


def parameter_names(root: nn.Module, parameter: torch.Tensor) -> list[str]:
    """Every name ``parameter`` (or buffer) has in ``root``'s state dict (a tied weight has several)."""
    named = [*root.named_parameters(remove_duplicate=False), *root.named_buffers(remove_duplicate=False)]
    return [name for name, p in named if p is parameter]


def state_key(state: Mapping[str, torch.Tensor], root: nn.Module, tensor: torch.Tensor) -> str | None:
    """The first of ``tensor``'s names in ``root`` (:func:`parameter_names`) that the state dict ``state`` holds."""
    return next((name for name in parameter_names(root, tensor) if name in state), None)


def _replace(root: nn.Module, old: torch.Tensor, new: torch.Tensor) -> None:
    """Put ``new`` wherever ``root`` holds ``old``: one shared parameter (ties survive), or the buffer."""
    replacement = nn.Parameter(new, requires_grad=old.requires_grad) if isinstance(old, nn.Parameter) else new
    for module in root.modules():
        for store in (module._parameters, module._buffers):
            for name, held in store.items():
                if held is old:
                    store[name] = replacement


@torch.no_grad()
def write_tables(root: nn.Module, slot: EmbeddingSlot, tables: SlotTables, padding_idx: int | None) -> None:
    """Put ``tables`` into the slot's modules as new parameters; sizes and the padding index follow."""
    old = slot.weight
    weight = nn.Parameter(tables.embedding, requires_grad=old.requires_grad)
    for path in tied_modules_of(root, slot.embedding):
        tied = root.get_submodule(path)
        tied.weight = weight
        for attribute in ("out_features", "num_embeddings"):
            if hasattr(tied, attribute):
                setattr(tied, attribute, tables.embedding.shape[0])
    slot.embedding.weight = weight
    slot.embedding.num_embeddings = tables.embedding.shape[0]
    slot.embedding.padding_idx = padding_idx
    for path, rows in tables.outputs.items():
        layer = root.get_submodule(path)
        layer.weight = nn.Parameter(rows, requires_grad=layer.weight.requires_grad)
        if layer.bias is not None:
            layer.bias = nn.Parameter(tables.biases[path], requires_grad=layer.bias.requires_grad)
        layer.out_features = rows.shape[0]
    for path, grown in tables.vocabulary_biases.items():
        _replace(root, tensor_at(root, path), grown)


@torch.no_grad()
def new_token_mass(
    states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, added: torch.Tensor, *, chunk: int = 1024
) -> float:
    """Mean over the K states h (rows of ``states``: what meets the output matrix, after the final norm and the head's
    own transform) of Σ_{j new} softmax(h·Wᵀ + b)_j: the probability the new tokens take before any update."""
    states = states.reshape(-1, states.shape[-1]).float()
    matrix, offset = weight.float().to(states.device), None if bias is None else bias.float().to(states.device)
    mask = added.to(states.device)
    total = 0.0
    for start in range(0, states.shape[0], chunk):
        logits = states[start : start + chunk] @ matrix.T
        if offset is not None:
            logits = logits + offset
        log_p = logits.log_softmax(dim=-1)
        total += float(log_p[:, mask].logsumexp(dim=-1).exp().sum()) if bool(mask.any()) else 0.0
    return total / max(states.shape[0], 1)
