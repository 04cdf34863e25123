"""The init report as a readable table (within a terminal's width, the details in lines below it) and as flat
scalars for loggers."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

_COLUMNS = (
    ("slot", "slot"),
    ("source", "source_name"),
    ("transforms", "transforms"),
    ("N×D", "shape"),
    ("std", "std"),
    ("scaled std", "scaled_std"),
    ("ratio", "ratio"),
    ("top share", "top_share"),
    ("trainable", "trainable"),
)
"""The table's columns (title, report key); the rest of the report is in the lines below it and in the report dict."""
_PATH_SOURCES = ("file", "hf", "checkpoint")
"""Sources named by a path (``file:<path>``): the table shows the path's last part."""


def short_source(report: Mapping[str, Any]) -> str:
    """The source as the table shows it: its name (``minilm``, ``normal:1/sqrt(d)``), a path's last part
    (``file:glove.6B.50d.txt``); the full description is in the lines below the table."""
    name = str(report.get("source_name") or report.get("source") or "-")
    kind, sep, path = name.partition(":")
    if sep and kind in _PATH_SOURCES and path:
        return f"{kind}:{os.path.basename(os.path.normpath(path)) or path}"
    return name


def _cell(key: str, value: Any, report: Mapping[str, Any]) -> str:
    if key == "source_name":
        return short_source(report)
    if key == "shape":
        return f"{report['num_embeddings']}×{report['embedding_dim']}"
    if value is None:
        return "-"
    if key == "transforms":
        return " → ".join(value) or "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a fixed-width table: the header, a rule, then the rows."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]
    return [lines[0], "  ".join("-" * width for width in widths), *lines[1:]]


def format_report(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """A table one line per slot, within a terminal's width; below it per slot the full source, the statistics the
    table leaves out, the isotropy's details, tied layers and coverage."""
    rows = [[_cell(key, report.get(key), report) for _, key in _COLUMNS] for report in reports.values()]
    lines = text_table([title for title, _ in _COLUMNS], rows)
    notes = []
    for name, report in reports.items():
        notes += _detail_lines(name, report)
    notes += [
        f"slot {name!r}: the tied output layer(s) {', '.join(r['tied_modules'])} now hold these weights too"
        + (" and are frozen with it" if r.get("trainable") is False else "")
        for name, r in reports.items()
        if r.get("tied_modules")
    ]
    notes += [_coverage_note(name, r["coverage"]) for name, r in reports.items() if r.get("coverage")]
    return "\n".join(["Embedding initialization", *lines, *notes])


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


def _detail_lines(slot: str, report: Mapping[str, Any]) -> list[str]:
    """The slot's full source (when the table's short name is not all of it), statistics and isotropy in words."""
    lines = []
    source = str(report.get("source") or "-")
    if source != short_source(report):
        lines.append(f"slot {slot!r} source: {source}")
    values = ", ".join(f"{key} {_number(report.get(key))}" for key in ("mean", "min", "max"))
    positional = "; no positional encoding added"
    if report.get("pe_std") is not None:
        low, high = _number(report.get("pe_min")), _number(report.get("pe_max"))
        positional = f"; PE std {_number(report['pe_std'])}, range [{low}, {high}]"
    lines.append(f"slot {slot!r}: {values}; input scale {_number(report.get('input_scale'))}{positional}")
    if report.get("top_share") is not None:
        sampled = report.get("isotropy_rows")
        rows = f" of {sampled} sampled rows" if sampled and sampled < report["num_embeddings"] - 1 else ""
        lines.append(
            f"slot {slot!r} isotropy{rows}: top direction {100 * report['top_share']:.2f}% of the variance (i.i.d. "
            f"rows {100 * report['iid_top_share']:.2f}%), top {report['top_k']} {100 * report['top_k_share']:.2f}%; "
            f"mean cosine {_number(report.get('mean_cosine'))}"
        )
    return lines


def _coverage_note(slot: str, coverage: Mapping[str, Any]) -> str:
    rules = ", ".join(f"{rule} {count}" for rule, count in coverage["by_rule"].items()) or "none"
    missing = ", ".join(coverage["missing"][:10]) or "none"
    unnamed = (
        f"; {coverage['extra_rows']} rows past the last token string filled as out-of-vocabulary rows"
        if coverage.get("extra_rows")
        else ""
    )
    return f"slot {slot!r} coverage by rule: {rules}; most frequent missing: {missing}{unnamed}"


def report_metrics(reports: Mapping[str, Mapping[str, Any]], prefix: str = "embinit") -> dict[str, float]:
    """Numeric report values as ``{prefix}/{slot}/{key}`` scalars."""
    metrics: dict[str, float] = {}
    for name, report in reports.items():
        for key, value in report.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "seed":
                metrics[f"{prefix}/{name}/{key}"] = float(value)
        if report.get("coverage"):
            metrics[f"{prefix}/{name}/coverage"] = float(report["coverage"]["fraction"])
            for rule, count in report["coverage"]["by_rule"].items():
                metrics[f"{prefix}/{name}/coverage_{rule}"] = float(count)
            if report["coverage"].get("extra_rows"):
                metrics[f"{prefix}/{name}/coverage_unnamed_rows"] = float(report["coverage"]["extra_rows"])
    return metrics


def report_hyperparameters(reports: Mapping[str, Mapping[str, Any]], prefix: str = "embinit") -> dict[str, str]:
    """The descriptive (non-numeric) report values, for ``logger.log_hyperparams``."""
    return {
        f"{prefix}/{name}/{key}": str(report[key])
        for name, report in reports.items()
        for key in ("source", "transforms", "trainable", "tied_modules", "seed", "family", "positions")
        if report.get(key) is not None or key not in ("family", "positions")
    } | {
        f"{prefix}/{name}/missing_tokens": ", ".join(report["coverage"]["missing"])
        for name, report in reports.items()
        if report.get("coverage")
    }
