"""``embinit inspect`` refuses a model config it cannot build, before building it (issue 40): a missing directory, a
size out of range, a padding row outside the table, a litgpt width its heads do not divide, a table larger than the
machine's memory, and a bare shape's option given with a model config: one line, exit status 2."""

import json

import lightning  # noqa: F401  (Lightning's log handler binds to the real stderr, not to one test's capture)
import pytest
import transformers as T

from lightning_embinit.commands import inspect_limits, inspect_models
from lightning_embinit.commands.inspect import build_parser, main

GPT2 = ["--model-type", "gpt2", "--num-layers", "1", "--num-heads", "2", "--vocab-size", "100", "--dim", "16"]


def refused(capsys, *argv: str) -> str:
    """The one error line of a refused ``embinit inspect``; fails unless the status is 2."""
    assert main(list(argv)) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("embinit inspect: error:")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def nothing_built(monkeypatch):
    """Fails the test if inspect gets as far as building a model on the meta device or a bare shape's table."""

    def fail(*args, **kwargs):
        raise AssertionError("a model was built before the refusal")

    monkeypatch.setattr(inspect_models, "on_meta", fail)
    monkeypatch.setattr(inspect_models.nn, "Embedding", fail)


def gpt2_dir(tmp_path, **fields) -> str:
    config = T.GPT2Config(**{"vocab_size": 100, "n_embd": 16, "n_layer": 1, "n_head": 2, **fields})
    config.bos_token_id = config.eos_token_id = 0
    config.save_pretrained(tmp_path)
    return str(tmp_path)


def test_a_missing_directory_is_named_not_taken_for_a_hub_name(tmp_path, capsys, monkeypatch):
    for missing in (str(tmp_path / "nothere"), "./nothere/config", "../a/b/c"):
        line = refused(capsys, "--hf-config", missing)
        assert f"--hf-config {missing}: no such directory; give a directory holding config.json" in line
        assert "Repo id" not in line
    # a name that may be a hub repository is asked for there; when the hub has none, both are said
    monkeypatch.setattr(T.AutoConfig, "from_pretrained", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    line = refused(capsys, "--hf-config", "someone/nothere")
    assert line.endswith("--hf-config someone/nothere: no such directory, and the hub gives no config for it: offline")


@pytest.mark.parametrize(
    ("fields", "options", "message"),
    [
        ({"vocab_size": 0}, [], "{dir}: vocab_size must be an integer ≥ 2 (the token table's rows), got 0"),
        (
            {"n_embd": -1},
            [],
            "{dir}: n_embd must be an integer ≥ 1 (the token vectors' width), got -1; set it with --dim",
        ),
        ({"n_layer": 0}, [], "{dir}: n_layer must be an integer ≥ 1 (the layers), got 0"),
        ({}, ["vocab_size=-5"], "--model-option vocab_size=-5: vocab_size must be an integer ≥ 2"),
        ({}, ["n_head=0"], "--model-option n_head=0: n_head must be an integer ≥ 1 (the attention heads), got 0"),
        (
            {"pad_token_id": 500},
            [],
            "{dir}: pad_token_id 500 is not a row of the 100-row token table (0 … 99); set --model-option "
            "pad_token_id=ROW, or pad_token_id=null",
        ),
        ({}, ["pad_token_id=-1"], "--model-option pad_token_id=-1: pad_token_id -1 is not a row of the 100-row"),
        ({}, ["n_embd=1e3"], "{dir}: Validation error for field 'n_embd': TypeError: Field 'n_embd' expected int"),
    ],
)
def test_a_config_size_out_of_range_is_named_before_anything_is_built(
    tmp_path, capsys, nothing_built, fields, options, message
):
    directory = gpt2_dir(tmp_path, **fields)
    argv = ["--hf-config", directory, *(item for option in options for item in ("--model-option", option))]
    assert message.format(dir=f"--hf-config {directory}") in refused(capsys, *argv)


def test_sizes_of_a_model_type_and_of_litgpt_are_named(capsys, nothing_built):
    line = refused(capsys, "--model-type", "llama", "--model-option", "vocab_size=-5", "--num-layers", "1")
    assert "--model-option vocab_size=-5: vocab_size must be an integer ≥ 2 (the token table's rows), got -5" in line
    line = refused(capsys, "--model-type", "llama", "--vocab-size", "100", "--model-option", "pad_token_id=100")
    assert "--model-option pad_token_id=100: pad_token_id 100 is not a row of the 100-row token table (0 … 99)" in line
    pytest.importorskip("litgpt")
    line = refused(capsys, "--litgpt-config", "pythia-14m", "--dim", "7")
    assert line.endswith(
        "--litgpt-config pythia-14m: n_embd 7 (--dim) is not a multiple of n_head 4 (--num-heads), as litgpt's head "
        "size n_embd / n_head must be; choose --dim 4 or 8, or set --model-option head_size=N"
    )
    line = refused(capsys, "--litgpt-config", "pythia-14m", "--model-option", "n_layer=0")
    assert "--model-option n_layer=0: n_layer must be an integer ≥ 1 (the layers), got 0" in line
    line = refused(capsys, "--litgpt-config", "pythia-14m", "--model-option", "n_query_groups=3")
    assert "n_head 4 is not a multiple of n_query_groups 3" in line
    assert "unknown --litgpt-config 'pythia-14x'; closest: pythia-14m" in refused(
        capsys, "--litgpt-config", "pythia-14x"
    )


def test_a_config_the_library_refuses_is_one_line_naming_it(capsys):
    line = refused(capsys, *GPT2[:4], "--num-heads", "5")  # GPT-2 asks 768 (its n_embd) / 5 heads
    assert "--model-type gpt2: the config does not build a model: `embed_dim` must be divisible by num_heads" in line
    line = refused(capsys, *GPT2, "--model-option", "n_layers=2")  # GPT-2's field is n_layer
    assert "--model-option: the gpt2 config has no field 'n_layers' (did you mean n_layer" in line
    assert "; its fields: " in line and " n_layer, " in line
    assert line.endswith(
        "; --vocab-size sets vocab_size, --dim sets hidden_size, --num-layers sets num_hidden_layers, --num-heads "
        "sets num_attention_heads"
    )


def test_a_table_larger_than_the_memory_is_refused_with_what_it_needs(capsys, monkeypatch):
    line = refused(capsys, "--model-type", "llama", "--vocab-size", "2000000000", "--dim", "4096", "--num-layers", "1")
    # 2e9 × 4096 float32 = 3.2768e13 bytes; inspect about 3 × that
    assert "the table 'model.embed_tokens.weight' (2,000,000,000 × 4,096 float32) would take 32.8 TB" in line
    assert "inspect about 3 × that (98.3 TB): more than the " in line and "inspect a smaller --vocab-size" in line

    monkeypatch.setattr(inspect_limits, "available_memory", lambda: 10_000_000)  # 10 MB
    line = refused(capsys, "--vocab-size", "1000", "--dim", "1024")  # 4.1 MB, × 3 = 12.3 MB
    assert "the table 'tokens' (1,000 × 1,024 float32) would take 4.1 MB, and inspect about 3 × that (12.3 MB)" in line
    assert "more than the 10 MB this machine has available" in line
    assert main(["--vocab-size", "1000", "--dim", "512", "--format", "json"]) == 0  # 6.1 MB fit
    line = refused(capsys, *GPT2[:6], "--vocab-size", "2000", "--dim", "512")  # wte 4.1 MB, wpe (1,024 × 512) 2.1 MB
    assert "the table 'transformer.wte.weight' (2,000 × 512 float32) and 1 smaller would take 6.19 MB" in line
    assert "inspect about 3 × that (18.6 MB)" in line
    monkeypatch.setattr(inspect_limits, "available_memory", lambda: None)  # unknown: no check
    assert main(["--vocab-size", "1000", "--dim", "1024", "--format", "json"]) == 0


def test_a_bare_shape_option_is_refused_with_a_model_config_even_at_its_default(capsys):
    for option, value in (("--input-scale", "sqrt_d"), ("--input-scale", "none"), ("--max-len", "512")):
        line = refused(capsys, *GPT2, option, value)
        assert f"{option}: a bare shape's option; a model config brings its own input scale" in line
    assert main(["--vocab-size", "100", "--dim", "16", "--format", "json"]) == 0  # the bare shape's defaults
    (slot,) = json.loads(capsys.readouterr().out)["slots"]
    assert slot["input_scale"] == 4.0 and slot["positional_max"] == 1.0  # sinusoidal


def test_options_are_never_abbreviated(capsys):
    assert build_parser().allow_abbrev is False
    line = refused(capsys, "--vocab", "10", "--dim", "4")  # not read as --vocab-size
    assert "unrecognized arguments: --vocab 10" in line
