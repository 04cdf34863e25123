"""Every model of the package survives any order of validate / fit / validate / test (issue 7 §2)."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit.models import TiedEmbeddingLM, TransformerClassifier
from lightning_embinit.models.module import refresh_metric_states


def lm_case():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (16, 9), generator=generator)
    loader = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=4)
    return TiedEmbeddingLM(
        vocab_size=40, architecture={"d_model": 16, "num_heads": 2, "num_layers": 1, "max_len": 8}
    ), loader


def classifier_case():
    generator = torch.Generator().manual_seed(0)
    ids, labels = torch.randint(1, 40, (16, 9), generator=generator), torch.randint(0, 3, (16,), generator=generator)
    model = TransformerClassifier(
        vocab_size=40,
        num_classes=3,
        architecture={"d_model": 16, "num_heads": 2, "num_layers": 1, "ffn_dim": 32, "max_len": 16},
    )
    return model, DataLoader(TensorDataset(ids, labels), batch_size=4)


CASES = {"TiedEmbeddingLM": lm_case, "TransformerClassifier": classifier_case}


def trainer(tmp_path, **options) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **options,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_fit_validate_test(tmp_path, case):
    model, loader = CASES[case]()
    first = trainer(tmp_path).validate(model, loader, verbose=False)[0]
    run = trainer(tmp_path, val_check_interval=1, limit_val_batches=2)
    run.fit(model, loader, loader)
    second = trainer(tmp_path).validate(model, loader, verbose=False)[0]
    tested = trainer(tmp_path).test(model, loader, verbose=False)[0]
    predicted = trainer(tmp_path).validate(model, loader, verbose=False)[0]
    key = next(k for k in first if k.endswith("loss"))
    assert all(math.isfinite(v) for v in (*first.values(), *second.values(), *tested.values()))
    assert second[key] != first[key]  # fit trained the model between the two evaluations
    assert predicted[key] == pytest.approx(second[key], rel=1e-6)  # evaluation is repeatable


def test_refresh_replaces_inference_states_only():
    from torchmetrics.aggregation import MeanMetric

    metric = MeanMetric()
    with torch.inference_mode():
        metric.update(torch.tensor(2.0))
        metric.reset()
    assert metric.mean_value.is_inference()
    assert refresh_metric_states(metric) == 2 and not metric.mean_value.is_inference()
    metric.update(torch.tensor(3.0))  # outside inference mode: would raise on an inference tensor
    assert metric.compute().item() == 3.0 and refresh_metric_states(metric) == 0
