"""Time and peak memory to initialize, standardize and report a 250k×1024 table through the callback.

Each route runs in its own subprocess so peak RSS is its own; the table is allocated before the
baseline is taken, so "extra peak" is what initialization costs on top of the model.

    python benchmarks/bench_init_callback.py [--rows 250000] [--dim 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from memory import peak_rss_mib, rss_mib


def run_route(route: str, rows: int, dim: int) -> dict[str, float]:
    import math

    import torch
    from lightning.pytorch import LightningModule, Trainer
    from torch import nn

    from lightning_embinit import EmbeddingInitCallback

    class Host(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(rows, dim, _weight=torch.zeros(rows, dim))

    host = Host()
    embedding = host.embedding
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    callback = EmbeddingInitCallback(source="normal:0.3", standardize="xavier", seed=0, verbose=False)
    baseline = rss_mib()
    start = time.perf_counter()
    if route == "EmbeddingInitCallback":
        callback.setup(trainer, host, "fit")
        std = callback.reports["embedding"]["std"]
    else:
        weight = embedding.weight.data
        nn.init.normal_(weight, 0.0, 0.3)
        as64 = weight.double()
        mean, sigma = as64.mean(), as64.std(unbiased=False)
        target = math.sqrt(2.0 / (rows + dim))
        weight.copy_((as64 - mean) * (target / sigma))
        del as64
        std = weight.double().std(unbiased=False).item()
        weight.min(), weight.max()
    elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "extra_peak_mib": peak_rss_mib() - baseline, "std": std}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--route", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.route:
        print(json.dumps(run_route(args.route, args.rows, args.dim)))
        return
    table_mib = args.rows * args.dim * 4 / 2**20
    routes = ["EmbeddingInitCallback", "reference: nn.init + float64 standardize"]
    results: dict[str, list[dict[str, float]]] = {route: [] for route in routes}
    for _ in range(args.repeats):
        for route in routes:
            output = subprocess.run(
                [sys.executable, __file__, "--route", route, "--rows", str(args.rows), "--dim", str(args.dim)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[route].append(json.loads(output.strip().splitlines()[-1]))
    print(
        f"table {args.rows}×{args.dim} float32 = {table_mib:.0f} MiB; "
        f"{args.repeats} alternating runs, best time, worst peak"
    )
    print(f"{'route':<45} {'seconds':>8} {'extra peak MiB':>15} {'× table':>8} {'std':>10}")
    for route, runs in results.items():
        best = min(run["seconds"] for run in runs)
        peak = max(run["extra_peak_mib"] for run in runs)
        print(f"{route:<45} {best:>8.3f} {peak:>15.0f} {peak / table_mib:>8.2f} {runs[0]['std']:>10.6f}")


if __name__ == "__main__":
    main()
