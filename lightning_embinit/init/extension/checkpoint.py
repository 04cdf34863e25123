"""A vocabulary extension read from a trained model's checkpoint: its vocabularies and its tensors in a state dict.

A slot's old tokens come from ``old_tokens=``, else the checkpoint's ``embinit`` record, else the system's
hyperparameters (``checkpoint_vocabularies``); the new ones from ``tokens=``, else the datamodule's, else the model's.
When the model is built over the new vocabulary, the checkpoint's tensors are extended in its state dict
(:func:`state_tables`, :func:`extend_state`: a transplant's plan too); :func:`record_vocabularies` writes the record.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lightning_embinit.init.extension.extend import check_host_follows, token_list
from lightning_embinit.init.extension.plan import ExtensionPlan, plan_extension
from lightning_embinit.init.extension.rules import splitter_of
from lightning_embinit.init.extension.tables import (
    SlotTables,
    output_layers,
    parameter_names,
    read_tables,
    state_key,
    tensor_at,
)
from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.sources.checkpoint import CHECKPOINT_KEY


@dataclass
class ExtensionJob:
    """One slot's extension: its vocabularies, tokenizers and untied output layers, and whether its old tensors are the
    checkpoint's state (the model is built over the new vocabulary) or the model's own."""

    slot: EmbeddingSlot
    old_tokens: list[str]
    new_tokens: list[str]
    tokenizer: Any
    old_tokenizer: Any
    outputs: tuple[str, ...]
    into_state: bool
    old_padding: int | None


def extension_jobs(
    module: nn.Module,
    checkpoint: Mapping[str, Any] | None,
    *,
    slots: Sequence[str] | None = None,
    tokens: Any = None,
    old_tokens: Any = None,
    old_tokenizer: Any = None,
    datamodule: Any = None,
) -> dict[str, ExtensionJob]:
    """Every selected slot's job, its vocabularies checked against the table; nothing is written."""
    recorded = recorded_vocabularies(module, checkpoint)
    jobs = {}
    for name, slot in select_slots(module, slots).items():
        new_tokens, tokenizer = new_vocabulary(name, slot, tokens, datamodule)
        old, recorded_tokenizer = old_vocabulary(name, slot, old_tokens, recorded, checkpoint is not None)
        rows = checkpoint_rows(module, slot, checkpoint)
        into_state = rows is not None and slot.num_embeddings != rows
        if into_state and slot.num_embeddings < len(new_tokens):
            raise ValueError(
                f"slot {name!r}: the model's table has {slot.num_embeddings} rows, the checkpoint's {rows} (for "
                f"{len(old)} tokens) and the new vocabulary {len(new_tokens)} tokens: build the model over the old or "
                "the new vocabulary"
            )
        old_padding = slot.padding_idx
        if into_state and slot.padding_idx is not None:
            if (padding := new_tokens[slot.padding_idx]) not in old:
                raise ValueError(f"slot {name!r}: the old vocabulary has no padding token {padding!r}")
            old_padding = old.index(padding)
        jobs[name] = ExtensionJob(
            slot,
            old,
            new_tokens,
            tokenizer or datamodule_tokenizer(datamodule, name, new_tokens),
            recorded_tokenizer if old_tokenizer is None else old_tokenizer,
            output_layers(module, slot),
            into_state,
            old_padding,
        )
    return jobs


def plan_job(
    module: nn.Module, job: ExtensionJob, state: Mapping[str, torch.Tensor] | None, options: Mapping[str, Any]
) -> ExtensionPlan:
    """The job's checked plan from the model's tensors or the checkpoint's ``state``; a ``seed`` of None is drawn."""
    old = (
        read_tables(module, job.slot, job.outputs)
        if state is None
        else state_tables(state, module, job.slot, job.outputs)
    )
    options = dict(options)
    if options["seed"] is None:
        options["seed"] = secrets.randbelow(2**31)
    plan = plan_extension(
        old,
        slot=job.slot.name,
        old_tokens=job.old_tokens,
        new_tokens=job.new_tokens,
        padding_idx=job.old_padding,
        special_tokens=dict(job.slot.special_tokens),
        split=splitter_of(job.old_tokenizer, job.old_tokens),
        **options,
    )
    if job.into_state and plan.num_rows != job.slot.num_embeddings:
        raise ValueError(
            f"slot {job.slot.name!r}: the checkpoint's table extended to the {len(job.new_tokens)} new tokens has "
            f"{plan.num_rows} rows (a padded table keeps its rows past its tokens), the model's "
            f"{job.slot.num_embeddings}: build the model over the old vocabulary (it is extended in place), or with "
            f"{plan.num_rows} rows"
        )
    check_host_follows(module, plan)
    plan.report["seed"] = options["seed"]
    return plan


def checkpoint_rows(module: nn.Module, slot: EmbeddingSlot, checkpoint: Mapping[str, Any] | None) -> int | None:
    """The rows of the checkpoint's tensor for ``slot``'s table (None without a checkpoint, or when it has none)."""
    state = (checkpoint or {}).get("state_dict") or {}
    key = state_key(state, module, slot.weight)
    return None if key is None else int(state[key].shape[0])


def datamodule_tokenizer(datamodule: Any, slot: str, tokens: Sequence[str]) -> Any:
    """The datamodule's tokenizer of ``slot`` (``<slot>_tokenizer``, ``src_tokenizer`` for ``shared``, ``tokenizer``)
    whose tokens are ``tokens``: what a translation or classification system keeps after the extension."""
    for attribute in (f"{slot}_tokenizer", "src_tokenizer" if slot == "shared" else "", "tokenizer"):
        found = getattr(datamodule, attribute, None) if attribute else None
        if isinstance(getattr(found, "tokens", None), list) and list(found.tokens) == list(tokens):
            return found
    return None


def recorded_vocabularies(module: nn.Module, checkpoint: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """Slot → (old tokens, old tokenizer) that a checkpoint's ``embinit`` key or hyperparameters record."""
    if checkpoint is None:
        return {}
    found: dict[str, tuple[Any, Any]] = {}
    reader = getattr(type(module), "checkpoint_vocabularies", None)
    if callable(reader):
        found.update(reader(checkpoint.get("hyper_parameters") or {}))
    for name, record in ((checkpoint.get(CHECKPOINT_KEY) or {}).get("slots") or {}).items():
        if record.get("tokens") is not None:
            found[name] = (list(record["tokens"]), found.get(name, (None, None))[1])
    return found


def old_vocabulary(
    name: str, slot: EmbeddingSlot, given: Any, recorded: Mapping[str, tuple[Any, Any]], from_checkpoint: bool
) -> tuple[list[str], Any]:
    """The slot's old tokens (and the checkpoint's tokenizer, when it keeps one)."""
    spec = given.get(name) if isinstance(given, Mapping) else given
    if spec is not None:
        return token_list(spec)[0], None
    if from_checkpoint:
        tokens, tokenizer = recorded.get(name, (None, None))
        if tokens is None:
            raise ValueError(
                f"slot {name!r}: the checkpoint records no token strings for it (no `embinit` record and no "
                "vocabulary hyperparameter): pass old_tokens="
            )
        return list(tokens), tokenizer
    if slot.tokens is None:
        raise ValueError(f"slot {name!r} names no tokens: pass old_tokens= (its token strings by id)")
    return list(slot.tokens), None


def new_vocabulary(name: str, slot: EmbeddingSlot, given: Any, datamodule: Any) -> tuple[list[str], Any]:
    """The slot's new tokens (and the tokenizer, when ``tokens=`` gave one)."""
    spec = given.get(name) if isinstance(given, Mapping) else given
    if spec is not None:
        return token_list(spec)
    if callable(getattr(datamodule, "vocabulary_for", None)):
        try:
            return token_list(datamodule.vocabulary_for(name))[0], None
        except (KeyError, ValueError):
            pass
    vocabulary = getattr(datamodule, "vocabulary", None)
    if vocabulary is not None and not callable(vocabulary):
        return token_list(vocabulary)[0], None
    if slot.tokens is None:
        raise ValueError(f"slot {name!r}: no new vocabulary: pass tokens=, or use a datamodule with a vocabulary")
    return list(slot.tokens), None


def state_tables(
    state: Mapping[str, torch.Tensor], module: nn.Module, slot: EmbeddingSlot, outputs: Sequence[str]
) -> SlotTables:
    """The tensors of ``slot`` and its untied ``outputs`` as the state dict ``state`` (a checkpoint's, over another
    vocabulary than ``module``'s) holds them, each found under any of the names ``module`` has for it."""
    tensors = {slot.name: slot.weight, **{path: tensor_at(module, path) for path in slot.vocabulary_biases}}
    found = {}
    for path, tensor in tensors.items():
        key = state_key(state, module, tensor)
        if key is None:
            what = "its table" if path == slot.name else f"its vocabulary bias {path!r}"
            raise ValueError(
                f"slot {slot.name!r}: the checkpoint has no tensor for {what} (under {parameter_names(module, tensor)})"
            )
        found[path] = state[key]
    return SlotTables(
        found.pop(slot.name),
        {path: state[f"{path}.weight"] for path in outputs},
        {path: state.get(f"{path}.bias") for path in outputs},
        found,
    )


def extend_state(
    state: dict[str, torch.Tensor], module: nn.Module, slot: EmbeddingSlot, outputs: Sequence[str], plan: Any
) -> None:
    """Replace the state dict's tensors of ``slot`` (and its untied ``outputs``) by ``plan``'s (an extension's or a
    transplant's: its ``assemble``), under every name ``module`` has for them."""
    tables = plan.assemble(state_tables(state, module, slot, outputs))
    for key in parameter_names(module, slot.weight):
        state[key] = tables.embedding
    for path in outputs:
        state[f"{path}.weight"] = tables.outputs[path]
        if tables.biases.get(path) is not None:
            state[f"{path}.bias"] = tables.biases[path]
    for path, grown in tables.vocabulary_biases.items():
        for key in parameter_names(module, tensor_at(module, path)):
            state[key] = grown


def record_vocabularies(checkpoint: dict[str, Any], module: nn.Module, slots: Sequence[str] | None = None) -> None:
    """Record in ``checkpoint``'s ``embinit`` key the token strings of ``module``'s slots (``slots``: these only) as
    they are now, so that a later extension or transplant of the checkpoint finds its old vocabulary; a slot's
    record keeps its other fields."""
    records = checkpoint.setdefault(CHECKPOINT_KEY, {}).setdefault("slots", {})
    names = {id(parameter): name for name, parameter in module.named_parameters()}
    for name, slot in select_slots(module, slots).items():
        if slot.tokens is not None:
            record = records.setdefault(name, {})
            record["tokens"] = list(slot.tokens)
            record.setdefault("parameter", names.get(id(slot.weight)))


def load_extended_state(module: nn.Module, state: Mapping[str, torch.Tensor], path: str | None) -> None:
    """Load the extended state dict strictly; a mismatch beyond the vocabulary names the checkpoint."""
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise ValueError(
            f"from_checkpoint {path} does not fit {type(module).__name__} beyond its vocabulary (other "
            f"sizes?): {' '.join(str(error).split())[:400]}"
        ) from None
