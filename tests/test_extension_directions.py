"""Vocabulary extension with the shared-directions transforms on its new rows (``transforms=``), against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from lightning_embinit import VocabularyExtensionCallback, extend_vocabulary

V, D, ADDED = 12, 8, 9
OLD = [f"w{i}" for i in range(V)]
NEW = OLD + [f"n{i}" for i in range(ADDED)]


def table(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    module = nn.Module()
    module.embed = nn.Embedding(V, D)
    with torch.no_grad():
        module.embed.weight.mul_(0.3).add_(torch.linspace(-1, 1, D))  # rows sharing a common mean
    return module


def new_rows(seed: int, **options) -> torch.Tensor:
    module = table(seed)
    extend_vocabulary(module, NEW, old_tokens=OLD, rule="mean_cov:1", seed=seed, **options)  # s = 1: spread rows
    return module.embed.weight.detach()[V:].double().numpy()


def standardized_as_old(rows: np.ndarray, old: np.ndarray) -> np.ndarray:
    return (rows - rows.mean()) / rows.std() * old.std() + old.mean()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_remove_top_then_standardize_is_the_numpy_computation_on_the_rules_rows(seed):
    raw = new_rows(seed)  # the rule's rows, as drawn with this seed
    old = table(seed).embed.weight.detach().double().numpy()
    centred = raw - raw.mean(axis=0)
    top = np.linalg.svd(centred, full_matrices=False)[2][:2]  # the top 2 principal directions
    expected = standardized_as_old(centred - centred @ top.T @ top, old)
    np.testing.assert_allclose(new_rows(seed, transforms=["remove_top:2"], standardize=True), expected, atol=2e-5)
    centred_only = standardized_as_old(centred, old)
    np.testing.assert_allclose(new_rows(seed, transforms=["center"], standardize=True), centred_only, atol=2e-5)
    variances, directions = np.linalg.eigh(centred.T @ centred / len(centred))  # ZCA, ε = 1e-3 relative to λ̄
    regularized = variances + 1e-3 * variances.mean()
    keep = np.sqrt(variances.sum() / (variances / regularized).sum())  # the total variance is kept
    zca = directions @ np.diag(keep / np.sqrt(regularized)) @ directions.T
    np.testing.assert_allclose(new_rows(seed, transforms=["whiten"]), centred @ zca, atol=2e-5)


def test_the_report_names_the_steps_and_bad_steps_are_refused_before_anything_changes():
    module = table(0)
    before = module.embed.weight.detach().clone()
    with pytest.raises(ValueError, match=r"'shuffle' is not a transform of the new rows; choose from: center, remove"):
        extend_vocabulary(module, NEW, old_tokens=OLD, transforms=["shuffle"])
    with pytest.raises(ValueError, match=r"transform 'remove_top' is fitted on the new rows, and needs at least 9 "):
        extend_vocabulary(module, OLD + ["n0", "n1"], old_tokens=OLD, transforms=["remove_top:7"])
    assert torch.equal(module.embed.weight, before)
    report = extend_vocabulary(module, NEW, old_tokens=OLD, transforms=["remove_top:1", "whiten"], seed=0)
    assert report["transforms"] == ["remove_top:1", "whiten"]
    with pytest.raises(ValueError, match=r"transforms= is a list of steps"):
        VocabularyExtensionCallback(transforms="center")
    assert VocabularyExtensionCallback(transforms=["center"]).options["transforms"] == ["center"]
