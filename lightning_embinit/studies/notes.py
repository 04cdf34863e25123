"""The report's words beside its numbers: durations, the sweeps' elapsed time (``study.json``'s ``sweeps``) and the
footnotes of the difference tables (why a cell has no interval, or no difference)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lightning_embinit.studies.figures import LEARNING_SPEED_SUFFIX
from lightning_embinit.studies.statistics import number

INTERVAL_NEEDS = "an interval needs 2 finished seeds with a value on each side, and some spread"


def markdown_row(cells: Sequence[str]) -> str:
    """A Markdown table row (a ``|`` inside a cell escaped)."""
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def sweep_text(sweep: Mapping[str, Any]) -> str:
    """One sweep of ``study.json``'s ``sweeps``: its elapsed time, start and what it ran, or that it did not finish."""
    started = f"started {sweep.get('started')}"
    if number(sweep.get("elapsed_s")) is None:
        return f"{started}, did not finish (interrupted or killed): not counted"
    workers = "as many as fit" if sweep.get("workers") is None else sweep["workers"]
    return (
        f"{duration(sweep['elapsed_s'])}, {started}, {sweep.get('ran')} trials run by the {sweep.get('engine')} "
        f"engine ({workers} at a time, threads per trial: {sweep.get('threads')})"
    )


def elapsed_line(header: Mapping[str, Any]) -> str:
    """The sweeps' elapsed wall time on their own clock (``study.json``'s ``sweeps``) and the last one's machine."""
    sweeps = [sweep for sweep in header.get("sweeps") or () if isinstance(sweep, Mapping)]
    if not sweeps:
        return "not recorded"
    machine = sweeps[-1].get("machine") or {}
    where = f"on {machine.get('cpu', 'an unrecorded CPU')} ({machine.get('usable_cores', '?')} cores)"
    if len(sweeps) == 1:
        return f"{sweep_text(sweeps[0])}; {where}"
    total = sum(number(sweep.get("elapsed_s")) or 0.0 for sweep in sweeps)
    return f"{duration(total)} over {len(sweeps)} sweeps: " + "; ".join(map(sweep_text, sweeps)) + f"; {where}"


def _reasons(differences: pd.DataFrame, reference: str) -> dict[str, dict[str, list[str]]]:
    """Why each cell without an interval has none (``{}`` stands for its settings; ``–``: no difference at all), then
    per setting the metrics concerned."""
    reasons: dict[str, dict[str, list[str]]] = {}
    for row in differences.itertuples():
        own = getattr(row, "reference", reference)  # a reference block's, where the study has blocks
        if math.isnan(row.difference):
            why = "–"
        elif not math.isnan(row.low):
            continue
        elif min(row.n, row.n_reference) < 2:
            seeds = "seed" if row.n == 1 else "seeds"
            why = f"{{}}: {row.n} finished {seeds} with a value, {own} {row.n_reference}"
        else:
            why = f"{{}}: every seed gave the same value, and so did {own}'s"
        reasons.setdefault(why, {}).setdefault(row.setting, []).append(row.metric)
    return reasons


def footnotes(differences: pd.DataFrame, reference: str) -> list[str]:
    """The difference tables' footnotes: why a cell has no interval (†) or no difference (–), naming the settings
    (``every setting`` when it is all of them) and the metrics; settings with the same metrics share one entry."""
    every, texts = set(differences["setting"]), {"†": [], "–": []}
    for why, metrics in _reasons(differences, reference).items():
        alike: dict[str, list[str]] = {}
        for setting, names in metrics.items():
            alike.setdefault(", ".join(names), []).append(setting)
        for names, settings in alike.items():
            who = "every setting" if set(settings) == every else ", ".join(settings)
            if why == "–":
                texts["–"].append(f"{names} for {who}")
            else:
                texts["†"].append(f"{why.format(who)} ({names})")
    lines = [f"† no interval: {INTERVAL_NEEDS}. " + "; ".join(texts["†"]) + "."] if texts["†"] else []
    if texts["–"]:
        if "reference" in differences and set(differences["reference"]) != {reference}:
            reference = "its reference"
        missing = differences.loc[differences["difference"].isna(), "metric"]
        speed = any(metric.endswith(LEARNING_SPEED_SUFFIX) for metric in missing)
        lines.append(
            f"– no difference: no finished seed of the setting or of {reference} has a value: "
            + "; ".join(texts["–"])
            + "."
            + (" A learning-speed metric has none where the trial never reached its threshold." if speed else "")
        )
    return lines
