"""Vocabulary alignment: a slot's token strings → rows of a pre-trained vector set ([K], [KB]; docs/concepts.md).

:func:`align_to_slot` turns any pre-trained source's :class:`~lightning_embinit.init.sources.base.VectorSet` into the
slot's N×D :class:`~lightning_embinit.init.sources.base.SourceMatrix`: it matches the tokens
(:mod:`~lightning_embinit.init.sources.matching`), gathers and checks the matched rows, projects them when the widths
differ (:mod:`~lightning_embinit.init.projection`), fills the rest by the ``oov`` policy and reports the
:class:`~lightning_embinit.init.sources.base.Coverage` (docs/sources.md, "Alignment options").
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from lightning_embinit.checks import check_choice, check_known
from lightning_embinit.init.projection import PROJECTIONS, fit_projection
from lightning_embinit.init.schemes import get_scheme
from lightning_embinit.init.sources.base import Coverage, SourceMatrix, SourceRequest, VectorSet
from lightning_embinit.init.sources.matching import FALLBACK_RULES, Match, match_tokens
from lightning_embinit.init.statistics import rows_per_block
from lightning_embinit.init.tokens import missing_tokens_error

OOV_POLICIES = ("match", "mean", "zeros")


@dataclass(frozen=True)
class AlignmentOptions:
    """The user-facing alignment options shared by every pre-trained source (``source_options``)."""

    oov: str = "normal:0.01"
    min_coverage: float = 0.5
    project: str | None = None
    special_map: Mapping[str, str] = field(default_factory=dict)
    fallbacks: tuple[str, ...] = FALLBACK_RULES
    max_missing: int = 20
    pieces: bool = True

    KEYS = ("oov", "min_coverage", "project", "special_map", "fallbacks", "max_missing", "pieces")

    def __post_init__(self) -> None:
        if self.oov not in OOV_POLICIES:
            try:
                get_scheme(self.oov)
            except ValueError as error:
                raise ValueError(
                    f"oov={self.oov!r} is neither one of {OOV_POLICIES} nor a random scheme: {error}"
                ) from None
        if not 0.0 <= float(self.min_coverage) <= 1.0:
            raise ValueError(f"min_coverage must be a fraction in [0, 1], got {self.min_coverage!r}")
        if self.project is not None:
            check_choice("project=", self.project, PROJECTIONS, hint="or None")
        check_known("fallback rule(s)", self.fallbacks, FALLBACK_RULES)
        if not isinstance(self.special_map, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.special_map.items()
        ):
            raise ValueError(
                f"special_map must map strings (slot roles or tokens) to source tokens, got {self.special_map!r}"
            )
        if int(self.max_missing) < 0:
            raise ValueError(f"max_missing must be ≥ 0, got {self.max_missing!r}")
        if not isinstance(self.pieces, bool):
            raise ValueError(
                f"pieces is True (default: words the source lacks get the mean of their pieces' rows) "
                f"or False, got {self.pieces!r}"
            )

    @property
    def rules(self) -> tuple[str, ...]:
        """The fallback rules in force: ``fallbacks`` without ``pieces`` when ``pieces=False``."""
        return self.fallbacks if self.pieces else tuple(rule for rule in self.fallbacks if rule != "pieces")

    @classmethod
    def pop_from(cls, options: dict[str, Any]) -> AlignmentOptions:
        """Take the alignment keys out of a ``source_options`` dict (in place) and validate them."""
        taken = {key: options.pop(key) for key in cls.KEYS if key in options}
        if "project" in taken and taken["project"] in ("none", "None", ""):
            taken["project"] = None
        if "fallbacks" in taken:
            value = taken["fallbacks"]
            parts = value.split(",") if isinstance(value, str) else list(value or ())
            taken["fallbacks"] = tuple(part.strip() for part in parts if part.strip())
        if taken.get("special_map") is None:
            taken.pop("special_map", None)
        return cls(**taken)


def align_to_slot(
    request: SourceRequest, vectors: VectorSet, options: AlignmentOptions, *, source_name: str
) -> SourceMatrix:
    """The slot's N×D matrix from ``vectors``: matched rows copied, OOV rows filled, all validated (module doc)."""
    tokens = require_tokens(request, source_name)
    n, d = request.num_embeddings, request.embedding_dim
    match = match_tokens(tokens, vectors, slot_special=request.special_tokens, options=options)
    found_mask = torch.zeros(n, dtype=torch.bool)  # rows past the last token (unnamed) stay OOV
    found_mask[: len(tokens)] = torch.tensor([rule is not None for rule in match.rules], dtype=torch.bool)
    found = int(found_mask.sum())
    if found == 0:
        raise ValueError(
            f"source {source_name!r} covers none of the {n} tokens of slot {request.slot_name!r} "
            f"(first slot tokens: {list(tokens[:8])}); is the slot tokenized for this source?"
        )
    gathered = _gather(vectors, match, found_mask)
    _check_finite(gathered, tokens, source_name, request.slot_name)
    description = f"{source_name}: {vectors.description}"
    block = gathered.block
    if block.shape[1] != d:
        if options.project is None:
            raise ValueError(
                f"source {source_name!r} has dimension D_s={block.shape[1]} but slot {request.slot_name!r} has "
                f"embedding_dim D={d}; pass source_options project='pca' (D_s > D) or 'random_orthogonal', "
                f"or choose a {d}-dimensional source"
            )
        projection = fit_projection(options.project, block, d, generator=request.generator)
        block = projection.apply(block)
        description += f"; {projection.description}"
    weight = torch.empty(n, d, dtype=torch.float32)
    if found < n:
        weight[~found_mask] = _oov_rows(options.oov, block, gathered.block_index, n - found, request)
    step = rows_per_block(weight.shape[1])
    for start in range(0, found, step):
        chunk = slice(start, start + step)
        weight.index_copy_(0, gathered.positions[chunk], block.index_select(0, gathered.block_index[chunk]))
    if not finite_rows(weight).all():
        raise ValueError(
            f"source {source_name!r}: the OOV policy {options.oov!r} produced non-finite values "
            f"for slot {request.slot_name!r}"
        )
    coverage = _coverage(tokens, match, request, options.max_missing)
    unnamed = f" + {coverage.extra_rows} unnamed rows" if coverage.extra_rows else ""
    description += f"; coverage {found}/{len(tokens)}{unnamed} ({coverage.fraction:.1%}); oov={options.oov}"
    if coverage.fraction < options.min_coverage:
        warnings.warn(
            f"source {source_name!r} covers {found} of {len(tokens)} tokens ({coverage.fraction:.1%}) of slot "
            f"{request.slot_name!r}, below min_coverage={options.min_coverage}; most frequent missing: "
            f"{coverage.missing[:10]}",
            stacklevel=2,
        )
    return SourceMatrix(weight=weight, pretrained_rows=found_mask, description=description, coverage=coverage)


def require_tokens(request: SourceRequest, source_name: str) -> Sequence[str]:
    """The slot's token strings (at most one per row); a pre-trained source cannot work without them."""
    if request.tokens is None:
        raise missing_tokens_error(request.slot_name, source_name)
    if len(request.tokens) > request.num_embeddings:
        raise ValueError(
            f"slot {request.slot_name!r} has {request.num_embeddings} rows but {len(request.tokens)} token strings"
        )
    return request.tokens


@dataclass
class _Gathered:
    """The distinct source vectors a slot uses (``block``) and, per found slot row, which one."""

    positions: torch.Tensor  # (F,) long: the found slot rows, ascending
    block_index: torch.Tensor  # (F,) long: their rows of ``block``
    block: torch.Tensor  # (B, D_s) float32: each distinct source row once, then composed vectors, then piece means


def _gather(vectors: VectorSet, match: Match, found_mask: torch.Tensor) -> _Gathered:
    positions = torch.nonzero(found_mask).flatten()
    unique = sorted({row for row in match.rows if row >= 0} | {row for rows in match.pieces.values() for row in rows})
    block_of_row = {row: k for k, row in enumerate(unique)}
    composed, pieces = sorted(match.composed), sorted(match.pieces)  # made after matching: no source row
    block_of_later = {position: len(unique) + k for k, position in enumerate(composed + pieces)}
    parts = [vectors.gather(unique).to(torch.float32)] if unique else []
    if composed:
        parts.append(vectors.compose([match.composed[p] for p in composed]).to(torch.float32))  # type: ignore[attr-defined]
    if pieces:
        words = [[block_of_row[r] for r in match.pieces[p]] for p in pieces]  # row k: the mean of its pieces' rows
        flat = torch.tensor([row for word in words for row in word], dtype=torch.long)
        offsets = torch.tensor([0, *itertools.accumulate(len(word) for word in words)][:-1], dtype=torch.long)
        parts.append(torch.nn.functional.embedding_bag(flat, parts[0], offsets, mode="mean"))
    block = parts[0] if len(parts) == 1 else torch.cat(parts)
    index = [block_of_later[p] if p in block_of_later else block_of_row[match.rows[p]] for p in positions.tolist()]
    return _Gathered(positions, torch.tensor(index, dtype=torch.long), block.contiguous())


def finite_rows(matrix: torch.Tensor) -> torch.Tensor:
    """A bool vector: which rows hold only finite values, by float64 row sums in blocks (NaN/inf exactly when the row
    holds one, as float32 values cannot overflow it; much faster than ``isfinite``)."""
    step = rows_per_block(matrix.shape[1])
    return torch.cat(
        [torch.isfinite(matrix[s : s + step].sum(dim=1, dtype=torch.float64)) for s in range(0, matrix.shape[0], step)]
        or [torch.ones(0, dtype=torch.bool)]
    )


def _check_finite(gathered: _Gathered, tokens: Sequence[str], source_name: str, slot_name: str) -> None:
    bad_rows = ~finite_rows(gathered.block)
    if bad_rows.any():
        positions = gathered.positions[bad_rows[gathered.block_index]].tolist()
        names = [tokens[p] for p in positions[:5]]
        raise ValueError(
            f"source {source_name!r}: {len(positions)} row(s) used by slot {slot_name!r} contain NaN/inf, "
            f"e.g. for tokens {names}"
        )


def _weighted_moments(block: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(mean row, element mean, element std) of the rows of ``block`` repeated ``weights`` times; float64."""
    count = weights.sum().item()
    weights = weights.to(torch.float64).unsqueeze(1)
    total = torch.zeros(block.shape[1], dtype=torch.float64)
    step = rows_per_block(block.shape[1])
    for start in range(0, block.shape[0], step):
        total += (block[start : start + step].to(torch.float64) * weights[start : start + step]).sum(0)
    mean_row = total / count
    mean = mean_row.mean().item()
    squares = 0.0
    for start in range(0, block.shape[0], step):
        centred = block[start : start + step].to(torch.float64) - mean
        squares += (centred.square() * weights[start : start + step]).sum().item()
    return mean_row, mean, math.sqrt(squares / (count * block.shape[1]))


def _oov_rows(
    policy: str, block: torch.Tensor, block_index: torch.Tensor, rows: int, request: SourceRequest
) -> torch.Tensor:
    """``rows`` × D fill for the OOV rows of the slot (statistics over the found slot rows, ``block[block_index]``)."""
    n, d, generator = request.num_embeddings, request.embedding_dim, request.generator
    if policy == "zeros":
        return torch.zeros(rows, d, dtype=torch.float32)
    if policy in ("mean", "match"):
        mean_row, mean, std = _weighted_moments(block, torch.bincount(block_index, minlength=block.shape[0]))
        if policy == "mean":
            return mean_row.to(torch.float32).expand(rows, d).clone()
        out = torch.empty(rows, d, dtype=torch.float32)
        return out.normal_(mean, std, generator=generator) if std > 0 else out.fill_(mean)
    scheme = get_scheme(policy)
    std = scheme.std(n, d)  # the slot's shape sets a shape-dependent std (xavier, he, ...)
    return replace(scheme, std_of_shape=lambda _n, _d: std).sample(rows, d, generator=generator)


def _coverage(tokens: Sequence[str], match: Match, request: SourceRequest, max_missing: int) -> Coverage:
    by_rule = Counter(rule for rule in match.rules if rule is not None)
    missing = list(dict.fromkeys(token for token, rule in zip(tokens, match.rules) if rule is None))
    if missing and request.corpus is not None:
        wanted = set(missing)
        counts: Counter[str] = Counter()
        for sentence in request.corpus():
            counts.update(token for token in sentence if token in wanted)
        missing.sort(key=lambda token: -counts[token])  # stable: ties keep the slot's order
    return Coverage(
        found=sum(by_rule.values()),
        total=len(tokens),
        by_rule=dict(by_rule),
        missing=missing[: int(max_missing)],
        extra_rows=request.num_embeddings - len(tokens),
    )
