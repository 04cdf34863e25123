"""Transforms of an embedding matrix (Kim et al., "On Initializing Transformers with Pre-trained Embeddings" [K]
§3.4 and A.3; docs/concepts.md#transforms), and the removal of shared directions (:mod:`.directions`: center,
all-but-the-top, whitening; docs/concepts.md#shared-directions).

The functions are pure unless given ``out=`` and deterministic for a given generator; statistics accumulate in
float64 and the affine maps run in float32 blocks, bf16 results rounded stochastically (unbiased). :data:`TRANSFORMS`
wraps them as steps over a :class:`SourceMatrix`, so a row permutation also permutes which rows are pre-trained.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from lightning_embinit.init.directions import (
    DEFAULT_WHITEN_EPS,
    center,
    check_top_k,
    check_whiten_eps,
    remove_top,
    whiten,
)
from lightning_embinit.init.registry import Registry
from lightning_embinit.init.schemes import SCHEMES, RandomScheme, get_scheme
from lightning_embinit.init.sources.base import SourceMatrix, SourceRequest, resolve_source
from lightning_embinit.init.statistics import (
    CHUNK_ELEMENTS,
    MatrixStats,
    PrincipalDirections,
    default_top_k,
    matrix_statistics,
    round_to_bfloat16,
)

StatisticsTarget = str | float | int | Sequence[float] | torch.Tensor | MatrixStats | RandomScheme
"""A scheme name, a std, a (mean, std) pair, a matrix whose statistics to copy, or MatrixStats."""


def resolve_target(target: StatisticsTarget, num_embeddings: int, embedding_dim: int) -> tuple[float, float]:
    """The (mean, std) that ``target`` stands for on an N×D table; invalid targets raise ``ValueError``."""
    if isinstance(target, (str, RandomScheme)):
        scheme = get_scheme(target)
        mean, std = scheme.mean, scheme.std(num_embeddings, embedding_dim)
    elif isinstance(target, (torch.Tensor, MatrixStats)):
        stats = matrix_statistics(target) if isinstance(target, torch.Tensor) else target
        mean, std = stats.mean, stats.std
    elif isinstance(target, (int, float)) and not isinstance(target, bool):
        mean, std = 0.0, float(target)
    elif isinstance(target, Sequence) and len(target) == 2:
        mean, std = (float(v) for v in target)
    else:
        raise ValueError(
            f"a standardization target is a scheme name ({SCHEMES.known()}), a std, a (mean, std) pair "
            f"or a matrix; got {target!r}"
        )
    if not math.isfinite(mean) or not math.isfinite(std) or std <= 0:
        raise ValueError(
            f"a standardization target needs a finite mean and a finite std > 0, got mean={mean}, std={std}"
        )
    return mean, std


def affine(
    matrix: torch.Tensor,
    scale: float,
    shift: float,
    *,
    out: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``scale · X + shift`` computed in float32 (or wider) blocks, in ``matrix``'s dtype, into ``out`` (which may be
    ``matrix``) when given. bf16 results are rounded stochastically with ``generator`` (a fixed seed when ``None``)."""
    if out is None:
        out = torch.empty_like(matrix, memory_format=torch.contiguous_format)
    elif not out.is_contiguous() or out.shape != matrix.shape:
        raise ValueError(f"out= must be a contiguous tensor of shape {tuple(matrix.shape)}")
    compute = torch.promote_types(matrix.dtype, torch.float32)
    if out.dtype == torch.bfloat16 and generator is None:
        generator = torch.Generator().manual_seed(0)
    flat_in, flat_out = matrix.reshape(-1), out.reshape(-1)
    for start in range(0, flat_in.numel(), CHUNK_ELEMENTS):
        source, target = flat_in[start : start + CHUNK_ELEMENTS], flat_out[start : start + CHUNK_ELEMENTS]
        if target.dtype == compute:
            torch.mul(source, scale, out=target).add_(shift)
            continue
        block = source.to(compute).mul_(scale).add_(shift)
        target.copy_(round_to_bfloat16(block, generator) if target.dtype == torch.bfloat16 else block)
    return out


def standardize(
    matrix: torch.Tensor,
    target: StatisticsTarget = "xavier",
    *,
    statistics: MatrixStats | None = None,
    out: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pre-trained_Xavier, generalized ([K] §3.4): x* = (x − mean(X)) · σ_t / σ_X + μ_t, with (μ_t, σ_t) from
    ``target``: a scheme's std for this shape (√(2/(N+D)) for ``"xavier"``), a std, a (mean, std) pair or a matrix's."""
    target_mean, target_std = resolve_target(target, *matrix.shape)
    stats = statistics or matrix_statistics(matrix)
    if stats.std == 0:
        raise ValueError("cannot standardize a constant matrix (its std is 0)")
    scale = target_std / stats.std
    return affine(matrix, scale, target_mean - stats.mean * scale, out=out, generator=generator)


def match(random: torch.Tensor, reference: StatisticsTarget, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Xavier_Pre-trained ([K] §3.4): x* = (x − mean(X_x)) · σ_p / σ_x + mean(X_p), X_p the reference."""
    return standardize(random, reference, out=out)


def scale(matrix: torch.Tensor, factor: float, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``factor · X``."""
    if not math.isfinite(factor):
        raise ValueError(f"a scale factor must be finite, got {factor}")
    return affine(matrix, factor, 0.0, out=out)


def shuffle(matrix: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pre-trained_Shuffled ([K] §3.4): permute rows and columns; keeps the values, destroys the semantics."""
    row_order, column_order = (torch.randperm(size, generator=generator) for size in matrix.shape)
    return matrix[row_order][:, column_order]


# -- steps over a SourceMatrix, selected by name ---------------------------------------------


@dataclass(frozen=True)
class Transform(ABC):
    """One named step of the initialization recipe; ``options`` configure a reference source (match, standardize)."""

    name: str
    argument: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.argument is None or self.argument is True:
            return self.name
        if isinstance(self.argument, torch.Tensor):
            return f"{self.name}(matrix {tuple(self.argument.shape)})"
        extra = "".join(f", {key}={value}" for key, value in self.options.items())
        return f"{self.name}({self.argument}{extra})"

    def validate(self, num_embeddings: int, embedding_dim: int) -> None:
        """Raise ``ValueError`` for an argument that cannot work on an N×D table."""
        return None  # by default every argument works: a no-op hook, not an abstract method

    @abstractmethod
    def __call__(self, matrix: SourceMatrix, request: SourceRequest) -> SourceMatrix:
        """The transformed matrix; may reuse ``matrix.weight``'s storage, which the pipeline owns."""


#: The transforms by name (``standardize``, ``match``, ``shuffle``, ``scale``, ``center``, ``remove_top``, ``whiten``),
#: as ``transforms=[...]`` names them.
TRANSFORMS: Registry[Transform] = Registry("transform")


@dataclass(frozen=True)
class ReferenceStatistics(Transform):
    """``standardize`` (Pre-trained_Xavier, generalized) or ``match`` (Xavier_Pre-trained): move the matrix onto a
    target's mean and std; a named source is built for the same slot, its pre-trained rows' statistics the target."""

    @property
    def names_a_source(self) -> bool:
        """Whether the target names a source (``"glove"``) rather than a scheme or a number (numeric text is one)."""
        return isinstance(self.argument, str) and self.argument not in SCHEMES

    def validate(self, num_embeddings: int, embedding_dim: int) -> None:
        if self.names_a_source:
            try:
                resolve_source(self.argument, **self.options)
            except ValueError as error:
                raise ValueError(
                    f"{self.name}={self.argument!r} is not a scheme ({SCHEMES.known()}), a number, "
                    f"a (mean, std) pair or a usable reference source: {error}"
                ) from None
            return
        if self.options:
            raise ValueError(
                f"{self.name}_options {dict(self.options)} are for a reference source, but "
                f"{self.name}={self.argument!r} is not one"
            )
        resolve_target(self.argument, num_embeddings, embedding_dim)

    def __call__(self, matrix: SourceMatrix, request: SourceRequest) -> SourceMatrix:
        target = self.argument
        if self.names_a_source:
            built = resolve_source(target, **self.options).build(request)
            rows = built.weight[built.pretrained_rows] if bool(built.pretrained_rows.any()) else built.weight
            target = matrix_statistics(rows)
        target = resolve_target(target, request.num_embeddings, request.embedding_dim)  # the whole table's shape
        weight = standardize(matrix.weight, target, out=matrix.weight, generator=request.generator)
        return replace(matrix, weight=weight)


@dataclass(frozen=True)
class Shuffle(Transform):
    def __call__(self, matrix: SourceMatrix, request: SourceRequest) -> SourceMatrix:
        row_order, column_order = (torch.randperm(size, generator=request.generator) for size in matrix.weight.shape)
        return replace(
            matrix,
            weight=matrix.weight[row_order][:, column_order],
            pretrained_rows=matrix.pretrained_rows[row_order],
        )


@dataclass(frozen=True)
class Scale(Transform):
    def validate(self, num_embeddings: int, embedding_dim: int) -> None:
        if not isinstance(self.argument, (int, float)) or not math.isfinite(self.argument):
            raise ValueError(f"transform 'scale' needs a finite number, got {self.argument!r}")

    def __call__(self, matrix: SourceMatrix, request: SourceRequest) -> SourceMatrix:
        return replace(matrix, weight=scale(matrix.weight, float(self.argument), out=matrix.weight))


def _number_or_text(argument: Any) -> Any:
    try:
        return float(argument) if isinstance(argument, str) else argument
    except ValueError:
        return argument


TRANSFORMS.add(
    "standardize",
    lambda target, **options: ReferenceStatistics("standardize", _number_or_text(target), options),
    takes_argument=True,
    summary="Pre-trained_Xavier generalized: move onto a scheme's std, a std, "
    "(mean, std), a matrix's or a source's statistics",
)
TRANSFORMS.add(
    "match",
    lambda reference, **options: ReferenceStatistics("match", _number_or_text(reference), options),
    takes_argument=True,
    summary="Xavier_Pre-trained: move onto a reference source's mean and std",
)
TRANSFORMS.add("shuffle", lambda: Shuffle("shuffle", True), summary="Pre-trained_Shuffled: permute rows and columns")
TRANSFORMS.add(
    "scale",
    lambda factor: Scale("scale", _number_or_text(factor)),
    takes_argument=True,
    summary="multiply by a constant factor",
)


@dataclass(frozen=True)
class SharedDirections(Transform):
    """``center``, ``remove_top[:k]`` or ``whiten[:eps]`` (:mod:`.directions`): fitted on the pre-trained rows and
    applied to them (to every row when the source has none, as a random scheme). The OOV rows, which the source's
    ``oov`` policy drew apart from the pre-trained rows' directions, are only moved to the transformed rows' mean, 0:
    their own mean row is subtracted (``oov="mean"`` rows, all the pre-trained mean row, become 0, as the map makes
    it; i.i.d. rows stay i.i.d.)."""

    def validate(self, num_embeddings: int, embedding_dim: int) -> None:
        if self.name == "remove_top" and self.argument is not None:
            check_top_k(self.argument, embedding_dim)

    def __call__(self, matrix: SourceMatrix, request: SourceRequest) -> SourceMatrix:
        weight = self.apply_to_source(matrix.weight, matrix.pretrained_rows, generator=request.generator)
        return replace(matrix, weight=weight)

    def apply_to_source(
        self,
        weight: torch.Tensor,
        pretrained: torch.Tensor,
        *,
        generator: torch.Generator | None = None,
        directions: PrincipalDirections | None = None,
    ) -> torch.Tensor:
        """``weight`` transformed in place as a pre-trained source's table (the class doc): the map fitted on and
        applied to the ``pretrained`` rows (every row when none is), the others re-centred. ``directions``: the
        pre-trained rows' principal directions when already computed."""
        if not bool(pretrained.any()):
            return self.apply(weight, generator=generator, directions=directions)
        oov = (~pretrained).nonzero().squeeze(1).to(weight.device)
        kept = weight.index_select(0, oov).float()  # usually few rows
        self.apply(weight, rows=pretrained, generator=generator, directions=directions)
        if len(oov):
            centred = kept - kept.mean(dim=0)
            rounded = round_to_bfloat16(centred, generator) if weight.dtype == torch.bfloat16 else centred
            weight.index_copy_(0, oov, rounded.to(weight.dtype))
        return weight

    def apply(
        self,
        weight: torch.Tensor,
        *,
        rows: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        directions: PrincipalDirections | None = None,
    ) -> torch.Tensor:
        """``weight`` transformed in place, the map fitted on the rows ``rows`` selects (all when ``None``;
        ``directions``: theirs, when already computed)."""
        options = {"rows": rows, "generator": generator, "out": weight}
        if self.name == "center":
            return center(weight, **options)
        if self.name == "remove_top":
            return remove_top(weight, self.argument, directions=directions, **options)
        eps = DEFAULT_WHITEN_EPS if self.argument is None else self.argument
        return whiten(weight, eps, directions=directions, **options)

    def rows_needed(self, embedding_dim: int) -> int:
        """The fewest rows the map can be fitted on: 2 (a mean and a spread), k + 2 for ``remove_top`` (k
        directions of the centred rows, and one left)."""
        if self.name == "remove_top":
            return (default_top_k(embedding_dim) if self.argument is None else self.argument) + 2
        return 2


SHARED_DIRECTIONS = ("center", "remove_top", "whiten")
"""The transforms that remove shared directions, which vocabulary extension also applies to its new rows."""


def shared_direction_steps(specs: Sequence[str] | None, what: str = "transforms=") -> list[SharedDirections]:
    """The :class:`SharedDirections` steps ``specs`` name (``"center"``, ``"remove_top[:k]"``, ``"whiten[:eps]"``);
    any other name is a ValueError that lists these."""
    if specs is None:
        return []
    if isinstance(specs, str) or not isinstance(specs, Sequence):
        raise ValueError(f"{what} is a list of steps such as ['remove_top:3'], got {specs!r}")
    steps = []
    for spec in specs:
        step = build_transform(spec) if isinstance(spec, str) else None
        if not isinstance(step, SharedDirections):
            raise ValueError(
                f"{what}: {spec!r} is not a transform of the new rows; choose from: {', '.join(SHARED_DIRECTIONS)} "
                "(standardize= sets their mean and std)"
            )
        steps.append(step)
    return steps


def _top_k(k: Any = None) -> SharedDirections:
    if isinstance(k, str):
        try:
            k = int(k)
        except ValueError:
            raise ValueError(f"transform 'remove_top:<k>' needs an integer number of directions, got {k!r}") from None
    if k is not None:
        check_top_k(k)  # k < D once the table's width is known
    return SharedDirections("remove_top", k)


def _whiten_eps(eps: Any = None) -> SharedDirections:
    eps = _number_or_text(eps)
    if eps is not None:
        check_whiten_eps(eps)
    return SharedDirections("whiten", eps)


TRANSFORMS.add("center", lambda: SharedDirections("center"), summary="subtract the mean row")
TRANSFORMS.add(
    "remove_top",
    _top_k,
    takes_argument=True,
    optional_argument=True,
    summary="all-but-the-top (Mu & Viswanath): center, remove the top k principal directions (k optional: ≈ D/100)",
)
TRANSFORMS.add(
    "whiten",
    _whiten_eps,
    takes_argument=True,
    optional_argument=True,
    summary=f"ZCA whitening with relative regularization eps (optional, {DEFAULT_WHITEN_EPS}), total variance kept",
)


def build_transform(spec: str, argument: Any = None, **options: Any) -> Transform:
    """The transform for ``"name[:argument]"``, or ``name`` with a Python ``argument``; ``options``: its source's."""
    return TRANSFORMS.build(spec, **options) if argument is None else TRANSFORMS.create(spec, argument, **options)
