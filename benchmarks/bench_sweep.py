"""Sweep throughput: trials per hour of a smoke study on the local engine with ``--workers 1`` and ``--workers 2``,
and the Ray engine's time per trial beside the local engine's, in one run and one table.

Each sweep runs the same trials (the study's ``--variant``, optionally cut to its first ``--settings`` settings and
to ``--seeds``) into a fresh results directory; its time runs from the call to the returned records, plus the
engine's start-up, timed on its own first (the local engine's trial server, which both local sweeps share; Ray's
local instance). The local sweep
with one worker gives each trial all the cores, with two workers half each; Ray runs one trial at a time with all
the cores, as the local engine's single worker. Targets (issue 31): two workers ≥ 1.8× the throughput of one;
Ray ≤ 5 s more per trial than the local engine. Ratios depend on the machine and its load: the header names both.

Throughput is trials per hour once the engine has started: a sweep pays the start-up once, whatever its length, so
the workers' ratio compares the two sweeps without it, and the sweeps' wall times (start-up included) are printed
beside it. A third local sweep, one worker on one thread, gives the ceiling two workers can reach here: two
one-thread trials side by side at best each run as fast as one alone, so 2 × (one worker's time on all the cores)
/ (its time on one thread), both without the start-up.

    python benchmarks/bench_sweep.py                                           # hf_starts, smoke: 3 × 2 trials
    python benchmarks/bench_sweep.py --settings 1                              # 2 trials per sweep
    python benchmarks/bench_sweep.py --study examples/studies/kim_positional.yaml --seeds 0
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lightning_embinit.studies.local import start_method, start_trial_server
from lightning_embinit.studies.records import available_cores

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STUDY = ROOT / "examples" / "studies" / "hf_starts.yaml"
WORKERS_TARGET = 1.8
RAY_OVERHEAD_TARGET_S = 5.0


@dataclass(frozen=True)
class SweepTiming:
    """One sweep: its engine and workers, its trials (``done`` of them finished), wall seconds (the engine's
    ``startup`` included)."""

    engine: str
    workers: int
    trials: int
    done: int
    seconds: float
    startup: float | None = None
    threads: int | None = None

    @property
    def seconds_after_startup(self) -> float:
        return self.seconds - (self.startup or 0.0)

    @property
    def seconds_per_trial(self) -> float:
        """Once the engine has started."""
        return self.seconds_after_startup / self.trials

    @property
    def trials_per_hour(self) -> float:
        """Once the engine has started."""
        return 3600 * self.trials / self.seconds_after_startup


def sweep_table(timings: Sequence[SweepTiming], header: str, ray_missing: str | None = None) -> str:
    """The Markdown table of the sweeps and the measured ratios beside the targets."""
    lines = [
        header,
        "",
        "| engine | workers | threads per trial | trials (done) | wall s | s / trial after start-up | trials / hour |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for t in timings:
        startup = f" (start-up {t.startup:.1f})" if t.startup is not None else ""
        threads = t.threads if t.threads is not None else "all / workers"
        lines.append(
            f"| {t.engine} | {t.workers} | {threads} | {t.trials} ({t.done}) | {t.seconds:.1f}{startup} | "
            f"{t.seconds_per_trial:.1f} | {t.trials_per_hour:.0f} |"
        )
    if ray_missing:
        lines.append(f"| Ray | 1 | — | — | — | — | — ({ray_missing}) |")
    by_key = {(t.engine, t.workers, t.threads): t for t in timings}
    one, two, ray = by_key.get(("local", 1, None)), by_key.get(("local", 2, None)), by_key.get(("Ray", 1, None))
    one_thread = by_key.get(("local", 1, 1))
    lines.append("")
    if one and two:
        speedup = two.trials_per_hour / one.trials_per_hour
        met = "met" if speedup >= WORKERS_TARGET else "not met"
        started = bool(one.startup or two.startup)
        after = ", trials per hour after the start-up both sweeps share" if started else ""
        lines.append(
            f"`--workers 2` / `--workers 1` throughput{after}: {speedup:.2f}× (target ≥ {WORKERS_TARGET}×: {met})"
        )
        if started:
            lines.append(
                f"the sweeps' wall times, start-up included: {one.seconds / two.seconds:.2f}× "
                "(a sweep pays the start-up once, whatever its length)"
            )
        if one_thread:
            ceiling = 2 * one.seconds_after_startup / one_thread.seconds_after_startup
            lines.append(
                f"ceiling here, 2 × one worker's time on all the cores / its time on one thread: {ceiling:.2f}× "
                "(two one-thread trials side by side, each as fast as one alone)"
            )
    if one and ray:
        extra = ray.seconds_per_trial - one.seconds_per_trial
        met = "met" if extra <= RAY_OVERHEAD_TARGET_S else "not met"
        lines.append(f"Ray − local per trial: {extra:+.1f} s (target ≤ {RAY_OVERHEAD_TARGET_S:.0f} s: {met})")
    if not all(t.done == t.trials for t in timings):
        lines.append("Some trials failed: their times are not a trial's (see the results' logs).")
    return "\n".join(lines)


def study_mapping(path: Path, variant: str, settings: int | None, seeds: list[int] | None) -> dict[str, Any]:
    """The study file's mapping, cut to its first ``settings`` settings and to ``seeds`` in ``variant``."""
    data = {"name": path.stem, **yaml.safe_load(path.read_text(encoding="utf-8"))}
    if variant not in data.get("variants", {}):
        raise SystemExit(f"{path}: no variant {variant!r}; variants: {', '.join(data.get('variants', {}))}")
    if settings is not None:
        if settings < 1:
            raise SystemExit(f"--settings must be ≥ 1, got {settings}")
        data["settings"] = dict(list(data["settings"].items())[:settings])
        if data.get("reference") not in data["settings"]:
            data["reference"] = next(iter(data["settings"]))
    if seeds is not None:
        data["variants"][variant]["seeds"] = seeds
    return data


def timed(
    engine: str,
    workers: int,
    run: Callable[[Path], list[dict[str, Any]]],
    startup: float | None = None,
    threads: int | None = None,
) -> SweepTiming:
    """Run one sweep into a fresh directory; its :class:`SweepTiming`."""
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        records = run(Path(directory) / "results")
        seconds = time.perf_counter() - started
    done = sum(record["status"] == "done" for record in records)
    on = f" on {threads} thread(s)" if threads else ""
    print(f"{engine} × {workers}{on}: {len(records)} trials ({done} done) in {seconds:.1f} s", flush=True)
    return SweepTiming(engine, workers, len(records), done, seconds + (startup or 0.0), startup, threads)


def local_startup() -> float:
    """Seconds until the local engine's trial server can fork a trial (it imports the package first)."""
    started = time.perf_counter()
    start_trial_server()
    process = multiprocessing.get_context(start_method()).Process(target=os.getpid)
    process.start()
    process.join()
    return time.perf_counter() - started


def ray_sweep(study: Any, variant: str, cores: int) -> SweepTiming:
    """The Ray engine, one trial at a time with all the cores, on a local instance started (and timed) here."""
    import ray

    from lightning_embinit.studies.ray_engine import run_study_on_ray

    started = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, configure_logging=False, log_to_driver=False)
    startup = time.perf_counter() - started
    try:
        return timed(
            "Ray",
            1,
            lambda results: run_study_on_ray(study, results, variant=variant, workers=1, threads=cores, progress=False),
            startup,
        )
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=DEFAULT_STUDY, help="a study file (default hf_starts.yaml)")
    parser.add_argument("--variant", default="smoke")
    parser.add_argument("--settings", type=int, default=None, help="only the study's first N settings")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="these seeds instead of the variant's")
    args = parser.parse_args()
    from timing import cpu_name

    from lightning_embinit.studies import Study, run_study

    data = study_mapping(args.study, args.variant, args.settings, args.seeds)
    study = Study.from_dict(data, root=args.study.parent, path=str(args.study))
    cores, load = available_cores(), os.getloadavg()[0]
    startup = local_startup()
    timings = [
        timed(
            "local",
            workers,
            lambda results, w=workers: run_study(study, results, variant=args.variant, workers=w, progress=False),
            startup,
        )
        for workers in (1, 2)
    ]
    if cores > 1:
        timings.append(
            timed(
                "local",
                1,
                lambda results: run_study(study, results, variant=args.variant, workers=1, threads=1, progress=False),
                startup,
                threads=1,
            )
        )
    ray_missing = None if importlib.util.find_spec("ray") else "Ray missing: pip install 'lightning_embinit[ray]'"
    if ray_missing is None:
        timings.append(ray_sweep(study, args.variant, cores))
    header = (
        f"sweep throughput, study {data['name']} variant {args.variant}: {len(data['settings'])} setting(s) × "
        f"seeds {data['variants'][args.variant].get('seeds', data.get('seeds'))}; {cpu_name()}, {cores} cores, "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    print("\n" + sweep_table(timings, header, ray_missing))


if __name__ == "__main__":
    main()
