"""bf16-mixed against fp32 on the quick start's first part: the same settings, seeds and data
(``python -m lightning_embinit.commands.quickstart --skip-headline``: TiedEmbeddingLM d = 256, 2 layers, 50 steps on
the Lee corpus), each seed trained in both precisions back to back; per setting the initial loss, the last ten steps'
training loss and the validation loss in each precision, their paired difference over the seeds beside the
seed-to-seed spread of fp32 (the noise a difference is measured against), the largest gap between the two mean
training curves, and the seconds per run.

    python benchmarks/precision_curves.py --seeds 0 1 2
    python benchmarks/precision_curves.py --seeds 0 1 2 3 4 --settings tied-normal,untied-normal --steps 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from precision_rows import machine_line

from lightning_embinit.commands.quickstart import SETTINGS, fit_setting, part_one
from lightning_embinit.models import CausalLMConfig
from lightning_embinit.quiet import quiet_lightning


class Curve(Callback):
    """The training loss of every step."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))


def run_once(setting: str, precision: str, seed: int, data: Any, architecture: CausalLMConfig, args) -> dict:
    """One setting in one precision from ``seed``, as the quick start trains it."""
    started, curve = time.perf_counter(), Curve()
    trainer, monitor = fit_setting(
        setting, data, architecture, steps=args.steps, lr=args.lr, seed=seed, precision=precision, callbacks=[curve]
    )
    return {
        "init": monitor.init_loss,
        "last": statistics.fmean(curve.losses[-10:]),
        "val": float(trainer.callback_metrics["val_loss"]),
        "curve": curve.losses,
        "seconds": time.perf_counter() - started,
    }


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):+.4f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.4f}"


def summarize(setting: str, runs: dict[str, list[dict]], precisions: list[str]) -> None:
    """One block per setting: each precision's means, the paired differences and fp32's seed-to-seed spread."""
    first, second = precisions
    print(f"\n{setting}")
    for key, label in (("init", "initial loss"), ("last", "train loss, last 10 steps"), ("val", "val loss")):
        means = "  ".join(f"{p} {statistics.fmean(r[key] for r in runs[p]):.4f}" for p in precisions)
        paired = [b[key] - a[key] for a, b in zip(runs[first], runs[second])]
        noise = statistics.stdev(r[key] for r in runs[first]) if len(runs[first]) > 1 else 0.0
        print(f"  {label:<27} {means}   {second} − {first}: {spread(paired)}   {first} across seeds: σ {noise:.4f}")
    curves = {p: [statistics.fmean(step) for step in zip(*(r["curve"] for r in runs[p]))] for p in precisions}
    gap = max(abs(a - b) for a, b in zip(curves[first], curves[second]))
    seconds = "  ".join(f"{p} {statistics.median(r['seconds'] for r in runs[p]):.1f} s" for p in precisions)
    print(f"  largest gap between the mean training curves: {gap:.4f};  median seconds per run: {seconds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--precisions", nargs=2, default=["32-true", "bf16-mixed"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    settings = [name.strip() for name in args.settings.split(",") if name.strip()]
    data, architecture = part_one()  # the quick start's part 1
    runs = {name: {p: [] for p in args.precisions} for name in settings}
    print(f"the quick start's part 1 in {' and '.join(args.precisions)}, seeds {args.seeds}, {args.steps} steps")
    print(machine_line(torch.device("cpu"), "wall"), flush=True)
    with quiet_lightning():
        for index, seed in enumerate(args.seeds):
            order = args.precisions if index % 2 == 0 else list(reversed(args.precisions))
            for name in settings:
                for precision in order:
                    runs[name][precision].append(run_once(name, precision, seed, data, architecture, args))
            print(f"  seed {seed} done, load average {os.getloadavg()[0]:.1f}", flush=True)
    for name in settings:
        summarize(name, runs[name], args.precisions)


if __name__ == "__main__":
    main()
