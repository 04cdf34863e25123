"""Tokenized text cached by content and settings, so a second ``setup`` does not tokenize again.

An entry holds the tokenizer configs and every split's token ids as ragged arrays. Its key hashes the raw text
and every setting that changes the result (tokenizer specs and options, :data:`CACHE_VERSION`), never file names
or times. Two levels: this process's memory (the last :data:`MEMORY_ENTRIES` entries) and
``cache_root() / "data" / <key>.npz`` on disk (``$EMBINIT_CACHE_DIR``), shared by DDP processes and later runs.
Entries are written to a temporary file and hard-linked into place, so the *first* writer wins and every process
reads that one entry: processes that trained a (non-deterministic) WordPiece vocabulary at once still end up with
the same tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lightning_embinit.init.sources.vector_cache import (
    CacheUnavailable,
    cache_root,
    warn_cache_unavailable,
    writable_cache_dir,
)
from lightning_embinit.text.batches import Ragged
from lightning_embinit.text.tokenization import TextTokenizer

#: Part of every cache key: a new on-disk layout gets a new version and never reads an old entry.
CACHE_VERSION = 1
#: How many tokenized corpora this process keeps in memory (the most recently used).
MEMORY_ENTRIES = 4
_META = "__meta__"
_memory: OrderedDict[str, TokenizedCorpus] = OrderedDict()
log = logging.getLogger(__name__)


@dataclass
class TokenizedCorpus:
    """Tokenizer configs by name and ragged id arrays by ``"<split>/<field>"``."""

    tokenizers: dict[str, dict[str, Any]]
    sequences: dict[str, Ragged]
    built: dict[str, TextTokenizer] = field(default_factory=dict, repr=False, compare=False)

    def tokenizer(self, name: str) -> TextTokenizer:
        """The tokenizer ``name``, built from its config once per corpus."""
        if name not in self.built:
            if name not in self.tokenizers:
                raise KeyError(f"no tokenizer {name!r}; tokenizers: {sorted(self.tokenizers)}")
            self.built[name] = TextTokenizer.from_config(self.tokenizers[name])
        return self.built[name]


def text_digest(texts: Mapping[str, Sequence[Any]]) -> str:
    """A hex digest of named lists of strings (or labels), order and content exact."""
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(json.dumps([name, list(texts[name])], ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


def cache_key(**parts: Any) -> str:
    """The entry key: a digest of JSON ``parts`` and :data:`CACHE_VERSION`."""
    blob = json.dumps({**parts, "version": CACHE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:40]


def cache_file(key: str) -> Path:
    return cache_root() / "data" / f"{key}.npz"


def _write(path: Path, corpus: TokenizedCorpus) -> None:
    """Write an entry next to ``path`` and link it into place unless another process got there first."""
    arrays: dict[str, np.ndarray] = {}
    for name, ragged in corpus.sequences.items():
        arrays[f"{name}.flat"], arrays[f"{name}.offsets"] = ragged.flat, ragged.offsets
    header = {"tokenizers": corpus.tokenizers, "sequences": sorted(corpus.sequences)}
    arrays[_META] = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    handle, staging = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            np.savez(stream, **arrays)
        try:
            os.link(staging, path)
        except FileExistsError:
            pass  # another process wrote this entry first; everyone uses that one
        except OSError:  # a file system without hard links: last writer wins
            os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def _read(path: Path) -> TokenizedCorpus:
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(archive[_META].tobytes().decode("utf-8"))
        sequences = {name: Ragged(archive[f"{name}.flat"], archive[f"{name}.offsets"]) for name in header["sequences"]}
    return TokenizedCorpus(header["tokenizers"], sequences)


def load_or_build(key: str, build: Callable[[], TokenizedCorpus], *, disk: bool = True) -> tuple[TokenizedCorpus, str]:
    """The entry for ``key`` and where it came from (``memory``, ``disk`` or ``built``)."""
    if key in _memory:
        _memory.move_to_end(key)
        return _memory[key], "memory"
    path = None
    if disk:
        try:
            path = writable_cache_dir("data") / f"{key}.npz"
        except CacheUnavailable as error:
            warn_cache_unavailable(error, "tokenized text is kept in memory")
    corpus, origin = None, "disk"
    if path is not None and path.is_file():
        try:
            corpus = _read(path)
        except (OSError, ValueError, KeyError) as error:  # a damaged entry: rebuild it
            log.warning("tokenized-text cache entry %s is unreadable (%s); rebuilding it", path, error)
            path.unlink(missing_ok=True)
    if corpus is None:
        corpus, origin = build(), "built"
        if path is not None:
            _write(path, corpus)
            stored = _read(path)
            if stored.tokenizers != corpus.tokenizers:  # another process's entry won
                corpus = stored
    _memory[key] = corpus
    while len(_memory) > MEMORY_ENTRIES:
        _memory.popitem(last=False)
    return corpus, origin


def clear_memory_cache() -> None:
    """Forget this process's in-memory entries (the disk cache stays)."""
    _memory.clear()
