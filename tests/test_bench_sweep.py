"""benchmarks/bench_sweep.py without a sweep: its table and ratios from made-up timings, and the cut study."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from lightning_embinit.studies.spec import Study

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("benchmarks_bench_sweep", ROOT / "benchmarks" / "bench_sweep.py")
bench_sweep = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_sweep)
SweepTiming = bench_sweep.SweepTiming


def test_the_table_gives_each_sweeps_throughput_and_the_ratios_beside_the_targets():
    timings = [
        SweepTiming("local", 1, 6, 6, 60.0),
        SweepTiming("local", 2, 6, 6, 40.0),
        SweepTiming("Ray", 1, 6, 6, 75.0, startup=3.0),
    ]
    lines = bench_sweep.sweep_table(timings, "a header").splitlines()
    assert lines[0] == "a header"
    assert "| local | 1 | all / workers | 6 (6) | 60.0 | 10.0 | 360 |" in lines  # 6 trials in 60 s: 10 s each
    assert "| local | 2 | all / workers | 6 (6) | 40.0 | 6.7 | 540 |" in lines
    assert "| Ray | 1 | all / workers | 6 (6) | 75.0 (start-up 3.0) | 12.0 | 300 |" in lines  # 72 s after start-up
    assert "`--workers 2` / `--workers 1` throughput: 1.50× (target ≥ 1.8×: not met)" in lines  # 540 / 360
    assert "Ray − local per trial: +2.0 s (target ≤ 5 s: met)" in lines  # 12.0 − 10.0
    assert not any("failed" in line or "start-up" in line or "ceiling" in line for line in lines[-3:])


def test_the_ratio_without_the_shared_startup_and_the_one_thread_ceiling():
    timings = [
        SweepTiming("local", 1, 6, 6, 44.0, startup=4.0),  # 40 s of trials on 2 threads
        SweepTiming("local", 2, 6, 6, 26.0, startup=4.0),  # 22 s
        SweepTiming("local", 1, 6, 6, 49.0, startup=4.0, threads=1),  # 45 s on 1 thread
    ]
    lines = bench_sweep.sweep_table(timings, "h").splitlines()
    assert "| local | 1 | 1 | 6 (6) | 49.0 (start-up 4.0) | 7.5 | 480 |" in lines  # 45 s after start-up
    throughput = "`--workers 2` / `--workers 1` throughput, trials per hour after the start-up both sweeps share"
    assert f"{throughput}: 1.82× (target ≥ 1.8×: met)" in lines  # 40 / 22
    assert any(line.startswith("the sweeps' wall times, start-up included: 1.69× (") for line in lines)  # 44 / 26
    ceiling = [line for line in lines if line.startswith("ceiling here")]
    assert len(ceiling) == 1 and ": 1.78× (two one-thread" in ceiling[0]  # 2 × 40 / 45


def test_a_missing_ray_and_failed_trials_are_said():
    timings = [SweepTiming("local", 1, 4, 3, 20.0), SweepTiming("local", 2, 4, 4, 10.0)]
    lines = bench_sweep.sweep_table(timings, "h", ray_missing="Ray missing").splitlines()
    assert "| Ray | 1 | — | — | — | — | — (Ray missing) |" in lines
    assert not any(line.startswith("Ray −") for line in lines)
    assert "`--workers 2` / `--workers 1` throughput: 2.00× (target ≥ 1.8×: met)" in lines
    assert lines[-1].startswith("Some trials failed")


def test_the_study_is_cut_to_its_first_settings_and_the_given_seeds():
    data = bench_sweep.study_mapping(bench_sweep.DEFAULT_STUDY, "smoke", 1, [0])
    study = Study.from_dict(data, root=bench_sweep.DEFAULT_STUDY.parent)
    assert list(study.settings) == ["own_init"] and data["variants"]["smoke"]["seeds"] == [0]
    with pytest.raises(SystemExit, match="no variant 'huge'; variants: smoke"):
        bench_sweep.study_mapping(bench_sweep.DEFAULT_STUDY, "huge", None, None)
