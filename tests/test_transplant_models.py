"""``transplant_tokenizer`` on whole models: every other weight untouched, matched rows bit for bit, built rows as a
hand computation through the tokenizers' own decode and encode, tied and untied heads with their biases, the config's
ids, the families the extension supports, and ``save_pretrained`` → ``from_pretrained`` → ``generate``."""

from __future__ import annotations

import pytest
import torch
import transformers as T

from lightning_embinit.init.transplant import transplant_tokenizer
from lightning_embinit.init.transplant.report import format_transplant_report, transplant_metrics
from tests.family_models import CASES, V
from tests.transplant_helpers import (
    END,
    ENGLISH,
    GERMAN,
    byte_level,
    sentencepiece_style,
    tiny_llama,
    vocabulary,
    wordpiece,
)

OLD_TOKENS = [f"tok{i}" for i in range(V)]


@pytest.fixture(scope="module")
def tokenizers():
    return byte_level(ENGLISH), byte_level(GERMAN)


def untouched_but_vocabulary(before: dict, after: dict, vocabulary_keys: set[str]) -> None:
    assert set(before) == set(after)
    for key in set(before) - vocabulary_keys:
        assert torch.equal(before[key], after[key]), key


def piece_mean(table: torch.Tensor, old_tokenizer, new_tokenizer, token: str) -> torch.Tensor:
    """FVT by hand: the new token's text as its own tokenizer decodes it, split by the old tokenizer; the mean of
    every old row (the fallback) when no piece is known (bytes the old tokenizer never saw)."""
    text = new_tokenizer.convert_tokens_to_string([token])
    pieces = old_tokenizer(text, add_special_tokens=False)["input_ids"] or list(range(table.shape[0]))
    return table[pieces].double().mean(0).float()


@pytest.mark.parametrize("seed", [0, 1])
def test_an_untied_llama_gets_the_new_vocabulary(tokenizers, seed):
    english, german = tokenizers
    model = tiny_llama(len(english), seed=seed)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = transplant_tokenizer(model, german, old_tokenizer=english, method="pieces")
    after = model.state_dict()
    untouched_but_vocabulary(before, after, {"model.embed_tokens.weight", "lm_head.weight"})
    new_tokens, old_index = vocabulary(german), english.get_vocab()
    embed, head = after["model.embed_tokens.weight"], after["lm_head.weight"]
    assert embed.shape == (len(german), 16) and model.config.vocab_size == len(german)
    built = 0
    for new_id, token in enumerate(new_tokens):
        if token in old_index:  # the same string: the old row, bit for bit
            assert torch.equal(embed[new_id], before["model.embed_tokens.weight"][old_index[token]]), token
            assert torch.equal(head[new_id], before["lm_head.weight"][old_index[token]]), token
        elif token.lower() not in {t.lower() for t in old_index}:
            expected = piece_mean(before["model.embed_tokens.weight"], english, german, token)
            torch.testing.assert_close(embed[new_id], expected, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(head[new_id], piece_mean(before["lm_head.weight"], english, german, token))
            built += 1
    assert built > 10 and report["built"] >= built and report["matched_by"]["exact"] > 10
    assert report["matched"] + report["built"] == len(german)
    assert model.config.bos_token_id == model.config.eos_token_id == german.convert_tokens_to_ids(END)
    assert "Tokenizer transplant" in format_transplant_report(report)
    assert transplant_metrics(report)["transplant/model.embed_tokens/num_embeddings"] == len(german)


def test_save_pretrained_from_pretrained_generate_round_trip(tokenizers, tmp_path):
    english, german = tokenizers
    model = tiny_llama(len(english), tied=True, seed=3)
    transplant_tokenizer(model, german, old_tokenizer=english, method="pieces")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(tmp_path)
    german.save_pretrained(tmp_path)
    again = T.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokenizer = T.AutoTokenizer.from_pretrained(tmp_path)
    assert again.config.vocab_size == len(tokenizer) == len(german)
    prompt = tokenizer("ein mann", return_tensors="pt").input_ids
    ours = model.generate(prompt, max_new_tokens=6, do_sample=False)
    theirs = again.generate(prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(ours, theirs) and ours.shape[1] == prompt.shape[1] + 6
    with torch.no_grad():
        torch.testing.assert_close(model(ours).logits, again(ours).logits)
    assert isinstance(tokenizer.decode(theirs[0]), str)


def test_a_tied_head_with_a_bias_combines_the_bias_too():
    """BERT's tied decoder has its own bias over the vocabulary: a built token's entry is the mean of its pieces'."""
    old, new = wordpiece(ENGLISH), wordpiece(GERMAN)
    torch.manual_seed(0)
    model = T.BertForMaskedLM(
        T.BertConfig(
            vocab_size=len(old),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
            pad_token_id=0,
        )
    ).eval()
    with torch.no_grad():
        model.cls.predictions.bias.normal_()
    old_bias = model.cls.predictions.bias.detach().clone()
    old_table = model.bert.embeddings.word_embeddings.weight.detach().clone()
    report = transplant_tokenizer(model, new, old_tokenizer=old, method="pieces")
    bias = model.cls.predictions.bias
    assert (
        bias.shape == (len(new),)
        and model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    )
    new_tokens, old_index = vocabulary(new), old.get_vocab()
    checked = 0
    for new_id, token in enumerate(new_tokens):
        if token in old_index:
            assert bias[new_id] == old_bias[old_index[token]]
        elif report["built_by"].get("pieces") and not token.startswith("["):
            pieces = old(token.removeprefix("##"), add_special_tokens=False)["input_ids"]
            pieces = [p for p in pieces if p != old.unk_token_id]
            if pieces:
                assert float(bias[new_id].detach()) == pytest.approx(float(old_bias[pieces].double().mean()), abs=1e-6)
                torch.testing.assert_close(
                    model.bert.embeddings.word_embeddings.weight[new_id], old_table[pieces].double().mean(0).float()
                )
                checked += 1
    assert checked > 5
    assert model.bert.embeddings.word_embeddings.padding_idx == new.pad_token_id == 0


@pytest.mark.parametrize("name", ["torchtune", "litgpt", "nanogpt", "gpt2"])
def test_the_families_the_extension_supports(name):
    model = CASES[name].build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    new = [f"tok{i}" for i in range(V - 1, 49, -1)] + ["fresh", "newer"]  # half the old tokens, reversed, and two
    report = transplant_tokenizer(model, new, old_tokenizer=OLD_TOKENS, method="token:tok7")
    assert report["matched_by"] == {"exact": 50} and report["built_by"] == {"token:tok7": 2}
    table = next(t for k, t in model.state_dict().items() if t.shape[0] == len(new) and t.dim() == 2)
    old_table = next(before[k] for k, t in model.state_dict().items() if t.shape[0] == len(new) and t.dim() == 2)
    assert torch.equal(table[0], old_table[V - 1]) and torch.equal(table[50], old_table[7])
    with torch.no_grad():
        logits = model(torch.tensor([[0, 50, 51]]))
    logits = getattr(logits, "logits", logits)
    assert logits.shape[-1] == len(new)
    if name == "litgpt":
        assert model.config.vocab_size == model.config.padded_vocab_size == len(new)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_standardize_moves_the_built_rows_onto_the_old_rows_statistics(tokenizers, seed):
    english, german = tokenizers
    model = tiny_llama(len(english), seed=seed)
    old = model.model.embed_tokens.weight.detach().double().clone()
    transplant_tokenizer(model, german, old_tokenizer=english, method="mean", fallback="mean", standardize=True)
    rows = model.model.embed_tokens.weight.detach().double()
    built = torch.tensor([t not in english.get_vocab() for t in vocabulary(german)])  # byte-level both: no other match
    new = rows[built]
    assert new.mean().item() == pytest.approx(old.mean().item(), abs=1e-5)
    assert new.std(unbiased=False).item() == pytest.approx(old.std(unbiased=False).item(), rel=1e-4)


def test_refusals_change_nothing(tokenizers):
    english, german = tokenizers
    model = tiny_llama(len(english))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        ValueError,
        match="unknown transplant method .fvt.; known transplant methods: description, focus, mean, neighbors, omp, "
        "pieces",
    ):
        transplant_tokenizer(model, german, old_tokenizer=english, method="fvt")
    with pytest.raises(ValueError, match="does not name its tokens; pass old_tokenizer="):
        transplant_tokenizer(model, german)
    with pytest.raises(ValueError, match="old_tokenizer= has .* tokens, the table .* rows"):
        transplant_tokenizer(model, german, old_tokenizer=vocabulary(english) + ["extra"])
    with pytest.raises(ValueError, match="splits text with the old tokenizer"):
        transplant_tokenizer(model, german, old_tokenizer=vocabulary(english), method="pieces")
    with pytest.raises(ValueError, match="need donor="):
        transplant_tokenizer(model, german, old_tokenizer=english, method="neighbors")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.config.vocab_size == len(english)


def test_special_tokens_map_by_role_and_the_config_ids_follow(tokenizers):
    """Byte-level (one '<|endoftext|>' for bos, eos and unk) → SentencePiece-style ('<s>', '</s>', '<unk>', '<pad>')."""
    english, _ = tokenizers
    new = sentencepiece_style(GERMAN)
    model = tiny_llama(len(english), seed=5)
    model.generation_config.eos_token_id = 0
    old_end = model.model.embed_tokens.weight[english.convert_tokens_to_ids(END)].detach().clone()
    report = transplant_tokenizer(model, new, old_tokenizer=english, method="mean")
    ids = {
        role: new.convert_tokens_to_ids(token) for role, token in (("bos", "<s>"), ("eos", "</s>"), ("pad", "<pad>"))
    }
    assert (model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id) == (
        ids["bos"],
        ids["eos"],
        ids["pad"],
    )
    assert model.generation_config.eos_token_id == ids["eos"]
    assert torch.equal(model.model.embed_tokens.weight[ids["eos"]], old_end)  # eos → the old eos row, by role
    assert report["matched_by"]["special"] >= 2 and report["old_convention"] == "byte_level"
    assert report["new_convention"] == "sentencepiece" and report["matched_by"]["normalized"] > 0  # ▁der → Ġder
    assert report["config_ids"]["LlamaConfig.eos_token_id"] == (0, ids["eos"])


def test_focus_builds_rows_from_fasttext_on_target_text(tokenizers):
    english, german = tokenizers
    model = tiny_llama(len(english), seed=6)
    report = transplant_tokenizer(model, german, old_tokenizer=english, method="focus", texts=GERMAN, seed=1)
    assert report["built_by"]["focus"] > 10
    assert bool(torch.isfinite(model.model.embed_tokens.weight).all())


def test_an_old_table_with_nan_is_refused_before_anything_changes(tokenizers):
    english, german = tokenizers
    model = tiny_llama(len(english))
    with torch.no_grad():
        model.lm_head.weight[7, 3] = float("nan")
    with pytest.raises(ValueError, match=r"output layer 'lm_head' already holds NaN or inf \(rows \[7\]\)"):
        transplant_tokenizer(model, german, old_tokenizer=english)
    assert model.model.embed_tokens.weight.shape[0] == len(english)


def test_the_packages_hugging_face_system_follows_with_its_tokenizer(tokenizers, tmp_path):
    """HuggingFaceLM keeps the package's tokenizer (and its config in the hyperparameters): both follow."""
    from lightning_embinit import HuggingFaceLM
    from lightning_embinit.text.tokenization import build_tokenizer

    english, german = tokenizers
    english.save_pretrained(tmp_path / "english")
    german.save_pretrained(tmp_path / "german")
    small = {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
    }
    torch.manual_seed(0)
    system = HuggingFaceLM(model_type="llama", config=small, tokenizer=str(tmp_path / "english"))
    old_table = system.model.get_input_embeddings().weight.detach().clone()
    old_index = {token: i for i, token in enumerate(system.tokenizer.tokens)}
    new = build_tokenizer(str(tmp_path / "german"))
    report = transplant_tokenizer(system, new, method="pieces")
    assert system.tokenizer is new and system.hparams["config"]["vocab_size"] == len(new.tokens)
    table = system.model.get_input_embeddings().weight
    assert table.shape[0] == len(new.tokens) == system.model.config.vocab_size
    kept = [(i, old_index[t]) for i, t in enumerate(new.tokens) if t in old_index]
    assert kept and all(torch.equal(table[i], old_table[j]) for i, j in kept)
    assert report["built_by"]["pieces"] > 0
    with torch.no_grad():
        assert system(input_ids=torch.tensor([new.encode("ein mann")])).logits.shape[-1] == len(new.tokens)
