"""Reading word-vector text files: word2vec text, GloVe's header-less text, fastText ``.vec`` ([K], [KB];
docs/concepts.md#word-vectors).

One pass in blocks of lines: each block's numbers are parsed at once (pandas' C reader, else ``numpy.fromstring``),
and only a failing block is re-read line by line to name the bad line; compression is detected by :mod:`.compressed`.
Every irregularity follows a policy of docs/sources.md ("Messy files") and is counted in :class:`ParseReport`.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import numpy as np

from lightning_embinit.checks import check_choice
from lightning_embinit.init.sources.compressed import DECOMPRESSION_ERRORS, open_decompressed

BLOCK_BYTES = 4 << 20
#: Policies for a bad line of a vector file (``on_bad_line=``).
ON_BAD_LINE = ("error", "skip", "warn")
#: Policies for text not in the encoding (``encoding_errors=``), as Python's ``errors=``.
ENCODING_ERRORS = ("replace", "strict", "ignore", "backslashreplace")
_BOM = b"\xef\xbb\xbf"


def check_policies(on_bad_line: str, encoding_errors: str) -> None:
    """Raise ``ValueError`` unless both are known policies (:data:`ON_BAD_LINE`, :data:`ENCODING_ERRORS`)."""
    check_choice("on_bad_line=", on_bad_line, ON_BAD_LINE)
    check_choice("encoding_errors=", encoding_errors, ENCODING_ERRORS)


@dataclass
class ParseReport:
    """What one pass over a vector file found."""

    path: str
    dim: int = 0
    rows: int = 0
    data_lines: int = 0
    blank_lines: int = 0
    duplicates: int = 0
    skipped: int = 0
    invalid_utf8: int = 0
    header_count: int | None = None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The non-zero irregularities, e.g. ``"2 duplicates, 1 skipped line"``; empty when clean."""
        counts = {
            "duplicate tokens": self.duplicates,
            "skipped bad lines": self.skipped,
            "tokens with invalid UTF-8": self.invalid_utf8,
            "blank lines": self.blank_lines,
        }
        return ", ".join(f"{value} {label}" for label, value in counts.items() if value)


def _is_number(text: bytes) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def infer_dim(lines: list[bytes]) -> int:
    """The most common ``fields − 1`` over the first non-blank lines (header-less files)."""
    counts = Counter(len(line.split()) - 1 for line in lines[:1000] if line.strip())
    if not counts:
        raise ValueError("cannot infer the vector dimension: no data lines")
    dim = counts.most_common(1)[0][0]
    if dim < 1:
        raise ValueError("cannot infer the vector dimension: lines have a single field")
    return dim


def _parse_numbers(values: list[bytes], dim: int) -> np.ndarray | None:
    """A (len(values), dim) float32 block, or None when any line does not parse cleanly."""
    text = b"\n".join(values)
    try:
        import pandas  # its C reader parses a block of numbers ~5× faster than numpy.fromstring
    except ImportError:  # pragma: no cover - pandas comes with `datasets`
        pandas = None
    with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")
        try:
            if pandas is not None:
                array = pandas.read_csv(
                    io.BytesIO(text),
                    sep=" ",
                    header=None,
                    dtype=np.float32,
                    engine="c",
                    quoting=csv.QUOTE_NONE,
                    na_filter=False,
                    comment=None,
                ).to_numpy(dtype=np.float32)
            else:  # a count other than len(values) × dim fails to reshape
                array = np.fromstring(text.replace(b"\n", b" "), dtype=np.float32, sep=" ")  # type: ignore[call-overload]
                array = array.reshape(len(values), dim)
        except Exception:  # noqa: BLE001 - any parse failure sends the block to the line-by-line path
            return None
    return array if array.shape == (len(values), dim) else None


def _parse_line(values: bytes, dim: int) -> tuple[np.ndarray | None, str]:
    with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")
        try:
            array = np.fromstring(values, dtype=np.float32, sep=" ")  # type: ignore[call-overload]
        except (ValueError, UnicodeDecodeError):
            return None, "a value is not a number"
    return (array, "") if array.size == dim else (None, f"expected {dim} values, found {array.size}")


@dataclass
class TextVectorParser:
    """One pass over a text vector file, writing float32 row blocks to ``sink`` (see module doc)."""

    path: str
    _: KW_ONLY
    dim: int | None = None
    header: bool | None = None
    on_bad_line: str = "error"
    encoding_errors: str = "replace"
    allow_numeric_token_words: bool = False
    progress: bool = True
    emit_warnings: bool = True
    tokens: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        check_policies(self.on_bad_line, self.encoding_errors)
        self.report = ParseReport(path=self.path)
        self._seen: set[str] = set()

    def parse(self, sink: Callable[[np.ndarray], None]) -> list[str]:
        """Parse the whole file; returns the kept tokens (row order) and fills ``report``."""
        from tqdm.auto import tqdm

        stream, raw = open_decompressed(self.path)
        bar = tqdm(
            total=os.path.getsize(self.path),
            unit="B",
            unit_scale=True,
            desc=f"parsing {os.path.basename(self.path)}",
            disable=None if self.progress else True,
            leave=False,
        )
        line_no = 0
        try:
            while lines := stream.readlines(BLOCK_BYTES):
                start = line_no
                line_no += len(lines)
                if not self.report.dim:  # the header (or first data line) is still to come
                    first = next((k for k, line in enumerate(lines) if line.strip()), None)
                    if first is None:
                        self.report.blank_lines += len(lines)
                        continue
                    self.report.blank_lines += first
                    lines, start = self._read_header(lines[first:], start + first)
                self._block(lines, start, sink)
                bar.update(raw.tell() - bar.n)
        except DECOMPRESSION_ERRORS as error:
            raise ValueError(f"{self.path}: the compressed file is truncated or corrupt: {error}") from None
        finally:
            bar.close()
            stream.close()
            raw.close()
        if not self.report.dim:
            raise ValueError(f"{self.path}: the file has no vectors")
        self._finish()
        return self.tokens

    def _read_header(self, lines: list[bytes], start: int) -> tuple[list[bytes], int]:
        lines[0] = lines[0].removeprefix(_BOM)
        fields = lines[0].split()
        looks_like_header = len(fields) == 2 and all(f.isdigit() for f in fields)
        if self.header is True and not looks_like_header:
            raise ValueError(
                f"{self.path}: line {start + 1}: header=True but the line is not '<count> <dim>': {lines[0][:80]!r}"
            )
        if self.header is not False and looks_like_header:
            count, file_dim = int(fields[0]), int(fields[1])
            if self.dim is not None and self.dim != file_dim:
                raise ValueError(f"{self.path}: the header says dimension {file_dim}, but dim={self.dim} was given")
            self.report.header_count, self.dim = count, file_dim
            lines, start = lines[1:], start + 1
        elif self.dim is None:
            self.dim = infer_dim(lines)
        if self.dim is None or self.dim < 1:
            raise ValueError(f"{self.path}: invalid vector dimension {self.dim}")
        self.report.dim = self.dim
        return lines, start

    def _bad(self, line_no: int, line: bytes, reason: str) -> None:
        message = f"{self.path}: line {line_no}: {reason}: {line[:80]!r}"
        if self.on_bad_line == "error":
            raise ValueError(f"{message} (pass source_options on_bad_line='skip' to skip such lines)")
        self.report.skipped += 1
        if len(self.report.problems) < 10:
            self.report.problems.append(message)

    def _block(self, lines: list[bytes], start: int, sink: Callable[[np.ndarray], None]) -> None:
        dim = self.report.dim
        tokens: list[bytes] = []
        values: list[bytes] = []
        origins: list[tuple[int, bytes]] = []  # (line number, line) of each kept line, to name a bad one
        for offset, raw_line in enumerate(lines):
            line = raw_line.rstrip()
            if not line:
                self.report.blank_lines += 1
                continue
            self.report.data_lines += 1
            line_no = start + offset + 1
            cut = line.find(b" ")
            if cut > 0 and line.count(b" ") == dim and b"\t" not in line[:cut]:
                token, rest = line[:cut], line[cut + 1 :]
            else:
                parts = line.rsplit(None, dim)
                if len(parts) != dim + 1 or not parts[0].strip():
                    self._bad(line_no, line, f"expected a token and {dim} values, found {len(line.split())} fields")
                    continue
                token, rest = parts[0], b" ".join(parts[1:])
                words = token.split()
                if len(words) > 1 and not self.allow_numeric_token_words and _is_number(words[-1]):
                    spaced = token.decode("utf-8", errors="replace")
                    self._bad(
                        line_no,
                        line,
                        f"more than {dim} values — or the token {spaced!r} has spaces and ends in a "
                        "number (pass source_options allow_numeric_token_words=True if such tokens "
                        "are real)",
                    )
                    continue
            tokens.append(token)
            values.append(rest)
            origins.append((line_no, line))
        if not tokens:
            return
        array = _parse_numbers(values, dim)
        keep = np.ones(len(tokens), dtype=bool)
        if array is None:
            array = np.zeros((len(tokens), dim), dtype=np.float32)
            for k, rest in enumerate(values):
                parsed, reason = _parse_line(rest, dim)
                if parsed is None:
                    self._bad(*origins[k], reason)
                    keep[k] = False
                else:
                    array[k] = parsed
        finite = np.isfinite(array).all(axis=1)
        for k in np.flatnonzero(~finite & keep):
            self._bad(*origins[k], "non-finite value (NaN or inf)")
            keep[k] = False
        for k, token in enumerate(tokens):
            if keep[k]:
                keep[k] = self._add_token(token, origins[k][0])
        if keep.any():
            sink(np.ascontiguousarray(array[keep] if not keep.all() else array, dtype="<f4"))

    def _add_token(self, raw_token: bytes, line_no: int) -> bool:
        try:
            token = raw_token.decode("utf-8")
        except UnicodeDecodeError:
            if self.encoding_errors == "strict":
                raise ValueError(
                    f"{self.path}: line {line_no}: token {raw_token[:80]!r} is not valid UTF-8 "
                    "(encoding_errors='strict'; pass encoding_errors='replace' to decode it with U+FFFD)"
                ) from None
            token = raw_token.decode("utf-8", errors=self.encoding_errors)
            self.report.invalid_utf8 += 1
        if token in self._seen:
            self.report.duplicates += 1
            return False
        self._seen.add(token)
        self.tokens.append(token)
        self.report.rows += 1
        return True

    def _finish(self) -> None:
        report = self.report
        if report.header_count is not None and report.header_count != report.data_lines:
            report.warnings.append(
                f"{self.path}: the header announces {report.header_count} vectors but the file "
                f"has {report.data_lines} data lines"
            )
        if self.on_bad_line == "warn" and report.skipped:
            report.warnings.append(f"{self.path}: skipped {report.skipped} bad line(s), e.g. {report.problems[:3]}")
        if report.invalid_utf8:
            report.warnings.append(
                f"{self.path}: {report.invalid_utf8} token(s) with invalid UTF-8 decoded with "
                f"errors={self.encoding_errors!r}"
            )
        if self.emit_warnings:
            emit(report.warnings, stacklevel=4)
        if report.rows == 0:
            raise ValueError(f"{self.path}: no usable vectors ({report.skipped} bad lines skipped)")


def emit(messages: list[str], *, stacklevel: int = 2) -> None:
    """Issue each message as a ``UserWarning`` (a parse's warnings, fresh or from the cache)."""
    for message in messages:
        warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
