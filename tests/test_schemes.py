import math
import re

import pytest
import torch

from lightning_embinit.init import SCHEMES, get_scheme

N, D = 3000, 400

EXPECTED_STD = {
    "xavier": math.sqrt(2 / (N + D)),
    "xavier_normal": math.sqrt(2 / (N + D)),
    "he": math.sqrt(2 / D),
    "normal:0.01": 0.01,
    "normal:3": 3.0,
    "zeros": 0.0,
    "ones": 0.0,
    "log_n_over_d": math.log(N) / D,
    "hf": 0.02,
    "torch_default": 1.0,
}


def test_every_registered_scheme_is_covered():
    assert set(SCHEMES) == {spec.partition(":")[0] for spec in EXPECTED_STD}


@pytest.mark.parametrize("spec", sorted(EXPECTED_STD))
def test_empirical_std_matches_formula(spec):
    scheme = get_scheme(spec)
    assert scheme.std(N, D) == pytest.approx(EXPECTED_STD[spec], rel=1e-12)
    x = scheme.sample(N, D, generator=torch.Generator().manual_seed(0)).double()
    expected_mean = 1.0 if spec == "ones" else 0.0
    assert x.mean().item() == pytest.approx(expected_mean, abs=5e-3 * max(EXPECTED_STD[spec], 1e-3))
    assert x.std(unbiased=False).item() == pytest.approx(EXPECTED_STD[spec], rel=5e-3, abs=1e-12)


def test_xavier_is_uniform_within_its_bound():
    x = get_scheme("xavier").sample(N, D, generator=torch.Generator().manual_seed(1))
    bound = math.sqrt(6 / (N + D))
    assert x.abs().max().item() <= bound
    assert x.abs().max().item() > 0.999 * bound


@pytest.mark.parametrize("spec", ["xavier", "he", "normal:0.5", "log_n_over_d"])
def test_same_seed_same_matrix_other_seed_other_matrix(spec):
    scheme = get_scheme(spec)
    a = scheme.sample(5000, 1024, generator=torch.Generator().manual_seed(7))
    b = scheme.sample(5000, 1024, generator=torch.Generator().manual_seed(7))
    c = scheme.sample(5000, 1024, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_sampling_does_not_depend_on_thread_count():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = get_scheme("xavier").sample(9000, 1024, generator=torch.Generator().manual_seed(3))
        torch.set_num_threads(2)
        two = get_scheme("xavier").sample(9000, 1024, generator=torch.Generator().manual_seed(3))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_sample_in_bfloat16():
    x = get_scheme("hf").sample(100, 64, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    assert x.dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bogus", r"unknown scheme 'bogus'; known schemes: he, hf, log_n_over_d, normal:<arg>, ones"),
        ("normal:-1", r"std must be a finite number ≥ 0, got -1.0"),
        ("normal:nan", r"std must be a finite number"),
        ("normal:inf", r"std must be a finite number"),
        ("normal:abc", r"needs a number or an expression in n and d after the colon"),
        ("normal", r"needs an argument"),
        ("xavier:2", r"takes no argument"),
    ],
)
def test_bad_scheme_specs_raise(spec, message):
    with pytest.raises(ValueError, match=message):
        get_scheme(spec)


@pytest.mark.parametrize(
    ("spec", "n", "d", "std"),
    [
        ("normal:1/sqrt(d)", 4000, 256, 1 / 16),
        ("normal:ln(n)/d", 4000, 256, math.log(4000) / 256),
        ("normal:0.5*d**-0.5", 10, 64, 0.0625),
        ("normal:exp(-ln(d))", 10, 50, 0.02),
    ],
)
def test_normal_std_may_refer_to_the_tables_shape(spec, n, d, std):
    scheme = get_scheme(spec)
    assert scheme.std(n, d) == pytest.approx(std, rel=1e-12)
    assert scheme.describe(n, d) == f"{spec} (σ = {std:.6g})"
    sample = scheme.sample(n, d, generator=torch.Generator().manual_seed(0))
    assert sample.std().item() == pytest.approx(std, rel=0.1)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("normal:foo(d)", "only numbers, n, d"),
        ("normal:1/(d-d)", "for a 1024×64 table: float division by zero"),
        ("normal:-1/d", "std must be a finite number ≥ 0"),
        ("normal:__import__('os')", "only numbers, n, d"),
    ],
)
def test_bad_shape_expressions_fail_when_named(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        get_scheme(spec)


def test_the_report_shows_the_resolved_std():
    from torch import nn

    from lightning_embinit import initialize_embeddings

    reports = initialize_embeddings(nn.Embedding(300, 64), source="normal:1/sqrt(d)", seed=0)
    assert reports[""]["source"] == "normal:1/sqrt(d) (σ = 0.125)"


def test_a_parameter_larger_than_one_block_fills_on_several_threads():
    from torch import nn

    table = nn.Embedding(9000, 512)  # 4.6 Mi elements: more than one row block
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            get_scheme("xavier").fill_(table.weight, generator=torch.Generator().manual_seed(0))
    finally:
        torch.set_num_threads(threads)
    assert table.weight.requires_grad and table.weight.std().item() == pytest.approx((2 / 9512) ** 0.5, rel=0.01)
