"""Small-sample statistics the studies' findings share: Student's t quantile, a mean's t-interval, the pooled SD of
groups, and what a t-test can detect (the difference it finds with a given power, the seeds a gap needs).

Hand-written because scipy is not a dependency; ``tests/test_stats.py`` checks the quantiles against printed tables.
"""
from __future__ import annotations

import math
import statistics
from statistics import NormalDist


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (bisection on the CDF, Simpson's rule on the density): the CI's multiplier."""
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


def mean_ci(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and its two-sided t-interval (NaN bounds with fewer than 2 values)."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    half = t_quantile(0.5 + level / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


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
