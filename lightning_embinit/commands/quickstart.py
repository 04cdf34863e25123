"""Quick start, offline, about two minutes on 2 CPU cores: [S]'s tied-embedding initial loss, then the headline.

Part 1 trains :class:`~lightning_embinit.models.TiedEmbeddingLM` (d = 256, so √d = 16 ≫ ln n) on the Lee news corpus
that gensim ships, once per setting (``tied-normal``, ``tied-log_n_over_d``, ``untied-normal``, ``half_swap-normal``),
and prints the measured initial loss beside ln n, the ln(e^{dσ} + n − 1) of Su, "Re-exploring Shared Embeddings at
the Output of Language Models" [S] (docs/concepts.md#tied-head), and the model's own estimate. Part 2 runs the
``smoke`` variant of the headline study (:func:`~lightning_embinit.studies.headline.headline_study`) and prints
``embinit report``'s table and ``embinit inspect``'s verdicts. docs/tied_lm.md#quick-start has the options and output.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L

from lightning_embinit.callbacks import EmbeddingInitCallback
from lightning_embinit.callbacks.initial_loss import InitialLossMonitor
from lightning_embinit.data import LanguageModelDataModule
from lightning_embinit.host_memory import keep_freed_memory_for_training
from lightning_embinit.models import CausalLMConfig, OptimizerConfig, TiedEmbeddingLM
from lightning_embinit.quiet import quiet_lightning

SETTINGS: dict[str, tuple[str, str]] = {  # name → (head, source given to EmbeddingInitCallback as is)
    "tied-normal": ("tied", "normal:1/sqrt(d)"),
    "tied-log_n_over_d": ("tied", "log_n_over_d"),
    "untied-normal": ("untied", "normal:1/sqrt(d)"),
    "half_swap-normal": ("tied_half_swap", "normal:1/sqrt(d)"),
}


def fit_setting(
    name: str,
    data: LanguageModelDataModule,
    architecture: CausalLMConfig,
    *,
    steps: int,
    lr: float,
    seed: int,
    precision: str = "32-true",
    callbacks: Sequence[L.Callback] = (),
) -> tuple[L.Trainer, InitialLossMonitor]:
    """Train one setting (``architecture`` with the setting's head) for ``steps`` optimizer steps in ``precision``,
    with ``callbacks`` beside the initializer and the initial-loss monitor; the fitted trainer and the monitor."""
    head, source = SETTINGS[name]
    L.seed_everything(seed, verbose=False)
    model = TiedEmbeddingLM(
        vocabulary=data.vocabulary,
        architecture=dataclasses.replace(architecture, head=head),
        optimizer=OptimizerConfig(lr=lr),
    )
    monitor = InitialLossMonitor(track_steps=steps, warn=False)
    trainer = L.Trainer(
        precision=precision,
        max_steps=steps,
        val_check_interval=steps,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EmbeddingInitCallback(source=source, seed=seed, verbose=False), monitor, *callbacks],
    )
    trainer.fit(model, data)
    return trainer, monitor


def run_setting(
    name: str, data: LanguageModelDataModule, architecture: CausalLMConfig, *, steps: int, lr: float, seed: int
) -> dict[str, float | str]:
    """Train one setting (:func:`fit_setting`); its table row."""
    source = SETTINGS[name][1]
    started = time.perf_counter()
    trainer, monitor = fit_setting(name, data, architecture, steps=steps, lr=lr, seed=seed)
    val_loss = float(trainer.callback_metrics["val_loss"])
    return {
        "setting": name,
        "source": source,
        "init_loss": monitor.init_loss,
        "ln_n": monitor.ln_vocab,
        "spec_prediction": math.nan if monitor.predicted is None else monitor.predicted,
        "model_estimate": math.nan if monitor.predicted_model is None else monitor.predicted_model,
        "val_loss": val_loss,
        "val_ppl": math.exp(val_loss),
        "seconds": time.perf_counter() - started,
    }


FORMULA_LABEL = "[S] ln(e^{dσ}+n−1)"
MODEL_LABEL = "model estimate"
LEGEND = (
    f"{FORMULA_LABEL}: [S]'s formula with σ the tied embedding's actual std over its non-padding rows "
    "(— for an untied head; for half_swap it is what a plain tie of the same table would start at). "
    f"{MODEL_LABEL}: TiedEmbeddingLM.initial_loss_prediction(length=seq_len), which also counts the "
    "positional rows, the input scale and the head (a decorrelated or untied head starts near ln n)."
)


def _number(value: float, width: int) -> str:
    return f"{'—':>{width}}" if math.isnan(value) else f"{value:>{width}.3f}"


def format_table(rows: Sequence[dict[str, float | str]]) -> str:
    """The quick start's table: one row per setting (:data:`LEGEND` explains the two predictions)."""
    formula, model = len(FORMULA_LABEL), len(MODEL_LABEL)
    src = max([13, *(len(str(r["source"])) for r in rows)])
    header = (
        f"{'setting':<19} {'source':<{src}} {'init loss':>9} {'ln n':>6} {FORMULA_LABEL:>{formula}} "
        f"{MODEL_LABEL:>{model}} {'val loss':>8} {'val ppl':>8} {'time':>6}"
    )
    lines = [
        f"{r['setting']:<19} {r['source']:<{src}} {r['init_loss']:>9.3f} {r['ln_n']:>6.3f} "
        f"{_number(r['spec_prediction'], formula)} {_number(r['model_estimate'], model)} "
        f"{r['val_loss']:>8.3f} {r['val_ppl']:>8.1f} {r['seconds']:>5.1f}s"
        for r in rows
    ]
    return "\n".join([header, "-" * len(header), *lines])


def part_one(
    *, d_model: int = 256, num_layers: int = 2, seq_len: int = 64, batch_size: int = 32, max_vocab: int | None = None
) -> tuple[LanguageModelDataModule, CausalLMConfig]:
    """The first part's data (the Lee corpus) and model shape."""
    data = LanguageModelDataModule(seq_len=seq_len, batch_size=batch_size, max_size=max_vocab)
    architecture = CausalLMConfig(
        d_model=d_model, num_heads=4, num_layers=num_layers, ffn_dim=2 * d_model, max_len=seq_len, positional="learned"
    )
    return data, architecture


def run(
    settings: Sequence[str] = tuple(SETTINGS),
    *,
    steps: int = 50,
    d_model: int = 256,
    num_layers: int = 2,
    seq_len: int = 64,
    batch_size: int = 32,
    max_vocab: int | None = None,
    lr: float = 1e-3,
    seed: int = 0,
    on_row: Callable[[dict[str, float | str]], None] | None = None,
) -> list[dict[str, float | str]]:
    """Run ``settings`` on the Lee corpus; the rows of the table, each also handed to ``on_row`` as it is done."""
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise ValueError(f"unknown settings {unknown}; choose from: {', '.join(SETTINGS)}")
    data, architecture = part_one(
        d_model=d_model, num_layers=num_layers, seq_len=seq_len, batch_size=batch_size, max_vocab=max_vocab
    )
    rows = []
    for name in settings:
        rows.append(run_setting(name, data, architecture, steps=steps, lr=lr, seed=seed))
        if on_row is not None:
            on_row(rows[-1])
    return rows


def print_progress(row: dict[str, float | str]) -> None:
    """One line about a finished setting, flushed at once (a pipe or a file sees it before the table)."""
    print(
        f"  done {row['setting']}: initial loss {row['init_loss']:.3f} (ln n {row['ln_n']:.3f}), "
        f"val loss {row['val_loss']:.3f}, {row['seconds']:.1f}s",
        flush=True,
    )


def headline_verdict(config: Path) -> str:
    """``embinit inspect --config <config>``'s verdict on one trial's start, with the countermeasures of
    each problem."""
    from lightning_embinit.commands.inspect import build_parser, run_inspection

    result = run_inspection(build_parser().parse_args(["--config", str(config)]))
    lines = ["sound" if result["verdict"] == "ok" else "fix the start before training"]
    lines += [
        f"  slot {row['name']!r}: {problem['problem']}; countermeasures: {problem['countermeasures']}"
        for row in result["slots"]
        for problem in row["problems"]
    ]
    return "\n".join(lines)


def run_headline(results: str | Path, *, variant: str = "smoke") -> dict[str, Any]:
    """Run the headline study's ``variant`` into ``results`` and report it: ``embinit report``'s result
    (:func:`~lightning_embinit.studies.report.write_report`) with ``verdicts`` (setting → seed 0's verdict) added."""
    from lightning_embinit.studies import run_study, write_report
    from lightning_embinit.studies.headline import HEADLINE_METRICS, headline_study
    from lightning_embinit.studies.records import available_cores, run_dir
    from lightning_embinit.studies.spec import trial_id

    study = headline_study()
    records = run_study(study, results, variant=variant, workers=min(2, available_cores()))
    failed = [r["trial_id"] for r in records if r.get("status") != "done"]
    if failed:
        raise RuntimeError(
            f"headline trials failed: {', '.join(failed)}; their logs are under {Path(results) / 'logs'}"
        )
    report = write_report(results, metrics=HEADLINE_METRICS)
    seed = min(study.variant(variant).seeds or study.seeds)
    report["verdicts"] = {
        setting: headline_verdict(run_dir(results, trial_id(setting, seed)) / "config.yaml")
        for setting in study.setting_names()
    }
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: parse options, run both parts, print their tables; 0 on success."""
    parser = argparse.ArgumentParser(
        prog="python -m lightning_embinit.commands.quickstart", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help=f"part 1, comma-separated, from: {', '.join(SETTINGS)}"
    )
    parser.add_argument("--steps", type=int, default=50, help="part 1: optimizer steps per setting")
    for option, default in (("--d-model", 256), ("--layers", 2), ("--seq-len", 64), ("--batch-size", 32)):
        parser.add_argument(option, type=int, default=default)
    parser.add_argument(
        "--max-vocab", type=int, default=None, help="cap the vocabulary (default: all words seen twice)"
    )
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--results",
        default=os.path.join("runs", "quickstart-headline"),
        help="part 2: the headline study's results directory (default runs/quickstart-headline)",
    )
    parser.add_argument("--headline-variant", default="smoke", help="part 2: smoke (default), medium or full")
    parser.add_argument("--skip-headline", action="store_true", help="run part 1 only")
    args = parser.parse_args(argv)
    keep_freed_memory_for_training()
    started = time.perf_counter()
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    options = {
        name: getattr(args, name) for name in ("steps", "d_model", "seq_len", "batch_size", "max_vocab", "lr", "seed")
    }
    print(f"Part 1: training {', '.join(settings)} ({args.steps} steps each)", flush=True)
    with quiet_lightning(info=False):
        rows = run(settings, num_layers=args.layers, on_row=print_progress, **options)
    print(
        f"\nPart 1 — TiedEmbeddingLM d={args.d_model}, {args.layers} layers, {args.steps} steps, "
        "Lee corpus (gensim test data)"
    )
    print(format_table(rows))
    print(textwrap.fill(LEGEND, width=110))
    if not args.skip_headline:
        print(
            f"\nPart 2 — the headline study ({args.headline_variant}): "
            "a pre-trained start raw vs standardized vs Xavier",
            flush=True,
        )
        with quiet_lightning(info=False):
            report = run_headline(args.results, variant=args.headline_variant)
        print(report["markdown"])
        print("Verdicts of `embinit inspect` on each start (seed 0's config):")
        for setting, verdict in report["verdicts"].items():
            print(f"- {setting}: {verdict}")
        print(f"Report, CSVs and figures: {report['out_dir']}  (again: embinit report {args.results})")
    print(f"Total {time.perf_counter() - started:.0f}s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
