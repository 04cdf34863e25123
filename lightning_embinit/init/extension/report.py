"""The vocabulary-extension report as a readable table and as flat scalars for loggers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lightning_embinit.init.extension.tables import SlotTables, old_token_rows
from lightning_embinit.init.report import text_table
from lightning_embinit.init.statistics import matrix_statistics

_COLUMNS = (
    ("slot", lambda r: r["slot"]),
    ("rows", lambda r: f"{r['old_rows']} → {r['num_embeddings']}"),
    ("new", lambda r: str(r["added_rows"])),
    ("by rule", lambda r: ", ".join(f"{rule} {count}" for rule, count in r["by_rule"].items() if count) or "-"),
    ("std old/new", lambda r: _pair(r["old_std"], r["new_std"])),
    ("row norm old/new", lambda r: _pair(r["old_row_norm"], r["new_row_norm"])),
    (
        "new-token mass",
        lambda r: (
            "-"
            if r.get("new_token_mass") is None
            else f"{100 * r['new_token_mass']:.2f}% (uniform {100 * r['uniform_mass']:.1f}%)"
        ),
    ),
)


def _pair(old: float | None, new: float | None) -> str:
    return "-" if old is None or new is None else f"{old:.4g} / {new:.4g}"


def format_extension_report(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """A fixed-width table, one line per slot, then a line per untied output layer and per standardization."""
    lines = text_table([title for title, _ in _COLUMNS], [[cell(r) for _, cell in _COLUMNS] for r in reports.values()])
    notes = []
    for name, report in reports.items():
        if report.get("transforms"):
            notes.append(f"slot {name!r}: new rows' shared directions removed: {' → '.join(report['transforms'])}")
        if report.get("standardize"):
            notes.append(f"slot {name!r}: new rows standardized to {report['standardize']}")
        for path, output in report.get("outputs", {}).items():
            bias = (
                f"; bias: {output['bias_rule']} → {output['new_bias']:.4g} (old mean {output['old_bias_mean']:.4g})"
                if "bias_rule" in output
                else ""
            )
            notes.append(
                f"slot {name!r}: output layer {path} rows by {output['rule']}, std old/new "
                f"{_pair(output['old_std'], output['new_std'])}{bias}"
            )
        for path, entry in report.get("biases", {}).items():
            notes.append(
                f"slot {name!r}: {path}: {entry['bias_rule']} → {entry['new_bias']:.4g} "
                f"(old mean {entry['old_bias_mean']:.4g})"
            )
        if (padding := _padding_note(name, report)) is not None:
            notes.append(padding)
        if report.get("added_tokens"):
            notes.append(
                f"slot {name!r}: new tokens (first {len(report['added_tokens'])}): {', '.join(report['added_tokens'])}"
            )
    return "\n".join(["Vocabulary extension", *lines, *notes])


def extension_metrics(reports: Mapping[str, Mapping[str, Any]], prefix: str = "vocab_ext") -> dict[str, float]:
    """``<prefix>/<slot>/<key>`` → value for the report's numbers (row counts, statistics, the new-token mass)."""
    keys = (
        "old_rows",
        "num_embeddings",
        "added_rows",
        "dropped_rows",
        "padded_rows",
        "reused_rows",
        "old_std",
        "new_std",
        "old_row_norm",
        "new_row_norm",
        "new_token_mass",
        "uniform_mass",
    )
    return {
        f"{prefix}/{slot}/{key}": float(report[key])
        for slot, report in reports.items()
        for key in keys
        if report.get(key) is not None
    }


def _row_numbers(prefix: str, rows: torch.Tensor) -> dict[str, float | None]:
    if rows.numel() == 0:
        return {f"{prefix}_mean": None, f"{prefix}_std": None, f"{prefix}_row_norm": None}
    stats = matrix_statistics(rows)
    return {
        f"{prefix}_mean": stats.mean,
        f"{prefix}_std": stats.std,
        f"{prefix}_row_norm": float(rows.float().norm(dim=1).mean(dtype=torch.float64)),
    }


def plan_report(
    plan: Any,
    old: SlotTables,
    rule: str,
    head_rule: str,
    counts: Mapping[str, int],
    padding_idx: int | None,
    standardized: Any,
    bias: Any,
) -> dict[str, Any]:
    named = plan.named_rows
    report: dict[str, Any] = {
        "slot": plan.slot,
        "rule": rule,
        "by_rule": dict(counts),
        "standardize": None if standardized is None or standardized is False else str(standardized),
        "old_rows": int(old.embedding.shape[0]),
        "num_embeddings": plan.num_rows,
        "added_rows": int(plan.added.sum()),
        **_row_counts(plan, int(old.embedding.shape[0])),
        "added_tokens": [t for t, new in zip(plan.tokens, plan.added.tolist()) if new][:10],
        **_row_numbers("old", old_token_rows(old.embedding, named, padding_idx)),
        **_row_numbers("new", plan.embedding_rows),
        "outputs": {},
        "new_token_mass": None,
        "uniform_mass": int(plan.added.sum()) / max(plan.num_rows, 1),
    }
    for path, weight in old.outputs.items():
        entry = {
            "rule": head_rule,
            **_row_numbers("old", old_token_rows(weight, named, padding_idx)),
            **_row_numbers("new", plan.output_rows[path]),
        }
        if old.biases.get(path) is not None:
            old_mean = float(old_token_rows(old.biases[path], named, padding_idx).double().mean())
            entry.update(bias_rule=str(bias), old_bias_mean=old_mean, new_bias=plan.bias_values[path])
        report["outputs"][path] = entry
    report["biases"] = {
        path: {
            "bias_rule": str(bias),
            "old_bias_mean": float(
                old_token_rows(values.reshape(-1, values.shape[-1])[0], named, padding_idx).double().mean()
            ),
            "new_bias": plan.bias_values[path],
        }
        for path, values in old.vocabulary_biases.items()
    }
    return report


def _row_counts(plan: Any, old_rows: int) -> dict[str, Any]:
    """How the extended table's rows came: old tokens kept and dropped; the old table's padded rows (past its
    tokens), those a new token took (``reused_ids``: [start, stop) ranges) and the rows past the new tokens."""
    sources = plan.source_ids[: len(plan.tokens)]
    kept = int((sources >= 0).sum())
    named = old_rows if plan.named_rows is None else plan.named_rows
    ids = torch.arange(len(plan.tokens))
    reused = ids[(sources < 0) & (ids >= named) & (ids < old_rows)].tolist()
    return {
        "kept_rows": kept,
        "dropped_rows": named - kept,
        "padded_rows": old_rows - named,
        "reused_rows": len(reused),
        "reused_ids": _ranges(reused),
        "rows_without_token": plan.num_rows - len(plan.tokens),
        "new_rows_without_token": int((plan.source_ids[len(plan.tokens) :] < 0).sum()),
    }


def _ranges(ids: list[int]) -> list[list[int]]:
    """Sorted ids as [start, stop) ranges."""
    ranges: list[list[int]] = []
    for i in ids:
        if ranges and ranges[-1][1] == i:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return ranges


def _padding_note(name: str, report: Mapping[str, Any]) -> str | None:
    """A line on a padded table's rows: which a new token took, how many stay without a token, how many it grew by."""
    padded, past = report.get("padded_rows", 0), report.get("rows_without_token", 0)
    if not padded and not past:
        return None
    reused = ", ".join(f"{a}" if b == a + 1 else f"{a}–{b - 1}" for a, b in report["reused_ids"])
    took = f"new tokens took {report['reused_rows']} of them (rows {reused})" if reused else "no new token took one"
    fresh = report.get("new_rows_without_token", 0)
    had = f"the table had {padded} rows past its {report['old_rows'] - padded} tokens; {took}; " if padded else ""
    return f"slot {name!r}: {had}{past} rows past the new tokens have no token" + (
        f" ({fresh} of them new: pad_to_multiple_of; rule rows)" if fresh else ""
    )
