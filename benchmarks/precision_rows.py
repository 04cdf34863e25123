"""Shared by the training benchmarks: one row per model and dtype (``--dtype fp32 bf16``), each dtype's GEMM ceiling
at the model's own shapes beside the others, the clock (``--clock cpu``: this process's CPU time, the only steady
reading on one thread of a loaded machine), ``--freed-memory`` (keep: freed blocks kept for reuse, as the package's
training commands do, :mod:`lightning_embinit.host_memory`; return: glibc's default), and a header with the CPU's name,
its bf16 flags, the allocator setting and the load average.

    from precision_rows import add_options, apply_options, autocast_for, row_name, report
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from flops import Ceiling, MatmulRecord, device_peak, print_utilization
from timing import cpu_name, print_throughput

from lightning_embinit.host_memory import freed_memory_kept, keep_freed_memory

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")
"""The ``/proc/cpuinfo`` flags that say which bf16 units oneDNN can use (AVX-512 BF16 dot products, AMX tiles)."""


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--dtype`` (one or more of fp32, bf16: bf16 runs forward and loss under autocast) and ``--clock``."""
    parser.add_argument(
        "--dtype",
        nargs="+",
        choices=DTYPES,
        default=["fp32"],
        help="one or more of fp32, bf16 (autocast); several: each model once per dtype, alternating",
    )
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall: elapsed time; cpu: this process's CPU time (steady on one thread of a loaded machine; with more "
        "threads it also counts their waits)",
    )
    add_freed_memory_option(parser)


def add_freed_memory_option(parser: argparse.ArgumentParser) -> None:
    """``--freed-memory keep|return`` (what :func:`apply_options` applies)."""
    parser.add_argument(
        "--freed-memory",
        choices=("keep", "return"),
        default="keep",
        help="keep: freed blocks stay in the heap for the next step (lightning_embinit.keep_freed_memory, what the "
        "package's training commands call); return: glibc's default, large freed blocks go back to the kernel",
    )


def apply_options(args: argparse.Namespace) -> None:
    """What the options set for the whole process: ``--freed-memory keep`` keeps freed memory (before any tensor)."""
    if args.freed_memory == "keep":
        keep_freed_memory()


def autocast_for(device: torch.device, dtype: str) -> Callable[[], Any]:
    """A context factory: autocast to ``dtype`` on ``device``'s type, or nothing for fp32."""
    if DTYPES[dtype] == torch.float32:
        return nullcontext
    return lambda: torch.autocast(device.type, dtype=DTYPES[dtype])


def row_name(name: str, dtypes: list[str], dtype: str) -> str:
    """The row of ``name`` in ``dtype``: the bare name when the run has one dtype."""
    return name if len(dtypes) == 1 else f"{name} {dtype}"


def cpu_flags() -> list[str]:
    """The bf16-related flags :data:`BF16_FLAGS` the CPU lists in ``/proc/cpuinfo``."""
    path = Path("/proc/cpuinfo")
    text = path.read_text() if path.exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in BF16_FLAGS if flag in flags]


def freed_memory_line() -> str:
    """Whether this process keeps freed memory (``--freed-memory``), as every header says it."""
    return "freed memory kept" if freed_memory_kept() else "freed memory returned (glibc's default)"


def machine_line(device: torch.device, clock: str) -> str:
    """Where and under what load the run happened (printed with every table)."""
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    flags = ", ".join(cpu_flags()) or "no bf16 flags"
    return (
        f"{where} ({flags}), torch {torch.__version__}, {torch.get_num_threads()} thread(s), {clock} clock, "
        f"{freed_memory_line()}, load average {os.getloadavg()[0]:.1f}"
    )


def report(
    results: dict[str, list[float]],
    runners: dict[str, Any],
    records: dict[str, MatmulRecord],
    tokens: dict[str, int],
    dtype_of: dict[str, str],
    *,
    ours: str,
    reference: str,
    dtypes: list[str],
    device: torch.device,
    ceiling_fn: Callable[..., Ceiling],
    per: str = "token",
    clock: str = "wall",
) -> None:
    """The throughput table (ratios to ``reference`` in the first dtype), then per dtype its GEMM ceiling at ``ours``'
    shapes and the utilization of every row in that dtype (``dtype_of``: row → dtype), and for several dtypes the
    speed-up of ``ours`` and of the ceilings over the first dtype's."""
    medians = print_throughput(results, runners, reference=row_name(reference, dtypes, dtypes[0]))
    ceilings = {}
    for dtype in dtypes:
        names = [name for name in runners if dtype_of[name] == dtype]
        record = records[row_name(ours, dtypes, dtype)]
        ceilings[dtype] = ceiling_fn(record, device=device, dtype=DTYPES[dtype], clock=CLOCKS[clock])
        print_utilization(
            {name: records[name] for name in names},
            {name: tokens[name] for name in names},
            {name: medians[name] for name in names},
            ceilings[dtype],
            per=per,
            dtype=dtype,
            peak=device_peak(device, DTYPES[dtype]),
        )
    first = dtypes[0]
    for dtype in dtypes[1:]:
        speed = medians[row_name(ours, dtypes, dtype)] / medians[row_name(ours, dtypes, first)]
        print(
            f"{ours} {dtype} / {first}: {speed:.2f}× the tokens/s (median); GEMM ceilings {dtype} / {first} at its "
            f"shapes: {ceilings[dtype].rate / ceilings[first].rate:.2f}× "
            f"({ceilings[dtype].rate / 1e9:.1f} / {ceilings[first].rate / 1e9:.1f} GFLOP/s)"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
