"""Translation benchmarks: training speed and utilization, reinforced vs baseline epochs, decoding speed.

``train``: training tokens/s (forward, loss, backward, Adam step) of ``TransformerSeq2Seq`` against
``torch.nn.Transformer`` with the same sizes, token embeddings (×√d + sinusoidal P, dropout),
padding masks and output layer (dense with bias), post-LN, ReLU, dropout 0.1; batches of
``batch × length`` target tokens (as many source tokens), Multi30k's word vocabularies (7,855 de /
5,970 en). Runs alternate between the models (order flipped each repeat); the table gives median
and best tokens/s, then model FLOPs per token and the utilization against the fp32 GEMM ceiling
measured at the model's own matrix shapes (``flops.py``). Sizes: ``k`` ([K]: 3+3, d=512, 8 heads,
FFN 2048, batch 64×24), ``small`` (2+2, d=128, 4 heads, FFN 512, batch 64×24), ``big`` (Vaswani et al.'s
Transformer-big, 6+6, d=1024, 16 heads, FFN 4096, on batches of 64×256 that fill a GPU) and, for GPUs whose
peak a d=1024 model's matrix shapes cannot reach, ``wide`` (6+6, d=2048, 16 heads, FFN 8192, batch 32×512)
and ``wider`` (2+2, d=4096, 32 heads, FFN 16384, batch 16×1024).

``epoch``: seconds per epoch of ``reinforced_proposed`` and ``reinforced_baseline`` on the same
Multi30k slice and the same batches (WordPiece, as [R]), alternating epochs; [R] reports ≈ 0.31.

``decode``: greedy and beam-4 sentences/s on the Multi30k test set with cached incremental decoding,
against a naive loop that decodes one sentence at a time and recomputes the whole prefix every step.

    python benchmarks/bench_seq2seq.py train --size k --repeats 6
    python benchmarks/bench_seq2seq.py train --size small --compile --fused-adam
    python benchmarks/bench_seq2seq.py train --size k --device cuda --dtype bf16
    python benchmarks/bench_seq2seq.py epoch --examples 2000
    python benchmarks/bench_seq2seq.py decode --checkpoint run.ckpt
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from data_files import shared_file
from flops import gemm_ceiling, measure_training_flops
from precision_rows import CLOCKS, add_options, apply_options, autocast_for, machine_line, report, row_name
from timing import alternate
from torch import nn

from lightning_embinit.models import ReinforcedTransformerSeq2Seq, TransformerSeq2Seq
from lightning_embinit.modules.inputs import EmbeddingInput

SIZES = {
    "k": {"d_model": 512, "num_heads": 8, "layers": 3, "ffn_dim": 2048, "batch": 64, "length": 24},
    "small": {"d_model": 128, "num_heads": 4, "layers": 2, "ffn_dim": 512, "batch": 64, "length": 24},
    "big": {"d_model": 1024, "num_heads": 16, "layers": 6, "ffn_dim": 4096, "batch": 64, "length": 256},
    "wide": {"d_model": 2048, "num_heads": 16, "layers": 6, "ffn_dim": 8192, "batch": 32, "length": 512},
    "wider": {"d_model": 4096, "num_heads": 32, "layers": 2, "ffn_dim": 16384, "batch": 16, "length": 1024},
}
SRC_VOCAB, TGT_VOCAB, PAD = 7855, 5970, 0


class ReferenceSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` with the same inputs and output layer as TransformerSeq2Seq."""

    def __init__(self, d_model: int, num_heads: int, layers: int, ffn_dim: int, dropout: float, max_len: int) -> None:
        super().__init__()
        src_table = nn.Embedding(SRC_VOCAB, d_model, padding_idx=PAD)
        tgt_table = nn.Embedding(TGT_VOCAB, d_model, padding_idx=PAD)
        self.src_input = EmbeddingInput(src_table, max_len=max_len, dropout=dropout)
        self.tgt_input = EmbeddingInput(tgt_table, max_len=max_len, dropout=dropout)
        self.transformer = nn.Transformer(
            d_model, num_heads, layers, layers, ffn_dim, dropout=dropout, batch_first=True, norm_first=False
        )
        self.head = nn.Linear(d_model, TGT_VOCAB)

    def loss(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        tgt_in, targets = tgt[:, :-1], tgt[:, 1:]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        src_pad, tgt_pad = src == PAD, tgt_in == PAD
        hidden = self.transformer(
            self.src_input(src),
            self.tgt_input(tgt_in),
            tgt_mask=mask,
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return F.cross_entropy(self.head(hidden).flatten(0, 1), targets.flatten(), ignore_index=PAD)


class Runner:
    """A model, its Adam optimizer and one fixed batch; :meth:`run` times ``steps`` training steps on :attr:`clock`."""

    clock: Callable[[], float] = staticmethod(time.perf_counter)

    def __init__(self, loss, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], autocast, fused: bool) -> None:
        self.loss_fn, self.model, self.batch, self.autocast = loss, model.train(), batch, autocast
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=fused or None)
        self.tokens = batch[1][:, 1:].numel()

    def forward_backward(self) -> None:
        with self.autocast():
            loss = self.loss_fn(*self.batch)
        loss.backward()

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward()
        self.optimizer.step()

    def run(self, steps: int) -> float:
        """Training tokens per second over ``steps`` steps."""
        sync = torch.cuda.synchronize if self.batch[0].is_cuda else (lambda: None)
        sync()
        started = self.clock()
        for _ in range(steps):
            self.step()
        sync()
        return steps * self.tokens / (self.clock() - started)


def _loss_function(model: TransformerSeq2Seq, compiled: bool):
    def loss(src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return model.teacher_forced_loss(src, tgt, label_smoothing=0.0)[0]

    return torch.compile(loss) if compiled else loss


def model_options(size: dict[str, int], dropout: float, max_len: int) -> dict:
    """TransformerSeq2Seq's arguments at ``size`` on the benchmark's vocabularies."""
    return {
        "src_vocab_size": SRC_VOCAB,
        "tgt_vocab_size": TGT_VOCAB,
        "architecture": {
            "d_model": size["d_model"],
            "num_heads": size["num_heads"],
            "num_encoder_layers": size["layers"],
            "num_decoder_layers": size["layers"],
            "ffn_dim": size["ffn_dim"],
            "dropout": dropout,
            "max_len": max_len,
        },
    }


def train_runners(
    args: argparse.Namespace, batch: tuple[torch.Tensor, torch.Tensor]
) -> tuple[dict[str, Runner], dict[str, str]]:
    """Per dtype: TransformerSeq2Seq (and compiled, with ``--compile``) and ``nn.Transformer``, the same weights
    in every dtype (built from the same seed); and each row's dtype."""
    size, device = SIZES[args.size], torch.device(args.device)
    max_len = max(64, size["length"] + 1)  # the target side holds length + 1 tokens
    runners, dtype_of = {}, {}
    for dtype in args.dtype:
        autocast = autocast_for(device, dtype)
        variants = ["", "+compile"] if args.compile else [""]
        for variant in variants:
            torch.manual_seed(0)
            model = TransformerSeq2Seq(**model_options(size, args.dropout, max_len)).to(device)
            name = row_name(f"TransformerSeq2Seq{variant}", args.dtype, dtype)
            runners[name] = Runner(_loss_function(model, bool(variant)), model, batch, autocast, args.fused_adam)
        torch.manual_seed(0)
        reference = ReferenceSeq2Seq(
            size["d_model"], size["num_heads"], size["layers"], size["ffn_dim"], args.dropout, max_len
        ).to(device)
        runners[row_name("nn.Transformer", args.dtype, dtype)] = Runner(
            reference.loss, reference, batch, autocast, args.fused_adam
        )
        dtype_of.update(dict.fromkeys(set(runners) - set(dtype_of), dtype))
    return runners, dtype_of


def train(args: argparse.Namespace) -> None:
    apply_options(args)
    size, device = SIZES[args.size], torch.device(args.device)
    torch.manual_seed(0)
    batch, length = size["batch"], size["length"]
    src = torch.randint(4, SRC_VOCAB, (batch, length), device=device)
    tgt = torch.randint(4, TGT_VOCAB, (batch, length + 1), device=device)
    runners, dtype_of = train_runners(args, (src, tgt))
    Runner.clock = staticmethod(CLOCKS[args.clock])
    header = machine_line(device, args.clock)
    results = alternate(runners, args.repeats, args.steps, args.warmup)
    print(
        f"training tokens/s, size {args.size}: {size['layers']}+{size['layers']} layers, d={size['d_model']}, "
        f"{size['num_heads']} heads, FFN {size['ffn_dim']}, batch {batch}×{length}, vocab {SRC_VOCAB}/{TGT_VOCAB}, "
        f"dropout {args.dropout}, {'fused ' if args.fused_adam else ''}Adam, {args.device} {' and '.join(args.dtype)}, "
        f"{args.repeats} alternating runs × {args.steps} steps; {header}"
    )
    records = {}
    for dtype in args.dtype:
        for model in ("TransformerSeq2Seq", "nn.Transformer"):
            name = row_name(model, args.dtype, dtype)
            records[name] = measure_training_flops(runners[name].forward_backward)
    for name in runners:  # a compiled model does the same matrix products
        records.setdefault(name, records[row_name("TransformerSeq2Seq", args.dtype, dtype_of[name])])
    report(
        results,
        runners,
        records,
        {name: runner.tokens for name, runner in runners.items()},
        dtype_of,
        ours="TransformerSeq2Seq",
        reference="nn.Transformer",
        dtypes=args.dtype,
        device=device,
        ceiling_fn=gemm_ceiling,
        per="target token",
        clock=args.clock,
    )


def multi30k(split: str, lang: str, count: int | None = None) -> list[str]:
    with gzip.open(shared_file("multi30k", f"{split}.{lang}.gz"), "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    return lines[:count]


def _batches(src_tok, tgt_tok, de: list[str], en: list[str], batch_size: int, max_length: int = 128):
    """Length-sorted, padded (src, tgt) batches, as TranslationDataModule makes them."""
    src = [ids[: max_length - 1] + [src_tok.eos_id] for ids in src_tok.encode_batch(de)]
    tgt = [[tgt_tok.bos_id] + ids[: max_length - 2] + [tgt_tok.eos_id] for ids in tgt_tok.encode_batch(en)]
    order = sorted(range(len(src)), key=lambda i: (len(tgt[i]), len(src[i])))
    pad = torch.nn.utils.rnn.pad_sequence
    batches = []
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batches.append(
            (
                pad([torch.tensor(src[i]) for i in chunk], batch_first=True, padding_value=src_tok.pad_id),
                pad([torch.tensor(tgt[i]) for i in chunk], batch_first=True, padding_value=tgt_tok.pad_id),
            )
        )
    generator = torch.Generator().manual_seed(0)
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def epoch(args: argparse.Namespace) -> None:
    from lightning_embinit.text.tokenization import TextTokenizer

    de, en = multi30k("train", "de", args.examples), multi30k("train", "en", args.examples)
    src_tok = TextTokenizer.wordpiece(de, vocab_size=args.vocab_size)
    tgt_tok = TextTokenizer.wordpiece(en, vocab_size=args.vocab_size)
    batches = _batches(src_tok, tgt_tok, de, en, args.batch_size)
    torch.manual_seed(0)
    tokenizers = {"src_tokenizer": src_tok, "tgt_tokenizer": tgt_tok}
    models = {
        "reinforced_proposed": ReinforcedTransformerSeq2Seq.from_preset("reinforced_proposed", **tokenizers),
        "reinforced_baseline": TransformerSeq2Seq.from_preset("reinforced_baseline", **tokenizers),
    }
    optimizers = {name: model.configure_optimizers() for name, model in models.items()}
    times: dict[str, list[float]] = {name: [] for name in models}
    losses: dict[str, list[float]] = {name: [] for name in models}
    for repeat in range(args.epochs):
        for name in list(models) if repeat % 2 == 0 else list(reversed(models)):
            model, config = models[name].train(), optimizers[name]
            optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
            started, total, count = time.perf_counter(), 0.0, 0
            for src, tgt in batches:
                loss, tokens = model.teacher_forced_loss(src, tgt, label_smoothing=0.0)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                total, count = total + loss.item() * int(tokens), count + int(tokens)
            times[name].append(time.perf_counter() - started)
            losses[name].append(total / count)
    print(
        f"seconds per epoch, Multi30k train[:{args.examples}] de→en, WordPiece {len(src_tok)}/{len(tgt_tok)}, "
        f"{len(batches)} batches of ≤ {args.batch_size} pairs (the same for both), {args.epochs} alternating epochs, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'model':<22} {'params':>10} {'median s/epoch':>15} {'best':>8} {'train loss per epoch':>24}")
    for name, model in models.items():
        params = sum(p.numel() for p in model.parameters())
        history = " ".join(f"{x:.2f}" for x in losses[name])
        print(f"{name:<22} {params:>10} {statistics.median(times[name]):>15.2f} {min(times[name]):>8.2f}   {history}")
    ratio = statistics.median(times["reinforced_proposed"]) / statistics.median(times["reinforced_baseline"])
    params = [sum(p.numel() for p in m.parameters()) for m in models.values()]
    sizes = {"src_vocab_size": args.vocab_size, "tgt_vocab_size": args.vocab_size}
    full = [
        sum(p.numel() for p in ReinforcedTransformerSeq2Seq.from_preset("reinforced_proposed", **sizes).parameters()),
        sum(p.numel() for p in TransformerSeq2Seq.from_preset("reinforced_baseline", **sizes).parameters()),
    ]
    print(
        f"time ratio proposed / baseline: {ratio:.3f} ([R]: ≈ 0.31); parameter ratio baseline / proposed: "
        f"{params[1] / params[0]:.2f} here, {full[1] / full[0]:.2f} with {args.vocab_size}-token vocabularies on both "
        f"sides ({full[0]:,} / {full[1]:,}; [R]: ≈ 3.6)"
    )


@torch.no_grad()
def naive_greedy(model, src: torch.Tensor, max_len: int) -> list[int]:
    """One sentence, no cache: the whole prefix goes through the decoder at every step (``model.model``, the
    architecture that the LightningModule holds)."""
    net = model.model
    state = net.encode(src)
    prefix = [net.bos_id]
    for _ in range(max_len):
        logits = net.head_logits(net.decode(torch.tensor([prefix]), state)[:, -1])[0]
        logits[[net.pad_id, net.bos_id]] = float("-inf")
        prefix.append(int(logits.argmax()))
        if prefix[-1] == net.eos_id:
            break
    return prefix[1:]


def decoding(args: argparse.Namespace) -> None:
    from lightning_embinit.text.tokenization import TextTokenizer

    if args.checkpoint:
        model = _load_checkpoint(args.checkpoint)
    else:
        de, en = multi30k("train", "de"), multi30k("train", "en")
        tokenizers = {"src_tokenizer": TextTokenizer.word(de), "tgt_tokenizer": TextTokenizer.word(en)}
        torch.manual_seed(0)
        size = SIZES[args.size]
        model = TransformerSeq2Seq(
            **tokenizers,
            architecture={
                **{k: v for k, v in size.items() if k not in ("batch", "length", "layers")},
                "num_encoder_layers": size["layers"],
                "num_decoder_layers": size["layers"],
            },
        )
    model.eval()
    sentences = multi30k("test_2016_flickr", model.hparams.get("src_lang", "de"))[: args.sentences]
    source = model.src_tokenizer
    encoded = [ids + [source.eos_id] for ids in source.encode_batch(sentences)]
    max_len = args.max_len
    rows = []
    for beam in (1, 4):
        started = time.perf_counter()
        outputs = model.translate(sentences, beam_size=beam, max_len=max_len, batch_size=args.batch_size)
        elapsed = time.perf_counter() - started
        rows.append((f"batched, cached, beam {beam}", len(sentences) / elapsed, outputs))
    uncached = [torch.tensor(ids) for ids in encoded[: args.naive_sentences]]
    src = torch.nn.utils.rnn.pad_sequence(uncached, batch_first=True, padding_value=source.pad_id)
    started = time.perf_counter()
    model.generate(src, max_len=max_len, use_cache=False)
    rows.append(("batched, no cache, beam 1", len(uncached) / (time.perf_counter() - started), None))
    lengths = [len(model.tgt_tokenizer.encode(text)) for text in rows[0][2]]
    naive_count = min(args.naive_sentences, len(sentences))
    started = time.perf_counter()
    naive = [naive_greedy(model, torch.tensor([ids]), max_len) for ids in encoded[:naive_count]]
    elapsed = time.perf_counter() - started
    same = sum(model.tgt_tokenizer.decode(ids) == rows[0][2][i] for i, ids in enumerate(naive))
    print(
        f"decoding the Multi30k test set ({len(sentences)} sentences; uncached routes on the first {naive_count}), "
        f"max {max_len} tokens, greedy outputs {statistics.mean(lengths):.1f} tokens on average, "
        f"{torch.get_num_threads()} threads, "
        f"{'checkpoint ' + args.checkpoint if args.checkpoint else 'untrained model'}"
    )
    print(f"{'route':<32} {'sentences/s':>12}")
    for name, rate, _ in rows:
        print(f"{name:<32} {rate:>12.1f}")
    print(f"{'naive: one sentence, no cache':<32} {naive_count / elapsed:>12.1f}")
    print(
        f"speed-up of batched cached greedy over the naive loop: {rows[0][1] / (naive_count / elapsed):.1f}×; "
        f"the naive loop's output equals it on {same}/{naive_count} sentences"
    )


def _load_checkpoint(path: str):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    reinforced = "target_normalization" in checkpoint["hyper_parameters"]["architecture"]
    cls = ReinforcedTransformerSeq2Seq if reinforced else TransformerSeq2Seq
    return cls.load_from_checkpoint(path, map_location="cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("train")
    p.add_argument("--size", choices=SIZES, default="small")
    p.add_argument("--steps", type=int, default=2, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=6, help="runs per model, alternating")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--compile", action="store_true", help="also time the training loss under torch.compile")
    p.add_argument(
        "--fused-adam",
        action="store_true",
        help="Adam(fused=True) for both models, as EmbinitModule.configure_optimizers uses "
        "(default: torch's unfused Adam)",
    )
    p.add_argument("--device", default="cpu")
    add_options(p)
    p = commands.add_parser("epoch")
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--epochs", type=int, default=4, help="epochs per model, alternating")
    p = commands.add_parser("decode")
    p.add_argument("--checkpoint", default=None, help="a trained TransformerSeq2Seq/Reinforced… checkpoint")
    p.add_argument("--size", choices=SIZES, default="small", help="untrained model of this size without --checkpoint")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--naive-sentences", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-len", type=int, default=40)
    args = parser.parse_args()
    {"train": train, "epoch": epoch, "decode": decoding}[args.command](args)


if __name__ == "__main__":
    main()
