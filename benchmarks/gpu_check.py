"""``make gpu-check``: what a lent NVIDIA GPU must show, in one command (about 8 minutes on one GPU).

1. **CUDA tests**: the tests that skip without CUDA (:data:`CUDA_TESTS`), through pytest.
2. **bf16 fits**: each model family the package ships (``TiedEmbeddingLM``, ``TransformerSeq2Seq``,
   ``ReinforcedTransformerSeq2Seq``, ``TransformerClassifier``, ``HuggingFaceLM`` on a tiny GPT-2 config) trains
   ``--steps`` steps under ``precision="bf16-mixed"`` on a small memorizable task, with ``EmbeddingInitCallback``,
   ``InitialLossMonitor``, ``EmbeddingVarianceMonitor`` and ``LearningSpeedMonitor`` attached. Checked: every loss
   finite and the last tenth's mean below the first tenth's; the parameters on the GPU at train start; every number
   of the init report and of the monitors' summaries finite; the init report and the variance monitor's values
   computed on the GPU's copy of the trained model equal those computed on a CPU copy.
3. **Training benchmarks** in bf16 (``bench_tied_lm.py``, ``bench_seq2seq.py train``, ``bench_classifier.py``, each
   in its own process): tokens/s beside ``nn.Transformer`` of the same size in the same run, and MFU against the
   GPU's dense bf16 peak (``flops.py``).

Without a CUDA device it prints one line and exits 0 (skipped, not failed). With ``--device cpu`` the fits run on
the CPU (a try of this script on a machine without a GPU; tests and benchmarks are left out). Exit status 1 when a
check fails; the elapsed time is printed at the end.

    python benchmarks/gpu_check.py
    python benchmarks/gpu_check.py --parts fits --device cpu --steps 40
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from data_files import shared_data_folder

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = Path(__file__).resolve().parent
SKIP_LINE = "gpu-check: no CUDA device (torch.cuda.is_available() is False): skipped"
BUDGET_S = 8 * 60
CUDA_TESTS = ("tests/test_sharded_cuda.py", "tests/test_models_tied_lm.py::test_moves_to_cuda_and_trains_a_step")
"""The tests that skip without CUDA; tests/test_gpu_check.py checks that none is missing."""
BENCH_COMMANDS = (
    ("bench_tied_lm.py", "--d-model", "512", "--heads", "8", "--layers", "6", "--seq-len", "128", "--repeats", "6"),
    ("bench_seq2seq.py", "train", "--size", "k", "--fused-adam", "--repeats", "6"),
    ("bench_classifier.py", "--size", "k", "--repeats", "6"),
)
"""[K]'s size (d = 512, 8 heads, FFN 2048; the LM with 6 layers, as the 3 + 3 of [K]'s translation model)."""
BENCH_OPTIONS = ("--device", "cuda", "--dtype", "bf16", "--steps", "20", "--warmup", "5")
SHARED_DATA_FILES = {"bench_classifier.py": ("sst2/train.tsv.gz", "sst2/dev.tsv.gz")}
"""The shared-data files each benchmark reads (in :func:`data_files.shared_data_folder`)."""
VOCAB, LENGTH, EXAMPLES, BATCH = 64, 24, 128, 16
TINY = {"d_model": 64, "num_heads": 4, "ffn_dim": 128, "max_len": 32, "dropout": 0.0}


def run_cuda_tests() -> list[str]:
    """The CUDA tests in a pytest subprocess; a failure, or a skip on a machine with CUDA, is a failure."""
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *CUDA_TESTS]
    print("$ " + " ".join(command[2:]), flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout[-3000:] + done.stderr[-2000:], flush=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0:
        return [f"CUDA tests: pytest exit status {done.returncode} ({summary})"]
    return [f"CUDA tests: skipped on a machine with CUDA ({summary})"] if "skipped" in summary else []


def _sequences(generator: torch.Generator, low: int = 4, high: int = VOCAB) -> torch.Tensor:
    return torch.randint(low, high, (EXAMPLES, LENGTH + 1), generator=generator)


def family_cases() -> dict[str, Callable[[], tuple[Any, torch.utils.data.Dataset]]]:
    """Family name → a builder of (module, dataset): tiny models on fixed random data they can memorize."""
    from torch.utils.data import TensorDataset

    from lightning_embinit.models import (
        HuggingFaceLM,
        ReinforcedTransformerSeq2Seq,
        TiedEmbeddingLM,
        TransformerClassifier,
        TransformerSeq2Seq,
    )
    from lightning_embinit.text import TextTokenizer

    generator = torch.Generator().manual_seed(0)
    layers = {"num_encoder_layers": 2, "num_decoder_layers": 2}

    def tied_lm():
        ids = _sequences(generator)
        model = TiedEmbeddingLM(vocab_size=VOCAB, architecture={**TINY, "num_layers": 2})
        return model, TensorDataset(ids[:, :-1], ids[:, 1:])

    def seq2seq(cls, **options):
        def build():
            model = cls(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, architecture={**TINY, **layers}, **options)
            src = _sequences(generator)[:, :LENGTH]
            bos, eos = (torch.full((EXAMPLES, 1), token) for token in (model.model.bos_id, model.model.eos_id))
            return model, TensorDataset(src, torch.cat([bos, src, eos], dim=1))

        return build

    def classifier():
        ids = _sequences(generator)
        model = TransformerClassifier(vocab_size=VOCAB, num_classes=2, architecture={**TINY, "num_layers": 2})
        return model, TensorDataset(ids, (ids[:, 1] < (VOCAB + 4) // 2).long())

    def hugging_face_lm():
        tokenizer = TextTokenizer.word([" ".join(f"w{i}" for i in range(VOCAB))], min_freq=1)
        config = {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32}
        model = HuggingFaceLM("gpt2", config=config, tokenizer=tokenizer.to_config())
        ids = _sequences(generator, low=len(tokenizer) - VOCAB, high=len(tokenizer))
        return model, TensorDataset(ids[:, :-1], ids[:, 1:])

    return {
        "TiedEmbeddingLM": tied_lm,
        "TransformerSeq2Seq": seq2seq(TransformerSeq2Seq),
        "ReinforcedTransformerSeq2Seq": seq2seq(  # its Noam schedule, warmed up within the fit
            ReinforcedTransformerSeq2Seq, optimizer={"lr": None, "lr_schedule": "noam", "warmup_steps": 100}
        ),
        "TransformerClassifier": classifier,
        "HuggingFaceLM (GPT-2)": hugging_face_lm,
    }


def _callbacks(steps: int) -> dict[str, Any]:
    from lightning_embinit import (
        EmbeddingInitCallback,
        EmbeddingVarianceMonitor,
        InitialLossMonitor,
        LearningSpeedMonitor,
    )

    return {
        "init": EmbeddingInitCallback(source="normal:0.02", seed=0, verbose=False),
        "initial_loss": InitialLossMonitor(),
        "variance": EmbeddingVarianceMonitor(every_n_steps=max(1, steps // 3), figures=False, sample_rows=64),
        "speed": LearningSpeedMonitor(
            "train_loss", threshold=math.log(VOCAB) / 2, mode="min", check_on="train_step", every_n_steps=10
        ),
    }


def _numbers(value: Any) -> Iterator[float]:
    """Every number in a nested report or summary (booleans and None left out)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield float(value)


def _differences(cpu: Any, gpu: Any, where: str) -> list[str]:
    """Where two nested reports' numbers differ beyond float32 rounding (and a neighbour flipped by it)."""
    if isinstance(cpu, dict):
        if not isinstance(gpu, dict) or set(gpu) != set(cpu):
            return [f"{where}: CPU keys {sorted(cpu)}, GPU {sorted(gpu) if isinstance(gpu, dict) else gpu!r}"]
        return [d for key in cpu for d in _differences(cpu[key], gpu[key], f"{where}.{key}")]
    if isinstance(cpu, (int, float)) and not isinstance(cpu, bool):
        if not isinstance(gpu, (int, float)) or not math.isclose(cpu, gpu, rel_tol=1e-3, abs_tol=2e-2):
            return [f"{where}: CPU {cpu!r}, GPU {gpu!r}"]
    return []


def loss_curve() -> Any:
    """A callback that keeps every training loss and the devices of the module's parameters at train start (defined
    here: Lightning loads after the check for a GPU)."""
    from lightning.pytorch.callbacks import Callback

    class LossCurve(Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.devices: set[str] = set()

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.devices = {parameter.device.type for parameter in pl_module.parameters()}

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, index: int) -> None:
            self.losses.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))

    return LossCurve()


def fit_family(name: str, build: Callable[[], tuple[Any, Any]], device: str, steps: int) -> list[str]:
    """Train one family in bf16-mixed precision with the callbacks; print one line, return the failures."""
    import lightning as L
    from torch.utils.data import DataLoader

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

    torch.manual_seed(0)
    module, dataset = build()
    callbacks, curve = _callbacks(steps), loss_curve()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        trainer = L.Trainer(
            accelerator=device,
            devices=1,
            precision="bf16-mixed",
            max_steps=steps,
            callbacks=[curve, *callbacks.values()],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            log_every_n_steps=10,
            default_root_dir=directory,
        )
        trainer.fit(module, DataLoader(dataset, batch_size=BATCH, shuffle=True))
    seconds = time.perf_counter() - started
    window = max(1, len(curve.losses) // 10)
    first, last = (sum(part) / window for part in (curve.losses[:window], curve.losses[-window:]))
    failures = []
    if len(curve.losses) != steps or not all(math.isfinite(loss) for loss in curve.losses):
        failures.append(f"{len(curve.losses)} losses of {steps} steps, finite: {all(map(math.isfinite, curve.losses))}")
    if not last < first:
        failures.append(f"the loss did not fall: first tenth {first:.3f}, last tenth {last:.3f}")
    if curve.devices != {torch.device(device).type}:
        failures.append(f"parameters on {sorted(curve.devices)} at train start, not {device}")
    reported = {"init report": callbacks["init"].reports}
    reported.update({key: callback.summary() for key, callback in callbacks.items() if key != "init"})
    if not all(math.isfinite(number) for number in _numbers(reported)):
        failures.append(f"a non-finite number in the callbacks' values: {reported}")
    failures += same_on_cpu_and_device(module, callbacks, device)
    print(
        f"{name:<30} {steps} steps in {seconds:5.1f} s  loss {first:.3f} → {last:.3f}  "
        f"{len(list(_numbers(reported)))} callback values  " + ("ok" if not failures else "FAILED"),
        flush=True,
    )
    return [f"{name}: {failure}" for failure in failures]


def same_on_cpu_and_device(module: Any, callbacks: dict[str, Any], device: str) -> list[str]:
    """The init report and the variance monitor's values on a ``device`` copy of the trained module against a CPU
    copy (the same seed: the tables are drawn on the CPU and moved)."""
    from lightning_embinit import EmbeddingInitCallback

    copies = {where: copy.deepcopy(module).to(where) for where in ("cpu", device)}
    if any(p.device.type != torch.device(device).type for p in copies[device].parameters()):
        return [f"the copy for {device} did not move there"]
    measured = {where: callbacks["variance"].measure(model) for where, model in copies.items()}
    reports = {
        where: EmbeddingInitCallback(source="normal:0.02", seed=1, verbose=False).initialize(model)
        for where, model in copies.items()
    }
    return _differences(measured["cpu"], measured[device], "variance") + _differences(
        reports["cpu"], reports[device], "init report"
    )


def missing_shared_data() -> dict[str, str]:
    """Benchmark → why it cannot run: the shared-data files it reads that are missing (checked before any GPU time is
    spent, so a machine the data did not travel to says so at once)."""
    folder = shared_data_folder()
    problems = {}
    for script, files in SHARED_DATA_FILES.items():
        if missing := [name for name in files if not (folder / name).is_file()]:
            problems[script] = f"{', '.join(missing)} not in the shared data folder {folder}: set EMBINIT_SHARED_DATA"
    return problems


def run_benchmarks(skipped: dict[str, str]) -> list[str]:
    """Each training benchmark in bf16 on the GPU, in its own process, its output as it comes; those in ``skipped``
    (benchmark → why) are failures without a run."""
    failures = [f"{script}: not run: {why}" for script, why in skipped.items()]
    for script, *options in BENCH_COMMANDS:
        if script in skipped:
            continue
        command = [sys.executable, str(BENCHMARKS / script), *options, *BENCH_OPTIONS]
        print("\n$ " + " ".join(["python", f"benchmarks/{script}", *options, *BENCH_OPTIONS]), flush=True)
        if (code := subprocess.run(command, cwd=ROOT).returncode) != 0:
            failures.append(f"{script}: exit status {code}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: try the fits without a GPU")
    parser.add_argument("--steps", type=int, default=300, help="training steps of each family's fit")
    parser.add_argument(
        "--parts", default="tests,fits,bench", help="a comma-separated subset of tests, fits, bench (default all)"
    )
    args = parser.parse_args(argv)
    parts = [part for part in args.parts.split(",") if part]
    if unknown := sorted(set(parts) - {"tests", "fits", "bench"}):
        parser.error(f"--parts: unknown {unknown}; choose from tests, fits, bench")
    if args.device == "cuda" and not torch.cuda.is_available():
        print(SKIP_LINE)
        return 0
    started = time.perf_counter()
    where = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU (tests and benchmarks left out)"
    print(f"gpu-check on {where}, torch {torch.__version__}", flush=True)
    for noise in ("does not have many workers", "but have no `val_dataloader`", "isinstance.treespec, LeafSpec"):
        warnings.filterwarnings("ignore", message=f".*{noise}.*")
    unrunnable = missing_shared_data() if "bench" in parts and args.device == "cuda" else {}
    for script, why in unrunnable.items():
        print(f"gpu-check: {script} will not run: {why}", flush=True)
    failures = run_cuda_tests() if "tests" in parts and args.device == "cuda" else []
    if "fits" in parts:
        print(f"\nbf16-mixed fits, {args.steps} steps each, with the callbacks:", flush=True)
        for name, build in family_cases().items():
            failures += fit_family(name, build, args.device, args.steps)
    if "bench" in parts and args.device == "cuda":
        failures += run_benchmarks(unrunnable)
    elapsed = time.perf_counter() - started
    budget = "within" if elapsed <= BUDGET_S else "OVER"
    print(f"\ngpu-check: {elapsed:.0f} s elapsed ({budget} the {BUDGET_S // 60}-minute budget)")
    for failure in failures:
        print(f"FAILED {failure}")
    print("gpu-check: " + (f"{len(failures)} failure(s)" if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
