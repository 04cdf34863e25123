"""Training throughput of TransformerClassifier against an ``nn.TransformerEncoder`` classifier of the same size.

Both models: token embedding × √d + sinusoidal P and dropout (the same :class:`EmbeddingInput`),
``layers`` post-LN blocks (ReLU FFN, dropout 0.1, [K]'s classifier) over a padded batch
with a key padding mask, the first token's vector (the ``<cls>`` the datamodule puts first) through
dropout into a linear head, cross-entropy. The reference uses
``nn.TransformerEncoderLayer(norm_first=False, batch_first=True)``. One training step = forward,
loss, backward, Adam step. The batch: real SST-2 dev sentences of similar length (a word vocabulary
of SST-2 train, min_freq 2), ``<cls>`` first; tokens/s counts the non-padding tokens. Runs alternate
between the models (order flipped each repeat); the table gives median and best tokens/s, then model
FLOPs per token and the utilization against the GEMM ceiling measured at the model's own matrix
shapes (``flops.py``). Sizes: ``k`` ([K]: 3 layers, d = 512, 8 heads, FFN 2048) and ``small``
(2 layers, d = 128, 4 heads, FFN 512); batch 64 sentences.

    python benchmarks/bench_classifier.py --size k --repeats 6
    python benchmarks/bench_classifier.py --size small --repeats 10 --steps 5
    python benchmarks/bench_classifier.py --size k --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import csv
import gzip

import bench_seq2seq
import torch
import torch.nn.functional as F
from data_files import shared_file
from flops import gemm_ceiling, measure_training_flops
from precision_rows import CLOCKS, add_options, apply_options, autocast_for, machine_line, report, row_name
from timing import alternate
from torch import nn

from lightning_embinit.models import TransformerClassifier
from lightning_embinit.modules.inputs import EmbeddingInput
from lightning_embinit.text.tokenization import TextTokenizer

SIZES = {
    "k": {"d_model": 512, "num_heads": 8, "num_layers": 3, "ffn_dim": 2048},
    "small": {"d_model": 128, "num_heads": 4, "num_layers": 2, "ffn_dim": 512},
}


class ReferenceClassifier(nn.Module):
    """``nn.TransformerEncoder`` with the same input, pooling and head as TransformerClassifier."""

    def __init__(
        self,
        vocab: int,
        pad_id: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        ffn_dim: int,
        dropout: float,
        classes: int,
    ) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.token_input = EmbeddingInput(nn.Embedding(vocab, d_model, padding_idx=pad_id), dropout=dropout)
        layer = nn.TransformerEncoderLayer(
            d_model, num_heads, ffn_dim, dropout=dropout, batch_first=True, norm_first=False
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head_dropout = nn.Dropout(dropout)
        self.head = nn.Linear(d_model, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(self.token_input(ids), src_key_padding_mask=ids == self.pad_id)
        return self.head(self.head_dropout(hidden[:, 0]))


class Runner(bench_seq2seq.Runner):
    """A model, its Adam optimizer and one fixed (ids, labels) batch of ``tokens`` non-padding tokens."""

    def __init__(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], autocast, tokens: int) -> None:
        self.model, self.batch, self.autocast, self.tokens = model.train(), batch, autocast, tokens
        self.loss_fn = lambda ids, labels: F.cross_entropy(model(ids), labels)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)


def sst2_batch(batch: int, device: torch.device) -> tuple[TextTokenizer, torch.Tensor, torch.Tensor]:
    """A word tokenizer of SST-2 train and ``batch`` dev sentences around the median length, ``<cls>`` first."""

    def rows(name: str) -> list[tuple[str, int]]:
        with gzip.open(shared_file("sst2", name), "rt", encoding="utf-8") as handle:
            return [
                (text, int(label))
                for text, label in list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
            ]

    tokenizer = TextTokenizer.word([text for text, _ in rows("train.tsv.gz")], min_freq=2, roles=("cls", "sep"))
    dev = rows("dev.tsv.gz")
    encoded = [[tokenizer.role_ids["cls"], *ids] for ids in tokenizer.encode_batch([text for text, _ in dev])]
    order = sorted(range(len(dev)), key=lambda i: len(encoded[i]))
    start = max(0, len(order) // 2 - batch // 2)
    chosen = order[start : start + batch]
    ids = nn.utils.rnn.pad_sequence(
        [torch.tensor(encoded[i]) for i in chosen], batch_first=True, padding_value=tokenizer.pad_id
    )
    labels = torch.tensor([dev[i][1] for i in chosen])
    return tokenizer, ids.to(device), labels.to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=SIZES, default="k")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=6, help="runs per model, alternating")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--device", default="cpu")
    add_options(parser)
    args = parser.parse_args()
    apply_options(args)
    size, device = SIZES[args.size], torch.device(args.device)
    tokenizer, ids, labels = sst2_batch(args.batch, device)
    tokens = int((ids != tokenizer.pad_id).sum())
    runners, dtype_of = {}, {}
    for dtype in args.dtype:
        torch.manual_seed(0)
        ours = TransformerClassifier(
            tokenizer=tokenizer.to_config(),
            num_classes=2,
            architecture={**size, "dropout": args.dropout, "max_len": 128},
        )
        reference = ReferenceClassifier(
            len(tokenizer),
            tokenizer.pad_id,
            size["d_model"],
            size["num_heads"],
            size["num_layers"],
            size["ffn_dim"],
            args.dropout,
            2,
        )
        autocast = autocast_for(device, dtype)
        runners[row_name("TransformerClassifier", args.dtype, dtype)] = Runner(
            ours.to(device), (ids, labels), autocast, tokens
        )
        runners[row_name("nn.TransformerEncoder", args.dtype, dtype)] = Runner(
            reference.to(device), (ids, labels), autocast, tokens
        )
        dtype_of.update(dict.fromkeys(set(runners) - set(dtype_of), dtype))
    Runner.clock = staticmethod(CLOCKS[args.clock])
    header = machine_line(device, args.clock)
    results = alternate(runners, args.repeats, args.steps, args.warmup)
    print(
        f"training tokens/s, size {args.size}: {size['num_layers']} post-LN layers, d={size['d_model']}, "
        f"{size['num_heads']} heads, FFN {size['ffn_dim']}, vocabulary {len(tokenizer)}, "
        f"batch {ids.shape[0]}×{ids.shape[1]} "
        f"({tokens} non-padding tokens of SST-2 dev), dropout {args.dropout}, {args.device} "
        f"{' and '.join(args.dtype)}, {args.repeats} alternating runs × {args.steps} steps (target ratio ≥ 1.0); "
        f"{header}"
    )
    report(
        results,
        runners,
        {name: measure_training_flops(runner.forward_backward) for name, runner in runners.items()},
        dict.fromkeys(runners, tokens),
        dtype_of,
        ours="TransformerClassifier",
        reference="nn.TransformerEncoder",
        dtypes=args.dtype,
        device=device,
        ceiling_fn=gemm_ceiling,
        clock=args.clock,
    )


if __name__ == "__main__":
    main()
