"""The one opener of the package's text files (plain or ``.gz``): any decode or format error becomes a
ValueError naming the file and, for text, ``encoding=``; and where gensim's test data lies, without importing
gensim. Like :mod:`lightning_embinit.checks`, it imports nothing from the package."""

from __future__ import annotations

import codecs
import gzip
import importlib.util
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO


def gensim_test_data(name: str) -> str:
    """The path of ``name`` among the files gensim ships as test data (the Lee corpus, Mikolov's analogies,
    WordSim353), found without importing gensim, which takes seconds: ``gensim.test.utils.datapath`` joins the same
    folder, ``gensim/test/test_data``."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("gensim is not installed (pip install gensim): its test data is the file asked for")
    return os.path.join(spec.submodule_search_locations[0], "test", "test_data", name)


def check_encoding(encoding: str, option: str = "encoding") -> str:
    """``encoding`` if Python knows the codec, else a ValueError naming ``option``."""
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ValueError(
            f"{option}={encoding!r} is not a text encoding Python knows (e.g. 'utf-8', 'latin-1')"
        ) from None
    return encoding


@contextmanager
def open_text(path: str, what: str, *, encoding: str = "utf-8", newline: str | None = None) -> Iterator[IO[str]]:
    """``path`` opened as text (``.gz``: gzip-decompressed; a UTF-8 byte-order mark skipped) inside the ``with``
    block; ``newline`` is :func:`open`'s. Text not in ``encoding``, a ``.gz`` that is not gzip or is truncated: a
    ValueError naming the ``what`` file (and, for text, ``encoding=``), raised from wherever the block reads."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        reading = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    except (LookupError, TypeError):
        reading = encoding  # open() names the unknown encoding
    try:
        with opener(path, "rt", encoding=reading, newline=newline) as handle:
            yield handle
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{what} file {path} is not valid {encoding} text (byte {error.start}: {error.reason}); pass the file's "
            f"encoding with encoding= (e.g. encoding='latin-1') or convert the file to {encoding}"
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise ValueError(
            f"{what} file {path} is not a complete gzip file ({type(error).__name__}: {error}); "
            "a name ending in .gz means gzip-compressed: compress it again or rename it"
        ) from None


def read_text_lines(path: str, what: str, *, encoding: str = "utf-8") -> list[str]:
    """Every line of a text file (:func:`open_text`) without its line ending; ``\\n``, ``\\r\\n`` and a lone
    ``\\r`` (classic Mac) all end a line, other Unicode separators do not. A final line ending adds no line."""
    with open_text(path, what, encoding=encoding) as handle:
        lines = handle.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines
