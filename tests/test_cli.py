"""The `embinit` CLI's own behaviour: the progress bar of step-budgeted runs and the checkpoint-config guard."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import Callback, TQDMProgressBar
from lightning.pytorch.cli import LightningCLI

from lightning_embinit import cli
from lightning_embinit.callbacks.lightning_internals import LightningInternalsWarning
from lightning_embinit.callbacks.progress import StepBudgetProgressBar
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


def _flat_copy_of(config_path: Path, tmp_path: Path) -> Path:
    """The example config with its model settings written flat under init_args, as 0.1.0.dev0 configs were."""
    import yaml

    from tests.example_configs import flat_init_args

    config = yaml.safe_load(config_path.read_text())
    config["model"]["init_args"] = flat_init_args(config["model"]["init_args"])
    assert "d_model" in config["model"]["init_args"] and "architecture" not in config["model"]["init_args"]
    path = tmp_path / f"flat_{config_path.name}"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("name", ["tied_lm", "kim_multi30k", "reinforced_proposed", "kim_sst2"])
def test_a_0_1_config_with_flat_model_settings_parses_as_the_grouped_one(name, tmp_path, capsys):
    import yaml

    grouped = CONFIG.parent / f"{name}.yaml"

    def printed_model_config(path: Path) -> dict:
        """The model section ``embinit fit --config <path> --print_config`` prints (parsed, nothing instantiated)."""
        with pytest.raises(SystemExit):
            cli.main(["fit", "--config", str(path), "--print_config"])
        return yaml.safe_load(capsys.readouterr().out)["model"]

    expected = printed_model_config(grouped)
    assert "d_model" in expected["init_args"]["architecture"] and "lr" in expected["init_args"]["optimizer"]
    assert printed_model_config(_flat_copy_of(grouped, tmp_path)) == expected


def test_group_model_settings_leaves_other_models_and_values_alone():
    from lightning_embinit.lightning_cli import group_model_settings

    mine = {"model": {"class_path": "my.Model", "init_args": {"d_model": 3}}}
    assert group_model_settings(mine) == {"model": {"class_path": "my.Model", "init_args": {"d_model": 3}}}
    assert group_model_settings("32") == "32" and group_model_settings([1]) == [1]
    ours = {
        "class_path": "TiedEmbeddingLM",
        "init_args": {"d_model": 3, "lr": 0.1, "vocab_size": 9, "architecture": {"num_layers": 2}},
    }
    assert group_model_settings(ours)["init_args"] == {
        "vocab_size": 9,
        "architecture": {"num_layers": 2, "d_model": 3},
        "optimizer": {"lr": 0.1},
    }
