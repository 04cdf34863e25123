"""The vocabulary-extension report as a readable table and as flat scalars for loggers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lightning_embinit.init.extension.tables import SlotTables
from lightning_embinit.init.report import text_table
from lightning_embinit.init.statistics import matrix_statistics, rows_without

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
    report: dict[str, Any] = {
        "slot": plan.slot,
        "rule": rule,
        "by_rule": dict(counts),
        "standardize": None if standardized is None or standardized is False else str(standardized),
        "old_rows": int(old.embedding.shape[0]),
        "num_embeddings": len(plan.tokens),
        "added_rows": int(plan.added.sum()),
        "kept_rows": int((~plan.added).sum()),
        "dropped_rows": int(old.embedding.shape[0] - int((~plan.added).sum())),
        "added_tokens": [t for t, new in zip(plan.tokens, plan.added.tolist()) if new][:10],
        **_row_numbers("old", rows_without(old.embedding, padding_idx)),
        **_row_numbers("new", plan.embedding_rows),
        "outputs": {},
        "new_token_mass": None,
        "uniform_mass": int(plan.added.sum()) / max(len(plan.tokens), 1),
    }
    for path, weight in old.outputs.items():
        entry = {
            "rule": head_rule,
            **_row_numbers("old", rows_without(weight, padding_idx)),
            **_row_numbers("new", plan.output_rows[path]),
        }
        if old.biases.get(path) is not None:
            old_mean = float(rows_without(old.biases[path], padding_idx).double().mean())
            entry.update(bias_rule=str(bias), old_bias_mean=old_mean, new_bias=plan.bias_values[path])
        report["outputs"][path] = entry
    report["biases"] = {
        path: {
            "bias_rule": str(bias),
            "old_bias_mean": float(rows_without(values.reshape(-1, values.shape[-1])[0], padding_idx).double().mean()),
            "new_bias": plan.bias_values[path],
        }
        for path, values in old.vocabulary_biases.items()
    }
    return report
