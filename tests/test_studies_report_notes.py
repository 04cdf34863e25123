"""What the report says beside its numbers: the sweep's elapsed time, why a difference has no interval, the
learning-speed figure's labels and threshold, and why a report has no learning-speed figure (hand-made records)."""

from __future__ import annotations

import inspect
import json

import pandas as pd

from lightning_embinit.callbacks import LearningSpeedMonitor
from lightning_embinit.studies.figures import MONITOR_DEFAULTS, curves_figure, learning_speed_figure
from lightning_embinit.studies.report import write_report
from lightning_embinit.studies.statistics import aggregate

SPEED = "learning_speed/val_loss/examples_to_threshold"
MONITOR = {
    "class_path": "lightning_embinit.LearningSpeedMonitor",
    "init_args": {"monitor": "val_loss", "mode": "min", "threshold": 4.2},
}


def _record(setting: str, seed: int, loss: float, speed: float | None, *, watched: bool = True) -> dict:
    return {
        "setting": setting,
        "seed": seed,
        "trial_id": f"{setting}-seed{seed}",
        "status": "done",
        "metrics": {"best_val_loss": loss},
        "monitors": {SPEED: speed} if watched else {},
        "config": {"trainer": {"callbacks": [{"class_path": "lightning_embinit.EmbeddingInitCallback"}, MONITOR]}},
        "curves": {"val_loss": [[2, 0, loss + 1.0], [4, 0, loss]]},
    }


def _write(directory, records, **header) -> None:
    (directory / "trials").mkdir(parents=True)
    settings = list(dict.fromkeys(record["setting"] for record in records))
    study = {"name": "notes", "settings": settings, "study": {"name": "notes", "reference": settings[0]}, **header}
    (directory / "study.json").write_text(json.dumps(study))
    for record in records:
        (directory / "trials" / f"{record['trial_id']}.json").write_text(json.dumps(record))


SPEEDS = {  # setting → per seed: best_val_loss, examples to the threshold (None: never reached)
    "xavier": [(3.0, 1000.0), (3.2, 1400.0)],
    "fast": [(2.0, 400.0), (2.4, None)],
    "stuck": [(5.0, None), (5.0, None)],
}


def _speed_records() -> list[dict]:
    return [_record(s, seed, *row) for s, rows in SPEEDS.items() for seed, row in enumerate(rows)]


def test_the_footnotes_name_each_setting_its_seeds_and_the_metrics_without_an_interval(tmp_path):
    records = _speed_records() + [_record("flat", seed, 3.0, 1000.0) for seed in (0, 1)]
    records[1]["metrics"]["best_val_loss"] = 3.0  # xavier's losses: 3.0 and 3.0, no spread
    _write(tmp_path, records)
    markdown = write_report(tmp_path)["markdown"]
    # fast's loss has a spread (2.0, 2.4), so an interval; its speed has 1 seed that reached 4.2: 400 − 1200
    assert "| fast | -800 [–]† |" in markdown and "| stuck | +2 [–]† |" in markdown and "| stuck | – |" in markdown
    footnotes = [line for line in markdown.splitlines() if line.startswith(("†", "–"))]
    assert footnotes == [
        "† no interval: an interval needs 2 finished seeds with a value on each side, and some spread. "
        f"fast: 1 finished seed with a value, xavier 2 ({SPEED}); "
        "stuck, flat: every seed gave the same value, and so did xavier's (best_val_loss).",
        f"– no difference: no finished seed of the setting or of xavier has a value: {SPEED} for stuck. "
        "A learning-speed metric has none where the trial never reached its threshold.",
    ]


def test_the_report_prints_each_sweeps_elapsed_time_beside_the_trials_summed_time(tmp_path):
    machine = {"cpu": "Test CPU 9000", "cores": 8, "usable_cores": 4}
    first = {"started": "2030-01-01T10:00:00+00:00", "machine": machine}  # killed: no finished, no elapsed_s
    second = {
        **first,
        "started": "2030-01-01T11:00:00+00:00",
        "finished": "2030-01-01T11:05:02+00:00",
        "elapsed_s": 302.0,
        "engine": "local",
        "workers": 2,
        "threads": 1,
        "ran": 6,
    }
    one, two = tmp_path / "one", tmp_path / "two"
    _write(one, _speed_records(), sweeps=[second])
    _write(two, _speed_records(), sweeps=[first, {**second, "elapsed_s": 62.5}])
    assert (
        "- elapsed (the sweep's clock): 5 min 02 s, started 2030-01-01T11:00:00+00:00, 6 trials run by the local "
        "engine (2 at a time, threads per trial: 1); on Test CPU 9000 (4 cores)\n"
    ) in write_report(one)["markdown"]
    assert (
        "- elapsed (the sweep's clock): 1 min 02 s over 2 sweeps: started 2030-01-01T10:00:00+00:00, did not finish "
        "(interrupted or killed): not counted; 1 min 02 s, started 2030-01-01T11:00:00+00:00"
    ) in write_report(two)["markdown"]


def test_the_learning_speed_figure_states_its_threshold_labels_its_axes_and_explains_missing_bars():
    records = _speed_records() + [_record("unwatched", 0, 3.0, None, watched=False)]
    summary = aggregate(records, settings=[*SPEEDS, "unwatched"])
    figure = learning_speed_figure(records, summary, [SPEED])
    [axes] = figure.axes
    assert axes.get_xlabel() == "setting" and axes.get_ylabel() == "training examples"
    assert "training examples until smoothed val_loss ≤ 4.2" in axes.get_title()
    assert [label.get_text() for label in axes.get_xticklabels()] == ["xavier", "fast", "stuck"]  # unwatched: none
    assert [bar.get_height() for bar in axes.patches] == [1200.0, 400.0, 0.0]
    notes = [text.get_text() for text in axes.texts]
    assert notes == ["n=2", "n=1 of 2", "never reached\n(0 of 2)"]


def test_a_report_without_a_learning_speed_figure_says_why(tmp_path):
    never = [_record(s, seed, 3.0 + seed, None) for s in ("xavier", "other") for seed in (0, 1)]
    unwatched = [_record(s, seed, 3.0 + seed, None, watched=False) for s in ("xavier", "other") for seed in (0, 1)]
    cases = {
        "never": (never, None, "no trial reached its learning-speed threshold ({SPEED}: smoothed val_loss ≤ 4.2)"),
        "unwatched": (unwatched, None, "no trial ran a LearningSpeedMonitor"),
        "left_out": (
            _speed_records(),
            ["best_val_loss"],
            "the report's --metrics leave the learning-speed metrics out",
        ),
    }
    for name, (records, metrics, why) in cases.items():
        _write(tmp_path / name, records)
        report = write_report(tmp_path / name, metrics=metrics)
        assert "learning_speed.png" not in {path.name for path in report["paths"]}
        assert f"No learning_speed.png: {why.format(SPEED=SPEED)}." in report["markdown"], name
    speed = write_report(tmp_path / "left_out")
    assert (
        "learning_speed.png" in {path.name for path in speed["paths"]} and "No learning_speed" not in speed["markdown"]
    )


def test_the_monitor_defaults_the_report_assumes_are_the_callbacks():
    defaults = inspect.signature(LearningSpeedMonitor).parameters
    assert MONITOR_DEFAULTS == {name: defaults[name].default for name in MONITOR_DEFAULTS}


def test_the_curves_count_optimizer_steps_on_their_x_axis():
    steps = pd.Series([2.0, 4.0]).to_numpy()
    figure = curves_figure({"xavier": (steps, steps, steps, 1)}, "val_loss")
    assert figure.axes[0].get_xlabel() == "optimizer step (as best_step)"
