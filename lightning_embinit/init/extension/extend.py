"""New tokens in a trained model: extend a slot's vocabulary, give only the new rows a start, keep every old row.

:func:`extend_vocabulary` checks everything before any weight changes (:func:`plan_extension`), builds the extended
tables (every old row **bit for bit** at its token's new id, the new rows from a rule), writes them with everything
that follows the vocabulary (:mod:`~lightning_embinit.init.extension.tables`), lets the host follow
(``prepare_vocabulary_change``) and reports; docs/vocabulary_extension.md. ``trainable="new_rows"``: only the new
rows learn (:func:`freeze_old_rows`, :func:`pin_old_rows`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lightning_embinit.init.extension.plan import ExtensionPlan, VocabularyChange, plan_extension
from lightning_embinit.init.extension.rules import splitter_of
from lightning_embinit.init.extension.tables import (
    check_unhooked,
    new_token_mass,
    output_layers,
    read_tables,
    tensor_at,
    vocabulary_tensors,
    warn_unclaimed,
    write_tables,
)
from lightning_embinit.init.freezing import check_not_meta, freeze_rows, pin_rows
from lightning_embinit.init.host import EmbeddingHost, EmbeddingSlot, select_slots
from lightning_embinit.init.tokens import load_tokens, resolve_slot_tokens, tokenizer_object_tokens
from lightning_embinit.init.transforms import StatisticsTarget
from lightning_embinit.vocabulary import Vocabulary

TRAINABLE_EXTENSION = (True, "new_rows")


def token_list(spec: Any) -> tuple[list[str], Any]:
    """(token strings by id, the tokenizer when ``spec`` is one) from anything ``tokens=`` takes
    (:func:`~lightning_embinit.init.tokens.load_tokens`: a list, a file, a tokenizer name, directory or object)."""
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return list(spec), None  # checked with the old tokens (check_vocabulary_change)
    if not isinstance(spec, (str, os.PathLike, Vocabulary)) and (found := tokenizer_object_tokens(spec)) is not None:
        return found[0], spec
    tokenizer = None if isinstance(spec, (str, os.PathLike)) else spec
    return list(load_tokens(spec, what="tokens=").tokens), tokenizer


def _one_slot(module: nn.Module, slot: str | None) -> EmbeddingSlot:
    slots = select_slots(module, None if slot is None else [slot])
    if len(slots) > 1:
        raise ValueError(f"{type(module).__name__} has several slots ({', '.join(slots)}); name one with slot=")
    return next(iter(slots.values()))


def extend_vocabulary(
    module: nn.Module,
    tokens: Any,
    *,
    slot: str | None = None,
    rule: Any = "mean_cov",
    head_rule: Any = None,
    bias: str | float = "mean",
    standardize: StatisticsTarget | bool | None = None,
    transforms: Sequence[str] | None = None,
    old_tokenizer: Any = None,
    old_tokens: Any = None,
    outputs: Sequence[str] | None = None,
    allow_dropping: bool = False,
    pad_to_multiple_of: int | None = None,
    seed: int = 0,
    source_options: Mapping[str, Any] | None = None,
    probe: torch.Tensor | Callable[[nn.Module], torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Extend ``slot``'s vocabulary of ``module`` to ``tokens`` in place (module docstring); returns the report.

    Args:
        tokens: the new token strings by id, or a tokenizer (its vocabulary in id order), a token file or a Hugging
            Face tokenizer directory: every old token must be among them (``allow_dropping=True`` drops the others).
        slot: the slot (needed when the module has several).
        rule, head_rule: where the new rows come from (:func:`~lightning_embinit.init.extension.rules.resolve_rule`);
            ``head_rule`` for untied output layers (default: ``rule``, or ``mean`` for a pre-trained source).
        bias: new bias entries of untied output layers: ``mean`` (default), ``min``, ``zero`` or a number.
        standardize, transforms: the new rows only: ``standardize`` ``True`` (the old rows' mean and std, per tensor)
            or a target of :func:`~lightning_embinit.init.transforms.standardize`, after ``transforms`` (``center``,
            ``remove_top[:k]``, ``whiten[:eps]``, fitted on the new rows: docs/concepts.md#shared-directions).
        old_tokenizer, old_tokens: splits new tokens into old pieces (``pieces``); the old token strings when the slot
            does not name them (anything ``tokens`` takes; a tokenizer object also serves as ``old_tokenizer``).
        outputs: the untied output layers (dotted paths); default the host's ``vocabulary_outputs()``, else the ones
            the slot's model family names (never a layer by its width alone).
        pad_to_multiple_of: a growing table's size rounded up to a multiple of this (``resize_token_embeddings``'
            option); a padded table keeps its size while the new tokens fit: they take its padded rows.
        probe: the states that meet the output matrix (or a function of the module giving them): ``new_token_mass``.
    """
    new_tokens, tokenizer = token_list(tokens)
    plan = plan_for_module(
        module,
        new_tokens,
        slot=slot,
        rule=rule,
        head_rule=head_rule,
        bias=bias,
        standardize=standardize,
        transforms=transforms,
        old_tokenizer=old_tokenizer,
        old_tokens=old_tokens,
        outputs=outputs,
        allow_dropping=allow_dropping,
        pad_to_multiple_of=pad_to_multiple_of,
        seed=seed,
        source_options=source_options,
    )
    _check_before_writing(module, plan, tokens, probe)
    apply_plan(module, plan, tokenizer=tokenizer)
    return finish_report(module, plan, probe)


def _check_before_writing(module: nn.Module, plan: ExtensionPlan, tokens: Any, probe: Any) -> None:
    """Refuse whitespace-only new tokens from a list or a token file, and a probe tensor of the wrong width."""
    from_list = isinstance(tokens, Sequence) and not isinstance(tokens, str)
    from_file = isinstance(tokens, (str, os.PathLike)) and os.path.isfile(os.path.expanduser(os.fspath(tokens)))
    blank = [t for t, new in zip(plan.tokens, plan.added.tolist()) if new and not t.strip()]
    if (from_list or from_file) and blank:
        raise ValueError(
            f"slot {plan.slot!r}: the new tokens hold whitespace-only strings {blank[:5]!r}, which no tokenizer "
            "splits text into (CRLF line ends or stray blanks in a token file?); remove them, or pass the tokenizer "
            "itself if it really holds such tokens"
        )
    if probe is not None and not callable(probe):
        _check_probe_width(module, plan, probe)


def _check_probe_width(module: nn.Module, plan: ExtensionPlan, states: torch.Tensor, *, done: bool = False) -> None:
    """Refuse states not as wide as the output matrix's input (an untied layer's or the tied table's)."""
    if plan.output_rows:
        width = module.get_submodule(next(iter(plan.output_rows))).weight.shape[1]
    else:
        target = _one_slot(module, plan.slot)
        width = target.embedding_dim if target.is_tied else None
    if width is not None and (not isinstance(states, torch.Tensor) or states.shape[-1] != width):
        got = f"shape {tuple(states.shape)}" if isinstance(states, torch.Tensor) else type(states).__name__
        extended = "the model has been extended; only the report's new_token_mass is missing"
        raise ValueError(
            f"slot {plan.slot!r}: probe= gave states of {got}, but the output matrix takes states of width {width} "
            f"(…, {width}): pass the states that meet the output layer ({extended if done else 'nothing was changed'})"
        )


def plan_for_module(
    module: nn.Module,
    new_tokens: Sequence[str],
    *,
    slot: str | None = None,
    outputs: Sequence[str] | None = None,
    old_tokens: Any = None,
    old_tokenizer: Any = None,
    **options: Any,
) -> ExtensionPlan:
    """:func:`plan_extension` for a slot of ``module`` (its tensors, tokens, padding row and output layers);
    ``options`` as :func:`extend_vocabulary`'s. Nothing is written."""
    target = _one_slot(module, slot)
    check_not_meta(target, "extend its vocabulary")
    if target.tokens is None and old_tokens is None:  # the module's tokenizer or vocabulary attribute, if any
        target = resolve_slot_tokens(target, model=module)[0]
        own = getattr(module, "tokenizer", None)
        if old_tokenizer is None and (callable(getattr(own, "encode", None)) or callable(own)):
            old_tokenizer = own  # splits new tokens into old pieces for rule='pieces'
    if target.tokens is not None:
        old_tokens = list(target.tokens)
    elif old_tokens is not None:
        old_tokens, given_tokenizer = token_list(old_tokens)
        old_tokenizer = given_tokenizer if old_tokenizer is None else old_tokenizer
    if old_tokens is None:
        raise ValueError(
            f"slot {target.name!r} names no tokens: pass old_tokens= (its token strings by id or its tokenizer), or "
            "give the module a tokenizer or vocabulary attribute"
        )
    layers = output_layers(module, target, outputs)
    warn_unclaimed(module, target, layers, stacklevel=3)
    check_unhooked(module, target, layers)
    plan = plan_extension(
        read_tables(module, target, layers),
        slot=target.name,
        old_tokens=old_tokens,
        new_tokens=list(new_tokens),
        padding_idx=target.padding_idx,
        special_tokens=dict(target.special_tokens),
        split=splitter_of(old_tokenizer, old_tokens),
        **options,
    )
    check_host_follows(module, plan)
    return plan


def check_host_follows(module: nn.Module, plan: ExtensionPlan) -> None:
    """Refuse rows without a token for a host whose vocabulary is its table (it names a token for every row and
    follows the change itself, as the package's systems): ``pad_to_multiple_of`` cannot apply there."""
    if isinstance(module, EmbeddingHost) and callable(getattr(module, "prepare_vocabulary_change", None)):
        if plan.num_rows != len(plan.tokens):
            raise ValueError(
                f"slot {plan.slot!r}: {type(module).__name__} names a token for every row of its table, so it cannot "
                f"hold the {plan.num_rows - len(plan.tokens)} rows without a token that pad_to_multiple_of adds: "
                "leave pad_to_multiple_of out; nothing was changed"
            )


def apply_plan(module: nn.Module, plan: ExtensionPlan, *, tokenizer: Any = None) -> None:
    """Write a plan into ``module``: its slot's table (and tied modules), output layers and padding index, then the
    host's own vocabulary (``prepare_vocabulary_change``; ``tokenizer``: the new tokenizer, when known)."""
    target = _one_slot(module, plan.slot)
    layers = tuple(plan.output_rows)
    check_unhooked(module, target, layers)
    old = read_tables(module, target, layers)
    if old.embedding.shape[0] != plan.report["old_rows"]:
        raise ValueError(
            f"slot {plan.slot!r}: the plan was made for a table of {plan.report.get('old_rows')} rows, "
            f"this one has {old.embedding.shape[0]}"
        )
    prepare = getattr(module, "prepare_vocabulary_change", None)  # it checks now, and returns what to run after
    change = VocabularyChange(
        plan.slot, list(plan.tokens), dict(target.special_tokens), plan.source_ids.tolist(), tokenizer, plan.num_rows
    )
    commit = prepare(change) if callable(prepare) else None
    write_tables(module, target, plan.assemble(old), plan.padding_idx)
    if target.after_resize is not None:
        target.after_resize(plan.num_rows, plan.source_ids)
    if commit:
        commit()


def finish_report(module: nn.Module, plan: ExtensionPlan, probe: Any) -> dict[str, Any]:
    """The plan's report with the new tokens' probability mass at ``probe``'s states (when the slot has an output)."""
    report = dict(plan.report)
    if probe is None:
        return report
    target = _one_slot(module, plan.slot)
    layers = list(plan.output_rows)
    with torch.no_grad():
        states = probe(module) if callable(probe) else probe
    _check_probe_width(module, plan, states, done=True)
    if layers:
        head = module.get_submodule(layers[0])
        report["new_token_mass"] = new_token_mass(states, head.weight, head.bias, plan.added)
    elif target.is_tied:
        biases = [tensor_at(module, path).reshape(-1) for path in target.vocabulary_biases]
        report["new_token_mass"] = new_token_mass(states, target.weight, sum(biases) if biases else None, plan.added)
    return report


def freeze_old_rows(
    module: nn.Module,
    frozen: Mapping[str, Callable[[], torch.Tensor | None]],
    outputs: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[nn.Parameter]]:
    """``trainable="new_rows"``: freeze every parameter of ``module`` but the tables of the slots in ``frozen`` and
    their output layers (``outputs[slot]``), whose rows where ``frozen[slot]()`` is True (the old ones) get no gradient.
    Returns slot → those tensors, whose old rows an optimizer that decays them must pin (:func:`pin_old_rows`)."""
    tensors = {}
    for name in frozen:
        target = _one_slot(module, name)
        layers = output_layers(module, target, (outputs or {}).get(name))
        tensors[name] = list(vocabulary_tensors(module, target, layers).values())
    keep = {id(t) for group in tensors.values() for t in group}
    for parameter in module.parameters():
        parameter.requires_grad_(id(parameter) in keep)
    for name, group in tensors.items():
        for tensor in group:
            freeze_rows(tensor, frozen[name])
    return tensors


def pin_old_rows(
    optimizer: torch.optim.Optimizer, tensors: Sequence[nn.Parameter], frozen: Callable[[], torch.Tensor | None]
) -> None:
    """Put the frozen rows of ``tensors`` back after every step of an optimizer that decays them."""
    for tensor in tensors:
        pin_rows(optimizer, tensor, frozen)
