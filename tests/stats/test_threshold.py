"""The harm-threshold estimator (``nbkit.stats.threshold``): the isotonic fit, the crossing, the bootstrap CI's coverage
on synthetic studies with a known threshold, and the outcomes when no crossing lies inside the measured doses."""

from __future__ import annotations

import numpy as np
import pytest

from nbkit.stats import threshold

DOSES = np.geomspace(0.03, 0.5, 6)  # the dial's planned range: 6 log-spaced doses


def logistic_gap(doses, crossing, floor=0.4, width=0.5):
    """A gap curve falling from 0 to −floor, through the harm line −0.05 exactly at ``crossing``."""
    centre = np.log(crossing) + width * np.log(floor / 0.05 - 1)
    return -floor / (1 + np.exp(-(np.log(doses) - centre) / width))


def study(rng, truth, seeds=5, seed_sd=0.03, run_sd=0.04):
    """Paired gaps of one simulated study: a seed effect shared by all doses (the FP32 reference) + run noise."""
    return truth + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, run_sd, (seeds, truth.size))


def pava_decreasing(y, w):
    """Pool-adjacent-violators, written out: the reference for the batched max-min fit."""
    blocks = []
    for v, wt in zip(y, w):
        blocks.append([v, wt, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            b, a = blocks.pop(), blocks.pop()
            blocks.append([(a[0] * a[1] + b[0] * b[1]) / (a[1] + b[1]), a[1] + b[1], a[2] + b[2]])
    return np.concatenate([[m] * k for m, _, k in blocks])


def test_the_isotonic_fit_is_the_pool_adjacent_violators_fit():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(2, 9))
        y, w = rng.normal(size=n), rng.integers(1, 6, size=n).astype(float)
        assert np.allclose(threshold.isotonic_decreasing(y, w), pava_decreasing(y, w))


def test_a_noiseless_straight_curve_in_log_dose_crosses_where_it_is_drawn():
    gaps = np.tile(-0.02 * np.arange(6), (5, 1))  # −0.05 halfway between the 3rd and 4th dose in log dose
    est = threshold.estimate(gaps, DOSES)
    assert est.outcome == "crossing"
    assert est.dose == pytest.approx(np.sqrt(DOSES[2] * DOSES[3]), rel=1e-9)
    assert est.ci == (pytest.approx(est.dose), pytest.approx(est.dose))  # no seed-to-seed spread, no width
    assert est.bracket == (pytest.approx(DOSES[2]), pytest.approx(DOSES[3]))


def test_the_ci_covers_a_known_crossing_in_at_least_90_percent_of_200_simulated_studies():
    truth = logistic_gap(DOSES, crossing=0.12)
    covered = bracketed = 0
    for k in range(200):
        est = threshold.estimate(study(np.random.default_rng(1000 + k), truth), DOSES, n_boot=1000, seed=k)
        low = 0.0 if est.ci_low_censored else est.ci[0]
        high = np.inf if est.ci_high_censored else est.ci[1]
        covered += low <= 0.12 <= high
        bracketed += (est.bracket[0] or 0.0) <= 0.12 <= (est.bracket[1] or np.inf)
    assert covered / 200 >= 0.90, f"coverage {covered / 200:.3f}"
    assert bracketed >= covered  # the shape-free interval holds the interpolated one


def test_the_bracket_still_covers_when_the_curve_bends_sharply_between_doses():
    truth = logistic_gap(DOSES, crossing=0.10, floor=0.6, width=0.3)  # interpolating in log dose is biased here
    bracketed = sum(
        (est.bracket[0] or 0.0) <= 0.10 <= (est.bracket[1] or np.inf)
        for k in range(100)
        for est in [
            threshold.estimate(
                study(np.random.default_rng(k), truth, seed_sd=0.02, run_sd=0.03), DOSES, n_boot=500, seed=k
            )
        ]
    )
    assert bracketed / 100 >= 0.90


def test_no_harm_anywhere_is_reported_as_above_the_range_not_extrapolated():
    gaps = np.random.default_rng(3).normal(0, 0.01, (5, 6))
    est = threshold.estimate(gaps, DOSES)
    assert est.outcome == "above_range" and est.dose is None
    assert est.ci_high_censored and est.ci[1] is None and est.bracket[1] is None
    assert "above the measured range" in est.describe()


def test_harm_at_the_smallest_dose_is_reported_as_below_the_range():
    gaps = np.random.default_rng(4).normal(-0.3, 0.01, (5, 6))
    est = threshold.estimate(gaps, DOSES)
    assert est.outcome == "below_range" and est.dose is None
    assert est.ci_low_censored and est.ci[0] is None and est.bracket[0] is None
    assert "below the measured range" in est.describe()


def test_a_missing_run_is_left_out_of_its_dose_only():
    rng = np.random.default_rng(5)
    gaps = study(rng, logistic_gap(DOSES, crossing=0.12))
    holed = gaps.copy()
    holed[0, 0] = np.nan
    part = threshold.estimate(holed, DOSES)
    expected = threshold.isotonic_decreasing(np.nanmean(holed, axis=0), np.array([4.0, 5, 5, 5, 5, 5]))
    assert np.allclose(part.fitted, expected)  # dose 0 averages its 4 seeds, with weight 4
    assert part.outcome == "crossing" and np.isfinite(part.dose)


def test_doses_in_any_order_give_the_same_threshold():
    gaps = study(np.random.default_rng(6), logistic_gap(DOSES, crossing=0.12))
    order = np.random.default_rng(7).permutation(6)
    a, b = threshold.estimate(gaps, DOSES), threshold.estimate(gaps[:, order], DOSES[order])
    assert a.dose == pytest.approx(b.dose) and a.ci == b.ci


@pytest.mark.parametrize(
    "gaps, doses, match",
    [
        (np.zeros((5, 3)), [0.1, 0.2], "one column per dose"),
        (np.zeros((5, 2)), [0.1, 0.1], "distinct"),
        (np.zeros((5, 2)), [0.0, 0.1], "positive"),
        (np.zeros((1, 2)), [0.1, 0.2], ">= 2 seeds"),
    ],
)
def test_bad_input_is_refused_with_the_reason(gaps, doses, match):
    with pytest.raises(ValueError, match=match):
        threshold.estimate(gaps, doses)


def test_paired_gaps_subtract_each_seeds_fp32_run():
    assert np.allclose(threshold.paired_gaps([[0.9, 0.8], [0.7, 0.5]], [1.0, 0.6]), [[-0.1, -0.2], [0.1, -0.1]])


def _old_isotonic_decreasing(y, w):
    """The replaced batched fit: fit_i = min_{k ≤ i} max_{j ≥ i} mean_w(y[k..j]) (the reference for scipy's)."""
    n = y.shape[-1]
    cw = np.concatenate([np.zeros(w.shape[:-1] + (1,)), np.cumsum(w, -1)], -1)
    cwy = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(w * y, -1)], -1)
    k, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (cwy[..., j + 1] - cwy[..., k]) / (cw[..., j + 1] - cw[..., k])
    fit = np.empty(y.shape)
    for i in range(n):
        block = np.where((k <= j)[: i + 1, i:], means[..., : i + 1, i:], np.nan)
        fit[..., i] = np.nanmin(np.nanmax(block, axis=-1), axis=-1)
    return fit


def test_the_scipy_isotonic_fit_equals_the_hand_written_one_with_empty_doses_too():
    """Batched rows, weights 0 to 4 (a dose no drawn seed has: weight 0): scipy's fit equals the max-min formula's."""
    rng = np.random.default_rng(5)
    y = rng.normal(size=(400, 7))
    w = rng.integers(0, 5, size=(400, 7)).astype(float)
    w[w.sum(1) == 0, 0] = 1.0
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        old = _old_isotonic_decreasing(y, w)
    assert np.allclose(threshold.isotonic_decreasing(y, w), old, rtol=0, atol=1e-12)


def _task(rng, scale, seeds=5, seed_sd=0.005, run_sd=0.008, dose_sd=0.05):
    """One simulated task of a transfer study: its doses are ``DOSES`` × ``scale`` (each seed measuring them with
    log-normal noise), its true threshold 0.12 × ``scale``."""
    doses = DOSES * scale
    gaps = study(rng, logistic_gap(doses, 0.12 * scale), seeds, seed_sd, run_sd)
    return gaps, doses * np.exp(rng.normal(0, dose_sd, (seeds, doses.size)))


@pytest.mark.parametrize("ratio,expected", [(1.0, threshold.TRANSFERS), (3.0, threshold.DIFFERS)])
def test_the_joint_bootstrap_reads_a_known_ratio_against_the_band_and_its_ci_covers_it(ratio, expected):
    """200 simulated pairs of tasks whose thresholds differ by ``ratio``: the rule says ``expected`` in >= 90 % of
    them, and the ratio's 95 % CI covers the truth at 95 % ± 5 %."""
    said = covered = 0
    for k in range(200):
        rng = np.random.default_rng(k)
        t = threshold.transfer(_task(rng, 1.0), _task(rng, ratio), band=(0.5, 2.0), n_boot=400, seed=k)
        said += t.verdict == expected
        covered += t.ci[0] <= ratio <= t.ci[1]
    assert said >= 180
    assert 0.90 <= covered / 200 <= 1.0


def test_the_band_rule_reads_inside_outside_and_across():
    assert threshold.read_band((0.6, 1.9), (0.5, 2)) == threshold.TRANSFERS
    assert threshold.read_band((2.1, np.inf), (0.5, 2)) == threshold.DIFFERS
    assert threshold.read_band((0.0, 0.4), (0.5, 2)) == threshold.DIFFERS
    assert threshold.read_band((0.4, 1.2), (0.5, 2)) == threshold.CANNOT_TELL
    with pytest.raises(ValueError, match="band"):
        threshold.transfer(_task(np.random.default_rng(0), 1.0), _task(np.random.default_rng(1), 1.0), band=(2, 3))


def test_one_outlier_seed_in_a_dose_widens_the_threshold_ci_when_doses_are_resampled_with_the_gaps():
    """Seed 2 measures the dose around the crossing 6× too high (as c1of16-s2's ESS did): with doses fixed at their
    means it moves the point and shifts the CI; resampled with the gaps, it widens the CI as well."""
    gaps, doses = _task(np.random.default_rng(7), 1.0, seed_sd=0.01, run_sd=0.015)
    calm = threshold.estimate(gaps, doses, n_boot=1000)
    odd = doses.copy()
    odd[2, 2:4] *= 6.0
    fixed = threshold.estimate(gaps, np.nanmean(odd, axis=0), n_boot=1000)
    joint = threshold.estimate(gaps, odd, n_boot=1000)
    assert joint.bootstrap.startswith("seeds: gaps and doses") and fixed.bootstrap == "seeds: gaps (doses fixed)"
    assert joint.dose == pytest.approx(fixed.dose) and joint.dose != pytest.approx(calm.dose)  # the same point

    def width(t):
        return np.log(t.ci[1] / t.ci[0])

    assert width(joint) > 1.5 * width(fixed)  # the CI moves, not only the point
    assert width(calm) < 1.5 * width(threshold.estimate(gaps, np.nanmean(doses, axis=0), n_boot=1000))  # no outlier
