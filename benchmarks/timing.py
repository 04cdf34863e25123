"""Shared by the training benchmarks: runs that alternate between models, and the throughput table.

A runner is anything with ``run(steps) -> tokens/s`` and a ``model`` (for the parameter count).
"""

from __future__ import annotations

import platform
import statistics
from pathlib import Path
from typing import Protocol

from torch import nn


class TimedRunner(Protocol):
    model: nn.Module

    def run(self, steps: int) -> float: ...


def alternate(runners: dict[str, TimedRunner], repeats: int, steps: int, warmup: int) -> dict[str, list[float]]:
    """Tokens/s of ``repeats`` runs per model, the order flipped every repeat, after ``warmup`` steps each."""
    for runner in runners.values():
        runner.run(warmup)
    results: dict[str, list[float]] = {name: [] for name in runners}
    for repeat in range(repeats):
        for name in list(runners) if repeat % 2 == 0 else list(reversed(runners)):
            results[name].append(runners[name].run(steps))
    return results


def print_throughput(
    results: dict[str, list[float]], runners: dict[str, TimedRunner], reference: str
) -> dict[str, float]:
    """Prints median, best and worst tokens/s and the parameters of each model, then each model's
    median and best ratio to ``reference``; returns the medians."""
    medians = {name: statistics.median(values) for name, values in results.items()}
    width = max(26, *map(len, results))
    print(f"{'model':<{width}} {'median tok/s':>12} {'best tok/s':>10} {'worst':>8} {'params':>10}")
    for name, values in results.items():
        params = sum(p.numel() for p in runners[name].model.parameters())
        print(f"{name:<{width}} {medians[name]:>12.0f} {max(values):>10.0f} {min(values):>8.0f} {params:>10}")
    for name in results:
        if name != reference:
            best = max(results[name]) / max(results[reference])
            print(f"ratio {name} / {reference}: median {medians[name] / medians[reference]:.3f}, best {best:.3f}")
    return medians


def cpu_name() -> str:
    """The CPU model, for the header of every table (ratios depend on it)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"
