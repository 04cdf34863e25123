"""The figures of a study's report (PNG; matplotlib figures on an Agg canvas, no pyplot state).

- ``curves_<metric>.png``: a logged curve (validation loss, the protocol's monitor) per setting, the mean
  over seeds with a ±std band, seeds aligned on the logged step (:func:`~.statistics.align_curves`);
- ``learning_speed.png``: examples until the smoothed metric first reaches its threshold ([KB] Table 2),
  mean ± std per setting, one panel per learning-speed metric.
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

from lightning_embinit.studies.statistics import align_curves, curve_points, done, setting_name

LEARNING_SPEED_SUFFIX = "examples_to_threshold"
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
    axes.set_xlabel("step")
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


def learning_speed_figure(summary: pd.DataFrame, metrics: Sequence[str]) -> Figure:
    """Bars of mean ± std per setting, one panel per metric of :func:`~.statistics.aggregate`'s table."""
    figure = new_figure(max(4.0, 0.9 * len(summary.index) + 2.0), 3.2 * len(metrics))
    positions = np.arange(len(summary.index))
    for row, metric in enumerate(metrics, start=1):
        axes = figure.add_subplot(len(metrics), 1, row)
        means = summary[(metric, "mean")].to_numpy(dtype=float)
        stds = np.nan_to_num(summary[(metric, "std")].to_numpy(dtype=float))
        colors = [line_style(index)[0] for index in positions]
        axes.bar(positions, np.nan_to_num(means), yerr=stds, capsize=4, color=colors, alpha=0.8)
        for position, top, n in zip(positions, np.nan_to_num(means) + stds, summary[(metric, "n")]):
            axes.annotate(
                f"n={n}",
                (position, top),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 2),
                textcoords="offset points",
            )
        axes.margins(y=0.12)
        axes.set_xticks(positions, [str(setting) for setting in summary.index], rotation=30, ha="right", fontsize=8)
        axes.set_ylabel("examples")
        axes.set_title(f"{metric}: mean ± std over seeds", fontsize=9)
        axes.grid(axis="y", alpha=0.3)
    return figure


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
    when ``summary`` has a learning-speed metric; the paths written."""
    written = []
    for metric in curve_metrics:
        series = curve_series(records, settings, metric)
        if series:
            title = f"{study}: {metric}, mean ± std over seeds" if study else ""
            path = out_dir / f"curves_{file_stem(metric)}.png"
            written.append(save(curves_figure(series, metric, title=title), path))
    speed = [
        metric for metric in summary.columns.get_level_values(0).unique() if metric.endswith(LEARNING_SPEED_SUFFIX)
    ]
    if speed:
        written.append(save(learning_speed_figure(summary, speed), out_dir / "learning_speed.png"))
    return written
