"""Overhead of the diagnostics monitors per training step (target: ≤ 1 % at the default interval).

Each model trains for ``--steps`` steps through a Lightning ``Trainer``, alternately without and
with all three monitors (order flipped each repeat, so load from other processes hits both
alike). Every monitor hook is timed from the inside, which resolves costs far below the noise of
the end-to-end step time:

- ``EmbeddingVarianceMonitor``: one measurement (statistics of every slot + absorption on 1,024
  rows), taken here every 10 steps to get many samples; at the default ``every_n_steps=500`` the
  per-step cost is one measurement / 500.
- ``LearningSpeedMonitor``: its per-step counting (``extract_batch_size``) and its points
  (``check_on="train_step"``, every ``log_every_n_steps`` = 50 steps, as a per-step metric is plotted).
- ``LexicalProbe``: no per-step cost; its one-off cost at train start and end is given in seconds.

    python benchmarks/bench_monitors.py                       # TiedEmbeddingLM (+ TransformerSeq2Seq)
    python benchmarks/bench_monitors.py --steps 60 --repeats 3 --models tied_lm
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit import EmbeddingVarianceMonitor, LearningSpeedMonitor, LexicalProbe
from lightning_embinit.data import LanguageModelDataModule
from lightning_embinit.models import TiedEmbeddingLM

HOOKS = ("on_train_start", "on_train_batch_end", "on_train_epoch_end", "on_validation_end", "on_train_end")
DEFAULT_VARIANCE_INTERVAL = 500
MEASURE_EVERY = 10


class StepClock(Callback):
    """Wall time between consecutive batch starts (a whole training step, callbacks included)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._last: float | None = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.times.append(now - self._last)
        self._last = now


def time_hooks(callback: Callback, spent: dict[str, list[float]]) -> Callback:
    """Wrap the callback's hooks so every call's duration is appended to ``spent[hook]``."""
    for hook in HOOKS:
        original: Callable[..., Any] = getattr(callback, hook)

        @functools.wraps(original)
        def timed(*args: Any, _original: Callable[..., Any] = original, _hook: str = hook, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_hook].append(time.perf_counter() - start)

        setattr(callback, hook, timed)
    return callback


def tied_lm() -> tuple[Callable[[], L.LightningModule], Callable[[], Any], bool]:
    data = LanguageModelDataModule(seq_len=64, batch_size=32)
    make = lambda: TiedEmbeddingLM(  # noqa: E731
        vocabulary=data.vocabulary, architecture={"d_model": 256, "num_heads": 4, "num_layers": 2, "ffn_dim": 1024}
    )
    return make, lambda: data, True


def seq2seq() -> tuple[Callable[[], L.LightningModule], Callable[[], Any], bool]:
    from lightning_embinit.models import TransformerSeq2Seq

    vocab = 8000
    ids = torch.randint(4, vocab, (32 * 8, 33), generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(ids[:, :32], ids[:, 1:]), batch_size=32, shuffle=True)
    make = lambda: TransformerSeq2Seq(  # noqa: E731
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        architecture={
            "d_model": 256,
            "num_heads": 4,
            "num_encoder_layers": 3,
            "num_decoder_layers": 3,
            "ffn_dim": 1024,
        },
        bleu_every_n_validations=0,
    )
    return make, lambda: loader, False


MODELS = {
    "tied_lm": ("TiedEmbeddingLM d=256, 2 layers, n=4165, 32×64 tokens", tied_lm),
    "seq2seq": ("TransformerSeq2Seq d=256, 3+3 layers, 8k+8k vocab, 32×32 tokens", seq2seq),
}


def monitors(words: bool) -> dict[str, Callback]:
    chosen: dict[str, Callback] = {
        "EmbeddingVarianceMonitor": EmbeddingVarianceMonitor(every_n_steps=MEASURE_EVERY, figures=False, warn=False),
        "LearningSpeedMonitor": LearningSpeedMonitor("train_loss", 0.0, mode="min", check_on="train_step"),
    }
    if words:
        chosen["LexicalProbe"] = LexicalProbe(verbose=False, figures=False)
    return chosen


def fit(make: Callable[[], L.LightningModule], data: Any, steps: int, callbacks: list[Callback]) -> list[float]:
    clock = StepClock()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[*callbacks, clock],
    )
    torch.manual_seed(0)
    model = make()
    if isinstance(data, L.LightningDataModule):
        trainer.fit(model, datamodule=data)
    else:
        trainer.fit(model, train_dataloaders=data)
    return clock.times[2:]  # the first steps warm up allocators and kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--models", default="tied_lm,seq2seq")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{args.steps} steps × {args.repeats} repeats, alternating\n"
    )
    rows = []
    for key in args.models.split(","):
        title, build = MODELS[key]
        try:
            make, data, words = build()
        except ImportError as error:
            print(f"{title}: skipped ({error})")
            continue
        plain_steps, monitored_steps = [], []
        spent: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        steps_with_monitors = 0
        for repeat in range(args.repeats):
            order = (False, True) if repeat % 2 == 0 else (True, False)
            for with_monitors in order:
                if not with_monitors:
                    plain_steps += fit(make, data(), args.steps, [])
                    continue
                chosen = monitors(words)
                timed = [time_hooks(callback, spent[name]) for name, callback in chosen.items()]
                monitored_steps += fit(make, data(), args.steps, timed)
                steps_with_monitors += args.steps
        step = statistics.median(plain_steps)
        variance = spent["EmbeddingVarianceMonitor"]
        periodic = [t for t in variance["on_train_batch_end"] if t > 1e-4] or [0.0]  # the measuring calls
        one_measurement = statistics.median(periodic + variance["on_train_start"])
        speed = spent["LearningSpeedMonitor"]
        speed_per_step = sum(sum(v) for v in speed.values()) / steps_with_monitors
        lexical = spent.get("LexicalProbe", {})
        rows.append(
            (
                title,
                step,
                statistics.median(monitored_steps),
                one_measurement,
                speed_per_step,
                statistics.median(lexical["on_train_start"]) if lexical else None,
                statistics.median(lexical["on_train_end"]) if lexical else None,
            )
        )
    print(
        "| model | step (ms), no monitors | step (ms), all monitors | EmbeddingVarianceMonitor: one measurement (ms) "
        f"| per step at every_n_steps={DEFAULT_VARIANCE_INTERVAL} | LearningSpeedMonitor per step "
        "| LexicalProbe start / end (s) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for title, step, monitored, measurement, speed, lexical_start, lexical_end in rows:
        per_step = measurement / DEFAULT_VARIANCE_INTERVAL
        lexical = "—" if lexical_start is None else f"{lexical_start:.2f} / {lexical_end:.2f}"
        print(
            f"| {title} | {1e3 * step:.1f} | {1e3 * monitored:.1f} | {1e3 * measurement:.1f} "
            f"| {1e3 * per_step:.3f} ms ({100 * per_step / step:.3f} %) "
            f"| {1e3 * speed:.3f} ms ({100 * speed / step:.3f} %) "
            f"| {lexical} |"
        )


if __name__ == "__main__":
    main()
