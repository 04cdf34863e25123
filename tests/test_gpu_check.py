"""``make gpu-check`` (benchmarks/gpu_check.py) and the MFU arithmetic of benchmarks/flops.py: the one-line skip
without a GPU, MFU against a hand count of a tiny network's FLOPs, the dense bf16 peaks by device name, and the
CUDA tests the check runs."""

from __future__ import annotations

import ast
import gzip
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their sibling modules (flops, data_files) by name


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


flops = _script("flops")
gpu_check = _script("gpu_check")


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["gpu-check: no CUDA device (torch.cuda.is_available() is False): skipped"]


def test_mfu_of_a_two_layer_network_against_a_hand_count():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    inputs = torch.randn(3, 8)  # 3 tokens of width 8; the input needs no gradient
    record = flops.measure_training_flops(lambda: model(inputs).square().sum().backward())
    forward = 2 * 3 * 8 * 16 + 2 * 3 * 16 * 4
    backward = 2 * 3 * 4 * 16 + 2 * 16 * 3 * 4 + 2 * 8 * 3 * 16  # ∂hidden, ∂W₂, ∂W₁ (biases: sums, no products)
    assert record.total == forward + backward == 2688
    per_token, tokens_per_second, peak = record.total / 3, 3000.0, 1e7
    assert flops.model_flop_utilization(per_token, tokens_per_second, peak) == pytest.approx(0.2688)
    ceiling = flops.Ceiling(rate=2e7, per_shape={(1, 3, 8, 16): 2e7})
    row = flops.format_utilization("net", record, 3, tokens_per_second, ceiling, flops.Peak("GPU", peak))
    assert row.split()[-2:] == ["13.4%", "26.9%"]  # 2.688 MFLOP/s of the 20 MFLOP/s ceiling, of the 10 MFLOP/s peak
    unknown = flops.format_utilization("net", record, 3, tokens_per_second, ceiling, flops.Peak("GPU", None, "why"))
    assert unknown.split()[-1] == "n/a"


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989),
        ("NVIDIA H100 PCIe", 756),
        ("NVIDIA H100 NVL", 835),
        ("NVIDIA H200", 989),
        ("NVIDIA A100-SXM4-80GB", 312),
        ("NVIDIA A100-PCIE-40GB", 312),
        ("NVIDIA L4", 121),
        ("NVIDIA L40S", 362),
        ("NVIDIA L40", 181),
        ("NVIDIA GeForce RTX 4090", 165),
        ("Tesla T4", None),
    ],
)
def test_dense_bf16_peaks_by_device_name(name, tflops):
    assert flops.dense_bf16_peak(name) == (None if tflops is None else tflops * 1e12)


def test_mfu_is_na_with_the_reason_for_an_unknown_gpu_or_another_dtype(monkeypatch):
    assert flops.device_peak("cpu", torch.bfloat16) is None  # a CPU gets the GEMM ceiling only
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    peak = flops.device_peak("cuda", torch.bfloat16)
    assert peak.flops is None and peak.describe() == (
        "MFU n/a: 'Tesla T4' is not in flops.DENSE_BF16_PEAK_TFLOPS (add its dense bf16 datasheet figure)"
    )
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert flops.device_peak("cuda", torch.bfloat16).flops == 989e12
    assert "this run is torch.float32" in flops.device_peak("cuda", torch.float32).describe()


def test_the_check_runs_every_test_that_skips_without_cuda():
    """A new CUDA-only test (a skipif on torch.cuda.is_available(), on the test or the module) must be added to
    gpu_check.CUDA_TESTS, or no GPU would ever run it."""
    found = set()
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree, name = ast.parse(path.read_text(encoding="utf-8")), f"tests/{path.name}"
        marks = [ast.unparse(node) for node in tree.body if isinstance(node, ast.Assign)]
        if any("pytestmark" in mark and "cuda.is_available" in mark for mark in marks):
            found.add(name)
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(
                "cuda.is_available" in ast.unparse(d) for d in node.decorator_list
            ):
                found.add(f"{name}::{node.name}")
    assert found == set(gpu_check.CUDA_TESTS)


@pytest.fixture
def bench_seq2seq():
    return _script("bench_seq2seq")


def test_a_benchmark_without_the_shared_data_names_the_file_the_folder_and_the_variable(
    bench_seq2seq, tmp_path, monkeypatch
):
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(tmp_path))
    with pytest.raises(
        SystemExit, match=rf"multi30k/train.de.gz is not in the shared data folder {tmp_path}: set EMBINIT_SHARED_DATA"
    ):
        bench_seq2seq.multi30k("train", "de")
    (tmp_path / "multi30k").mkdir()
    with gzip.open(tmp_path / "multi30k" / "train.de.gz", "wt", encoding="utf-8") as handle:
        handle.write("ein Satz\nzwei\n")
    assert bench_seq2seq.multi30k("train", "de") == ["ein Satz", "zwei"]


def test_the_translation_benchmark_trains_sequences_longer_than_512(bench_seq2seq, monkeypatch, capsys):
    """``--size big`` has 256-token sequences, ``wider`` 1,024: the positions of both the model and its
    ``nn.Transformer`` reference must cover them (they stopped at 64, then the reference's at 512)."""
    tiny_long = {"d_model": 16, "num_heads": 2, "layers": 1, "ffn_dim": 32, "batch": 2, "length": 520}
    monkeypatch.setitem(bench_seq2seq.SIZES, "tiny_long", tiny_long)
    ceiling = bench_seq2seq.gemm_ceiling
    monkeypatch.setattr(bench_seq2seq, "gemm_ceiling", lambda *a, **k: ceiling(*a, **k, min_seconds=1e-3, rounds=1))
    monkeypatch.setattr(
        sys,
        "argv",
        ["bench_seq2seq.py", "train", "--size", "tiny_long", "--steps", "1", "--warmup", "0", "--repeats", "1"],
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny products: a second thread only waits on a busy machine (seconds become minutes)
    try:
        bench_seq2seq.main()
    finally:
        torch.set_num_threads(threads)
    assert "batch 2×520" in capsys.readouterr().out


def test_the_check_names_missing_shared_data_before_spending_gpu_time(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(tmp_path))
    assert gpu_check.missing_shared_data() == {
        "bench_classifier.py": f"sst2/train.tsv.gz, sst2/dev.tsv.gz not in the shared data folder {tmp_path}: "
        "set EMBINIT_SHARED_DATA"
    }
    for name in gpu_check.SHARED_DATA_FILES["bench_classifier.py"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert gpu_check.missing_shared_data() == {}
    assert gpu_check.run_benchmarks({script: "why" for script, *_ in gpu_check.BENCH_COMMANDS}) == [
        f"{script}: not run: why" for script, *_ in gpu_check.BENCH_COMMANDS
    ]
