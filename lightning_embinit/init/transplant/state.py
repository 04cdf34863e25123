"""A transplant into a model built over the **new** vocabulary: the trained model's state dict (over the old one) is
rebuilt to the model's shapes, then written tensor by tensor — each rank its own slice of a sharded tensor, so a model
FSDP2's ``fully_shard`` or tensor parallelism has sharded takes it as it is (:func:`write_state`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lightning_embinit.init.extension.tables import SlotTables, output_layers, parameter_names, tensor_at
from lightning_embinit.init.sharding import write_whole
from lightning_embinit.init.transplant.plan import TransplantPlan
from lightning_embinit.init.transplant.tokenizers import tokenizer_view
from lightning_embinit.init.transplant.transplant import TransplantOptions, one_slot, plan_for_slot


def _state_tables(
    state: Mapping[str, torch.Tensor], module: nn.Module, target: Any, layers: Sequence[str]
) -> SlotTables:
    names = parameter_names(module, target.weight)
    key = next((name for name in names if name in state), None)
    if key is None:
        raise ValueError(f"slot {target.name!r}: the trained state has no tensor for its table (under {names})")
    vocabulary_biases = {}
    for path in target.vocabulary_biases:
        found = [name for name in parameter_names(module, tensor_at(module, path)) if name in state]
        vocabulary_biases[path] = state[found[0]]
    return SlotTables(
        state[key],
        {path: state[f"{path}.weight"] for path in layers},
        {path: state.get(f"{path}.bias") for path in layers},
        vocabulary_biases,
    )


def transplant_state(
    module: nn.Module,
    state: Mapping[str, torch.Tensor],
    tokenizer: Any,
    *,
    old_tokenizer: Any,
    slot: str | None = None,
    outputs: Sequence[str] | None = None,
    **options: Any,
) -> tuple[dict[str, torch.Tensor], TransplantPlan]:
    """The trained ``state`` (over ``old_tokenizer``'s vocabulary) with ``slot``'s tensors rebuilt for ``module``,
    which is built over ``tokenizer``'s; and the plan (its ``report``, its ``added`` rows). ``options`` as
    :func:`~lightning_embinit.init.transplant.transplant_tokenizer`'s. Nothing is written into ``module``."""
    settings = TransplantOptions(**options)
    settings.check()
    target = one_slot(module, slot)
    new = tokenizer_view(tokenizer, what="tokenizer=")
    if target.num_embeddings != len(new.tokens):
        raise ValueError(
            f"slot {target.name!r}: the model's table has {target.num_embeddings} rows, the new tokenizer "
            f"{len(new.tokens)} tokens: build the model over the new vocabulary"
        )
    layers = output_layers(module, target, outputs)
    tables = _state_tables(state, module, target, layers)
    old = tokenizer_view(old_tokenizer, what="old_tokenizer=")  # the module's own tokens are the new ones
    if len(old.tokens) > tables.embedding.shape[0]:
        raise ValueError(
            f"slot {target.name!r}: old_tokenizer= has {len(old.tokens)} tokens, the trained table "
            f"{tables.embedding.shape[0]} rows: it is not the tokenizer the trained model was trained with"
        )
    pad = old.tokens.index(old.special["pad"]) if "pad" in old.special and target.padding_idx is not None else None
    plan = plan_for_slot(module, target, new, old, layers, settings, tables=tables, old_padding=pad)
    grown = plan.assemble(tables)
    out = dict(state)
    for key in parameter_names(module, target.weight):
        out[key] = grown.embedding
    for path in layers:
        out[f"{path}.weight"] = grown.outputs[path]
        if grown.biases.get(path) is not None:
            out[f"{path}.bias"] = grown.biases[path]
    for path, bias in grown.vocabulary_biases.items():
        for key in parameter_names(module, tensor_at(module, path)):
            out[key] = bias
    return out, plan


@torch.no_grad()
def write_state(module: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy every tensor of ``state`` into ``module``'s state-dict entry of that name, in place (each rank its own
    slice of a sharded one); a name the module lacks, a tensor it lacks, or a shape that differs is refused first."""
    own = module.state_dict(keep_vars=True)  # the parameters and persistent buffers, as the module holds them
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    wrong = [name for name in set(own) & set(state) if tuple(own[name].shape) != tuple(state[name].shape)]
    if missing or unexpected or wrong:
        raise ValueError(
            f"the trained state does not fit {type(module).__name__}: missing {missing[:5]}, unexpected "
            f"{unexpected[:5]}, other shapes {sorted(wrong)[:5]}"
        )
    for name, tensor in own.items():
        write_whole(tensor, state[name].to(tensor.dtype))
