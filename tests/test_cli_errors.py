"""A refused config or a failed run ends ``embinit`` with one readable line and a non-zero status.

jsonargparse reports a refused class with the whole value it refused: for a model linked to the datamodule's
vocabulary or tokenizer, thousands of tokens before the one line that matters. The commands print the reason
(key, class, message) on one line, with long values summarized by kind, size and first entries.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_embinit.commands import main as cli
from lightning_embinit.commands.lightning_cli import error_summary, summarize_values
from lightning_embinit.models import TiedEmbeddingLM

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "configs" / "tied_lm.yaml"
SMALL = [
    "--model.init_args.architecture.d_model=32",
    "--model.init_args.architecture.num_layers=1",
    "--data.init_args.batch_size=4",
    "--data.init_args.max_size=200",
    "--trainer.enable_progress_bar=false",
]
VOCABULARY = ["<pad>", "(", "[", "{", "'", '"', "\\", "it's", "a, b", *(f"word{i}" for i in range(3000))]


def console_script(name: str) -> str:
    """The installed console script ``name`` (next to this interpreter, else on PATH)."""
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.exists() else shutil.which(name)
    assert path, f"console script {name} is not installed: pip install -e ."
    return path


def test_a_long_list_is_summarized_by_kind_size_and_first_entries():
    text = f"Given value: {VOCABULARY!r} and more"
    summary = summarize_values(text)
    assert summary == "Given value: [list of 3,009: '<pad>', '(', '[', …] and more"


def test_nested_long_values_are_summarized_inside_a_namespace():
    config = {"kind": "word", "version": 1, "tokens": VOCABULARY, "lowercase": True}
    text = f"Namespace(class_path='x.Model', init_args=Namespace(tokenizer={config!r}, d_model=50))"
    summary = summarize_values(text)
    assert summary.startswith("Namespace(2 arguments: class_path='x.Model', init_args=Namespace(2 arguments: ")
    assert "word1" not in summary and len(summary) < 300
    assert (
        summarize_values(repr(config))
        == "{dict of 4 keys: 'kind': 'word', 'version': 1, 'tokens': [list of 3,009: '<pad>', '(', '[', …], …}"
    )


def test_short_values_and_prose_are_kept_whole():
    text = "d_model=50 is not divisible by num_heads=8 [K]'s (default) {x: 1}; it's [1, 2]"
    assert summarize_values(text) == text
    assert summarize_values("unclosed [" + "x" * 500) == "unclosed [" + "x" * 500


def test_a_jsonargparse_union_report_is_reduced_to_its_reason():
    report = (
        "Does not validate against any of the Union subtypes\n"
        "Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]\n"
        "Errors:\n"
        "  - d_model=50 is not divisible by num_heads=8: change d_model or num_heads\n"
        "  - Expected a <class 'NoneType'>\n"
        "Given value type: <class 'jsonargparse._namespace.Namespace'>\n"
        f"Given value: Namespace(class_path='pkg.Classifier', init_args=Namespace(vocabulary={VOCABULARY!r}))"
    )
    assert (
        error_summary(ValueError(report))
        == "pkg.Classifier: d_model=50 is not divisible by num_heads=8: change d_model or num_heads"
    )


def test_the_issues_d_model_error_is_one_line_from_the_console_script(tmp_path):
    """`embinit fit` with d_model 50 and 4 heads: status 2, the reason on one line, no traceback, no vocabulary."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("EMBINIT_DEBUG", None)
    result = subprocess.run(
        [
            console_script("embinit"),
            "fit",
            "--config",
            str(CONFIG),
            "--model.init_args.architecture.d_model",
            "50",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "embinit fit: error: lightning_embinit.models.TiedEmbeddingLM: d_model=50 is not divisible by "
        "num_heads=4: change d_model or num_heads"
    ]
    assert "Traceback" not in result.stderr and "'<pad>'" not in result.stderr and len(result.stderr) < 1000


def test_a_refused_argument_is_one_line_naming_the_key(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["fit", "--config", str(CONFIG), "--model.init_args.architecture.d_model", "abc"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "embinit fit: error: model: lightning_embinit.models.TiedEmbeddingLM: architecture.d_model: Expected a "
        "<class 'int'>. Got value: abc (`embinit fit --help` lists the options)"
    ]


def test_inspect_reports_a_refused_config_on_one_line(capsys):
    assert (
        cli.main(
            [
                "inspect",
                "--config",
                str(CONFIG),
                "--model.init_args.architecture.d_model",
                "50",
                "--data.init_args.max_size",
                "200",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "error" in line] == [
        "embinit inspect: error: lightning_embinit.models.TiedEmbeddingLM: d_model=50 is not divisible by num_heads=4: "
        "change d_model or num_heads"
    ]
    assert len(err) < 500


def test_a_failed_run_is_one_line_with_status_1_and_the_traceback_on_request(tmp_path, monkeypatch, capsys):
    def broken_step(self, batch, batch_idx):
        raise RuntimeError("the loss went to pieces")

    monkeypatch.setattr(TiedEmbeddingLM, "training_step", broken_step)
    monkeypatch.delenv("EMBINIT_DEBUG", raising=False)
    args = ["fit", "--config", str(CONFIG), *SMALL, "--trainer.max_steps=1", f"--trainer.default_root_dir={tmp_path}"]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "error" in line] == [
        "embinit fit: error: RuntimeError: the loss went to pieces (EMBINIT_DEBUG=1 shows the traceback)"
    ]
    monkeypatch.setenv("EMBINIT_DEBUG", "1")
    with pytest.raises(RuntimeError, match="went to pieces"):
        cli.main(args)


def test_an_abbreviated_option_is_refused_naming_it_not_taken_for_the_full_one(capsys):
    for args in (["--trainer.max_step", "5"], ["--trainer.max_step=5"], ["--trainer.max_epoch", "1"]):
        with pytest.raises(SystemExit) as exit:  # --print_config: were it accepted, nothing would train
            cli.main(["fit", "--config", str(CONFIG), *args, "--print_config"])
        err = capsys.readouterr().err
        assert exit.value.code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"embinit fit: error: unrecognized arguments: {args[0]}")
    with pytest.raises(SystemExit) as exit:
        cli.main(["validate", "--config", str(CONFIG), "--ckpt", "x.ckpt"])
    assert exit.value.code == 2 and "unrecognized arguments: --ckpt x.ckpt" in capsys.readouterr().err
