"""Where a training step's time goes: ``torch.profiler`` over a few steps of ``TransformerSeq2Seq`` (the
``bench_seq2seq.py train`` step: forward, cross-entropy, backward, Adam), every aten op's self time summed into
groups — the matrix products, attention (SDPA's kernels, softmax, masks), layer norms, dropout masks, elementwise
products and sums, the embedding's backward, the loss, Adam, copies and layout changes, the rest — beside the GEMM
ceiling of the step's own shapes measured in the same run (``flops.py``): the time the matrix products would take at
the ceiling, and what is left for everything else at the utilization target.

    python benchmarks/profile_step.py --size k --fused-adam
    python benchmarks/profile_step.py --size k --fused-adam --dtype bf16 --top 25
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
from collections import defaultdict

import torch
from bench_seq2seq import SIZES, SRC_VOCAB, TGT_VOCAB, Runner, _loss_function, model_options
from flops import Ceiling, gemm_ceiling, measure_training_flops
from precision_rows import (
    CLOCKS,
    DTYPES,
    add_freed_memory_option,
    apply_options,
    autocast_for,
    cpu_flags,
    freed_memory_line,
)
from timing import cpu_name
from torch.profiler import ProfilerActivity, profile

from lightning_embinit.models import TransformerSeq2Seq

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loss (log-softmax, NLL)", ("log_softmax", "aten::nll_loss", "cross_entropy")),
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_weight_int")),
    (
        "attention (SDPA kernels, softmax, masks)",
        ("scaled_dot_product", "aten::_softmax", "softmax_backward", "aten::masked_fill", "aten::logical_not"),
    ),
    ("layer norms", ("layer_norm",)),
    (
        "dropout masks",
        ("dropout_mask", "aten::random_", "aten::ge", "aten::where", "aten::bernoulli", "aten::native_dropout"),
    ),
    ("ReLU / GELU", ("aten::relu", "aten::threshold_backward", "aten::gelu", "aten::clamp_min")),
    ("elementwise products and sums", ("aten::mul", "aten::add", "aten::sum", "aten::div")),
    ("embedding backward", ("embedding_dense_backward", "embedding_backward", "aten::index_add", "aten::index_put")),
    ("Adam", ("adam", "aten::_foreach", "Optimizer.step")),
    (
        "copies and layout",
        ("aten::copy_", "aten::cat", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::split"),
    ),
    ("zeroing and allocation", ("aten::fill_", "aten::zero_", "aten::zeros", "aten::empty", "aten::ones")),
)
"""Group name → substrings of the aten op names it takes (first match wins); anything else is "the rest"."""


def group_of(name: str) -> str:
    for group, patterns in GROUPS:
        if any(pattern.lower() in name.lower() for pattern in patterns):
            return group
    return "the rest"


def build(args: argparse.Namespace) -> Runner:
    size = SIZES[args.size]
    torch.manual_seed(0)
    src = torch.randint(4, SRC_VOCAB, (size["batch"], size["length"]))
    tgt = torch.randint(4, TGT_VOCAB, (size["batch"], size["length"] + 1))
    model = TransformerSeq2Seq(**model_options(size, args.dropout, max(64, size["length"] + 1)))
    autocast = autocast_for(torch.device("cpu"), args.dtype)
    return Runner(_loss_function(model, args.compile), model, (src, tgt), autocast, args.fused_adam)


def profile_steps(runner: Runner, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """(group → share of the profiled self time, op → share) over ``steps`` steps."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            runner.step()
    ops: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if event.self_cpu_time_total > 0:
            ops[event.key] += event.self_cpu_time_total
    total = sum(ops.values())
    groups: dict[str, float] = defaultdict(float)
    for name, microseconds in ops.items():
        groups[group_of(name)] += microseconds / total
    return groups, {name: microseconds / total for name, microseconds in ops.items()}


def timed_rounds(runner: Runner, record, args: argparse.Namespace) -> tuple[list[float], Ceiling, tuple[float, float]]:
    """Step times, the GEMM ceiling in alternating rounds (one step, one pass over the shapes), so that load
    from other processes falls on both alike (the ceiling keeps each shape's best rate over the rounds), and per step
    the mean minor page faults (a fresh page the kernel maps and zeroes on first touch) and kernel CPU seconds."""
    clock, dtype = CLOCKS[args.clock], DTYPES[args.dtype]
    times, best, faults, kernel_seconds = [], {}, 0, 0.0
    for _ in range(args.rounds):
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = clock()
        runner.step()
        times.append(clock() - started)
        after = resource.getrusage(resource.RUSAGE_SELF)
        faults += after.ru_minflt - before.ru_minflt
        kernel_seconds += after.ru_stime - before.ru_stime
        ceiling = gemm_ceiling(record, dtype=dtype, rounds=1, min_seconds=0.1, clock=clock)
        best = {shape: max(rate, best.get(shape, 0.0)) for shape, rate in ceiling.per_shape.items()}
    seconds = sum(flops / best[shape] for shape, flops in record.flops.items())
    return times, Ceiling(record.total / seconds, best), (faults / args.rounds, kernel_seconds / args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=SIZES, default="k")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of one timed step and one ceiling pass")
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall: elapsed time; cpu: this process's CPU time (one thread on a loaded machine)",
    )
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--fused-adam", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32")
    parser.add_argument("--top", type=int, default=15, help="the ops with the most self time")
    add_freed_memory_option(parser)
    args = parser.parse_args()
    apply_options(args)
    runner = build(args)
    for _ in range(3):
        runner.step()
    record = measure_training_flops(runner.forward_backward)
    load = os.getloadavg()[0]
    times, ceiling, (faults, kernel_seconds) = timed_rounds(runner, record, args)
    groups, ops = profile_steps(runner, args.steps)
    best, gemm_seconds = min(times), record.total / ceiling.rate
    print(
        f"profile of a TransformerSeq2Seq training step, size {args.size}, {args.dtype}, dropout {args.dropout}, "
        f"{'fused ' if args.fused_adam else ''}Adam{', compiled' if args.compile else ''}, "
        f"{torch.get_num_threads()} thread(s), {args.clock} clock; {cpu_name()} ({', '.join(cpu_flags())}); "
        f"{freed_memory_line()}; "
        f"load average {load:.1f} → {os.getloadavg()[0]:.1f}"
    )
    print(
        f"step: best {best * 1e3:.0f} ms, median {statistics.median(times) * 1e3:.0f} ms of {len(times)}; "
        f"model FLOPs {record.total / 1e9:.1f} G per step; {args.dtype} GEMM ceiling at the step's "
        f"{len(record.flops)} shapes {ceiling.rate / 1e9:.1f} GFLOP/s (same rounds, same clock) → the matrix "
        f"products alone {gemm_seconds * 1e3:.0f} ms; utilization {100 * gemm_seconds / best:.1f} % (best step); "
        f"{faults:,.0f} page faults and {kernel_seconds * 1e3:.0f} ms of kernel CPU time per step"
    )
    print(f"\n{'group (profiler self time)':<44} {'share':>7} {'ms of the best step':>20}")
    for name, share in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"{name:<44} {100 * share:>6.1f}% {share * best * 1e3:>20.0f}")
    print(f"\n{'op':<52} {'share':>7}  group")
    for name, share in sorted(ops.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{name[:52]:<52} {100 * share:>6.1f}%  {group_of(name)}")


if __name__ == "__main__":
    main()
