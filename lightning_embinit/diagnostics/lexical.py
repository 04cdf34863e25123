"""Lexical probes of an embedding table after each chain of modifications (SPEC §1, [K] Table 4, [KB] §5).

Word analogy (Mikolov's questions-words, 3CosAdd) and word similarity (Spearman's ρ between
cosine similarity and human ratings) through gensim's own
``KeyedVectors.evaluate_word_analogies`` / ``evaluate_word_pairs``: only questions and pairs whose
words are all in the vocabulary count (case-insensitive, as gensim's default), and the counts are
reported. Sections named ``gram…`` are morpho-syntactic, the others semantic ([KB]).

Chains (X the table, s the input scale, P a random positional row per word, X* = X standardized
to the target, σ_p = std(X), σ_x = the target's std, Xavier's √(2/(N+D)) by default):

=========================  =======================  ===========================================
name                       matrix                   meaning
=========================  =======================  ===========================================
``raw``                    X                        the vectors as loaded
``scaled``                 s · X                    after the input scale (cosine-invariant)
``raw+pe``                 X + P                    positions added to the raw vectors
``standardized``           X*                       Pre-trained_Xavier ([K] §3.4)
``standardized+scaled``    s · X*
``standardized+pe``        X* + P                   positions added after standardizing
``raw+pe_scaled``          X + P · σ_p / σ_x        the same balance as ``standardized+pe``, raw vectors
``scaled+pe``              s · X + P                what the first layer sees (not in [K] Table 4)
``standardized+scaled+pe`` s · X* + P               the same after standardizing
=========================  =======================  ===========================================
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from lightning_embinit.init.positional import sinusoidal_encoding
from lightning_embinit.init.registry import Registry
from lightning_embinit.init.statistics import MatrixStats, matrix_statistics
from lightning_embinit.init.transforms import StatisticsTarget, resolve_target, standardize

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
        return resolve_target(self.target, *self.matrix.shape).std


ChainFunction = Callable[[ChainInputs], torch.Tensor]
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


def _check_file(path: str | os.PathLike[str], what: str) -> str:
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isfile(path):
        raise ValueError(f"{what} file not found: {path}")
    return path


def check_probe_inputs(
    analogies: str | os.PathLike[str] | None,
    similarity: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    max_analogies: int | None = None,
) -> tuple[str | None, list[str]]:
    """The analogy file and the word-similarity files (paths expanded), each found; ``max_analogies`` ≥ 1 or None."""
    if isinstance(similarity, (str, os.PathLike)):
        similarity = [similarity]
    analogy_path = None if analogies is None else _check_file(analogies, "analogy")
    similarity_paths = [_check_file(path, "word-similarity") for path in similarity]
    if max_analogies is not None and max_analogies < 1:
        raise ValueError(f"max_analogies must be ≥ 1 or None, got {max_analogies}")
    return analogy_path, similarity_paths


def is_syntactic(section: str) -> bool:
    """Mikolov's morpho-syntactic sections are named ``gram1-…`` … ``gram9-…``."""
    return section.lower().startswith("gram")


def _fold(word: str, case_insensitive: bool) -> str:
    return word.upper() if case_insensitive else word


def _analogy_lines(path: str) -> Iterator[tuple[str | None, str]]:
    """(section header or None, line) for every line of an analogy file, as gensim reads it."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield (line.lstrip(": ").strip() if line.startswith(": ") else None), line


def sample_analogies(path: str, vocabulary: set[str], limit: int, seed: int, directory: str, *, case_insensitive: bool = True) -> str:
    """A file with at most ``limit`` in-vocabulary questions of ``path`` (seeded sample, sections kept)."""
    sections: list[tuple[str, list[str]]] = []
    for header, line in _analogy_lines(path):
        if header is not None:
            sections.append((line, []))
            continue
        words = line.split()
        if len(words) == 4 and sections and all(_fold(w, case_insensitive) in vocabulary for w in words):
            sections[-1][1].append(line)
    total = sum(len(questions) for _, questions in sections)
    chosen = set(torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:limit].tolist())
    target = os.path.join(directory, "analogies.txt")
    index = 0
    with open(target, "w", encoding="utf-8") as handle:
        for header, questions in sections:
            handle.write(header)
            for question in questions:
                if index in chosen:
                    handle.write(question if question.endswith("\n") else question + "\n")
                index += 1
    return target


def count_questions(path: str, vocabulary: set[str], *, case_insensitive: bool = True) -> int:
    """How many questions of an analogy file gensim evaluates (all four words in the vocabulary)."""
    return sum(
        header is None and len(words := line.split()) == 4 and all(_fold(w, case_insensitive) in vocabulary for w in words)
        for header, line in _analogy_lines(path)
    )


def _similarity_pairs(path: str, delimiter: str = "\t") -> Iterator[tuple[str, str]]:
    """The word pairs of a similarity file that gensim reads (``word1<TAB>word2<TAB>rating``, ``#`` comments)."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line or line.startswith("#"):
                continue
            parts = line.split(delimiter)
            if len(parts) != 3:
                continue
            try:
                float(parts[2])
            except ValueError:
                continue
            yield parts[0], parts[1]


def count_pairs(path: str, vocabulary: set[str], *, case_insensitive: bool = True, delimiter: str = "\t") -> int:
    """How many pairs of a similarity file gensim evaluates (both words in the vocabulary)."""
    return sum(all(_fold(w, case_insensitive) in vocabulary for w in pair) for pair in _similarity_pairs(path, delimiter))


def probe_words(
    analogies: str | os.PathLike[str] | None, similarity: Sequence[str | os.PathLike[str]] = (), *, case_insensitive: bool = True
) -> set[str]:
    """The distinct words of an analogy file's questions and of the similarity files' pairs, folded as gensim folds them."""
    words: set[str] = set()
    if analogies is not None:
        for header, line in _analogy_lines(_check_file(analogies, "analogy")):
            if header is None and len(question := line.split()) == 4:
                words.update(_fold(w, case_insensitive) for w in question)
    for path in [similarity] if isinstance(similarity, (str, os.PathLike)) else similarity:
        for pair in _similarity_pairs(_check_file(path, "word-similarity")):
            words.update(_fold(w, case_insensitive) for w in pair)
    return words


def vocabulary_coverage(tokens: Sequence[str], words: set[str], *, case_insensitive: bool = True) -> int:
    """How many of ``words`` (folded by :func:`probe_words`) are among ``tokens``."""
    return len(words & {_fold(str(token), case_insensitive) for token in tokens})


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


def evaluate(
    vectors: Any, analogies: str | None, similarity: Sequence[str], *, case_insensitive: bool = True
) -> dict[str, Any]:
    """Analogy accuracy (all, semantic, syntactic, counts) and Spearman's ρ per similarity file, by gensim."""
    result: dict[str, Any] = {
        "analogy": None, "analogy_semantic": None, "analogy_syntactic": None,
        "analogy_count": 0, "analogy_semantic_count": 0, "analogy_syntactic_count": 0,
        "similarity": {}, "similarity_count": {},
    }
    restrict = len(vectors)
    vocabulary = {_fold(word, case_insensitive) for word in vectors.index_to_key}
    # gensim divides by the file's question count: a sampled file of no in-vocabulary question would fail
    if analogies is not None and count_questions(analogies, vocabulary, case_insensitive=case_insensitive):
        score, sections = vectors.evaluate_word_analogies(
            analogies, restrict_vocab=restrict, case_insensitive=case_insensitive
        )
        parts = sections[:-1]  # the last entry is gensim's total
        _, count = _accuracy(parts)
        semantic, semantic_count = _accuracy([s for s in parts if not is_syntactic(s["section"])])
        syntactic, syntactic_count = _accuracy([s for s in parts if is_syntactic(s["section"])])
        result.update(
            analogy=float(score) if count else None, analogy_count=count,
            analogy_semantic=semantic, analogy_semantic_count=semantic_count,
            analogy_syntactic=syntactic, analogy_syntactic_count=syntactic_count,
        )
    for path in similarity:
        name = Path(path).stem
        count = count_pairs(path, vocabulary, case_insensitive=case_insensitive)
        result["similarity_count"][name] = count
        if count < 2:
            result["similarity"][name] = None
            continue
        _, spearman, _ = vectors.evaluate_word_pairs(path, restrict_vocab=restrict, case_insensitive=case_insensitive)
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
    case_insensitive: bool = True,
) -> dict[str, dict[str, Any]]:
    """``{chain: {"analogy": acc, "analogy_semantic": acc, "analogy_syntactic": acc, "analogy_count": n,
    "similarity": {name: spearman}, ...}}`` for an (N, D) ``matrix`` whose row i is word ``tokens[i]``.

    ``input_scale`` is s (default √D); ``positional`` the (L, D) encoding whose rows are added
    (default: sinusoidal, L = 512), one row per word drawn uniformly from a generator seeded with
    ``seed``, the same rows for every chain; ``standardize_to`` the target of ``standardized``
    (a scheme name, a std, a (mean, std) pair). ``max_analogies`` evaluates a seeded sample of
    the in-vocabulary questions instead of all. Accuracies are None when nothing was evaluated.
    """
    chains = check_chains(chains)
    if matrix.dim() != 2 or matrix.shape[0] != len(tokens):
        raise ValueError(f"matrix of shape {tuple(matrix.shape)} for {len(tokens)} tokens: need one row per token")
    if analogies is None and not similarity:
        raise ValueError("lexical_probe needs an analogy file (analogies=) or word-similarity files (similarity=[...])")
    analogy_path, similarity_paths = check_probe_inputs(analogies, similarity, max_analogies)
    dim = matrix.shape[1]
    if positional is None:
        positional = sinusoidal_encoding(DEFAULT_POSITIONS, dim + dim % 2)[:, :dim]
    if positional.dim() != 2 or positional.shape[1] != dim:
        raise ValueError(f"positional encoding of shape {tuple(positional.shape)} for vectors of dimension {dim}")
    resolve_target(standardize_to, *matrix.shape)
    values = matrix.detach().to("cpu", torch.float32)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, positional.shape[0], (values.shape[0],), generator=generator)
    inputs = ChainInputs(
        values, math.sqrt(dim) if input_scale is None else float(input_scale),
        positional.detach().to("cpu", torch.float32)[rows], standardize_to,
    )
    tokens = [str(token) for token in tokens]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="embinit-lexical-") as directory, single_threaded_blas():
        if analogy_path is not None and max_analogies is not None:
            vocabulary = {_fold(t, case_insensitive) for t in tokens}
            analogy_path = sample_analogies(analogy_path, vocabulary, max_analogies, seed, directory,
                                            case_insensitive=case_insensitive)
        for name in chains:
            vectors = keyed_vectors(CHAINS.build(name)(inputs), tokens)
            results[name] = evaluate(vectors, analogy_path, similarity_paths, case_insensitive=case_insensitive)
    return results


def format_probe(results: dict[str, dict[str, Any]]) -> str:
    """A fixed-width table: one line per chain, analogy accuracies and each similarity ρ."""
    names = sorted({name for result in results.values() for name in result["similarity"]})
    header = ["chain", "analogy", "semantic", "syntactic", "questions", *names]
    rows = []
    for chain, result in results.items():
        cells = [result["analogy"], result["analogy_semantic"], result["analogy_syntactic"]]
        rows.append([
            chain, *("-" if v is None else f"{v:.4f}" for v in cells), str(result["analogy_count"]),
            *("-" if result["similarity"].get(n) is None else f"{result['similarity'][n]:.4f}" for n in names),
        ])
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)

