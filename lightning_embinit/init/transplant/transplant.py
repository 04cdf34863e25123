"""A trained model with a new tokenizer: :func:`transplant_tokenizer` replaces a slot's vocabulary by the new
tokenizer's, in place. Every new token that stands for an old token's text keeps that row bit for bit
(:mod:`lightning_embinit.init.transplant.matching`); a method builds the others from the old rows
(:mod:`.methods`); the token table, a tied or untied output layer and its bias, the padding row, the model's
vocabulary size and the config's special-token ids follow; every other weight is untouched (docs/transplant.md).

It is the extension's write (:mod:`lightning_embinit.init.extension.tables`, the family's ``after_resize``, the
host's ``prepare_vocabulary_change``) over a plan that may drop and reorder every old row. A sharded table (a
``DTensor``) is gathered, rebuilt and sharded again over its mesh; every rank must call it. Tables that FSDP2's
``fully_shard`` manages cannot change size: transplant before sharding, or into a model built over the new
vocabulary (:func:`transplant_state`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lightning_embinit.init.extension.plan import VocabularyChange
from lightning_embinit.init.extension.tables import (
    SlotTables,
    check_unhooked,
    output_layers,
    read_tables,
    warn_unclaimed,
    write_tables,
)
from lightning_embinit.init.host import EmbeddingSlot, select_slots
from lightning_embinit.init.sharding import is_sharded, whole_table
from lightning_embinit.init.transforms import StatisticsTarget
from lightning_embinit.init.transplant.config_ids import follow_config_ids
from lightning_embinit.init.transplant.conventions import BYTE_LEVEL, token_text
from lightning_embinit.init.transplant.matching import DEFAULT_MATCH, match_vocabularies
from lightning_embinit.init.transplant.methods import MethodRequest, resolve_method
from lightning_embinit.init.transplant.plan import TransplantPlan, plan_transplant
from lightning_embinit.init.transplant.report import plan_report
from lightning_embinit.init.transplant.spaces import auxiliary_space, donor_space
from lightning_embinit.init.transplant.tokenizers import TokenizerView, tokenizer_view


@dataclass
class TransplantOptions:
    """How the rows of the tokens no match found are built (:func:`transplant_tokenizer`'s keyword arguments)."""

    method: Any = "pieces"
    fallback: Any = "mean"
    match: Sequence[str] = DEFAULT_MATCH
    descriptions: Mapping[str, str] | None = None
    donor: Any = None
    donor_tokens: Sequence[str] | None = None
    texts: Iterable[str] | None = None
    auxiliary: Any = None
    fasttext_options: Mapping[str, Any] | None = None
    standardize: StatisticsTarget | bool | None = None
    bias: str | float = "combine"
    seed: int = 0

    def check(self) -> None:
        """Resolve the method names now (an unknown one lists the known)."""
        resolve_method(self.method)
        resolve_method(self.fallback)


def one_slot(module: nn.Module, slot: str | None) -> EmbeddingSlot:
    slots = select_slots(module, None if slot is None else [slot])
    if len(slots) > 1:
        raise ValueError(f"{type(module).__name__} has several slots ({', '.join(slots)}); name one with slot=")
    return next(iter(slots.values()))


def old_view(module: nn.Module, target: EmbeddingSlot, old_tokenizer: Any) -> TokenizerView:
    """The old vocabulary: the slot's token strings when it names them, else ``old_tokenizer``'s, else the module's
    ``tokenizer`` attribute's; the tokenizer (when there is one) splits text for the methods."""
    if old_tokenizer is None and getattr(module, "tokenizer", None) is not None:
        old_tokenizer = module.tokenizer
    view = None if old_tokenizer is None else tokenizer_view(old_tokenizer, what="old_tokenizer=")
    if target.tokens is not None and view is not None:
        check_same_tokens(target, view.tokens)
    if target.tokens is not None:
        special = {**dict(target.special_tokens), **({} if view is None else view.special)}
        present = set(target.tokens)
        special = {role: token for role, token in special.items() if token in present}
        encode, unknown = (None, frozenset()) if view is None else (view.encode, view.unknown)
        return TokenizerView(list(target.tokens), special, encode, unknown, None if view is None else view.source)
    if view is None:
        raise ValueError(
            f"slot {target.name!r}: the model does not name its tokens; pass old_tokenizer= (the tokenizer it "
            "was trained with: a Hugging Face tokenizer object or directory, or the package's tokenizer)"
        )
    if len(view.tokens) > target.num_embeddings:
        raise ValueError(
            f"slot {target.name!r}: old_tokenizer= has {len(view.tokens)} tokens, the table {target.num_embeddings} "
            "rows: it is not the tokenizer this model was trained with"
        )
    return view


def check_same_tokens(target: EmbeddingSlot, tokens: Sequence[str]) -> None:
    """Refuse an old tokenizer whose token at some id is not the one the slot names there: its ids would pick the
    wrong rows (ids past either list are never compared: a tokenizer may hold a token the table has no row for)."""
    named = list(target.tokens or ())
    first = next((i for i, (ours, theirs) in enumerate(zip(named, tokens)) if ours != theirs), None)
    if first is not None:
        raise ValueError(
            f"slot {target.name!r}: old_tokenizer= is not the tokenizer the model names its rows by: id {first} is "
            f"{tokens[first]!r} there, {named[first]!r} in the model; its ids would pick the wrong rows. Pass the "
            "model's own tokenizer, or leave old_tokenizer= out"
        )


def gathered(old: SlotTables) -> SlotTables:
    """The slot's tensors whole (a sharded one gathered: a collective)."""
    return SlotTables(
        whole_table(old.embedding),
        {path: whole_table(weight) for path, weight in old.outputs.items()},
        {path: None if b is None else whole_table(b) for path, b in old.biases.items()},
        {path: whole_table(b) for path, b in old.vocabulary_biases.items()},
    )


def shard_like(new: SlotTables, old: SlotTables) -> SlotTables:
    """``new`` sharded as ``old`` is, tensor by tensor (plain tensors pass through)."""
    from torch.distributed.tensor import distribute_tensor

    def like(tensor: torch.Tensor | None, reference: torch.Tensor | None) -> torch.Tensor | None:
        if tensor is None or reference is None or not is_sharded(reference):
            return tensor
        return distribute_tensor(tensor, reference.device_mesh, reference.placements, src_data_rank=None)

    return SlotTables(
        like(new.embedding, old.embedding),
        {path: like(weight, old.outputs[path]) for path, weight in new.outputs.items()},
        {path: like(b, old.biases[path]) for path, b in new.biases.items()},
        {path: like(b, old.vocabulary_biases[path]) for path, b in new.vocabulary_biases.items()},
    )


def check_not_fully_sharded(module: nn.Module, target: EmbeddingSlot) -> None:
    """Refuse a table FSDP2's ``fully_shard`` manages (its flat shards have a fixed size)."""
    from torch.distributed.fsdp import FSDPModule

    if is_sharded(target.weight) and any(isinstance(m, FSDPModule) for m in module.modules()):
        raise ValueError(
            f"slot {target.name!r} is sharded by FSDP2's fully_shard, whose shards keep their size: transplant the "
            "tokenizer before sharding (TokenTransplantCallback swaps at setup, before configure_model), or build "
            "the model over the new vocabulary and write the transplanted tables into it (transplant_state)"
        )


def method_request(new: TokenizerView, old: TokenizerView, match: Any, options: TransplantOptions) -> MethodRequest:
    """What the methods read (:class:`~lightning_embinit.init.transplant.methods.MethodRequest`)."""
    special = set(new.special.values())
    anchors = {i: int(s) for i, s in enumerate(match.source_ids.tolist()) if s >= 0 and new.tokens[i] not in special}
    leading_space = match.old_convention == BYTE_LEVEL

    def auxiliary() -> Any:
        sentences = None if options.auxiliary is not None else new.token_pieces(list(options.texts or ()))
        return auxiliary_space(
            new.tokens,
            vectors=options.auxiliary,
            sentences=sentences,
            seed=options.seed,
            options=options.fasttext_options,
        )

    return MethodRequest(
        new_tokens=new.tokens,
        old_tokens=old.tokens,
        pending=match.unmatched,
        anchors=anchors,
        text_of=lambda token: token_text(token, match.new_convention, leading_space=leading_space),
        leading_space=leading_space,
        split=old.pieces if old.encode is not None else None,
        descriptions=dict(options.descriptions or {}),
        donor=None
        if options.donor is None
        else lambda role: donor_space(options.donor, new.tokens, donor_tokens=options.donor_tokens, role=role),
        auxiliary=None if options.texts is None and options.auxiliary is None else auxiliary,
    )


def plan_for_slot(
    module: nn.Module,
    target: EmbeddingSlot,
    new: TokenizerView,
    old: TokenizerView,
    layers: Sequence[str],
    options: TransplantOptions,
    tables: SlotTables | None = None,
    old_padding: int | None = None,
) -> TransplantPlan:
    """The transplant's plan of one slot from its tensors (or ``tables``, e.g. a checkpoint's or the gathered ones,
    whose padding row is ``old_padding``); the old tokens' rows are the first ``len(old.tokens)``. Nothing is
    written."""
    if tables is None:
        tables, old_padding = gathered(read_tables(module, target, layers)), target.padding_idx
    old_special = {**dict(target.special_tokens), **old.special}
    match = match_vocabularies(
        old.tokens, new.tokens, old_special=old_special, new_special=new.special, kinds=options.match
    )
    new_pad = new.tokens.index(new.special["pad"]) if "pad" in new.special else None
    padding = (old_padding, new_pad if target.padding_idx is not None else None)
    chosen = {"method": str(getattr(options.method, "name", options.method)), "fallback": str(options.fallback)}
    chosen |= {"standardize": options.standardize, "bias": options.bias, "old_padding": old_padding}
    return plan_transplant(
        tables,
        slot=target.name,
        match=match,
        request=method_request(new, old, match, options),
        methods=(resolve_method(options.method), resolve_method(options.fallback)),
        special=set(new.special.values()),
        padding=padding,
        named=len(old.tokens),
        standardize_to=options.standardize,
        bias=options.bias,
        report=lambda plan, old_tables, counts: plan_report(plan, old_tables, counts, chosen),
    )


def write_plan(
    module: nn.Module, target: EmbeddingSlot, plan: TransplantPlan, new: TokenizerView, old: TokenizerView
) -> None:
    """Write ``plan`` into ``module``: the host is told first (it may refuse), then the tensors, the family's
    vocabulary size, the host's own vocabulary (a module that is no host and keeps its tokenizer as ``tokenizer``
    gets the new one there), and the config's special-token ids."""
    layers = tuple(plan.output_rows)
    check_unhooked(module, target, layers)
    current = read_tables(module, target, layers)
    prepare = getattr(module, "prepare_vocabulary_change", None)
    change = VocabularyChange(plan.slot, list(plan.tokens), dict(new.special), plan.source_ids.tolist(), new.source)
    commit = prepare(change) if callable(prepare) else None
    write_tables(module, target, shard_like(plan.assemble(gathered(current)), current), plan.padding_idx)
    if target.after_resize is not None:
        target.after_resize(len(plan.tokens), plan.source_ids)
    if commit:
        commit()
    elif getattr(module, "tokenizer", None) is not None and new.source is not None:
        module.tokenizer = new.source
    plan.report["config_ids"] = follow_config_ids(module, plan.match, new, old)


def transplant_tokenizer(
    module: nn.Module,
    tokenizer: Any,
    *,
    old_tokenizer: Any = None,
    slot: str | None = None,
    outputs: Sequence[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Give ``module`` the vocabulary of ``tokenizer`` in place (module docstring); returns the report.

    Args:
        tokenizer: the new tokenizer (a Hugging Face tokenizer or directory, ``tokenizers.Tokenizer``, the package's
            tokenizer, …; :mod:`~lightning_embinit.init.transplant.tokenizers`).
        old_tokenizer: the tokenizer the model was trained with (default: the module's ``tokenizer``, else the
            slot's token strings, which split no text).
        slot, outputs: the token table (needed when the module has several) and its untied output layers (default:
            the host's ``vocabulary_outputs()`` or the model family's).
        options: :class:`TransplantOptions`: ``method`` (default ``pieces``) and ``fallback`` (``mean``) by name
            (:data:`~lightning_embinit.init.transplant.methods.METHODS`), ``match`` (the kinds tried),
            ``descriptions``, ``donor``/``donor_tokens`` (``omp``), ``texts``/``auxiliary``/``fasttext_options``
            (``focus``), ``standardize`` (``True``: the new rows to the old rows' mean and std), ``bias``
            (``combine``, or ``mean``/``min``/``zero``/a number), ``seed``.
    """
    settings = TransplantOptions(**options)
    settings.check()
    target = one_slot(module, slot)
    check_not_fully_sharded(module, target)
    new = tokenizer_view(tokenizer, what="tokenizer=")
    old = old_view(module, target, old_tokenizer)
    layers = output_layers(module, target, outputs)
    warn_unclaimed(module, target, layers, stacklevel=2)
    check_unhooked(module, target, layers)
    plan = plan_for_slot(module, target, new, old, layers, settings)
    write_plan(module, target, plan, new, old)
    return plan.report
