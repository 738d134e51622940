"""Small-sample statistics the studies' findings share, on scipy: Student's t quantile and two-sided tail, a mean's
t-interval, the pooled SD of groups, what a t-test can detect (the difference it finds with a given power, the seeds
a gap needs), what a ratio of two noisy estimates can say (``read_ratio``, the one rule of every BF16/FP16 ratio the
workbook prints), and the one percentile bootstrap every module resamples with (``bootstrap``: scipy's, over
indices, so a statistic may take any data).
"""

from __future__ import annotations

import functools
import math
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (``scipy.stats.t.ppf``): the CI's multiplier (cached: the simulations ask for the same
    few quantiles thousands of times)."""
    if df < 1 or not 0 < p < 1:
        raise ValueError(f"need df >= 1 and 0 < p < 1, got df={df!r}, p={p!r}")
    return float(_sps.t.ppf(p, df))


def t_two_sided(t, df: int):
    """P(|T| ≥ |t|) for Student's T with integer ``df`` (a float or a numpy array of ``t``; ``scipy.stats.t.sf``)."""
    if int(df) != df or df < 1:
        raise ValueError(f"t_two_sided needs an integer df >= 1, got {df!r}")
    out = 2 * _sps.t.sf(np.abs(np.asarray(t, dtype=float)), int(df))
    return float(out) if np.ndim(out) == 0 else out


def normal_quantile(p: float) -> float:
    """The standard normal quantile (``scipy.stats.norm.ppf``)."""
    return float(_sps.norm.ppf(p))


def bootstrap(
    statistic: Callable,
    sizes: tuple[int, ...],
    n_boot: int = 2000,
    seed: int | np.random.Generator = 0,
    paired: bool = False,
) -> np.ndarray:
    """The bootstrap distribution of ``statistic`` by ``scipy.stats.bootstrap``, resampling indices: ``sizes`` holds
    each sample's number of units (sequences, seeds, steps...); ``statistic(*idx)`` gets one (n_boot, size) array of
    drawn indices per sample (the same indices for every sample when ``paired``) and returns (..., n_boot) values.
    Each sample's indices are drawn in turn from one ``numpy.random.default_rng(seed)`` (a Generator is used as
    given). A sample of one unit resamples to itself. The interval is ``percentile_interval`` of what it returns."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if min(sizes) < 2:  # scipy refuses a sample of one; its resamples are all the same
        return np.asarray(statistic(*(rng.integers(0, n, size=(n_boot, n)) for n in sizes)))
    data = tuple(np.arange(n) for n in sizes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _sps.DegenerateDataWarning)  # NaNs are dropped by percentile_interval
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's standard error of infinite values (unused here)
        res = _sps.bootstrap(
            data,
            lambda *idx, axis=-1: np.asarray(statistic(*idx), dtype=float),
            n_resamples=n_boot,
            vectorized=True,
            paired=paired,
            method="percentile",
            rng=rng,
        )
    return np.asarray(res.bootstrap_distribution)


def percentile_interval(values, level: float = 0.95, axis: int = -1) -> tuple:
    """The central ``level`` percentile interval of the finite ``values`` along ``axis`` (linear interpolation, as
    ``scipy.stats.bootstrap``'s percentile method; NaN where none is finite): (low, high)."""
    v = np.asarray(values, dtype=float)
    v = np.where(np.isfinite(v), v, np.nan)
    alpha = (1 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN row gives NaN, as documented
        lo, hi = np.nanquantile(v, [alpha, 1 - alpha], axis=axis)
    return lo, hi


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
    return (t_quantile(1 - alpha / 2, df) + normal_quantile(power)) * se


def detectable_gap(sd: float, n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """``detectable_difference`` of a paired t-test over ``n`` seeds when one seed's gap has SD ``sd``."""
    if n < 2:
        return float("inf")
    return detectable_difference(sd / math.sqrt(n), n - 1, power, alpha)


def ci_side_power(gap: float, sd: float, n: int, bound: float, side: str, level: float = 0.95) -> float:
    """The chance that the two-sided ``level`` t-interval of a mean over ``n`` values (true mean ``gap``, SD ``sd``)
    lies wholly ``"below"`` ``bound`` (its upper end under it) or wholly ``"above"`` it (its lower end over it):
    exact, from the non-central t (``scipy.stats.nct``) — the power of a rule that reads one side of one interval."""
    if side not in ("below", "above"):
        raise ValueError(f"side={side!r}; choose 'below' or 'above'")
    if n < 2 or not sd > 0:
        raise ValueError(f"need n >= 2 and sd > 0, got n={n!r}, sd={sd!r}")
    tc, nc = t_quantile(0.5 + level / 2, n - 1), (gap - bound) / (sd / math.sqrt(n))
    return float(_sps.nct.cdf(-tc, n - 1, nc) if side == "below" else _sps.nct.sf(tc, n - 1, nc))


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
