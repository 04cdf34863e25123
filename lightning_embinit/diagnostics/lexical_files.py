"""The files of the lexical probes, read and checked once: analogy files (Mikolov's questions-words layout, a
``: <section>`` line, then one ``a b c d`` question per line) and word-similarity files (``word1<TAB>word2<TAB>rating``
lines, ``#`` comments), through :func:`lightning_embinit.text_files.read_text_lines` (any encoding, ``.gz``, any line
ending). A file that is not text, a question before any section header, or a file without a question or pair is a
ValueError naming the file, sampled or not; gensim scores a UTF-8 copy of exactly these lines
(:func:`prepare_probe_files`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from lightning_embinit.checks import check_positive_int
from lightning_embinit.text_files import read_text_lines

SIMILARITY_DELIMITER = "\t"


def fold(word: str) -> str:
    """A word as gensim compares it (upper case: case-insensitive, gensim's default)."""
    return word.upper()


def check_file(path: str | os.PathLike[str], what: str) -> str:
    """``path`` expanded, or a ValueError when there is no such file."""
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
    analogy_path = None if analogies is None else check_file(analogies, "analogy")
    similarity_paths = [check_file(path, "word-similarity") for path in similarity]
    check_positive_int("max_analogies", max_analogies, optional=True)
    return analogy_path, similarity_paths


def analogy_lines(path: str, encoding: str = "utf-8", *, require_question: bool = True) -> list[tuple[str | None, str]]:
    """(section name or None, line) for every line of an analogy file, checked as the module docstring says
    (``require_question=False``: a file of section headers only passes, as a sample of no question is)."""
    entries: list[tuple[str | None, str]] = []
    in_section = False
    for number, line in enumerate(read_text_lines(path, "analogy", encoding=encoding), 1):
        if line.startswith(": "):
            entries.append((line.lstrip(": ").strip(), line))
            in_section = True
        elif line.strip():
            if not in_section:
                raise ValueError(
                    f"analogy file {path}, line {number}: {line[:60]!r} comes before any ': <section>' "
                    "header; an analogy file is a ': <section>' line, then one 'a b c d' question per line"
                )
            entries.append((None, line))
    if require_question and not any(header is None and len(line.split()) == 4 for header, line in entries):
        raise ValueError(f"analogy file {path} has no question (a line of four words after a ': <section>' header)")
    return entries


def _similarity_pair(line: str, delimiter: str = SIMILARITY_DELIMITER) -> tuple[str, str] | None:
    """The word pair of a line gensim scores, or None (a comment, or not word1, word2 and a numeric rating)."""
    if not line or line.startswith("#"):
        return None
    parts = line.split(delimiter)
    if len(parts) != 3:
        return None
    try:
        float(parts[2])
    except ValueError:
        return None
    return parts[0], parts[1]


def similarity_lines(path: str, encoding: str = "utf-8") -> list[str]:
    """Every line of a word-similarity file; a file without one ``word1<TAB>word2<TAB>rating`` line raises."""
    lines = read_text_lines(path, "word-similarity", encoding=encoding)
    if not any(_similarity_pair(line) for line in lines):
        raise ValueError(
            f"word-similarity file {path} has no 'word1<TAB>word2<TAB>rating' line "
            f"({len(lines)} lines; the first: {lines[0][:60] if lines else ''!r})"
        )
    return lines


def sample_analogies(
    entries: Sequence[tuple[str | None, str]], vocabulary: set[str], limit: int, seed: int
) -> list[str]:
    """The lines of an analogy file with at most ``limit`` in-vocabulary questions (a seeded sample; every section
    header kept)."""
    questions = [
        index
        for index, (header, line) in enumerate(entries)
        if header is None and len(words := line.split()) == 4 and all(fold(w) in vocabulary for w in words)
    ]
    order = torch.randperm(len(questions), generator=torch.Generator().manual_seed(seed))[:limit].tolist()
    chosen = {questions[k] for k in order}
    return [line for index, (header, line) in enumerate(entries) if header is not None or index in chosen]


def _write(lines: Sequence[str], path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(f"{line}\n" for line in lines)
    return path


def prepare_probe_files(
    analogies: str | None,
    similarity: Sequence[str],
    directory: str,
    *,
    encoding: str = "utf-8",
    vocabulary: set[str] | None = None,
    max_analogies: int | None = None,
    seed: int = 0,
) -> tuple[str | None, list[str]]:
    """UTF-8 copies in ``directory`` of the checked files, for gensim: the analogy file (a seeded sample of
    ``max_analogies`` questions in ``vocabulary`` when given) and each similarity file (whose stem names its result)."""
    analogy_copy = None
    if analogies is not None:
        entries = analogy_lines(analogies, encoding)
        lines = (
            [line for _, line in entries]
            if max_analogies is None or vocabulary is None
            else sample_analogies(entries, vocabulary, max_analogies, seed)
        )
        analogy_copy = _write(lines, os.path.join(directory, "analogies.txt"))
    copies = [
        _write(similarity_lines(path, encoding), os.path.join(directory, f"similarity{k}", f"{Path(path).stem}.txt"))
        for k, path in enumerate(similarity)
    ]
    return analogy_copy, copies


def count_questions(path: str, vocabulary: set[str], *, encoding: str = "utf-8") -> int:
    """How many questions of an analogy file gensim evaluates (all four words in the vocabulary)."""
    return sum(
        header is None and len(words := line.split()) == 4 and all(fold(w) in vocabulary for w in words)
        for header, line in analogy_lines(path, encoding, require_question=False)
    )


def similarity_pairs(path: str, encoding: str = "utf-8") -> Iterator[tuple[str, str]]:
    """The word pairs of a similarity file that gensim scores."""
    for line in similarity_lines(path, encoding):
        if (pair := _similarity_pair(line)) is not None:
            yield pair


def count_pairs(path: str, vocabulary: set[str], *, encoding: str = "utf-8") -> int:
    """How many pairs of a similarity file gensim evaluates (both words in the vocabulary)."""
    return sum(all(fold(w) in vocabulary for w in pair) for pair in similarity_pairs(path, encoding))


def probe_words(
    analogies: str | os.PathLike[str] | None,
    similarity: Sequence[str | os.PathLike[str]] = (),
    *,
    encoding: str = "utf-8",
) -> set[str]:
    """The distinct words of an analogy file's questions and of the similarity files' pairs, folded as
    gensim folds them."""
    words: set[str] = set()
    if analogies is not None:
        for header, line in analogy_lines(check_file(analogies, "analogy"), encoding):
            if header is None and len(question := line.split()) == 4:
                words.update(fold(w) for w in question)
    for path in [similarity] if isinstance(similarity, (str, os.PathLike)) else similarity:
        for pair in similarity_pairs(check_file(path, "word-similarity"), encoding):
            words.update(fold(w) for w in pair)
    return words
