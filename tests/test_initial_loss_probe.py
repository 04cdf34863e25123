"""The random-token probe of a tied LM's initial loss (CausalLM.initial_loss_probe) and the verdict that uses it:
for i.i.d. rows it agrees with [S]'s formula; for rows that share directions it sees what the formula misses."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_embinit.architectures import CausalLM, CausalLMConfig
from lightning_embinit.diagnostics.initial_loss import tied_initial_loss
from lightning_embinit.diagnostics.inspect import inspection
from lightning_embinit.vocabulary import Vocabulary

N, D = 400, 64


def tied_lm(vocabulary=N, **options) -> CausalLM:
    config = CausalLMConfig(d_model=D, num_heads=4, num_layers=1, max_len=32, zero_init_residual=True, **options)
    return CausalLM(config, vocabulary)


def fill(model: CausalLM, rows: torch.Tensor) -> None:
    with torch.no_grad():
        model.token_embedding.weight.copy_(rows)
        if model.padding_idx is not None:
            model.token_embedding.weight[model.padding_idx].zero_()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_iid_rows_probe_matches_spec_3(seed):
    """N(0, 1/d) i.i.d. rows, no positions: the probe is [S]'s ln(e^{dσ} + n − 1) ≈ 8.1 (dσ ≈ 8, n = 400)."""
    model = tied_lm(positional="none")
    generator = torch.Generator().manual_seed(seed)
    fill(model, torch.randn(N, D, generator=generator) / math.sqrt(D))
    probe = model.initial_loss_probe(32, batch_size=32, seed=seed)
    assert probe == pytest.approx(tied_initial_loss(N, D, 1 / math.sqrt(D)), rel=0.03)
    assert probe == pytest.approx(model.initial_loss_prediction(), rel=0.03)


def test_identical_rows_make_a_uniform_start():
    """Every row but pad's the same vector w: every such logit is the same z = LN(√d·w)·w > 0 and the pad row's is
    0, so the loss against any ordinary target is ln(n − 1 + e^(−z)) — a hand computation."""
    model = tied_lm(Vocabulary.numbered(N), positional="none")
    assert model.padding_idx == 0
    w = torch.randn(D, generator=torch.Generator().manual_seed(3)) / math.sqrt(D)
    fill(model, w.expand(N, D).clone())
    with torch.no_grad():
        h = torch.nn.functional.layer_norm(math.sqrt(D) * w, (D,))
        z = float(h @ w)
    assert model.initial_loss_probe(16, batch_size=4) == pytest.approx(math.log(N - 1 + math.exp(-z)), abs=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_sharing_a_direction_fool_the_formula_not_the_probe(seed):
    """Rows a_i · u + small noise, scaled to σ = 1/√d: the i.i.d. prediction stays ≈ 8.1, the probe is far above
    ln n, and the inspection's verdict names the problem and what to do."""
    generator = torch.Generator().manual_seed(seed)
    u = torch.randn(D, generator=generator)
    rows = torch.randn(N, 1, generator=generator) * u + 0.1 * torch.randn(N, D, generator=generator)
    rows = (rows - rows.mean()) / rows.std() / math.sqrt(D)
    model = tied_lm(positional="none")
    fill(model, rows)
    probe = model.initial_loss_probe(32, batch_size=32)
    assert model.initial_loss_prediction() == pytest.approx(tied_initial_loss(N, D, 1 / math.sqrt(D)), rel=0.03)
    assert probe > math.log(N) + 5
    slots = model.embedding_slots()
    report = {
        "tokens": {
            "std": 1 / math.sqrt(D),
            "mean": 0.0,
            "min": -1.0,
            "max": 1.0,
            "input_scale": math.sqrt(D),
            "scaled_mean": 0.0,
            "scaled_std": 1.0,
            "scaled_min": -8.0,
            "scaled_max": 8.0,
        }
    }
    flagged = inspection(slots, report, probed={"tokens": probe})
    [row] = flagged["slots"]
    assert flagged["verdict"] == "bad" and row["probed_initial_loss"] == probe
    assert "loss on random tokens" in row["problems"][0]["problem"] and "untie" in row["problems"][0]["countermeasures"]
    quiet = inspection(slots, report, probed={"tokens": math.log(N) + 0.5})
    assert not any("random tokens" in p["problem"] for p in quiet["slots"][0]["problems"])
