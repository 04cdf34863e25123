"""Lexical probes of an embedding table after each chain of modifications ([K] Table 4, [KB] §5;
docs/concepts.md#lexical-probes).

Word analogy (Mikolov's questions-words, 3CosAdd) and word similarity (Spearman's ρ between
cosine similarity and human ratings) through gensim's own
``KeyedVectors.evaluate_word_analogies`` / ``evaluate_word_pairs``: only questions and pairs whose
words are all in the vocabulary count (case-insensitive, as gensim's default), and the counts are
reported. Sections named ``gram…`` are morpho-syntactic, the others semantic ([KB]).

The chains (X the table, s the input scale, P a random positional row per word, X* = X standardized to the
target, σ_p = std(X), σ_x = the target's std, Xavier's √(2/(N+D)) by default) are registered in :data:`CHAINS`
with their matrices; docs/diagnostics.md tables them.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lightning_embinit.diagnostics.lexical_files import (
    check_probe_inputs,
    count_pairs,
    count_questions,
    fold,
    prepare_probe_files,
)
from lightning_embinit.init.positional import sinusoidal_encoding
from lightning_embinit.init.registry import Registry
from lightning_embinit.init.report import text_table
from lightning_embinit.init.statistics import MatrixStats, matrix_statistics
from lightning_embinit.init.transforms import StatisticsTarget, resolve_target, standardize
from lightning_embinit.text_files import check_encoding

DEFAULT_CHAINS = ("raw", "scaled", "raw+pe", "standardized", "standardized+scaled", "standardized+pe", "raw+pe_scaled")
DEFAULT_POSITIONS = 512


@dataclass
class ChainInputs:
    """What every chain is built from (float32, CPU)."""

    matrix: torch.Tensor
    input_scale: float
    position_rows: torch.Tensor  # (N, D): the positional row drawn for each word
    target: StatisticsTarget

    @cached_property
    def statistics(self) -> MatrixStats:
        return matrix_statistics(self.matrix)

    @cached_property
    def standardized(self) -> torch.Tensor:
        return standardize(self.matrix, self.target, statistics=self.statistics)

    @cached_property
    def target_std(self) -> float:
        return resolve_target(self.target, *self.matrix.shape)[1]


def chain_inputs(
    matrix: torch.Tensor,
    input_scale: float | None,
    positional: torch.Tensor | None,
    standardize_to: StatisticsTarget,
    seed: int,
) -> ChainInputs:
    """The chains' inputs for an (N, D) ``matrix``: s (default √D), and per word a row of ``positional`` (default
    sinusoidal, L = 512) drawn uniformly from a generator seeded with ``seed``."""
    dim = matrix.shape[1]
    if positional is None:
        positional = sinusoidal_encoding(DEFAULT_POSITIONS, dim + dim % 2)[:, :dim]
    if positional.dim() != 2 or positional.shape[1] != dim:
        raise ValueError(f"positional encoding of shape {tuple(positional.shape)} for vectors of dimension {dim}")
    resolve_target(standardize_to, *matrix.shape)
    values = matrix.detach().to("cpu", torch.float32)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, positional.shape[0], (values.shape[0],), generator=generator)
    return ChainInputs(
        values,
        math.sqrt(dim) if input_scale is None else float(input_scale),
        positional.detach().to("cpu", torch.float32)[rows],
        standardize_to,
    )


ChainFunction = Callable[[ChainInputs], torch.Tensor]
#: The chains of modifications by name (see the table above).
CHAINS: Registry[ChainFunction] = Registry("lexical chain")


def _chain(name: str, summary: str, function: ChainFunction) -> None:
    CHAINS.add(name, lambda: function, summary=summary)


_chain("raw", "X", lambda c: c.matrix)
_chain("scaled", "s · X", lambda c: c.matrix * c.input_scale)
_chain("raw+pe", "X + P", lambda c: c.matrix + c.position_rows)
_chain("standardized", "X* (standardized to the target)", lambda c: c.standardized)
_chain("standardized+scaled", "s · X*", lambda c: c.standardized * c.input_scale)
_chain("standardized+pe", "X* + P", lambda c: c.standardized + c.position_rows)
_chain("raw+pe_scaled", "X + P · σ_p / σ_x", lambda c: c.matrix + c.position_rows * (c.statistics.std / c.target_std))
_chain("scaled+pe", "s · X + P (the model input)", lambda c: c.matrix * c.input_scale + c.position_rows)
_chain("standardized+scaled+pe", "s · X* + P", lambda c: c.standardized * c.input_scale + c.position_rows)


def check_chains(chains: Sequence[str]) -> tuple[str, ...]:
    """The chain names, each known (``ValueError`` listing the known ones otherwise)."""
    if isinstance(chains, str):
        chains = [chains]
    for name in chains:
        CHAINS.split(name)
    if not chains:
        raise ValueError(f"no lexical chain given; known lexical chains: {CHAINS.known()}")
    return tuple(chains)


def is_syntactic(section: str) -> bool:
    """Mikolov's morpho-syntactic sections are named ``gram1-…`` … ``gram9-…``."""
    return section.lower().startswith("gram")


def vocabulary_coverage(tokens: Sequence[str], words: set[str]) -> int:
    """How many of ``words`` (folded by :func:`~lightning_embinit.diagnostics.lexical_files.probe_words`)
    are among ``tokens``."""
    return len(words & {fold(str(token)) for token in tokens})


def keyed_vectors(matrix: torch.Tensor, tokens: Sequence[str]):
    """gensim ``KeyedVectors`` over ``tokens`` and their rows; a repeated token keeps its first row,
    and rows of zero norm (no direction, so no cosine) are left out."""
    from gensim.models import KeyedVectors

    keep, seen = [], set()
    norms = matrix.norm(dim=1)
    for row, token in enumerate(tokens):
        if token not in seen and norms[row] > 0:
            seen.add(token)
            keep.append(row)
    vectors = KeyedVectors(vector_size=matrix.shape[1])
    vectors.add_vectors([tokens[row] for row in keep], matrix[keep].numpy().astype(np.float32, copy=False))
    return vectors


def single_threaded_blas() -> contextlib.AbstractContextManager[Any]:
    """One BLAS thread while gensim scores: its matrix–vector products are small, and once torch's
    OpenMP threads exist, OpenBLAS threads spinning beside them make every query 5–10× slower."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # an optional speed-up; the results are the same without it
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _accuracy(sections: Sequence[dict[str, Any]]) -> tuple[float | None, int]:
    correct = sum(len(s["correct"]) for s in sections)
    total = correct + sum(len(s["incorrect"]) for s in sections)
    return (correct / total if total else None), total


def evaluate(vectors: Any, analogies: str | None, similarity: Sequence[str]) -> dict[str, Any]:
    """Analogy accuracy (all, semantic, syntactic, counts) and Spearman's ρ per similarity file, by gensim."""
    restrict = len(vectors)
    vocabulary = {fold(word) for word in vectors.index_to_key}
    sections: list[dict[str, Any]] = []
    # gensim divides by the file's question count: a sampled file of no in-vocabulary question would fail
    if analogies is not None and count_questions(analogies, vocabulary):
        _, sections = vectors.evaluate_word_analogies(analogies, restrict_vocab=restrict, case_insensitive=True)
        sections = sections[:-1]  # the last entry is gensim's total, whose score is _accuracy(sections)
    parts = {
        "analogy": _accuracy(sections),
        "analogy_semantic": _accuracy([s for s in sections if not is_syntactic(s["section"])]),
        "analogy_syntactic": _accuracy([s for s in sections if is_syntactic(s["section"])]),
    }
    result: dict[str, Any] = {
        **{name: accuracy for name, (accuracy, _) in parts.items()},
        **{f"{name}_count": count for name, (_, count) in parts.items()},
        "similarity": {},
        "similarity_count": {},
    }
    for path in similarity:
        name = Path(path).stem
        count = count_pairs(path, vocabulary)
        result["similarity_count"][name] = count
        if count < 2:
            result["similarity"][name] = None
            continue
        _, spearman, _ = vectors.evaluate_word_pairs(path, restrict_vocab=restrict, case_insensitive=True)
        value = float(spearman.statistic if hasattr(spearman, "statistic") else spearman[0])
        result["similarity"][name] = value if math.isfinite(value) else None
    return result


def lexical_probe(
    matrix: torch.Tensor,
    tokens: Sequence[str],
    *,
    analogies: str | os.PathLike[str] | None = None,
    similarity: Sequence[str | os.PathLike[str]] = (),
    chains: Sequence[str] = DEFAULT_CHAINS,
    input_scale: float | None = None,
    positional: torch.Tensor | None = None,
    standardize_to: StatisticsTarget = "xavier",
    seed: int = 0,
    max_analogies: int | None = None,
    encoding: str = "utf-8",
) -> dict[str, dict[str, Any]]:
    """``{chain: {"analogy": acc, "analogy_semantic": acc, "analogy_syntactic": acc, "analogy_count": n,
    "similarity": {name: spearman}, ...}}`` for an (N, D) ``matrix`` whose row i is word ``tokens[i]``.

    ``input_scale`` is s (default √D); ``positional`` the (L, D) encoding (default: sinusoidal, L = 512), one row
    per word drawn from a generator seeded with ``seed``, the same for every chain; ``standardize_to`` the target of
    ``standardized`` (a scheme name, a std, a (mean, std) pair); ``max_analogies`` evaluates a seeded sample of the
    in-vocabulary questions. Accuracies are None when nothing was evaluated. A malformed file
    (:mod:`.lexical_files`, read in ``encoding``) or a table with a NaN or infinite value (a diverged run) is a
    ValueError naming it.
    """
    chains = check_chains(chains)
    if matrix.dim() != 2 or matrix.shape[0] != len(tokens):
        raise ValueError(f"matrix of shape {tuple(matrix.shape)} for {len(tokens)} tokens: need one row per token")
    if analogies is None and not similarity:
        raise ValueError("lexical_probe needs an analogy file (analogies=) or word-similarity files (similarity=[...])")
    analogy_path, similarity_paths = check_probe_inputs(analogies, similarity, max_analogies)
    check_encoding(encoding)
    check_finite_rows(matrix, tokens)
    inputs = chain_inputs(matrix, input_scale, positional, standardize_to, seed)
    tokens = [str(token) for token in tokens]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="embinit-lexical-") as directory, single_threaded_blas():
        analogy_path, similarity_paths = prepare_probe_files(
            analogy_path,
            similarity_paths,
            directory,
            encoding=encoding,
            max_analogies=max_analogies,
            seed=seed,
            vocabulary={fold(t) for t in tokens},
        )
        for name in chains:
            vectors = keyed_vectors(CHAINS.build(name)(inputs), tokens)
            results[name] = evaluate(vectors, analogy_path, similarity_paths)
    return results


def check_finite_rows(matrix: torch.Tensor, tokens: Sequence[Any]) -> None:
    """Raise ValueError when a row of ``matrix`` holds NaN or ±inf, naming how many and the first ones."""
    finite = torch.isfinite(matrix.detach()).all(dim=1).cpu()
    if not bool(finite.all()):
        bad = (~finite).nonzero().flatten().tolist()
        first = ", ".join(f"row {row} ({str(tokens[row])!r})" for row in bad[:5])
        raise ValueError(
            f"the table has {len(bad)} of {len(finite)} rows with NaN or infinite values ({first}); "
            "a diverged run? the lexical probes need finite vectors"
        )


def format_probe(results: dict[str, dict[str, Any]]) -> str:
    """A fixed-width table: one line per chain, analogy accuracies and each similarity ρ."""
    names = sorted({name for result in results.values() for name in result["similarity"]})
    header = ["chain", "analogy", "semantic", "syntactic", "questions", *names]

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    rows = [
        [chain, *map(number, (r["analogy"], r["analogy_semantic"], r["analogy_syntactic"])), str(r["analogy_count"])]
        + [number(r["similarity"].get(name)) for name in names]
        for chain, r in results.items()
    ]
    return "\n".join(text_table(header, rows))
