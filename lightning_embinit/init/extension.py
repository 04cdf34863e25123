"""New tokens in a trained model: extend a slot's vocabulary, give only the new rows a start, keep every old row.

:func:`extend_vocabulary` takes a model (any :class:`~lightning_embinit.init.host.EmbeddingHost`, or a plain
module whose tables are found) and the slot's new token list — or a new tokenizer whose vocabulary holds every
old token, in any order — and

1. checks everything before any weight changes (:func:`plan_extension`): no old token dropped (unless
   ``allow_dropping=True``; special tokens never), no duplicate, a rule the slot can serve;
2. builds the extended tables: row ``new_id(t)`` of the new table is the old row of ``t``, **bit for bit**, for
   every old token t; the new tokens' rows come from a rule (:mod:`~lightning_embinit.init.extension_rules`:
   ``pieces``, ``mean_cov``, ``mean``, a random scheme or a pre-trained source), optionally standardized
   (``standardize=True``: to the old rows' mean and std; or any target of ``standardize``) — the new rows only;
3. writes them (:mod:`~lightning_embinit.init.extension_tables`): the table and every module tied to it, each
   untied output layer's rows and bias (new entries per ``bias=``), the padding index;
4. lets the host follow (``prepare_vocabulary_change``: its vocabulary size, tokenizer, hyperparameters), so
   a checkpoint of the extended model reloads with the larger shapes;
5. reports how many rows came by which rule, the new rows' statistics beside the old rows', and with
   ``probe=`` (the states that meet the output matrix) the probability the new tokens take before any update.

``trainable="new_rows"``: only the new rows (of the table and its output layers) learn; every other parameter
is frozen and the old rows are masked (:func:`freeze_old_rows`; pin them for weight-decaying optimizers,
:func:`~lightning_embinit.init.freezing.pin_rows`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lightning_embinit.init.extension_rules import NewRowsRequest, new_bias_value, resolve_rule, splitter_of
from lightning_embinit.init.extension_tables import (
    SlotTables,
    check_unhooked,
    new_token_mass,
    output_layers,
    read_tables,
    trainable_tensors,
    write_tables,
)
from lightning_embinit.init.freezing import decays, freeze_rows, pin_rows
from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.statistics import matrix_statistics
from lightning_embinit.init.tokens import load_tokens
from lightning_embinit.init.transforms import StatisticsTarget, TargetStatistics, resolve_target, standardize

TRAINABLE_EXTENSION = (True, "new_rows")


@dataclass(frozen=True)
class VocabularyChange:
    """What a host is told before its slot's vocabulary changes: the new token strings by id, the special
    tokens, each new id's old id (−1 for a new token), and the new tokenizer when the caller has one."""

    slot: str
    tokens: list[str]
    special_tokens: dict[str, str]
    source_ids: list[int]
    tokenizer: Any = None

    def new_id(self, old_id: int | None) -> int | None:
        """The new id of an old id (None stays None)."""
        return None if old_id is None else self.source_ids.index(old_id)


@dataclass
class ExtensionPlan:
    """A checked extension of one slot, built before any weight changes: the new token list, each new row's old
    row (``source_ids``, −1 for new tokens), the padding index, the new rows of each tensor, and the report."""

    slot: str
    tokens: list[str]
    source_ids: torch.Tensor
    padding_idx: int | None
    embedding_rows: torch.Tensor
    output_rows: dict[str, torch.Tensor] = field(default_factory=dict)
    bias_values: dict[str, float | None] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def added(self) -> torch.Tensor:
        """(N′,) bool: True at the new tokens' rows."""
        return self.source_ids < 0

    def assemble(self, old: SlotTables) -> SlotTables:
        """The extended tensors: old rows moved to their new ids (copied exactly), new rows in place, in the old
        tensors' dtype and device."""
        keep, added = self.source_ids >= 0, self.added

        def grow(tensor: torch.Tensor, rows: torch.Tensor | float) -> torch.Tensor:
            out = tensor.new_empty((len(self.source_ids), *tensor.shape[1:]))
            out[keep] = tensor[self.source_ids[keep].to(tensor.device)]
            out[added] = rows.to(tensor) if isinstance(rows, torch.Tensor) else rows
            return out

        embedding = grow(old.embedding, self.embedding_rows)
        if self.padding_idx is not None and not bool(keep[self.padding_idx]):
            embedding[self.padding_idx] = 0
        return SlotTables(
            embedding,
            {path: grow(weight, self.output_rows[path]) for path, weight in old.outputs.items()},
            {
                path: None if bias is None else grow(bias, float(self.bias_values[path]))
                for path, bias in old.biases.items()
            },
        )


def check_vocabulary_change(
    slot: str,
    old_tokens: Sequence[str],
    new_tokens: Sequence[str],
    *,
    num_rows: int,
    special_tokens: Mapping[str, str] | None = None,
    allow_dropping: bool = False,
) -> torch.Tensor:
    """Each new id's old id (−1: a new token); ``ValueError`` for a duplicate token (old or new), an old token the new
    list drops or a table row without a token (unless ``allow_dropping``), or a special token dropped (always)."""
    for what, tokens in (("new vocabulary", new_tokens), ("old vocabulary", old_tokens)):
        if bad := [t for t in tokens if not isinstance(t, str)]:
            raise ValueError(f"slot {slot!r}: the {what} holds non-string tokens, e.g. {bad[:3]!r}")
        seen: dict[str, list[int]] = {}
        for i, token in enumerate(tokens):
            seen.setdefault(token, []).append(i)
        if duplicates := {t: ids for t, ids in seen.items() if len(ids) > 1}:
            shown = ", ".join(f"{t!r} (ids {ids[:3]})" for t, ids in list(duplicates.items())[:5])
            raise ValueError(
                f"slot {slot!r}: {len(duplicates)} tokens occur twice in the {what}: {shown}; each token needs one row"
            )
    index = {token: i for i, token in enumerate(old_tokens)}
    new_index = set(new_tokens)
    dropped = [t for t in old_tokens if t not in new_index]
    if lost := [t for t in (special_tokens or {}).values() if t in index and t not in new_index]:
        raise ValueError(f"slot {slot!r}: the new vocabulary drops the special tokens {lost}; they must stay")
    unnamed = num_rows - len(old_tokens)
    if (dropped or unnamed > 0) and not allow_dropping:
        parts = [f"drops {len(dropped)} of the slot's {len(old_tokens)} old tokens (e.g. {dropped[:5]})"] * bool(
            dropped
        )
        parts += [f"has no token for the table's {unnamed} rows past its {len(old_tokens)} named ones"] * (unnamed > 0)
        raise ValueError(
            f"slot {slot!r}: the new vocabulary {' and '.join(parts)}; their rows would be lost. A new "
            "tokenizer must hold every old token (in any order); pass allow_dropping=True to drop them"
        )
    return torch.tensor([index.get(token, -1) for token in new_tokens], dtype=torch.long)


def _non_padding(matrix: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    if padding_idx is None:
        return matrix
    keep = torch.ones(matrix.shape[0], dtype=torch.bool)
    keep[padding_idx] = False
    return matrix[keep.to(matrix.device)]


def _statistics_target(
    target: StatisticsTarget | bool | None, old_rows: torch.Tensor, shape: tuple[int, int]
) -> TargetStatistics | None:
    if target is None or target is False:
        return None
    if target is True or target == "old":
        stats = matrix_statistics(old_rows)
        return TargetStatistics(stats.mean, stats.std)
    return resolve_target(target, *shape)


def _new_rows(
    rule: Any, request: NewRowsRequest, target: StatisticsTarget | bool | None
) -> tuple[torch.Tensor, dict[str, int]]:
    made = rule(request)
    rows = made.rows.float()
    wanted = _statistics_target(target, request.old_rows, (request.num_embeddings, request.dim))
    if wanted is not None and rows.shape[0]:
        try:
            rows = standardize(rows, wanted)
        except ValueError as error:
            raise ValueError(f"{request.what}: standardize the new rows: {error}") from None
    if not bool(torch.isfinite(rows).all()):
        raise ValueError(f"{request.what}: rule {rule.name!r} made rows with NaN or inf; nothing was written")
    return rows, made.counts


def plan_extension(
    old: SlotTables,
    *,
    slot: str,
    old_tokens: Sequence[str],
    new_tokens: Sequence[str],
    padding_idx: int | None = None,
    special_tokens: Mapping[str, str] | None = None,
    rule: Any = "mean_cov",
    head_rule: Any = None,
    bias: str | float = "mean",
    standardize: StatisticsTarget | bool | None = None,
    split: Callable[[str], Sequence[int]] | None = None,
    seed: int = 0,
    source_options: Mapping[str, Any] | None = None,
    allow_dropping: bool = False,
) -> ExtensionPlan:
    """Check an extension of ``old`` (a slot's tensors) from ``old_tokens`` to ``new_tokens`` and build its new rows;
    nothing is written. Options as :func:`extend_vocabulary`'s."""
    source_ids = check_vocabulary_change(
        slot,
        old_tokens,
        new_tokens,
        num_rows=old.embedding.shape[0],
        special_tokens=special_tokens,
        allow_dropping=allow_dropping,
    )
    if padding_idx is not None and (padding_idx >= len(old_tokens) or old_tokens[padding_idx] not in set(new_tokens)):
        raise ValueError(f"slot {slot!r}: the padding row {padding_idx} must keep its token in the new vocabulary")
    new_padding = None if padding_idx is None else list(new_tokens).index(old_tokens[padding_idx])
    row_rule = resolve_rule(rule, **dict(source_options or {}))
    out_rule = row_rule if row_rule.serves_output_layers else resolve_rule("mean")
    out_rule = out_rule if head_rule is None else resolve_rule(head_rule)
    if (row_rule.needs_split or (old.outputs and out_rule.needs_split)) and split is None:
        raise ValueError(
            f"slot {slot!r}: rule 'pieces' needs the old tokenizer (old_tokenizer=: a tokenizer, a Hugging "
            "Face tokenizer or a callable token → pieces) to split the new tokens; none was given"
        )
    added_tokens = [t for t, source in zip(new_tokens, source_ids.tolist()) if source < 0]
    generator = torch.Generator().manual_seed(seed)
    values = {
        path: None if b is None else new_bias_value(bias, _non_padding(b, padding_idx))
        for path, b in old.biases.items()
    }

    def request(table: torch.Tensor, what: str) -> NewRowsRequest:
        table = (
            table.detach().cpu()
        )  # the rows are made on the CPU, with the CPU generator, whatever the table's device
        return NewRowsRequest(
            table, _non_padding(table, padding_idx), added_tokens, len(new_tokens), generator, what, split
        )

    rows, counts = _new_rows(row_rule, request(old.embedding, f"slot {slot!r}"), standardize)
    outputs = {
        path: _new_rows(out_rule, request(weight, f"output layer {path!r}"), standardize)[0]
        for path, weight in old.outputs.items()
    }
    plan = ExtensionPlan(slot, list(new_tokens), source_ids, new_padding, rows, outputs, values)
    plan.report = _report(plan, old, row_rule.name, out_rule.name, counts, padding_idx, standardize, bias)
    return plan


def _row_numbers(prefix: str, rows: torch.Tensor) -> dict[str, float | None]:
    if rows.numel() == 0:
        return {f"{prefix}_mean": None, f"{prefix}_std": None, f"{prefix}_row_norm": None}
    stats = matrix_statistics(rows)
    return {
        f"{prefix}_mean": stats.mean,
        f"{prefix}_std": stats.std,
        f"{prefix}_row_norm": float(rows.double().norm(dim=1).mean()),
    }


def _report(
    plan: ExtensionPlan,
    old: SlotTables,
    rule: str,
    head_rule: str,
    counts: Mapping[str, int],
    padding_idx: int | None,
    standardized: Any,
    bias: Any,
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "slot": plan.slot,
        "rule": rule,
        "by_rule": dict(counts),
        "standardize": None if standardized is None or standardized is False else str(standardized),
        "old_rows": int(old.embedding.shape[0]),
        "num_embeddings": len(plan.tokens),
        "added_rows": int(plan.added.sum()),
        "kept_rows": int((~plan.added).sum()),
        "dropped_rows": int(old.embedding.shape[0] - int((~plan.added).sum())),
        "added_tokens": [t for t, new in zip(plan.tokens, plan.added.tolist()) if new][:10],
        **_row_numbers("old", _non_padding(old.embedding, padding_idx)),
        **_row_numbers("new", plan.embedding_rows),
        "outputs": {},
        "new_token_mass": None,
        "uniform_mass": int(plan.added.sum()) / max(len(plan.tokens), 1),
    }
    for path, weight in old.outputs.items():
        entry = {
            "rule": head_rule,
            **_row_numbers("old", _non_padding(weight, padding_idx)),
            **_row_numbers("new", plan.output_rows[path]),
        }
        if old.biases.get(path) is not None:
            old_mean = float(_non_padding(old.biases[path], padding_idx).double().mean())
            entry.update(bias_rule=str(bias), old_bias_mean=old_mean, new_bias=plan.bias_values[path])
        report["outputs"][path] = entry
    return report


def token_list(spec: Any) -> tuple[list[str], Any]:
    """(token strings by id, the tokenizer when ``spec`` is one) from a list, a tokenizer object (``tokens``, or
    Hugging Face's ``get_vocab()``), a one-token-per-line file, or a Hugging Face tokenizer directory or name."""
    if isinstance(spec, (str, os.PathLike)):
        return list(load_tokens(spec, what="tokens=").tokens), None
    if isinstance(getattr(spec, "tokens", None), (list, tuple)):
        return [str(t) for t in spec.tokens], spec
    if callable(getattr(spec, "get_vocab", None)):
        vocabulary = spec.get_vocab()
        tokens = [f"\x00<no token for id {k}>" for k in range(max(vocabulary.values(), default=-1) + 1)]
        for token, index in vocabulary.items():
            tokens[index] = token
        return tokens, spec
    if isinstance(spec, Sequence):
        return list(spec), None
    raise ValueError(
        f"tokens= takes a token list, a tokenizer, a token file or a tokenizer directory; got {type(spec).__name__}"
    )


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
    old_tokenizer: Any = None,
    old_tokens: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    allow_dropping: bool = False,
    seed: int = 0,
    source_options: Mapping[str, Any] | None = None,
    probe: torch.Tensor | Callable[[nn.Module], torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Extend ``slot``'s vocabulary of ``module`` to ``tokens`` in place (module docstring); returns the report.

    Args:
        tokens: the new token strings by id, or a tokenizer (its vocabulary in id order), a token file or a Hugging
            Face tokenizer directory: every old token must be among them (``allow_dropping=True`` drops the others).
        slot: the slot (needed when the module has several).
        rule, head_rule: where the new rows come from (:func:`~lightning_embinit.init.extension_rules.resolve_rule`);
            ``head_rule`` for untied output layers (default: ``rule``, or ``mean`` for a pre-trained source).
        bias: new bias entries of untied output layers: ``mean`` (default), ``min``, ``zero`` or a number.
        standardize: ``True`` (the old rows' mean and std, per tensor) or a target of
            :func:`~lightning_embinit.init.transforms.standardize`, applied to the new rows only.
        old_tokenizer: splits new tokens into old pieces (``pieces``).
        old_tokens: the old token strings when the slot does not name them.
        outputs: the untied output layers (dotted paths); default the host's ``vocabulary_outputs()`` or found by shape.
        probe: the states that meet the output matrix, or a function of the extended module returning them:
            the report's ``new_token_mass``.
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
        old_tokenizer=old_tokenizer,
        old_tokens=old_tokens,
        outputs=outputs,
        allow_dropping=allow_dropping,
        seed=seed,
        source_options=source_options,
    )
    apply_plan(module, plan, tokenizer=tokenizer)
    return finish_report(module, plan, probe)


def plan_for_module(
    module: nn.Module,
    new_tokens: Sequence[str],
    *,
    slot: str | None = None,
    outputs: Sequence[str] | None = None,
    old_tokens: Sequence[str] | None = None,
    old_tokenizer: Any = None,
    **options: Any,
) -> ExtensionPlan:
    """:func:`plan_extension` for a slot of ``module`` (its tensors, tokens, padding row and output layers);
    ``options`` as :func:`extend_vocabulary`'s. Nothing is written."""
    target = _one_slot(module, slot)
    old_tokens = (
        list(target.tokens) if target.tokens is not None else (None if old_tokens is None else list(old_tokens))
    )
    if old_tokens is None:
        raise ValueError(f"slot {target.name!r} names no tokens: pass old_tokens= (its token strings by id)")
    layers = output_layers(module, target, outputs)
    check_unhooked(module, target, layers)
    return plan_extension(
        read_tables(module, target, layers),
        slot=target.name,
        old_tokens=old_tokens,
        new_tokens=list(new_tokens),
        padding_idx=target.padding_idx,
        special_tokens=dict(target.special_tokens),
        split=splitter_of(old_tokenizer, old_tokens),
        **options,
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
    commit = prepare_host(module, plan, target, tokenizer)
    write_tables(module, target, plan.assemble(old), plan.padding_idx)
    commit()


def prepare_host(
    module: nn.Module, plan: ExtensionPlan, slot: EmbeddingSlot, tokenizer: Any = None
) -> Callable[[], None]:
    """The host's ``prepare_vocabulary_change(change)`` (it checks now and returns what to run after the write);
    a no-op for modules without one."""
    prepare = getattr(module, "prepare_vocabulary_change", None)
    if not callable(prepare):
        return lambda: None
    change = VocabularyChange(
        plan.slot, list(plan.tokens), dict(slot.special_tokens), plan.source_ids.tolist(), tokenizer
    )
    return prepare(change) or (lambda: None)


def finish_report(module: nn.Module, plan: ExtensionPlan, probe: Any) -> dict[str, Any]:
    """The plan's report with the new tokens' probability mass at ``probe``'s states (when the slot has an output)."""
    report = dict(plan.report)
    if probe is None:
        return report
    target = _one_slot(module, plan.slot)
    layers = list(plan.output_rows)
    with torch.no_grad():
        states = probe(module) if callable(probe) else probe
    if layers:
        head = module.get_submodule(layers[0])
        report["new_token_mass"] = new_token_mass(states, head.weight, head.bias, plan.added)
    elif target.is_tied:
        report["new_token_mass"] = new_token_mass(states, target.weight, None, plan.added)
    return report


def freeze_old_rows(
    module: nn.Module,
    frozen: Mapping[str, Callable[[], torch.Tensor | None]],
    outputs: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[nn.Parameter]]:
    """``trainable="new_rows"``: freeze every parameter of ``module`` but the tables of the slots in ``frozen`` and
    their output layers (``outputs[slot]``, default :func:`~lightning_embinit.init.extension_tables.output_layers`),
    whose rows where ``frozen[slot]()`` is True (the old ones: ``~plan.added``) get no gradient
    (:func:`~lightning_embinit.init.freezing.freeze_rows`).
    Returns slot → those tensors: pin their old rows for an optimizer that decays them (:func:`pin_old_rows`)."""
    tensors = {}
    for name in frozen:
        target = _one_slot(module, name)
        tensors[name] = trainable_tensors(module, target, output_layers(module, target, (outputs or {}).get(name)))
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
    """Put the frozen rows of ``tensors`` back after every step of an optimizer that decays them (AdamW with weight
    decay moves rows even at zero gradient)."""
    for tensor in tensors:
        if decays(optimizer, tensor):
            pin_rows(optimizer, tensor, frozen)
