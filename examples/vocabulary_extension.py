"""New tokens in a trained LM: which start for their rows? (issue 18, docs/vocabulary_extension.md)

1. A WordPiece vocabulary is trained on the Lee news corpus (gensim's test data), and a tied-embedding
   ``TiedEmbeddingLM`` is trained on it.
2. The most frequent Multi30k words (image captions: "skateboard", "sidewalk", …) that this vocabulary splits into
   two or more pieces are added as whole-word tokens ("▁skateboard"), as ``tokenizer.add_tokens`` does; the
   captions are encoded with the added words first, the old WordPiece pieces elsewhere.
3. The model's vocabulary is extended with each rule (:func:`lightning_embinit.extend_vocabulary`: every old row
   kept, the new rows from ``pieces``, ``mean_cov``, ``mean``, ``normal:0.02`` or torch's N(0, 1) default), then
   fine-tuned on the captions (every parameter trains, Adam).

Printed per rule: the validation loss before any update (over all targets, the old tokens' and the new tokens'),
the probability the new tokens take on the validation positions before any update (the report's
``new_token_mass``; uniform would give m/N′), the validation loss after ``--steps`` steps, as mean ± std over
``--seeds`` seeds (the rule's draw and the batch order; the old model is the same). Offline; a few
minutes on two busy CPU cores.

    python examples/vocabulary_extension.py                       # the table in docs/vocabulary_extension.md
    python examples/vocabulary_extension.py --steps 20 --seeds 1  # a quick look
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import time
from collections import Counter

import torch

from lightning_embinit import TiedEmbeddingLM, extend_vocabulary
from lightning_embinit.data.lm import lee_corpus_paths, pack, read_lines
from lightning_embinit.text.tokenization import TextTokenizer

RULES = ("pieces", "mean_cov", "mean", "normal:0.02", "torch_default")
LABELS = {"mean_cov": "mean_cov (Hugging Face)", "torch_default": "torch_default, N(0, 1)"}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def shared_data() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("EMBINIT_SHARED_DATA", os.path.join(here, "..", "..", "shared", "data"))


def captions(split: str, limit: int | None = None) -> list[str]:
    with gzip.open(os.path.join(shared_data(), "multi30k", f"{split}.en.gz"), "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    return lines[:limit]


class ExtendedEncoder:
    """The old WordPiece pipeline (normalize, pre-tokenize) with whole-word added tokens looked up first."""

    def __init__(self, tokenizer: TextTokenizer, added: list[str]) -> None:
        self.backend = tokenizer.backend
        self.tokens = list(tokenizer.tokens) + added
        self.added = {token: len(tokenizer.tokens) + k for k, token in enumerate(added)}
        self.old_index = {token: i for i, token in enumerate(tokenizer.tokens)}

    def words(self, text: str) -> list[str]:
        normalized = self.backend.normalizer.normalize_str(text)
        return [word for word, _ in self.backend.pre_tokenizer.pre_tokenize_str(normalized)]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in self.words(text):
            if word in self.added:
                ids.append(self.added[word])
            else:
                ids.extend(self.old_index[t.value] for t in self.backend.model.tokenize(word))
        return ids


def windows(encode, texts: list[str], eos: int, seq_len: int) -> torch.Tensor:
    stream: list[int] = []
    for text in texts:
        stream.extend(encode(text) + [eos])
    return pack(stream, seq_len)


def train(model: TiedEmbeddingLM, data: torch.Tensor, steps: int, batch: int, lr: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    model.train()
    for _ in range(steps):
        rows = data[torch.randint(len(data), (batch,), generator=generator)]
        loss = model.loss(model(rows[:, :-1]), rows[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@torch.no_grad()
def evaluate(model: TiedEmbeddingLM, data: torch.Tensor, first_new: int) -> tuple[float, float, float]:
    """Mean next-token loss over all targets, over the old tokens' and over the new tokens' (ids ≥ ``first_new``)."""
    model.eval()
    losses = torch.cat(
        [
            torch.nn.functional.cross_entropy(
                model(rows[:, :-1]).flatten(0, 1), rows[:, 1:].flatten(), reduction="none"
            )
            for rows in data.split(32)
        ]
    )
    new = data[:, 1:].flatten() >= first_new
    return float(losses.mean()), float(losses[~new].mean()), float(losses[new].mean())


def new_words(
    tokenizer: TextTokenizer, encoder: ExtendedEncoder, texts: list[str], count: int, min_count: int
) -> list[str]:
    """The ``count`` most frequent words of ``texts`` (▁-marked, as the pre-tokenizer yields them) that the
    old vocabulary splits into ≥ 2 pieces."""
    counts = Counter(word for text in texts for word in encoder.words(text))
    split = [w for w, c in counts.most_common() if c >= min_count and len(tokenizer.backend.model.tokenize(w)) > 1]
    return split[:count]


def old_model(args: argparse.Namespace) -> tuple[TiedEmbeddingLM, TextTokenizer]:
    lee = read_lines([lee_corpus_paths()[0]])
    tokenizer = TextTokenizer.wordpiece(lee, vocab_size=args.vocab_size, min_frequency=2)
    data = windows(tokenizer.encode, lee, tokenizer.eos_id, args.seq_len)
    torch.manual_seed(0)
    model = TiedEmbeddingLM(
        vocabulary=tokenizer.tokens,
        architecture={
            "d_model": args.d_model,
            "num_heads": 4,
            "num_layers": 2,
            "ffn_dim": 2 * args.d_model,
            "max_len": args.seq_len,
            "embedding_init": "normal:1/sqrt(d)",
        },
    )
    train(model, data, args.pretrain_steps, args.batch_size, 1e-3, seed=0)
    return model, tokenizer


def run_rule(
    rule: str,
    seed: int,
    state: dict,
    tokenizer: TextTokenizer,
    encoder: ExtendedEncoder,
    train_data: torch.Tensor,
    val_data: torch.Tensor,
    args: argparse.Namespace,
) -> tuple[float, ...]:
    model = TiedEmbeddingLM(
        vocabulary=tokenizer.tokens,
        architecture={
            "d_model": args.d_model,
            "num_heads": 4,
            "num_layers": 2,
            "ffn_dim": 2 * args.d_model,
            "max_len": args.seq_len,
        },
    )
    model.load_state_dict(state)
    model.eval()
    probe = lambda m: m.output_states((val_data[:, :-1], None))  # noqa: E731
    report = extend_vocabulary(model, encoder.tokens, rule=rule, old_tokenizer=tokenizer, seed=seed, probe=probe)
    before = evaluate(model, val_data, len(tokenizer.tokens))
    train(model, train_data, args.steps, args.batch_size, args.lr, seed=seed)
    return (*before, report["new_token_mass"], evaluate(model, val_data, len(tokenizer.tokens))[0])


def cell(values: list[float], digits: int = 3, percent: bool = False) -> str:
    values = [100 * v for v in values] if percent else values
    mean = statistics.fmean(values)
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{mean:.{digits}f}{spread}{' %' if percent else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pretrain-steps", type=int, default=600)
    parser.add_argument("--new-words", type=int, default=300)
    parser.add_argument("--min-count", type=int, default=20)
    parser.add_argument("--captions", type=int, default=10000, help="Multi30k training captions read")
    parser.add_argument("--steps", type=int, default=100, help="fine-tuning steps")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rules", nargs="+", default=list(RULES))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model, tokenizer = old_model(args)
    state = model.state_dict()
    texts = captions("train", args.captions)
    probe_encoder = ExtendedEncoder(tokenizer, [])
    added = new_words(tokenizer, probe_encoder, texts, args.new_words, args.min_count)
    encoder = ExtendedEncoder(tokenizer, added)
    train_data = windows(encoder.encode, texts, tokenizer.eos_id, args.seq_len)
    val_data = windows(encoder.encode, captions("val"), tokenizer.eos_id, args.seq_len)
    share = float((val_data[:, 1:] >= len(tokenizer.tokens)).float().mean())
    print(
        f"old vocabulary {len(tokenizer.tokens)} (WordPiece on Lee), +{len(added)} Multi30k words "
        f"(first: {', '.join(w.lstrip('▁') for w in added[:8])}); "
        f"{100 * share:.1f} % of the validation targets are new tokens; d = {args.d_model}; "
        f"{args.pretrain_steps} pre-training steps on Lee, {args.steps} fine-tuning steps, "
        f"batch {args.batch_size} × {args.seq_len}, {args.seeds} seed(s); {cpu_name()}, "
        f"{torch.get_num_threads()} threads"
    )
    print(
        "| rule | val loss before fine-tuning | … on old-token targets | … on new-token targets | new-token mass "
        f"before any update | val loss after {args.steps} steps |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    )
    for rule in args.rules:
        results = [
            run_rule(rule, seed, state, tokenizer, encoder, train_data, val_data, args) for seed in range(args.seeds)
        ]
        before, old, new, mass, after = zip(*results)
        print(
            f"| `{LABELS.get(rule, rule)}` | {cell(before)} | {cell(old)} | {cell(new)} "
            f"| {cell(mass, 2, percent=True)} | {cell(after)} |",
            flush=True,
        )
    print(
        f"uniform share of the new tokens: {100 * len(added) / len(encoder.tokens):.1f} %; "
        f"{time.perf_counter() - started:.0f} s in all"
    )


if __name__ == "__main__":
    main()
