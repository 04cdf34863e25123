import math

import numpy as np
import pytest
import torch

from lightning_embinit.init import SchemeSource, SourceMatrix, SourceRequest, get_scheme, matrix_statistics
from lightning_embinit.init.statistics import embedding_statistics
from lightning_embinit.init.transforms import TRANSFORMS, build_transform, match, scale, shuffle, standardize


def pretrained_like(n=2000, d=300, mean=0.3, std=0.37, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g, dtype=torch.float64) * std + mean).to(dtype)


def stats64(x):
    a = x.double().numpy()
    return a.mean(), a.std()


@pytest.mark.parametrize(
    ("target", "mean", "std"),
    [
        ("xavier", 0.0, math.sqrt(2 / 2300)),
        ("hf", 0.0, 0.02),
        (0.05, 0.0, 0.05),
        ((1.5, 0.25), 1.5, 0.25),
        ("normal:0.01", 0.0, 0.01),
    ],
)
def test_standardize_hits_target_to_1e5(target, mean, std):
    x = pretrained_like()
    y = standardize(x, target)
    got_mean, got_std = stats64(y)
    assert got_std == pytest.approx(std, rel=1e-5)
    assert got_mean == pytest.approx(mean, abs=1e-5 * std)
    assert y.dtype == x.dtype


def test_standardize_to_another_matrix_takes_its_statistics():
    x, reference = pretrained_like(seed=1), pretrained_like(n=500, d=300, mean=-2.0, std=11.0, seed=2)
    ref_mean, ref_std = stats64(reference)
    got_mean, got_std = stats64(standardize(x, reference))
    assert got_std == pytest.approx(ref_std, rel=1e-5)
    assert got_mean == pytest.approx(ref_mean, rel=1e-5)


def test_standardize_does_not_modify_its_input():
    x = pretrained_like()
    before = x.clone()
    standardize(x, "xavier")
    assert torch.equal(x, before)


@pytest.mark.slow
def test_standardize_large_float32_table_exactly():
    x = torch.empty(250_000, 1024)
    get_scheme("normal:0.3").fill_(x, generator=torch.Generator().manual_seed(0))
    x.add_(5.0)
    y = standardize(x, "xavier")
    target = math.sqrt(2 / (250_000 + 1024))
    stats = matrix_statistics(y)
    assert stats.std == pytest.approx(target, rel=1e-5)
    assert abs(stats.mean) < 1e-5 * target
    reference = y[::97].double()
    assert reference.std(unbiased=False).item() == pytest.approx(target, rel=1e-3)


def test_standardize_bfloat16_keeps_dtype_and_hits_target():
    x = pretrained_like(n=20000, d=512, mean=0.1, std=15.0, dtype=torch.bfloat16)
    y = standardize(x, "xavier")
    assert y.dtype == torch.bfloat16
    got_mean, got_std = stats64(y.float())
    target = math.sqrt(2 / 20512)
    assert got_std == pytest.approx(target, rel=1e-5)  # stochastic rounding: no bias from bf16's 8-bit mantissa
    assert abs(got_mean) < 1e-5 * target
    assert torch.equal(y, standardize(x, "xavier"))


def test_statistics_are_exact_with_a_large_mean():
    x = pretrained_like(n=3000, d=1024, mean=1000.0, std=0.001, seed=4)
    stats = matrix_statistics(x)
    mean, std = stats64(x)
    assert stats.mean == pytest.approx(mean, rel=1e-12)
    assert stats.std == pytest.approx(std, rel=1e-4)
    assert stats.min == x.min().item() and stats.max == x.max().item()


def test_match_follows_xavier_pretrained_formula():
    random = get_scheme("xavier").sample(2000, 300, generator=torch.Generator().manual_seed(0)).double()
    pretrained = pretrained_like(mean=0.2, std=23.0).double()
    expected = (random - random.mean()) * pretrained.std(unbiased=False) / random.std(
        unbiased=False
    ) + pretrained.mean()
    got = match(random, pretrained)
    assert torch.allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_shuffle_keeps_values_and_moves_rows_and_columns():
    x = pretrained_like(n=300, d=40)
    y = shuffle(x, torch.Generator().manual_seed(0))
    assert torch.equal(torch.sort(x.flatten()).values, torch.sort(y.flatten()).values)
    assert not torch.equal(x, y)
    x_rows = {tuple(sorted(row.tolist())) for row in x}
    y_rows = {tuple(sorted(row.tolist())) for row in y}
    assert x_rows == y_rows  # each row is an original row with its columns permuted
    assert not torch.equal(x[:, 0], y[:, 0]) and sorted(x[0].tolist()) != sorted(y[0].tolist())
    assert torch.equal(y, shuffle(x, torch.Generator().manual_seed(0)))
    assert not torch.equal(y, shuffle(x, torch.Generator().manual_seed(1)))


def test_scale_multiplies():
    x = pretrained_like(n=10, d=4)
    assert torch.allclose(scale(x, -2.5), x * -2.5)
    with pytest.raises(ValueError, match="finite"):
        scale(x, math.inf)


def test_shuffle_step_permutes_the_pretrained_row_record():
    weight = torch.arange(20.0).reshape(10, 2)
    rows = torch.tensor([True] * 3 + [False] * 7)
    request = SourceRequest("s", 10, 2, generator=torch.Generator().manual_seed(3))
    out = build_transform("shuffle")(SourceMatrix(weight, rows, "test"), request)
    moved_first_values = out.weight.min(dim=1).values
    assert torch.equal(out.pretrained_rows, moved_first_values < 6)


def test_match_step_builds_a_reference_source_for_the_slot():
    request = SourceRequest("s", 500, 50, generator=torch.Generator().manual_seed(0))
    random = SchemeSource(get_scheme("xavier")).build(request)
    out = build_transform("match", "normal:0.5")(random, request)
    assert stats64(out.weight)[1] == pytest.approx(0.5, rel=1e-5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: standardize(torch.ones(4, 4), "xavier"), "constant matrix"),
        (lambda: standardize(torch.randn(4, 4), -1.0), "finite std > 0"),
        (lambda: standardize(torch.randn(4, 4), math.nan), "finite std > 0"),
        (lambda: standardize(torch.randn(4, 4), "zeros"), "finite std > 0"),
        (lambda: standardize(torch.randn(4, 4), "nope"), "unknown scheme 'nope'"),
        (lambda: standardize(torch.randn(4, 4), {"a": 1}), "a standardization target is"),
        (
            lambda: build_transform("rotate"),
            r"unknown transform 'rotate'; known transforms: center, match:<arg>, remove_top\[:<arg>\], scale:<arg>, "
            r"shuffle, standardize:<arg>, whiten\[:<arg>\]",
        ),
        (lambda: build_transform("shuffle", 3), "takes no argument"),
    ],
)
def test_bad_transform_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_registry_lists_all_transforms():
    assert list(TRANSFORMS) == ["center", "match", "remove_top", "scale", "shuffle", "standardize", "whiten"]


def test_embedding_statistics_scaled_and_positional():
    x = pretrained_like(n=1000, d=64, mean=0.0, std=0.1)
    pe = torch.rand(50, 64) * 2 - 1
    report = embedding_statistics(x, input_scale=8.0, positional_encoding=pe)
    raw_std = stats64(x)[1]
    assert report["scaled_std"] == pytest.approx(8.0 * raw_std, rel=1e-6)
    assert report["scaled_max"] == pytest.approx(8.0 * x.max().item(), rel=1e-6)
    assert report["pe_std"] == pytest.approx(float(np.std(pe.double().numpy())), rel=1e-6)
    assert report["ratio"] == pytest.approx(report["scaled_std"] / report["pe_std"], rel=1e-12)


def test_affine_transforms_accept_non_contiguous_input():
    x = pretrained_like(n=300, d=40)
    y = standardize(x.t(), (1.0, 0.5))
    assert y.shape == (40, 300)
    expected = (x.t().double() - x.double().mean()) * 0.5 / x.double().std(unbiased=False) + 1.0
    assert torch.allclose(y.double(), expected, atol=1e-5)
    with pytest.raises(ValueError, match="out= must be a contiguous tensor"):
        scale(x, 2.0, out=torch.empty(40, 300).t())


def test_a_registry_entry_with_an_optional_argument_takes_the_plain_name_and_says_so():
    from lightning_embinit.init.registry import Registry
    from lightning_embinit.init.transforms import TRANSFORMS

    assert "remove_top" in TRANSFORMS and "remove_top:3" in TRANSFORMS and "whiten" in TRANSFORMS
    assert "remove_top[:<arg>]" in TRANSFORMS.known() and "whiten[:<arg>]" in TRANSFORMS.known()
    assert "scale:<arg>" in TRANSFORMS.known() and "scale" not in TRANSFORMS  # a required argument stays required
    assert TRANSFORMS.build("remove_top").argument is None and TRANSFORMS.build("remove_top:3").argument == 3
    registry = Registry("thing")
    with pytest.raises(ValueError, match="thing 'x': an optional argument needs takes_argument=True"):
        registry.add("x", lambda: 1, optional_argument=True)
