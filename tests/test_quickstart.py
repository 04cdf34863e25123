"""The quick start and the example CLI config, shrunk to seconds."""

import logging
import math
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch import LightningDataModule, LightningModule

from lightning_embinit.commands import main as cli
from lightning_embinit.commands.quickstart import LEGEND, format_table, main, run
from lightning_embinit.data import LanguageModelDataModule
from lightning_embinit.models import TiedEmbeddingLM
from lightning_embinit.studies import Study, headline, read_records
from lightning_embinit.vocabulary import Vocabulary

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "configs" / "tied_lm.yaml"

SHARED_DIRECTIONS = ("centered", "abtt", "whitened")  # the headline study's word2vec settings with them removed


def test_quickstart_table_shows_the_tied_initial_loss_gap(capsys):
    level = logging.getLogger("lightning.pytorch").level
    rows = run(steps=2, d_model=128, num_layers=1, seq_len=32, batch_size=8)
    table = format_table(rows) + LEGEND
    assert [r["setting"] for r in rows] == ["tied-normal", "tied-log_n_over_d", "untied-normal", "half_swap-normal"]
    for row in rows:
        assert row["setting"] in table and row["ln_n"] > math.log(4000)  # the Lee vocabulary, words seen twice
        assert abs(row["init_loss"] - row["model_estimate"]) / row["init_loss"] < 0.03
        assert row["val_ppl"] == pytest.approx(math.exp(row["val_loss"]))
    tied, log_n, untied, half_swap = rows
    # [S]'s ln(e^{dσ} + n − 1) from the table's σ: right for the plain tie, absent untied,
    # and for the half swap the start a plain tie would have had
    for row in (tied, log_n):
        assert abs(row["init_loss"] - row["spec_prediction"]) / row["init_loss"] < 0.03
    assert math.isnan(untied["spec_prediction"]) and half_swap["spec_prediction"] > half_swap["init_loss"] + 2
    assert tied["spec_prediction"] == pytest.approx(math.sqrt(128), rel=0.02)  # dσ with σ = 1/√d
    assert "[S] ln(e^{dσ}+n−1)" in table and "model estimate" in table and "initial_loss_prediction" in table
    assert tied["init_loss"] > tied["ln_n"] + 2  # ≈ √128 ≈ 11.3 against ln n ≈ 8.3
    assert log_n["init_loss"] < tied["ln_n"] + 1.0 and untied["init_loss"] < tied["ln_n"] + 0.5
    assert half_swap["init_loss"] < tied["ln_n"] + 1.0
    assert logging.getLogger("lightning.pytorch").level == level  # no leak into the caller's logging
    with pytest.raises(ValueError, match="unknown settings"):
        run(["tied-glove"])


def test_quickstart_headline_part_reports_raw_standardized_and_xavier(tmp_path, capsys, monkeypatch):
    """Part 2: the headline study's smoke, its report and the verdicts; main() returns 0, not data. The smoke trains
    8 steps here, not 80: what is checked is the start (its std, initial loss, verdict) and that the report holds it."""
    shipped = headline.headline_study

    def shorter_smoke() -> Study:
        study = shipped().to_dict()
        study["variants"]["smoke"]["overrides"].update(
            {
                "trainer.max_steps": 8,
                "trainer.val_check_interval": 4,
                "trainer.callbacks[InitialLossMonitor].init_args.track_steps": 8,
            }
        )
        return Study.from_dict(study)

    monkeypatch.setattr(headline, "headline_study", shorter_smoke)
    level = logging.getLogger("lightning.pytorch").level
    results = tmp_path / "headline"
    code = main(
        [
            "--settings",
            "tied-normal",
            "--steps",
            "2",
            "--d-model",
            "64",
            "--layers",
            "1",
            "--seq-len",
            "32",
            "--batch-size",
            "8",
            "--results",
            str(results),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and logging.getLogger("lightning.pytorch").level == level
    records = {r["trial_id"]: r for r in read_records(results)}
    settings = ("xavier", "word2vec_raw", "word2vec_xavier", *(f"word2vec_{t}_xavier" for t in SHARED_DIRECTIONS))
    assert sorted(records) == sorted(f"{s}-seed{seed}" for s in settings for seed in (0, 1))
    assert all(r["status"] == "done" and math.isfinite(r["metrics"]["best_val_loss"]) for r in records.values())
    std = {trial: r["monitors"]["embinit/tokens/std"] for trial, r in records.items()}
    for seed in (0, 1):  # standardized to Xavier's std (≈ √(2/(n+d))); raw word2vec's spread is several times wider
        assert std[f"word2vec_xavier-seed{seed}"] == pytest.approx(std[f"xavier-seed{seed}"], rel=0.02)
        assert std[f"word2vec_raw-seed{seed}"] > 2 * std[f"xavier-seed{seed}"]
        raw, xavier = records[f"word2vec_raw-seed{seed}"]["monitors"], records[f"xavier-seed{seed}"]["monitors"]
        assert raw["init_loss"] > xavier["init_loss"] + 5 and xavier["init_loss"] < xavier["ln_vocab"] + 0.5
        # the shared directions: standardizing keeps them, all-but-the-top and whitening remove them, and then the
        # model's loss on random tokens is that of i.i.d. rows of Xavier's std
        standardized = records[f"word2vec_xavier-seed{seed}"]["monitors"]
        assert standardized["embinit/tokens/top_share"] > 0.5 > 0.05 > xavier["embinit/tokens/top_share"]
        assert standardized["init_loss_random_tokens"] > xavier["init_loss_random_tokens"] + 5
        for transform in ("abtt", "whitened"):
            removed = records[f"word2vec_{transform}_xavier-seed{seed}"]["monitors"]
            assert removed["embinit/tokens/top_share"] < 0.05
            assert removed["init_loss_random_tokens"] == pytest.approx(xavier["init_loss_random_tokens"], abs=0.2)
    summary = out[out.index("Part 2") :]
    for setting in settings:
        assert f"| {setting} |" in summary
    assert "difference from xavier" in summary and "Welch" in summary
    verdicts = dict(line[2:].split(": ", 1) for line in summary.splitlines() if line.startswith("- ") and ": " in line)
    # raw word2vec: [S]'s formula flags it; standardized, the formula sees Xavier's std, but the rows still share
    # directions and the model's loss on random tokens (its own forward) flags it too
    assert verdicts["xavier"] == "sound"
    assert verdicts["word2vec_raw"] == verdicts["word2vec_xavier"] == "fix the start before training"
    assert verdicts["word2vec_abtt_xavier"] == verdicts["word2vec_whitened_xavier"] == "sound"
    assert "ln(e^(dσ) + n − 1)" in summary and "loss on random tokens" in summary
    assert (results / "report" / "summary.md").is_file() and (results / "report" / "curves_val_loss.png").is_file()


def test_example_config_runs_through_the_cli_and_the_checkpoint_keeps_the_vocabulary(tmp_path):
    cli.main(
        [
            "fit",
            "--config",
            str(CONFIG),
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=2",
            "--trainer.enable_progress_bar=false",
            "--model.init_args.architecture.d_model=64",
            "--model.init_args.architecture.num_layers=1",
            "--data.init_args.batch_size=4",
        ]
    )
    checkpoint = next(tmp_path.rglob("*.ckpt"))
    model = TiedEmbeddingLM.load_from_checkpoint(checkpoint)
    assert model.vocabulary[:5] == ["<pad>", "<unk>", "<bos>", "<eos>", "the"] and len(model.vocabulary) > 4000
    assert model.model.token_embedding.weight.shape == (len(model.vocabulary), 64)


def test_validate_a_checkpoint_on_new_text_with_the_checkpoints_vocabulary(tmp_path):
    """The datamodule takes the checkpoint's vocabulary (a file), so the CLI link hands the model the
    same token ids, not a vocabulary built from the new text (docs/tied_lm.md)."""
    small = [
        "--model.init_args.architecture.d_model=32",
        "--model.init_args.architecture.num_layers=1",
        "--data.init_args.batch_size=4",
    ]
    root = f"--trainer.default_root_dir={tmp_path}"
    cli.main(
        [
            "fit",
            "--config",
            str(CONFIG),
            root,
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=2",
            "--trainer.enable_progress_bar=false",
            "--data.init_args.max_size=200",
            *small,
        ]
    )
    checkpoint = next(tmp_path.rglob("*.ckpt"))
    model = TiedEmbeddingLM.load_from_checkpoint(checkpoint)
    vocab_file = tmp_path / "vocab.txt"
    Vocabulary(model.vocabulary).write(vocab_file)
    new_text = tmp_path / "new.txt"
    new_text.write_text("the fire crews said on tuesday that the bushfire near sydney was under control .\n" * 30)
    args = [
        "validate",
        "--config",
        str(CONFIG),
        f"--ckpt_path={checkpoint}",
        root,
        "--trainer.enable_progress_bar=false",
        f"--data.init_args.val_files={new_text}",
        f"--data.init_args.vocabulary={vocab_file}",
        *small,
    ]
    run = cli.EmbinitCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
        auto_configure_optimizers=False,
    )
    assert run.model.vocabulary == model.vocabulary and len(model.vocabulary) == 200
    data = LanguageModelDataModule(val_files=str(new_text), vocabulary=model.vocabulary, seq_len=64, batch_size=4)
    expected = L.Trainer(logger=False, enable_progress_bar=False).validate(model, data, verbose=False)[0]["val_loss"]
    assert float(run.trainer.callback_metrics["val_loss"]) == pytest.approx(expected, rel=1e-6)


def test_validate_takes_the_vocabulary_from_the_checkpoint(tmp_path):
    """With --ckpt_path and no vocabulary given, the datamodule gets the checkpoint's (full Lee) vocabulary."""
    small = [
        "--model.init_args.architecture.d_model=32",
        "--model.init_args.architecture.num_layers=1",
        "--data.init_args.batch_size=4",
    ]
    root = f"--trainer.default_root_dir={tmp_path}"
    cli.main(
        [
            "fit",
            "--config",
            str(CONFIG),
            root,
            "--trainer.max_steps=1",
            "--trainer.val_check_interval=1",
            "--trainer.enable_progress_bar=false",
            *small,
        ]
    )
    checkpoint = next(tmp_path.rglob("*.ckpt"))
    trained = TiedEmbeddingLM.load_from_checkpoint(checkpoint)
    saved = trained.vocabulary
    new_text = tmp_path / "new.txt"
    new_text.write_text("a completely different text about zebras and quantum mechanics .\n" * 40)
    run = cli.EmbinitCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=[
            "validate",
            "--config",
            str(CONFIG),
            f"--ckpt_path={checkpoint}",
            root,
            "--trainer.enable_progress_bar=false",
            f"--data.init_args.val_files={new_text}",
            "--data.init_args.batch_size=4",  # the model's settings: the checkpoint's groups, not the config's
        ],
    )
    assert len(saved) > 4000 and run.datamodule.vocabulary == saved and run.model.vocabulary == saved
    assert (
        run.model.hparams.architecture == trained.hparams.architecture and trained.hparams.architecture["d_model"] == 32
    )
    assert math.isfinite(float(run.trainer.callback_metrics["val_loss"]))
