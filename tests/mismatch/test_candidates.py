"""The candidate predictors of harm (``nbkit.mismatch.candidates``): each statistic of π − μ, oriented so larger
means more mismatch."""

from __future__ import annotations

import numpy as np
import pytest

from nbkit.mismatch import candidates as C


def one(pi, mu, flips=None, adv=None, eps=0.2, **kw):
    flips = flips if flips is not None else [np.zeros(len(m), bool) for m in mu]
    adv = adv if adv is not None else np.zeros(len(mu))
    return C.values(pi, mu, flips, adv, eps, **kw)


def test_every_candidate_is_zero_when_pi_equals_mu():
    mu = [np.log([0.5, 0.9, 0.2]), np.log([0.7, 0.3])]
    v = one(mu, mu, adv=[1.0, -1.0])
    assert set(v) == set(C.CANDIDATES)
    assert all(abs(x) < 1e-12 for x in v.values()), v


def test_the_bias_is_the_signed_mean_and_the_size_candidates_are_not():
    mu = [np.log(np.full(4, 0.5))] * 2
    up = one([m + 0.1 for m in mu], mu)  # π above μ on every sampled token
    down = one([m - 0.1 for m in mu], mu)
    assert up["bias"] == pytest.approx(-0.1) and down["bias"] == pytest.approx(0.1)
    for c in ("token_abs", "rms", "p99", "low_prob_abs"):
        assert up[c] == pytest.approx(0.1) and down[c] == pytest.approx(0.1)
    assert down["seq_kl"] == pytest.approx(0.4) and down["seq_abs"] == pytest.approx(0.4)


def test_the_clip_fraction_counts_ratios_outside_one_plus_minus_epsilon():
    mu = [np.log(np.full(4, 0.5))]
    pi = [mu[0] + np.log([1.0, 1.1, 1.3, 0.7])]
    assert one(pi, mu, eps=0.2)["clip_out"] == pytest.approx(0.5)
    assert one(pi, mu, eps=0.35)["clip_out"] == pytest.approx(0.0)


def test_low_probability_tokens_are_the_lowest_share_of_mu():
    mu = [np.log(np.array([0.01, 0.9, 0.8, 0.7, 0.6, 0.95, 0.9, 0.85, 0.75, 0.65]))]
    pi = [mu[0] + np.array([0.5] + [0.01] * 9)]
    v = one(pi, mu, low_share=0.1)
    assert v["low_prob_abs"] == pytest.approx(0.5) and v["token_abs"] == pytest.approx(0.059)


def test_argmax_flips_and_the_advantage_covariance():
    mu = [np.log(np.full(2, 0.5))] * 4
    pi = [m + d for m, d in zip(mu, (0.1, -0.1, 0.2, -0.2), strict=True)]
    flips = [np.array([True, False]), np.zeros(2, bool), np.zeros(2, bool), np.zeros(2, bool)]
    adv = np.array([1.0, -1.0, 1.0, -1.0])
    v = one(pi, mu, flips, adv)
    assert v["argmax_flips"] == pytest.approx(1 / 8)
    assert v["adv_cov"] == pytest.approx(abs(np.cov([0.2, -0.2, 0.4, -0.4], adv)[0, 1]))


def test_grpo_advantages_are_trls_group_normalised_rewards():
    adv = C.grpo_advantages([1, 0, 0, 0, 1, 1, 1, 1], 4)
    assert adv[:4] == pytest.approx([(1 - 0.25) / (0.5 + 1e-4)] + [(0 - 0.25) / (0.5 + 1e-4)] * 3)
    assert adv[4:] == pytest.approx([0.0] * 4)  # an all-correct group carries no signal
    with pytest.raises(ValueError, match="do not split into groups of 3"):
        C.grpo_advantages([1, 0, 0, 0], 3)


def test_bad_shapes_are_refused():
    mu = [np.log(np.full(3, 0.5))]
    with pytest.raises(ValueError, match="one boolean per response token"):
        C.values(mu, mu, [np.zeros(2, bool)], [0.0], 0.2)
    with pytest.raises(ValueError, match="2 advantages for 1 sequences"):
        C.values(mu, mu, [np.zeros(3, bool)], [0.0, 1.0], 0.2)
    with pytest.raises(ValueError, match="epsilon must be in"):
        C.values(mu, mu, [np.zeros(3, bool)], [0.0], 1.5)
