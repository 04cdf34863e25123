"""CorpusBLEU equals sacrebleu.corpus_bleu to 1e-9 for every smoothing method, any batching and 2-process DDP."""

import os
import random

import pytest
import sacrebleu
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lightning_embinit.models import CorpusBLEU
from tests.test_sharded_tables import free_port

SMOOTHING = [("none", None), ("floor", None), ("floor", 0.5), ("add-k", None), ("add-k", 2), ("exp", None)]


def corpus(seed: int, copied: bool = True, size: int = 16) -> tuple[list[str], list[str]]:
    """Sentences over a 4-word vocabulary. Random hypotheses (some empty or one word long) leave higher orders
    unmatched, so smoothing acts; ``copied``: two thirds are their reference with words replaced (all orders match)."""
    rng = random.Random(seed)
    words = "the cat sat mat".split()
    hypotheses, references = [], []
    for i in range(size):
        reference = rng.choices(words, k=rng.randint(1, 10))
        if copied and i % 3:
            hypothesis = [rng.choice(words) if rng.random() < 0.3 else word for word in reference]
        else:
            hypothesis = rng.choices(words, k=rng.choice([0, 1, 2, 5]))
        hypotheses.append(" ".join(hypothesis))
        references.append(" ".join(reference))
    return hypotheses, references


def batches(items: list[str], count: int) -> list[list[str]]:
    bounds = [len(items) * i // count for i in range(count + 1)]
    return [items[start:stop] for start, stop in zip(bounds, bounds[1:])]


def sacrebleu_score(hypotheses: list[str], references: list[str], method: str, value: float | None) -> float:
    return sacrebleu.corpus_bleu(hypotheses, [references], smooth_method=method, smooth_value=value).score


@pytest.mark.parametrize("copied", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("method", "value"), SMOOTHING)
def test_any_batching_equals_sacrebleu(seed, copied, method, value):
    hypotheses, references = corpus(seed, copied)
    expected = sacrebleu_score(hypotheses, references, method, value)
    direct = sacrebleu.BLEU(smooth_method=method, smooth_value=value)
    direct.corpus_score(hypotheses, [references])
    for count in (1, 2, 3, len(hypotheses)):
        metric = CorpusBLEU(smooth_method=method, smooth_value=value)
        for hyps, refs in zip(batches(hypotheses, count), batches(references, count)):
            metric.update(hyps, refs)
        score = metric.compute()
        assert score.dtype == torch.float64
        assert score.item() == pytest.approx(expected, abs=1e-9), f"{count} batches"
        assert metric.signature == str(direct.get_signature())


def test_unknown_smoothing_names_the_choices():
    with pytest.raises(ValueError, match="unknown smooth_method='add-one'; choose one of: none, floor, add-k, exp"):
        CorpusBLEU(smooth_method="add-one")


def _ddp_worker(rank: int, directory: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        scores = {}
        for copied in (True, False):
            hypotheses, references = corpus(5, copied)
            mine = slice(0, 11) if rank == 0 else slice(11, None)  # uneven shards, two batches each
            for method, value in SMOOTHING:
                metric = CorpusBLEU(smooth_method=method, smooth_value=value)
                metric.update(hypotheses[mine][:3], references[mine][:3])
                metric.update(hypotheses[mine][3:], references[mine][3:])
                scores[copied, method, value] = metric.compute().item()
        torch.save(scores, os.path.join(directory, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.ddp
@pytest.mark.timeout(30)
def test_two_process_sums_equal_sacrebleu_on_the_whole_corpus(tmp_path):
    # forked, as Lightning's ddp_fork: the workers start without importing torch again
    mp.start_processes(_ddp_worker, args=(str(tmp_path), free_port()), nprocs=2, start_method="fork")
    for rank in (0, 1):
        scores = torch.load(tmp_path / f"rank{rank}.pt")
        for copied in (True, False):
            hypotheses, references = corpus(5, copied)
            for method, value in SMOOTHING:
                expected = sacrebleu_score(hypotheses, references, method, value)
                assert scores[copied, method, value] == pytest.approx(expected, abs=1e-9), (rank, copied, method)
