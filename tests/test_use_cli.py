"""``embinit translate|generate|classify``: a tiny trained checkpoint on text from a file or stdin, to a file or
stdout, line for line the model's own method on the same input. Then their files and arguments: every refusal is one
line and exit status 2, before the model is loaded; the output never overwrites the input; lines end at ``\n`` only;
stdin and files are decoded alike; blank lines give empty lines without running the model; the help shows the
defaults."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess

import pytest
import torch

from lightning_embinit.commands import main as cli
from lightning_embinit.commands import study, use
from lightning_embinit.models import HuggingFaceLM, Seq2SeqModule, TiedEmbeddingLM
from lightning_embinit.models.prediction import Generation, continue_prompts
from lightning_embinit.text.prompts import prompt_batch
from lightning_embinit.text.text_tokenizer import WordTokenizer
from lightning_embinit.text.tokenization import build_tokenizer
from tests.test_cli_errors import console_script
from tests.translation_helpers import multi30k_lines
from tests.use_checkpoints import gpt2_checkpoint, use_checkpoints

WORDS = WordTokenizer("regex", lowercase=False)  # as the tiny LM's data split its text
REVIEWS = ["a gorgeous , witty , seductive movie .", "", "the story is a rambling mess ."]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name → (checkpoint path, the trained model in memory: the reference)."""
    return use_checkpoints(tmp_path_factory)


def run_main(args, capsys, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    status = cli.main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("name", ["seq2seq", "reinforced"])
def test_translate_a_file_to_a_file_is_the_models_own_translate(name, checkpoints, tmp_path, capsys):
    path, model = checkpoints[name]
    lines = multi30k_lines("test_2016_flickr", "de", 5, start=500)
    source, target = tmp_path / "de.txt", tmp_path / "en.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["translate", "--ckpt_path", path, "--input", str(source), "--output", str(target), "--beam-size", "2"]
    assert run_main(args, capsys) == (0, "", "")
    assert target.read_text(encoding="utf-8").splitlines() == model.translate(lines, beam_size=2)
    assert len(model.translate(lines, beam_size=2)) == 5


def test_translate_from_stdin_to_stdout_through_the_console_script(checkpoints):
    path, model = checkpoints["seq2seq"]
    lines = [*multi30k_lines("test_2016_flickr", "de", 3, start=600), ""]
    result = subprocess.run(
        [console_script("embinit"), "translate", "--ckpt_path", path, "--max-length", "6"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == model.translate(lines, max_len=6)


def test_generate_greedy_and_sampled_follow_the_models_generate(checkpoints, capsys, monkeypatch):
    path, model = checkpoints["lm"]
    words = WordTokenizer("regex", lowercase=False)  # as the LM's data split its text (lowercase=False)
    prompts = ["The cat", "A dog ran", "Zebras"]
    status, out, err = run_main(["generate", "--ckpt_path", path], capsys, "\n".join(prompts), monkeypatch)
    assert (status, err) == (0, "") and out.splitlines() == model.generate(prompts, tokenize=words)
    sampled = ["generate", "--ckpt_path", path, "--temperature", "1.5", "--top-k", "3", "--seed", "7"]
    status, out, _ = run_main([*sampled, "--max-new-tokens", "5"], capsys, "\n".join(prompts), monkeypatch)
    expected = model.generate(prompts, max_new_tokens=5, temperature=1.5, top_k=3, seed=7, tokenize=words)
    assert status == 0 and out.splitlines() == expected
    assert all(len(line.split()) <= 5 for line in expected)
    status, out, _ = run_main(["generate", "--ckpt_path", path, "--prompt", "The mat"], capsys)
    assert status == 0 and out.splitlines() == model.generate(["The mat"], tokenize=words)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A tiny GPT-2 HuggingFaceLM over MiniLM's tokenizer: (path, model)."""
    return gpt2_checkpoint(tmp_path_factory)


def test_generate_continues_a_hugging_face_lm_as_transformers_greedy_generate(gpt2, capsys, monkeypatch):
    path, model = gpt2
    tokenizer = model.tokenizer
    prompts = ["the cat sat", "a dog"]
    status, out, err = run_main(
        ["generate", "--ckpt_path", path, "--max-new-tokens", "6"], capsys, "\n".join(prompts), monkeypatch
    )
    assert (status, err) == (0, "")
    expected = []
    for prompt in prompts:  # transformers' own greedy search, pad and bos banned, ended by eos
        ids = torch.tensor([[tokenizer.eos_id, *tokenizer.encode(prompt)]])
        generated = model.model.generate(
            ids,
            do_sample=False,
            max_new_tokens=6,
            eos_token_id=tokenizer.eos_id,
            pad_token_id=tokenizer.pad_id,
            bad_words_ids=[[tokenizer.pad_id], [tokenizer.bos_id]],
        )
        expected.append(tokenizer.decode(generated[0, ids.shape[1] :].tolist()))
    assert out.splitlines() == expected and all(expected)  # continuations, not empty lines
    sampled = ["generate", "--ckpt_path", path, "--prompt", "a dog", "--temperature", "1.5", "--top-k", "3"]
    first, again = (run_main([*sampled, "--seed", "7"], capsys)[1] for _ in range(2))
    assert first == again and first.strip()
    options = {"max_new_tokens": 6, "temperature": 1.0, "top_k": 1, "seed": 3}
    assert model.generate(prompts, **options) == expected  # top-1 sampling is greedy


def test_generate_refuses_a_masked_hugging_face_lm(capsys):
    minilm = build_tokenizer("hf:minilm").to_config()
    bert = HuggingFaceLM(
        "bert", {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}, tokenizer=minilm
    )
    with pytest.raises(ValueError, match="objective='masked': train one with objective='causal'"):
        bert.generate(["a"], max_new_tokens=2, temperature=0.0, top_k=None, seed=0)


def test_temperature_zero_takes_the_most_likely_token_and_a_seed_fixes_a_sample(checkpoints):
    _, model = checkpoints["lm"]
    vocab = model.model.vocab
    logits = model(torch.tensor([[vocab.id("eos"), *vocab.encode(["The"])]]))[0, -1]
    logits[[vocab.pad_id, vocab.id("bos")]] = float("-inf")
    best = int(logits.argmax())
    expected = "" if best == vocab.id("eos") else vocab[best]
    assert model.generate(["The"], max_new_tokens=1, tokenize=str.split) == [expected]
    samples = [model.generate(["The cat"] * 3, temperature=2.0, seed=3) for _ in range(2)]
    assert samples[0] == samples[1]
    with pytest.raises(ValueError, match="temperature"):
        model.generate(["The"], temperature=-1.0)


@pytest.mark.parametrize("form", ["tsv", "jsonl"])
def test_classify_writes_labels_or_probabilities(form, checkpoints, tmp_path, capsys):
    path, model = checkpoints["classifier"]
    source = tmp_path / "reviews.txt"
    source.write_text("\n".join(REVIEWS) + "\n", encoding="utf-8")
    status, out, err = run_main(["classify", "--ckpt_path", path, "--input", str(source), "--format", form], capsys)
    assert (status, err) == (0, "")
    texts = [REVIEWS[0], REVIEWS[2]]  # the blank review is not classified: empty in, empty out
    first, last = model.classify(texts)
    if form == "tsv":
        assert out.split("\n") == [f"{first}\t{texts[0]}", "", f"{last}\t{texts[1]}", ""]
        return
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[1] == {"text": "", "label": None, "probabilities": None}
    assert [row["text"] for row in rows] == REVIEWS and [rows[0]["label"], rows[2]["label"]] == [first, last]
    probabilities = model.class_probabilities(texts)
    for row, expected in zip([rows[0], rows[2]], probabilities.tolist()):
        assert list(row["probabilities"]) == model.label_names
        assert list(row["probabilities"].values()) == pytest.approx(expected)
        assert sum(expected) == pytest.approx(1.0)


def test_a_checkpoint_of_another_class_names_its_class_and_command(checkpoints, tmp_path, capsys):
    classifier, _ = checkpoints["classifier"]
    status, out, err = run_main(["translate", "--ckpt_path", classifier, "--input", os.devnull], capsys)
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"embinit translate: error: --ckpt_path {classifier} holds a TransformerClassifier, not a "
        "TransformerSeq2Seq or ReinforcedTransformerSeq2Seq: `embinit classify` serves it"
    ]
    lm, _ = checkpoints["lm"]
    status, _, err = run_main(["classify", "--ckpt_path", lm, "--input", os.devnull], capsys)
    assert status == 2 and err.strip().endswith(
        "holds a TiedEmbeddingLM, not a TransformerClassifier: `embinit generate` serves it"
    )


def test_missing_files_and_directories_are_one_line_and_status_2(checkpoints, tmp_path, capsys):
    lm, _ = checkpoints["lm"]
    cases = [
        (["generate", "--ckpt_path", str(tmp_path / "none.ckpt"), "--prompt", "a"], "none.ckpt: no such file"),
        (["generate", "--ckpt_path", str(tmp_path), "--prompt", "a"], "is a directory, not a checkpoint file"),
        (["generate", "--ckpt_path", lm, "--input", str(tmp_path / "none.txt")], "none.txt: no such file"),
        (["generate", "--ckpt_path", lm, "--input", str(tmp_path)], "is a directory, not a text file"),
    ]
    for args, problem in cases:
        status, out, err = run_main(args, capsys)
        assert (status, out) == (2, "") and len(err.splitlines()) == 1 and problem in err, err
        assert err.startswith("embinit generate: error: ")


def test_unknown_commands_list_every_command(capsys):
    status, _, err = run_main(["translat"], capsys)
    named = f"{', '.join(cli.COMMANDS[:-1])} or {cli.COMMANDS[-1]}"
    assert status == 2 and err.splitlines() == [
        f"embinit: error: unknown command 'translat'; name a command: {named} (`embinit --help` lists them)"
    ]
    assert {"predict", "translate", "generate", "classify"} <= set(cli.COMMANDS)


# ----------------------------------------------------------------- files and arguments
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
