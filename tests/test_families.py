"""Model families recognized with no configuration: each slot's table, scale and positions are what the model really
adds before its first layer (read by a hook on the model's own forward pass), wherever the model sits."""

from __future__ import annotations

import pytest
import torch

from lightning_embinit.init.host import ANY_EMBEDDING, discover_slots
from tests.family_models import CASES, HF_CASES, Holder, NanoGPT, first_layer_input, torchtune_decoder


@pytest.mark.parametrize("name", list(CASES))
def test_the_slot_is_the_token_table_with_the_scale_and_positions_the_model_adds(name):
    case = CASES[name]
    model = case.build()
    slots = discover_slots(Holder(model))
    assert list(slots) == [f"backbone.{case.table}"]  # position and token-type tables are never token slots
    (slot,) = slots.values()
    assert slot.input_scale == pytest.approx(case.scale)
    for seed in range(3):
        ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(seed))
        fed = first_layer_input(model, case, ids)[0]
        added = fed - slot.input_scale * slot.weight.detach()[ids[0]]
        if case.positions == "learned":
            assert slot.positional_encoding is not None and slot.positions.startswith("learned table")
            torch.testing.assert_close(added, slot.positional_encoding()[:12], atol=2e-5, rtol=0)
        else:
            assert slot.positional_encoding is None and slot.positions.startswith("none")
            torch.testing.assert_close(added, torch.zeros_like(added), atol=2e-5, rtol=0)


@pytest.mark.parametrize(
    ("name", "tied", "untied", "biases"),
    [
        ("gpt2", ("backbone.lm_head",), (), ()),
        ("bert", ("backbone.cls.predictions.decoder",), (), ("backbone.cls.predictions.decoder.bias",)),
        (
            "bart",
            ("backbone.model.encoder.embed_tokens", "backbone.model.decoder.embed_tokens", "backbone.lm_head"),
            (),
            ("backbone.final_logits_bias",),
        ),
        ("llama", (), ("backbone.lm_head",), ()),
        ("gpt_neox", (), ("backbone.lm_head",), ()),
    ],
)
def test_heads_tied_untied_and_their_vocabulary_biases(name, tied, untied, biases):
    (slot,) = discover_slots(Holder(HF_CASES[name].build())).values()
    assert slot.tied_modules == tied and slot.output_layers == untied and slot.vocabulary_biases == biases
    assert slot.family.startswith("hugging_face: ")


def test_torchtunes_tied_linear_is_a_tied_head_though_it_holds_no_weight():
    (tied,) = discover_slots(Holder(torchtune_decoder(tied=True))).values()
    (untied,) = discover_slots(Holder(torchtune_decoder(tied=False))).values()
    assert tied.tied_modules == ("backbone.output",) and tied.output_layers == ()
    assert untied.tied_modules == () and untied.output_layers == ("backbone.output",)


def test_the_padding_row_is_the_models():
    assert next(iter(discover_slots(HF_CASES["roberta"].build()).values())).padding_idx == 1
    assert next(iter(discover_slots(HF_CASES["bert"].build()).values())).padding_idx == 0
    assert next(iter(discover_slots(HF_CASES["gpt2"].build()).values())).padding_idx is None


def test_two_recognized_models_in_one_module_each_give_their_table():
    holder = Holder(NanoGPT())
    holder.teacher = HF_CASES["gpt2"].build()
    assert list(discover_slots(holder)) == ["backbone.transformer.wte", "teacher.transformer.wte"]


def test_an_unknown_module_keeps_every_embedding_as_a_guess():
    module = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Embedding(6, 4))
    slots = discover_slots(module)
    assert list(slots) == ["0", "1"] and {slot.family for slot in slots.values()} == {ANY_EMBEDDING}
