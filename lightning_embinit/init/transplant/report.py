"""A transplant's report: how the new tokens were matched and built, the new rows' statistics beside the old ones',
and the config ids that followed; as a readable text and as flat scalars for loggers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lightning_embinit.init.extension.tables import SlotTables
from lightning_embinit.init.statistics import matrix_statistics


def _numbers(prefix: str, rows: torch.Tensor) -> dict[str, float | None]:
    if rows.numel() == 0:
        return {f"{prefix}_std": None, f"{prefix}_row_norm": None}
    norms = torch.cat([block.float().norm(dim=1) for block in rows.split(4096)])
    return {f"{prefix}_std": matrix_statistics(rows).std, f"{prefix}_row_norm": float(norms.double().mean())}


def _old(numbers: Any) -> dict[str, float]:
    return {"old_std": numbers.std, "old_row_norm": numbers.row_norm}


def plan_report(plan: Any, old: SlotTables, counts: Mapping[str, int], options: Mapping[str, Any]) -> dict[str, Any]:
    """The report of a :class:`~lightning_embinit.init.transplant.plan.TransplantPlan` of ``old`` (the slot's
    tensors); ``counts``: how many tokens each method served; ``options``: what the user chose."""
    match = plan.match
    matched = {kind: count for kind, count in match.counts.items() if count}
    report: dict[str, Any] = {
        "slot": plan.slot,
        "old_rows": int(old.embedding.shape[0]),
        "num_embeddings": len(plan.tokens),
        "old_convention": match.old_convention,
        "new_convention": match.new_convention,
        "matched": sum(matched.values()),
        "matched_by": matched,
        "built": int(plan.added.sum()),
        "built_by": dict(counts),
        "method": options.get("method"),
        "fallback": options.get("fallback"),
        "standardize": None if options.get("standardize") in (None, False) else str(options["standardize"]),
        "bias": str(options.get("bias")),
        "built_tokens": [t for t, new in zip(plan.tokens, plan.added.tolist()) if new][:10],
        **_old(plan.old_numbers["embedding"]),
        **_numbers("new", plan.embedding_rows),
        "outputs": {
            path: {**_old(plan.old_numbers[path]), **_numbers("new", plan.output_rows[path])} for path in old.outputs
        },
        "config_ids": {},
    }
    report["matched_fraction"] = report["matched"] / max(len(plan.tokens), 1)
    return report


def _pair(old: float | None, new: float | None) -> str:
    return "-" if old is None or new is None else f"{old:.4g} / {new:.4g}"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in counts.items()) or "none"


def format_transplant_report(report: Mapping[str, Any]) -> str:
    """The report as a few lines of text."""
    lines = [
        f"Tokenizer transplant, slot {report['slot']}: {report['old_rows']:,} → {report['num_embeddings']:,} rows "
        f"({report['old_convention']} → {report['new_convention']} tokens)",
        f"  matched {report['matched']:,} ({100 * report['matched_fraction']:.1f}%): {_counts(report['matched_by'])}",
        f"  built {report['built']:,}: {_counts(report['built_by'])}"
        + (f"; standardized to {report['standardize']}" if report.get("standardize") else ""),
        f"  token rows std old/new {_pair(report['old_std'], report['new_std'])}, row norm old/new "
        f"{_pair(report['old_row_norm'], report['new_row_norm'])}",
    ]
    for path, entry in report.get("outputs", {}).items():
        lines.append(
            f"  output layer {path}: std old/new {_pair(entry['old_std'], entry['new_std'])}, row norm old/new "
            f"{_pair(entry['old_row_norm'], entry['new_row_norm'])}"
        )
    if report.get("config_ids"):
        moved = ", ".join(f"{key} {old} → {new}" for key, (old, new) in report["config_ids"].items())
        lines.append(f"  config ids: {moved}")
    if report.get("built_tokens"):
        lines.append(f"  built tokens (first {len(report['built_tokens'])}): {', '.join(report['built_tokens'])}")
    return "\n".join(lines)


def transplant_metrics(report: Mapping[str, Any], prefix: str = "transplant") -> dict[str, float]:
    """``<prefix>/<slot>/<key>`` → value for the report's numbers."""
    slot = report["slot"]
    keys = ("old_rows", "num_embeddings", "matched", "built", "matched_fraction", "old_std", "new_std")
    values = {f"{prefix}/{slot}/{key}": float(report[key]) for key in keys if report.get(key) is not None}
    values |= {f"{prefix}/{slot}/matched_{kind}": float(count) for kind, count in report["matched_by"].items()}
    return values
