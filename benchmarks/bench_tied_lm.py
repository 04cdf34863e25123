"""Training throughput of TiedEmbeddingLM against a torch.nn.TransformerEncoder reference.

Both models: token embedding × √d + sinusoidal P, ``layers`` pre-LN blocks (GELU FFN, no
dropout) with causal self-attention, a final LayerNorm and a tied output head. The reference
uses ``nn.TransformerEncoderLayer(norm_first=True, batch_first=True)`` with a causal mask.
One training step = forward, cross-entropy, backward, Adam step. Runs alternate between the
two models in short runs (order flipped each repeat), so load from other processes hits both
alike; the table gives the median and the best run's tokens/s, then each model's FLOPs per token
and its utilization of the fp32 GEMM ceiling measured at the model's own matrix shapes (``flops.py``).

    python benchmarks/bench_tied_lm.py                      # d=256, 2 layers, 32×64 tokens
    python benchmarks/bench_tied_lm.py --d-model 512 --seq-len 128 --repeats 3
    python benchmarks/bench_tied_lm.py --d-model 512 --heads 8 --layers 6 --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from flops import gemm_ceiling, measure_training_flops
from precision_rows import CLOCKS, add_options, apply_options, autocast_for, machine_line, report, row_name
from timing import alternate
from torch import nn

from lightning_embinit.init.positional import sinusoidal_encoding
from lightning_embinit.models import TiedEmbeddingLM


class ReferenceLM(nn.Module):
    """The same architecture from torch.nn.TransformerEncoder layers."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, ffn: int, max_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d), persistent=False)
        layer = nn.TransformerEncoderLayer(
            d, heads, ffn, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.scale = math.sqrt(d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        x = self.embed(ids) * self.scale + self.pe[:length]
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=ids.device)
        x = self.encoder(x, mask=mask, is_causal=True)
        return F.linear(self.norm(x), self.embed.weight)


class Runner:
    """One model, its Adam optimizer and a fixed batch; :meth:`run` times ``steps`` training steps (forward and loss
    under ``autocast``) on :attr:`clock`."""

    clock = staticmethod(time.perf_counter)

    def __init__(self, model: nn.Module, batch: torch.Tensor, autocast) -> None:
        self.model, self.autocast = model.train(), autocast
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.inputs, self.targets = batch[:, :-1], batch[:, 1:]

    def forward_backward(self) -> None:
        with self.autocast():
            loss = F.cross_entropy(self.model(self.inputs).flatten(0, 1), self.targets.flatten())
        loss.backward()

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward()
        self.optimizer.step()

    def run(self, steps: int) -> float:
        """Training tokens per second over ``steps`` steps."""
        sync = torch.cuda.synchronize if self.inputs.is_cuda else (lambda: None)
        sync()
        started = self.clock()
        for _ in range(steps):
            self.step()
        sync()
        return steps * self.inputs.numel() / (self.clock() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=4165, help="the Lee corpus vocabulary size by default")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--ffn", type=int, default=None, help="FFN width (default 4·d)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20, help="runs per model, alternating")
    parser.add_argument("--device", default="cpu")
    add_options(parser)
    args = parser.parse_args()
    apply_options(args)
    ffn = args.ffn or 4 * args.d_model
    device = torch.device(args.device)
    batch = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), device=device)
    runners, dtype_of = {}, {}
    for dtype in args.dtype:
        torch.manual_seed(0)
        ours = TiedEmbeddingLM(
            vocab_size=args.vocab,
            architecture={
                "d_model": args.d_model,
                "num_heads": args.heads,
                "num_layers": args.layers,
                "ffn_dim": ffn,
                "max_len": args.seq_len,
                "positional": "sinusoidal",
                "head": "tied",
                "dropout": 0.0,
            },
        ).to(device)
        reference = ReferenceLM(args.vocab, args.d_model, args.heads, args.layers, ffn, args.seq_len).to(device)
        runners[row_name("TiedEmbeddingLM", args.dtype, dtype)] = Runner(ours, batch, autocast_for(device, dtype))
        runners[row_name("nn.TransformerEncoder", args.dtype, dtype)] = Runner(
            reference, batch, autocast_for(device, dtype)
        )
        dtype_of.update(dict.fromkeys(set(runners) - set(dtype_of), dtype))
    Runner.clock = staticmethod(CLOCKS[args.clock])
    header = machine_line(device, args.clock)
    results = alternate(runners, args.repeats, args.steps, args.warmup)
    print(
        f"training tokens/s, d={args.d_model}, heads={args.heads}, layers={args.layers}, ffn={ffn}, n={args.vocab}, "
        f"batch {args.batch_size}×{args.seq_len}, {args.device} {' and '.join(args.dtype)}, "
        f"{args.repeats} alternating runs × {args.steps} steps; {header}"
    )
    report(
        results,
        runners,
        {name: measure_training_flops(runner.forward_backward) for name, runner in runners.items()},
        {name: runner.inputs.numel() for name, runner in runners.items()},
        dtype_of,
        ours="TiedEmbeddingLM",
        reference="nn.TransformerEncoder",
        dtypes=args.dtype,
        device=device,
        ceiling_fn=gemm_ceiling,
        clock=args.clock,
    )


if __name__ == "__main__":
    main()
