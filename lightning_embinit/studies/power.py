"""The seeds a claim needs: the power of the verdict's own test (:func:`~.claims.claim_verdict`) at n seeds a side.

The verdict reads Welch's interval of ``setting − versus``. With n seeds on each side, the seeds' variances s₁², s₂²
taken as the true ones and Δ as the true difference, Welch's statistic (D − c) / SE has standard error
SE = √((s₁² + s₂²) / n) and Welch–Satterthwaite degrees of freedom ν = (n − 1)(s₁² + s₂²)² / (s₁⁴ + s₂⁴), and an
interval bound clears a value c with the probability that a noncentral t(ν, (Δ − c) / SE) passes the t quantile of
the interval (Welch 1947, "The generalization of Student's problem"; the noncentral t approximation as in Julious
2004, "Sample sizes for clinical trials with normal data"). With one side constant, ν = n − 1 and the distribution
is exact. The power of each direction, as the verdict's rules test it:

- ``lower`` / ``higher``: the 95 % interval wholly on the observed Δ's side of 0 (two-sided α = 0.05);
- ``equal``, −m < Δ < m: the 90 % interval inside ±m, both one-sided tests at 5 % (Schuirmann's TOST), whose power is
  taken as P(lower passes) + P(upper passes) − 1, a lower bound; Δ at or beyond ±m: the 95 % interval wholly beyond
  the margin;
- ``not_lower``: Δ > −m: the 90 % interval above −m (one-sided at 5 %); Δ ≤ −m: the 95 % interval below −m;
  ``not_higher`` the mirror image at +m.
"""

from __future__ import annotations

import math

from scipy import stats

POWER = 0.8
MOST_SEEDS = 2**40
"""Beyond this many seeds a side no number is given (an effect far inside the noise)."""


def welch_df(variance: float, variance_versus: float, n: int) -> float:
    """Welch–Satterthwaite degrees of freedom of two samples of ``n`` each with these variances (n − 1 with one 0)."""
    return (n - 1) * (variance + variance_versus) ** 2 / (variance**2 + variance_versus**2)


def _passes(shift: float, df: float, alpha: float) -> float:
    """P(a noncentral t(df, shift) exceeds the one-sided ``alpha`` quantile of Student's t(df))."""
    return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, shift))


def claim_power(
    direction: str, difference: float, margin: float | None, variance: float, variance_versus: float, n: int
) -> float:
    """The power at ``n`` seeds a side of the verdict on a claim in ``direction`` (margin ``margin``) when the true
    difference is ``difference`` and the seeds vary by these variances (module doc)."""
    spread = math.sqrt((variance + variance_versus) / n)
    df = welch_df(variance, variance_versus, n)
    if direction in ("lower", "higher"):
        return _passes(abs(difference) / spread, df, 0.025)
    if direction == "equal":
        if abs(difference) < margin:
            low = _passes((difference + margin) / spread, df, 0.05)
            high = _passes((margin - difference) / spread, df, 0.05)
            return max(0.0, low + high - 1)
        return _passes((abs(difference) - margin) / spread, df, 0.025)
    gap = difference + margin if direction == "not_lower" else margin - difference
    return _passes(gap / spread, df, 0.05) if gap > 0 else _passes(-gap / spread, df, 0.025)


def seeds_for_power(
    direction: str, difference: float, margin: float | None, variance: float, variance_versus: float
) -> int | None:
    """The fewest seeds a side (at least 2) at which :func:`claim_power` reaches 80 %; None when the seeds have no
    spread, the difference sits exactly where the verdict cannot move (Δ = 0 for ``lower``/``higher``, on the
    margin), or more than :data:`MOST_SEEDS` would be needed."""
    values = (difference, variance, variance_versus)
    if any(math.isnan(value) for value in values) or variance + variance_versus <= 0:
        return None
    if direction in ("lower", "higher"):
        edges: tuple[float, ...] = (0.0,)
    else:
        edges = {"equal": (margin, -margin), "not_lower": (-margin,), "not_higher": (margin,)}[direction]
    if difference in edges:
        return None

    def enough(n: int) -> bool:
        return claim_power(direction, difference, margin, variance, variance_versus, n) >= POWER

    low, high = 1, 2  # enough(high), not enough(low) once found
    while not enough(high):
        low, high = high, high * 2
        if high > MOST_SEEDS:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high
