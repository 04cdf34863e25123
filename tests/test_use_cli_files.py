"""``embinit translate|generate|classify``: their files and arguments. Every refusal is one line and exit status 2,
before the model is loaded; the output never overwrites the input; lines end at ``\\n`` only; stdin and files are
decoded alike; blank lines give empty lines without running the model; the help shows the defaults."""

from __future__ import annotations

import io
import json
import os
import re

import pytest
import torch

from lightning_embinit.commands import main as cli
from lightning_embinit.commands import study, use
from lightning_embinit.models import Seq2SeqModule, TiedEmbeddingLM
from lightning_embinit.models.prediction import Generation, continue_prompts
from lightning_embinit.text.prompts import prompt_batch
from lightning_embinit.text.text_tokenizer import WordTokenizer
from tests.use_checkpoints import use_checkpoints

WORDS = WordTokenizer("regex", lowercase=False)  # as the tiny LM's data split its text


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return use_checkpoints(tmp_path_factory)


def run(args, capsys, stdin: bytes | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """``embinit ARGS`` in this process: (status, stdout, stderr); a parser's refusal (SystemExit) is its status."""
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    try:
        status = cli.main(args)
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: a refusal must come before any work."""

    def loaded(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(use, "load_model", loaded)


def refused(args, capsys, problem: str) -> str:
    status, out, err = run(args, capsys)
    assert (status, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and problem in err, err
    return err


def test_the_output_is_never_the_input(checkpoints, tmp_path, capsys, no_model):
    source = tmp_path / "in.txt"
    source.write_text("the cat\n", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(source)
    os.link(source, tmp_path / "hard.txt")
    lm = checkpoints["lm"][0]
    for output in (str(source), str(tmp_path / "link.txt"), str(tmp_path / "hard.txt"), f"{tmp_path}/./in.txt"):
        refused(
            ["generate", "--ckpt_path", lm, "--input", str(source), "--output", output],
            capsys,
            f"--output {output} is the same file as --input {source}: writing it would destroy that file",
        )
    assert source.read_text(encoding="utf-8") == "the cat\n"
    refused(["generate", "--ckpt_path", lm, "--prompt", "a", "--output", lm], capsys, "same file as --ckpt_path")


def test_an_output_that_cannot_be_written_and_a_device_that_is_not_here_are_refused_first(
    checkpoints, tmp_path, capsys, monkeypatch, no_model
):
    lm = checkpoints["lm"][0]
    base = ["generate", "--ckpt_path", lm, "--prompt", "the cat"]
    refused([*base, "--output", str(tmp_path / "none" / "out.txt")], capsys, f"the directory {tmp_path / 'none'} does")
    refused([*base, "--output", str(tmp_path)], capsys, f"--output {tmp_path} is a directory; name a file")
    refused([*base, "--device", "gpu"], capsys, "--device 'gpu' is not a device; choose cpu, cuda, cuda:N, mps")
    refused([*base, "--device", "tpu:0"], capsys, "--device 'tpu:0' is not a device")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    err = refused([*base, "--device", "cuda"], capsys, "--device cuda: CUDA is not available here")
    assert err.startswith("embinit generate: error: ") and err.rstrip().endswith("use --device cpu")
    refused([*base, "--max-new-tokens", "-1"], capsys, "argument --max-new-tokens: expected an integer ≥ 0, got '-1'")
    assert not list(tmp_path.iterdir())  # nothing written


def test_lines_end_at_newline_only(checkpoints, tmp_path, capsys):
    path, model = checkpoints["lm"]
    lines = ["The cat\u2028sat", "A dog\x0cran", "Zebras\x85the", "the\x1cmat\x1dPark\x1ecat"]
    source = tmp_path / "in.txt"
    source.write_bytes(("\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:]) + "\n").encode("utf-8"))
    assert len("\n".join(lines).splitlines()) == 10  # str.splitlines would make 10 lines of these 4
    status, out, err = run(["generate", "--ckpt_path", path, "--input", str(source), "--max-new-tokens", "3"], capsys)
    assert (status, err) == (0, "")
    assert out.split("\n") == [*model.generate(lines, max_new_tokens=3, tokenize=WORDS), ""]


def test_standard_input_and_files_are_decoded_alike(checkpoints, tmp_path, capsys, monkeypatch):
    path, model = checkpoints["lm"]
    data = "The cat\nA d\xf6g ran\n".encode("latin-1")  # byte 11 (line 2) is not UTF-8
    source = tmp_path / "latin.txt"
    source.write_bytes(data)
    base = ["generate", "--ckpt_path", path, "--max-new-tokens", "2"]
    for args, stdin, where in (
        ([*base, "--input", str(source)], None, f"--input {source}"),
        (base, data, "standard input"),
    ):
        status, out, err = run(args, capsys, stdin, monkeypatch)
        assert (status, out) == (2, "") and err.splitlines() == [
            f"embinit generate: error: {where} is not utf-8 text: line 2, byte 11 (invalid start byte); give its "
            "encoding with --encoding (e.g. --encoding latin-1) or convert it to utf-8"
        ]
    expected = model.generate(["The cat", "A d\xf6g ran"], max_new_tokens=2, tokenize=WORDS)
    from_file = run([*base, "--encoding", "latin-1", "--input", str(source)], capsys)
    from_stdin = run([*base, "--encoding", "latin-1"], capsys, data, monkeypatch)
    assert from_file == from_stdin == (0, "\n".join(expected) + "\n", "")
    bom = b"\xef\xbb\xbfThe cat\n"  # a UTF-8 byte-order mark is not text
    assert (
        run(base, capsys, bom, monkeypatch)[1]
        == model.generate(["The cat"], max_new_tokens=2, tokenize=WORDS)[0] + "\n"
    )


def test_blank_lines_give_empty_lines_without_running_the_model(checkpoints, tmp_path, capsys, monkeypatch):
    path, model = checkpoints["seq2seq"]
    source = tmp_path / "de.txt"
    source.write_text("\nein hund läuft .\n   \n", encoding="utf-8")
    status, out, err = run(["translate", "--ckpt_path", path, "--input", str(source)], capsys)
    assert (status, err) == (0, "") and out.split("\n") == ["", *model.translate(["ein hund läuft ."]), "", ""]
    assert model.translate(["", " "]) == ["", ""]

    def decoded(*args, **kwargs):
        raise AssertionError("a blank line was run through the model")

    monkeypatch.setattr(Seq2SeqModule, "generate", decoded)
    monkeypatch.setattr(TiedEmbeddingLM, "forward", decoded)
    source.write_text("\n \n\t\n", encoding="utf-8")
    assert run(["translate", "--ckpt_path", path, "--input", str(source)], capsys) == (0, "\n\n\n", "")
    lm = checkpoints["lm"][0]
    assert run(["generate", "--ckpt_path", lm, "--input", str(source)], capsys) == (0, "\n\n\n", "")
    status, out, _ = run(["generate", "--ckpt_path", lm, "--input", str(source), "--format", "jsonl"], capsys)
    assert [json.loads(line) for line in out.splitlines()] == [
        {"prompt": text, "continuation": ""} for text in ("", " ", "\t")
    ]


def test_the_unknown_token_is_printed_as_is_unless_banned(checkpoints, capsys, monkeypatch):
    logits = torch.tensor([0.0, 5.0, 0.0, 1.0, 2.0])  # <pad> <unk> <bos> <eos> word: <unk> is the most likely

    def last_logits(context):
        return logits.clone()

    batch = prompt_batch(["a prompt"], lambda text: [4])
    roles = {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    options = {"roles": roles, "window": None, "device": torch.device("cpu")}
    kept = continue_prompts(batch, last_logits, str, generation=Generation(max_new_tokens=2), **options)
    banned = continue_prompts(batch, last_logits, str, generation=Generation(max_new_tokens=2, ban_unk=True), **options)
    assert kept[0]["continuation"] == "[1, 1]" and banned[0]["continuation"] == "[4, 4]"
    path, model = checkpoints["lm"]
    prompts = ["Zebras", "The cat"]
    for flags, ban in (([], False), (["--no-unk"], True)):
        status, out, _ = run(
            ["generate", "--ckpt_path", path, "--max-new-tokens", "4", *flags],
            capsys,
            b"Zebras\nThe cat\n",
            monkeypatch,
        )
        expected = model.generate(prompts, max_new_tokens=4, tokenize=WORDS, ban_unk=ban)
        assert status == 0 and out.splitlines() == expected
    assert "<unk>" not in out


def test_a_prompts_sample_does_not_depend_on_the_others(checkpoints):
    _, model = checkpoints["lm"]
    options = {"temperature": 1.5, "top_k": 5, "max_new_tokens": 6, "tokenize": WORDS}
    together = model.generate(["The cat", "A dog", "the mat"], seed=4, **options)
    assert together[1:] == [
        model.generate([text], seed=4 + k, **options)[0] for k, text in ((1, "A dog"), (2, "the mat"))
    ]
    assert len(set(model.generate(["The cat"] * 4, seed=4, **options))) > 1  # each row its own stream


@pytest.mark.parametrize(
    ("command", "defaults"),
    [
        ("translate", ["--batch-size BATCH_SIZE sentences decoded together (default: 64)"]),
        (
            "generate",
            [
                "--max-new-tokens MAX_NEW_TOKENS most tokens added (default: 20)",
                "--seed SEED prompt k samples with seed + k (default: 0)",
                "--temperature TEMPERATURE 0 (default): greedy",
            ],
        ),
        ("classify", ["--batch-size BATCH_SIZE sentences classified together (default: 64)", "(default: tsv)"]),
    ],
)
def test_the_help_shows_the_defaults(command, defaults, capsys):
    status, out, _ = run([command, "--help"], capsys)
    text = " ".join(out.split())
    assert status == 0 and all(default in text for default in defaults), text
    assert "a blank line gives an empty line" in text


def test_abbreviated_options_are_refused_by_name(capsys, no_model):
    refused(["translate", "--ckpt", "x.ckpt"], capsys, "unknown option --ckpt; did you mean --ckpt_path?")
    refused(
        ["generate", "--ckpt_path", "x", "--max-new", "3"],
        capsys,
        "unknown option --max-new; did you mean --max-new-tokens?",
    )
    refused(
        ["classify", "--ckpt_path", "x", "--form", "jsonl"], capsys, "unknown option --form; did you mean --format?"
    )
    for parser, abbreviated in (
        (study.report_parser(), ["results", "--ref", "a"]),
        (study.sweep_parser(), ["s.yaml", "--var", "smoke"]),
    ):
        assert parser.allow_abbrev is False
        with pytest.raises(SystemExit):
            parser.parse_args(abbreviated)
    assert re.search(r"unrecognized arguments: --var smoke", capsys.readouterr().err)
