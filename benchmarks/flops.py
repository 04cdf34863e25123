"""Model FLOPs per token and utilization against the machine's own GEMM ceiling (every training benchmark).

1. :func:`record_matmuls` runs one training step (forward + backward) under a
   ``TorchDispatchMode`` and records every matrix product it dispatches — ``mm``, ``addmm``,
   ``bmm``, ``baddbmm`` and the fused attention kernels (CPU flash attention included, which
   ``torch.utils.flop_counter`` does not count) — with its shapes and FLOPs (2·m·n·k per product;
   attention by ``torch.utils.flop_counter.sdpa_flop_count``/``sdpa_backward_flop_count``).
   Their sum is the model's FLOPs per step: what the model computes, whatever the implementation.
2. :func:`gemm_ceiling` times a bare GEMM (``torch.mm``/``torch.bmm``) at every recorded shape, in
   the benchmark's dtype and device, and keeps the best rate of each. The ceiling is the rate at
   which the step's FLOPs would run if every product ran at its shape's best rate:
   total FLOPs / Σ (FLOPs of a shape / best rate of that shape). Attention counts as the two
   batched products it consists of.
3. Utilization = achieved model FLOP/s (FLOPs per step / measured seconds per step) / ceiling.
4. On a GPU, model FLOP utilization (MFU) = achieved model FLOP/s / the GPU's dense bf16 tensor-core peak
   (:data:`DENSE_BF16_PEAK_TFLOPS`, by device name): the vendor's figure, not a measured one.

    from flops import measure_training_flops, gemm_ceiling, format_utilization
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten
_ATTENTION_FORWARD = {
    name
    for name in (
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
}
_ATTENTION_BACKWARD = {f"{name}_backward" for name in _ATTENTION_FORWARD}


@dataclass
class MatmulRecord:
    """FLOPs per GEMM shape of one step; a shape is ``(b, m, k, n)`` (b = 1 for ``mm``)."""

    flops: dict[tuple[int, int, int, int], int] = field(default_factory=lambda: defaultdict(int))

    @property
    def total(self) -> int:
        return sum(self.flops.values())

    def add(self, b: int, m: int, k: int, n: int, flops: int | None = None) -> None:
        self.flops[(b, m, k, n)] += 2 * b * m * k * n if flops is None else flops


class _Recorder(TorchDispatchMode):
    def __init__(self, record: MatmulRecord) -> None:
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if func.overloadpacket in (aten.mm, aten.addmm):
            a, b = (args[0], args[1]) if func.overloadpacket is aten.mm else (args[1], args[2])
            self.record.add(1, a.shape[0], a.shape[1], b.shape[1])
        elif func.overloadpacket in (aten.bmm, aten.baddbmm):
            a, b = (args[0], args[1]) if func.overloadpacket is aten.bmm else (args[1], args[2])
            self.record.add(a.shape[0], a.shape[1], a.shape[2], b.shape[2])
        elif name in _ATTENTION_FORWARD or name in _ATTENTION_BACKWARD:
            offset = 1 if name in _ATTENTION_BACKWARD else 0
            q, k, v = (args[offset + i].shape for i in range(3))
            flops = sdpa_backward_flop_count(args[0].shape, q, k, v) if offset else sdpa_flop_count(q, k, v)
            batch, length, width, keys = q[0] * q[1], q[2], q[3], k[2]
            self.record.add(batch, length, width, keys, flops // 2)  # Q·Kᵀ-shaped half
            self.record.add(batch, length, keys, v[3], flops - flops // 2)  # P·V-shaped half
        return func(*args, **kwargs)


def measure_training_flops(step: Callable[[], None]) -> MatmulRecord:
    """The matrix products of one call of ``step`` (forward and backward of one training step)."""
    record = MatmulRecord()
    with _Recorder(record):
        step()
    return record


def _time_gemm(
    shape: tuple[int, int, int, int],
    device: torch.device,
    dtype: torch.dtype,
    min_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    b, m, k, n = shape
    left = torch.randn(b, m, k, device=device, dtype=dtype)
    right = torch.randn(b, k, n, device=device, dtype=dtype)
    product = (lambda: torch.mm(left[0], right[0])) if b == 1 else (lambda: torch.bmm(left, right))
    flops = 2 * b * m * k * n
    for _ in range(3):
        product()
    best, spent, calls = 0.0, 0.0, max(1, int(2e8 // max(flops, 1)))
    while spent < min_seconds:
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = clock()
        for _ in range(calls):
            product()
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = clock() - started
        spent += elapsed
        best = max(best, calls * flops / elapsed)
    return best


@dataclass
class Ceiling:
    """The GEMM ceiling at a step's shapes: ``rate`` (FLOP/s), each shape's best rate, the best single one."""

    rate: float
    per_shape: dict[tuple[int, int, int, int], float]

    @property
    def best_shape_rate(self) -> float:
        return max(self.per_shape.values())


def gemm_ceiling(
    record: MatmulRecord,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    min_seconds: float = 0.2,
    rounds: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> Ceiling:
    """Best GEMM FLOP/s at the recorded shapes, combined by their FLOPs (module docstring).

    Every shape is timed in ``rounds`` interleaved rounds and keeps its best rate, so a burst of
    load from other processes lowers the ceiling less than it lowers a single reading. ``clock``:
    ``time.process_time`` counts only the CPU time this process ran (on one thread, a machine's
    other load then slows neither the ceiling nor a step timed with the same clock)."""
    device = torch.device(device)
    per_shape = dict.fromkeys(record.flops, 0.0)
    for _ in range(rounds):
        for shape in per_shape:
            per_shape[shape] = max(per_shape[shape], _time_gemm(shape, device, dtype, min_seconds, clock))
    ideal_seconds = sum(flops / per_shape[shape] for shape, flops in record.flops.items())
    return Ceiling(record.total / ideal_seconds, per_shape)


DENSE_BF16_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"H100.*NVL", 835.0),
    (r"H100.*PCIe", 756.0),
    (r"H100", 989.0),
    (r"H200.*NVL", 835.0),
    (r"H200", 989.0),
    (r"A100", 312.0),
    (r"L40S", 362.0),
    (r"L40\b", 181.0),
    (r"\bL4\b", 121.0),
    (r"RTX 4090", 165.0),
)
"""(pattern searched in ``torch.cuda.get_device_name()``, dense bf16 tensor-core TFLOPS), first match wins: NVIDIA's
datasheet figures, half of the "with sparsity" ones (H100 SXM "NVIDIA H100 80GB HBM3" 1,979 → 989; PCIe 1,513 → 756;
NVL 1,671 → 835; H200 as H100 SXM; A100 312; L40S 733 → 362; L40 362 → 181; L4 242 → 121; RTX 4090 165, the Ada
whitepaper's bf16 with FP32 accumulation)."""


def dense_bf16_peak(device_name: str) -> float | None:
    """The dense bf16 peak (FLOP/s) of the GPU named ``device_name``; None for a GPU not in the table."""
    for pattern, tflops in DENSE_BF16_PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return tflops * 1e12
    return None


def model_flop_utilization(flops_per_token: float, tokens_per_second: float, peak: float) -> float:
    """Achieved model FLOP/s over ``peak`` FLOP/s (a fraction)."""
    return flops_per_token * tokens_per_second / peak


@dataclass(frozen=True)
class Peak:
    """What MFU is measured against: ``flops`` (FLOP/s) of the GPU ``device``, or None and ``why`` there is none."""

    device: str
    flops: float | None
    why: str = ""

    def describe(self) -> str:
        if self.flops is None:
            return f"MFU n/a: {self.why}"
        return f"MFU: against the dense bf16 peak of {self.device}, {self.flops / 1e12:.0f} TFLOPS (flops.py's table)"


def device_peak(device: str | torch.device, dtype: torch.dtype) -> Peak | None:
    """The peak for MFU on a CUDA ``device`` (a :class:`Peak` without ``flops`` when MFU is n/a); None on a CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if dtype != torch.bfloat16:
        return Peak(name, None, f"the table holds dense bf16 peaks and this run is {dtype} (use --dtype bf16)")
    flops = dense_bf16_peak(name)
    why = "" if flops else f"{name!r} is not in flops.DENSE_BF16_PEAK_TFLOPS (add its dense bf16 datasheet figure)"
    return Peak(name, flops, why)


def format_utilization(
    name: str,
    record: MatmulRecord,
    tokens_per_step: int,
    tokens_per_second: float,
    ceiling: Ceiling,
    peak: Peak | None = None,
    width: int = 26,
) -> str:
    """One table row: model FLOPs per token, achieved GFLOP/s, the ceiling and the utilization (and MFU on a GPU)."""
    per_token = record.total / tokens_per_step
    achieved = per_token * tokens_per_second
    row = (
        f"{name:<{width}} {per_token / 1e6:>12.1f} {achieved / 1e9:>12.1f} {ceiling.rate / 1e9:>12.1f} "
        f"{100 * achieved / ceiling.rate:>8.1f}%"
    )
    if peak is None:
        return row
    if peak.flops is None:
        return f"{row} {'n/a':>8}"
    return f"{row} {100 * model_flop_utilization(per_token, tokens_per_second, peak.flops):>7.1f}%"


UTILIZATION_HEADER = f"{'model':<26} {'MFLOP/token':>12} {'GFLOP/s':>12} {'ceiling':>12} {'util.':>9}"


def print_utilization(
    records: dict[str, MatmulRecord],
    tokens_per_step: dict[str, int],
    tokens_per_second: dict[str, float],
    ceiling: Ceiling,
    *,
    per: str = "token",
    dtype: str = "",
    peak: Peak | None = None,
) -> None:
    """The utilization block every training benchmark prints: the ceiling, then one row per model; on a GPU
    (``peak`` given, :func:`device_peak`) an MFU column and the peak it is measured against."""
    shapes = len(next(iter(records.values())).flops)
    print(
        f"\nmodel FLOPs per {per} (forward + backward matrix products) and utilization; {dtype + ' ' if dtype else ''}"
        f"GEMM ceiling {ceiling.rate / 1e9:.1f} GFLOP/s at the model's {shapes} shapes "
        f"(best single shape {ceiling.best_shape_rate / 1e9:.1f})"
    )
    width = max(26, *map(len, records))
    print(f"{'model':<{width}}" + UTILIZATION_HEADER[26:] + ("" if peak is None else f" {'MFU':>8}"))
    for name, record in records.items():
        print(format_utilization(name, record, tokens_per_step[name], tokens_per_second[name], ceiling, peak, width))
    if peak is not None:
        print(peak.describe())
