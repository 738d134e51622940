"""``nbkit.stats.noninferiority``: the rule's error rates by simulation against the closed form (normal noise, known
SD),
Holm's step-down, and what a second look does."""

from __future__ import annotations

import math

import pytest

from nbkit.stats import noninferiority as N


@pytest.mark.parametrize("gap", [0.0, -0.05, -0.12])
def test_simulated_error_rates_match_the_closed_form_with_a_known_sd(gap):
    sim = N.rates(gap, 0.04, 5, sims=200_000, known_sd=True)
    exact = N.closed_form_rates(gap, 0.04, 5)
    for verdict in (N.BREAKS, N.NO_HARM, N.INCONCLUSIVE):
        se = math.sqrt(exact[verdict] * (1 - exact[verdict]) / 200_000)
        assert sim[verdict] == pytest.approx(exact[verdict], abs=4 * se + 1e-4)


def test_at_the_margin_each_claim_errs_2_5_percent_and_with_no_gap_a_break_almost_never():
    exact = N.closed_form_rates(-0.05, 0.04, 5)
    assert exact[N.NO_HARM] == pytest.approx(0.025) and exact[N.BREAKS] == pytest.approx(0.025)
    assert N.closed_form_rates(0.0, 0.02, 5)[N.BREAKS] < 1e-6
    assert N.rates(-0.05, 0.04, 5, sims=100_000)[N.NO_HARM] == pytest.approx(0.025, abs=0.003)  # the t-interval too


def test_the_family_wise_error_is_the_product_rule_unadjusted_and_held_at_alpha_by_holm():
    cells = [(0.03, 5)] * 10
    p_any_no_harm = 1 - (1 - 0.025) ** 10  # ten independent cells at the margin, "no detectable harm" claims only
    assert N.familywise(cells, -0.05, known_sd=True, sims=100_000, claims=(N.NO_HARM,)) == pytest.approx(
        p_any_no_harm, abs=0.006
    )
    assert N.familywise(cells, -0.05, known_sd=True, sims=100_000) == pytest.approx(1 - 0.95**10, abs=0.006)
    assert N.familywise(cells, -0.05, adjust="holm", sims=50_000) <= 0.05 + 0.004
    with pytest.raises(ValueError, match="'bonferoni'.*holm"):
        N.familywise(cells, 0.0, adjust="bonferoni")


def test_holm_steps_down_and_stops_at_the_first_p_value_that_fails():
    # sorted: 0.001 <= 0.05/4, 0.012 <= 0.05/3, 0.03 > 0.05/2: stop (0.04 is not rejected though it is <= 0.05)
    assert N.holm([0.03, 0.001, 0.04, 0.012]) == [False, True, False, True]
    assert N.holm([0.2, 0.3]) == [False, False]


def test_a_second_look_after_an_inconclusive_first_raises_the_error_at_the_margin():
    one = N.rates(-0.05, 0.05, 7, sims=100_000)[N.NO_HARM]
    two = N.rates(-0.05, 0.05, 7, looks=(5,), sims=100_000)[N.NO_HARM]
    assert two > one + 0.005
    with pytest.raises(ValueError, match="looks"):
        N.rates(-0.05, 0.05, 7, looks=(7,))


def test_power_against_the_margin_needs_a_gap_beyond_it():
    gap = N.break_detectable(0.04, 5)
    assert gap < -0.05 and N.rates(gap, 0.04, 5, sims=100_000)[N.BREAKS] == pytest.approx(0.8, abs=0.02)


def test_the_closed_form_rates_equal_the_normal_cdf_of_the_standard_library():
    """``scipy.special.ndtr`` replaced ``statistics.NormalDist().cdf``: the same rates to 1e-9."""
    from statistics import NormalDist

    for gap, sd, n in ((0.0, 0.03, 5), (-0.05, 0.05, 7), (-0.12, 0.02, 3)):
        se, z, phi = sd / n**0.5, NormalDist().inv_cdf(0.975), NormalDist().cdf
        got = N.closed_form_rates(gap, sd, n)
        assert got[N.BREAKS] == pytest.approx(phi((-0.05 - gap) / se - z), abs=1e-9)
        assert got[N.NO_HARM] == pytest.approx(phi((gap + 0.05) / se - z), abs=1e-9)
