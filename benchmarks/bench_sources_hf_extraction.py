"""Time and peak memory to get a model's input embeddings: our reader vs ``AutoModel.from_pretrained``.

Builds a random BERT-like checkpoint (default: vocabulary 32,000, hidden 1024, 24 layers, about
1.35 GB in float32; the embedding is ~131 MB of it) saved as safetensors shards, then measures,
each in its own subprocess (peak RSS via ``ru_maxrss``, minus the process's RSS after imports):

- ``ours: read embedding``   — :func:`locate_embedding` + ``read()`` (the whole V×D tensor),
- ``ours: hf source build``  — ``resolve_source("hf:<dir>").build(...)`` for a 20,000-token slot
  (tokenizer, alignment, OOV fill: what the callback runs),
- ``AutoModel → clone``      — ``AutoModel.from_pretrained(dir).get_input_embeddings().weight.clone()``.
  transformers ≥ 5 memory-maps safetensors weights, so only the pages touched count: here the
  embedding's (plus the copy),
- ``AutoModel, weights resident`` — the same, then every weight paged in, as any use of the
  model (a forward pass, ``.to(device)``) does; transformers 4.x paid this at load time.

Targets: ours ≤ 1.5× the embedding's bytes above baseline, and ≥ 5× below the full model resident.
Runs are on a warm page cache (the checkpoint was just written). This driver imports nothing heavy
and builds the checkpoint in a subprocess too, because a child inherits its parent's peak RSS.

    python benchmarks/bench_sources_hf_extraction.py [--vocab 32000] [--hidden 1024] [--layers 24] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from memory import peak_rss_mib, rss_mib


def build_checkpoint(directory: str, vocab: int, hidden: int, layers: int, shard: str) -> None:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    os.makedirs(directory, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(vocab - 5)]
    vocab_file = os.path.join(directory, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as handle:
        handle.write("\n".join(words) + "\n")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
    )
    model = BertModel(config)
    model.save_pretrained(directory, max_shard_size=shard)
    BertTokenizerFast(vocab=vocab_file).save_pretrained(directory)


def worker(route: str, directory: str, slot_rows: int) -> dict[str, float]:
    import torch
    import transformers  # noqa: F401 - every route pays the same imports before the baseline

    from lightning_embinit.init.sources import SourceRequest, resolve_source
    from lightning_embinit.init.sources.hf import local_fetch
    from lightning_embinit.init.sources.hf_weights import locate_embedding

    baseline = rss_mib()
    start = time.perf_counter()
    if route == "ours: read embedding":
        weight = locate_embedding(local_fetch(directory)).read()
    elif route == "ours: hf source build":
        with open(os.path.join(directory, "config.json")) as handle:
            config = json.load(handle)
        words = config["vocab_size"] - 5  # tokens w0 … w{words-1}; a prime stride scatters the slot over the table
        tokens = ["[PAD]", "[UNK]"] + [f"w{(i * 7919) % words}" for i in range(slot_rows - 2)]
        request = SourceRequest(
            "slot", len(tokens), config["hidden_size"], tokens=tokens, generator=torch.Generator().manual_seed(0)
        )
        weight = resolve_source(f"hf:{directory}").build(request).weight
    else:
        from transformers import AutoModel

        model = AutoModel.from_pretrained(directory)
        weight = model.get_input_embeddings().weight.detach().clone()
        if route == "AutoModel, weights resident":
            with torch.no_grad():  # page in every weight, as any use of the model (or .to(device)) does
                sum(float(parameter.sum()) for parameter in model.parameters())
    checksum = float(weight[:5].double().sum())
    elapsed = time.perf_counter() - start
    return {
        "seconds": elapsed,
        "extra_peak_mib": peak_rss_mib() - baseline,
        "rows": weight.shape[0],
        "dim": weight.shape[1],
        "checksum": checksum,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--shard", default="300MB")
    parser.add_argument("--slot-rows", type=int, default=20000)
    parser.add_argument("--dir", default=None, help="reuse/keep the checkpoint here (default: a temp dir)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "build":
        build_checkpoint(args.dir, args.vocab, args.hidden, args.layers, args.shard)
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args.dir, args.slot_rows)))
        return
    with tempfile.TemporaryDirectory(prefix="embinit-bench-") as scratch:
        directory = args.dir or os.path.join(scratch, "checkpoint")
        if not os.path.exists(os.path.join(directory, "config.json")):
            start = time.perf_counter()  # in a subprocess: this process stays small, and children inherit its peak RSS
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    "build",
                    "--dir",
                    directory,
                    "--vocab",
                    str(args.vocab),
                    "--hidden",
                    str(args.hidden),
                    "--layers",
                    str(args.layers),
                    "--shard",
                    args.shard,
                ],
                check=True,
                capture_output=True,
            )
            print(f"built checkpoint in {time.perf_counter() - start:.1f} s")
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
        total = sum(os.path.getsize(os.path.join(directory, f)) for f in files)
        embedding_mib = args.vocab * args.hidden * 4 / 2**20
        print(
            f"checkpoint: {total / 2**30:.2f} GiB in {len(files)} shards; embedding {args.vocab}×{args.hidden} "
            f"float32 = {embedding_mib:.0f} MiB; slot for the source build: {args.slot_rows} rows"
        )
        results = {}
        routes = ("ours: read embedding", "ours: hf source build", "AutoModel → clone", "AutoModel, weights resident")
        for route in routes:
            command = [
                sys.executable,
                __file__,
                "--worker",
                route,
                "--dir",
                directory,
                "--slot-rows",
                str(args.slot_rows),
            ]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            results[route] = json.loads(output.strip().splitlines()[-1])
        auto = results["AutoModel, weights resident"]["extra_peak_mib"]
        print(f"\n{'route':<28} {'seconds':>8} {'extra peak MiB':>15} {'× embedding':>12} {'resident ÷ this':>16}")
        for route, result in results.items():
            peak = result["extra_peak_mib"]
            print(
                f"{route:<28} {result['seconds']:>8.2f} {peak:>15.0f} {peak / embedding_mib:>12.2f} "
                f"{auto / max(peak, 1e-9):>16.1f}"
            )
        ours = results["ours: read embedding"]["extra_peak_mib"]
        same = abs(results["ours: read embedding"]["checksum"] - results["AutoModel → clone"]["checksum"]) < 1e-9
        print(
            f"\nsame rows as AutoModel: {same}; target ≤ 1.5× embedding: {ours <= 1.5 * embedding_mib}; "
            f"target ≥ 5× below the full model resident: {auto >= 5 * ours}"
        )


if __name__ == "__main__":
    main()
