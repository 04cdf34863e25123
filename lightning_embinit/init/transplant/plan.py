"""A transplant's plan, built before any weight changes: each new id's old row (matched, copied bit for bit) or its
weighted sum of old rows (a method), for the token table, every untied output layer and every bias over the
vocabulary — the extension's :class:`~lightning_embinit.init.extension.ExtensionPlan` with a bias entry per new row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from lightning_embinit.init.extension.plan import ExtensionPlan, standardize_new_rows
from lightning_embinit.init.extension.rules import new_bias_value
from lightning_embinit.init.extension.tables import SlotTables, old_token_rows
from lightning_embinit.init.statistics import matrix_statistics, row_mean, rows_per_block
from lightning_embinit.init.transforms import StatisticsTarget
from lightning_embinit.init.transplant.matching import VocabularyMatch
from lightning_embinit.init.transplant.methods import MEAN, Answer, MethodRequest, TransplantMethod

_TOKENS_PER_BLOCK = 2048


@dataclass
class TableNumbers:
    """An old tensor's numbers over the old tokens' rows (a padded table's rows past its tokens and the padding row
    left out): μ (the mean row, float32), the elements' mean and std, the mean row norm."""

    mean_row: torch.Tensor
    mean: float
    std: float
    row_norm: float


@dataclass
class TransplantPlan(ExtensionPlan):
    """An extension plan whose new bias entries are rows of their own (``bias_rows``: path → the new entries,
    along the first dimension) rather than one value; ``match`` says how each new id was found."""

    bias_rows: dict[str, torch.Tensor] = field(default_factory=dict)
    match: VocabularyMatch | None = None
    old_numbers: dict[str, TableNumbers] = field(default_factory=dict)

    def assemble(self, old: SlotTables) -> SlotTables:
        """The new tensors (the old ones' dtype and device): matched rows copied in blocks, then the method's rows."""
        embedding = self._grow(old.embedding, self.embedding_rows)
        if self.padding_idx is not None and not bool(self.source_ids[self.padding_idx] >= 0):
            embedding[self.padding_idx] = 0
        return SlotTables(
            embedding,
            {path: self._grow(weight, self.output_rows[path]) for path, weight in old.outputs.items()},
            {path: None if b is None else self._grow(b, self.bias_rows[path]) for path, b in old.biases.items()},
            {
                path: self._grow(b.movedim(-1, 0), self.bias_rows[path]).movedim(0, -1)
                for path, b in old.vocabulary_biases.items()
            },
        )

    def _grow(self, tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        out = tensor.new_empty((len(self.source_ids), *tensor.shape[1:]))
        kept = (self.source_ids >= 0).nonzero().squeeze(1)
        sources = self.source_ids[kept].to(tensor.device)
        kept = kept.to(tensor.device)
        step = rows_per_block(max(1, tensor[0].numel()))
        for start in range(0, kept.shape[0], step):
            out.index_copy_(0, kept[start : start + step], tensor.index_select(0, sources[start : start + step]))
        out[self.added.to(tensor.device)] = rows.to(out.dtype).to(tensor.device)
        return out


def token_ranges(rows: int, named: int | None, padding_idx: int | None) -> list[slice]:
    """The old tokens' rows of a tensor of ``rows`` rows as at most two ranges (views, never a copy): its first
    ``named`` rows (all when None; a padded table's rows past its tokens are no token's), the padding row left out
    (:func:`~lightning_embinit.init.extension.tables.old_token_rows` without its copy)."""
    end = rows if named is None else min(named, rows)
    if padding_idx is None or not 0 <= padding_idx < end:
        return [slice(0, end)] if end else []
    return [part for part in (slice(0, padding_idx), slice(padding_idx + 1, end)) if part.stop > part.start]


def table_numbers(
    table: torch.Tensor, named: int | None, padding_idx: int | None, what: str = "the table"
) -> TableNumbers:
    """:class:`TableNumbers` of the old tokens' rows of ``table`` (N, …; :func:`token_ranges`): μ by
    :func:`~lightning_embinit.init.statistics.row_mean`, the mean and std by
    :func:`~lightning_embinit.init.statistics.matrix_statistics` (two ranges pooled: m = Σ n_k·m_k / n,
    σ² = Σ n_k·(σ_k² + (m_k − m)²) / n), the mean row norm. A NaN or inf anywhere in ``table`` is refused (its first
    rows named) before anything is written."""
    flat = table.detach().reshape(table.shape[0], -1)
    norms = torch.cat([b.to(torch.float64).norm(dim=1).cpu() for b in flat.split(rows_per_block(flat.shape[1]))])
    if not bool(torch.isfinite(norms).all()):  # a float64 norm of finite float32 values never overflows
        bad = (~torch.isfinite(norms)).nonzero().flatten().tolist()
        raise ValueError(
            f"{what} already holds NaN or inf (rows {bad[:5]}{' …' if len(bad) > 5 else ''}): no row can be built from "
            "it — a diverged checkpoint? nothing was written"
        )
    ranges = token_ranges(flat.shape[0], named, padding_idx)
    if not ranges:
        raise ValueError(f"{what} has no row of an old token but the padding row: no row can be built from it")
    means = [row_mean(flat[part]) for part in ranges]
    count = sum(n for _, n in means)
    stats = [matrix_statistics(flat[part]) for part in ranges]
    mean = sum(s.mean * n for s, (_, n) in zip(stats, means)) / count
    variance = sum(n * (s.std**2 + (s.mean - mean) ** 2) for s, (_, n) in zip(stats, means)) / count
    mean_row = sum(m * n for m, n in means) / count
    row_norm = sum(float(norms[part].sum()) for part in ranges) / count
    return TableNumbers(mean_row.float().cpu().reshape(table.shape[1:]), mean, math.sqrt(variance), row_norm)


def combine(table: torch.Tensor, answers: Sequence[Answer], mean: torch.Tensor) -> torch.Tensor:
    """(m, …) float32: per answer Σ w_j·table[j] (its (old ids, weights)) or μ (``MEAN``), in blocks of tokens (only
    the rows a block uses are read, in float32)."""
    flat = table.reshape(table.shape[0], -1)
    out = torch.empty(len(answers), flat.shape[1], dtype=torch.float32)
    for start in range(0, len(answers), _TOKENS_PER_BLOCK):
        block = answers[start : start + _TOKENS_PER_BLOCK]
        summed = [a for a in block if not isinstance(a, str)]
        if summed:
            ids = torch.tensor([i for a in summed for i in a[0]], dtype=torch.long)
            weights = torch.tensor([w for a in summed for w in a[1]], dtype=torch.float32)
            offsets = torch.tensor([0, *torch.tensor([len(a[0]) for a in summed]).cumsum(0)[:-1].tolist()])
            unique, inverse = torch.unique(ids, return_inverse=True)
            rows = flat.index_select(0, unique.to(flat.device)).cpu().float()
            sums = F.embedding_bag(inverse, rows, offsets, mode="sum", per_sample_weights=weights)
            positions = torch.tensor([start + k for k, a in enumerate(block) if not isinstance(a, str)])
            out[positions] = sums
        if len(summed) < len(block):
            out[torch.tensor([start + k for k, a in enumerate(block) if isinstance(a, str)])] = mean.reshape(-1)
    return out.reshape(len(answers), *table.shape[1:])


def answer_tokens(
    request: MethodRequest, method: TransplantMethod, fallback: TransplantMethod, special: set[str]
) -> tuple[list[Answer], dict[str, int]]:
    """Each pending token's answer: the method's, else (and for unmatched special tokens) the fallback's, else μ;
    and how many tokens each served."""
    plain = [i for i in request.pending if request.new_tokens[i] not in special]
    answers = dict(zip(plain, method(request, plain)))
    counts = {method.name: sum(answer is not None for answer in answers.values())}
    left = [i for i in request.pending if answers.get(i) is None]
    answers.update(zip(left, fallback(request, left) if left else ()))
    name = f"{fallback.name} (fallback)"
    counts[name] = sum(answers[i] is not None for i in left)
    if unserved := [i for i in left if answers[i] is None]:
        counts["mean (nothing else served)"] = len(unserved)
        answers.update(dict.fromkeys(unserved, MEAN))
    return [answers[i] for i in request.pending], {k: v for k, v in counts.items() if v}


def new_rows(
    table: torch.Tensor,
    answers: Sequence[Answer],
    rows_of: tuple[int | None, int | None, int],
    target: StatisticsTarget | bool | None,
    what: str,
) -> tuple[torch.Tensor, TableNumbers]:
    """The rows of the pending tokens in one tensor, optionally standardized
    (:func:`~lightning_embinit.init.extension.plan.standardize_new_rows`: ``True``, the old tokens' rows' mean and
    std); and the old rows' numbers. ``rows_of``: (old tokens ``named``, the old padding row, the new table's rows)."""
    named, padding_idx, num_rows = rows_of
    numbers = table_numbers(table, named, padding_idx, what)
    rows = combine(table, answers, numbers.mean_row)
    rows = standardize_new_rows(
        rows, (numbers.mean, numbers.std), target, num_rows, table.shape[-1], what, "the method"
    )
    return rows, numbers


def plan_transplant(
    old: SlotTables,
    *,
    slot: str,
    match: VocabularyMatch,
    request: MethodRequest,
    methods: tuple[TransplantMethod, TransplantMethod],
    special: set[str],
    padding: tuple[int | None, int | None],
    named: int | None = None,
    standardize_to: StatisticsTarget | bool | None = None,
    bias: str | float = "combine",
    report: Callable[[TransplantPlan, SlotTables, dict[str, int]], dict[str, Any]] | None = None,
) -> TransplantPlan:
    """The checked plan of one slot: matched rows by ``match``, the rest by ``methods`` (method, fallback) through
    ``request``; ``padding`` = (old padding row, new padding row); the old tokens' rows are the first ``named`` (all
    when None): μ, the statistics and the bias entries are theirs, never a padded row's. The output side (untied
    output layers, their biases and the vocabulary biases) takes the methods' output-role answers. Nothing is
    written."""
    old_padding, new_padding = padding
    rows_of = (named, old_padding, len(request.new_tokens))
    answers, counts = answer_tokens(request, *methods, special)
    embedding, numbers = new_rows(old.embedding, answers, rows_of, standardize_to, f"slot {slot!r}: the table")
    heads = answers
    if (old.outputs or old.vocabulary_biases) and methods[0].per_role:
        heads = answer_tokens(replace(request, role="output"), *methods, special)[0]
    built = {
        path: new_rows(weight, heads, rows_of, standardize_to, f"output layer {path!r}")
        for path, weight in old.outputs.items()
    }
    biases = {path: b for path, b in old.biases.items() if b is not None}
    biases |= {path: b.movedim(-1, 0) for path, b in old.vocabulary_biases.items()}
    plan = TransplantPlan(
        slot=slot,
        tokens=list(request.new_tokens),
        source_ids=match.source_ids,
        padding_idx=new_padding,
        embedding_rows=embedding,
        output_rows={path: rows for path, (rows, _) in built.items()},
        bias_rows={path: _bias_rows(b, heads, named, old_padding, bias) for path, b in biases.items()},
        match=match,
        old_numbers={"embedding": numbers, **{path: n for path, (_, n) in built.items()}},
        named_rows=named,
    )
    if report is not None:
        plan.report = report(plan, old, counts)
    return plan


def _bias_rows(
    bias: torch.Tensor, answers: Sequence[Answer], named: int | None, padding_idx: int | None, rule: str | float
) -> torch.Tensor:
    """New bias entries (along the first dimension): the method's weights applied to the old entries (``combine``;
    μ: the old tokens' mean entry), or the extension's bias rules (``mean``, ``min``, ``zero``, a number) over the old
    tokens' entries, as one value."""
    if rule == "combine":
        mean = table_numbers(bias, named, padding_idx, "a bias over the vocabulary").mean_row
        return combine(bias, answers, mean)
    value = new_bias_value(rule, old_token_rows(bias.reshape(bias.shape[0], -1)[:, 0], named, padding_idx))
    return torch.full((len(answers), *bias.shape[1:]), value, dtype=torch.float32)
