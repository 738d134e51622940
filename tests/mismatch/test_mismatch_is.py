"""Specification of the IS-weight diagnostics of ``nbkit.mismatch.mismatch``: the effective sample size of the weights
π/μ
(token and sequence level, verl's ``rollout_is_eff_sample_size`` = (Σw)² / (N Σw²)) and verl's perplexity ratio,
each checked against a plain-Python loop written from the definition, on hand-made and random cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nbkit.mismatch import mismatch as mm


def ess_loop(weights) -> float:
    """(Σw)² / (N Σw²) by a loop over plain floats."""
    total = squares = 0.0
    for w in weights:
        total += w
        squares += w * w
    return total * total / (len(weights) * squares)


def ppl_loop(pi, mu) -> tuple[float, float]:
    """(mean over sequences of log PPL_π − log PPL_μ, mean over sequences of PPL_π / PPL_μ), by loops."""
    diffs = []
    for a, b in zip(pi, mu):
        if len(a) == 0:
            continue
        ppl_pi = math.exp(-sum(a) / len(a))
        ppl_mu = math.exp(-sum(b) / len(b))
        diffs.append((math.log(ppl_pi / ppl_mu), ppl_pi / ppl_mu))
    return sum(d for d, _ in diffs) / len(diffs), sum(r for _, r in diffs) / len(diffs)


def random_pair(seed, n_seq=10, noise=0.05):
    rng = np.random.default_rng(seed)
    mu = [np.log(rng.uniform(0.05, 0.6, rng.integers(1, 25))) for _ in range(n_seq)]
    pi = [np.minimum(x + rng.normal(0, noise, x.size), 0.0) for x in mu]
    return pi, mu


def test_equal_weights_have_full_sample_size_and_one_dominant_weight_has_one():
    assert mm.effective_sample_size(np.zeros(7)) == pytest.approx(1.0, abs=1e-15)
    assert mm.effective_sample_size(np.full(5, 3.7)) == pytest.approx(1.0, abs=1e-15)  # scale does not matter
    assert mm.effective_sample_size([0.0, -800.0, -800.0, -800.0]) == pytest.approx(1 / 4, rel=1e-12)


def test_hand_made_weights():
    # w = (1, 2, 3, 4): (10)² / (4 · 30) = 5/6
    assert mm.effective_sample_size(np.log([1.0, 2.0, 3.0, 4.0])) == pytest.approx(5 / 6, rel=1e-12)
    # w = (1, 1, 4): 36 / (3 · 18) = 2/3
    assert mm.effective_sample_size(np.log([1.0, 1.0, 4.0])) == pytest.approx(2 / 3, rel=1e-12)


def test_sequence_weights_beyond_float_range_still_have_a_sample_size():
    # exp(900) overflows float64; the ratio is that of weights (1, e^-1): (1 + e^-1)² / (2 (1 + e^-2))
    expected = (1 + math.exp(-1)) ** 2 / (2 * (1 + math.exp(-2)))
    assert mm.effective_sample_size([900.0, 899.0]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_ess_equals_the_loop_on_random_weights(seed):
    lw = np.random.default_rng(seed).normal(0, 1.5, 200)
    assert mm.effective_sample_size(lw) == pytest.approx(ess_loop([math.exp(x) for x in lw]), rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_token_and_sequence_ess_of_a_batch_equal_the_loops(seed):
    pi, mu = random_pair(seed)
    token = [math.exp(a - b) for x, y in zip(pi, mu) for a, b in zip(x, y)]
    seq = [math.exp(sum(a - b for a, b in zip(x, y))) for x, y in zip(pi, mu)]
    m = mm.mismatch_metrics(pi, mu)
    assert m["ess_token"] == pytest.approx(ess_loop(token), rel=1e-12)
    assert m["ess_seq"] == pytest.approx(ess_loop(seq), rel=1e-12)
    assert 0 < m["ess_seq"] <= 1 and 0 < m["ess_token"] <= 1


@pytest.mark.parametrize("seed", range(4))
def test_perplexity_ratio_equals_the_loop(seed):
    pi, mu = random_pair(seed, noise=0.2)
    pi.append(np.zeros(0))  # an empty response has no perplexity: left out, as its mean is undefined
    mu.append(np.zeros(0))
    log_diff, ratio = ppl_loop(pi, mu)
    m = mm.mismatch_metrics(pi, mu)
    assert m["log_ppl_diff"] == pytest.approx(log_diff, rel=1e-10, abs=1e-15)
    assert m["ppl_ratio"] == pytest.approx(ratio, rel=1e-12)
    assert m["rollout_corr/ppl_ratio"] == m["ppl_ratio"] and m["rollout_corr/log_ppl_diff"] == m["log_ppl_diff"]


def test_hand_made_perplexity_ratio():
    # one sequence, log μ = (log ½, log ½), log π = (log ¼, log ¼): PPL_π = 4, PPL_μ = 2, ratio 2
    m = mm.perplexity_ratio([np.log([0.25, 0.25])], [np.log([0.5, 0.5])])
    assert m["ppl_ratio"] == pytest.approx(2.0, rel=1e-12)
    assert m["log_ppl_diff"] == pytest.approx(math.log(2.0), rel=1e-12)


def test_identical_sides_give_unit_ess_and_ratio():
    pi, mu = random_pair(9)
    m = mm.mismatch_metrics(mu, mu)
    assert (m["ess_token"], m["ess_seq"], m["ppl_ratio"], m["log_ppl_diff"]) == (1.0, 1.0, 1.0, 0.0)


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="no weights"):
        mm.effective_sample_size([])
    with pytest.raises(ValueError, match="must be finite"):
        mm.effective_sample_size([0.0, float("nan")])


def test_the_diagnostics_are_logged_by_the_trainer_under_schema_names():
    from nbkit.records import schema
    from nbkit.rl.trainer import MISMATCH_KEYS

    for key in ("ess_token", "ess_seq", "ppl_ratio", "log_ppl_diff"):
        assert key in MISMATCH_KEYS and schema.mismatch_key(key) in schema.KEYS
    assert (schema.ESS_TOKEN, schema.ESS_SEQ, schema.PPL_RATIO, schema.LOG_PPL_DIFF) == tuple(
        schema.mismatch_key(k) for k in ("ess_token", "ess_seq", "ppl_ratio", "log_ppl_diff")
    )
    for key in (
        schema.IS_MASKED_TOKEN_FRACTION,
        schema.IS_TRUNCATED_TOKEN_FRACTION,
        schema.JUDGE_ACCURACY,
        schema.JUDGE_RESPONSES,
        schema.JUDGE_MATMUL_DTYPES,
        schema.TIME_JUDGE,
        schema.GRAD_NORM,
        schema.ENTROPY,
        schema.PHANTOM_FRACTION,
    ):
        assert key in schema.KEYS, key
