"""The `embinit` CLI's own behaviour: the progress bar of step-budgeted runs and the checkpoint-config guard."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import Callback, TQDMProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from lightning_embinit.callbacks.lightning_internals import LightningInternalsWarning
from lightning_embinit.callbacks.progress import StepBudgetProgressBar
from lightning_embinit.commands import main as cli
from lightning_embinit.commands.lightning_cli import ints_before_floats
from tests.host_models import TwoSlotHost, make_trainer, token_loader

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "configs" / "tied_lm.yaml"
SMALL = [
    "--model.init_args.architecture.d_model=32",
    "--model.init_args.architecture.num_layers=1",
    "--data.init_args.batch_size=4",
]


def parse_only(*args: str) -> cli.EmbinitCLI:
    return cli.EmbinitCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        run=False,
        args=["--config", str(CONFIG), *SMALL, *args],
        auto_configure_optimizers=False,
    )


def test_a_max_steps_run_counts_steps_not_epoch_minus_two(tmp_path):
    run = parse_only(f"--trainer.default_root_dir={tmp_path}")
    assert sum(isinstance(c, StepBudgetProgressBar) for c in run.trainer.callbacks) == 1

    class Titles(Callback):
        """Reads the bar's title as a user sees it, at every step of a real max_steps-only fit."""

        def __init__(self, bar: StepBudgetProgressBar) -> None:
            self.bar, self.seen = bar, []

        def on_train_batch_end(self, trainer, *args) -> None:
            self.seen.append(self.bar.progress.tasks[self.bar.train_progress_bar_id].description)

    bar = StepBudgetProgressBar()
    titles = Titles(bar)
    trainer = make_trainer(tmp_path, [bar, titles], max_steps=3, enable_progress_bar=True)
    trainer.fit(TwoSlotHost(), token_loader())
    assert trainer.max_epochs == -1
    assert titles.seen == ["Epoch 0 · step 1/3", "Epoch 0 · step 2/3", "Epoch 0 · step 3/3"]


def test_a_configured_progress_bar_is_kept(tmp_path):
    run = parse_only(
        f"--trainer.default_root_dir={tmp_path}", "--trainer.callbacks+=lightning.pytorch.callbacks.TQDMProgressBar"
    )
    assert any(isinstance(c, TQDMProgressBar) for c in run.trainer.callbacks)
    assert not any(isinstance(c, StepBudgetProgressBar) for c in run.trainer.callbacks)


def test_lightningcli_still_has_the_overridden_checkpoint_hook():
    assert callable(getattr(LightningCLI, "_parse_ckpt_path", None)), "LightningCLI renamed _parse_ckpt_path"


def test_a_skipped_checkpoint_hook_warns_instead_of_silently_using_new_text(tmp_path, monkeypatch):
    checkpoint = tmp_path / "fake.ckpt"
    checkpoint.write_bytes(b"not read")
    monkeypatch.setattr(cli.EmbinitCLI, "_parse_ckpt_path", lambda self: None)  # as if LightningCLI stopped calling it
    with pytest.raises(LightningInternalsWarning, match="checkpoint's vocabulary was not passed to the datamodule"):
        cli.EmbinitCLI(
            LightningModule,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            args=[
                "validate",
                "--config",
                str(CONFIG),
                *SMALL,
                f"--ckpt_path={checkpoint}",
                f"--trainer.default_root_dir={tmp_path}",
            ],
            auto_configure_optimizers=False,
        )


def test_embinit_inspect_is_routed_to_the_inspector(capsys):
    import json

    assert (
        cli.main(
            [
                "inspect",
                "--vocab-size",
                "500",
                "--dim",
                "64",
                "--tied",
                "--source",
                "normal:1/sqrt(d)",
                "--format",
                "json",
            ]
        )
        == 0
    )
    slot = json.loads(capsys.readouterr().out)["slots"][0]
    assert slot["num_embeddings"] == 500 and slot["embedding_dim"] == 64
    assert slot["predicted_initial_loss"] > slot["ln_vocab"] + 1  # ln(e^{dσ} + n − 1) with dσ = 8


RICH_FIRST = """
import contextlib, io, sys
import rich.console  # before Lightning, as in a Ray Tune trial: typing's cached union lists float first
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser
from lightning_embinit.commands.main import main

plain = LightningArgumentParser()
plain.add_lightning_class_args(Trainer, "trainer")
for given in sys.argv[2:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):  # --print_config exits
        main(["fit", "--config", sys.argv[1], f"--trainer.limit_val_batches={given}", "--print_config"])
    ours = next(line for line in out.getvalue().splitlines() if "limit_val_batches" in line).split(":")[1].strip()
    print(repr(plain.parse_args([f"--trainer.limit_val_batches={given}"]).trainer.limit_val_batches), ours)
"""


def test_an_integer_batch_limit_stays_an_integer_when_rich_was_imported_before_lightning():
    """``typing`` caches ``Union[float, int, None]`` and ``Union[int, float, None]`` as one object, so when rich
    (which Ray Tune imports) builds one first, Lightning's annotation lists float first and a plain LightningCLI
    parses ``limit_val_batches: 1`` (one batch) as 1.0 (every batch). ``embinit`` keeps what was given."""
    given = ["1", "2", "0.5", "1.0"]
    done = subprocess.run(
        [sys.executable, "-c", RICH_FIRST, str(CONFIG), *given], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines()]
    plain = [parsed for parsed, _ in rows]
    if plain == given:
        pytest.skip("with these rich, typing and Lightning versions, Lightning's union lists int first anyway")
    assert plain == ["1.0", "2.0", "0.5", "1.0"]  # the hazard is real in that process
    assert [ours for _, ours in rows] == given


def test_a_jsonargparse_that_hides_the_type_of_a_batch_limit_is_named_not_passed_over():
    parser = LightningArgumentParser()
    parser.add_argument("--trainer.limit_val_batches")  # a plain argparse action: no _typehint
    with pytest.raises(LightningInternalsWarning, match="an integer batch limit may parse as a float"):
        ints_before_floats(parser)


def test_validating_a_checkpoint_does_not_warn_that_the_checkpoint_dirpath_changed(tmp_path):
    """``embinit validate --ckpt_path``: ModelCheckpoint's state, restored into the new run's log directory, would
    warn that its dirpath changed; an evaluation writes no checkpoint, so the command leaves that warning out."""
    root = f"--trainer.default_root_dir={tmp_path}"
    fit = ["fit", "--config", str(CONFIG), root, "--trainer.max_steps=1", "--trainer.val_check_interval=1"]
    assert cli.main([*fit, "--trainer.limit_val_batches=1", *SMALL]) == 0
    checkpoint = next(tmp_path.rglob("*.ckpt"))
    validate = ["validate", "--config", str(CONFIG), root, f"--ckpt_path={checkpoint}", "--trainer.limit_val_batches=1"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main([*validate, *SMALL]) == 0
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "dirpath has changed" in m], messages
    assert len(list(tmp_path.rglob("version_1"))) == 1  # the validation ran as a new run beside the fit's
