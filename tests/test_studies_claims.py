"""Claims a study makes, checked by ``embinit report`` on hand-made records, and reference blocks (no training)."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from lightning_embinit.callbacks import EmbeddingVarianceMonitor, InitialLossMonitor, LearningSpeedMonitor, LexicalProbe
from lightning_embinit.commands import main as cli
from lightning_embinit.studies.claims import Claim, claim_verdict, evaluate_claim
from lightning_embinit.studies.claims_table import checked_claims, claims_lines
from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.metric_names import COST_NAMES, MONITOR_NAMES, MONITOR_PREFIXES
from lightning_embinit.studies.outcome import EpochClock, cost_values
from lightning_embinit.studies.power import claim_power, seeds_for_power
from lightning_embinit.studies.report import write_report
from lightning_embinit.studies.spec import Study
from tests.study_helpers import tiny_study, write_study

STUDIES = Path(__file__).resolve().parent.parent / "examples" / "studies"
LOWER = {"id": "c", "source": "[K]", "says": "a is lower", "setting": "a", "versus": "b", "metric": "best_val_loss"}


def _records(values: dict[str, list[float]], metric: str = "best_val_loss", group: str = "metrics") -> list[dict]:
    return [
        {"setting": setting, "seed": seed, "trial_id": f"{setting}-seed{seed}", "status": "done", group: {metric: v}}
        for setting, series in values.items()
        for seed, v in enumerate(series)
    ]


def _interval(a: list[float], b: list[float], confidence: float) -> tuple[float, float]:
    found = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence)
    return found.low, found.high


TIGHT_LOW, TIGHT_HIGH = [1.0, 1.1, 0.9], [2.0, 2.1, 1.9]
WIDE_A, WIDE_B = [1.0, 2.0, 3.0], [1.5, 2.5, 3.5]
NEAR_A, NEAR_B = [1.0, 1.01, 0.99, 1.0], [1.0, 1.02, 0.98, 1.0]


@pytest.mark.parametrize(
    ("direction", "margin", "a", "b", "verdict"),
    [
        ("lower", None, TIGHT_LOW, TIGHT_HIGH, "supported"),
        ("higher", None, TIGHT_HIGH, TIGHT_LOW, "supported"),
        ("higher", None, TIGHT_LOW, TIGHT_HIGH, "contradicted"),
        ("lower", None, WIDE_A, WIDE_B, "inconclusive"),
        ("equal", 0.1, NEAR_A, NEAR_B, "supported"),
        ("equal", 0.1, TIGHT_HIGH, TIGHT_LOW, "contradicted"),
        ("equal", 0.1, WIDE_A, WIDE_B, "inconclusive"),
        ("equal", 0.01, NEAR_A, NEAR_B, "inconclusive"),
        ("not_lower", 0.1, TIGHT_HIGH, TIGHT_LOW, "supported"),  # better counts: "as well or better"
        ("not_lower", 0.1, NEAR_A, NEAR_B, "supported"),
        ("not_lower", 0.1, TIGHT_LOW, TIGHT_HIGH, "contradicted"),
        ("not_lower", 0.1, WIDE_A, WIDE_B, "inconclusive"),
        ("not_lower", 0.01, NEAR_A, NEAR_B, "inconclusive"),
        ("not_higher", 0.1, TIGHT_LOW, TIGHT_HIGH, "supported"),
        ("not_higher", 0.1, TIGHT_HIGH, TIGHT_LOW, "contradicted"),
        ("not_higher", 0.1, WIDE_A, WIDE_B, "inconclusive"),
    ],
)
def test_each_verdict_follows_the_welch_intervals(direction, margin, a, b, verdict):
    claim = Claim(**{**LOWER, "direction": direction, "margin": margin})
    result = evaluate_claim(claim, _records({"a": a, "b": b}))
    low, high = _interval(a, b, 0.95)
    assert (result.welch.low, result.welch.high) == pytest.approx((low, high))
    assert result.welch.difference == pytest.approx(np.mean(a) - np.mean(b))
    assert (result.mean, result.mean_versus, result.welch.n, result.welch.n_reference) == pytest.approx(
        (np.mean(a), np.mean(b), len(a), len(b))
    )
    if margin is not None:
        low90, high90 = _interval(a, b, 0.90)
        assert result.interval_90 == pytest.approx((low90, high90))
        inside = {"equal": -margin < low90 and high90 < margin, "not_lower": low90 > -margin}
        beyond = {"equal": low > margin or high < -margin, "not_lower": high < -margin}
        inside, beyond = inside.get(direction, high90 < margin), beyond.get(direction, low > margin)
        expected = "supported" if inside else "contradicted" if beyond else "inconclusive"
    else:
        assert result.interval_90 is None
        side = high < 0 if direction == "lower" else low > 0
        other = low > 0 if direction == "lower" else high < 0
        expected = "supported" if side else "contradicted" if other else "inconclusive"
    assert result.verdict == expected == verdict
    assert (result.seeds_needed is None) == (verdict != "inconclusive")


@pytest.mark.parametrize(
    ("direction", "margin", "a", "b", "verdict"),
    [
        ("higher", None, 0.6032, 0.5077, "supported"),  # a lexical probe of a fixed table: every seed the same
        ("lower", None, 0.6032, 0.5077, "contradicted"),
        ("higher", None, 0.5, 0.5, "inconclusive"),  # exactly level: neither side
        ("not_lower", 0.01, 0.6944, 0.7041, "supported"),  # −0.0097 ≥ −0.01
        ("not_lower", 0.01, 0.6841, 0.7041, "contradicted"),
        ("equal", 0.05, 1.02, 1.0, "supported"),
        ("equal", 0.05, 1.2, 1.0, "contradicted"),
    ],
)
def test_a_measure_the_seeds_do_not_move_is_judged_on_its_exact_difference(direction, margin, a, b, verdict):
    """Every seed the same on each side: Welch has no interval, yet the difference is exact (no seed count helps)."""
    claim = Claim(**{**LOWER, "direction": direction, "margin": margin})
    result = evaluate_claim(claim, _records({"a": [a] * 5, "b": [b] * 5}))
    assert result.exact and result.welch.difference == pytest.approx(a - b)
    assert math.isnan(result.welch.low) and result.seeds_needed is None
    assert result.verdict == verdict
    one_seed = evaluate_claim(claim, _records({"a": [a], "b": [b] * 5}))  # one seed says nothing about the spread
    assert not one_seed.exact and one_seed.verdict == "inconclusive"
    moved = evaluate_claim(claim, _records({"a": [a] * 4 + [a + 1e-3], "b": [b] * 5}))
    assert not moved.exact


def test_an_exact_difference_is_printed_as_such_in_the_claims_table():
    claim = {**LOWER, "direction": "higher"}
    records = _records({"a": [0.6] * 3, "b": [0.5] * 3})
    results, _ = checked_claims({"claims": [claim]}, records, "test")
    lines = claims_lines(results)
    row = next(line for line in lines if line.startswith("| c |"))
    assert "+0.1 (exact: every seed gave the same value on each side)" in row and "**supported**" in row
    assert any("so Δ is exact" in line for line in lines)


def test_the_seeds_needed_are_those_of_the_power_tables():
    # Cohen (1988), Statistical Power Analysis, Table 2.4.1: two-sided α = 0.05, power 0.8, n per group for
    # d = 0.5, 0.8, 1.0 is 64, 26, 17 (d = Δ / σ); with equal variances Welch's df at n a side is Student's 2n − 2
    assert [seeds_for_power("lower", -d, None, 1.0, 1.0) for d in (0.5, 0.8, 1.0)] == [64, 26, 17]
    assert seeds_for_power("higher", -2.5, None, 25.0, 25.0) == 64
    # one-sided α = 0.05, d = 0.5: 50.15 (statsmodels' solve_power) → 51; a not_lower claim at Δ = 0 is that test
    assert seeds_for_power("not_lower", 0.0, 0.5, 1.0, 1.0) == 51
    assert seeds_for_power("lower", 0.0, None, 1.0, 1.0) is None and seeds_for_power("lower", 10.0, None, 1.0, 1.0) == 2
    assert seeds_for_power("lower", 1.0, None, 0.0, 0.0) is None  # no spread: no number
    assert seeds_for_power("equal", 0.1, 0.1, 1.0, 1.0) is None  # on the margin: no number of seeds moves it
    result = evaluate_claim(Claim(**LOWER, direction="lower"), _records({"a": WIDE_A, "b": WIDE_B}))
    assert result.seeds_needed == 64  # both sample variances 1, Δ = −0.5: d = 0.5
    near = (np.var(NEAR_A, ddof=1), np.var(NEAR_B, ddof=1))
    equal = evaluate_claim(Claim(**LOWER, direction="equal", margin=0.01), _records({"a": NEAR_A, "b": NEAR_B}))
    assert equal.seeds_needed == seeds_for_power("equal", 0.0, 0.01, *near) > len(NEAR_A)
    beyond = evaluate_claim(Claim(**LOWER, direction="equal", margin=0.1), _records({"a": WIDE_A, "b": WIDE_B}))
    assert beyond.verdict == "inconclusive" and beyond.seeds_needed == seeds_for_power("lower", -0.4, None, 1.0, 1.0)
    at_least = evaluate_claim(Claim(**LOWER, direction="not_lower", margin=0.01), _records({"a": NEAR_A, "b": NEAR_B}))
    assert at_least.seeds_needed == seeds_for_power("not_lower", 0.0, 0.01, *near)
    below = evaluate_claim(Claim(**LOWER, direction="not_lower", margin=0.1), _records({"a": WIDE_A, "b": WIDE_B}))
    assert below.verdict == "inconclusive" and below.seeds_needed == seeds_for_power("lower", -0.4, None, 1.0, 1.0)
    at_most = evaluate_claim(Claim(**LOWER, direction="not_higher", margin=0.1), _records({"a": WIDE_B, "b": WIDE_A}))
    assert at_most.verdict == "inconclusive" and at_most.seeds_needed == below.seeds_needed


def test_with_one_side_constant_the_seeds_are_those_of_welchs_own_interval():
    """Issue 40: 10, 12 against a constant 0 is Δ = 11 with Welch's interval [−1.7, 23.7] (df = 1): inconclusive.
    Student's pooled t (df = 2) called 2 seeds enough; at 2 seeds a side the verdict is supported 61 % of the time."""
    result = evaluate_claim(Claim(**LOWER, direction="higher"), _records({"a": [10.0, 12.0], "b": [0.0, 0.0]}))
    assert result.welch.df == 1 and (result.welch.low, result.welch.high) == pytest.approx((-1.706, 23.706), abs=1e-3)
    assert result.verdict == "inconclusive" and result.seeds_needed == 3
    claim = Claim(**LOWER, direction="higher")
    # with σ₂ = 0, Welch's statistic is exactly noncentral t(n − 1, Δ / (σ₁ / √n))
    assert claim_power("higher", 11.0, None, 2.0, 0.0, 2) == pytest.approx(stats.nct.sf(stats.t.ppf(0.975, 1), 1, 11))
    rng = np.random.default_rng(0)
    assert simulated(claim, 11.0, math.sqrt(2), 0.0, 2, rng).count("supported") / REPLICATES < 0.65
    assert simulated(claim, 11.0, math.sqrt(2), 0.0, 3, rng).count("supported") / REPLICATES > 0.99


REPLICATES = 20_000


def simulated(claim: Claim, difference: float, sd: float, sd_versus: float, n: int, rng) -> list[str]:
    """The verdicts on ``claim`` of many studies of n seeds a side drawn from N(Δ, sd²) and N(0, sd_versus²): the
    Welch intervals computed here (vectorized), judged by the report's own ``claim_verdict``."""
    a = rng.normal(difference, sd, (REPLICATES, n))
    b = rng.normal(0.0, sd_versus, (REPLICATES, n)) if sd_versus else np.zeros((REPLICATES, n))
    share, share_versus = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    df = (share + share_versus) ** 2 / ((share**2 + share_versus**2) / (n - 1))
    delta, spread = a.mean(axis=1) - b.mean(axis=1), np.sqrt(share + share_versus)
    h95, h90 = stats.t.ppf(0.975, df) * spread, stats.t.ppf(0.95, df) * spread
    first = evaluate_claim(claim, _records({"a": list(a[0]), "b": list(b[0])}))  # the same interval as the report's
    assert (first.welch.low, first.welch.high) == pytest.approx((delta[0] - h95[0], delta[0] + h95[0]))
    return [
        claim_verdict(claim, (d - w95, d + w95), (d - w90, d + w90))
        for d, w95, w90 in zip(delta.tolist(), h95.tolist(), h90.tolist(), strict=True)
    ]


@pytest.mark.parametrize(
    ("direction", "difference", "margin", "sd", "sd_versus"),
    [
        ("lower", -1.0, None, 0.5, 2.0),
        ("higher", -1.0, None, 0.5, 2.0),  # the observed Δ against the claim: the seeds to contradict it
        ("equal", 0.02, 0.1, 0.1, 0.05),
        ("equal", 0.0, 0.1, 0.1, 0.0),
        ("equal", 0.3, 0.1, 0.2, 0.2),  # beyond the margin: the seeds to contradict it
        ("not_lower", 0.0, 0.05, 0.1, 0.1),
        ("not_lower", -0.2, 0.05, 0.1, 0.2),
        ("not_higher", 0.0, 0.1, 0.1, 0.0),
    ],
)
def test_the_seeds_needed_give_the_verdict_80_percent_of_the_time(direction, difference, margin, sd, sd_versus):
    """Monte Carlo of the verdict itself (fixed seed): at the seeds needed it reaches the observed Δ's verdict at least
    80 % of the time, one seed fewer does not, and the power computed agrees with the simulated one."""
    claim = Claim(**LOWER, direction=direction, margin=margin)
    needed = seeds_for_power(direction, difference, margin, sd**2, sd_versus**2)
    inside = {"lower": difference < 0, "higher": difference > 0, "equal": abs(difference) < (margin or 0)}
    inside |= {"not_lower": difference > -(margin or 0), "not_higher": difference < (margin or 0)}
    target = "supported" if inside[direction] else "contradicted"
    rng = np.random.default_rng(7)
    for n in (needed - 1, needed):
        power = claim_power(direction, difference, margin, sd**2, sd_versus**2, n)
        assert (power >= 0.8) == (n == needed)
        found = simulated(claim, difference, sd, sd_versus, n, rng).count(target) / REPLICATES
        assert found == pytest.approx(power, abs=0.015), n


def test_a_claim_reads_the_end_of_fit_value_and_says_why_it_has_no_interval():
    records = _records({"a": [0.5, 0.7], "b": [0.9, 1.1]}, metric="train_loss_epoch", group="final")
    result = evaluate_claim(Claim(**{**LOWER, "metric": "train_loss_epoch"}, direction="lower"), records)
    assert result.mean == pytest.approx(0.6) and result.welch.difference == pytest.approx(-0.4)
    single = evaluate_claim(Claim(**LOWER, direction="lower"), _records({"a": [1.0], "b": [2.0, 3.0]}))
    assert single.verdict == "inconclusive" and "n < 2" in single.welch.note and single.seeds_needed is None


# ---------------------------------------------------------------------------------------------- refused early


def _study(**claim: object) -> dict:
    base = {**LOWER, "setting": "small", "versus": "normal", "direction": "lower"}
    return tiny_study(claims=[{**base, **claim}])


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        ({"setting": "smal"}, "claim 'c': unknown setting 'smal'; choose one of: normal, small"),
        ({"versus": "xavier"}, "claim 'c': unknown versus 'xavier'; choose one of: normal, small"),
        (
            {"direction": "less"},
            "claim 'c': unknown direction 'less'; choose one of: lower, higher, equal, not_lower, not_higher$",
        ),
        ({"direction": "equal"}, "claim 'c': direction 'equal' needs a margin, a positive number"),
        ({"direction": "equal", "margin": -1}, "direction 'equal' needs a margin"),
        ({"direction": "not_lower"}, "claim 'c': direction 'not_lower' needs a margin, a positive number"),
        ({"direction": "not_higher", "margin": float("inf")}, "direction 'not_higher' needs a margin"),
        ({"margin": 0.1}, "claim 'c': a margin is for directions equal, not_lower, not_higher only, not 'lower'"),
        ({"versus": "small"}, "claim 'c' compares setting 'small' with itself"),
        ({"metric": "best_val_acc"}, "no trial records metric 'best_val_acc': the protocol keeps best_val_loss, "),
        ({"direction_": "lower"}, r"unknown claim 'c' key \['direction_'\]; valid: id, source"),
        ({"stand_in": 3}, "stand_in must be true, false or a note"),
        ({"scope": ""}, "claim 'c': scope must be a note"),
    ],
)
def test_a_bad_claim_is_refused_when_the_study_is_read(claim, message):
    with pytest.raises(StudyError, match=message):
        Study.from_dict(_study(**claim))


def test_claims_that_are_no_list_repeat_an_id_or_lack_a_field_are_refused():
    with pytest.raises(StudyError, match="claims: expected a list of claims"):
        Study.from_dict(tiny_study(claims={"c": LOWER}))
    twice = {**LOWER, "setting": "small", "versus": "normal", "direction": "lower"}
    with pytest.raises(StudyError, match=r"claims: ids \['c'\] are used twice"):
        Study.from_dict(tiny_study(claims=[twice, twice]))
    with pytest.raises(StudyError, match="claim 'c' lacks direction"):
        Study.from_dict(tiny_study(claims=[{**LOWER, "setting": "small", "versus": "normal"}]))
    with pytest.raises(StudyError, match="test: false.*use val_bleu"):
        Study.from_dict(_study(metric="test_bleu") | {"protocol": {"test": False}})


def test_a_metric_no_trial_can_record_is_refused_before_any_trial(tmp_path, capsys):
    path = write_study(tmp_path / "s.yaml", _study(metric="embvar/tokens/ratio"))
    assert cli.main(["sweep", str(path), "--results", str(tmp_path / "r")]) == 2
    error = capsys.readouterr().err
    assert "claim 'c': no trial of setting 'small' records metric 'embvar/tokens/ratio'" in error
    assert "its callbacks publish init_loss, init_loss_predicted" in error and "embinit/..." in error
    assert not (tmp_path / "r").exists()
    with_monitor = _study(metric="embvar/tokens/ratio")
    with_monitor["overrides"]["trainer.callbacks[+]"] = {"class_path": "lightning_embinit.EmbeddingVarianceMonitor"}
    for metric in ("embvar/tokens/ratio", "init_loss", "embinit/tokens/std", "val_ppl", "seconds_per_step"):
        Study.from_dict({**with_monitor, "claims": [{**with_monitor["claims"][0], "metric": metric}]}).trials()
    foreign = _study(metric="anything/at_all")  # a callback from outside the package may log any name
    foreign["overrides"]["trainer.callbacks[+]"] = {"class_path": "lightning.pytorch.callbacks.ThroughputMonitor"}
    Study.from_dict(foreign).trials()


def test_the_known_publishers_match_the_classes():
    for name, prefix in MONITOR_PREFIXES.items():
        cls = {c.__name__: c for c in (EmbeddingVarianceMonitor, LearningSpeedMonitor, LexicalProbe)}[name]
        assert inspect.signature(cls).parameters["prefix"].default == prefix
    monitor = InitialLossMonitor()
    monitor.init_loss, monitor.ln_vocab, monitor.predicted, monitor.predicted_model = 1.0, 2.0, 3.0, 4.0
    monitor.random_tokens = 5.0
    assert set(monitor.summary()) == set(MONITOR_NAMES["InitialLossMonitor"])
    assert set(cost_values(torch.nn.Linear(2, 2), EpochClock(), 1.0, 1)) == set(COST_NAMES)


# ---------------------------------------------------------------------------------------------- blocks


def test_blocks_name_settings_once_and_never_a_reference():
    blocks = {"small": ["normal"]}
    with pytest.raises(StudyError, match="block 'small': 'normal' is a reference, not a member"):
        Study.from_dict(tiny_study(blocks=blocks))
    three = {"normal": {}, "small": {}, "wide": {}, "wide_small": {}}
    with pytest.raises(StudyError, match="unknown study 'tiny', blocks: reference setting 'big'"):
        Study.from_dict(tiny_study(settings=three, blocks={"big": ["small"]}))
    with pytest.raises(StudyError, match="setting 'wide_small' is in two blocks"):
        Study.from_dict(tiny_study(settings=three, blocks={"wide": ["wide_small"], "small": ["wide_small"]}))
    with pytest.raises(StudyError, match="'wide' needs a list of distinct settings"):
        Study.from_dict(tiny_study(settings=three, blocks={"wide": "wide_small"}))
    study = Study.from_dict(tiny_study(settings=three, blocks={"wide": ["wide_small"]}))
    assert study.references() == {"small": "normal", "wide_small": "wide"}
    assert Study.from_dict(study.to_dict()) == study


def _results(tmp_path: Path, study: dict, values: dict[str, list[float]]) -> Path:
    directory = tmp_path / "results"
    (directory / "trials").mkdir(parents=True)
    (directory / "study.json").write_text(json.dumps({"name": study["name"], "hash": "h", "study": study}))
    for record in _records(values):
        (directory / "trials" / f"{record['trial_id']}.json").write_text(json.dumps(record))
    return directory


def test_the_report_measures_each_setting_against_its_blocks_reference(tmp_path):
    values = {"xavier": [1.0, 2.0, 3.0], "glove": [2.0, 4.0, 6.0], "xavier_wide": [10.0, 11.0, 12.0]}
    values["minilm"] = [9.0, 9.5, 10.0]
    study = {"name": "toy", "settings": {s: {} for s in values}, "reference": "xavier"}
    directory = _results(tmp_path, {**study, "blocks": {"xavier_wide": ["minilm"]}}, values)
    report = write_report(directory)
    rows = report["differences"].set_index("setting")
    assert report["references"] == {"glove": "xavier", "minilm": "xavier_wide"}
    assert list(rows.index) == ["glove", "minilm"] and rows.loc["minilm", "reference"] == "xavier_wide"
    assert rows.loc["minilm", "difference"] == pytest.approx(-1.5)
    assert (rows.loc["minilm", "low"], rows.loc["minilm", "high"]) == pytest.approx(
        _interval(values["minilm"], values["xavier_wide"], 0.95)
    )
    markdown = report["markdown"]
    assert "- settings: xavier, glove, xavier_wide, minilm (reference: xavier; xavier_wide for minilm)" in markdown
    assert "## Metrics: difference from the block's reference, Δ [95 % CI]" in markdown
    assert "| minilm (vs xavier_wide) | -1.5 [" in markdown and "| glove | +2 [" in markdown
    pinned = write_report(directory, reference="xavier")  # --reference overrides the blocks
    assert set(pinned["differences"]["reference"]) == {"xavier"} and len(pinned["differences"]) == 3
    assert "difference from xavier, Δ" in pinned["markdown"] and "(vs " not in pinned["markdown"]


def test_the_report_prints_the_claims_table(tmp_path):
    values = {"xavier": TIGHT_HIGH, "glove": TIGHT_LOW, "glove_std": WIDE_A, "bert": [2.0, 2.01, 1.99]}
    claims = [
        {**LOWER, "id": "glove_lower", "setting": "glove", "versus": "xavier", "direction": "lower"},
        {**LOWER, "id": "std_higher", "setting": "glove_std", "versus": "glove", "direction": "higher"}
        | {"scope": "early training"},
        {**LOWER, "id": "bert_equal", "setting": "bert", "versus": "xavier", "direction": "equal", "margin": 0.5}
        | {"stand_in": "MiniLM for BERT"},
    ]
    study = {"name": "toy", "settings": {s: {} for s in values}, "reference": "xavier", "claims": claims}
    report = write_report(_results(tmp_path, study, values))
    assert [result.verdict for result in report["claims"]] == ["supported", "inconclusive", "supported"]
    lines = report["markdown"].split("## Claims: the papers' claims checked on these records")[1].splitlines()
    assert lines[2] == (
        "| claim | paper: says | compared | metric | expected Δ | mean (n) | versus (n) | Δ [95 % CI] | verdict "
        "| seeds for 80 % power |"
    )
    low, high = _interval(TIGHT_LOW, TIGHT_HIGH, 0.95)
    assert lines[4] == (
        f"| glove_lower | [K]: a is lower | glove − xavier | best_val_loss | lower | 1 (3) | 2 (3) "
        f"| -1 [{low:.3g}, {high:.3g}] | **supported** | – |"
    )
    # glove_std 1, 2, 3 against glove 1, 1.1, 0.9: Δ = +1, variances 1 and 0.01
    needed = seeds_for_power("higher", 1.0, None, 1.0, 0.01)
    assert lines[5].endswith(f"| **inconclusive** | {needed} |") and "| higher | 2 (3) | 1 (3) | +1 [" in lines[5]
    assert lines[5].startswith("| std_higher (scope: early training) | [K]: a is lower | glove_std − glove |")
    low90, high90 = _interval([2.0, 2.01, 1.99], TIGHT_HIGH, 0.90)
    assert lines[6].startswith("| bert_equal (stand-in: MiniLM for BERT) | [K]: a is lower | bert − xavier |")
    assert "| equal ±0.5 |" in lines[6] and f"; 90 %: [{low90:.3g}, {high90:.3g}] | **supported** | – |" in lines[6]
    table = pd.read_csv(tmp_path / "results" / "report" / "claims.csv")
    assert list(table["verdict"]) == ["supported", "inconclusive", "supported"]
    assert table.loc[1, "seeds_needed"] == needed and table.loc[2, "high_90"] == pytest.approx(high90)
    assert "not lower (≥ −m)" not in report["markdown"]  # the one-sided rule is explained where a claim uses it


def test_a_claim_of_as_well_or_better_is_supported_by_a_better_setting(tmp_path):
    """[K]'s "BERT does as well as Xavier or better": a clearly better BERT supports it (an ``equal`` claim would
    call that a contradiction); a clearly worse one contradicts it."""
    values = {"xavier": [0.77, 0.775, 0.765], "bert": [0.80, 0.79, 0.805], "worse": [0.70, 0.71, 0.69]}
    claims = [
        {**LOWER, "id": "bert_ok", "setting": "bert", "versus": "xavier", "direction": "not_lower", "margin": 0.01},
        {**LOWER, "id": "worse_ok", "setting": "worse", "versus": "xavier", "direction": "not_lower", "margin": 0.01},
    ]
    study = {"name": "toy", "settings": {s: {} for s in values}, "reference": "xavier", "claims": claims}
    report = write_report(_results(tmp_path, study, values))
    assert [result.verdict for result in report["claims"]] == ["supported", "contradicted"]
    low90, high90 = _interval(values["bert"], values["xavier"], 0.90)
    assert low90 > -0.01 and report["claims"][0].interval_90 == pytest.approx((low90, high90))
    row = report["markdown"].split("| bert_ok |")[1].splitlines()[0]
    assert "| not lower, ≥ -0.01 |" in row and f"; 90 %: [{low90:.3g}, {high90:.3g}] | **supported** | – |" in row
    assert "not lower (≥ −m): **supported** when the 90 % interval lies wholly above −m" in report["markdown"]


# ---------------------------------------------------------------------------------------------- shipped studies


@pytest.mark.parametrize("path", sorted(STUDIES.glob("*.yaml")), ids=lambda path: path.stem)
def test_the_shipped_claims_parse_name_settings_and_mark_stand_ins(path, monkeypatch):
    monkeypatch.setenv("EMBINIT_SELF_PRETRAIN_CKPT", "/nowhere/best.ckpt")
    study = Study.from_yaml(path)
    for claim in study.claims:
        assert {claim.setting, claim.versus} <= set(study.setting_names()), claim.id
        stand_in = any(s.startswith(("standin_", "minilm_")) for s in (claim.setting, claim.versus))
        assert bool(claim.stand_in) == stand_in, claim.id
    study.trials("smoke")  # the metrics are ones the trials record
    assert Study.from_dict(study.to_dict()) == study
    assert all(study.references()[m] == ref for ref, members in study.blocks.items() for m in members)


def test_a_hypothesis_is_marked_as_the_packages_own_and_unknown_kinds_are_refused(tmp_path):
    values = {"xavier": TIGHT_HIGH, "glove": TIGHT_LOW}
    claims = [
        {**LOWER, "id": "paper", "setting": "glove", "versus": "xavier", "direction": "lower"},
        {**LOWER, "id": "own", "setting": "glove", "versus": "xavier", "direction": "lower", "kind": "hypothesis"}
        | {"source": "this package"},
    ]
    study = {"name": "toy", "settings": {s: {} for s in values}, "reference": "xavier", "claims": claims}
    markdown = write_report(_results(tmp_path, study, values))["markdown"]
    table = markdown.split("## Claims: the papers' claims and this package's hypotheses checked on these records")[1]
    rows = table.splitlines()
    assert "| claim | source: says |" in rows[2]
    assert rows[4].startswith("| paper | [K]: a is lower |") and rows[5].startswith("| own (hypothesis) | this package")
    assert "is this package's own, not a paper's finding" in table
    with pytest.raises(StudyError, match="claim 'c': unknown kind 'guess'; choose one of: paper, hypothesis"):
        Study.from_dict(_study(kind="guess"))


def test_a_variant_runs_some_settings_and_the_report_leaves_out_the_claims_it_cannot_check(tmp_path):
    settings = {"normal": {}, "small": {}, "wide": {}}
    claims = [
        {**LOWER, "id": "small_lower", "setting": "small", "versus": "normal", "direction": "lower"},
        {**LOWER, "id": "wide_lower", "setting": "wide", "versus": "normal", "direction": "lower"},
    ]
    variants = {"part": {"settings": ["normal", "small"], "seeds": [3]}}
    study = Study.from_dict(tiny_study(settings=settings, claims=claims, variants=variants))
    assert [t.trial_id for t in study.trials("part")] == ["normal-seed3", "small-seed3"]
    assert len(study.trials()) == 6  # the study as written runs every setting
    with pytest.raises(StudyError, match="variant 'part': setting 'smal'; choose one of: normal, small, wide"):
        Study.from_dict(tiny_study(settings=settings, variants={"part": {"settings": ["smal"]}}))
    with pytest.raises(StudyError, match="variant 'part': its settings are measured against normal, which it does"):
        Study.from_dict(tiny_study(settings=settings, variants={"part": {"settings": ["small", "wide"]}}))
    with pytest.raises(StudyError, match="variant 'part', settings: expected a list of setting names"):
        Study.from_dict(tiny_study(settings=settings, variants={"part": {"settings": "small"}}))
    values = {"normal": TIGHT_HIGH, "small": TIGHT_LOW}  # the variant's records: no 'wide'
    toy = {"name": "toy", "settings": settings, "reference": "normal", "claims": claims}
    report = write_report(_results(tmp_path, toy, values))
    assert [result.claim.id for result in report["claims"]] == ["small_lower"]
    assert "Not checked here (a setting they compare has no records): wide_lower." in report["markdown"]
