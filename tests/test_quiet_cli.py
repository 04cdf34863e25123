"""The package's commands leave out Lightning's litlogger/litmodels tips, torch's LeafSpec deprecation warning and the
progress bar's ``v_num``, and only while they run (issue 30)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

from lightning_embinit.commands import quickstart
from lightning_embinit.quiet import (
    RANK_ZERO_LOGGERS,
    TRANSFORMERS_LOSS_LOGGER,
    LightningTipFilter,
    UnnamedLossFilter,
    quiet_lightning,
    quiet_lightning_noise,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "configs" / "tied_lm.yaml"
LITLOGGER_TIP = (
    "💡 Tip: For seamless cloud logging and experiment tracking, try installing "
    "[litlogger](https://pypi.org/project/litlogger/) to enable LitLogger"
)
LEAFSPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("lightning.pytorch.utilities.rank_zero", logging.INFO, __file__, 1, message, None, None)


def test_the_filter_drops_the_advertising_tips_only():
    tip_filter = LightningTipFilter()
    assert not tip_filter.filter(record(LITLOGGER_TIP))
    assert not tip_filter.filter(
        record("💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels]")
    )
    assert tip_filter.filter(record("GPU available: False, used: False"))
    assert tip_filter.filter(record("`Trainer.fit` stopped: `max_steps=1` reached."))


def test_transformers_unnamed_loss_warning_is_left_out_inside_the_context_only():
    """transformers' "`loss_type=None` … unrecognized" record (GPT2LMHeadModel's loss): dropped by the filter the
    context puts on transformers' logger, and only there; other records of that logger pass."""
    logger = logging.getLogger(TRANSFORMERS_LOSS_LOGGER)
    unnamed = (
        "`loss_type=None` was set in the config but it is unrecognized. Using the default loss: `ForCausalLMLoss`."
    )

    def passes(message: str) -> bool:
        return bool(logger.filter(logging.LogRecord(logger.name, logging.WARNING, __file__, 1, message, None, None)))

    with quiet_lightning_noise():
        assert not passes(unnamed) and passes("Some weights of the model were not initialized")
    assert passes(unnamed) and not any(isinstance(f, UnnamedLossFilter) for f in logger.filters)


def test_the_noise_is_left_out_only_inside_the_context():
    loggers = [logging.getLogger(name) for name in RANK_ZERO_LOGGERS]
    before = [list(logger.filters) for logger in loggers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_lightning_noise():
            assert all(any(isinstance(f, LightningTipFilter) for f in logger.filters) for logger in loggers)
            warnings.warn(LEAFSPEC, FutureWarning, stacklevel=1)
            warnings.warn("another FutureWarning", FutureWarning, stacklevel=1)
        warnings.warn(LEAFSPEC, FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["another FutureWarning", LEAFSPEC]
    assert [list(logger.filters) for logger in loggers] == before


def test_importing_the_package_and_its_cli_installs_no_filter():
    code = (
        "import logging, warnings, lightning_embinit.commands.main, lightning_embinit.commands.quickstart\n"
        "from lightning_embinit.quiet import RANK_ZERO_LOGGERS\n"
        "print(any(logging.getLogger(n).filters for n in RANK_ZERO_LOGGERS),"
        " any('LeafSpec' in str(f[1] and f[1].pattern) for f in warnings.filters))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_embinit_fit_shows_no_tip_no_leafspec_warning_and_no_v_num(tmp_path):
    """A real one-step ``embinit fit`` with its progress bar, as a user runs it: both streams captured."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_embinit",
            "fit",
            "--config",
            str(CONFIG),
            "--model.init_args.architecture.d_model=32",
            "--model.init_args.architecture.num_layers=1",
            "--data.init_args.batch_size=4",
            "--data.init_args.max_size=200",
            "--trainer.max_steps=1",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "train_loss" in result.stdout  # the progress bar and its metrics are there
    for noise in ("litlogger", "litmodels", "LeafSpec", "v_num"):
        assert noise not in output


def test_a_python_fit_inside_quiet_lightning_prints_only_what_the_user_prints(tmp_path):
    """The docs' Python examples (``enable_model_summary=False``): Trainer's device lines, the tips and LeafSpec
    left out, the init report kept, in a fresh interpreter (warnings and handlers as a user has them); without the
    context they are there."""
    fit = (
        "import lightning as L\n"
        "from lightning_embinit import EmbeddingInitCallback as Init, LanguageModelDataModule, TiedEmbeddingLM\n"
        "from lightning_embinit import quiet_lightning\n"
        "data = LanguageModelDataModule(seq_len=16, batch_size=4, max_size=200)\n"
        "model = TiedEmbeddingLM(vocabulary=data.vocabulary, architecture={'d_model': 16, 'num_layers': 1})\n"
        "{wrap}trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,\n"
        "{indent}                    enable_model_summary=False, callbacks=[Init(seed=0)])\n"
        "{indent}trainer.fit(model, data)\n"
        "print('done')\n"
    )
    outputs = {}
    for quiet, wrap in ((True, "with quiet_lightning():\n    "), (False, "")):
        code = fit.replace("{wrap}", wrap).replace("{indent}", "    " if quiet else "")
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        outputs[quiet] = result.stdout + result.stderr
    quiet = outputs[True].splitlines()
    assert "done" in quiet and "Embedding initialization" in quiet, outputs[True]  # the package's report stays
    for noise in ("GPU available", "LeafSpec", "Seed set", "`Trainer.fit` stopped", "Tip"):
        assert noise not in outputs[True]
    for noise in ("GPU available", "LeafSpec"):
        assert noise in outputs[False]


class FlushRecorder(io.StringIO):
    """A stdout that records, at each flush, what had been written so far."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


def test_each_quickstart_setting_is_printed_and_flushed_as_it_finishes(monkeypatch):
    """Out of a terminal (a file, a pipe) the quick start's lines arrive one by one, not with the table."""
    stream = FlushRecorder()
    monkeypatch.setattr(sys, "stdout", stream)
    seen: list[str] = []

    def on_row(row: dict) -> None:
        quickstart.print_progress(row)
        seen.append(stream.flushed[-1])  # flushed by the time the next setting starts

    settings = ["tied-normal", "untied-normal"]
    with quiet_lightning(info=False):
        rows = quickstart.run(
            settings, steps=1, d_model=16, num_layers=1, seq_len=16, batch_size=4, max_vocab=300, on_row=on_row
        )
    assert [r["setting"] for r in rows] == settings
    assert len(seen) == 2 and seen[1].startswith(seen[0])
    assert seen[0].splitlines()[-1].strip().startswith("done tied-normal: initial loss") and "untied" not in seen[0]
    assert seen[1].splitlines()[-1].strip().startswith("done untied-normal: initial loss")


def test_the_quickstart_prints_progress_through_a_pipe_before_it_ends():
    """``make quickstart | tee log``: the first line comes while the quick start still runs."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lightning_embinit.commands.quickstart",
            "--settings",
            "tied-normal,untied-normal",
            "--steps",
            "1",
            "--d-model",
            "16",
            "--layers",
            "1",
            "--seq-len",
            "16",
            "--batch-size",
            "4",
            "--max-vocab",
            "300",
            "--skip-headline",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        first = process.stdout.readline()
        still_running = process.poll() is None
        rest = process.stdout.read()
    finally:
        process.wait(timeout=600)
    assert first.startswith("Part 1: training tied-normal, untied-normal") and still_running
    lines = rest.splitlines()
    done = [i for i, line in enumerate(lines) if line.strip().startswith("done ")]
    table = next(i for i, line in enumerate(lines) if line.startswith("Part 1 — "))
    assert len(done) == 2 and done[-1] < table and process.returncode == 0
