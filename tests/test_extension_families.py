"""Vocabulary extension on models of known families: tied heads (and their biases) grow with the table, the config
and the ties stay in step, ``save_pretrained`` → ``from_pretrained`` round-trips, and ``mean_cov`` draws from the
distribution ``resize_token_embeddings(mean_resizing=True)`` draws from."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers as T

from lightning_embinit.init.extension import extend_vocabulary
from lightning_embinit.init.host import discover_slots
from tests.family_models import CASES, HF_CASES, V
from tests.tiny_architectures import V as TINY
from tests.tiny_architectures import build

OLD = [f"tok{i}" for i in range(V)]
NEW = OLD + ["fresh", "newer", "newest"]


def table(model):
    return next(iter(discover_slots(model).values()))


@pytest.mark.parametrize("name", ["gpt2", "bert", "roberta", "bart", "t5", "llama", "gpt_neox"])
def test_a_hugging_face_model_grows_in_step_and_round_trips(name, tmp_path):
    model = HF_CASES[name].build().eval()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    report = extend_vocabulary(model, NEW, old_tokens=OLD, rule="mean_cov", seed=0)
    slot = table(model)
    assert slot.num_embeddings == len(NEW) and model.config.vocab_size == len(NEW) and report["added_rows"] == 3
    assert model.get_input_embeddings().weight is slot.weight
    output = model.get_output_embeddings()
    assert output.weight.shape[0] == len(NEW)
    if model.config.tie_word_embeddings:
        assert output.weight is slot.weight
    for key, tensor in model.state_dict().items():  # every old row and entry kept bit for bit, all else untouched
        old = before[key]
        grown = [d for d in range(tensor.dim()) if tensor.shape[d] == len(NEW) and old.shape[d] == V]
        kept = tensor.narrow(grown[0], 0, V) if grown else tensor
        assert torch.equal(kept, old), key
    if getattr(output, "bias", None) is not None:
        assert output.bias.shape == (len(NEW),) and report["biases"] or report["outputs"]
    ids = torch.tensor([[3, V, V + 1, V + 2, 5]])
    with torch.no_grad():
        logits = model(input_ids=ids, decoder_input_ids=ids) if model.config.is_encoder_decoder else model(ids)
    assert logits.logits.shape[-1] == len(NEW)
    model.save_pretrained(tmp_path)
    again = type(model).from_pretrained(tmp_path).eval()
    for key, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], tensor), key


def test_a_tied_heads_bias_and_barts_final_logits_bias_grow():
    bert = HF_CASES["bert"].build()
    extend_vocabulary(bert, NEW, old_tokens=OLD, rule="mean", bias="min")
    bias = bert.cls.predictions.decoder.bias
    assert bias is bert.cls.predictions.bias and bias.shape == (len(NEW),)
    assert torch.all(bias[V:] == bias[:V].min())
    bart = HF_CASES["bart"].build()
    old_final = bart.final_logits_bias.clone()
    report = extend_vocabulary(bart, NEW, old_tokens=OLD, rule="mean")
    assert bart.final_logits_bias.shape == (1, len(NEW)) and torch.equal(bart.final_logits_bias[:, :V], old_final)
    assert report["biases"]["final_logits_bias"]["new_bias"] == pytest.approx(float(old_final.double().mean()))


@pytest.mark.parametrize("name", ["torchtune", "litgpt", "nanogpt"])
def test_decoder_families_grow_and_run(name):
    model = CASES[name].build()
    extend_vocabulary(model, NEW, old_tokens=OLD, rule="mean")
    with torch.no_grad():
        logits = model(torch.tensor([[1, V, V + 2]]))
    assert logits.shape[-1] == len(NEW)
    if name == "litgpt":
        assert model.config.vocab_size == model.config.padded_vocab_size == len(NEW)


def _covariance(rows: torch.Tensor) -> torch.Tensor:
    centred = rows - rows.mean(dim=0)
    return centred.T @ centred / rows.shape[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_cov_draws_from_the_distribution_mean_resizing_draws_from(seed):
    """Both add N(μ, 1e-9 Σ) rows, μ and Σ of the old rows (a model without a padding row: the same rows); checked
    on 4,000 new rows of a 16-wide table against the analytic μ and Σ, for both."""
    config = T.GPT2Config(vocab_size=300, n_embd=16, n_layer=1, n_head=2, n_positions=8, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    ours, theirs = T.GPT2LMHeadModel(config), T.GPT2LMHeadModel(config)
    theirs.load_state_dict(ours.state_dict())
    old = ours.transformer.wte.weight.detach().double().clone()
    mean, covariance = old.mean(dim=0), _covariance(old)
    extend_vocabulary(
        ours, [f"t{i}" for i in range(4300)], old_tokens=[f"t{i}" for i in range(300)], rule="mean_cov", seed=seed
    )
    theirs.resize_token_embeddings(4300, mean_resizing=True)
    for model in (ours, theirs):
        new = model.transformer.wte.weight.detach().double()[300:]
        scale = (1e-9 * covariance.diagonal().max()).sqrt()
        assert (new.mean(dim=0) - mean).abs().max() < 5 * scale / 4000**0.5
        relative = (_covariance(new) / 1e-9 - covariance).norm() / covariance.norm()
        assert relative < 0.15, float(relative)


def _marian(shared: bool) -> T.MarianMTModel:
    config = T.MarianConfig(
        vocab_size=V,
        decoder_vocab_size=V,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        scale_embedding=True,
        share_encoder_decoder_embeddings=shared,
        pad_token_id=V - 1,
        decoder_start_token_id=V - 1,
    )
    torch.manual_seed(0)
    return T.MarianMTModel(config).eval()


def _shapes_and_config(model):
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, model.config.to_dict()


def test_marian_runs_after_extension_with_decoder_vocab_size_in_step():
    """Opus-MT's Marian: the head and final_logits_bias grow, and so must config.decoder_vocab_size, which its loss
    reads (``view(-1, decoder_vocab_size)``): as transformers' own resize keeps it."""
    model, reference = _marian(True), _marian(True)
    extend_vocabulary(model, NEW, old_tokens=OLD, rule="mean")
    reference.resize_token_embeddings(len(NEW), mean_resizing=True)
    assert model.config.decoder_vocab_size == len(NEW)
    assert _shapes_and_config(model) == _shapes_and_config(reference)
    ids = torch.tensor([[3, V, V + 1, V + 2, 5]])
    assert model(input_ids=ids, labels=ids).logits.shape[-1] == len(NEW)


def test_marian_with_a_decoder_table_of_its_own_extends_each_table_as_transformers_does():
    """share_encoder_decoder_embeddings=False: the encoder's and the decoder's tables are two slots; extending each
    gives what resize_token_embeddings + resize_decoder_token_embeddings give (the decoder's with the head tied to
    it, final_logits_bias and decoder_vocab_size), and the model runs on the new ids of both."""
    model, reference = _marian(False), _marian(False)
    slots = discover_slots(model)
    assert list(slots) == ["model.encoder.embed_tokens", "model.decoder.embed_tokens"]
    assert (
        slots["model.encoder.embed_tokens"].tied_modules == ()
        and not slots["model.encoder.embed_tokens"].vocabulary_biases
    )
    assert slots["model.decoder.embed_tokens"].tied_modules == ("lm_head",)
    assert slots["model.decoder.embed_tokens"].vocabulary_biases == ("final_logits_bias",)
    source, target = OLD + ["src"], OLD + ["tgt1", "tgt2"]
    extend_vocabulary(model, source, old_tokens=OLD, slot="model.encoder.embed_tokens", rule="mean")
    extend_vocabulary(model, target, old_tokens=OLD, slot="model.decoder.embed_tokens", rule="mean")
    reference.resize_token_embeddings(len(source), mean_resizing=True)
    reference.resize_decoder_token_embeddings(len(target))
    assert _shapes_and_config(model) == _shapes_and_config(reference)
    assert (model.config.vocab_size, model.config.decoder_vocab_size) == (len(source), len(target))
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    out = model(input_ids=torch.tensor([[3, V, 5]]), labels=torch.tensor([[3, V, V + 1]]))
    assert out.logits.shape[-1] == len(target) and torch.isfinite(out.loss)


def _fsmt() -> T.FSMTForConditionalGeneration:
    config = T.FSMTConfig(
        src_vocab_size=V, tgt_vocab_size=V, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=64, langs=["en", "de"], pad_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    return T.FSMTForConditionalGeneration(config).eval()


def test_fsmt_grows_each_table_with_its_own_head_and_size():
    """FSMT: the encoder's table (src_vocab_size) and the decoder's, whose head is ``output_projection``; the encoder
    slot no longer claims the decoder's head. transformers' own resize leaves output_projection and its logits at
    the old width, so its loss breaks; extension keeps table, head and tgt_vocab_size in step."""
    model = _fsmt()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    slots = discover_slots(model)
    assert slots["model.encoder.embed_tokens"].output_layers == ()
    assert slots["model.decoder.embed_tokens"].output_layers == ("model.decoder.output_projection",)
    with warnings.catch_warnings():  # the decoder's head is the decoder slot's: no "keeps its size" for the encoder's
        warnings.simplefilter("error")
        extend_vocabulary(model, OLD + ["src"], old_tokens=OLD, slot="model.encoder.embed_tokens", rule="mean")
    extend_vocabulary(model, NEW, old_tokens=OLD, slot="model.decoder.embed_tokens", rule="mean")
    assert (model.config.src_vocab_size, model.config.tgt_vocab_size) == (V + 1, len(NEW))
    assert model.model.decoder.output_projection.weight.shape == (len(NEW), 32)
    for key, old in before.items():
        assert torch.equal(model.state_dict()[key][tuple(slice(0, n) for n in old.shape)], old), key
    out = model(
        input_ids=torch.tensor([[3, V, 5]]),
        decoder_input_ids=torch.tensor([[3, V + 2]]),
        labels=torch.tensor([[3, V + 2]]),
    )
    assert out.logits.shape[-1] == len(NEW) and torch.isfinite(out.loss)
    theirs = _fsmt()
    theirs.resize_token_embeddings(len(NEW))
    assert theirs(input_ids=torch.tensor([[3, 5]]), decoder_input_ids=torch.tensor([[3]])).logits.shape[-1] == V


def test_tables_the_model_looks_the_same_ids_up_in_follow_even_a_reordered_vocabulary():
    """NeoMME's value embeddings are looked up by the token ids too: they follow the table (the old row of each
    token at its new id, the mean of the old rows for a new token), as transformers' resize grows them."""
    model = build("neomme")
    with torch.no_grad():
        model.model.value_embeddings.weight.normal_(generator=torch.Generator().manual_seed(0))
    old_rows = model.model.value_embeddings.weight.detach().clone()
    old = [f"t{i}" for i in range(TINY)]
    order = torch.randperm(TINY, generator=torch.Generator().manual_seed(1))
    extend_vocabulary(model, [old[i] for i in order] + ["fresh"], old_tokens=old, rule="mean")
    grown = model.model.value_embeddings.weight.detach()
    assert grown.shape == (TINY + 1, old_rows.shape[1]) and model.model.value_embeddings.num_embeddings == TINY + 1
    torch.testing.assert_close(grown[:TINY], old_rows[order], rtol=0, atol=0)
    torch.testing.assert_close(grown[TINY], old_rows.mean(dim=0))


def test_companion_tables_follow_the_planned_ids_even_where_token_rows_are_equal():
    """Two tokens whose token-table rows are equal (bit for bit) keep their own value-embedding rows: the writer
    tells the companions which old row each new row came from, no match of rows by value."""
    model = build("neomme")
    with torch.no_grad():
        model.model.value_embeddings.weight.normal_(generator=torch.Generator().manual_seed(0))
        table = model.get_input_embeddings().weight
        table[5] = table[3]  # the same vector for t3 and t5
    old_rows = model.model.value_embeddings.weight.detach().clone()
    old = [f"t{i}" for i in range(TINY)]
    order = list(reversed(range(TINY)))
    extend_vocabulary(model, [old[i] for i in order] + ["fresh"], old_tokens=old, rule="mean")
    grown = model.model.value_embeddings.weight.detach()
    torch.testing.assert_close(grown[:TINY], old_rows[order], rtol=0, atol=0)


def test_a_vocabulary_bias_beside_the_head_grows_with_it():
    """ESM adds ``lm_head.bias`` to the tied decoder's logits: it grows with the table (transformers' own resize
    leaves it, and the model cannot run after)."""
    model = build("esm")
    (slot,) = discover_slots(model).values()
    assert "lm_head.bias" in slot.vocabulary_biases
    old = [f"t{i}" for i in range(TINY)]
    extend_vocabulary(model, [*old, "fresh"], old_tokens=old, rule="mean")
    assert model.lm_head.bias.shape == (TINY + 1,)
    assert model(input_ids=torch.tensor([[5, TINY, 6]])).logits.shape[-1] == TINY + 1
