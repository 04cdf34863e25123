"""Tokenizer transplant: ``embinit transplant``'s methods beside ``mergekit-tokensurgeon``'s on the same models.

A LLaMA-shaped LM (d = 256) trained on English with byte-level BPE tokenizer A gets tokenizer B, trained on German
captions (``transplant_models.py`` builds and caches the models, the donor that speaks B included). Each method runs
as the command a user runs — ``embinit transplant`` in this environment, ``mergekit-tokensurgeon`` in a virtualenv
of its own (``benchmarks/.venv-mergekit``, made on first use: ``pip install torch==2.13.0 mergekit==0.1.5``; mergekit
is not a dependency of the package) — timed from start to exit, its peak resident memory read in the process itself.
The measure: bits per byte of Multi30k's German validation captions under B, before fine-tuning and after 100 and 300
steps on German captions; fine-tuning runs for each side's best method by default (``--finetune all``: every one).
Then the time and peak memory of ``transplant_tokenizer`` itself on a synthetic 151,936 × 3,584 table (Qwen2-7B's
shape, 2.2 GB in float32; 90 % of the tokens kept in another order, 10 % new ones of two old pieces each), with
``pieces`` and with ``neighbors`` (a random 64-wide donor table), each in a process of its own.

    python benchmarks/bench_transplant.py [--finetune best|all|none] [--steps 100 300] [--no-synthetic]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transplant_models as models
from timing import cpu_name

HERE = Path(__file__).resolve().parent
MERGEKIT_VENV = HERE / ".venv-mergekit"
OURS = {
    "pieces (FVT)": ["--method", "pieces"],
    "focus": ["--method", "focus"],
    "neighbors": ["--method", "neighbors"],
    "omp": ["--method", "omp"],
    "mean": ["--method", "mean"],
}
THEIRS = {"omp": "omp", "common_interpolation": "common_interpolation", "subword": "subword"}
MEASURED = """
import json, resource, runpy, sys, time
module, out, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [module, *argv]
start, code = time.perf_counter(), 0
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as exit_:
    code = exit_.code or 0
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
open(out, "w").write(json.dumps({"seconds": seconds, "peak_mib": peak, "code": code}))
"""


def mergekit_python() -> Path:
    """The virtualenv's python, the virtualenv made first when it is missing."""
    python = MERGEKIT_VENV / "bin" / "python"
    if not (MERGEKIT_VENV / "bin" / "mergekit-tokensurgeon").exists():
        print(f"making {MERGEKIT_VENV}: torch 2.13.0, then mergekit 0.1.5 (the release for transformers 5)")
        subprocess.run([sys.executable, "-m", "venv", str(MERGEKIT_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "mergekit==0.1.5"], check=True)
    return python


def measured(python: str, module: str, argv: list[str]) -> dict:
    """Run ``python -m module argv`` through :data:`MEASURED`: its seconds (from start to exit) and peak MiB."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = handle.name
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    done = subprocess.run([python, "-c", MEASURED, module, out, *argv], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode or not Path(out).stat().st_size:
        raise SystemExit(f"{module} {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    result = json.loads(Path(out).read_text())
    if result["code"]:
        raise SystemExit(f"{module} {' '.join(argv)} exited {result['code']}:\n{done.stderr[-4000:]}")
    return {**result, "wall": wall}


def run_methods(paths: dict[str, Path], work: Path) -> dict[str, dict]:
    """Every method's output directory, seconds and peak memory."""
    texts = work / "german_texts.txt"
    texts.write_text("\n".join(models.german_halves()[1]) + "\n", encoding="utf-8")
    runs = {}
    for name, extra in OURS.items():
        output = work / f"ours-{extra[1]}"
        extra = [*extra, "--donor", str(paths["donor"])] if extra[1] in ("omp", "neighbors") else extra
        extra = [*extra, "--texts", str(texts)] if "focus" in extra else extra
        argv = [
            "transplant",
            "--model",
            str(paths["base"]),
            "--tokenizer",
            str(paths["tokenizer_b"]),
            "--output",
            str(output),
            *extra,
        ]
        runs[f"ours: {name}"] = {"dir": output, **measured(sys.executable, "lightning_embinit", argv)}
        print(f"  ours {name}: {runs[f'ours: {name}']['seconds']:.1f} s", flush=True)
    python = str(mergekit_python())
    for name, method in THEIRS.items():
        output = work / f"tokensurgeon-{method}"
        argv = [str(paths["base"]), str(paths["donor"]), str(output), "-a", method, "--device", "cpu"]
        runs[f"tokensurgeon: {name}"] = {"dir": output, **measured(python, "mergekit.scripts.tokensurgeon", argv)}
        print(f"  tokensurgeon {name}: {runs[f'tokensurgeon: {name}']['seconds']:.1f} s", flush=True)
    return runs


def evaluate(runs: dict[str, dict], finetune: str, steps: list[int]) -> None:
    """Bits per byte at 0 steps for every method, then after ``steps`` for the ones ``finetune`` picks."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.set_num_threads(1)
    held_out, (_, fine_tuning) = models.held_out(), models.german_halves()
    for run in runs.values():
        run["tokenizer"] = AutoTokenizer.from_pretrained(run["dir"])
        run["bpb"] = {0: models.bits_per_byte(LlamaForCausalLM.from_pretrained(run["dir"]), run["tokenizer"], held_out)}
    chosen = list(runs)
    if finetune == "best":
        best = lambda side: min((n for n in runs if n.startswith(side)), key=lambda n: runs[n]["bpb"][0])  # noqa: E731
        chosen = [best("ours"), best("tokensurgeon")]
    for name in chosen if finetune != "none" and steps else []:
        run, model = runs[name], LlamaForCausalLM.from_pretrained(runs[name]["dir"])
        stream = models.token_stream(run["tokenizer"], fine_tuning)

        def after(step: int, run=run, model=model) -> None:
            if step in steps:
                run["bpb"][step] = models.bits_per_byte(model, run["tokenizer"], held_out)

        start = time.perf_counter()
        models.train(model, stream, max(steps), lr=1e-3, seed=0, after=after)
        print(f"  fine-tuned {name}: {time.perf_counter() - start:.0f} s", flush=True)


SYNTHETIC = """
import json, resource, sys, time, torch
from torch import nn
from lightning_embinit.init.transplant import transplant_tokenizer
from lightning_embinit.init.transplant.tokenizers import TokenizerView
rows, width = 151_936, 3_584
torch.set_num_threads(1)
module = nn.Module()
module.embed = nn.Embedding(rows, width)
old = [f"Ġt{i}" for i in range(rows)]
order = torch.randperm(rows, generator=torch.Generator().manual_seed(0)).tolist()
kept = [old[i] for i in order[: rows * 9 // 10]]
added = [f"Ġt{a}+{b}" for a, b in zip(order[: rows - len(kept)], order[::-1])]
encode = lambda texts: [[int(p.strip().lstrip("t")) for p in text.split("+")] for text in texts]
view = TokenizerView(old, {}, encode)
donor = torch.randn(rows, 64, generator=torch.Generator().manual_seed(1))  # a donor space by new id
resource_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open("/proc/self/status") as status:
    resident = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
start = time.perf_counter()
report = transplant_tokenizer(module, kept + added, old_tokenizer=view, method=sys.argv[1], donor=donor)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "resident_mib": resident / 1024, "peak_mib": peak / 1024,
                  "before_peak_mib": resource_before / 1024, "built": report["built"], "matched": report["matched"]}))
"""


def synthetic(method: str) -> dict:
    """``transplant_tokenizer`` on the synthetic Qwen2-7B-shaped table, in a process of its own."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SYNTHETIC, method], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"the synthetic table failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return done.stdout.strip() or "unknown"


def print_tables(runs: dict[str, dict], steps: list[int], big: dict[str, dict]) -> None:
    load = os.getloadavg()[0]
    print(
        f"\nbench_transplant.py, {datetime.date.today()}, lightning_embinit at {commit()}; {cpu_name()}, "
        f"{os.cpu_count()} cores shared with other jobs (load average {load:.1f}), one torch thread per process"
    )
    columns = ["0 steps", *(f"{s} steps" for s in steps)]
    print(f"\n| method | {' | '.join(f'bits/byte {c}' for c in columns)} | seconds | peak MiB |")
    print("| --- | " + " | ".join("---:" for _ in columns) + " | ---: | ---: |")
    for name, run in runs.items():
        cells = [f"{run['bpb'][s]:.3f}" if s in run["bpb"] else "-" for s in [0, *steps]]
        print(f"| {name} | {' | '.join(cells)} | {run['seconds']:.1f} | {run['peak_mib']:.0f} |")
    ours = min((n for n in runs if n.startswith("ours")), key=lambda n: runs[n]["bpb"][0])
    theirs = min((n for n in runs if n.startswith("tokensurgeon")), key=lambda n: runs[n]["bpb"][0])
    a, b = runs[ours], runs[theirs]
    print(
        f"\nbest zero-shot: {ours} {a['bpb'][0]:.3f} against {theirs} {b['bpb'][0]:.3f} bits/byte "
        f"(target: no worse: {'met' if a['bpb'][0] <= b['bpb'][0] else 'missed'}); time {a['seconds']:.1f} s "
        f"against {b['seconds']:.1f} s (×{a['seconds'] / b['seconds']:.2f}; target ≤ 2: "
        f"{'met' if a['seconds'] <= 2 * b['seconds'] else 'missed'})"
    )
    table_mib = 151_936 * 3_584 * 4 / 2**20
    for method, result in big.items():
        extra = result["peak_mib"] - result["resident_mib"]
        print(
            f"synthetic 151,936 × 3,584 float32 table ({table_mib:.0f} MiB), method {method}: "
            f"{result['seconds']:.1f} s, peak {extra:.0f} MiB above the model's resident memory "
            f"(×{extra / table_mib:.2f} of the table; target ≤ 2: {'met' if extra <= 2 * table_mib else 'missed'}); "
            f"{result['matched']:,} matched, {result['built']:,} built"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finetune", choices=("best", "all", "none"), default="best")
    parser.add_argument("--steps", type=int, nargs="*", default=[100, 300])
    parser.add_argument("--no-synthetic", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    paths = models.models()
    with tempfile.TemporaryDirectory() as work:
        runs = run_methods(paths, Path(work))
        evaluate(runs, args.finetune, sorted(args.steps))
    big = {} if args.no_synthetic else {method: synthetic(method) for method in ("pieces", "neighbors")}
    print_tables(runs, sorted(args.steps), big)


if __name__ == "__main__":
    main()
