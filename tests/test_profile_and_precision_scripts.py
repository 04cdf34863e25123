"""benchmarks/profile_step.py and benchmarks/precision_curves.py at a tiny size: the profile's groups add up to the
profiled time and sort ops as their names say, and the precision comparison prints each setting's paired
differences (the tables in docs/benchmarks.md come from these scripts)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from tests.test_gpu_check import _script

ROOT = Path(__file__).resolve().parent.parent
TINY = {"d_model": 16, "num_heads": 2, "layers": 1, "ffn_dim": 32, "batch": 2, "length": 6}


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("op", "group"),
    [
        ("aten::mm", "matrix products"),
        ("aten::addmm", "matrix products"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention (SDPA kernels, softmax, masks)"),
        ("aten::native_layer_norm_backward", "layer norms"),
        ("lightning_embinit::dropout_mask", "dropout masks"),
        ("aten::_fused_adam_", "Adam"),
        ("aten::embedding_dense_backward", "embedding backward"),
        ("aten::copy_", "copies and layout"),
        ("aten::_log_softmax_backward_data", "loss (log-softmax, NLL)"),
        ("aten::nonexistent_op", "the rest"),
    ],
)
def test_each_op_falls_in_the_group_its_name_says(op, group):
    assert _script("profile_step").group_of(op) == group


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_profile_accounts_for_the_whole_step(dtype, monkeypatch, capsys, one_thread):
    profile_step = _script("profile_step")
    monkeypatch.setitem(profile_step.SIZES, "tiny", TINY)
    monkeypatch.setattr(sys, "argv", ["profile_step.py", "--size", "tiny", "--steps", "1", "--rounds", "1"])
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--dtype", dtype, "--top", "5", "--freed-memory", "return"])
    profile_step.main()
    out = capsys.readouterr().out
    assert f"size tiny, {dtype}, dropout 0.1" in out
    assert re.search(r"; freed memory (kept|returned \(glibc's default\));", out)
    assert re.search(r"[\d,]+ page faults and \d+ ms of kernel CPU time per step", out)
    utilization = float(re.search(r"utilization ([\d.]+) %", out).group(1))
    assert 0 < utilization < 100
    shares = {
        name.strip(): float(share) for name, share in re.findall(r"^(.{44}) +([\d.]+)% +\d+$", out, flags=re.MULTILINE)
    }
    assert "matrix products" in shares and shares["matrix products"] > 0
    assert sum(shares.values()) == pytest.approx(100, abs=0.1 * len(shares))  # each share printed to 0.1 %
    assert len(re.findall(r"^\S.* +[\d.]+%  [a-zA-Z].*$", out, flags=re.MULTILINE)) == 5  # --top 5: op, share, group


def test_the_precision_comparison_prints_paired_differences_per_setting(monkeypatch, capsys, one_thread):
    curves = _script("precision_curves")
    argv = ["precision_curves.py", "--seeds", "0", "1", "--settings", "untied-normal", "--steps", "3"]
    monkeypatch.setattr(sys, "argv", argv)
    curves.main()
    out = capsys.readouterr().out
    block = out[out.index("\nuntied-normal") :]
    for label in ("initial loss", "train loss, last 10 steps", "val loss"):
        line = next(line for line in block.splitlines() if line.strip().startswith(label))
        first, second = (float(value) for value in re.findall(r"(?:32-true|bf16-mixed) ([\d.]+)", line)[:2])
        difference = float(re.search(r"bf16-mixed − 32-true: ([+-][\d.]+)", line).group(1))
        assert difference == pytest.approx(second - first, abs=2e-4)  # the mean of the paired differences
        assert abs(difference) < 0.05  # an untied table: bf16 autocast moves a 3-step loss by far less
    assert "largest gap between the mean training curves" in block
