"""Small-sample statistics the studies' findings share: Student's t quantile and two-sided tail, a mean's t-interval
(and its bounded version for differences of accuracies), the pooled SD of groups, and what a t-test can detect (the
difference it finds with a given power, the seeds a gap needs), and what a ratio of two noisy estimates can say
(``read_ratio``, the one rule of every BF16/FP16 ratio the workbook prints).

Hand-written because scipy is not a dependency; ``tests/core/test_stats.py`` checks the quantiles against printed
tables.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from statistics import NormalDist


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (bisection on the CDF, Simpson's rule on the density): the CI's multiplier (cached: the
    simulations ask for the same few quantiles thousands of times)."""
    if df < 1 or not 0 < p < 1:
        raise ValueError(f"need df >= 1 and 0 < p < 1, got df={df!r}, p={p!r}")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float, n: int = 2000) -> float:  # P(T <= t) for t >= 0
        h = t / n
        f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    q = abs(p - 0.5) + 0.5
    lo, hi = 0.0, 1.0
    while cdf(hi) < q:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return math.copysign((lo + hi) / 2, p - 0.5)


def t_two_sided(t, df: int):
    """P(|T| ≥ |t|) for Student's T with integer ``df`` (a float or a numpy array of ``t``): the finite sums of
    Abramowitz & Stegun 26.7.3–4 on θ = atan(|t| / √df), exact and vectorised (the simulations call it a million
    times)."""
    import numpy as np

    if int(df) != df or df < 1:
        raise ValueError(f"t_two_sided needs an integer df >= 1, got {df!r}")
    df = int(df)
    theta = np.arctan(np.abs(np.asarray(t, dtype=float)) / math.sqrt(df))
    c2 = np.cos(theta) ** 2
    if df % 2:  # odd: 2/π [θ + sin θ cos θ (1 + 2/3 cos²θ + (2·4)/(3·5) cos⁴θ + …)], df − 2 powers in all
        term, total = np.ones_like(theta), np.zeros_like(theta)
        for j in range(1, (df - 1) // 2 + 1):
            total = total + term
            term = term * c2 * (2 * j) / (2 * j + 1)
        inside = 2 / math.pi * (theta + (np.sin(theta) * np.cos(theta) * total if df > 1 else 0))
    else:  # even: sin θ (1 + 1/2 cos²θ + (1·3)/(2·4) cos⁴θ + …)
        term, total = np.ones_like(theta), np.zeros_like(theta)
        for j in range(1, df // 2 + 1):
            total = total + term
            term = term * c2 * (2 * j - 1) / (2 * j)
        inside = np.sin(theta) * total
    out = np.clip(1 - inside, 0.0, 1.0)
    return float(out) if out.ndim == 0 else out


def mean_ci(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and its two-sided t-interval (NaN bounds with fewer than 2 values)."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    half = t_quantile(0.5 + level / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def bounded_mean_ci(xs: list[float], level: float = 0.95, bound: float = 1.0) -> tuple[float, float, float]:
    """Mean and a two-sided interval that stays inside (−``bound``, ``bound``): the t-interval on Fisher's scale
    z = atanh(x / bound) (standard error by the delta method, SE / (1 − m²)), mapped back with tanh. For a mean
    difference of two accuracies (each in [0, 1]) the interval never leaves (−1, 1), where the plain t-interval of a
    large gap on few seeds can reach below −1; for small gaps it equals the t-interval to first order. NaN bounds
    with fewer than 2 values; a mean at ±``bound`` gives the degenerate interval at it."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    r = m / bound
    if abs(r) >= 1:
        return m, m, m
    se = statistics.stdev(xs) / math.sqrt(len(xs)) / bound
    half = t_quantile(0.5 + level / 2, len(xs) - 1) * se / (1 - r * r)
    z = math.atanh(r)
    return m, bound * math.tanh(z - half), bound * math.tanh(z + half)


def detectable_difference(se: float, df: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest true difference a two-sided ``alpha`` t-test with standard error ``se`` and ``df`` degrees of
    freedom finds with ``power`` (normal approximation of the non-central t, with the t quantile for the test)."""
    return (t_quantile(1 - alpha / 2, df) + NormalDist().inv_cdf(power)) * se


def detectable_gap(sd: float, n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """``detectable_difference`` of a paired t-test over ``n`` seeds when one seed's gap has SD ``sd``."""
    if n < 2:
        return float("inf")
    return detectable_difference(sd / math.sqrt(n), n - 1, power, alpha)


def pooled_sd(groups: list[list[float]]) -> tuple[float, int]:
    """The SD pooled over the groups with two values or more (each weighted by its degrees of freedom) and those
    degrees of freedom; (NaN, 0) when no group has two values."""
    spread = [(len(g) - 1, statistics.variance(g)) for g in groups if len(g) >= 2]
    df = sum(d for d, _ in spread)
    return (math.sqrt(sum(d * v for d, v in spread) / df), df) if df else (float("nan"), 0)


def seeds_needed(sd: float, gap: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """Seeds a paired t-test needs to detect ``gap`` with ``power`` (smallest n with ``detectable_gap`` ≤ gap)."""
    n = 2
    while detectable_gap(sd, n, power, alpha) > gap and n < 10_000:
        n += 1
    return n


@dataclass(frozen=True)
class RatioReading:
    """What ``num / den`` of two noisy estimates can say (``read_ratio``): a ``ratio`` with its CI when ``den``'s CI
    lies above 0, a ``lower bound`` when only ``num``'s does, else ``undefined``. A signed estimator (k1 KL) whose
    CI covers 0 makes a ratio's bootstrap CI meaningless: it runs through ±∞ and prints as e.g. "−2×"."""

    kind: str
    """``ratio``, ``lower bound`` or ``undefined``."""
    value: float
    """The ratio (``ratio``), the lower bound (num's lower CI bound over den's upper one), or NaN."""
    low: float
    """Lower end of the ratio's CI (NaN when there is none; ``value`` for a lower bound)."""
    high: float
    """Upper end of the ratio's CI (NaN when there is none; inf for a lower bound)."""
    sentence: str
    """The reading in words, with both estimates' CIs where the ratio is not defined."""


def read_ratio(
    num: float,
    num_ci: tuple[float, float],
    den: float,
    den_ci: tuple[float, float],
    ratio_ci: tuple[float, float] | None = None,
    names: tuple[str, str] = ("BF16", "FP16"),
    level: float = 0.95,
) -> RatioReading:
    """Read ``num / den`` from the two estimates and their CIs (``ratio_ci``: a bootstrap CI of the ratio itself,
    quoted only when ``den``'s CI lies above 0). The one rule of every BF16/FP16 ratio the workbook prints. NaN CIs
    (no bootstrap asked for) leave the point estimates, and the reading says no CI was computed."""
    pct = f"{100 * level:g}%"
    if math.isnan(num_ci[0]) or math.isnan(den_ci[0]):  # no CIs (no bootstrap): the point estimates alone
        if den > 0:
            return RatioReading("ratio", num / den, math.nan, math.nan, f"{num / den:.3g}× (no CI computed)")
        return RatioReading(
            "undefined",
            math.nan,
            math.nan,
            math.nan,
            f"no ratio: {names[1]}'s estimate {den:.3g} is not above 0 (no CI computed)",
        )
    cis = (
        f"{names[0]} {num:.3g} ({pct} CI {num_ci[0]:.3g} to {num_ci[1]:.3g}), {names[1]} {den:.3g} "
        f"({pct} CI {den_ci[0]:.3g} to {den_ci[1]:.3g})"
    )
    if den_ci[0] > 0:
        low, high = ratio_ci if ratio_ci is not None else (math.nan, math.nan)
        ci = f" ({pct} CI {low:.3g}–{high:.3g})" if ratio_ci is not None else ""
        return RatioReading("ratio", num / den, low, high, f"{num / den:.3g}×{ci}")
    if num_ci[0] > 0 and den_ci[1] > 0:
        bound = num_ci[0] / den_ci[1]
        return RatioReading(
            "lower bound",
            bound,
            bound,
            math.inf,
            (
                f"≥ {bound:.3g}×: {names[1]}'s value cannot be told from 0, so the ratio has a lower bound only "
                f"({names[0]}'s lower CI bound over {names[1]}'s upper one); {cis}"
            ),
        )
    why = f"{names[1]}'s CI does not lie above 0" if num_ci[0] > 0 else "neither estimate lies above 0 beyond its CI"
    return RatioReading("undefined", math.nan, math.nan, math.nan, f"no ratio: {why}; {cis}")
