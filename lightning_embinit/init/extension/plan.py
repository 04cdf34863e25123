"""An extension's plan, checked before any weight changes: each new id's old row (copied bit for bit), and the new
tokens' rows from a rule (:mod:`~lightning_embinit.init.extension.rules`), optionally standardized."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from lightning_embinit.init.extension.report import plan_report
from lightning_embinit.init.extension.rules import NewRowsRequest, new_bias_value, resolve_rule
from lightning_embinit.init.extension.tables import SlotTables, old_token_rows
from lightning_embinit.init.statistics import matrix_statistics
from lightning_embinit.init.transforms import (
    SharedDirections,
    StatisticsTarget,
    resolve_target,
    shared_direction_steps,
    standardize,
)


@dataclass(frozen=True)
class VocabularyChange:
    """What a host is told before its slot's vocabulary changes: the new token strings by id, the special tokens, each
    new row's old row (−1 for a new one), the new tokenizer when the caller has one, and the table's new size."""

    slot: str
    tokens: list[str]
    special_tokens: dict[str, str]
    source_ids: list[int]
    tokenizer: Any = None
    num_rows: int | None = None
    """The table's rows after the change: past ``len(tokens)`` for a padded table; None: one per token."""

    @property
    def table_rows(self) -> int:
        """The table's rows after the change (a model's ``vocab_size`` when it counts rows, as Hugging Face's)."""
        return len(self.tokens) if self.num_rows is None else self.num_rows

    def new_id(self, old_id: int | None) -> int | None:
        """The new id of an old id (None stays None)."""
        return None if old_id is None else self.source_ids.index(old_id)


@dataclass
class ExtensionPlan:
    """A checked extension of one slot: the new token list, each row's old row in the extended table (``source_ids``,
    −1 for the rows a rule writes; past the new tokens for a padded table), the padding index, the new rows of each
    tensor, the report, and how many of the old table's first rows held a token (``named_rows``; the rest were
    padded rows)."""

    slot: str
    tokens: list[str]
    source_ids: torch.Tensor
    padding_idx: int | None
    embedding_rows: torch.Tensor
    output_rows: dict[str, torch.Tensor] = field(default_factory=dict)
    bias_values: dict[str, float | None] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    named_rows: int | None = None

    @property
    def added(self) -> torch.Tensor:
        """(T′,) bool: True at the rows a rule writes: the new tokens' (a padded row they land on too) and the rows
        the table grows by past them."""
        return self.source_ids < 0

    @property
    def num_rows(self) -> int:
        """The extended table's rows T′ (≥ the new tokens: a padded table keeps its rows past them)."""
        return len(self.source_ids)

    def assemble(self, old: SlotTables) -> SlotTables:
        """The extended tensors (the old ones' dtype and device): old rows copied exactly to their new ids, new rows."""
        keep, added = self.source_ids >= 0, self.added

        def grow(tensor: torch.Tensor, rows: torch.Tensor | float) -> torch.Tensor:
            out = tensor.new_empty((len(self.source_ids), *tensor.shape[1:]))
            kept = keep.nonzero().squeeze(1)
            sources = self.source_ids[kept]
            if torch.equal(sources, torch.arange(len(kept))) and torch.equal(kept, sources):  # old ids unchanged
                out[: len(kept)] = tensor[: len(kept)]
            else:
                out.index_copy_(0, kept.to(tensor.device), tensor.index_select(0, sources.to(tensor.device)))
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
            {
                path: grow(bias.movedim(-1, 0), float(self.bias_values[path])).movedim(0, -1)
                for path, bias in old.vocabulary_biases.items()
            },
        )


def table_rows(num_rows: int, named: int, new_count: int, pad_to_multiple_of: int | None = None) -> int:
    """The extended table's size. A padded table (rows past its ``named`` tokens, as Pythia's 50,304 rows for 50,277
    tokens) keeps its size while the ``new_count`` tokens fit and grows only when they pass its end; a table of
    exactly its tokens takes the new vocabulary's size. A size that changes is rounded up to a multiple of
    ``pad_to_multiple_of`` (as ``resize_token_embeddings(pad_to_multiple_of=…)`` rounds)."""
    size = new_count if new_count > num_rows or num_rows <= named else num_rows
    if pad_to_multiple_of and size != num_rows:
        size = -(-size // pad_to_multiple_of) * pad_to_multiple_of
    return size


def check_vocabulary_change(
    slot: str,
    old_tokens: Sequence[str],
    new_tokens: Sequence[str],
    *,
    num_rows: int,
    special_tokens: Mapping[str, str] | None = None,
    allow_dropping: bool = False,
    pad_to_multiple_of: int | None = None,
) -> torch.Tensor:
    """Each row's old row in the extended table (:func:`table_rows` rows): for the new ids, the old id of their token
    (−1: a new token, even where it lands on a padded row); past the new vocabulary, the row itself where the old
    table had it (a padded row keeps its values), else −1 (a row the table grows by). ``ValueError`` for more old
    tokens than rows, a duplicate token (old or new), an old token the new list drops (unless ``allow_dropping``), or
    a special token dropped (always)."""
    if len(old_tokens) > num_rows:
        raise ValueError(
            f"slot {slot!r}: the old vocabulary lists {len(old_tokens)} tokens, but the table has only {num_rows} "
            "rows: these are not the tokens it was trained with (the tokenizer after tokens were added?); pass the "
            "old tokens as old_tokens= (the tokenizer as it was)"
        )
    size = table_rows(num_rows, len(old_tokens), len(new_tokens), pad_to_multiple_of)
    past = torch.arange(len(new_tokens), size)
    tail = torch.where(past < num_rows, past, torch.full_like(past, -1))
    return torch.cat((_token_sources(slot, old_tokens, new_tokens, special_tokens, allow_dropping), tail))


def _token_sources(
    slot: str,
    old_tokens: Sequence[str],
    new_tokens: Sequence[str],
    special_tokens: Mapping[str, str] | None,
    allow_dropping: bool,
) -> torch.Tensor:
    """Each new id's old id (−1: a new token), the vocabularies checked (:func:`check_vocabulary_change`)."""
    appended = len(new_tokens) >= len(old_tokens) and list(new_tokens[: len(old_tokens)]) == list(old_tokens)
    distinct: set[str] = set()
    for what, tokens in (("old vocabulary", old_tokens), ("new vocabulary", new_tokens))[appended:]:
        if set(map(type, tokens)) - {str} and (bad := [t for t in tokens if not isinstance(t, str)]):
            raise ValueError(f"slot {slot!r}: the {what} holds non-string tokens, e.g. {bad[:3]!r}")
        if len(distinct := set(tokens)) < len(tokens):
            duplicates = [token for token, count in Counter(tokens).items() if count > 1]
            shown = ", ".join(f"{t!r} (ids {[i for i, u in enumerate(tokens) if u == t][:3]})" for t in duplicates[:5])
            raise ValueError(
                f"slot {slot!r}: {len(duplicates)} tokens occur twice in the {what}: {shown}; each token needs one row"
            )
    if "" in distinct:
        raise ValueError(
            f"slot {slot!r}: the new vocabulary holds the empty token '' (id {list(new_tokens).index('')}); "
            "a blank line in a token file? remove it"
        )
    if appended:  # the common case, new tokens after the old: no lookups
        return torch.cat((torch.arange(len(old_tokens)), torch.full((len(new_tokens) - len(old_tokens),), -1)))
    index = {token: i for i, token in enumerate(old_tokens)}
    new_index = distinct  # the new tokens' (the loop's last)
    dropped = [t for t in old_tokens if t not in new_index]
    if lost := [t for t in (special_tokens or {}).values() if t in index and t not in new_index]:
        raise ValueError(f"slot {slot!r}: the new vocabulary drops the special tokens {lost}; they must stay")
    if dropped and not allow_dropping:
        raise ValueError(
            f"slot {slot!r}: the new vocabulary drops {len(dropped)} of the slot's {len(old_tokens)} old tokens "
            f"(e.g. {dropped[:5]}); their rows would be lost. A new tokenizer must hold every old token (in any "
            "order); pass allow_dropping=True to drop them"
        )
    sources = np.fromiter(map(index.get, new_tokens, itertools.repeat(-1)), dtype=np.int64, count=len(new_tokens))
    return torch.from_numpy(sources)


def _new_rows(
    rule: Any,
    request: NewRowsRequest,
    target: StatisticsTarget | bool | None,
    unnamed: int = 0,
    steps: Sequence[SharedDirections] = (),
) -> tuple[torch.Tensor, dict[str, int]]:
    """The rule's rows for ``request.tokens``, then those of the ``unnamed`` rows the table grows by past the new
    vocabulary (no token: the rule's own draw, μ for a rule that reads tokens), their shared directions removed by
    ``steps`` (fitted on these rows), standardized together, checked."""
    rows, counts = rule(request)
    rows = rows.float()
    if unnamed:
        if rule.reads_tokens:
            extra, how = request.mean_row.float().expand(unnamed, -1), "mean"
        else:
            extra, how = rule(replace(request, tokens=[""] * unnamed))[0].float(), rule.name
        rows = torch.cat((rows, extra))
        counts = {**counts, f"{how} (rows without a token)": unnamed}
    for step in steps:
        if rows.shape[0] < (needed := step.rows_needed(request.dim)):
            raise ValueError(
                f"{request.what}: transform {step.name!r} is fitted on the new rows, and needs at least {needed} of "
                f"them, got {rows.shape[0]}; leave transforms= out for so few new tokens; nothing was changed"
            )
        rows = step.apply(rows)
    rows = standardize_new_rows(
        rows, request.old_rows, target, request.num_embeddings, request.dim, request.what, f"rule {rule.name!r}"
    )
    return rows, counts


def standardize_new_rows(
    rows: torch.Tensor,
    old: torch.Tensor | tuple[float, float],
    target: StatisticsTarget | bool | None,
    num_embeddings: int,
    dim: int,
    what: str,
    made_by: str = "the rule",
) -> torch.Tensor:
    """The new ``rows`` standardized (:func:`~lightning_embinit.init.transforms.standardize`, one row too) to
    ``target``: ``True`` or ``"old"``: the old rows' mean and std (``old``: the rows, or their (mean, std)); another
    target resolved for an (``num_embeddings``, ``dim``) table (a scheme's std); None or False: as they are. Rows with
    NaN or inf (made by ``made_by``) are refused, as a failed standardization is, naming ``what``."""
    if target is True or target == "old":
        if isinstance(old, torch.Tensor):
            stats = matrix_statistics(old)
            old = (stats.mean, stats.std)
        target = old
    elif target is not None and target is not False:
        target = resolve_target(target, num_embeddings, dim)
    if target is not None and target is not False and rows.shape[0]:
        try:
            rows = standardize(rows, target)
        except ValueError as error:
            raise ValueError(f"{what}: standardize the new rows: {error}") from None
    if not bool(torch.isfinite(rows).all()):
        raise ValueError(f"{what}: {made_by} made rows with NaN or inf; nothing was written")
    return rows


def check_old_tables(
    slot: str, old: SlotTables, rules: Sequence[Any], padding_idx: int | None, named: int | None = None
) -> None:
    """``ValueError`` for an old tensor holding NaN or inf (naming its first bad rows), or a table with no token row
    but the padding row (of its first ``named`` rows, the ones with a token) for a rule that starts from the old
    rows."""
    tensors = {"the table": old.embedding, **{f"output layer {p!r}": weight for p, weight in old.outputs.items()}}
    tensors |= {f"the bias of {p!r}": b for p, b in old.biases.items() if b is not None}
    tensors |= {f"bias {p!r}": bias.movedim(-1, 0) for p, bias in old.vocabulary_biases.items()}  # rows: token ids
    for name, tensor in tensors.items():
        finite = torch.isfinite(tensor.detach().reshape(tensor.shape[0], -1)).all(dim=1)
        if not bool(finite.all()):
            rows = (~finite).nonzero().flatten().tolist()
            raise ValueError(
                f"slot {slot!r}: {name} already holds NaN or inf (rows {rows[:5]}{' …' if len(rows) > 5 else ''}) "
                "before any extension; new rows cannot be made from it — a diverged checkpoint? nothing was written"
            )
    token_rows = old_token_rows(old.embedding, named, padding_idx)
    if token_rows.shape[0] == 0 and (needy := [r.name for r in rules if r.uses_old_rows]):
        raise ValueError(
            f"slot {slot!r}: the table has no row but the padding row {padding_idx}, so rule {needy[0]!r} has no "
            "mean or covariance to start new rows from; use a scheme (rule='xavier') or a source (rule='glove')"
        )


def _new_bias_values(
    old: SlotTables, bias: str | float, padding_idx: int | None, named: int
) -> dict[str, float | None]:
    """The value each new entry of every bias over the vocabulary takes (output layers' and vocabulary biases'), from
    the old tokens' entries."""
    values = {
        path: None if b is None else new_bias_value(bias, old_token_rows(b, named, padding_idx))
        for path, b in old.biases.items()
    }
    for path, b in old.vocabulary_biases.items():
        values[path] = new_bias_value(bias, old_token_rows(b.reshape(-1, b.shape[-1])[0], named, padding_idx))
    return values


def _resolve_rules(
    slot: str,
    old: SlotTables,
    rules: tuple[Any, Any, Mapping[str, Any] | None],
    padding_idx: int | None,
    named: int,
    split: Any,
) -> tuple[Any, Any]:
    """The rule of the table's new rows and of its untied output layers' (``rules``: rule, head rule, source
    options), checked against the old tables."""
    rule, head_rule, source_options = rules
    row_rule = resolve_rule(rule, **dict(source_options or {}))
    out_rule = row_rule if row_rule.serves_output_layers else resolve_rule("mean")
    out_rule = out_rule if head_rule is None else resolve_rule(head_rule)
    check_old_tables(slot, old, [row_rule, *([out_rule] if old.outputs else [])], padding_idx, named)
    if (row_rule.needs_split or (old.outputs and out_rule.needs_split)) and split is None:
        raise ValueError(
            f"slot {slot!r}: rule 'pieces' needs the old tokenizer (old_tokenizer=: a tokenizer, a Hugging "
            "Face tokenizer or a callable token → pieces) to split the new tokens; none was given"
        )
    return row_rule, out_rule


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
    transforms: Sequence[str] | None = None,
    split: Callable[[str], Sequence[int]] | None = None,
    seed: int = 0,
    source_options: Mapping[str, Any] | None = None,
    allow_dropping: bool = False,
    pad_to_multiple_of: int | None = None,
) -> ExtensionPlan:
    """Check an extension of ``old`` (a slot's tensors) from ``old_tokens`` to ``new_tokens`` and build its new rows;
    nothing is written. Options as :func:`~lightning_embinit.init.extension.extend.extend_vocabulary`'s. The old
    tokens' rows are the table's first ``len(old_tokens)`` (the padding row aside): μ, Σ and the bias means are
    theirs, never a padded row's."""
    check_pad_to_multiple_of(pad_to_multiple_of)
    steps = shared_direction_steps(transforms)
    num_rows, named = old.embedding.shape[0], len(old_tokens)
    source_ids = check_vocabulary_change(
        slot,
        old_tokens,
        new_tokens,
        num_rows=num_rows,
        special_tokens=special_tokens,
        allow_dropping=allow_dropping,
        pad_to_multiple_of=pad_to_multiple_of,
    )
    if padding_idx is not None and (padding_idx >= named or old_tokens[padding_idx] not in set(new_tokens)):
        raise ValueError(f"slot {slot!r}: the padding row {padding_idx} must keep its token in the new vocabulary")
    new_padding = None if padding_idx is None else list(new_tokens).index(old_tokens[padding_idx])
    row_rule, out_rule = _resolve_rules(slot, old, (rule, head_rule, source_options), padding_idx, named, split)
    added_tokens = [t for t, source in zip(new_tokens, source_ids.tolist()) if source < 0]
    unnamed = int((source_ids[len(new_tokens) :] < 0).sum())  # rows the table grows by past the new vocabulary
    generator = torch.Generator().manual_seed(seed)

    def request(table: torch.Tensor, what: str) -> NewRowsRequest:
        table = table.detach().cpu()  # the rows are made on the CPU (its generator), whatever the table's device
        old_rows = old_token_rows(table, named, padding_idx)
        return NewRowsRequest(table, old_rows, added_tokens, len(source_ids), generator, what, split)

    rows, counts = _new_rows(row_rule, request(old.embedding, f"slot {slot!r}"), standardize, unnamed, steps)
    outputs = {
        path: _new_rows(out_rule, request(weight, f"output layer {path!r}"), standardize, unnamed, steps)[0]
        for path, weight in old.outputs.items()
    }
    values = _new_bias_values(old, bias, padding_idx, named)
    plan = ExtensionPlan(slot, list(new_tokens), source_ids, new_padding, rows, outputs, values, named_rows=named)
    plan.report = plan_report(plan, old, row_rule.name, out_rule.name, counts, padding_idx, standardize, bias)
    plan.report["transforms"] = [f"{step.name}:{step.argument}" if step.argument else step.name for step in steps]
    return plan


def check_pad_to_multiple_of(value: Any) -> int | None:
    """``pad_to_multiple_of``: None or a positive integer (``ValueError`` otherwise)."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(
            f"pad_to_multiple_of= takes a positive integer (the table's size is rounded up to a multiple of it when "
            f"it grows, e.g. 64) or None; got {value!r}"
        )
    return value
