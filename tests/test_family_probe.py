"""The probe of a model's own forward (lightning_embinit/init/families/probe.py): the input scale and the added rows
it finds where names and flags say nothing, or something else, checked by hand (sinusoids from their formulas,
multipliers from the configs); the fall-back to names and flags where the model cannot run (meta device); and the
report saying how each was found."""

from __future__ import annotations

import json
import math

import pytest
import torch
import transformers as T

from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor
from lightning_embinit.commands.inspect import main as inspect_main
from lightning_embinit.init.host import discover_slots
from tests.family_models import HF_CASES, Holder, first_layer_input
from tests.tiny_architectures import D, build


def sinusoid(positions: torch.Tensor, rates: torch.Tensor) -> torch.Tensor:
    """[sin(p·r_k) for k] ++ [cos(p·r_k) for k], one row per position p."""
    angles = positions.double()[:, None] * rates.double()[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def tensor2tensor_rates(width: int) -> torch.Tensor:
    """XGLM's and M2M100's frequencies: exp(−k · ln 10000 / (D/2 − 1)), k < D/2."""
    half = width // 2
    return torch.exp(-torch.arange(half, dtype=torch.float64) * math.log(10000) / (half - 1))


def ctrl_rates(width: int) -> torch.Tensor:
    """CTRL's frequencies: 10000^(−2k/D), k < D/2 (sines of the even, cosines of the odd angles)."""
    return 1 / 10000 ** (2 * torch.arange(width // 2, dtype=torch.float64) / width)


def population_std(values: torch.Tensor) -> float:
    values = values.double().flatten()
    return float(((values - values.mean()) ** 2).mean().sqrt())


@pytest.mark.parametrize(
    ("name", "first", "rates"),
    [("xglm", 2, tensor2tensor_rates), ("m2m_100", 2, tensor2tensor_rates), ("ctrl", 0, ctrl_rates)],
)
def test_sinusoidal_positions_that_are_no_nn_embedding_are_the_rows_the_model_adds(name, first, rates):
    """XGLM and M2M100 keep their sinusoid in a buffer of a plain module (rows from 2: the first real position is
    padding_idx + 1), CTRL in a ``pos_encoding`` buffer added in ``forward``: the slot's rows are those, and the
    variance monitor measures them instead of logging no_additive_positional_encoding."""
    holder = Holder(build(name))
    (slot,) = discover_slots(holder).values()
    rows = slot.positional_encoding()
    expected = sinusoid(torch.arange(first, first + rows.shape[0]), rates(D))
    torch.testing.assert_close(rows.double(), expected, atol=1e-5, rtol=0)
    assert slot.positions.startswith("fixed rows ") and slot.positions_found_by == "probe: the rows it adds"
    values = EmbeddingVarianceMonitor(sample_rows=32).measure(holder)[slot.name]
    assert "no_additive_positional_encoding" not in values and values["semantic_retention"] is not None
    assert values["pe_std"] == pytest.approx(population_std(expected), rel=1e-5)


@pytest.mark.parametrize(
    ("name", "scale"),
    [
        ("ctrl", lambda model: math.sqrt(D)),
        ("granite", lambda model: model.config.embedding_multiplier),
        ("granitemoe", lambda model: model.config.embedding_multiplier),
        ("falcon_h1", lambda model: model.config.embedding_multiplier),
        ("minicpm3", lambda model: model.config.scale_emb),
        ("hrm_text", lambda model: model.config.embedding_scale),
    ],
)
def test_input_scales_applied_in_forward_are_the_models(name, scale):
    """CTRL multiplies by √d in ``forward``, Granite, Granite MoE and Falcon-H1 by ``config.embedding_multiplier``
    (12 and 3 in these tiny configs, not 1), MiniCPM3 by ``scale_emb``, HRM by ``embedding_scale``."""
    model = build(name)
    (slot,) = discover_slots(Holder(model)).values()
    assert scale(model) != 1.0 and slot.input_scale == pytest.approx(scale(model), rel=1e-6)
    assert slot.input_scale_found_by.startswith("probe")


class ScaledGPT2(T.GPT2LMHeadModel):
    """A model of the user's making: GPT-2 whose token vectors are tripled in ``forward``, with no flag saying so."""

    def forward(self, input_ids=None, **kwargs):
        return super().forward(inputs_embeds=3.0 * self.transformer.wte(input_ids), **kwargs)


def test_a_scale_no_name_or_flag_announces_is_found_from_the_model_itself():
    config = HF_CASES["gpt2"].build().config
    model = ScaledGPT2(config).eval()
    (slot,) = discover_slots(Holder(model)).values()
    assert slot.input_scale == pytest.approx(3.0, rel=1e-6)
    assert slot.input_scale_found_by == "probe at the input of transformer.h.0 (no scale flag (1) says 1)"
    ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    fed = first_layer_input(model, HF_CASES["gpt2"], ids)[0]
    added = fed - slot.input_scale * slot.weight.detach()[ids[0]]
    torch.testing.assert_close(added, slot.positional_encoding()[:12], atol=2e-5, rtol=0)


def test_on_the_meta_device_names_and_flags_answer_and_the_report_says_why():
    with torch.device("meta"):
        model = T.XGLMForCausalLM(build("xglm").config)
    model.model.embed_tokens.weight = torch.nn.Parameter(torch.randn(model.model.embed_tokens.weight.shape))
    (slot,) = discover_slots(Holder(model)).values()
    assert slot.input_scale == pytest.approx(math.sqrt(D))  # the table's embed_scale
    assert "probe: the model is on the meta device" in slot.input_scale_found_by
    assert slot.positional_encoding is None and "meta device" in slot.positions_found_by


def test_the_probe_leaves_the_model_as_it_was():
    model = HF_CASES["bert"].build().train()
    model.bert.encoder.eval()  # a mode of the user's choosing, kept
    modes = {name: module.training for name, module in model.named_modules()}
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    discover_slots(Holder(model))
    assert {name: module.training for name, module in model.named_modules()} == modes
    assert all(not module._forward_pre_hooks and not module._forward_hooks for module in model.modules())
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    assert all(parameter.grad is None for parameter in model.parameters())


def test_the_init_report_says_how_scale_and_positions_were_found():
    reports = EmbeddingInitCallback(source="xavier", seed=0, verbose=False).initialize(Holder(build("ctrl")))
    report = reports["backbone.transformer.w"]
    assert report["input_scale"] == pytest.approx(math.sqrt(D))
    assert report["input_scale_found_by"] == "probe, agrees with model type ctrl (√d)"
    assert report["positions"] == "fixed rows transformer.pos_encoding"
    assert report["positions_found_by"] == "probe: the rows it adds"
    assert report["pe_std"] is not None


def test_embinit_inspect_json_carries_how_they_were_found(tmp_path, capsys):
    """``embinit inspect --hf-config`` builds the model on the meta device: names and flags answer, and say so."""
    config = T.XGLMConfig(vocab_size=100, d_model=D, num_layers=1, attention_heads=2, ffn_dim=64)
    config.save_pretrained(tmp_path)
    assert inspect_main(["--hf-config", str(tmp_path), "--format", "json"]) == 0
    (slot,) = json.loads(capsys.readouterr().out)["slots"]
    report = slot["init_report"]
    assert report["input_scale_found_by"].startswith("the table's embed_scale; probe: the model is on the meta device")
    assert "meta device" in report["positions_found_by"]


def test_parameters_sharded_over_processes_are_not_run_and_the_report_says_why():
    """A DeepSpeed ZeRO-3 parameter (it carries ``ds_id``) lives partly on other processes: running the forward on
    one could wait on the others, so names and flags answer."""
    model = HF_CASES["gpt2"].build()
    model.transformer.h[0].mlp.c_fc.weight.ds_id = 7
    (slot,) = discover_slots(Holder(model)).values()
    assert "probe: the model's parameters are sharded over processes" in slot.input_scale_found_by
    assert slot.positions == "learned table transformer.wpe" and slot.positional_encoding is not None
