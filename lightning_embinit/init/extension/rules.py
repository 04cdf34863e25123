"""Where the new rows of an extended vocabulary come from (docs/vocabulary_extension.md, "Rules").

μ and Σ are the mean row and the population covariance (divided by M) of the M old non-padding rows. ``mean``: every
new row is μ, so a new token's logit h·μ (+ b̄) is the mean of the old logits and by Jensen
exp(h·μ + b̄) ≤ mean_j exp(h·w_j + b_j): no new token outweighs the average old one (J. Hewitt, "Initializing New
Word Embeddings for Pretrained Language Models", 2021). ``mean_cov[:s]``: a sample of N(μ, s·Σ), s = 1e-9 by default
as Hugging Face's ``resize_token_embeddings(mean_resizing=True)``. ``pieces``: the mean of the old rows of the pieces
the **old** tokenizer splits the new token into. Or a random scheme, or a pre-trained source aligned by string.
New bias entries of an untied output layer: :data:`BIAS_RULES`, or a number.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from lightning_embinit.init.registry import Registry
from lightning_embinit.init.schemes import SCHEMES, RandomScheme, get_scheme
from lightning_embinit.init.sources.base import SOURCES, EmbeddingSource, SourceRequest, resolve_source

Splitter = Callable[[str], Sequence[int]]
"""A token string → the old ids of its pieces (the old tokenizer, :func:`splitter_of`)."""

MEAN_COV_SCALE = 1e-9
"""The covariance scale of ``mean_cov`` without an argument: Hugging Face's ``mean_resizing``."""

TOKEN_MARKERS = ("▁", "Ġ", "##")
"""Word-start (SentencePiece ``▁``, byte-level BPE ``Ġ``) and continuation (WordPiece ``##``) marks that a
new token's text for the ``pieces`` rule drops."""


@dataclass
class NewRowsRequest:
    """What a rule reads: ``old_table``, the whole (N, D) old matrix (``pieces`` reads rows by old id); ``old_rows``,
    the old tokens' rows (μ, Σ: neither the padding row nor a padded table's rows without a token); the ``tokens``
    that need rows; ``num_embeddings``, the extended table's size N′ (a shape-dependent scheme's std); ``what`` names
    the matrix in errors."""

    old_table: torch.Tensor
    old_rows: torch.Tensor
    tokens: Sequence[str]
    num_embeddings: int
    generator: torch.Generator
    what: str
    split: Splitter | None = None

    @property
    def dim(self) -> int:
        return self.old_table.shape[1]

    @cached_property
    def mean_row(self) -> torch.Tensor:
        """μ (summed in float32 at least), as float64."""
        return self.old_rows.to(torch.promote_types(self.old_rows.dtype, torch.float32)).mean(dim=0).double()


NewRows = tuple[torch.Tensor, dict[str, int]]
"""A rule's answer: the (m, D) float32 rows, and how many tokens each rule (or fallback) served."""


@dataclass(frozen=True)
class ExtensionRule:
    """A named way to make new rows; ``serves_output_layers``: also an untied output layer's (not a pre-trained
    source: ``mean`` serves them); ``needs_split``: reads the old tokenizer's pieces; ``uses_old_rows``: needs μ, Σ;
    ``reads_tokens``: a row follows its token's string (rows without a token get μ)."""

    name: str
    make: Callable[[NewRowsRequest], NewRows]
    serves_output_layers: bool = True
    needs_split: bool = False
    uses_old_rows: bool = False
    reads_tokens: bool = False

    def __call__(self, request: NewRowsRequest) -> NewRows:
        return self.make(request)


RULES: Registry[ExtensionRule] = Registry("extension rule")
"""Extension rules by name: ``mean``, ``mean_cov[:<scale>]``, ``pieces`` (schemes and sources are their own
registries)."""


@RULES.register(
    "mean", summary="every new row is the old rows' mean μ (Hewitt 2021): no new token outweighs the average"
)
def mean_rule() -> ExtensionRule:
    return ExtensionRule(
        "mean",
        lambda r: (r.mean_row.float().expand(len(r.tokens), -1).clone(), {"mean": len(r.tokens)}),
        uses_old_rows=True,
    )


def sample_mean_cov(old_rows: torch.Tensor, count: int, scale: float, generator: torch.Generator) -> torch.Tensor:
    """``count`` rows of N(μ, scale·Σ), Σ = (X − μ)ᵀ(X − μ)/M: μ + z·Lᵀ with scale·Σ = L Lᵀ (Cholesky), z ~ N(0, I);
    for a Σ that is not positive definite (fewer rows than columns) L = V·√(scale·λ) from Σ = V diag(λ) Vᵀ, λ < 0
    counted as 0. μ and Σ's product in the table's precision (float32 at least, as Hugging Face's ``mean_resizing``),
    the D × D factorization and the sample in float64."""
    work = torch.promote_types(old_rows.dtype, torch.float32)
    rows = old_rows.to(work)
    mean = rows.mean(dim=0).double()
    centred = rows - mean.to(work)
    covariance = (centred.T @ centred).double() / old_rows.shape[0]
    factor, info = torch.linalg.cholesky_ex(covariance * scale)
    if info != 0:
        eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
        factor = eigenvectors * (eigenvalues.clamp(min=0) * scale).sqrt()
    noise = torch.randn(count, old_rows.shape[1], generator=generator, dtype=torch.float64)
    return (mean + noise @ factor.T).float()


@RULES.register(
    "mean_cov",
    takes_argument=True,
    summary="N(μ, s·Σ) of the old rows; s = 1e-9 without an argument (Hugging Face's mean_resizing)",
)
def mean_cov_rule(scale: str | None = None) -> ExtensionRule:
    value = MEAN_COV_SCALE if scale is None else _number(scale, "mean_cov:<scale>")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"extension rule 'mean_cov:{scale}': the covariance scale must be a finite number ≥ 0")
    name = "mean_cov" if scale is None else f"mean_cov:{scale}"
    return ExtensionRule(
        name,
        lambda r: (sample_mean_cov(r.old_rows, len(r.tokens), value, r.generator), {name: len(r.tokens)}),
        uses_old_rows=True,
    )


def _pieces(request: NewRowsRequest) -> NewRows:
    size = request.old_table.shape[0]
    mean = request.mean_row.float()
    rows, served = [], 0
    for token in request.tokens:
        pieces = [i for i in request.split(token) if 0 <= i < size]
        rows.append(request.old_table[pieces].double().mean(dim=0).float() if pieces else mean)
        served += bool(pieces)
    if request.tokens and not served:
        raise ValueError(
            f"{request.what}: the old tokenizer splits none of the {len(request.tokens)} new tokens into known "
            f"pieces (first: {list(request.tokens)[:5]}); a word-level tokenizer has no pieces: choose "
            f"another rule ({known_rules()})"
        )
    counts = {"pieces": served, "mean (no known piece)": len(request.tokens) - served}
    return torch.stack(rows) if rows else request.old_table.new_zeros(0, request.dim).float(), counts


@RULES.register("pieces", summary="the mean of the old rows of the pieces the old tokenizer splits the new token into")
def pieces_rule() -> ExtensionRule:
    return ExtensionRule("pieces", _pieces, needs_split=True, uses_old_rows=True, reads_tokens=True)


def scheme_rule(scheme: RandomScheme) -> ExtensionRule:
    """New rows drawn from ``scheme``, its mean and std those of the extended (N′, D) table."""

    def make(request: NewRowsRequest) -> NewRows:
        count, std, center = len(request.tokens), scheme.std(request.num_embeddings, request.dim), scheme.mean
        rows = torch.empty(count, request.dim)
        if scheme.distribution == "constant":
            rows.fill_(center)
        elif scheme.distribution == "uniform":
            rows.uniform_(center - std * math.sqrt(3.0), center + std * math.sqrt(3.0), generator=request.generator)
        else:
            rows.normal_(center, std, generator=request.generator)
        return rows, {scheme.describe(request.num_embeddings, request.dim): count}

    return ExtensionRule(scheme.name, make)


def source_rule(source: EmbeddingSource) -> ExtensionRule:
    """New rows from a pre-trained source aligned to the new tokens by string; tokens it lacks get μ."""

    def make(request: NewRowsRequest) -> NewRows:
        built = source.build(
            SourceRequest(
                slot_name=request.what,
                num_embeddings=len(request.tokens),
                embedding_dim=request.dim,
                tokens=list(request.tokens),
                generator=request.generator,
            )
        )
        if tuple(built.weight.shape) != (len(request.tokens), request.dim):
            raise ValueError(
                f"{request.what}: source {source.name!r} gives rows of width {built.weight.shape[1]}, the table "
                f"has {request.dim} (source_options={{'project': 'pca'}} projects a wider source)"
            )
        found = built.pretrained_rows
        rows = torch.where(found.unsqueeze(1), built.weight.float(), request.mean_row.float())
        return rows, {source.name: int(found.sum()), "mean (not in the source)": int((~found).sum())}

    return ExtensionRule(source.name, make, serves_output_layers=False, reads_tokens=True)


def known_rules() -> str:
    return f"{RULES.known()}; a random scheme ({SCHEMES.known()}); or a pre-trained source ({SOURCES.known()})"


def resolve_rule(spec: str | ExtensionRule, **source_options: Any) -> ExtensionRule:
    """The rule for ``spec``: a registered rule, a random scheme, or a pre-trained source (with ``source_options``)."""
    if not isinstance(spec, str):
        return spec
    name, colon, _ = spec.partition(":")
    if name in set(RULES):
        return RULES.create(name) if not colon else RULES.build(spec)  # mean_cov without a scale: its default
    if name in set(SCHEMES):
        return scheme_rule(get_scheme(spec))
    try:
        source = resolve_source(spec, **source_options)
    except ValueError as error:
        if "unknown source" not in str(error):
            raise
        raise ValueError(f"unknown extension rule {spec!r}; choose a rule: {known_rules()}") from None
    return source_rule(source)


BiasRule = Callable[[torch.Tensor], float]
BIAS_RULES: Registry[BiasRule] = Registry("bias rule")
"""Bias rules by name: ``mean``, ``min``, ``zero`` (each a function of the old entries)."""
BIAS_RULES.add("mean", lambda: lambda old: float(old.double().mean()), summary="the old entries' mean (Hugging Face's)")
BIAS_RULES.add(
    "min", lambda: lambda old: float(old.min()), summary="the lowest old entry: new tokens start below every old one"
)
BIAS_RULES.add("zero", lambda: lambda old: 0.0, summary="0")


def new_bias_value(rule: str | float, old: torch.Tensor) -> float:
    """The value of every new bias entry: a :data:`BIAS_RULES` name applied to the old entries, or a number."""
    if isinstance(rule, (int, float)) and not isinstance(rule, bool):
        if not math.isfinite(rule):
            raise ValueError(f"bias= must be finite, got {rule}")
        return float(rule)
    return BIAS_RULES.build(rule)(old) if rule in BIAS_RULES else _number(rule, "bias=", BIAS_RULES.known())


def _number(text: Any, what: str, names: str = "") -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        also = f" or one of: {names}" if names else ""
        raise ValueError(f"{what} takes a number{also}; got {text!r}") from None


def token_text(token: str) -> str:
    """The text a new token stands for, for the old tokenizer to split: its :data:`TOKEN_MARKERS` dropped."""
    for marker in TOKEN_MARKERS:
        if token.startswith(marker) and len(token) > len(marker):
            return token[len(marker) :]
    return token


def splitter_of(tokenizer: Any, old_tokens: Sequence[str] | None = None) -> Splitter | None:
    """A token → old piece ids function (unknown pieces dropped) from an old tokenizer: a callable returning ids or
    token strings (looked up in ``old_tokens``), an object with ``encode(text) -> ids`` (the package's
    ``TextTokenizer``), or a Hugging Face tokenizer."""
    if tokenizer is None:
        return None
    index = functools.cache(lambda: {token: i for i, token in enumerate(old_tokens or ())})  # built on first use
    unknown = {getattr(tokenizer, name, None) for name in ("unk_id", "unk_token_id")} - {None}
    if callable(getattr(tokenizer, "convert_tokens_to_ids", None)) and callable(tokenizer):
        encode = lambda token: tokenizer(token_text(token), add_special_tokens=False)["input_ids"]  # noqa: E731
    elif callable(getattr(tokenizer, "encode", None)):
        encode = lambda token: _ids(tokenizer.encode(token_text(token)))  # noqa: E731
    elif callable(tokenizer):
        encode = tokenizer
    else:
        raise ValueError(
            f"old_tokenizer= is a tokenizer (encode(text) → ids), a Hugging Face tokenizer or a callable "
            f"token → pieces; got {type(tokenizer).__name__}"
        )

    def split(token: str) -> list[int]:
        pieces = [index().get(piece, -1) if isinstance(piece, str) else int(piece) for piece in encode(token)]
        return [i for i in pieces if i >= 0 and i not in unknown]

    return split


def _ids(encoded: Any) -> Sequence[int]:
    """Ids from ``encode``'s answer: a list, or a ``tokenizers.Encoding`` (its ``ids``)."""
    return getattr(encoded, "ids", encoded)
