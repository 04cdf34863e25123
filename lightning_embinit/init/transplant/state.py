"""A transplant into a model built over the **new** vocabulary: the trained model's state dict (over the old one) is
rebuilt to the model's shapes, then written tensor by tensor — each rank its own slice of a sharded tensor, so a model
FSDP2's ``fully_shard`` or tensor parallelism has sharded takes it as it is (:func:`write_state`).
:func:`built_over_new` decides between this and a swap in place; :func:`checkpoint_old_tokenizer` finds the old
tokenizer a trained system's checkpoint keeps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lightning_embinit.init.extension.checkpoint import extend_state, recorded_vocabularies, state_tables
from lightning_embinit.init.extension.tables import output_layers, state_key
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.sharding import write_whole
from lightning_embinit.init.transplant.plan import TransplantPlan
from lightning_embinit.init.transplant.tokenizers import tokenizer_view
from lightning_embinit.init.transplant.transplant import TransplantOptions, one_slot, plan_for_slot


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
    tables = state_tables(state, module, target, layers)
    old = tokenizer_view(old_tokenizer, what="old_tokenizer=")  # the module's own tokens are the new ones
    if len(old.tokens) > tables.embedding.shape[0]:
        raise ValueError(
            f"slot {target.name!r}: old_tokenizer= has {len(old.tokens)} tokens, the trained table "
            f"{tables.embedding.shape[0]} rows: it is not the tokenizer the trained model was trained with"
        )
    pad = old.tokens.index(old.special["pad"]) if "pad" in old.special and target.padding_idx is not None else None
    plan = plan_for_slot(module, target, new, old, layers, settings, tables=tables, old_padding=pad)
    out = dict(state)
    extend_state(out, module, target, layers, plan)
    return out, plan


def built_over_new(
    module: nn.Module, target: EmbeddingSlot, state: Mapping[str, torch.Tensor], tokens: Sequence[str]
) -> bool:
    """Whether ``module`` is built over the new vocabulary (``tokens``), not over the trained ``state``'s: its table
    has a row per new token, and either the state's table has another size or the model names the new tokens. Then
    the transplant rebuilds the state (:func:`transplant_state`); else the state is loaded and the model swapped in
    place."""
    if target.num_embeddings != len(tokens):
        return False
    key = state_key(state, module, target.weight)
    named = target.tokens is not None and list(target.tokens) == list(tokens)
    return named or key is None or state[key].shape[0] != target.num_embeddings


def checkpoint_old_tokenizer(module: nn.Module, target: EmbeddingSlot, checkpoint: Mapping[str, Any]) -> Any | None:
    """The old tokenizer a trained system's checkpoint keeps for ``target``: its ``tokenizer`` hyperparameter when that
    is a package tokenizer's config (a mapping, which the caller builds: ``build_tokenizer``), else the tokenizer or
    token strings the system's ``checkpoint_vocabularies`` or the ``embinit`` record keep for the slot (or for the
    only slot they name); None when it keeps none."""
    hparams = checkpoint.get("hyper_parameters") or {}
    if isinstance(hparams.get("tokenizer"), Mapping):
        return hparams["tokenizer"]
    recorded = recorded_vocabularies(module, checkpoint)
    tokens, tokenizer = recorded.get(target.name, (None, None))
    if tokenizer is None and tokens is None and len(recorded) == 1:
        tokens, tokenizer = next(iter(recorded.values()))
    if tokenizer is not None:
        return tokenizer
    return None if tokens is None else list(tokens)


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
