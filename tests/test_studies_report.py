"""``embinit report``'s statistics, tables and figures on a hand-made results directory (no training)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
from matplotlib import image
from scipy import stats

from lightning_embinit.studies.figures import curves_figure
from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.records import ReportError, load_results
from lightning_embinit.studies.report import failure_groups, write_report
from lightning_embinit.studies.statistics import aggregate, align_curves, compare, curve_points, welch

SEEDS = [0, 1, 2, 3]
# setting → per seed: best_val_loss, test_bleu (None: the trial lacks it), status
TABLE = {
    "xavier": [(1.0, 10.0, "done"), (2.0, 12.0, "done"), (3.0, 14.0, "done"), (4.0, 16.0, "done")],
    "glove": [(2.0, 20.0, "done"), (4.0, 22.0, "done"), (6.0, 24.0, "done"), (None, None, "failed")],
    "glove_std": [(0.5, 30.0, "done"), (1.0, 31.0, "done"), (1.5, 32.0, "done"), (2.0, None, "done")],
    "ones": [(9.0, 0.5, "done"), (None, None, "failed"), (None, None, "failed"), (None, None, "failed")],
}
ERRORS = {
    "glove": "RuntimeError: CUDA out of memory\nTraceback (most recent call last):\n  ...",
    "ones": "FloatingPointError: the loss is NaN at step 12\nTraceback (most recent call last):\n  ...",
}


def _record(setting: str, seed: int, loss: float | None, bleu: float | None, status: str) -> dict:
    metrics = {} if status == "failed" else {"best_val_loss": loss, "best_epoch": 2.0}
    if bleu is not None:
        metrics["test_bleu"] = bleu
    steps = [0, 10, 20] if setting != "glove" else [0, 5, 15, 20]
    record = {
        "study": "toy",
        "setting": setting,
        "seed": seed,
        "trial_id": f"{setting}-s{seed}",
        "config_hash": "abc",
        "status": status,
        "error": ERRORS[setting] if status == "failed" else None,
        "metrics": metrics,
        "monitors": {
            "init_loss": 7.0,
            "ln_vocab": 6.9,
            "learning_speed/val_acc/examples_to_threshold": 1000.0 * (seed + 1),
        },
        "init_report": {"tgt": {"std": 0.1}},
        "curves": {
            "val_loss": [[s, i, 5.0 - i - 0.1 * seed] for i, s in enumerate(steps)],
            "train_loss": [[s, i, 6.0 - i] for i, s in enumerate(steps)],
            "val_acc": [[s, i, 0.2 * i + 0.01 * seed] for i, s in enumerate(steps)],
        },
        "cost": {"parameters": 1000, "seconds_per_step": 0.5 * (seed + 1)},
        "wall_time_s": 10.0 * (seed + 1),
        "versions": {"torch": "2.5.1", "lightning": "2.4.0"},
        "host": "box (2 cpus)",
    }
    if status == "failed":
        record.pop("curves")
        record["monitors"] = {}
    return record


def _records() -> list[dict]:
    return [_record(setting, seed, *row) for setting, rows in TABLE.items() for seed, row in zip(SEEDS, rows)]


@pytest.fixture
def results(tmp_path):
    directory = tmp_path / "results"
    (directory / "trials").mkdir(parents=True)
    study = {
        "name": "toy",
        "reference": "xavier",
        "seeds": SEEDS,
        "settings": [{"name": name, "overrides": {}} for name in TABLE],
    }
    (directory / "study.json").write_text(
        json.dumps({"name": "toy", "hash": "f00d", "variant": "smoke", "study": study})
    )
    for record in _records():
        (directory / "trials" / f"{record['trial_id']}.json").write_text(json.dumps(record))
    return directory


def test_aggregate_gives_mean_sample_std_and_n_per_setting_in_order():
    summary = aggregate(_records(), settings=["xavier", "glove", "glove_std", "ones"])
    assert list(summary.index) == ["xavier", "glove", "glove_std", "ones"]
    loss = summary["best_val_loss"]
    # xavier 1, 2, 3, 4: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, std √(5/3)
    assert loss.loc["xavier"].tolist() == pytest.approx([2.5, math.sqrt(5 / 3), 4])
    # glove 2, 4, 6 (seed 3 failed): mean 4, std √(8/2) = 2
    assert loss.loc["glove"].tolist() == pytest.approx([4.0, 2.0, 3])
    # ones: one finished seed, no std
    assert loss.loc["ones", "mean"] == 9.0 and math.isnan(loss.loc["ones", "std"]) and loss.loc["ones", "n"] == 1
    # glove_std's seed 3 lacks test_bleu: 30, 31, 32 over n = 3
    assert summary["test_bleu"].loc["glove_std"].tolist() == pytest.approx([31.0, 1.0, 3])
    assert summary[("wall_time_s", "mean")].loc["xavier"] == pytest.approx(25.0)
    assert {"init_loss", "learning_speed/val_acc/examples_to_threshold", "wall_time_s"} <= set(
        summary.columns.get_level_values(0)
    )


def test_aggregate_metrics_option_and_unknown_metric():
    summary = aggregate(_records(), metrics=["test_bleu"])
    assert list(summary.columns.get_level_values(0).unique()) == ["test_bleu"]
    assert list(summary.index) == list(TABLE)
    with pytest.raises(ValueError, match=r"unknown metrics \['bleu'\]; valid: best_val_loss"):
        aggregate(_records(), metrics=["bleu"])


def test_welch_interval_against_hand_computation_and_scipy():
    reference, values = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 4.0, 6.0])
    result = welch(values, reference)
    # means 2.5 and 4 → Δ = 1.5; s²/n: (5/3)/4 = 5/12 and 4/3 → se² = 7/4
    # df = (7/4)² / ((5/12)²/3 + (4/3)²/2) = (49/16) / (409/432) = 21168/6544 ≈ 3.23472
    df = (7 / 4) ** 2 / ((5 / 12) ** 2 / 3 + (4 / 3) ** 2 / 2)
    assert df == pytest.approx(21168 / 6544) and result.df == pytest.approx(df)
    # t(0.975; 3.23472) ≈ 3.05573, half-width 3.05573 · √1.75 ≈ 4.04233
    half = stats.t.ppf(0.975, df) * math.sqrt(7 / 4)
    assert half == pytest.approx(4.04233, abs=1e-5)
    assert (result.difference, result.low, result.high) == pytest.approx((1.5, 1.5 - half, 1.5 + half))
    assert (result.low, result.high) == pytest.approx((-2.54233, 5.54233), abs=1e-5)
    scipy_result = stats.ttest_ind(values, reference, equal_var=False)
    interval = scipy_result.confidence_interval(0.95)
    assert (result.low, result.high) == pytest.approx((interval.low, interval.high))
    assert result.p_value == pytest.approx(scipy_result.pvalue) and not result.excludes_zero
    assert welch(values, reference, confidence=0.5).high - 1.5 < half


def test_welch_without_an_interval_says_why():
    single = welch(np.array([9.0]), np.array([1.0, 2.0]))
    assert single.difference == 7.5 and math.isnan(single.low) and "n < 2" in single.note
    flat = welch(np.array([7.0, 7.0]), np.array([7.0, 7.0, 7.0]))
    assert flat.difference == 0 and math.isnan(flat.high) and "no spread" in flat.note
    assert math.isnan(welch(np.array([]), np.array([1.0, 2.0])).difference)


def test_compare_marks_intervals_that_exclude_zero():
    differences = compare(_records(), "xavier", metrics=["best_val_loss", "test_bleu", "init_loss"])
    rows = differences.set_index(["setting", "metric"])
    assert list(dict.fromkeys(differences["setting"])) == ["glove", "glove_std", "ones"]
    glove = rows.loc[("glove", "best_val_loss")]
    assert glove["difference"] == pytest.approx(1.5) and glove["df"] == pytest.approx(21168 / 6544)
    assert not glove["excludes_zero"]
    # test_bleu: 20, 22, 24 against 10, 12, 14, 16 → Δ = 9, se² = (20/3)/4 + 4/3 = 3, df = 9/(25/27 + 16/18)
    # ≈ 4.959, t(0.975; 4.959) ≈ 2.5770 → 9 ± 4.4634
    bleu = rows.loc[("glove", "test_bleu")]
    assert bleu["excludes_zero"] and bleu["df"] == pytest.approx(9 / (25 / 27 + 16 / 18))
    assert (bleu["low"], bleu["high"]) == pytest.approx((4.5366, 13.4634), abs=1e-4)
    assert "n < 2" in rows.loc[("ones", "best_val_loss"), "note"]
    assert "no spread" in rows.loc[("glove", "init_loss"), "note"]
    assert compare(_records(), "xavier", metrics=["ln_vocab"])["difference"].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="unknown reference setting 'he'; choose one of: xavier, glove"):
        compare(_records(), "he")


def test_curves_align_on_shared_steps_and_interpolate_otherwise():
    steps, values = curve_points([[10, 1, 2.0], [0, 0, 3.0], [20, 2, float("nan")], [10, 1, 2.5]])
    assert steps.tolist() == [0, 10] and values.tolist() == [3.0, 2.5]  # sorted, NaN dropped, last value per step
    same = align_curves([(np.array([0.0, 10.0]), np.array([3.0, 1.0])), (np.array([0.0, 10.0]), np.array([5.0, 1.0]))])
    assert same[0].tolist() == [0, 10] and same[1].tolist() == [4.0, 1.0] and same[3] == 2
    # A: steps 0, 10, 20 → 3, 2, 1; B: steps 0, 5, 15 → 4, 3, 1; shared range 0..15, grid 0, 5, 10, 15
    # A at the grid: 3, 2.5, 2, 1.5; B: 4, 3, 2, 1 → mean 3.5, 2.75, 2, 1.25; std |A − B|/√2
    grid, mean, std, n = align_curves(
        [
            (np.array([0.0, 10.0, 20.0]), np.array([3.0, 2.0, 1.0])),
            (np.array([0.0, 5.0, 15.0]), np.array([4.0, 3.0, 1.0])),
        ]
    )
    assert grid.tolist() == [0, 5, 10, 15] and mean.tolist() == pytest.approx([3.5, 2.75, 2.0, 1.25])
    assert std.tolist() == pytest.approx(np.array([1.0, 0.5, 0.0, 0.5]) / math.sqrt(2)) and n == 2
    assert math.isnan(align_curves([(np.array([0.0]), np.array([1.0]))])[2][0])


def test_failures_are_grouped_by_the_first_line_of_their_error():
    groups = failure_groups(_records())
    assert groups == [
        ("FloatingPointError: the loss is NaN at step 12", ["ones-s1", "ones-s2", "ones-s3"]),
        ("RuntimeError: CUDA out of memory", ["glove-s3"]),
    ]


def test_write_report_writes_tables_csvs_and_figures(results):
    report = write_report(results)
    out = results / "report"
    assert report["out_dir"] == out and report["reference"] == "xavier" and report["failed"] == 4
    names = sorted(path.name for path in report["paths"])
    assert names == [
        "curves_val_acc.png",
        "curves_val_loss.png",
        "differences.csv",
        "learning_speed.png",
        "summary.csv",
        "summary.md",
    ]
    for path in report["paths"]:
        assert path.is_file()
        if path.suffix == ".png":
            assert image.imread(path).ndim == 3
    markdown = (out / "summary.md").read_text()
    assert markdown == report["markdown"]
    assert "Failed trials: 4 of 16, left out of the tables:" in markdown
    assert "- FloatingPointError: the loss is NaN at step 12 (3: ones-s1, ones-s2, ones-s3)" in markdown
    assert "- RuntimeError: CUDA out of memory (1: glove-s3)" in markdown
    assert "| xavier | 2.5 ± 1.3 (4) | 2 ± 0 (4) | 13 ± 2.6 (4) |" in markdown
    assert "| glove | +1.5 [-2.54, 5.54] | +0 [–]† | **+9 [4.54, 13.5]** |" in markdown
    assert "- variant: smoke; study hash: f00d" in markdown and "- seeds: 0, 1, 2, 3" in markdown
    assert "- versions: torch 2.5.1, lightning 2.4.0" in markdown and "- host: box (2 cpus)" in markdown
    assert "- wall time: 6 min 40 s in total over 16 trials" in markdown  # failed trials' time counts too
    cost = markdown[markdown.index("## Cost: mean ± std (n) over seeds") :]
    assert cost.splitlines()[2] == "| setting | parameters | seconds_per_step | wall_time_s |"
    assert "| xavier | 1000 ± 0 (4) | 1.25 ± 0.65 (4) | 25 ± 13 (4) |" in cost  # seeds 0-3: 0.5·(1, 2, 3, 4)
    monitors = markdown[markdown.index("## Monitors: mean ± std") : markdown.index("## Cost")]
    assert "wall_time_s" not in monitors and "parameters" not in monitors
    summary_csv = pd.read_csv(out / "summary.csv")
    assert list(summary_csv.columns) == ["setting", "metric", "mean", "std", "n"]
    row = summary_csv[(summary_csv.setting == "glove_std") & (summary_csv.metric == "test_bleu")].iloc[0]
    assert (row["mean"], row["std"], row["n"]) == (31.0, 1.0, 3)
    differences = pd.read_csv(out / "differences.csv")
    assert {"setting", "metric", "difference", "low", "high", "df", "p_value", "excludes_zero"} <= set(differences)


def test_write_report_options(results, tmp_path):
    report = write_report(results, tmp_path / "elsewhere", reference="glove_std", metrics=["best_val_loss"])
    assert report["out_dir"] == tmp_path / "elsewhere" and (tmp_path / "elsewhere" / "summary.md").is_file()
    assert list(report["summary"].columns.get_level_values(0).unique()) == ["best_val_loss"]
    assert set(report["differences"]["setting"]) == {"xavier", "glove", "ones"}
    assert "learning_speed.png" not in {path.name for path in report["paths"]}
    with pytest.raises(ReportError, match="unknown reference setting 'he'; choose one of: xavier, glove, glove_std"):
        write_report(results, reference="he")
    unknown_metric = r"unknown metrics \['bleu'\]; valid: best_val_loss, .* finished trials in .*results\)"
    with pytest.raises(ReportError, match=unknown_metric):
        write_report(results, metrics=["bleu"])


def test_a_newer_record_of_the_same_setting_and_seed_replaces_the_older(results):
    old = results / "trials" / "glove-s0.json"
    newer = _record("glove", 0, 100.0, 20.0, "done") | {"trial_id": "glove-s0-changed"}
    (results / "trials" / "glove-s0-changed.json").write_text(json.dumps(newer))
    os.utime(old, (1_000_000, 1_000_000))
    loaded = load_results(results)
    assert loaded.superseded == ["glove-s0"]
    report = write_report(results)
    assert report["summary"].loc["glove", ("best_val_loss", "mean")] == pytest.approx((100 + 4 + 6) / 3)
    assert "older records of a setting and seed that has a newer one (glove-s0)" in report["markdown"]


def test_bad_results_directories_give_one_clear_error(results, tmp_path):
    assert issubclass(ReportError, StudyError)
    with pytest.raises(ReportError, match="results directory .*nowhere does not exist"):
        write_report(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportError, match=r"empty has no study.json"):
        write_report(empty)
    (empty / "study.json").write_text(json.dumps({"name": "toy", "study": {"settings": ["a"]}}))
    with pytest.raises(ReportError, match=r"empty has no trial records \(trials/\*\.json\)"):
        write_report(empty)
    (empty / "trials").mkdir()
    failed = _record("ones", 1, None, None, "failed")
    (empty / "trials" / "ones-s1.json").write_text(json.dumps(failed))
    with pytest.raises(ReportError, match="empty has no finished trial .* FloatingPointError: the loss is NaN"):
        write_report(empty)
    (empty / "study.json").write_text("{not json")
    with pytest.raises(ReportError, match="study.json is not readable JSON"):
        write_report(empty)
    (results / "trials" / "broken.json").write_text("{")
    with pytest.warns(UserWarning, match="broken.json left out"):
        report = write_report(results)
    assert "unreadable records (broken.json)" in report["markdown"]


def test_a_study_of_one_setting_has_no_difference_tables(tmp_path):
    directory = tmp_path / "one"
    (directory / "trials").mkdir(parents=True)
    (directory / "study.json").write_text(json.dumps({"name": "one", "study": {"settings": {"xavier": {}}}}))
    for seed in (0, 1):
        record = _record("xavier", seed, 1.0 + seed, None, "done")
        record["metrics"]["best_val_acc"] = 0.5
        record["monitors"] = {"init_loss": 7.0}
        (directory / "trials" / f"xavier-s{seed}.json").write_text(json.dumps(record))
    report = write_report(directory)
    assert "difference from" not in report["markdown"] and report["differences"].empty
    assert "| xavier | 1.5 ± 0.71 (2) |" in report["markdown"] and report["failed"] == 0
    assert "Failed trials: none of 2." in report["markdown"]
    # val_acc: the protocol's monitor, from the metric best_val_acc; no learning-speed metric, no bar chart
    assert {p.name for p in report["paths"] if p.suffix == ".png"} == {"curves_val_loss.png", "curves_val_acc.png"}


def test_settings_the_study_does_not_list_come_after_its_own(results):
    record = _record("he", 0, 3.0, 11.0, "done")
    (results / "trials" / "he-s0.json").write_text(json.dumps(record))
    report = write_report(results)
    assert list(report["summary"].index) == ["xavier", "glove", "glove_std", "ones", "he"]
    assert "- settings with records that study.json does not list, after its own: he" in report["markdown"]


def test_a_grid_studys_settings_come_from_study_json(tmp_path):
    """A study written as a grid has no ``settings`` mapping: the report takes the names study.json lists."""
    results = tmp_path / "grid"
    (results / "trials").mkdir(parents=True)
    names = ["init=xavier,trainable=true", "init=glove,trainable=true"]
    header = {
        "name": "g",
        "hash": "h",
        "variant": None,
        "settings": names,
        "study": {"name": "g", "grid": {"init": {"xavier": {}, "glove": {}}}},
    }
    (results / "study.json").write_text(json.dumps(header))
    for setting, values in zip(names, ([1.0, 2.0], [3.0, 5.0])):
        for seed, value in enumerate(values):
            record = {
                "study": "g",
                "setting": setting,
                "seed": seed,
                "trial_id": f"{setting}-seed{seed}",
                "status": "done",
                "error": None,
                "metrics": {"best_val_loss": value},
                "monitors": {},
                "curves": {},
            }
            (results / "trials" / f"{setting}-seed{seed}.json").write_text(json.dumps(record))
    report = write_report(results)
    assert report["reference"] == names[0] and list(report["summary"].index) == names


@pytest.mark.parametrize("count", [3, 12, 25])
def test_every_setting_gets_its_own_line_and_many_settings_move_the_legend_aside(count):
    steps = np.arange(1, 6, dtype=float)
    series = {f"s{k}": (steps, steps * k, np.full(5, 0.1), 3) for k in range(count)}
    figure = curves_figure(series, "val_loss")
    axes = figure.axes[0]
    styles = [(line.get_color(), line.get_linestyle()) for line in axes.lines]
    assert len(styles) == count and len(set(styles)) == count  # matplotlib's cycle alone repeats after 10
    assert [text.get_text() for text in axes.get_legend().get_texts()] == [f"s{k} (n=3)" for k in range(count)]
    figure.canvas.draw()
    legend_left = axes.get_legend().get_window_extent().x0
    assert (legend_left >= axes.get_window_extent().x1) == (count > 6)
