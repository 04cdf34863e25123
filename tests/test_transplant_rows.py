"""The rows a transplant builds from the old tokens' rows only: a padded table's rows past its tokens and the padding
row left out of μ, the statistics and the bias entries (numpy by hand); one built row standardized too; the output
side's weights for every output-side tensor; an old tokenizer that disagrees with the tokens the model names."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from lightning_embinit import TiedEmbeddingLM
from lightning_embinit.init.extension.tables import SlotTables
from lightning_embinit.init.transplant import match_vocabularies, transplant_tokenizer
from lightning_embinit.init.transplant.methods import MethodRequest, TransplantMethod
from lightning_embinit.init.transplant.plan import plan_transplant, table_numbers
from lightning_embinit.init.transplant.tokenizers import TokenizerView

OLD = ["<pad>", "a", "b", "c", "d", "e", "f", "g"]  # 8 tokens over a table of 12 rows (4 padded rows past them)
NEW = ["<pad>", "a", "b", "fresh", "newer"]


class Padded(nn.Module):
    """A table padded past its tokens (as Pythia's 50,304 rows for 50,277 tokens), its padding row 0, an untied head
    with a bias; the padded rows hold values far from the tokens' (a mean over them would show)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(12, 6, padding_idx=0)
        self.head = nn.Linear(6, 12)
        with torch.no_grad():
            for weight in (self.embed.weight, self.head.weight, self.head.bias):
                weight.copy_(torch.randn(weight.shape, generator=generator))
                weight[8:] = 100.0
            self.embed.weight[0] = 0.0

    def vocabulary_outputs(self) -> dict[str, list[str]]:
        return {"embed": ["head"]}


def old_view() -> TokenizerView:
    return TokenizerView(list(OLD), {"pad": "<pad>"})


@pytest.mark.parametrize("seed", range(3))
def test_mean_and_bias_rules_read_only_the_old_tokens_rows(seed):
    model = Padded(seed)
    before = {k: v.detach().double().numpy().copy() for k, v in model.state_dict().items()}
    transplant_tokenizer(model, NEW, old_tokenizer=old_view(), method="mean")
    tokens = before["embed.weight"][1:8]  # the old tokens' rows: not the padding row 0, not the padded rows 8-11
    np.testing.assert_allclose(model.embed.weight[3:].detach().numpy(), np.stack([tokens.mean(0)] * 2), rtol=1e-5)
    expected_head = before["head.weight"][1:8].mean(0)
    np.testing.assert_allclose(model.head.weight[3:].detach().numpy(), np.stack([expected_head] * 2), rtol=1e-5)
    np.testing.assert_allclose(model.head.bias[3:].detach().numpy(), [before["head.bias"][1:8].mean()] * 2, rtol=1e-5)
    model = Padded(seed)
    transplant_tokenizer(model, NEW, old_tokenizer=old_view(), method="mean", bias="min")
    assert model.head.bias[3:].tolist() == pytest.approx([before["head.bias"][1:8].min()] * 2)


@pytest.mark.parametrize("seed", range(3))
def test_one_built_row_is_standardized_to_the_old_tokens_statistics(seed):
    """(x − mean(x))·σ_old/σ(x) + μ_old for the one built row x (token:c, old id 3), μ_old and σ_old over the old
    tokens' rows (the padding row and the padded rows left out), with numpy's population std."""
    model = Padded(seed)
    old = model.embed.weight.detach().double().numpy().copy()
    report = transplant_tokenizer(model, NEW[:4], old_tokenizer=old_view(), method="token:c", standardize=True)
    tokens, x = old[1:8], old[3]
    expected = (x - x.mean()) * tokens.std() / x.std() + tokens.mean()
    np.testing.assert_allclose(model.embed.weight[3].detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    assert report["built"] == 1 and report["old_std"] == pytest.approx(tokens.std(), rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_table_numbers_against_numpy(seed):
    """A middle padding row and padded rows left out; a mean of 1e8 with a std of 0.01 (float64) does not cancel."""
    generator = torch.Generator().manual_seed(seed)
    table = 1e8 + 0.01 * torch.randn(20, 5, generator=generator, dtype=torch.float64)
    numbers = table_numbers(table, 15, 6)
    rows = np.delete(table.numpy()[:15], 6, axis=0)
    np.testing.assert_allclose(numbers.mean_row.numpy(), rows.mean(0).astype(np.float32))
    assert numbers.mean == pytest.approx(rows.mean(), rel=1e-12)
    assert numbers.std == pytest.approx(rows.std(), rel=1e-6)
    assert numbers.row_norm == pytest.approx(np.linalg.norm(rows, axis=1).mean(), rel=1e-12)
    table[17, 2] = float("nan")
    with pytest.raises(ValueError, match=r"already holds NaN or inf \(rows \[17\]\)"):
        table_numbers(table, 15, 6)


def test_the_output_side_takes_the_output_roles_weights():
    """A method answering old id 1 for the input role and old id 2 for the output role: the table's new rows are
    row 1, every output-side tensor's (the head, its bias, a vocabulary bias such as final_logits_bias) row 2."""
    generator = torch.Generator().manual_seed(0)
    old = SlotTables(
        torch.randn(4, 3, generator=generator),
        {"head": torch.randn(4, 3, generator=generator)},
        {"head": torch.randn(4, generator=generator)},
        {"final_logits_bias": torch.randn(1, 4, generator=generator)},
    )
    tokens = ["w", "x", "y", "z"]
    match = match_vocabularies(tokens, ["w", "new"])
    request = MethodRequest(["w", "new"], tokens, match.unmatched, {0: 0}, str)
    method = TransplantMethod(
        "roles", lambda ask, ids: [([1 if ask.role == "input" else 2], [1.0])] * len(ids), per_role=True
    )
    plan = plan_transplant(old, slot="s", match=match, request=request, methods=(method, method), special=set(),
                           padding=(None, None))  # fmt: skip
    assert torch.equal(plan.embedding_rows[0], old.embedding[1])
    assert torch.equal(plan.output_rows["head"][0], old.outputs["head"][2])
    assert float(plan.bias_rows["head"][0]) == float(old.biases["head"][2])
    assert float(plan.bias_rows["final_logits_bias"][0, 0]) == float(old.vocabulary_biases["final_logits_bias"][0, 2])


def test_an_old_tokenizer_that_is_not_the_models_is_refused():
    torch.manual_seed(0)
    model = TiedEmbeddingLM(vocabulary=OLD, architecture={"d_model": 16, "num_heads": 2, "num_layers": 1})
    before = model.model.token_embedding.weight.detach().clone()
    swapped = OLD[:2] + ["c", "b"] + OLD[4:]
    with pytest.raises(ValueError, match=r"id 2 is 'c' there, 'b' in the model; its ids would pick the wrong rows"):
        transplant_tokenizer(model, NEW, old_tokenizer=TokenizerView(swapped), method="mean")
    assert torch.equal(model.model.token_embedding.weight, before) and model.vocabulary == OLD
    transplant_tokenizer(model, NEW, old_tokenizer=TokenizerView(OLD + ["past the table"]), method="mean")
    assert model.vocabulary == NEW  # a token past the table's rows is never compared


def test_an_encoder_transplant_leaves_the_decoders_head_to_the_decoder_slot():
    """FSMT: the decoder's head as wide as the encoder's table belongs to the decoder's slot: no warning."""
    from tests.test_extension_families import OLD as FSMT_OLD
    from tests.test_extension_families import _fsmt

    model = _fsmt()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transplant_tokenizer(
            model, FSMT_OLD[::-1], old_tokenizer=FSMT_OLD, slot="model.encoder.embed_tokens", method="mean"
        )
    assert model.config.src_vocab_size == len(FSMT_OLD)
