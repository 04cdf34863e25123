"""The figures of a study's report (PNG; matplotlib figures on an Agg canvas, no pyplot state).

- ``curves_<metric>.png``: a logged curve (validation loss, the protocol's monitor) per setting, the mean
  over seeds with a ±std band, seeds aligned on the logged step (:func:`~.statistics.align_curves`);
- ``learning_speed.png``: training examples until the smoothed metric first reaches its threshold ([KB] Table 2),
  mean ± std per setting over the seeds that reached it, one panel per learning-speed metric; written when some
  trial reached a threshold (:func:`learning_speed_absence` says why there is none).

Steps are optimizer steps, as the records' ``curves`` and ``best_step`` count them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lightning_embinit.studies.keys import class_path
from lightning_embinit.studies.statistics import align_curves, curve_points, done, metric_names, setting_name

LEARNING_SPEED_SUFFIX = "examples_to_threshold"
MONITOR_DEFAULTS = {"mode": "max", "prefix": "learning_speed"}
"""``LearningSpeedMonitor``'s defaults, for a config that leaves them out (the report imports no Lightning)."""
DPI = 100
COLOR_COUNT = 10  # colors in matplotlib's default cycle, C0 … C9
LINE_STYLES = ("-", "--", ":", "-.")
LEGEND_INSIDE_MAX = 6  # more settings than this: the legend goes beside the axes, not over the curves


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (any selected backend is left alone, no window opens)."""
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def file_stem(name: str) -> str:
    """``name`` as a file-name part: anything but letters, digits, ``.``, ``-`` and ``_`` becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "metric"


def save(figure: Figure, path: Path) -> Path:
    """Write ``figure`` as PNG to ``path``, release it, and return ``path``."""
    figure.savefig(path, dpi=DPI)
    figure.clear()
    return path


def curve_series(
    records: Sequence[Mapping[str, Any]], settings: Sequence[str], metric: str
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """Per setting, the finished trials' ``metric`` curves aligned: (steps, mean, std, seeds)."""
    series = {}
    for setting in settings:
        curves = [
            curve_points((r.get("curves") or {}).get(metric)) for r in done(records) if setting_name(r) == setting
        ]
        aligned = align_curves(curves)
        if aligned[3]:  # seeds with the curve
            series[setting] = aligned
    return series


def curves_figure(
    series: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]], metric: str, *, title: str = ""
) -> Figure:
    """One line per setting (mean over seeds) with a shaded ±std band where there are two seeds or more."""
    outside = len(series) > LEGEND_INSIDE_MAX
    figure = new_figure(8.6 if outside else 6.4, 4.0)
    axes = figure.add_subplot()
    for index, (setting, (steps, mean, std, n)) in enumerate(series.items()):
        color, dashes = line_style(index)
        marker = "o" if len(steps) < 30 else None
        axes.plot(steps, mean, color=color, linestyle=dashes, marker=marker, markersize=3, label=f"{setting} (n={n})")
        if n > 1:
            axes.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    axes.set_xlabel("optimizer step (as best_step)")
    axes.set_ylabel(metric)
    axes.set_title(title or f"{metric}: mean ± std over seeds", fontsize=10)
    axes.grid(alpha=0.3)
    beside = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0} if outside else {}
    axes.legend(fontsize=8, **beside)
    return figure


def line_style(index: int) -> tuple[str, str]:
    """The ``index``-th setting's (color, line style): matplotlib's ten colors, then the same colors dashed,
    dotted and dash-dotted, so no two of up to 40 settings look alike."""
    return f"C{index % COLOR_COUNT}", LINE_STYLES[(index // COLOR_COUNT) % len(LINE_STYLES)]


def learning_speed_goal(records: Sequence[Mapping[str, Any]], metric: str) -> str:
    """What ``metric`` (``<prefix>/<monitor>/examples_to_threshold``) waits for, from the ``LearningSpeedMonitor`` in
    the trials' configs: ``smoothed val_loss ≤ 4.2``, the distinct ones joined by ``or``; "" when none names it."""
    prefix, monitor = metric.rsplit("/", 2)[:2]
    goals = []
    for record in done(records):
        callbacks = ((record.get("config") or {}).get("trainer") or {}).get("callbacks") or []
        for callback in callbacks if isinstance(callbacks, list) else [callbacks]:
            if isinstance(callback, Mapping) and (class_path(callback) or "").endswith("LearningSpeedMonitor"):
                options = {**MONITOR_DEFAULTS, **(callback.get("init_args") or {})}
                if (options.get("prefix"), options.get("monitor")) == (prefix, monitor):
                    sign = "≥" if options["mode"] == "max" else "≤"
                    goals.append(f"smoothed {monitor} {sign} {options.get('threshold')}")
    return " or ".join(dict.fromkeys(goals))


def threshold_counts(records: Sequence[Mapping[str, Any]], setting: str, metric: str) -> tuple[int, int]:
    """(the finished trials of ``setting`` that reached ``metric``'s threshold, those that watched it)."""
    watched = [
        r["monitors"][metric]
        for r in done(records)
        if setting_name(r) == setting and isinstance(r.get("monitors"), Mapping) and metric in r["monitors"]
    ]
    return sum(isinstance(value, (int, float)) and not isinstance(value, bool) for value in watched), len(watched)


def _reach_label(reached: int, watched: int) -> str:
    if reached == watched:
        return f"n={reached}"
    return f"n={reached} of {watched}" if reached else f"never reached\n(0 of {watched})"


def learning_speed_figure(
    records: Sequence[Mapping[str, Any]], summary: pd.DataFrame, metrics: Sequence[str]
) -> Figure:
    """Bars of mean ± std per setting over the seeds that reached the threshold, one panel per metric of
    :func:`~.statistics.aggregate`'s table; a setting none of whose trials reached it has a note, no bar."""
    figure = new_figure(max(5.5, 0.9 * len(summary.index) + 2.0), 3.8 * len(metrics))
    for row, metric in enumerate(metrics, start=1):
        axes = figure.add_subplot(len(metrics), 1, row)
        counts = {setting: threshold_counts(records, setting, metric) for setting in summary.index}
        settings = [setting for setting in summary.index if counts[setting][1]]
        positions = np.arange(len(settings))
        means = np.nan_to_num(summary.loc[settings, (metric, "mean")].to_numpy(dtype=float))
        stds = np.nan_to_num(summary.loc[settings, (metric, "std")].to_numpy(dtype=float))
        colors = [line_style(list(summary.index).index(setting))[0] for setting in settings]
        axes.bar(positions, means, yerr=stds, capsize=4, color=colors, alpha=0.8)
        for position, top, setting in zip(positions, means + stds, settings):
            label = _reach_label(*counts[setting])
            axes.annotate(
                label, (position, top), ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points"
            )
        axes.margins(y=0.15)
        axes.set_xticks(positions, settings, rotation=30, ha="right", fontsize=8)
        axes.set_xlabel("setting")
        axes.set_ylabel("training examples")
        goal = learning_speed_goal(records, metric) or "the threshold"
        axes.set_title(
            f"{metric}\ntraining examples until {goal}\nmean ± std over the seeds that reached it", fontsize=9
        )
        axes.grid(axis="y", alpha=0.3)
    return figure


def learning_speed_absence(records: Sequence[Mapping[str, Any]], summary: pd.DataFrame) -> str:
    """Why a report has no ``learning_speed.png`` ("" when it has one): no trial watched a learning-speed metric, none
    reached its threshold, or the report's ``--metrics`` leave it out."""
    if any(metric.endswith(LEARNING_SPEED_SUFFIX) for metric in summary.columns.get_level_values(0)):
        return ""
    watched = dict.fromkeys(
        name
        for record in done(records)
        for name in record.get("monitors") or ()
        if name.endswith(LEARNING_SPEED_SUFFIX)
    )
    if not watched:
        return "no trial ran a LearningSpeedMonitor"
    if set(watched) & set(metric_names(records)):  # some trial reached its threshold
        return "the report's --metrics leave the learning-speed metrics out"
    goals = "; ".join(f"{name}: {learning_speed_goal(records, name) or 'its threshold'}" for name in watched)
    return f"no trial reached its learning-speed threshold ({goals})"


def write_figures(
    records: Sequence[Mapping[str, Any]],
    settings: Sequence[str],
    summary: pd.DataFrame,
    curve_metrics: Sequence[str],
    out_dir: Path,
    *,
    study: str = "",
) -> list[Path]:
    """Write ``curves_<metric>.png`` for each curve some finished trial logged and ``learning_speed.png``
    when ``summary`` has a learning-speed metric (some trial reached its threshold); the paths written."""
    written = []
    for metric in curve_metrics:
        series = curve_series(records, settings, metric)
        if series:
            title = f"{study}: {metric}, mean ± std over seeds" if study else ""
            path = out_dir / f"curves_{file_stem(metric)}.png"
            written.append(save(curves_figure(series, metric, title=title), path))
    speed = [m for m in summary.columns.get_level_values(0).unique() if m.endswith(LEARNING_SPEED_SUFFIX)]
    if speed:
        written.append(save(learning_speed_figure(records, summary, speed), out_dir / "learning_speed.png"))
    return written
