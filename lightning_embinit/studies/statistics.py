"""The statistics of a study's report: mean ± std over seeds, Welch's interval, curves aligned on steps.

Records are the trial dicts a sweep writes (``setting``, ``seed``, ``status``, ``metrics``,
``monitors``, ``cost``, ``wall_time_s``, ``curves``); a value a trial lacks is missing for that trial alone, so
``n`` counts the trials that have it. NaN and non-numbers count as missing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from lightning_embinit.checks import check_choice, check_known

GROUPS = ("metrics", "monitors", "cost")
WALL_TIME = "wall_time_s"
STATS = ("mean", "std", "n")


@dataclass(frozen=True)
class Welch:
    """The difference of means ``setting − reference`` with its Welch interval and p-value."""

    difference: float
    low: float
    high: float
    df: float
    p_value: float
    n: int
    n_reference: int
    note: str = ""

    @property
    def excludes_zero(self) -> bool:
        return bool(self.low > 0 or self.high < 0)


COMPARE_COLUMNS = ["setting", "metric", *(f.name for f in fields(Welch) if f.name != "note"), "excludes_zero", "note"]


def number(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing, not a number, a bool or NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def done(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of finished trials."""
    return [record for record in records if record.get("status") == "done"]


def setting_name(record: Mapping[str, Any]) -> str:
    """A record's setting name (a setting given as a dict counts by its ``name``)."""
    setting = record.get("setting")
    return str(setting.get("name")) if isinstance(setting, Mapping) else str(setting)


def value_of(record: Mapping[str, Any], metric: str) -> float | None:
    """A trial's value of ``metric``: from ``metrics``, else ``monitors``, else the record itself (wall time)."""
    for group in GROUPS:
        values = record.get(group)
        if isinstance(values, Mapping) and metric in values:
            return number(values[metric])
    return number(record.get(metric))


def metric_names(records: Iterable[Mapping[str, Any]], group: str | None = None) -> list[str]:
    """Every metric any finished trial has, in first-seen order: ``metrics``, ``monitors``, ``cost``, then wall time;
    ``group`` (one of ``GROUPS``) keeps that group only."""
    records = done(records)
    names: dict[str, None] = {}
    for name in (group,) if group else GROUPS:
        for record in records:
            values = record.get(name)
            if isinstance(values, Mapping):
                names.update((key, None) for key, value in values.items() if number(value) is not None)
    if group is None and any(number(record.get(WALL_TIME)) is not None for record in records):
        names[WALL_TIME] = None
    return list(names)


def samples(records: Iterable[Mapping[str, Any]], setting: str, metric: str) -> np.ndarray:
    """The values of ``metric`` over the finished trials (seeds) of ``setting``."""
    values = (value_of(record, metric) for record in done(records) if setting_name(record) == setting)
    return np.array([value for value in values if value is not None], dtype=float)


def mean(values: np.ndarray) -> float:
    """The mean; exactly the value when every value is the same (no rounding residue), NaN for none."""
    if not len(values):
        return math.nan
    return float(values[0]) if np.ptp(values) == 0 else float(np.mean(values))


def variance(values: np.ndarray) -> float:
    """The sample variance (ddof=1); exactly 0 when every value is the same (no rounding residue)."""
    return 0.0 if np.ptp(values) == 0 else float(np.var(values, ddof=1))


def describe(values: np.ndarray) -> tuple[float, float, int]:
    """(mean, sample std with ddof=1, n); NaN mean for n = 0, NaN std for n < 2."""
    n = len(values)
    return mean(values), math.sqrt(variance(values)) if n > 1 else math.nan, n


def _table_axes(
    records: Sequence[Mapping[str, Any]], metrics: Sequence[str] | None, settings: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """(the metrics: ``metrics``, checked, else every one; the settings: ``settings``, else the records' in order)."""
    known = metric_names(records)
    if metrics is not None:
        check_known("metrics", metrics, known)
    order = list(settings) if settings is not None else list(dict.fromkeys(setting_name(record) for record in records))
    return known if metrics is None else list(metrics), order


def aggregate(
    records: Iterable[Mapping[str, Any]], *, metrics: Sequence[str] | None = None, settings: Sequence[str] | None = None
) -> pd.DataFrame:
    """Mean, std (ddof=1) and n of each metric over each setting's finished trials: a row per setting (``settings``'
    order, else first-seen), columns ``(metric, "mean"|"std"|"n")``."""
    records = list(records)
    names, order = _table_axes(records, metrics, settings)
    rows = {
        setting: [value for metric in names for value in describe(samples(records, setting, metric))]
        for setting in order
    }
    columns = pd.MultiIndex.from_product([names, STATS], names=["metric", "statistic"])
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    frame.index.name = "setting"
    return frame.astype({(metric, "n"): int for metric in names})


def long_form(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`aggregate`'s table as rows of (setting, metric, mean, std, n), settings first."""
    rows = [
        (setting, metric, *(summary.loc[setting, (metric, stat)] for stat in STATS))
        for setting in summary.index
        for metric in summary.columns.get_level_values(0).unique()
    ]
    frame = pd.DataFrame(rows, columns=["setting", "metric", *STATS])
    frame["n"] = frame["n"].astype(int)
    return frame


def welch(values: np.ndarray, reference: np.ndarray, confidence: float = 0.95) -> Welch:
    """Welch's interval for ``mean(values) − mean(reference)`` (Welch–Satterthwaite df, Student t quantile); n < 2 on
    either side, or no spread on both, gives a NaN interval with a note saying why."""
    n, n_ref = len(values), len(reference)
    difference = mean(values) - mean(reference)
    no_interval = (math.nan,) * 4
    if n < 2 or n_ref < 2:
        return Welch(difference, *no_interval, n, n_ref, f"n < 2 ({n} against {n_ref} for the reference)")
    share, share_ref = variance(values) / n, variance(reference) / n_ref
    spread = share + share_ref
    if spread == 0:
        return Welch(difference, *no_interval, n, n_ref, "no spread over the seeds on either side")
    df = float(spread**2 / (share**2 / (n - 1) + share_ref**2 / (n_ref - 1)))
    half = float(stats.t.ppf((1 + confidence) / 2, df) * math.sqrt(spread))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p_value = float(stats.ttest_ind(values, reference, equal_var=False).pvalue)
    return Welch(difference, difference - half, difference + half, df, p_value, n, n_ref)


def compare(
    records: Iterable[Mapping[str, Any]],
    reference: str,
    *,
    metrics: Sequence[str] | None = None,
    confidence: float = 0.95,
    settings: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Each other setting's difference of means from ``reference``, per metric, with Welch's interval: rows (setting,
    metric) in setting order, columns ``COMPARE_COLUMNS``."""
    records = list(records)
    names, order = _table_axes(records, metrics, settings)
    check_choice("reference setting", reference, order)
    rows = []
    for setting in (s for s in order if s != reference):
        for metric in names:
            result = welch(samples(records, setting, metric), samples(records, reference, metric), confidence)
            rows.append({"setting": setting, "metric": metric, **asdict(result), "excludes_zero": result.excludes_zero})
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def block_references(
    blocks: Mapping[str, Sequence[str]] | None, settings: Sequence[str], reference: str
) -> dict[str, str]:
    """Each of ``settings`` but the references → the setting it is measured against: its block's reference (``blocks``:
    reference → settings), else ``reference``. A block whose reference is not among ``settings`` (no finished trial)
    leaves its settings out."""
    own = {member: block_reference for block_reference, members in (blocks or {}).items() for member in members}
    taken = {reference, *own.values()}
    return {s: own.get(s, reference) for s in settings if s not in taken and own.get(s, reference) in settings}


def compare_each(records: Sequence[Mapping[str, Any]], references: Mapping[str, str], **options: Any) -> pd.DataFrame:
    """:func:`compare` of each setting with its own reference (``references``: setting → reference), in ``settings``
    order, with a ``reference`` column after ``setting``; ``options`` go to :func:`compare`."""
    settings = options.pop("settings")
    frames = []
    for reference in dict.fromkeys(references.values()):
        members = [reference, *(s for s in settings if references.get(s) == reference)]
        frames.append(compare(records, reference, settings=members, **options).assign(reference=reference))
    columns = ["setting", "reference", *(c for c in COMPARE_COLUMNS if c != "setting")]
    if not frames:
        return pd.DataFrame(columns=columns)
    frame = pd.concat(frames, ignore_index=True)[columns]
    order = {setting: index for index, setting in enumerate(settings)}
    return frame.sort_values("setting", key=lambda column: column.map(order), kind="stable", ignore_index=True)


def curve_points(curve: Any) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one logged curve (``[step, epoch, value]`` rows), sorted, one value per step, finite only."""
    latest: dict[float, float] = {}
    for row in curve if isinstance(curve, Sequence) else ():
        if isinstance(row, Sequence) and len(row) >= 2:
            step, value = number(row[0]), number(row[-1])
            if step is not None and value is not None and math.isfinite(value):
                latest[step] = value
    steps = np.array(sorted(latest), dtype=float)
    return steps, np.array([latest[step] for step in steps], dtype=float)


def align_curves(curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(steps, mean, std, n) of several seeds' curves on the steps they share: stacked as they are when logged on the
    same steps, else each interpolated linearly onto the union of their steps inside the range every seed covers (no
    extrapolation). std is NaN for one seed."""
    curves = [(steps, values) for steps, values in curves if len(steps)]
    if not curves:
        return np.array([]), np.array([]), np.array([]), 0
    first = curves[0][0]
    if all(len(steps) == len(first) and np.array_equal(steps, first) for steps, _ in curves):
        grid, stacked = first, np.stack([values for _, values in curves])
    else:
        low, high = max(steps[0] for steps, _ in curves), min(steps[-1] for steps, _ in curves)
        grid = np.unique(np.concatenate([steps for steps, _ in curves]))
        grid = grid[(grid >= low) & (grid <= high)]
        stacked = np.stack([np.interp(grid, steps, values) for steps, values in curves])
    std = stacked.std(axis=0, ddof=1) if len(curves) > 1 else np.full(len(grid), math.nan)
    return grid, stacked.mean(axis=0), std, len(curves)
