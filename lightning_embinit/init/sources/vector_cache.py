"""A parse-once cache for big vector files: ``<cache>/vectors/<key>/`` holds ``matrix.npy`` (float32 V×D,
memory-mapped by later loads), ``tokens.txt`` and ``meta.json``; docs/sources.md, "The cache", gives the key, the
directory's precedence (:func:`cache_directory` first) and the staging that keeps entries whole.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CACHE_ENV = "EMBINIT_CACHE_DIR"
CACHE_VERSION = 2  # 2: tokens.txt without newline translation; the file's inode and ctime in the key
STALE_STAGING_S = 3600.0
_PLACEHOLDER_ROWS = 10**15
_STAGING_MARK = ".tmp."

_CONFIGURED: contextvars.ContextVar[str | None] = contextvars.ContextVar("embinit_cache_dir", default=None)
_WARNED: set[str] = set()


class CacheUnavailable(OSError):
    """The cache directory cannot be created or written; the message names it and where it was configured."""


@contextlib.contextmanager
def cache_directory(path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Within the block, caches without their own ``cache_dir`` use ``path`` (no change when None)."""
    token = _CONFIGURED.set(os.fspath(path) if path is not None else _CONFIGURED.get())
    try:
        yield
    finally:
        _CONFIGURED.reset(token)


def cache_origin(override: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """The cache directory and what configured it (the first of the module doc's list)."""
    if _CONFIGURED.get() is not None:
        return Path(_CONFIGURED.get()).expanduser(), "the run's cache_dir"  # type: ignore[arg-type]
    if override is not None:
        return Path(override).expanduser(), "the cache_dir option"
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser(), f"the environment variable {CACHE_ENV}"
    return Path("~/.cache/lightning_embinit").expanduser(), f"the default (set {CACHE_ENV} to choose another)"


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory (see the module doc for the order)."""
    return cache_origin(override)[0]


def writable_cache_dir(subdirectory: str, override: str | os.PathLike[str] | None = None) -> Path:
    """``<cache root>/<subdirectory>``, created; :class:`CacheUnavailable` when it cannot be used."""
    root, origin = cache_origin(override)
    target = root / subdirectory
    try:
        target.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=target, prefix=".probe.", delete=True).close()
    except OSError as error:
        raise CacheUnavailable(
            f"cache directory {root} (from {origin}) cannot be used: {error.strerror or error}; point {CACHE_ENV} "
            "(or cache_dir=) at a writable directory"
        ) from None
    return target


def warn_cache_unavailable(error: CacheUnavailable, what: str) -> None:
    """Warn once per unusable directory that ``what`` (and what follows) runs without the cache."""
    if str(error) not in _WARNED:
        _WARNED.add(str(error))
        warnings.warn(f"{error}; {what} without the cache (warned once)", UserWarning, stacklevel=3)


def file_key(path: str | os.PathLike[str], options: dict[str, Any]) -> str:
    """A hex key for ``path``'s identity (absolute path, size, mtime, ctime, inode) and the parse ``options``."""
    resolved = os.path.abspath(os.path.expanduser(path))
    stat = os.stat(resolved)
    identity = {
        "path": resolved,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,  # changes when a copy with a preserved mtime is written over the file
        "inode": stat.st_ino,  # changes when another file is renamed over it
        "options": options,
        "version": CACHE_VERSION,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]


class NpyRowWriter:
    """Appends float32 row blocks to a ``.npy`` file whose row count is fixed up at the end."""

    def __init__(self, path: Path, dim: int) -> None:
        self.path, self.dim, self.rows = path, dim, 0
        self._file = open(path, "wb")
        self._header_size = self._file.write(self._header(_PLACEHOLDER_ROWS))

    def _header(self, rows: int) -> bytes:
        buffer = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            buffer, {"descr": "<f4", "fortran_order": False, "shape": (rows, self.dim)}
        )
        return buffer.getvalue()

    def __call__(self, block: np.ndarray) -> None:
        if block.ndim != 2 or block.shape[1] != self.dim:
            raise ValueError(f"expected blocks of width {self.dim}, got shape {block.shape}")
        self._file.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
        self.rows += block.shape[0]

    def close(self) -> None:
        header = self._header(self.rows)
        if len(header) != self._header_size:  # numpy pads headers so the shape can grow in place
            raise RuntimeError(f"cannot rewrite the .npy header of {self.path} in place")
        self._file.seek(0)
        self._file.write(header)
        self._file.close()


@dataclass
class CachedVectors:
    """One cache entry: tokens in row order, the memory-mapped matrix and the parse metadata."""

    directory: Path
    tokens: list[str]
    matrix: np.memmap
    meta: dict[str, Any]

    @classmethod
    def open(cls, directory: Path) -> CachedVectors:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        with open(directory / "tokens.txt", encoding="utf-8", newline="") as handle:
            tokens = handle.read().split("\n") if meta["rows"] else []
        matrix = np.load(directory / "matrix.npy", mmap_mode="r")
        if len(tokens) != matrix.shape[0] or matrix.shape[0] != meta["rows"]:
            raise ValueError(f"corrupt vector cache entry {directory}: {len(tokens)} tokens for {matrix.shape[0]} rows")
        return cls(directory, tokens, matrix, meta)


Builder = Callable[[Callable[[int], Callable[[np.ndarray], None]]], tuple[list[str], dict[str, Any]]]


def load_or_build(
    path: str | os.PathLike[str],
    options: dict[str, Any],
    build: Builder,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> CachedVectors:
    """The cache entry for ``path`` parsed with ``options``; ``build`` runs only on a miss.

    ``build(open_sink)`` calls ``open_sink(dim)`` once the dimension is known (again: the same sink), feeds the sink
    float32 row blocks and returns ``(tokens, meta)``. Raises :class:`CacheUnavailable` before parsing when the cache
    directory cannot be used.
    """
    root = writable_cache_dir("vectors", cache_dir)
    key = file_key(path, options)
    final = root / key
    if (entry := _existing_entry(final)) is not None:
        return entry
    remove_stale_staging(root)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}{_STAGING_MARK}", dir=root))
    writers: list[NpyRowWriter] = []

    def open_sink(dim: int) -> Callable[[np.ndarray], None]:
        if not writers:
            writers.append(NpyRowWriter(staging / "matrix.npy", dim))
        return writers[0]

    try:
        tokens, meta = build(open_sink)
        if not writers:
            raise ValueError(f"{path}: the parser produced no matrix")
        writers[0].close()
        if any("\n" in token for token in tokens):
            raise ValueError(f"{path}: a token contains a newline and cannot be cached (pass cache=False)")
        with open(staging / "tokens.txt", "w", encoding="utf-8", newline="") as handle:
            handle.write("\n".join(tokens))
        meta = {
            **meta,
            "source": os.path.abspath(os.fspath(path)),
            "rows": len(tokens),
            "options": options,
            "version": CACHE_VERSION,
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")
        entry = CachedVectors.open(staging)  # a bad entry never reaches its final name
        try:
            os.rename(staging, final)
            entry.directory = final
        except OSError:  # another process finished first: use its entry
            shutil.rmtree(staging, ignore_errors=True)
            entry = CachedVectors.open(final)
    except BaseException:
        for writer in writers:
            writer._file.close()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return entry


def _existing_entry(final: Path) -> CachedVectors | None:
    """The entry at ``final`` when it opens; a damaged or unfinished one is removed (to be rebuilt)."""
    try:
        return CachedVectors.open(final)
    except (OSError, ValueError):
        shutil.rmtree(final, ignore_errors=True)
        return None


def remove_stale_staging(root: Path, max_age_s: float = STALE_STAGING_S) -> None:
    """Delete staging directories under ``root`` (left by killed processes) whose newest file is older than
    ``max_age_s``, so a long parse that is still writing is kept."""
    cutoff = time.time() - max_age_s
    for candidate in root.glob(f"*{_STAGING_MARK}*"):
        try:
            newest = max([candidate.stat().st_mtime] + [item.stat().st_mtime for item in candidate.iterdir()])
            if newest < cutoff:
                shutil.rmtree(candidate, ignore_errors=True)
        except OSError:  # not a directory, or finished or removed by another process meanwhile
            continue


def build_in_memory(build: Builder) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """Run ``build`` without a cache: the rows are collected in memory (``cache=False``)."""
    blocks: list[np.ndarray] = []
    tokens, meta = build(lambda dim: blocks.append)
    return tokens, np.concatenate(blocks), meta
