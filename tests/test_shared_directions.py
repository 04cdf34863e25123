"""Shared directions: center, all-but-the-top and whitening against numpy's SVD/eigh of the centred rows, the isotropy
measures against brute force, and planted common directions that the transforms must remove."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import lightning_embinit.init.statistics as statistics
from lightning_embinit.init.directions import DEFAULT_WHITEN_EPS, center, remove_top, whiten
from lightning_embinit.init.statistics import (
    default_top_k,
    iid_top_share,
    isotropy,
    mean_cosine,
    principal_directions,
)

SEEDS = (0, 1, 2)


def planted(n=600, d=40, c=8.0, seed=0, dtype=torch.float64):
    """Rows z_i + c·(1 + s_i)·u: noise N(0, I), a common mean c·u and most of the variance along the unit u."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(d, generator=g, dtype=torch.float64)
    u /= u.norm()
    s = torch.randn(n, 1, generator=g, dtype=torch.float64)
    rows = torch.randn(n, d, generator=g, dtype=torch.float64) + c * (1 + s) * u
    return rows.to(dtype), u


def numpy_pca(rows: np.ndarray):
    """Mean, variances (descending) and directions (rows of vt) of ``rows`` by numpy's SVD of the centred matrix."""
    mean = rows.mean(axis=0)
    _, singular, vt = np.linalg.svd(rows - mean, full_matrices=False)
    return mean, singular**2 / len(rows), vt


def numpy_whiten(rows: np.ndarray, fit: np.ndarray, eps: float) -> np.ndarray:
    mean = fit.mean(axis=0)
    variances, vectors = np.linalg.eigh(np.cov(fit - mean, rowvar=False, bias=True))
    variances = np.clip(variances, 0, None)
    regularized = variances + eps * variances.mean()
    c = math.sqrt(variances.sum() / (variances / regularized).sum())
    return (rows - mean) @ (vectors * (c / np.sqrt(regularized))) @ vectors.T


@pytest.mark.parametrize("seed", SEEDS)
def test_principal_directions_match_numpy_svd(seed, monkeypatch):
    monkeypatch.setattr(statistics, "CHUNK_ELEMENTS", 997)  # many blocks of 24 rows: the chunked passes add up
    rows, _ = planted(seed=seed)
    mask = torch.rand(len(rows), generator=torch.Generator().manual_seed(seed)) < 0.7
    found = principal_directions(rows, mask)
    mean, variances, vt = numpy_pca(rows[mask].numpy())
    assert found.rows == int(mask.sum())
    np.testing.assert_allclose(found.mean.numpy(), mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(found.variances.numpy(), variances, rtol=1e-9, atol=1e-12)
    for j in range(3):  # each direction up to its sign
        assert abs(float(found.directions[:, j] @ torch.from_numpy(vt[j]))) == pytest.approx(1.0, abs=1e-9)
    assert found.top_share(2) == pytest.approx(variances[:2].sum() / variances.sum(), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_center_remove_top_and_whiten_match_numpy(seed, monkeypatch):
    monkeypatch.setattr(statistics, "CHUNK_ELEMENTS", 1009)
    rows, _ = planted(seed=seed)
    mask = torch.arange(len(rows)) % 3 != 0  # fitted on two thirds, applied to every row
    fit = rows[mask].numpy()
    mean, _, vt = numpy_pca(fit)
    centred = rows.numpy() - mean
    np.testing.assert_allclose(center(rows, rows=mask).numpy(), centred, atol=1e-12)
    for k in (1, 3):
        expected = centred - centred @ vt[:k].T @ vt[:k]
        np.testing.assert_allclose(remove_top(rows, k, rows=mask).numpy(), expected, atol=1e-9)
    for eps in (DEFAULT_WHITEN_EPS, 0.1):
        expected = numpy_whiten(rows.numpy(), fit, eps)
        np.testing.assert_allclose(whiten(rows, eps, rows=mask).numpy(), expected, atol=1e-8)


def test_in_place_with_out_and_float32_blocks():
    rows, _ = planted(n=300, d=24, dtype=torch.float32)
    expected = remove_top(rows.double(), 2).float()
    out = rows.clone()
    assert remove_top(out, 2, out=out) is out
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_remove_top_one_removes_a_planted_direction(seed):
    """The top principal direction of noise + c(1 + s)u is u; after remove_top:1 no row has a component along u
    beyond the estimation error, and the isotropy measures move as computed by hand."""
    n, d, c = 2000, 50, 8.0
    rows, u = planted(n=n, d=d, c=c, seed=seed)
    before = isotropy(rows)
    assert before["top_share"] == pytest.approx((c * c + 1) / (c * c + d), rel=0.1)  # λ_u = c² + 1 of Σλ = c² + d
    # cos(x_i, x_j) ≈ a_i a_j with a = c(1 + s)/√(d + c²(1 + s)²), the noise terms averaging out: (E a)², s ~ N(0, 1)
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    along_u = c * (1 + nodes) / np.sqrt(d + c * c * (1 + nodes) ** 2)
    assert before["mean_cosine"] == pytest.approx((weights @ along_u / weights.sum()) ** 2, rel=0.12)
    assert abs(float(principal_directions(rows).directions[:, 0] @ u)) > 0.999
    cleaned = remove_top(rows, 1)
    along = cleaned @ u
    assert float(along.square().mean()) < 0.01  # from (c² + 1) = 65; noise alone puts 1 in every direction
    after = isotropy(cleaned)
    assert after["top_share"] < 1.3 * iid_top_share(n, d - 1) and abs(after["mean_cosine"]) < 0.01
    centred = isotropy(center(rows))
    assert centred["top_share"] == pytest.approx(before["top_share"], rel=1e-9)  # centring leaves the covariance
    assert abs(centred["mean_cosine"]) < 0.01 < before["mean_cosine"]
    whitened = isotropy(whiten(rows))
    assert whitened["top_share"] < 1.3 * iid_top_share(n, d)


@pytest.mark.parametrize("seed", SEEDS)
def test_whitened_rows_are_decorrelated_with_their_total_variance(seed):
    rows, _ = planted(seed=seed)
    whitened = whiten(rows, 1e-6).numpy()
    covariance = np.cov(whitened, rowvar=False, bias=True)
    total = np.trace(np.cov(rows.numpy(), rowvar=False, bias=True))
    assert np.trace(covariance) == pytest.approx(total, rel=1e-9)
    np.testing.assert_allclose(covariance, np.eye(40) * total / 40, atol=1e-4 * total / 40)


@pytest.mark.parametrize("seed", SEEDS)
def test_mean_cosine_is_exact(seed, monkeypatch):
    monkeypatch.setattr(statistics, "CHUNK_ELEMENTS", 101)
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(150, 12, generator=g, dtype=torch.float64) + torch.randn(12, generator=g, dtype=torch.float64)
    rows[7] = 0  # a zero row has no direction and does not count
    a = rows.numpy()
    keep = np.linalg.norm(a, axis=1) > 0
    units = a[keep] / np.linalg.norm(a[keep], axis=1, keepdims=True)
    cosines = units @ units.T
    pairs = [cosines[i, j] for i in range(len(units)) for j in range(len(units)) if i != j]
    assert mean_cosine(rows) == pytest.approx(float(np.mean(pairs)), rel=1e-10, abs=1e-14)
    assert math.isnan(mean_cosine(torch.zeros(3, 4)))


def test_isotropy_of_iid_rows_and_sampling():
    rows = torch.randn(4000, 64, generator=torch.Generator().manual_seed(0))
    measures = isotropy(rows)
    assert measures["isotropy_rows"] == 4000 and measures["top_k"] == default_top_k(64) == 1
    assert measures["top_share"] == pytest.approx(iid_top_share(4000, 64), rel=0.1)  # the Marchenko–Pastur edge
    assert abs(measures["mean_cosine"]) < 1e-3
    sampled = isotropy(rows, max_multiply_adds=1000 * 64 * 64)
    assert sampled["isotropy_rows"] == 1000 and sampled["mean_cosine"] == measures["mean_cosine"]
    assert sampled["iid_top_share"] == pytest.approx(iid_top_share(1000, 64))
    assert default_top_k(300) == 3 and default_top_k(3584) == 36 and default_top_k(50) == 1


@pytest.mark.parametrize("seed", [0, 1])
def test_a_wide_tables_isotropy_is_the_sampled_rows_own_spectrum_within_its_budget(seed):
    """N·D² over the budget: budget // D² rows (here 40 of 300 at D = 96, fewer rows than columns), their spectrum
    from numpy's SVD; a planted direction stays visible."""
    rows, _ = planted(n=300, d=96, c=8.0, dtype=torch.float64, seed=seed)
    measures = isotropy(rows, max_multiply_adds=40 * 96 * 96)
    sample = torch.randperm(300, generator=torch.Generator().manual_seed(0))[:40].sort().values.numpy()
    chosen = rows.numpy()[sample]
    spectrum = np.linalg.svd(chosen - chosen.mean(axis=0), compute_uv=False) ** 2
    assert measures["isotropy_rows"] == 40 and measures["iid_top_share"] == pytest.approx(iid_top_share(40, 96))
    assert measures["top_share"] == pytest.approx(spectrum[0] / spectrum.sum(), rel=1e-9)
    assert measures["top_share"] > 5 * measures["iid_top_share"]


def test_bfloat16_tables_are_computed_wide_and_rounded_without_bias():
    rows, _ = planted(n=4000, d=64, c=5.0, dtype=torch.float32)
    table = rows.to(torch.bfloat16)
    reference = remove_top(table.double(), 2)
    result = remove_top(table, 2, generator=torch.Generator().manual_seed(1))
    assert result.dtype == torch.bfloat16
    error = result.double() - reference
    assert float(error.abs().max()) < 2**-7 * float(reference.abs().max())  # within bf16's precision
    assert abs(float(error.mean())) < 1e-5 * float(reference.std())  # stochastic rounding: no bias
    again = remove_top(table, 2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(result, again)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: remove_top(x, 0), r"integer ≥ 1, got 0"),
        (lambda x: remove_top(x, 2.5), r"integer ≥ 1, got 2.5"),
        (lambda x: remove_top(x, 8), r"below the table's width D = 8"),
        (lambda x: whiten(x, 0.0), r"finite number > 0, got 0.0"),
        (lambda x: whiten(x, math.nan), r"finite number > 0"),
        (lambda x: whiten(torch.ones(5, 8)), "all equal"),
        (lambda x: center(x, rows=torch.zeros(5, dtype=torch.bool)), "mean row of no rows"),
        (lambda x: center(x, rows=torch.ones(4, dtype=torch.bool)), "one entry per row"),
    ],
)
def test_bad_arguments_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call(torch.randn(5, 8))


def test_a_large_table_needs_no_float64_copy():
    """A 25,000 × 512 float32 table (49 MiB): whitening and all-but-the-top in place, and the report's isotropy,
    raise the peak memory by a few row blocks (4 MiB each here), never by a float64 copy (98 MiB). glibc's own
    heap growth is kept out of the measure with a fixed mmap threshold."""
    import os
    import subprocess
    import sys

    code = (
        "import resource, torch\n"
        "from lightning_embinit.init.directions import remove_top, whiten\n"
        "import lightning_embinit.init.statistics as statistics\n"
        "from lightning_embinit.init.statistics import isotropy\n"
        "statistics.CHUNK_ELEMENTS = 1 << 20\n"
        "table = torch.randn(25000, 512)\n"
        "torch.mm(torch.randn(512, 8), torch.randn(8, 512))\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "whiten(table, out=table); remove_top(table, out=table); isotropy(table)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)\n"
    )
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 60  # MiB above the table; a float64 copy adds 98 (measured: 34 and 132)
