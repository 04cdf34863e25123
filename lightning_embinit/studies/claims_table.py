"""The claims table of a study's report: each claim checked on the records (:func:`checked_claims`) and the
Markdown that shows the verdicts and how they are reached (:func:`claims_lines`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_embinit.studies.claims import ONE_SIDED, Claim, ClaimResult, evaluate_claim
from lightning_embinit.studies.notes import markdown_row
from lightning_embinit.studies.records import ReportError


def checked_claims(
    study: Mapping[str, Any], records: Sequence[Mapping[str, Any]], where: str
) -> tuple[list[ClaimResult], list[str]]:
    """The ``study``'s claims checked on ``records``, and the ids of those a setting of which has no records (a
    variant may run some of the settings); a claim that cannot be read is a ReportError naming ``where``."""
    try:
        parsed = [Claim.from_dict(claim) for claim in study.get("claims") or []]
    except ValueError as error:
        raise ReportError(f"{where}: {error}") from None
    ran = {record.get("setting") for record in records}
    checked = [claim for claim in parsed if {claim.setting, claim.versus} <= ran]
    return [evaluate_claim(claim, records) for claim in checked], [claim.id for claim in parsed if claim not in checked]


def claim_row(result: ClaimResult) -> list[str]:
    claim, welch = result.claim, result.welch

    def value(mean: float, n: int) -> str:
        return "–" if math.isnan(mean) else f"{mean:.4g} ({n})"

    if math.isnan(welch.difference):
        difference = "–"
    elif result.exact:
        difference = f"{welch.difference:+.4g} (exact: every seed gave the same value on each side)"
    elif math.isnan(welch.low):
        difference = f"{welch.difference:+.4g} [–] ({welch.note})"
    else:
        difference = f"{welch.difference:+.4g} [{welch.low:.3g}, {welch.high:.3g}]"
        if result.interval_90 is not None:
            difference += f"; 90 %: [{result.interval_90[0]:.3g}, {result.interval_90[1]:.3g}]"
    stand_in = f" (stand-in: {claim.stand_in})" if isinstance(claim.stand_in, str) else " (stand-in)"
    return [
        claim.id
        + (" (hypothesis)" if claim.kind == "hypothesis" else "")
        + (stand_in if claim.stand_in else "")
        + (f" (scope: {claim.scope})" if claim.scope else ""),
        f"{claim.source}: {claim.says}",
        f"{claim.setting} − {claim.versus}",
        claim.metric,
        claim.expected,
        value(result.mean, welch.n),
        value(result.mean_versus, welch.n_reference),
        difference,
        f"**{result.verdict}**",
        "–" if result.seeds_needed is None else str(result.seeds_needed),
    ]


def claims_lines(claims: Sequence[ClaimResult]) -> list[str]:
    """The claims table and how its verdicts are reached."""
    hypotheses = any(result.claim.kind == "hypothesis" for result in claims)
    says = "source: says" if hypotheses else "paper: says"
    header = ["claim", says, "compared", "metric", "expected Δ", "mean (n)", "versus (n)", "Δ [95 % CI]"]
    rows = [[*header, "verdict", "seeds for 80 % power"], ["---"] * (len(header) + 2), *map(claim_row, claims)]
    one_sided = any(result.claim.direction in ONE_SIDED for result in claims)
    title = "the papers' claims and this package's hypotheses" if hypotheses else "the papers' claims"
    return [
        "",
        f"## Claims: {title} checked on these records",
        "",
        *map(markdown_row, rows),
        "",
        *(
            [
                "A claim marked (hypothesis) is this package's own, not a paper's finding; its source says what "
                "motivates it.",
                "",
            ]
            if hypotheses
            else []
        ),
        "Δ = setting − versus, difference of the seeds' means, with Welch's 95 % interval. lower/higher: **supported** "
        "when the interval lies wholly on the claimed side of 0, **contradicted** when wholly on the other side. "
        "equal ±m: **supported** when the 90 % interval lies inside ±m (two one-sided tests at 5 %), **contradicted** "
        "when the 95 % interval lies wholly beyond ±m. "
        + (
            "not lower (≥ −m): **supported** when the 90 % interval lies wholly above −m (a one-sided test at 5 %), "
            "**contradicted** when the 95 % interval lies wholly below −m; not higher (≤ +m) the mirror image. "
            if one_sided
            else ""
        )
        + (
            "exact: every seed gave the same value on each side (a measure the seeds do not move), so Δ is exact and "
            "the verdict compares Δ itself with 0 or the margin. "
            if any(result.exact for result in claims)
            else ""
        )
        + "**inconclusive** otherwise; then the seeds each setting needs for this verdict to show the observed Δ at "
        "80 % power (Welch's test at that many seeds a side, the seeds' variances taken as true: on Δ's side of 0 at "
        "two-sided α = 0.05; for equal: inside ±m, both one-sided tests at 5 %, or beyond it"
        + ("; for not lower/not higher: on Δ's side of the margin)." if one_sided else ")."),
    ]
