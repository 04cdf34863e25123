"""The source interface: a source turns a :class:`SourceRequest` (a slot's shape, token strings, special tokens, a
generator and maybe its training text) into a :class:`SourceMatrix` (the N×D float32 matrix, which rows are
pre-trained, the coverage). Random schemes are sources too (:class:`SchemeSource`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from lightning_embinit.checks import looks_like_local_path
from lightning_embinit.init.registry import Registry
from lightning_embinit.init.schemes import SCHEMES, RandomScheme, get_scheme


@dataclass(frozen=True)
class SourceRequest:
    """What a source is asked to fill: one slot of ``num_embeddings × embedding_dim``."""

    slot_name: str
    num_embeddings: int
    embedding_dim: int
    tokens: Sequence[str] | None = None
    padding_idx: int | None = None
    special_tokens: Mapping[str, str] = field(default_factory=dict)
    generator: torch.Generator | None = None
    corpus: Callable[[], Iterable[Sequence[str]]] | None = None


@dataclass
class Coverage:
    """How much of a slot's vocabulary a pre-trained source covered, by matching rule: ``total`` counts the slot's
    token strings, ``extra_rows`` the table's rows past them (unnamed, filled as out-of-vocabulary rows)."""

    found: int
    total: int
    by_rule: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    extra_rows: int = 0

    @property
    def fraction(self) -> float:
        return self.found / self.total if self.total else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"found": self.found, "total": self.total, "fraction": self.fraction} | asdict(self)


@dataclass
class SourceMatrix:
    """A source's answer: the rows, which of them are pre-trained, and how the vocabulary was covered."""

    weight: torch.Tensor
    pretrained_rows: torch.Tensor
    description: str
    coverage: Coverage | None = None

    def __post_init__(self) -> None:
        if self.weight.dim() != 2:
            raise ValueError(
                f"{self.description}: a source must return an (N, D) matrix, got {tuple(self.weight.shape)}"
            )
        if self.pretrained_rows.shape != (self.weight.shape[0],) or self.pretrained_rows.dtype != torch.bool:
            raise ValueError(f"{self.description}: pretrained_rows must be a bool vector of length N")


@runtime_checkable
class EmbeddingSource(Protocol):
    """Anything with a ``name``, an ``is_pretrained`` flag and ``build(request) -> SourceMatrix``.

    Constructing a source must be cheap (options are checked, no file is read); ``build`` reads and returns a new
    tensor that the caller owns and may transform in place.
    """

    name: str
    is_pretrained: bool

    def build(self, request: SourceRequest) -> SourceMatrix: ...


SOURCES: Registry[EmbeddingSource] = Registry("source")


@runtime_checkable
class VectorSet(Protocol):
    """A pre-trained source's vectors as alignment (:mod:`lightning_embinit.init.sources.alignment`) sees them: token →
    row lookup and row gathering; ``special_tokens`` maps roles (``pad``, ``unk``, ``bos``, ``eos``, ``cls``, ``sep``,
    ``mask``) to the set's own tokens. A set that makes vectors for unseen tokens (fastText) also has
    ``compose(tokens) -> Tensor``; one with a tokenizer (Hugging Face) ``split_into_pieces(words) -> list[list[int]]``.
    """

    description: str
    dim: int
    special_tokens: Mapping[str, str]

    def lookup(self) -> Mapping[str, int]: ...

    def gather(self, rows: Sequence[int]) -> torch.Tensor: ...


@dataclass(frozen=True)
class SchemeSource:
    """A random scheme used as a source: every row is random, none pre-trained."""

    scheme: RandomScheme
    is_pretrained: bool = False

    @property
    def name(self) -> str:
        return self.scheme.name

    def build(self, request: SourceRequest) -> SourceMatrix:
        weight = self.scheme.sample(request.num_embeddings, request.embedding_dim, generator=request.generator)
        return SourceMatrix(
            weight=weight,
            pretrained_rows=torch.zeros(request.num_embeddings, dtype=torch.bool),
            description=self.scheme.describe(request.num_embeddings, request.embedding_dim),
        )


def known_sources() -> str:
    return f"schemes: {SCHEMES.known()}; pre-trained sources: {SOURCES.known()}"


def resolve_source(spec: str | EmbeddingSource | RandomScheme, **options: Any) -> EmbeddingSource:
    """The source for ``spec``: a scheme name, a registered source name (``options``, e.g. ``oov="match"``, go to its
    factory), a local file (``file:<path>``), a local directory (a Hugging Face model, ``hf:<dir>``), or an object."""
    if isinstance(spec, RandomScheme):
        spec = SchemeSource(spec)
    if isinstance(spec, EmbeddingSource):
        if options:
            raise ValueError(
                f"source options {sorted(options)} given with a source object {spec.name!r}; "
                "pass them to its constructor"
            )
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"a source is a name or an EmbeddingSource, got {type(spec).__name__}; {known_sources()}")
    if spec in SCHEMES:
        if options:
            raise ValueError(f"random scheme {spec!r} takes no source options, got {sorted(options)}")
        return SchemeSource(get_scheme(spec))
    if spec in SOURCES:
        return SOURCES.build(spec, **options)
    if spec.partition(":")[0] in set(SCHEMES):
        SCHEMES.build(spec)  # raises the scheme's own, more precise error (e.g. a bad std)
    local = os.path.expanduser(spec)
    if os.path.isdir(local):
        return SOURCES.build(f"hf:{spec}", **options)
    if os.path.isfile(local):
        return SOURCES.build(f"file:{spec}", **options)
    if looks_like_local_path(spec):
        raise ValueError(
            f"source {spec!r}: no such file or directory (a vector file, read as file:<path>, or a "
            "Hugging Face model directory, read as hf:<dir>)"
        )
    raise ValueError(f"unknown source {spec!r}; known {known_sources()}")
