"""``nbkit.stats.stats``: the t quantile against printed tables, t-intervals, pooled SDs and what a t-test can
detect."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from nbkit.stats import stats


@pytest.mark.parametrize("df,expected", [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042)])
def test_t_quantile_matches_the_printed_table(df, expected):
    assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=2e-3)
    assert stats.t_quantile(0.025, df) == pytest.approx(-expected, abs=2e-3)


def test_mean_ci_is_a_t_interval_and_one_value_has_none():
    m, lo, hi = stats.mean_ci([1.0, 2.0, 3.0])
    assert (
        m == 2.0 and hi - m == pytest.approx(4.303 * 1.0 / math.sqrt(3), abs=1e-2) and m - lo == pytest.approx(hi - m)
    )
    m, lo, hi = stats.mean_ci([0.5])
    assert m == 0.5 and math.isnan(lo) and math.isnan(hi)


def test_more_seeds_detect_smaller_gaps_and_seeds_needed_reaches_the_gap():
    gaps = [stats.detectable_gap(0.05, n) for n in (2, 3, 5, 10, 30)]
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 0.05 < gaps[0]
    n = stats.seeds_needed(0.05, 0.05)
    assert stats.detectable_gap(0.05, n) <= 0.05 < stats.detectable_gap(0.05, n - 1)
    assert stats.detectable_gap(0.05, 1) == math.inf


def test_the_pooled_sd_weights_each_group_by_its_degrees_of_freedom_and_skips_single_values():
    sd, df = stats.pooled_sd([[1.0, 3.0], [2.0, 4.0, 6.0], [9.0]])  # variances 2 (1 df) and 4 (2 df)
    assert df == 3 and sd == pytest.approx(math.sqrt((1 * 2 + 2 * 4) / 3))
    assert math.isnan(stats.pooled_sd([[1.0], []])[0]) and stats.pooled_sd([[1.0]])[1] == 0
    assert stats.pooled_sd([[1.0, 2.0, 4.0]])[0] == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))


def test_the_paired_detectable_gap_is_the_detectable_difference_of_its_standard_error():
    assert stats.detectable_gap(0.05, 5) == pytest.approx(stats.detectable_difference(0.05 / math.sqrt(5), 4))
    assert stats.detectable_difference(1.0, 4) == pytest.approx(2.776 + 0.8416, abs=2e-3)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 6, 9, 30])
def test_the_two_sided_t_tail_is_the_quantiles_inverse(df):
    assert stats.t_two_sided(stats.t_quantile(0.975, df), df) == pytest.approx(0.05, abs=1e-6)
    assert stats.t_two_sided(0.0, df) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="integer df"):
        stats.t_two_sided(1.0, 2.5)


def test_a_bounded_interval_of_a_gap_next_to_minus_one_stays_inside_minus_one_to_one():
    gaps = [-0.98, -0.55, -0.95]  # three seeds, a gap next to -1: the plain t-interval reaches below -1
    m, lo, hi = stats.mean_ci(gaps)
    assert lo < -1
    bm, blo, bhi = stats.bounded_mean_ci(gaps)
    assert bm == m and -1 < blo < bm < bhi < 1
    small = [0.01, -0.02, 0.005, -0.01, 0.0]  # small gaps: the same interval as the t-interval, to first order
    assert stats.bounded_mean_ci(small)[1:] == pytest.approx(stats.mean_ci(small)[1:], abs=2e-4)
    assert math.isnan(stats.bounded_mean_ci([0.1])[1])


# ---------------------------------------------------------------------------------------------------------
# The scipy-backed functions against the hand-written ones they replaced (kept here only as references)


def _old_t_quantile(p: float, df: int) -> float:
    """The replaced t quantile: bisection on the CDF, Simpson's rule (2,000 intervals) on the density."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float, n: int = 2000) -> float:
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


def _old_t_two_sided(t, df: int):
    """The replaced two-sided t tail: Abramowitz & Stegun 26.7.3-4 on θ = atan(|t| / √df)."""
    theta = np.arctan(np.abs(np.asarray(t, dtype=float)) / math.sqrt(df))
    c2 = np.cos(theta) ** 2
    term, total = np.ones_like(theta), np.zeros_like(theta)
    if df % 2:
        for j in range(1, (df - 1) // 2 + 1):
            total, term = total + term, term * c2 * (2 * j) / (2 * j + 1)
        inside = 2 / math.pi * (theta + (np.sin(theta) * np.cos(theta) * total if df > 1 else 0))
    else:
        for j in range(1, df // 2 + 1):
            total, term = total + term, term * c2 * (2 * j - 1) / (2 * j)
        inside = np.sin(theta) * total
    return np.clip(1 - inside, 0.0, 1.0)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 6, 9, 30])
@pytest.mark.parametrize("p", [0.6, 0.8, 0.9, 0.975, 0.995, 0.025])
def test_the_scipy_t_quantile_equals_the_hand_written_one(p, df):
    assert stats.t_quantile(p, df) == pytest.approx(_old_t_quantile(p, df), abs=1e-9)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 6, 9, 30])
def test_the_scipy_two_sided_tail_equals_the_hand_written_one(df):
    t = np.array([0.0, 0.1, 0.5, 1.0, 2.0, 2.776, 4.0, -3.0, 12.7])
    assert np.allclose(stats.t_two_sided(t, df), _old_t_two_sided(t, df), rtol=0, atol=1e-9)
    assert isinstance(stats.t_two_sided(1.5, df), float)


def test_the_normal_quantile_is_statistics_normaldist():
    for p in (0.5, 0.8, 0.975, 0.001):
        assert stats.normal_quantile(p) == pytest.approx(statistics.NormalDist().inv_cdf(p), abs=1e-9)


def test_the_bootstrap_draws_the_same_resamples_as_one_generator_drawing_each_sample_in_turn():
    """scipy's resamples are the hand-written loops' (``default_rng(seed).integers(0, n, (B, n))`` per sample, in
    order; paired samples share one draw): the CIs of every module that moved to it are unchanged."""
    got = stats.bootstrap(lambda a, b: np.stack([a.sum(1), b.sum(1)]), (7, 4), n_boot=50, seed=3)
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 7, size=(50, 7)), rng.integers(0, 4, size=(50, 4))
    assert np.array_equal(got, np.stack([a.sum(1), b.sum(1)]))
    same = stats.bootstrap(lambda a, b: np.stack([a.sum(1), b.sum(1)]), (5, 5), n_boot=50, seed=3, paired=True)
    assert np.array_equal(same[0], same[1])
    assert np.array_equal(same[0], np.random.default_rng(3).integers(0, 5, size=(50, 5)).sum(1))
    assert np.array_equal(stats.bootstrap(lambda i: i.sum(1), (1,), n_boot=5), np.zeros(5))  # one unit: itself


def test_the_percentile_interval_drops_what_is_not_finite_and_is_numpys_linear_percentile():
    v = np.array([1.0, 2.0, 3.0, 4.0, np.nan, np.inf, -np.inf])
    lo, hi = stats.percentile_interval(v, 0.5)
    assert (lo, hi) == tuple(np.percentile([1.0, 2.0, 3.0, 4.0], [25, 75]))
    assert all(math.isnan(x) for x in stats.percentile_interval([np.nan, np.inf]))


@pytest.mark.parametrize(("gap", "bound", "side"), [(-0.06, -0.02, "below"), (-0.01, -0.05, "above")])
def test_the_power_of_reading_one_side_of_a_t_interval_is_what_simulated_studies_reach(gap, bound, side):
    sd, n = 0.03, 5
    rng = np.random.default_rng(0)
    draws = rng.normal(gap, sd, size=(20_000, n))
    m, se = draws.mean(1), draws.std(1, ddof=1) / math.sqrt(n)
    half = stats.t_quantile(0.975, n - 1) * se
    hits = (m + half < bound) if side == "below" else (m - half > bound)
    assert stats.ci_side_power(gap, sd, n, bound, side) == pytest.approx(hits.mean(), abs=0.01)
    assert stats.ci_side_power(gap, sd, 10, bound, side) > stats.ci_side_power(gap, sd, n, bound, side)
    assert stats.ci_side_power(bound, sd, n, bound, side) == pytest.approx(0.025)  # at the bound: its error rate


def test_the_power_of_a_side_names_the_valid_sides():
    with pytest.raises(ValueError, match="'below' or 'above'"):
        stats.ci_side_power(-0.05, 0.02, 5, -0.02, "under")
