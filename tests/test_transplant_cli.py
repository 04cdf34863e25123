"""``embinit transplant``: a save_pretrained directory in and out (the new tokenizer beside it), a checkpoint of the
package's systems in and out, and every refusal as one line on stderr with exit status 2 before anything is written."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
import transformers as T

from lightning_embinit import TiedEmbeddingLM
from lightning_embinit.commands.main import main
from tests.transplant_helpers import ENGLISH, GERMAN, byte_level, tiny_llama, vocabulary


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("transplant")
    english, german = byte_level(ENGLISH), byte_level(GERMAN)
    model = tiny_llama(len(english), seed=4)
    model.save_pretrained(root / "model")
    english.save_pretrained(root / "model")
    german.save_pretrained(root / "german")
    tiny_llama(len(german), seed=5).save_pretrained(root / "donor")
    tiny_llama(len(german), seed=6).save_pretrained(root / "bare")  # no tokenizer beside it
    german.save_pretrained(root / "donor")
    (root / "texts.txt").write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
    return root


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["transplant", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("method", ["pieces", "omp:4"])
def test_a_model_directory_in_and_out(folders, capsys, tmp_path, method):
    output = tmp_path / "out"
    extra = ["--donor", folders / "donor"] if method.startswith("omp") else []
    status, out, err = run(
        capsys,
        "--model",
        folders / "model",
        "--tokenizer",
        folders / "german",
        "--output",
        output,
        "--method",
        method,
        *extra,
    )
    assert status == 0, err
    assert "Tokenizer transplant" in out and f"wrote {output}" in out
    model = T.AutoModelForCausalLM.from_pretrained(output)
    tokenizer = T.AutoTokenizer.from_pretrained(output)
    assert model.config.vocab_size == len(tokenizer) == len(T.AutoTokenizer.from_pretrained(folders / "german"))
    report = json.loads((output / "transplant_report.json").read_text())
    assert report["built_by"].get(method.split(":")[0] if method == "pieces" else method, 0) > 0
    trained = T.AutoModelForCausalLM.from_pretrained(folders / "model")
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, trained.model.layers[0].mlp.up_proj.weight)


def test_refusals_are_one_line_and_exit_2(folders, capsys, tmp_path):
    model, german = folders / "model", folders / "german"
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("keep")

    def args(*extra, model=model, tokenizer=german, output=tmp_path / "o"):
        return ["--model", model, "--tokenizer", tokenizer, "--output", output, *extra]

    cases = {
        "is --model": args(output=model),
        "exists and is not empty": args(output=full),
        "no such file or directory": args(model=tmp_path / "none"),
        "unknown transplant method 'fvt'": args("--method", "fvt"),
        "needs --donor": args("--method", "omp"),
        "needs --texts": args("--method", "focus"),
        "--fallback omp needs --donor": args("--fallback", "omp"),
        "unknown kinds": args("--match", "fuzzy"),
        "unknown option --out; did you mean --output?": [*args()[:4], "--out", tmp_path / "o"],
        "--tokenizer": args(tokenizer=tmp_path / "nowhere"),
        "no tokenizer beside its weights": args(model=folders / "bare"),
    }
    for expected, arguments in cases.items():
        status, out, err = run(capsys, *arguments)
        assert status == 2 and expected in err and len(err.strip().splitlines()) == 1, (expected, err)
    assert not (tmp_path / "o").exists() and (full / "x").read_text() == "keep"
    status, _, err = run(
        capsys, "--model", model, "--tokenizer", german, "--output", full, "--overwrite", "--method", "mean"
    )
    assert status == 0, err


def test_a_checkpoint_of_the_packages_system_in_and_out(folders, capsys, tmp_path):
    english = byte_level(ENGLISH)
    tokens = [t for t, _ in sorted(english.get_vocab().items(), key=lambda item: item[1])]
    torch.manual_seed(0)
    model = TiedEmbeddingLM(vocabulary=tokens, architecture={"d_model": 16, "num_heads": 2, "num_layers": 1})
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(tmp_path / "lm.ckpt")
    english.save_pretrained(tmp_path / "english")
    status, out, err = run(
        capsys,
        "--model",
        tmp_path / "lm.ckpt",
        "--tokenizer",
        folders / "german",
        "--old-tokenizer",
        tmp_path / "english",
        "--output",
        tmp_path / "new.ckpt",
    )
    assert status == 0, err
    again = TiedEmbeddingLM.load_from_checkpoint(tmp_path / "new.ckpt")
    german = T.AutoTokenizer.from_pretrained(folders / "german")
    assert again.vocabulary == [t for t, _ in sorted(german.get_vocab().items(), key=lambda item: item[1])]
    assert again.model.token_embedding.weight.shape[0] == len(german)
    old_index = english.get_vocab()
    same = [(i, old_index[t]) for i, t in enumerate(again.vocabulary) if t in old_index]
    assert all(
        torch.equal(again.model.token_embedding.weight[i], model.model.token_embedding.weight[j]) for i, j in same
    )
    with torch.no_grad():
        assert again(torch.tensor([[1, 2, 3]])).shape[-1] == len(german)
    checkpoint = torch.load(tmp_path / "new.ckpt", weights_only=False)
    assert checkpoint["embinit"]["slots"]["tokens"]["tokens"] == again.vocabulary


def test_descriptions_from_a_file(folders, capsys, tmp_path):
    german = T.AutoTokenizer.from_pretrained(folders / "german")
    english = T.AutoTokenizer.from_pretrained(folders / "model")
    token = next(t for t in german.get_vocab() if t.startswith("Ġ") and t not in english.get_vocab() and len(t) > 4)
    (tmp_path / "descriptions.tsv").write_text(f"{token}\ta man rides\n", encoding="utf-8")
    (tmp_path / "bad.tsv").write_text("no tab here\n", encoding="utf-8")
    args = ["--model", folders / "model", "--tokenizer", folders / "german", "--method", "description"]
    status, _, err = run(capsys, *args, "--descriptions", tmp_path / "bad.tsv", "--output", tmp_path / "o")
    assert status == 2 and "line 1: expected token<TAB>text" in err and not (tmp_path / "o").exists()
    status, _, err = run(capsys, *args, "--descriptions", tmp_path / "descriptions.tsv", "--output", tmp_path / "o")
    assert status == 0, err
    report = json.loads((tmp_path / "o" / "transplant_report.json").read_text())
    assert report["built_by"]["description"] == 1 and report["built_by"]["mean (fallback)"] == report["built"] - 1
    model, trained = (
        T.AutoModelForCausalLM.from_pretrained(tmp_path / "o"),
        T.AutoModelForCausalLM.from_pretrained(folders / "model"),
    )
    pieces = english(" a man rides", add_special_tokens=False)["input_ids"]
    expected = trained.model.embed_tokens.weight[pieces].double().mean(0).float()
    torch.testing.assert_close(model.model.embed_tokens.weight[german.convert_tokens_to_ids(token)], expected)


def test_paths_with_a_tilde_are_expanded_for_every_use(folders, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(folders))
    status, out, err = run(
        capsys, "--model", "~/model", "--tokenizer", "~/german", "--output", tmp_path / "o", "--method", "mean"
    )
    assert status == 0, err
    assert T.AutoModelForCausalLM.from_pretrained(tmp_path / "o").config.vocab_size == len(
        T.AutoTokenizer.from_pretrained(folders / "german")
    )


def test_a_checkpoints_old_tokenizer_may_be_a_saved_tokenizer_json(folders, capsys, tmp_path):
    """What ``build_tokenizer`` reads: a directory, or the package tokenizer's saved ``.json``; the same model out."""
    from lightning_embinit.text.tokenization import build_tokenizer

    english = byte_level(ENGLISH)
    english.save_pretrained(tmp_path / "english")
    build_tokenizer(str(tmp_path / "english")).save(tmp_path / "english.json")
    torch.manual_seed(0)
    model = TiedEmbeddingLM(
        vocabulary=vocabulary(english), architecture={"d_model": 16, "num_heads": 2, "num_layers": 1}
    )
    fit = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    fit.strategy.connect(model)
    fit.save_checkpoint(tmp_path / "lm.ckpt")
    args = ["--model", tmp_path / "lm.ckpt", "--tokenizer", folders / "german", "--old-tokenizer"]
    for old, output in ((tmp_path / "english.json", "a.ckpt"), (tmp_path / "english", "b.ckpt")):
        status, _, err = run(capsys, *args, old, "--output", tmp_path / output)
        assert status == 0, err
    a, b = (torch.load(tmp_path / name, weights_only=False)["state_dict"] for name in ("a.ckpt", "b.ckpt"))
    assert all(torch.equal(a[key], b[key]) for key in a)
    status, _, err = run(capsys, *args, tmp_path / "lm.ckpt", "--output", tmp_path / "c.ckpt")
    assert status == 2 and "neither a tokenizer directory nor a saved tokenizer .json" in err


def test_the_options_table_and_the_help_name_every_option_and_method():
    """docs/cli_reference.md's transplant section: the usage and the options table list every option the parser
    has; ``--method``'s help names every registered method."""
    import re
    from pathlib import Path

    from lightning_embinit.commands.transplant import _parser
    from lightning_embinit.init.transplant import METHODS

    text = (Path(__file__).parents[1] / "docs" / "cli_reference.md").read_text(encoding="utf-8")
    section = text.split("## `embinit transplant`")[1].split("\n## ")[0]
    parser = _parser()
    options = {o for action in parser._actions for o in action.option_strings if o.startswith("--")} - {"--help"}
    usage = section.split("```text")[1].split("```")[0]
    assert {option for option in options if option in usage} == options
    rows = set(re.findall(r"^\| `(--[a-z-]+)`", section, flags=re.MULTILINE))
    assert rows == options - {"--model", "--tokenizer", "--output"}
    method_help = next(action.help for action in parser._actions if "--method" in action.option_strings)
    assert all(name in method_help for name in METHODS)
