"""The torch-only diagnostics: statistics, absorption, smoothing, figures — against hand computations."""

import io
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from lightning_embinit.diagnostics import (
    CrossingTracker,
    absorption,
    drowning,
    first_crossing,
    slot_absorption,
    slot_statistics,
    tensorboard_smooth,
)
from lightning_embinit.diagnostics.absorption import Absorption
from lightning_embinit.diagnostics.figures import learning_curves, pca_2d, pca_scatter, value_histogram
from lightning_embinit.init import EmbeddingSlot


def test_diagnostics_import_without_lightning():
    code = (
        "import sys, lightning_embinit.diagnostics, lightning_embinit.diagnostics.figures, "
        "lightning_embinit.diagnostics.inspect; "
        "print(any(m.split('.')[0] in ('lightning', 'pytorch_lightning') for m in sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def small_slot(weight, *, scale=2.0, positional=None, padding_idx=None):
    embedding = nn.Embedding(*weight.shape, padding_idx=padding_idx)
    with torch.no_grad():
        embedding.weight.copy_(weight)
    return EmbeddingSlot(
        "words", embedding, input_scale=scale, positional_encoding=None if positional is None else (lambda: positional)
    )


def test_slot_statistics_by_hand():
    weight = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 6.0]])  # row 0 is padding and must not count
    positional = torch.tensor([[0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]])
    stats = slot_statistics(small_slot(weight, positional=positional, padding_idx=0))
    values = np.array([1.0, 2.0, 3.0, 6.0])
    assert stats["mean"] == pytest.approx(values.mean()) and stats["std"] == pytest.approx(values.std())
    assert (stats["min"], stats["max"]) == (1.0, 6.0)
    assert stats["scaled_std"] == pytest.approx(2 * values.std()) and stats["scaled_max"] == pytest.approx(12.0)
    pe = positional.numpy().ravel()
    assert stats["pe_std"] == pytest.approx(pe.std()) and stats["pe_range"] == pytest.approx(2.0)
    assert stats["ratio"] == pytest.approx(2 * values.std() / pe.std())
    no_pe = slot_statistics(small_slot(weight))
    assert no_pe["pe_std"] is None and no_pe["ratio"] is None and no_pe["pe_range"] is None


def by_hand(x, p, k):
    """Cosines and neighbour lists with plain numpy loops."""
    z = x + p
    cos = lambda a, b: float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))  # noqa: E731
    semantic = np.mean([cos(x[i], z[i]) for i in range(len(x))])
    positional = np.mean([cos(p[i], z[i]) for i in range(len(x))])

    def neighbours(v, i):
        others = [(cos(v[i], v[j]), j) for j in range(len(v)) if j != i]
        return {j for _, j in sorted(others, reverse=True)[:k]}

    survival = np.mean([len(neighbours(x, i) & neighbours(z, i)) / k for i in range(len(x))])
    return semantic, positional, survival


def test_absorption_matches_hand_computation():
    angles = np.radians([0.0, 12.0, 95.0, 200.0, 290.0])
    x = np.stack([np.cos(angles), np.sin(angles)], 1) * np.array([[1.0], [2.0], [0.5], [1.5], [1.0]])
    p = np.array([[0.3, 0.9], [-1.0, 0.2], [0.8, -0.1], [0.0, 1.0], [0.5, 0.5]])
    for k in (1, 2):
        result = absorption(torch.tensor(x, dtype=torch.float32), torch.tensor(p, dtype=torch.float32), neighbours=k)
        semantic, positional, survival = by_hand(x, p, k)
        assert result.semantic_retention == pytest.approx(semantic, abs=1e-6)
        assert result.positional_retention == pytest.approx(positional, abs=1e-6)
        assert result.neighbour_survival == pytest.approx(survival)
        assert result.sampled_rows == 5 and result.neighbours == k
    assert 0 < survival < 1  # the example moves some neighbours and keeps others
    with pytest.raises(ValueError, match="at least 2"):
        absorption(torch.ones(1, 2), torch.ones(1, 2))


def test_retention_follows_the_ratio_for_random_directions():
    """For independent directions cos(x, x + P) ≈ r / √(1 + r²) with r = |x| / |P| (docs/concepts.md#absorption)."""
    generator = torch.Generator().manual_seed(0)
    x, p = torch.randn(2000, 256, generator=generator), torch.randn(2000, 256, generator=generator)
    for r in (0.1, 1.0, 10.0):
        result = absorption(r * x, p)
        assert result.semantic_retention == pytest.approx(r / math.sqrt(1 + r * r), abs=0.01)
        assert result.positional_retention == pytest.approx(1 / math.sqrt(1 + r * r), abs=0.01)
    assert absorption(10 * x, p).neighbour_survival > absorption(0.1 * x, p).neighbour_survival


def test_slot_absorption_samples_privately_and_skips_slots_without_positions():
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(300, 16, generator=generator)
    positional = torch.randn(40, 16, generator=generator)
    slot = small_slot(weight, scale=3.0, positional=positional, padding_idx=0)
    state = torch.get_rng_state()
    first = slot_absorption(slot, sample_rows=64, seed=5)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched
    assert first == slot_absorption(slot, sample_rows=64, seed=5) and first != slot_absorption(
        slot, sample_rows=64, seed=6
    )
    assert first.sampled_rows == 64
    # the same rows and positions by hand: padding row 0 left out, positions below max_position
    sample = torch.Generator().manual_seed(5)
    rows = torch.randperm(299, generator=sample)[:64].sort().values
    positions = torch.randint(0, 10, (64,), generator=sample)
    expected = absorption(weight[1:][rows] * 3.0, positional[:10][positions])
    assert slot_absorption(slot, sample_rows=64, seed=5, max_position=10) == expected
    assert slot_absorption(small_slot(weight)) is None


def test_drowning_names_the_direction_and_the_countermeasures():
    tokens_win = drowning(Absorption(0.99, 0.1, 0.9, 10, 5))
    assert (
        "drown the position signal" in tokens_win[0]
        and "standardize" in tokens_win[1]
        and "input scale" in tokens_win[1]
    )
    positions_win = drowning(Absorption(0.04, 0.99, 0.1, 10, 5))
    assert "drowns the token vectors" in positions_win[0] and "raise the input scale" in positions_win[1]
    for _, countermeasures in (tokens_win, positions_win):  # the option's name in each model
        assert (
            "input_scale=" in countermeasures
            and "embedding_scale=" in countermeasures
            and "TiedEmbeddingLM" in countermeasures
        )
    assert drowning(Absorption(0.7, 0.7, 0.5, 10, 5)) is None
    # a large-vocabulary Xavier start (semantic retention ≈ 0.15) is [K]'s recommended regime, not a problem
    assert drowning(Absorption(0.15, 0.98, 0.02, 10, 5)) is None
    assert drowning(Absorption(0.15, 0.98, 0.02, 10, 5), semantic_threshold=0.2) is not None


def test_tensorboard_smoothing_by_hand():
    # debiased: m_t = 0.6 m_{t-1} + 0.4 v_t, shown m_t / (1 − 0.6^t)
    assert tensorboard_smooth([1.0, 0.0, 1.0]) == pytest.approx([1.0, 0.24 / 0.64, 0.544 / 0.784])
    assert tensorboard_smooth([1.0, 0.0, 1.0], debias=False) == pytest.approx([1.0, 0.6, 0.76])
    smoothed = tensorboard_smooth([2.0, float("nan"), 2.0])
    assert smoothed[0] == pytest.approx(2.0) and math.isnan(smoothed[1]) and smoothed[2] == pytest.approx(2.0)
    assert tensorboard_smooth([3.0, 5.0], weight=0.0) == [3.0, 5.0]
    with pytest.raises(ValueError, match="smoothing weight"):
        tensorboard_smooth([1.0], weight=1.0)


def test_first_crossing_on_the_smoothed_curve():
    scores = [0.1, 0.7, 0.2, 0.6, 0.7, 0.8]  # the raw curve crosses 0.5 at index 1; the smoothed one later
    smoothed = tensorboard_smooth(scores)
    expected = next(i for i, s in enumerate(smoothed) if s >= 0.5)
    assert first_crossing(scores, 0.5) == expected > 1
    losses = [5.0, 4.0, 3.5, 2.0, 1.0]
    assert first_crossing(losses, 3.0, mode="min") == next(
        i for i, s in enumerate(tensorboard_smooth(losses)) if s <= 3.0
    )
    assert first_crossing(scores, 2.0) is None
    with pytest.raises(ValueError, match="higher is better"):
        first_crossing(scores, 0.5, mode="up")


def test_crossing_tracker_resumes_the_same_curve():
    values = [0.1, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8]
    whole = CrossingTracker(0.6)
    for step, value in enumerate(values):
        whole.update(value, examples=32 * (step + 1), step=step)
    first, second = CrossingTracker(0.6), CrossingTracker(0.6)
    for step, value in enumerate(values[:3]):
        first.update(value, examples=32 * (step + 1), step=step)
    second.load_state_dict(first.state_dict())
    for step, value in enumerate(values[3:], start=3):
        second.update(value, examples=32 * (step + 1), step=step)
    assert second.state_dict() == whole.state_dict()
    index = first_crossing(values, 0.6)
    assert whole.crossed_at_step == index and whole.crossed_at_examples == 32 * (index + 1)
    with pytest.raises(ValueError, match="smoothed with weight=0.6"):
        CrossingTracker(0.6, weight=0.9).load_state_dict(first.state_dict())


def test_pca_recovers_the_leading_axes():
    generator = torch.Generator().manual_seed(0)
    coefficients = torch.randn(50, 2, generator=generator) * torch.tensor([5.0, 1.0])
    basis = torch.linalg.qr(torch.randn(8, 8, generator=generator)).Q[:, :2]
    points = pca_2d(coefficients @ basis.T + 3.0)
    assert points.shape == (50, 2)
    assert points[:, 0].var() > points[:, 1].var()
    # the projection is the data up to a rotation/reflection per axis: pairwise distances are kept
    assert torch.allclose(
        torch.cdist(points, points), torch.cdist(coefficients.double(), coefficients.double()), atol=1e-6
    )


def test_figures_render_to_png():
    generator = torch.Generator().manual_seed(0)
    histogram = value_histogram(
        torch.randn(100, 8, generator=generator) * 4, torch.rand(20, 8, generator=generator), title="t"
    )
    scatter = pca_scatter(
        {"a": torch.randn(6, 8, generator=generator), "b": torch.randn(6, 8, generator=generator)},
        [f"w{i}" for i in range(6)],
        title="s",
    )
    curves = learning_curves(
        {"x": ([1, 2, 3], [0.1, 0.5, 0.9], tensorboard_smooth([0.1, 0.5, 0.9]))},
        threshold=0.5,
        metric="acc",
        crossings={"x": 3},
    )
    for figure in (histogram, scatter, curves):
        assert isinstance(figure, Figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(histogram.axes[0].patches) == 200  # 100 bins each for tokens and positions
    assert len(scatter.axes) == 2 and len(scatter.axes[0].texts) == 6
