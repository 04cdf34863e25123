"""``embinit translate|generate|classify``: a tiny trained checkpoint on text from a file or stdin, to a file or
stdout, line for line the model's own method on the same input."""

from __future__ import annotations

import io
import json
import os
import subprocess

import pytest
import torch

from lightning_embinit.commands import main as cli
from lightning_embinit.commands.use import generate_hugging_face
from lightning_embinit.models import HuggingFaceLM
from lightning_embinit.text.text_tokenizer import WordTokenizer
from lightning_embinit.text.tokenization import build_tokenizer
from tests.test_cli_errors import console_script
from tests.translation_helpers import multi30k_lines
from tests.use_checkpoints import gpt2_checkpoint, use_checkpoints

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
    assert generate_hugging_face(model, prompts, **options) == expected  # top-1 sampling is greedy


def test_generate_refuses_a_masked_hugging_face_lm(capsys):
    minilm = build_tokenizer("hf:minilm").to_config()
    bert = HuggingFaceLM(
        "bert", {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}, tokenizer=minilm
    )
    with pytest.raises(ValueError, match="objective='masked': train one with objective='causal'"):
        generate_hugging_face(bert, ["a"], max_new_tokens=2, temperature=0.0, top_k=None, seed=0)


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
