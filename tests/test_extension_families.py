"""Vocabulary extension on models of known families: tied heads (and their biases) grow with the table, the config
and the ties stay in step, ``save_pretrained`` → ``from_pretrained`` round-trips, and ``mean_cov`` draws from the
distribution ``resize_token_embeddings(mean_resizing=True)`` draws from."""

from __future__ import annotations

import pytest
import torch
import transformers as T

from lightning_embinit.init.extension import extend_vocabulary
from lightning_embinit.init.host import discover_slots
from tests.family_models import CASES, HF_CASES, V

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
