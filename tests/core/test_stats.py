"""``nbkit.stats``: the t quantile against printed tables, t-intervals, pooled SDs and what a t-test can detect."""

from __future__ import annotations

import math
import statistics

import pytest

from nbkit import stats


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
