"""Time and peak memory of loading a big word-vector text file: first parse, cached reload, gensim.

Writes a random 400,000 × 300 word2vec text file (GloVe-like values, ~1.2 GB), then runs each
route in its own subprocess (peak RSS via ``ru_maxrss`` minus the process's RSS after imports):

- ``first parse``             — parse into an empty cache (``open_vector_file``),
- ``cached reload + gather N`` — reopen the cache entry (memory-mapped) and gather N random rows,
- ``cached source build N``   — ``resolve_source("file:...").build(...)`` for an N-token slot,
- ``gensim``                  — ``KeyedVectors.load_word2vec_format(path)``,
- ``first parse, numpy only`` — with ``--numpy-parse``: the parser without pandas' C reader.

each gathered at every size of ``--gather`` (default 1,000 and 20,000 rows), so the table shows
memory growing with the rows gathered rather than with the file. Target: cached reload + gather
of 20,000 rows ≤ 1 s.

    python benchmarks/bench_sources_vectors.py [--rows 400000] [--dim 300] [--gather 1000,20000] [--numpy-parse]
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


def write_vectors(path: str, rows: int, dim: int, seed: int = 0) -> None:
    """A word2vec text file of fixed-width values: ``0.ddddddd`` or ``-0.dddddd`` (9 characters)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(path, "wb") as handle:
        handle.write(f"{rows} {dim}\n".encode())
        for start in range(0, rows, 10000):
            count = min(10000, rows - start)
            digits = rng.integers(0, 10**7, size=(count, dim))
            negative = rng.random((count, dim)) < 0.5
            chars = np.empty((count, dim, 10), dtype=np.uint8)
            chars[..., 0] = np.where(negative, ord("-"), ord("0"))
            chars[..., 1] = np.where(negative, ord("0"), ord("."))
            chars[..., 2] = np.where(negative, ord("."), ord("0") + digits // 10**6 % 10)
            for k in range(6):
                chars[..., 3 + k] = ord("0") + (np.where(negative, digits // 10, digits) // 10 ** (5 - k)) % 10
            chars[..., 9] = ord(" ")
            chars[:, -1, 9] = ord("\n")
            block = chars.reshape(count, -1)
            handle.write(b"".join(b"w%d " % (start + i) + block[i].tobytes() for i in range(count)))


def worker(route: str, path: str, gather: int, total: int) -> dict[str, float]:
    import numpy as np
    import torch

    from lightning_embinit.init.sources import SourceRequest, resolve_source
    from lightning_embinit.init.sources.static import FileVectorsOptions, open_vector_file

    if route == "first parse, numpy only":
        sys.modules["pandas"] = None  # vector_file's `import pandas` raises ImportError: the numpy.fromstring route
    else:
        import pandas  # noqa: F401  (imported before the baseline, as vector_file imports it)
    from gensim.models import KeyedVectors

    rng = np.random.default_rng(1)
    baseline = rss_mib()
    start = time.perf_counter()
    if route.startswith("first parse"):
        table = open_vector_file(path, FileVectorsOptions(progress=False))
        rows = table.matrix.shape[0]
    elif route.startswith("cached reload + gather"):
        table = open_vector_file(path, FileVectorsOptions(progress=False))
        lookup = table.lookup()
        picked = table.gather(sorted(rng.choice(len(lookup), gather, replace=False).tolist()))
        rows = picked.shape[0]
    elif route.startswith("cached source build"):
        tokens = [f"w{i}" for i in rng.choice(total, gather, replace=False)]
        request = SourceRequest("slot", gather, 300, tokens=tokens, generator=torch.Generator().manual_seed(0))
        rows = resolve_source(f"file:{path}", progress=False).build(request).weight.shape[0]
    else:
        rows = len(KeyedVectors.load_word2vec_format(path, binary=False))
    return {"seconds": time.perf_counter() - start, "extra_peak_mib": peak_rss_mib() - baseline, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400000)
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--gather", default="1000,20000", help="comma-separated row counts to gather")
    parser.add_argument("--numpy-parse", action="store_true", help="also time the parser without pandas")
    parser.add_argument("--skip-gensim", action="store_true")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.path, int(args.gather), args.rows)))
        return
    with tempfile.TemporaryDirectory(prefix="embinit-bench-vectors-") as scratch:
        path = os.path.join(scratch, "vectors.txt")
        start = time.perf_counter()
        write_vectors(path, args.rows, args.dim)
        print(
            f"wrote {args.rows}×{args.dim} text vectors, {os.path.getsize(path) / 2**30:.2f} GiB, "
            f"in {time.perf_counter() - start:.1f} s; float32 matrix = {args.rows * args.dim * 4 / 2**20:.0f} MiB"
        )
        sizes = [int(size) for size in args.gather.split(",")]
        routes = ["first parse"] + [
            f"{kind} {size}" for kind in ("cached reload + gather", "cached source build") for size in sizes
        ]
        routes += ["first parse, numpy only"] if args.numpy_parse else []
        routes += [] if args.skip_gensim else ["gensim load_word2vec_format"]
        results = {}
        for route in routes:
            cache = os.path.join(scratch, "cache-numpy" if "numpy" in route else "cache")
            env = {**os.environ, "EMBINIT_CACHE_DIR": cache}
            size = route.rsplit(" ", 1)[-1] if route.startswith("cached") else "0"
            command = [
                sys.executable,
                __file__,
                "--worker",
                route,
                "--path",
                path,
                "--gather",
                size,
                "--rows",
                str(args.rows),
            ]
            output = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
            results[route] = json.loads(output.strip().splitlines()[-1])
        print(f"\n{'route':<34} {'seconds':>8} {'extra peak MiB':>15} {'rows':>8}")
        for route, result in results.items():
            print(f"{route:<34} {result['seconds']:>8.2f} {result['extra_peak_mib']:>15.0f} {result['rows']:>8}")
        reload = results[f"cached reload + gather {max(sizes)}"]["seconds"]
        print(f"\ntarget: cached reload + gather of {max(sizes)} rows ≤ 1 s: {reload <= 1.0} ({reload:.2f} s)")


if __name__ == "__main__":
    main()
