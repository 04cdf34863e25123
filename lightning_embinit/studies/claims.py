"""A study's claims: a paper's words as a comparison of two settings that the report checks from the records.

A claim names the paper (``source``) and its words (``says``), two settings (``setting``, ``versus``), a metric, and
the direction the paper gives for ``setting − versus``: ``lower``, ``higher``, ``equal`` within an absolute
``margin``, or ``not_lower`` / ``not_higher`` by more than the margin ("as well or better": non-inferiority).
``stand_in: true`` (or a note) marks a claim tested on a stand-in for what the paper used, and ``scope`` (a note)
one whose design covers less of the paper's protocol (``"early training: 1,200 steps of [K]'s 10 epochs"``).
``kind: hypothesis`` marks a claim that is this package's own hypothesis, not a paper's finding (``source`` then says
what motivates it); the default is ``paper``. The YAML under ``examples/studies/`` has examples.
:func:`evaluate_claim` gives the verdict from the seeds' values (:func:`claim_verdict` states the rules).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

import numpy as np

from lightning_embinit.checks import check_known
from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.metric_names import MODEL_METRIC as MODEL_METRIC  # re-exported: outcome reads it
from lightning_embinit.studies.power import seeds_for_power
from lightning_embinit.studies.statistics import (
    Welch,
    done,
    mean,
    number,
    setting_name,
    value_of,
    variance,
    welch,
)

ONE_SIDED = ("not_lower", "not_higher")
"""Non-inferiority directions: one one-sided test against the margin."""
WITH_MARGIN = ("equal", *ONE_SIDED)
"""The directions tested against a margin, with the 90 % interval (one-sided tests at 5 %)."""
DIRECTIONS = ("lower", "higher", *WITH_MARGIN)
KINDS = ("paper", "hypothesis")
"""Whose claim it is: a paper's finding, or this package's own hypothesis."""
SUPPORTED, INCONCLUSIVE, CONTRADICTED = "supported", "inconclusive", "contradicted"
CONFIDENCE = 0.95


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A paper's claim as a comparison of ``setting`` with ``versus`` on ``metric`` (see the module doc)."""

    id: str
    source: str
    says: str
    setting: str
    versus: str
    metric: str
    direction: str
    margin: float | None = None
    stand_in: bool | str = False
    scope: str | None = None
    kind: str = "paper"

    def __post_init__(self) -> None:
        where = f"claim {self.id!r}"
        if not isinstance(self.id, str) or not self.id:
            raise StudyError(f"a claim's id must be a non-empty string, got {self.id!r}")
        for name in ("source", "says", "setting", "versus", "metric"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise StudyError(f"{where}: {name} must be a non-empty string, got {value!r}")
        if self.direction not in DIRECTIONS:
            raise StudyError(f"{where}: unknown direction {self.direction!r}; choose one of: {', '.join(DIRECTIONS)}")
        if self.direction in WITH_MARGIN:
            margin = number(self.margin)
            if margin is None or not 0 < margin < math.inf:
                raise StudyError(
                    f"{where}: direction {self.direction!r} needs a margin, a positive number in the metric's units "
                    f"(the largest difference that still counts as level), got {self.margin!r}"
                )
            object.__setattr__(self, "margin", margin)
        elif self.margin is not None:
            raise StudyError(
                f"{where}: a margin is for directions {', '.join(WITH_MARGIN)} only, not {self.direction!r}"
            )
        if self.setting == self.versus:
            raise StudyError(f"{where} compares setting {self.setting!r} with itself: name two settings")
        if not isinstance(self.stand_in, (bool, str)):
            raise StudyError(f"{where}: stand_in must be true, false or a note, got {self.stand_in!r}")
        if self.kind not in KINDS:
            raise StudyError(f"{where}: unknown kind {self.kind!r}; choose one of: {', '.join(KINDS)}")
        if self.scope is not None and (not isinstance(self.scope, str) or not self.scope):
            raise StudyError(f"{where}: scope must be a note (a non-empty string) or absent, got {self.scope!r}")

    @classmethod
    def from_dict(cls, data: Any) -> Claim:
        """A claim from its mapping; a StudyError for an unknown or missing key."""
        if not isinstance(data, Mapping):
            raise StudyError(
                f"a claim must be a mapping with id, source, says, setting, versus, metric, direction; got {data!r}"
            )
        where = f"claim {data.get('id')!r}"
        try:
            check_known(f"{where} key", data, [f.name for f in fields(cls)])
            missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING]
            if missing:
                raise StudyError(f"{where} lacks {', '.join(missing)}")
        except ValueError as error:
            raise StudyError(str(error)) from None
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def expected(self) -> str:
        """The direction as the claims table prints it."""
        if self.direction == "equal":
            return f"equal ±{self.margin:g}"
        if self.direction == "not_lower":
            return f"not lower, ≥ -{self.margin:g}"
        if self.direction == "not_higher":
            return f"not higher, ≤ +{self.margin:g}"
        return self.direction


def read_claims(values: Any, settings: Sequence[str], protocol: Any, where: str) -> tuple[Claim, ...]:
    """The claims of a study (a list of mappings or :class:`Claim`), checked against its setting names and what its
    ``protocol`` records (:func:`protocol_problem`)."""
    if values is None:
        return ()
    if not isinstance(values, (list, tuple)):
        raise StudyError(f"{where}, claims: expected a list of claims (mappings with id, setting, ...), got {values!r}")
    claims = tuple(value if isinstance(value, Claim) else Claim.from_dict(value) for value in values)
    ids = [claim.id for claim in claims]
    if len(set(ids)) != len(ids):
        raise StudyError(f"{where}, claims: ids {sorted({i for i in ids if ids.count(i) > 1})} are used twice")
    for claim in claims:
        for role in ("setting", "versus"):
            if getattr(claim, role) not in settings:
                raise StudyError(
                    f"{where}, claim {claim.id!r}: unknown {role} {getattr(claim, role)!r}; "
                    f"choose one of: {', '.join(settings)}"
                )
        if problem := protocol_problem(claim.metric, protocol.monitor, protocol.test):
            raise StudyError(f"{where}, claim {claim.id!r}: no trial records metric {claim.metric!r}: {problem}")
    return claims


def protocol_problem(metric: str, monitor: str, test: bool | str) -> str:
    """Why no trial under the protocol (``monitor``, ``test``) records ``metric`` ("" when one may)."""
    if metric.startswith("best_") and metric not in (f"best_{monitor}", "best_epoch", "best_step"):
        return f"the protocol keeps best_{monitor}, best_epoch and best_step (its monitor is {monitor!r})"
    if metric.startswith("test_") and test is False:
        return f"the protocol validates the best checkpoint (test: false): use val_{metric[len('test_') :]}"
    return ""


# ---------------------------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class ClaimResult:
    """A claim checked on the records: the seeds' means, the difference ``setting − versus`` with Welch's 95 % interval
    (and the 90 % one for a direction with a margin), the verdict, and for an inconclusive one the seeds each
    setting needs for the verdict's own test to show the observed effect at 80 % power (:mod:`.power`; None when no
    number can be given)."""

    claim: Claim
    mean: float
    mean_versus: float
    welch: Welch
    verdict: str
    interval_90: tuple[float, float] | None = None
    seeds_needed: int | None = None
    exact: bool = False

    def to_dict(self) -> dict[str, Any]:
        """One flat row: the claim's fields, then the numbers (the claims CSV)."""
        low90, high90 = self.interval_90 or (math.nan, math.nan)
        return {
            **self.claim.to_dict(),
            "mean": self.mean,
            "mean_versus": self.mean_versus,
            "difference": self.welch.difference,
            "low": self.welch.low,
            "high": self.welch.high,
            "low_90": low90,
            "high_90": high90,
            "n": self.welch.n,
            "n_versus": self.welch.n_reference,
            "verdict": self.verdict,
            "seeds_needed": self.seeds_needed,
            "exact": self.exact,
            "note": self.welch.note,
        }


def claim_samples(records: Iterable[Mapping[str, Any]], setting: str, metric: str) -> np.ndarray:
    """The values of ``metric`` over the finished trials of ``setting``: as the report reads them (metrics,
    monitors, cost, wall time), else the model's value at the end of fit (``final``: train_loss_epoch, ...)."""
    values = []
    for record in done(records):
        if setting_name(record) == setting:
            value = value_of(record, metric)
            final = record.get("final")
            if value is None and isinstance(final, Mapping):
                value = number(final.get(metric))
            if value is not None:
                values.append(value)
    return np.array(values, dtype=float)


def claim_verdict(claim: Claim, interval_95: tuple[float, float], interval_90: tuple[float, float]) -> str:
    """``lower``/``higher``: supported when the 95 % interval of ``setting − versus`` lies wholly on the claimed side
    of 0, contradicted when it lies wholly on the other side. ``equal``: supported when the 90 % interval lies inside
    ±margin (both one-sided tests at 5 %: Schuirmann's two one-sided tests), contradicted when the 95 % interval lies
    wholly beyond +margin or −margin. ``not_lower`` (non-inferiority): supported when the 90 % interval lies wholly
    above −margin (one-sided test at 5 %), contradicted when the 95 % interval lies wholly below it; ``not_higher``
    the mirror image at +margin. Inconclusive otherwise, and without an interval. An exact difference (:func:`is_exact`)
    comes as both intervals of one point."""
    low, high = interval_95
    if math.isnan(low):
        return INCONCLUSIVE
    margin = claim.margin
    if claim.direction == "equal":
        if -margin < interval_90[0] and interval_90[1] < margin:
            return SUPPORTED
        return CONTRADICTED if low > margin or high < -margin else INCONCLUSIVE
    if claim.direction == "not_lower":
        return SUPPORTED if interval_90[0] > -margin else CONTRADICTED if high < -margin else INCONCLUSIVE
    if claim.direction == "not_higher":
        return SUPPORTED if interval_90[1] < margin else CONTRADICTED if low > margin else INCONCLUSIVE
    below, above = high < 0, low > 0
    if below or above:
        return SUPPORTED if below == (claim.direction == "lower") else CONTRADICTED
    return INCONCLUSIVE


def is_exact(values: np.ndarray, versus: np.ndarray) -> bool:
    """Whether every seed gave the same value on each side (at least 2 seeds a side): a measure the seeds do not move,
    e.g. a lexical probe of a pre-trained table before training. Its difference is exact, so the verdict takes it as
    an interval of one point; more seeds would add nothing."""
    return len(values) >= 2 and len(versus) >= 2 and variance(values) == 0 and variance(versus) == 0


def _seeds_needed(claim: Claim, values: np.ndarray, versus: np.ndarray, difference: float) -> int | None:
    """The seeds a side at which the verdict's own Welch test would show the observed difference at 80 % power
    (:func:`~.power.seeds_for_power`: on its side of 0, of the margin, or inside ±margin)."""
    if len(values) < 2 or len(versus) < 2:
        return None
    return seeds_for_power(claim.direction, difference, claim.margin, variance(values), variance(versus))


def evaluate_claim(claim: Claim, records: Sequence[Mapping[str, Any]]) -> ClaimResult:
    """The claim checked on ``records`` (:func:`claim_verdict`)."""
    values = claim_samples(records, claim.setting, claim.metric)
    versus = claim_samples(records, claim.versus, claim.metric)
    result = welch(values, versus, CONFIDENCE)
    narrow = welch(values, versus, 2 * CONFIDENCE - 1)
    interval_90 = (narrow.low, narrow.high) if claim.direction in WITH_MARGIN else None
    if is_exact(values, versus):
        exact = (result.difference, result.difference)
        verdict = claim_verdict(claim, exact, exact)
        return ClaimResult(claim, mean(values), mean(versus), result, verdict, None, None, exact=True)
    verdict = claim_verdict(claim, (result.low, result.high), (narrow.low, narrow.high))
    needed = _seeds_needed(claim, values, versus, result.difference) if verdict == INCONCLUSIVE else None
    return ClaimResult(claim, mean(values), mean(versus), result, verdict, interval_90, needed)
