"""The init report as a readable table and as flat scalars for loggers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_COLUMNS = (
    ("slot", "slot"),
    ("source", "source"),
    ("transforms", "transforms"),
    ("N", "num_embeddings"),
    ("D", "embedding_dim"),
    ("mean", "mean"),
    ("std", "std"),
    ("min", "min"),
    ("max", "max"),
    ("scaled std", "scaled_std"),
    ("PE std", "pe_std"),
    ("ratio", "ratio"),
    ("coverage", "coverage"),
    ("trainable", "trainable"),
    ("tied to", "tied_modules"),
)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "coverage":
        unnamed = f" +{value['extra_rows']} unnamed" if value.get("extra_rows") else ""
        return f"{value['found']}/{value['total']}{unnamed} ({100 * value['fraction']:.1f}%)"
    if key == "transforms":
        return " → ".join(value) or "-"
    if key == "tied_modules":
        return ", ".join(value) or "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a fixed-width table: the header, a rule, then the rows."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]
    return [lines[0], "  ".join("-" * width for width in widths), *lines[1:]]


def format_report(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """A fixed-width table, one line per slot."""
    rows = [[_cell(key, report.get(key)) for _, key in _COLUMNS] for report in reports.values()]
    lines = text_table([title for title, _ in _COLUMNS], rows)
    notes = [
        f"slot {name!r}: the tied output layer(s) {', '.join(r['tied_modules'])} now hold these weights too"
        + (" and are frozen with it" if r.get("trainable") is False else "")
        for name, r in reports.items()
        if r.get("tied_modules")
    ]
    notes += [_coverage_note(name, r["coverage"]) for name, r in reports.items() if r.get("coverage")]
    return "\n".join(["Embedding initialization", *lines, *notes])


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
