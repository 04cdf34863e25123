"""Small EmbeddingSource implementations for tests."""

from __future__ import annotations

import torch

from lightning_embinit.init import Coverage, SourceMatrix, SourceRequest


class EvenRowsSource:
    """A stand-in pre-trained source: rows with an even index are 'found' (value 0.5 + row/100)."""

    name = "even-rows"
    is_pretrained = True

    def build(self, request: SourceRequest) -> SourceMatrix:
        rows = torch.arange(request.num_embeddings)
        found = rows % 2 == 0
        weight = torch.randn(request.num_embeddings, request.embedding_dim, generator=request.generator) * 0.01
        weight[found] = 0.5 + rows[found].unsqueeze(1).float() / 100
        return SourceMatrix(
            weight, found, self.name, Coverage(int(found.sum()), request.num_embeddings, {"exact": int(found.sum())})
        )


class BrokenSource:
    """Returns a matrix with NaN rows, or of the wrong shape."""

    is_pretrained = True

    def __init__(self, problem: str) -> None:
        self.name = f"broken-{problem}"
        self.problem = problem

    def build(self, request: SourceRequest) -> SourceMatrix:
        n, d = request.num_embeddings, request.embedding_dim
        if self.problem == "shape":
            n = n + 1
        weight = torch.zeros(n, d)
        if self.problem == "nan":
            weight[3, 1] = float("nan")
        if self.problem == "inf":
            weight[2, 0] = float("inf")
        found = torch.ones(n, dtype=torch.bool)
        coverage = Coverage(0 if self.problem == "coverage" else n, n)
        return SourceMatrix(weight, found, self.name, coverage)


class RankRecordingSource:
    """Delegates to a real source and leaves a file per rank that built (i.e. opened the source's files)."""

    is_pretrained = True

    def __init__(self, spec: str, directory: str) -> None:
        self.name = f"recorded {spec}"
        self.spec = spec
        self.directory = directory

    def build(self, request: SourceRequest) -> SourceMatrix:
        import os

        import torch.distributed as dist

        from lightning_embinit.init import resolve_source

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        with open(os.path.join(self.directory, f"built-by-rank{rank}"), "a") as marker:
            marker.write("1")
        return resolve_source(self.spec).build(request)


class CountingSource:
    """A random scheme that counts how often it was built."""

    is_pretrained = False

    def __init__(self, spec: str) -> None:
        from lightning_embinit.init import SchemeSource, get_scheme

        self.inner = SchemeSource(get_scheme(spec))
        self.name = spec
        self.builds = 0

    def build(self, request: SourceRequest) -> SourceMatrix:
        self.builds += 1
        return self.inner.build(request)


class RankMarkedScheme(RankRecordingSource):
    """A random scheme that leaves a file per rank that built it (so a test sees which ranks drew the numbers)."""

    is_pretrained = False

    def __init__(self, spec: str, directory: str) -> None:
        super().__init__(spec, directory)
        self.name = spec
