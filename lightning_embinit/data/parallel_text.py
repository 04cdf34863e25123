"""Reading task text: aligned parallel files, labelled column files and Hugging Face ``datasets``.

Every reader raises a :class:`ValueError` naming the file (and what was expected) before any tokenizing: missing,
empty or unaligned files, missing columns, text not in ``encoding``, a ``.gz`` that is not gzip
(:func:`lightning_embinit.text_files.open_text` opens every file).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from lightning_embinit.checks import check_choice
from lightning_embinit.text_files import expand_path, open_text, read_text_lines, where_relative

COLUMN_FORMATS = ("tsv", "csv", "jsonl")


def existing_file(path: str, what: str) -> str:
    """``path`` (``${NAME:-default}`` and ``~`` expanded) when it is a file; the error says where a relative path
    was looked up from."""
    path = expand_path(path, f"{what} file")
    if not os.path.isfile(path):
        raise ValueError(f"{what} file not found: {path}{where_relative(path)}")
    return path


def find_file(directory: str, stem: str, what: str) -> str:
    """``<directory>/<stem>`` or ``<directory>/<stem>.gz`` (``${NAME:-default}`` and ``~`` expanded in
    ``directory``); the error names both paths tried and where a relative directory was looked up from."""
    base = os.path.join(expand_path(directory, f"{what} data_dir"), stem)
    for candidate in (base, f"{base}.gz"):
        if os.path.isfile(candidate):
            return candidate
    raise ValueError(f"{what} file not found: neither {base} nor {base}.gz exists{where_relative(base)}")


def read_lines(path: str, what: str, encoding: str = "utf-8") -> list[str]:
    """Every line of a text file, stripped of surrounding white space (blank lines kept, as ``""``)."""
    return [line.strip() for line in read_text_lines(existing_file(path, what), what, encoding=encoding)]


def read_parallel(src_path: str, tgt_path: str, what: str, encoding: str = "utf-8") -> tuple[list[str], list[str], int]:
    """Line-aligned source and target sentences; pairs with a blank side are left out (their count is returned)."""
    src, tgt = read_lines(src_path, f"{what} source", encoding), read_lines(tgt_path, f"{what} target", encoding)
    if len(src) != len(tgt):
        raise ValueError(
            f"{what}: parallel files have different line counts: {src_path} has {len(src)} lines, "
            f"{tgt_path} has {len(tgt)}; line i of one must translate line i of the other"
        )
    return keep_complete_pairs(src, tgt, f"{what} ({src_path}, {tgt_path})")


def keep_complete_pairs(src: Sequence[str], tgt: Sequence[str], what: str) -> tuple[list[str], list[str], int]:
    """The pairs whose sides are both non-blank; a side that is blank throughout is an error."""
    for side, texts in (("source", src), ("target", tgt)):
        if not any(texts):
            raise ValueError(f"{what}: the {side} side is empty ({len(texts)} lines, none with text)")
    kept = [k for k, (a, b) in enumerate(zip(src, tgt)) if a and b]
    return [src[k] for k in kept], [tgt[k] for k in kept], len(src) - len(kept)


def column_format(path: str, file_format: str | None) -> str:
    if file_format is not None:
        return check_choice("file_format", file_format, COLUMN_FORMATS)
    name = path.removesuffix(".gz").lower()
    for fmt, endings in (("tsv", (".tsv", ".tab")), ("csv", (".csv",)), ("jsonl", (".jsonl", ".json", ".ndjson"))):
        if name.endswith(endings):
            return fmt
    raise ValueError(
        f"cannot tell the format of {path} from its name; pass file_format= one of {', '.join(COLUMN_FORMATS)}"
    )


@dataclass(frozen=True)
class TextColumns:
    """A column file's (or dataset split's) columns by name, and the file line each row starts on (None: a dataset)."""

    columns: dict[str, list[Any]]
    lines: list[int] | None = None

    def where(self, rows: Sequence[int]) -> str:
        """``lines [3, 9]`` (a file) or ``rows [2, 8]`` (a dataset) of the given row indices."""
        return f"lines {[self.lines[k] for k in rows]}" if self.lines is not None else f"rows {[k + 1 for k in rows]}"


def _read_jsonl(handle: IO[str], path: str, what: str) -> TextColumns:
    records, lines = [], []
    for number, line in enumerate(handle, 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{what} file {path}, line {number}: not JSON ({error})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{what} file {path}, line {number}: expected a JSON object per line")
            records.append(record)
            lines.append(number)
    names = list(dict.fromkeys(key for record in records for key in record))
    return TextColumns({name: [record.get(name) for record in records] for name in names}, lines)


def _read_delimited(handle: IO[str], path: str, what: str, fmt: str) -> TextColumns:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if fmt == "tsv" else csv.reader(handle)
    header = next(rows, None)
    if header is None:
        raise ValueError(f"{what} file {path} is empty (no header line)")
    names = [name.strip() for name in header]
    body, lines = [], []
    start = rows.line_num + 1
    for row in rows:
        if "".join(row).strip():  # some cell is not blank
            body.append(row)
            lines.append(start)
        start = rows.line_num + 1
    if bad := [lines[k] for k, row in enumerate(body) if len(row) != len(names)][:5]:
        raise ValueError(f"{what} file {path}: lines {bad} do not have the {len(names)} columns of the header {names}")
    return TextColumns({name: [row[k] for row in body] for k, name in enumerate(names)}, lines)


def read_columns(path: str, what: str, file_format: str | None = None, encoding: str = "utf-8") -> TextColumns:
    """A labelled column file: TSV (GLUE style: header line, no quoting), CSV (header, quoting) or JSON lines."""
    path = existing_file(path, what)
    fmt = column_format(path, file_format)
    with open_text(path, what, encoding=encoding, newline="") as handle:
        text = _read_jsonl(handle, path, what) if fmt == "jsonl" else _read_delimited(handle, path, what, fmt)
    if not text.columns or not next(iter(text.columns.values())):
        raise ValueError(f"{what} file {path} has no rows")
    return text


def require_columns(columns: dict[str, list[Any]], wanted: Sequence[str | None], where: str) -> None:
    if missing := [c for c in wanted if c is not None and c not in columns]:
        raise ValueError(f"{where}: no column {missing}; columns found: {list(columns)}")


def load_hub_dataset(path: str, config: str | None, revision: str | None = None) -> Any:
    """``datasets.load_dataset(path, config)``; a script-only dataset (``IWSLT/iwslt2017``, ``neulab/ted_hrlr``),
    which ``datasets`` ≥ 4 no longer runs, is read from the hub's parquet export (``refs/convert/parquet``)."""
    import datasets

    try:
        return datasets.load_dataset(path, config, revision=revision)
    except RuntimeError as error:
        if revision is not None or "scripts are no longer supported" not in str(error):
            raise
    return datasets.load_dataset(path, config, revision="refs/convert/parquet")
