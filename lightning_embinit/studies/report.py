"""``embinit report``: a sweep's results directory (:mod:`.records`) as tables (Markdown, CSV) and figures (PNG).

It gives mean ± std (n) per setting for each metric (settings as rows, the papers' shape), each setting's difference
from the reference with Welch's 95 % interval, the failed trials grouped by error, the versions, host and wall time,
and the figures of :mod:`~lightning_embinit.studies.figures`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lightning_embinit.checks import check_known, choice_error
from lightning_embinit.studies.claims import ClaimResult
from lightning_embinit.studies.claims_table import checked_claims, claims_lines
from lightning_embinit.studies.figures import learning_speed_absence, write_figures
from lightning_embinit.studies.notes import duration, elapsed_line, footnotes, markdown_row
from lightning_embinit.studies.records import (
    STUDY_FILE,
    ReportError,
    Results,
    declared_settings,
    load_results,
    settings_with_records,
)
from lightning_embinit.studies.statistics import (
    WALL_TIME,
    aggregate,
    block_references,
    compare_each,
    done,
    long_form,
    metric_names,
    number,
)

REPORT_DIR = "report"
CURVE_METRIC = "val_loss"


def failure_groups(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """The failed trials grouped by their error's first line (type and message), most frequent first."""
    groups: dict[str, list[str]] = {}
    for record in records:
        if record.get("status") == "failed":
            error = str(record.get("error") or "").strip()
            first = next((line.strip() for line in error.splitlines() if line.strip()), "no error recorded")
            groups.setdefault(first[:300], []).append(str(record.get("trial_id", "?")))
    return sorted(groups.items(), key=lambda item: -len(item[1]))


def _summary_cell(summary: pd.DataFrame, setting: str, metric: str) -> str:
    """``mean ± std (n)`` of ``metric`` for ``setting``."""
    mean, std, n = (summary.loc[setting, (metric, part)] for part in ("mean", "std", "n"))
    if n == 0:
        return "–"
    return f"{mean:.4g} ({int(n)})" if math.isnan(std) else f"{mean:.4g} ± {std:.2g} ({int(n)})"


def _difference_cell(row: Mapping[str, Any]) -> str:
    if math.isnan(row["difference"]):
        return "–"
    if math.isnan(row["low"]):
        return f"{row['difference']:+.4g} [–]†"
    cell = f"{row['difference']:+.4g} [{row['low']:.3g}, {row['high']:.3g}]"
    return f"**{cell}**" if row["excludes_zero"] else cell


def _table(settings: Iterable[str], names: Sequence[str], cell: Callable[[str, str], str]) -> list[str]:
    """A Markdown table: a row per setting, a column per metric, ``cell(setting, metric)`` in each."""
    header = ["setting", *names]
    return [
        markdown_row(header),
        markdown_row(["---"] * len(header)),
        *(markdown_row([s, *(cell(s, m) for m in names)]) for s in settings),
    ]


def _groups(records: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The chosen metrics split into the trials' metrics, the monitors, and the cost (with wall time)."""
    logged, cost = set(metric_names(records, "metrics")), {*metric_names(records, "cost"), WALL_TIME}
    groups = [
        ("Metrics", [n for n in names if n in logged]),
        ("Monitors", [n for n in names if n not in logged and n not in cost]),
        ("Cost", [n for n in names if n in cost and n not in logged]),
    ]
    return [(title, chosen) for title, chosen in groups if chosen]


def _distinct(values: Sequence[Any]) -> list[str]:
    text = (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v) for v in values if v is not None)
    return list(dict.fromkeys(text))


def _versions_line(records: Sequence[Mapping[str, Any]]) -> str:
    keys = dict.fromkeys(k for r in records if isinstance(r.get("versions"), Mapping) for k in r["versions"])
    parts = []
    for key in keys:
        found = _distinct([r["versions"].get(key) for r in records if isinstance(r.get("versions"), Mapping)])
        parts.append(f"{key} {' / '.join(found)}" + (" (differ between trials)" if len(found) > 1 else ""))
    return ", ".join(parts) or "not recorded"


def _wall_time_line(records: Sequence[Mapping[str, Any]]) -> str:
    times = np.array([t for t in (number(r.get(WALL_TIME)) for r in records) if t is not None])
    if not len(times):
        return "not recorded"
    spread = f" ± {duration(float(np.std(times, ddof=1)))}" if len(times) > 1 else ""
    return (
        f"{duration(float(times.sum()))} in total over {len(times)} trials; per trial "
        f"{duration(float(times.mean()))}{spread} (min {duration(float(times.min()))}, "
        f"max {duration(float(times.max()))})"
    )


def _failures_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    groups = failure_groups(records)
    failed = sum(len(ids) for _, ids in groups)
    if not failed:
        return [f"Failed trials: none of {len(records)}."]
    lines = [f"Failed trials: {failed} of {len(records)}, left out of the tables:", ""]
    lines += [f"- {first} ({len(ids)}: {', '.join(ids)})" for first, ids in groups]
    return lines


def _reference_text(reference: str, references: Mapping[str, str]) -> str:
    """The reference, and each block's: ``xavier; xavier_d384 for minilm_raw, minilm_xavier``."""
    blocks: dict[str, list[str]] = {}
    for setting, own in references.items():
        if own != reference:
            blocks.setdefault(own, []).append(setting)
    return "; ".join([reference, *(f"{own} for {', '.join(members)}" for own, members in blocks.items())])


def _header_lines(results: Results, settings: Sequence[str], reference: str, extra: Sequence[str]) -> list[str]:
    records = results.records
    seeds = sorted({r["seed"] for r in records if isinstance(r.get("seed"), int)})
    statuses = pd.Series([str(r.get("status", "unknown")) for r in records]).value_counts()
    lines = [
        f"# Study report: {results.name}",
        "",
        f"- variant: {results.header.get('variant', 'not recorded')}; study hash: "
        f"{results.header.get('hash', 'not recorded')}",
        f"- settings: {', '.join(settings)} (reference: {reference})",
        f"- seeds: {', '.join(map(str, seeds)) or 'not recorded'}",
        f"- trials: {len(records)} ({', '.join(f'{count} {status}' for status, count in statuses.items())})",
        f"- wall time: {_wall_time_line(records)}",
        f"- elapsed (the sweep's clock): {elapsed_line(results.header)}",
        f"- versions: {_versions_line(records)}",
        f"- host: {'; '.join(_distinct([r.get('host') for r in records])) or 'not recorded'}",
    ]
    if extra:
        lines.append(f"- settings with records that {STUDY_FILE} does not list, after its own: {', '.join(extra)}")
    if results.superseded:
        lines.append(
            f"- left out: older records of a setting and seed that has a newer one ({', '.join(results.superseded)})"
        )
    if results.unreadable:
        lines.append(f"- left out: unreadable records ({', '.join(results.unreadable)})")
    if results.stale:
        lines.append(
            f"- left out: stale or foreign records, whose trial and config hash {STUDY_FILE} does not list (a setting "
            f"changed since, or another study's; rerun the sweep to replace them): {', '.join(results.stale)}"
        )
    return lines


def _differences_lines(
    results: Results, differences: pd.DataFrame, names: Sequence[str], reference: str, level: str
) -> list[str]:
    lines, by_pair = [], differences.set_index(["setting", "metric"])
    own = dict(zip(differences["setting"], differences["reference"]))
    labels = {(s if ref == reference else f"{s} (vs {ref})"): s for s, ref in own.items()}
    against = reference if set(own.values()) <= {reference} else "the block's reference"
    for title, chosen in _groups(results.records, names):
        table = _table(labels, chosen, lambda label, metric: _difference_cell(by_pair.loc[(labels[label], metric)]))
        lines += ["", f"## {title}: difference from {against}, Δ [{level} CI]", "", *table]
    lines += [
        "",
        f"Δ = setting − {against}, difference of means; Welch's {level} interval (Welch–Satterthwaite "
        "degrees of freedom). **Bold**: the interval excludes 0, so the seeds support the difference.",
    ]
    if against != reference:
        lines.append(
            f"A setting marked (vs …) is measured against its block's reference; the others against {reference}."
        )
    return lines + footnotes(differences, reference)


def summary_markdown(
    results: Results,
    summary: pd.DataFrame,
    differences: pd.DataFrame,
    *,
    reference: str,
    extra: Sequence[str] = (),
    figures: Sequence[Path] = (),
    confidence: float = 0.95,
    references: Mapping[str, str] | None = None,
    claims: Sequence[ClaimResult] = (),
    unchecked: Sequence[str] = (),
) -> str:
    """The report's Markdown: the header, the mean ± std (n) tables, the difference tables (each setting against
    ``references[setting]``, default ``reference``), the claims table (``unchecked``: the ids of claims whose
    settings have no records here), failures, figures."""
    names = list(summary.columns.get_level_values(0).unique())
    level = f"{100 * confidence:g} %"
    shown = _reference_text(reference, references or {})
    lines = _header_lines(results, list(summary.index), shown, extra) + [""] + _failures_lines(results.records)
    for title, chosen in _groups(results.records, names):
        table = _table(summary.index, chosen, partial(_summary_cell, summary))
        lines += ["", f"## {title}: mean ± std (n) over seeds", "", *table]
    if len(differences):
        lines += _differences_lines(results, differences, names, reference, level)
    if claims:
        lines += claims_lines(claims)
    if unchecked:
        lines += ["", f"Not checked here (a setting they compare has no records): {', '.join(unchecked)}."]
    absent = learning_speed_absence(results.records, summary)
    if figures or absent:
        lines += ["", "## Figures", ""] + [f"![{path.stem}]({path.name})" for path in figures]
        lines += [f"No learning_speed.png: {absent}."] if absent else []
    return "\n".join(lines) + "\n"


def curve_metrics(results: Results, summary: pd.DataFrame) -> list[str]:
    """The curves to draw: validation loss, the protocol's monitor (the records' ``protocol.monitor``, or ``x`` of a
    metric ``best_x``), and the metrics learning speed watches; those some trial logged."""
    names = summary.columns.get_level_values(0)
    wanted = [
        CURVE_METRIC,
        *(r["protocol"].get("monitor") for r in results.records if isinstance(r.get("protocol"), Mapping)),
    ]
    wanted += [m[len("best_") :] for m in names if m.startswith("best_")]
    wanted += [m.split("/")[-2] for m in names if m.endswith("/examples_to_threshold") and m.count("/") >= 2]
    logged = {name for r in done(results.records) if isinstance(r.get("curves"), Mapping) for name in r["curves"]}
    return [m for m in dict.fromkeys(w for w in wanted if isinstance(w, str)) if m in logged]


def _checked(results: Results, settings: Sequence[str], reference: str | None, metrics: Sequence[str] | None) -> str:
    """The reference setting (the argument, the study's, its first setting); a ReportError when no trial finished,
    for an unknown reference or for an unknown metric."""
    if not done(results.records):
        groups = failure_groups(results.records)
        why = f"; the first error: {groups[0][0]}" if groups else ""
        raise ReportError(
            f"{results.directory} has no finished trial (status 'done') among {len(results.records)} records{why}"
        )
    chosen = str(reference or results.study.get("reference") or (declared_settings(results) or settings)[0])
    if chosen not in settings:
        hint = f"the settings with records in {results.directory}"
        raise ReportError(str(choice_error("reference setting", chosen, settings, hint=hint)))
    try:
        check_known("metrics", metrics or (), metric_names(results.records))
    except ValueError as error:
        raise ReportError(f"{error} (the metrics of the finished trials in {results.directory})") from None
    return chosen


def write_report(
    results_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    reference: str | None = None,
    metrics: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Write ``summary.md``, ``summary.csv``, ``differences.csv``, ``claims.csv`` (when the study has claims) and
    the figures into ``out_dir`` (default ``<results_dir>/report``); a ReportError when the directory has no study,
    no records or no finished trial. Returns ``paths`` (everything written), ``markdown``, ``summary``
    (:func:`~.statistics.aggregate`), ``differences`` (:func:`~.statistics.compare_each`), ``claims`` (a
    :class:`~.claims.ClaimResult` per claim, also in ``claims.csv``), ``reference``, ``references`` (setting → the
    setting it is measured against: its block's reference unless ``reference`` is given), ``failed`` (the number of
    failed trials) and ``out_dir``."""
    results = load_results(results_dir)
    settings, extra = settings_with_records(results)
    records = results.records
    chosen = _checked(results, settings, reference, metrics)
    references = block_references(results.study.get("blocks") if reference is None else None, settings, chosen)
    claims, unchecked = checked_claims(results.study, results.records, f"{results.directory}/{STUDY_FILE}")
    summary = aggregate(records, metrics=metrics, settings=settings)
    differences = compare_each(records, references, metrics=metrics, confidence=confidence, settings=settings)
    out = Path(out_dir) if out_dir is not None else results.directory / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    figures = write_figures(records, settings, summary, curve_metrics(results, summary), out, study=results.name)
    markdown = summary_markdown(
        results,
        summary,
        differences,
        reference=chosen,
        extra=extra,
        figures=figures,
        confidence=confidence,
        references=references,
        claims=claims,
        unchecked=unchecked,
    )
    paths = [out / "summary.md", out / "summary.csv", out / "differences.csv"]
    paths[0].write_text(markdown, encoding="utf-8")
    long_form(summary).to_csv(paths[1], index=False)
    differences.to_csv(paths[2], index=False)
    if claims:  # a row per claim: ClaimResult.to_dict
        paths.append(out / "claims.csv")
        pd.DataFrame([result.to_dict() for result in claims]).to_csv(paths[3], index=False)
    return {
        "paths": paths + figures,
        "markdown": markdown,
        "summary": summary,
        "differences": differences,
        "claims": claims,
        "reference": chosen,
        "references": references,
        "failed": sum(r.get("status") == "failed" for r in records),
        "out_dir": out,
    }
