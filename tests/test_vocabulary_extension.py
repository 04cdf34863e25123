"""The torch-only core of issue 18: extend a trained model's vocabulary, keep every old row, start the new rows well."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from lightning_embinit import TiedEmbeddingLM, TransformerSeq2Seq, extend_vocabulary
from lightning_embinit.init import EmbeddingSlot
from lightning_embinit.init.extension import freeze_old_rows, pin_old_rows, plan_for_module
from lightning_embinit.init.freezing import freeze_rows
from lightning_embinit.text.tokenization import TextTokenizer

OLD = ["<pad>", "<unk>", "<bos>", "<eos>", "the", "a", "cat", "dog", "sat", "ran", "mat", "on"]
NEW_WORDS = ["cats", "catdog", "bird"]


def lm(head: str = "tied", seed: int = 0) -> TiedEmbeddingLM:
    torch.manual_seed(seed)
    model = TiedEmbeddingLM(
        vocabulary=OLD,
        architecture={"d_model": 16, "num_heads": 2, "num_layers": 1, "head": head, "head_bias": head == "untied"},
    )
    with torch.no_grad():  # a "trained" model: rows and biases that are not the defaults
        model.model.token_embedding.weight.normal_(0.3, 1.5)
        model.model.token_embedding.weight[0] = 0
        if head == "untied":
            model.model.head.proj.weight.normal_(-0.2, 0.7)
            model.model.head.proj.bias.uniform_(-2, 1)
    return model


class Plain(nn.Module):
    """No EmbeddingHost: a table and an untied output layer with a bias, named by outputs=["out"]."""

    def __init__(self, rows: int = 6, dim: int = 4, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(rows, dim)
        self.out = nn.Linear(dim, rows)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(rows, dim, generator=generator) * 2 + 1)
            self.out.weight.copy_(torch.randn(rows, dim, generator=generator))
            self.out.bias.copy_(torch.randn(rows, generator=generator))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids))


PLAIN_TOKENS = ["a", "b", "c", "d", "ab", "cd"]


@pytest.mark.parametrize("head", ["tied", "untied"])
def test_old_rows_are_kept_bit_for_bit_and_the_model_follows(head):
    model = lm(head)
    table = model.model.token_embedding.weight.detach().clone()
    if head == "untied":
        weight, bias = model.model.head.proj.weight.detach().clone(), model.model.head.proj.bias.detach().clone()
    new = OLD[:6] + ["cats"] + OLD[6:] + ["catdog", "bird"]
    report = extend_vocabulary(model, new, rule="mean_cov")
    moved = torch.tensor([new.index(t) for t in OLD])
    assert torch.equal(model.model.token_embedding.weight[moved], table)
    assert model.model.token_embedding.num_embeddings == len(new) == model.hparams.vocab_size == model.model.vocab.size
    assert model.hparams.vocabulary == new == model.vocabulary
    if head == "untied":
        proj = model.model.head.proj
        assert torch.equal(proj.weight[moved], weight) and torch.equal(proj.bias[moved], bias)
        added = torch.tensor([new.index(t) for t in NEW_WORDS])
        assert torch.allclose(
            proj.bias[added], bias[1:].double().mean().float().expand(3)
        )  # mean without the pad entry
        assert proj.out_features == len(new)
    assert model(torch.tensor([[4, 6, len(new) - 1]])).shape == (1, 3, len(new))
    assert (
        report["added_rows"] == 3
        and report["kept_rows"] == len(OLD)
        and report["added_tokens"] == ["cats", "catdog", "bird"]
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_reordered_superset_tokenizer_maps_every_old_token_to_its_old_row(seed):
    model = lm("untied", seed)
    table = model.model.token_embedding.weight.detach().clone()
    weight = model.model.head.proj.weight.detach().clone()
    order = torch.randperm(len(OLD) + 3, generator=torch.Generator().manual_seed(seed)).tolist()
    new = [(OLD + NEW_WORDS)[i] for i in order]
    extend_vocabulary(model, new, rule="normal:0.02", seed=seed)
    extended = model.model.token_embedding
    for old_id, token in enumerate(OLD):
        assert torch.equal(extended.weight[new.index(token)], table[old_id]), token
        assert torch.equal(model.model.head.proj.weight[new.index(token)], weight[old_id]), token
    assert extended.padding_idx == new.index("<pad>") == model.model.padding_idx
    assert not extended.weight[extended.padding_idx].any()


def _plain_plan(rule, **options):
    model = Plain()
    old = model.embed.weight.detach().double().numpy()
    report = extend_vocabulary(
        model, PLAIN_TOKENS + ["abcd", "zz"], rule=rule, old_tokens=PLAIN_TOKENS, outputs=["out"], **options
    )
    return model, old, report


def test_rule_mean_is_the_old_rows_mean():
    model, old, report = _plain_plan("mean")
    expected = old.mean(axis=0)
    np.testing.assert_allclose(model.embed.weight[6:].detach().numpy(), np.stack([expected] * 2), rtol=1e-6)
    out_old = Plain().out.weight.detach().double().numpy()
    np.testing.assert_allclose(model.out.weight[6:].detach().numpy(), np.stack([out_old.mean(axis=0)] * 2), rtol=1e-6)
    assert report["by_rule"] == {"mean": 2}


def test_rule_pieces_is_the_mean_of_the_old_pieces_rows():
    index = {t: i for i, t in enumerate(PLAIN_TOKENS)}
    split = lambda token: [index[token[k : k + 2]] for k in range(0, len(token), 2) if token[k : k + 2] in index]  # noqa: E731
    model, old, report = _plain_plan("pieces", old_tokenizer=split)
    np.testing.assert_allclose(model.embed.weight[6].detach().numpy(), (old[4] + old[5]) / 2, rtol=1e-6)  # ab + cd
    np.testing.assert_allclose(model.embed.weight[7].detach().numpy(), old.mean(axis=0), rtol=1e-6)  # zz: no piece → μ
    assert report["by_rule"] == {"pieces": 1, "mean (no known piece)": 1}


def test_rule_pieces_with_a_package_wordpiece_tokenizer_splits_the_token_text():
    texts = ["the skate board is on the board", "a skate park", "boards and skates"] * 20
    tokenizer = TextTokenizer.wordpiece(texts, vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    model = TiedEmbeddingLM(vocabulary=tokenizer.tokens, architecture={"d_model": 8, "num_heads": 2, "num_layers": 1})
    table = model.model.token_embedding.weight.detach().double()
    pieces = tokenizer.encode("skateboard")
    extend_vocabulary(model, tokenizer.tokens + ["▁skateboard"], rule="pieces", old_tokenizer=tokenizer)
    np.testing.assert_allclose(
        model.model.token_embedding.weight[-1].detach().numpy(), table[pieces].mean(dim=0).numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rule_mean_cov_samples_the_old_mean_and_covariance(seed):
    generator = torch.Generator().manual_seed(100 + seed)
    model = nn.Module()
    model.embed = nn.Embedding(40, 3)
    with torch.no_grad():
        model.embed.weight.copy_(
            torch.randn(40, 3, generator=generator) @ torch.tensor([[2.0, 0, 0], [1, 1, 0], [0, 0.5, 0.3]]) + 4
        )
    old = model.embed.weight.detach().double().numpy()
    mean, covariance = old.mean(axis=0), np.cov(old, rowvar=False, bias=True)
    new = [f"t{k}" for k in range(40)] + [f"n{k}" for k in range(20000)]
    extend_vocabulary(model, new, old_tokens=new[:40], rule="mean_cov:1", seed=seed)
    rows = model.embed.weight[40:].detach().double().numpy()
    np.testing.assert_allclose(rows.mean(axis=0), mean, atol=0.05)
    np.testing.assert_allclose(np.cov(rows, rowvar=False, bias=True), covariance, atol=0.08 * np.abs(covariance).max())


def test_rule_mean_cov_by_default_is_the_mean_with_tiny_distinct_noise():
    model, old, report = _plain_plan("mean_cov")
    rows = model.embed.weight[6:].detach().double().numpy()
    np.testing.assert_allclose(rows, np.stack([old.mean(axis=0)] * 2), atol=1e-3)
    assert not np.array_equal(rows[0], rows[1])


def test_a_scheme_rule_uses_the_extended_tables_shape_and_standardize_matches_the_old_rows():
    model, _, _ = _plain_plan("xavier")
    bound = (6 / (8 + 4)) ** 0.5
    assert model.embed.weight[6:].abs().max() <= bound
    model, old, _ = _plain_plan("normal:0.02", standardize=True)
    rows = model.embed.weight[6:].detach().double().numpy()
    assert rows.mean() == pytest.approx(old.mean(), rel=1e-5) and rows.std() == pytest.approx(old.std(), rel=1e-5)


def test_a_pretrained_source_fills_the_tokens_it_has_and_the_old_mean_the_others(tmp_path):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("2 4\nabcd 1 2 3 4\nother 0 0 0 1\n")
    model, old, report = _plain_plan(f"file:{vectors}", source_options={"oov": "zeros"})
    np.testing.assert_allclose(model.embed.weight[6].detach().numpy(), [1, 2, 3, 4])
    np.testing.assert_allclose(model.embed.weight[7].detach().numpy(), old.mean(axis=0), rtol=1e-6)
    assert report["outputs"]["out"]["rule"] == "mean"  # a source has no output rows: the head's new rows take the mean


@pytest.mark.parametrize(
    ("bias", "expected"),
    [("mean", lambda b: b.mean()), ("min", lambda b: b.min()), ("zero", lambda b: 0.0), (-3.5, lambda b: -3.5)],
)
def test_bias_rules(bias, expected):
    old_bias = Plain().out.bias.detach().double().numpy()
    model, _, report = _plain_plan("mean", bias=bias)
    np.testing.assert_allclose(model.out.bias[6:].detach().numpy(), [expected(old_bias)] * 2, rtol=1e-6)
    assert report["outputs"]["out"]["new_bias"] == pytest.approx(expected(old_bias))


def test_the_new_token_mass_is_the_softmax_share_of_the_new_rows():
    model = Plain()
    states = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    report = extend_vocabulary(
        model, PLAIN_TOKENS + ["abcd"], old_tokens=PLAIN_TOKENS, rule="mean", probe=states, outputs=["out"]
    )
    logits = states.double() @ model.out.weight.detach().double().T + model.out.bias.detach().double()
    expected = logits.softmax(dim=-1)[:, 6].mean()
    assert report["new_token_mass"] == pytest.approx(float(expected), rel=1e-5)
    assert report["uniform_mass"] == pytest.approx(1 / 7)


def test_trainable_new_rows_under_adamw_with_weight_decay_leaves_every_old_row_untouched():
    model = lm("untied")
    plan = plan_for_module(model, OLD + NEW_WORDS, rule="mean")
    extend_vocabulary(model, OLD + NEW_WORDS, rule="mean")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    frozen = {"tokens": lambda: ~plan.added}
    tensors = freeze_old_rows(model, frozen)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05, weight_decay=0.5)
    pin_old_rows(optimizer, tensors["tokens"], frozen["tokens"])
    ids = torch.randint(0, len(OLD) + 3, (4, 6), generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        optimizer.zero_grad()
        model.loss(model(ids[:, :-1]), ids[:, 1:]).backward()
        optimizer.step()
    old, new = ~plan.added, plan.added
    for name, parameter in model.named_parameters():
        if parameter.shape[:1] == (len(OLD) + 3,):
            assert torch.equal(parameter[old], before[name][old]), name
            assert not torch.equal(parameter[new], before[name][new]), name
        else:
            assert torch.equal(parameter, before[name]), name


def test_a_word_level_translation_model_extends_its_tokenizer_and_reloads(tmp_path):
    from lightning.pytorch import Trainer

    texts = ["a man rides a horse", "a woman reads a book", "two dogs run"] * 3
    src, tgt = TextTokenizer.word(texts, min_freq=1), TextTokenizer.word(texts, min_freq=1)
    model = TransformerSeq2Seq(
        src_tokenizer=src.to_config(),
        tgt_tokenizer=tgt.to_config(),
        architecture={
            "d_model": 16,
            "num_heads": 2,
            "num_encoder_layers": 1,
            "num_decoder_layers": 1,
            "head": "untied",
        },
    )
    new = list(tgt.tokens) + ["skateboard", "bike"]
    extend_vocabulary(model, new, slot="tgt", rule="mean")
    assert model.tgt_tokenizer.tokens == new and model.tgt_tokenizer.encode("a skateboard") == [
        new.index("a"),
        len(new) - 2,
    ]
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(tmp_path / "extended.ckpt")
    loaded = TransformerSeq2Seq.load_from_checkpoint(tmp_path / "extended.ckpt")
    assert loaded.model.head.proj.out_features == len(new) and loaded.tgt_tokenizer.tokens == new
    assert torch.equal(loaded.model.head.proj.weight, model.model.head.proj.weight)


@pytest.mark.parametrize("head", ["tied", "untied"])
def test_an_extended_lm_reloads_with_the_larger_shapes(tmp_path, head):
    from lightning.pytorch import Trainer

    model = lm(head)
    extend_vocabulary(model, OLD + NEW_WORDS, rule="mean_cov")
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(tmp_path / "extended.ckpt")
    loaded = TiedEmbeddingLM.load_from_checkpoint(tmp_path / "extended.ckpt")
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert loaded.vocabulary == OLD + NEW_WORDS


# -- bad input: a clear error, before any weight changes ------------------------------------------------------------
def _unchanged(model: nn.Module, call) -> str:
    before = {name: t.detach().clone() for name, t in model.state_dict().items()}
    hparams = dict(getattr(model, "hparams", {}))
    with pytest.raises(ValueError) as error:
        call()
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert dict(getattr(model, "hparams", {})) == hparams
    return str(error.value)


def test_a_new_vocabulary_that_drops_old_tokens_is_refused_unless_allowed():
    model = lm("untied")
    message = _unchanged(
        model, lambda: extend_vocabulary(model, [t for t in OLD if t not in ("cat", "mat")] + NEW_WORDS)
    )
    assert "drops 2 of the slot's 12 old tokens" in message and "'cat'" in message and "allow_dropping=True" in message
    table = model.model.token_embedding.weight.detach().clone()
    kept = [t for t in OLD if t not in ("cat", "mat")] + NEW_WORDS
    report = extend_vocabulary(model, kept, allow_dropping=True)
    assert report["dropped_rows"] == 2
    assert torch.equal(model.model.token_embedding.weight[kept.index("dog")], table[OLD.index("dog")])


def test_special_tokens_are_never_dropped_and_duplicates_are_refused():
    model = lm()
    message = _unchanged(model, lambda: extend_vocabulary(model, OLD[1:] + NEW_WORDS, allow_dropping=True))
    assert "special tokens ['<pad>']" in message
    message = _unchanged(model, lambda: extend_vocabulary(model, OLD + ["cats", "bird", "cats"]))
    assert "1 tokens occur twice" in message and "'cats'" in message


def test_a_rule_the_slot_cannot_serve_is_refused():
    model = lm()
    assert "needs the old tokenizer" in _unchanged(
        model, lambda: extend_vocabulary(model, OLD + NEW_WORDS, rule="pieces")
    )
    word_level = TextTokenizer.word(["the cat sat"], min_freq=1)
    message = _unchanged(
        model, lambda: extend_vocabulary(model, OLD + NEW_WORDS, rule="pieces", old_tokenizer=word_level)
    )
    assert "splits none of the 3 new tokens" in message
    message = _unchanged(model, lambda: extend_vocabulary(model, OLD + NEW_WORDS, rule="nonsense"))
    assert "unknown extension rule 'nonsense'" in message and "mean_cov" in message and "xavier" in message
    message = _unchanged(model, lambda: extend_vocabulary(model, OLD + NEW_WORDS, rule="zeros", standardize=True))
    assert "constant matrix" in message


def test_a_slot_with_a_frozen_pretrained_mask_is_refused():
    model = lm()
    freeze_rows(model.model.token_embedding.weight, lambda: torch.zeros(len(OLD), dtype=torch.bool))
    message = _unchanged(model, lambda: extend_vocabulary(model, OLD + NEW_WORDS))
    assert "frozen pre-trained-rows mask" in message


def test_a_slot_without_tokens_needs_old_tokens_and_a_host_with_several_slots_needs_a_slot():
    model = nn.Module()
    model.embed = nn.Embedding(4, 2)
    assert "pass old_tokens=" in _unchanged(model, lambda: extend_vocabulary(model, ["a", "b", "c", "d", "e"]))
    model.other = nn.Embedding(3, 2)
    assert "name one with slot=" in _unchanged(model, lambda: extend_vocabulary(model, ["a"]))


def test_a_host_slot_with_a_tied_linear_head_follows():
    class Host(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(4, 3, padding_idx=0)
            self.head = nn.Linear(3, 4, bias=False)
            self.head.weight = self.embed.weight

        def embedding_slots(self):
            return {
                "tokens": EmbeddingSlot("tokens", self.embed, tokens=["<pad>", "x", "y", "z"], tied_modules=("head",))
            }

    host = Host()
    extend_vocabulary(host, ["<pad>", "x", "y", "z", "w"], rule="mean")
    assert (
        host.head.weight is host.embed.weight and host.head.out_features == 5 and host.head(torch.ones(3)).shape == (5,)
    )


def test_a_layer_as_wide_as_the_vocabulary_is_never_grown_for_its_width_alone():
    model = Plain()
    model.hidden = nn.Linear(4, 6)  # unrelated, its width happens to equal the vocabulary size
    hidden = model.hidden.weight.detach().clone()
    with pytest.warns(UserWarning, match=r"out, hidden has one output per row of the table but is neither tied"):
        extend_vocabulary(model, PLAIN_TOKENS + ["abcd"], old_tokens=PLAIN_TOKENS, rule="mean")
    assert torch.equal(model.hidden.weight, hidden) and model.out.out_features == 6 and model.embed.num_embeddings == 7
