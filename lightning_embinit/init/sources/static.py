"""Static word vectors as sources: GloVe, word2vec, fastText ([K], [KB]; docs/concepts.md).

``file:<path>`` reads any local vector file in one of :data:`FORMATS` (docs/sources.md, "Vector files"): text files and
word2vec binaries are parsed once into the cache (:mod:`.vector_cache`); a fastText ``.bin`` model (gensim) also
composes vectors for unmatched tokens from character n-grams (the ``ngrams`` rule). Sets by name: :mod:`.well_known`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from functools import partial
from typing import Any

import numpy as np
import torch

from lightning_embinit.checks import check_choice
from lightning_embinit.init.sources import vector_cache, vector_file
from lightning_embinit.init.sources.base import SOURCES, SourceRequest, VectorSet
from lightning_embinit.init.sources.compressed import is_compressed, read_head
from lightning_embinit.init.sources.pretrained import ArrayVectorSet, PretrainedSource, split_options

FORMATS = ("auto", "word2vec", "glove", "text", "word2vec_binary", "fasttext_bin")
"""The vector-file formats ``format=`` names (module docstring)."""
_FORMAT_ALIASES = {
    "vec": "word2vec",
    "fasttext_vec": "word2vec",
    "binary": "word2vec_binary",
    "bin": "word2vec_binary",
    "fasttext": "fasttext_bin",
}
_FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")
_FORMAT_HEADER = {"word2vec": True, "glove": False}  # text formats that fix whether a header line exists
#: The options that change what a parse returns (with the format, they key the cache).
_PARSE_OPTIONS = ("dim", "header", "on_bad_line", "encoding_errors", "allow_numeric_token_words")


def detect_format(path: str) -> str:
    """``word2vec``, ``glove``, ``word2vec_binary`` or ``fasttext_bin`` from the first decompressed bytes."""
    head = read_head(path)
    if head[:4] == _FASTTEXT_MAGIC:
        return "fasttext_bin"
    first, _, rest = head.lstrip(b"\xef\xbb\xbf").partition(b"\n")
    fields = first.split()
    if not (len(fields) == 2 and all(f.isdigit() for f in fields)):
        return "glove"
    sample = rest[:4096]
    controls = sum(1 for byte in sample if byte < 9 or 13 < byte < 32)
    return "word2vec_binary" if sample and controls > len(sample) // 100 else "word2vec"


def normalize_format(value: str | None) -> str:
    """The canonical name of a ``format=`` option (``None`` → ``auto``, aliases resolved)."""
    return check_choice("format=", _FORMAT_ALIASES.get(value or "auto", value or "auto"), FORMATS)


@dataclass
class FileVectorsOptions:
    """The options of a vector file source (see the module doc and docs/sources.md)."""

    format: str = "auto"
    dim: int | None = None
    header: bool | None = None
    on_bad_line: str = "error"
    encoding_errors: str = "replace"
    allow_numeric_token_words: bool = False
    cache: bool = True
    cache_dir: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        self.format = normalize_format(self.format)
        vector_file.check_policies(self.on_bad_line, self.encoding_errors)
        if self.header is not None and _FORMAT_HEADER.get(self.format, self.header) != self.header:
            raise ValueError(
                f"contradictory options: format={self.format!r} fixes header="
                f"{_FORMAT_HEADER[self.format]}, but header={self.header} was given"
            )
        if self.dim is not None and int(self.dim) < 1:
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")


FILE_OPTIONS = ("path", *(option.name for option in fields(FileVectorsOptions)))


def open_vector_file(path: str, options: FileVectorsOptions) -> VectorSet:
    """The :class:`VectorSet` of a local vector file, parsed once and cached (text, word2vec binary)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise ValueError(f"vector file {path} does not exist")
    fmt = detect_format(path) if options.format == "auto" else options.format
    if fmt == "fasttext_bin":
        return FastTextVectorSet(path)
    if options.format == "auto" and fmt in _FORMAT_HEADER and options.header is not None:
        fmt = "word2vec" if options.header else "glove"  # an explicit header= beats detection
    parse_options = {key: getattr(options, key) for key in _PARSE_OPTIONS}
    if fmt == "word2vec_binary":
        build = partial(_build_word2vec_binary, path, options)
    else:
        text_options = {**parse_options, "header": _FORMAT_HEADER.get(fmt, options.header)}
        parser = vector_file.TextVectorParser(path, **text_options, progress=options.progress, emit_warnings=False)
        build = partial(_build_text, parser)
    row_file = entry = None
    if options.cache:
        try:
            entry = vector_cache.load_or_build(
                path, {"format": fmt, **parse_options}, build, cache_dir=options.cache_dir
            )
        except vector_cache.CacheUnavailable as error:
            vector_cache.warn_cache_unavailable(error, f"parsing {path}")
    if entry is not None:
        tokens, matrix, meta = entry.tokens, entry.matrix, entry.meta
        row_file = (str(entry.directory / "matrix.npy"), entry.matrix.offset)
    else:
        tokens, matrix, meta = vector_cache.build_in_memory(build)
    vector_file.emit(meta.get("report", {}).get("warnings", []), stacklevel=3)  # also on a cache hit
    notes = f"; {meta['summary']}" if meta.get("summary") else ""
    description = f"{os.path.basename(path)} ({fmt}, {matrix.shape[0]}×{matrix.shape[1]}{notes})"
    return ArrayVectorSet(tokens=tokens, matrix=matrix, description=description, row_file=row_file)


def _build_text(
    parser: vector_file.TextVectorParser, open_sink: Callable[[int], Callable[[np.ndarray], None]]
) -> tuple[list[str], dict[str, Any]]:
    tokens = parser.parse(lambda block: open_sink(block.shape[1])(block))
    return tokens, {"report": asdict(parser.report), "summary": parser.report.summary()}


def _build_word2vec_binary(
    path: str, options: FileVectorsOptions, open_sink: Callable[[int], Callable[[np.ndarray], None]]
) -> tuple[list[str], dict[str, Any]]:
    from gensim.models import KeyedVectors

    announced = announced_size(path)
    try:
        kv = KeyedVectors.load_word2vec_format(path, binary=True, unicode_errors=options.encoding_errors)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: a token is not valid UTF-8 (encoding_errors='strict'): {error}") from None
    except (ValueError, EOFError) as error:
        raise ValueError(f"{path}: not a readable word2vec binary file: {error}") from None
    if options.dim is not None and kv.vector_size != int(options.dim):
        raise ValueError(f"{path}: the file has dimension {kv.vector_size}, but dim={options.dim} was given")
    vectors = np.asarray(kv.vectors, dtype=np.float32)
    tokens = list(kv.index_to_key)
    keep = np.isfinite(vectors).all(axis=1)
    problems = [
        f"{path}: vector {i + 1} (token {tokens[i]!r}): non-finite value (NaN or inf)" for i in np.flatnonzero(~keep)
    ]
    if problems and options.on_bad_line == "error":
        raise ValueError(f"{problems[0]} (pass source_options on_bad_line='skip' to skip such vectors)")
    tokens = [t for t, k in zip(tokens, keep) if k]
    open_sink(vectors.shape[1])(vectors[keep])
    report = vector_file.ParseReport(
        path=path,
        dim=int(vectors.shape[1]),
        rows=len(tokens),
        data_lines=len(kv),
        duplicates=max(0, (announced or 0) - len(kv)),
        skipped=len(problems),
        invalid_utf8=sum("\ufffd" in t for t in tokens) if options.encoding_errors == "replace" else 0,
        header_count=announced,
        problems=problems[:10],
    )
    if problems and options.on_bad_line == "warn":
        report.warnings.append(f"{path}: skipped {len(problems)} vector(s) with NaN/inf, e.g. {problems[:3]}")
    return tokens, {"report": asdict(report), "summary": report.summary()}


def announced_size(path: str) -> int | None:
    """The vector count of a word2vec binary header, refused when it cannot fit in the file (gensim allocates first)."""
    header = read_head(path, 256).partition(b"\n")[0].split()
    if len(header) != 2 or not header[0].isdigit():
        return None
    count = int(header[0])
    if not header[1].isdigit():
        return count
    dim = int(header[1])
    needed = count * (dim * 4 + 2)  # float32 values plus at least a one-byte token and a separator per vector
    size = os.path.getsize(path)
    compressed = is_compressed(path)
    if needed > size * (50 if compressed else 1):
        raise ValueError(
            f"{path}: the header announces {count} vectors of dimension {dim} (at least {needed:,} bytes), but the "
            f"file has {size:,} bytes{' compressed' if compressed else ''}: "
            "the header is wrong or the file is truncated"
        )
    return count


class FastTextVectorSet(ArrayVectorSet):
    """A fastText model's vectors; ``compose`` builds vectors for unseen tokens from character n-grams."""

    def __init__(self, path: str) -> None:
        from gensim.models.fasttext import load_facebook_vectors

        try:
            kv = load_facebook_vectors(path)
        except (ValueError, EOFError, RuntimeError, AssertionError, struct.error, MemoryError, IndexError) as error:
            # gensim: RuntimeError subclasses for unsupported models, AssertionError or struct.error when truncated
            detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            raise ValueError(
                f"{path}: not a readable fastText .bin model ({detail}); the file is truncated, damaged or "
                "not a fastText model"
            ) from None
        description = f"{os.path.basename(path)} (fasttext_bin, {len(kv)}×{kv.vector_size}, bucket={kv.bucket})"
        super().__init__(tokens=kv.index_to_key, matrix=kv.vectors, description=description, index=kv.key_to_index)
        self.kv, self.can_compose = kv, bool(kv.bucket)

    def compose(self, tokens: list[str]) -> torch.Tensor:
        return torch.from_numpy(np.stack([np.asarray(self.kv.get_vector(t), dtype=np.float32) for t in tokens]))


def file_source(path: str, **options: Any) -> PretrainedSource:
    """Any local vector file: word2vec text/binary, GloVe text, fastText .vec/.bin (optionally .gz/.bz2/.xz)."""
    return named_file_source(f"file:{path}", {**options, "path": options.get("path") or path})


def named_file_source(
    name: str, options: dict[str, Any], locate: Callable[[], str] | None = None, expected_dim: int | None = None
) -> PretrainedSource:
    """The source of the file ``path=`` names, else of ``locate()``'s (of width ``expected_dim``)."""
    alignment, own = split_options(name, options, FILE_OPTIONS)
    path = own.pop("path", None)
    file_options = FileVectorsOptions(**own)
    if path is not None:
        path = os.path.expanduser(str(path))
        if os.path.isdir(path):
            raise ValueError(
                f"source {name!r}: {path} is a directory, not a vector file (for a Hugging Face model "
                f"directory use source='hf:{path}')"
            )
        if not os.path.isfile(path):
            raise ValueError(f"source {name!r}: vector file {path} does not exist")

    def open_vectors(request: SourceRequest) -> VectorSet:
        where = path if path is not None else locate()  # type: ignore[misc]
        vectors = open_vector_file(where, file_options)
        if expected_dim is not None and vectors.dim != expected_dim:
            raise ValueError(
                f"source {name!r} names {expected_dim}-dimensional vectors, but {where} has dimension "
                f"{vectors.dim}; pass source='file:{where}' to use that file as it is"
            )
        return vectors

    return PretrainedSource(name, open_vectors, alignment, cache_dir=file_options.cache_dir)


SOURCES.add(
    "file",
    file_source,
    takes_argument=True,
    summary="a local vector file: word2vec text/binary, GloVe, fastText .vec/.bin (.gz/.bz2 ok)",
)
