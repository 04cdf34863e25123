"""The one opener of the package's text files (plain or ``.gz``): any decode or format error becomes a
ValueError naming the file and, for text, ``encoding=``; and where gensim's test data lies, without importing
gensim. Like :mod:`lightning_embinit.checks`, it imports nothing from the package."""

from __future__ import annotations

import codecs
import gzip
import importlib.util
import os
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

ENVIRONMENT_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
"""``${NAME}`` or ``${NAME:-default}`` in a path or a config value, as a POSIX shell writes them."""


def substitute_variables(text: str, *, where: str = "config") -> str:
    """``text`` with every ``${NAME}`` / ``${NAME:-default}`` replaced from the environment (an unset or empty
    variable takes the default); a variable without a default that is not set is a ValueError naming ``where``."""

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found not in (None, ""):
            return found
        if default is None:
            raise ValueError(
                f"{where}: environment variable {name} in {text!r} is not set (write ${{{name}:-<default>}} to give "
                "a default)"
            )
        return default

    return ENVIRONMENT_REFERENCE.sub(replace, text)


def expand_path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` with ``${NAME:-default}`` and ``~`` expanded (``what`` names it in errors)."""
    return os.path.expanduser(substitute_variables(os.fspath(path), where=what))


def where_relative(path: str) -> str:
    """For an error about a missing ``path``: nothing when it is absolute; else where it was looked up from and the
    variable that points the package's example configs at the shared data."""
    if os.path.isabs(path):
        return ""
    return (
        f"; the relative path was looked up from the working directory {os.getcwd()}: give an absolute path or run "
        "from the directory it is relative to; the example configs read ${EMBINIT_SHARED_DATA:-../shared/data}, so "
        "EMBINIT_SHARED_DATA set to the data directory works from anywhere"
    )


def decode_text(data: bytes, where: str, encoding: str = "utf-8", option: str = "encoding=") -> str:
    """``data`` decoded as ``encoding`` (a UTF-8 byte-order mark skipped); text that is not ``encoding`` is a ValueError
    naming ``where``, the line and the byte, and the ``option`` that gives the encoding."""
    codec = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    try:
        return data.decode(codec)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        example = f"{option} latin-1" if option.startswith("--") else f"{option}'latin-1'"
        raise ValueError(
            f"{where} is not {encoding} text: line {line}, byte {error.start} ({error.reason}); give its encoding "
            f"with {option} (e.g. {example}) or convert it to {encoding}"
        ) from None


def split_lines(text: str) -> list[str]:
    """``text``'s lines, split at ``\\n`` only (a ``\\r`` before it dropped; a form feed, NEL or U+2028 stays inside
    its line, where ``str.splitlines`` would split); a final ``\\n`` adds no line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_exact_lines(path: str | os.PathLike[str], what: str, encoding: str = "utf-8") -> list[str]:
    """The lines of a text file (``.gz`` decompressed) as :func:`split_lines` splits them, not stripped: one line of
    output per line of input, as the commands that answer line by line need; errors name the ``what`` file."""
    path = expand_path(path, f"{what} file")
    if not os.path.isfile(path):
        raise ValueError(f"{what} file not found: {path}{where_relative(path)}")
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise ValueError(f"{what} file {path} is not a complete gzip file ({type(error).__name__}: {error})") from None
    return split_lines(decode_text(data, f"{what} file {path}", encoding))


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
