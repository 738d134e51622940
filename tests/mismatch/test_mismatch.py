"""Specification of ``nbkit.mismatch.mismatch``: the metrics on hand-computed cases, and π by teacher forcing.

Notation: log π = training log-probs, log μ = rollout log-probs, one 1-D array per sequence; r = π/μ per
token, R = ∏ r per sequence. Tokens are samples from μ, so KL[μ‖π] and χ²(π‖μ) are sample means under μ.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nbkit.engines import Rollout
from nbkit.mismatch import mismatch as mm

# ---------------------------------------------------------------------------------------------------------
# Metrics on hand-computed cases


def ragged_logps(n_seq=12, seed=0, lo=1, hi=30):
    """Random valid log-probabilities (p ≤ 0.5: noise added in tests keeps them ≤ 0), ragged lengths in [lo, hi)."""
    rng = np.random.default_rng(seed)
    return [np.log(rng.uniform(0.01, 0.5, rng.integers(lo, hi))) for _ in range(n_seq)]


def test_equal_inputs_give_zero_divergence_and_unit_correlation():
    lp = ragged_logps()
    m = mm.mismatch_metrics(lp, [x.copy() for x in lp])
    zero = [
        "token_abs_logp_diff/mean",
        "token_abs_logp_diff/max",
        "token_abs_logp_diff/p99",
        "rollout_probs_diff_max",
        "rollout_probs_diff_mean",
        "rollout_probs_diff_std",
        "sampler_learner_prob_diff_max",
        "sampler_learner_prob_diff_min",
        "kl_k1",
        "kl_k2",
        "kl_k3",
        "chi2_token",
        "chi2_seq",
        "log_ppl_abs_diff",
        "seq_log_ratio/mean",
        "seq_log_ratio/abs_mean",
        "seq_kl",
        "seq_log_ratio_slope/per_token",
        "seq_log_ratio_slope/intercept",
    ]
    for key in zero:
        assert m[key] == 0.0, key
    assert m["rollout_actor_probs_pearson_corr"] == 1.0
    for key in ("min", "mean", "max"):
        assert m[f"sampling/importance_sampling_ratio/{key}"] == 1.0
    assert mm.relative_prob_error(lp, lp) == {"rel_prob_err/mean": 0.0, "rel_prob_err/max": 0.0}


@pytest.mark.parametrize("c", [0.1, -0.3])
def test_constant_shift_has_its_known_kl_chi2_and_slope(c):
    """log π = log μ + c on every token: every estimator has a closed form."""
    mu = [x - abs(c) for x in ragged_logps(seed=1, lo=2)]  # room for log π = log μ + c to stay ≤ 0
    pi = [x + c for x in mu]
    m = mm.mismatch_metrics(pi, mu)
    lengths = np.array([x.size for x in mu])
    assert m["kl_k1"] == pytest.approx(-c, abs=1e-12)
    assert m["kl_sample_train_v1"] == m["kl_k1"]
    assert m["kl_k3"] == pytest.approx(math.exp(c) - 1 - c, rel=1e-9)
    assert m["kl_sample_train_v2"] == pytest.approx(c * c / 2, rel=1e-9)
    assert m["chi2_token"] == pytest.approx(math.exp(2 * c) - 1, rel=1e-9)
    assert m["chi2_seq"] == pytest.approx(np.mean(np.exp(2 * c * lengths)) - 1, rel=1e-9)
    assert m["seq_log_ratio/mean"] == pytest.approx(c * lengths.mean(), rel=1e-9)
    assert m["seq_kl"] == pytest.approx(-c * lengths.mean(), rel=1e-9)
    assert m["seq_log_ratio_slope/per_token"] == pytest.approx(c, rel=1e-9)
    assert m["seq_log_ratio_slope/per_1k_tokens"] == pytest.approx(1000 * c, rel=1e-9)
    assert m["seq_log_ratio_slope/intercept"] == pytest.approx(0.0, abs=1e-9)
    assert m["token_abs_logp_diff/mean"] == pytest.approx(abs(c), rel=1e-9)
    assert m["log_ppl_abs_diff"] == pytest.approx(abs(c), rel=1e-9)
    s, n = mm.seq_log_ratio(pi, mu)
    np.testing.assert_allclose(s, c * n, rtol=1e-9)
    for key in ("min", "mean", "max"):
        assert m[f"sampling/importance_sampling_ratio/{key}"] == pytest.approx(math.exp(c), rel=1e-9)


def test_probability_differences_on_a_hand_computed_case():
    pi = [np.log([0.5, 0.2]), np.log([0.9])]
    mu = [np.log([0.4, 0.25]), np.log([0.8])]
    m = mm.mismatch_metrics(pi, mu)
    # |π − μ| = 0.1, 0.05, 0.1: mean 1/12, population std sqrt(1/1800)
    assert m["rollout_probs_diff_max"] == pytest.approx(0.1)
    assert m["rollout_probs_diff_mean"] == pytest.approx(1 / 12)
    assert m["rollout_probs_diff_std"] == pytest.approx(math.sqrt(1 / 1800))
    # Oat: μ − π = −0.1, 0.05, −0.1
    assert m["sampler_learner_prob_diff_max"] == pytest.approx(0.05)
    assert m["sampler_learner_prob_diff_min"] == pytest.approx(-0.1)
    # π: centred −1/30, −1/3, 11/30; μ: −1/12, −7/30, 19/60 → r = 0.1966̅ / sqrt(0.2466̅ · 0.1616̅)
    assert m["rollout_actor_probs_pearson_corr"] == pytest.approx(0.59 / 3 / math.sqrt(0.74 / 3 * 0.485 / 3))
    # r = π/μ = 1.25, 0.8, 1.125
    assert m["sampling/importance_sampling_ratio/min"] == pytest.approx(0.8)
    assert m["sampling/importance_sampling_ratio/mean"] == pytest.approx(3.175 / 3)
    assert m["sampling/importance_sampling_ratio/max"] == pytest.approx(1.25)
    assert m["chi2_token"] == pytest.approx((1.25**2 + 0.8**2 + 1.125**2) / 3 - 1)
    # R = 1.25 · 0.8 = 1 and 1.125: χ²_seq = (1 + 1.125²)/2 − 1; sequence KL = −(0 + log 1.125)/2
    assert m["chi2_seq"] == pytest.approx((1 + 1.125**2) / 2 - 1)
    assert m["seq_kl"] == pytest.approx(-math.log(1.125) / 2)
    # log-PPL gap per sequence: |mean log μ − mean log π| = |log(0.1)/2 − log(0.1)/2| = 0 and log(9/8)
    assert m["log_ppl_abs_diff"] == pytest.approx(math.log(1.125) / 2)


def test_pearson_is_signed_and_nan_when_one_side_is_constant():
    assert mm.pearson([0.1, 0.2, 0.3], [0.3, 0.2, 0.1]) == pytest.approx(-1.0)
    assert mm.pearson([0.1, 0.2, 0.3], [0.2, 0.4, 0.6]) == pytest.approx(1.0)
    assert math.isnan(mm.pearson([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]))


def test_relative_probability_error_against_a_reference():
    ref, test = [np.log([0.5, 0.2])], [np.log([0.55, 0.2])]
    e = mm.relative_prob_error(ref, test)
    assert e["rel_prob_err/mean"] == pytest.approx(0.05)
    assert e["rel_prob_err/max"] == pytest.approx(0.1)


def test_slope_fit_recovers_a_planted_slope():
    rng = np.random.default_rng(2)
    lengths = rng.integers(10, 500, 400).astype(float)
    log_ratio = 0.3 - 0.002 * lengths + rng.normal(0, 0.05, lengths.size)
    slope, intercept = mm.fit_slope(lengths, log_ratio)
    assert slope == pytest.approx(-0.002, abs=5e-5)
    assert intercept == pytest.approx(0.3, abs=0.02)
    assert all(math.isnan(v) for v in mm.fit_slope([7, 7, 7], [0.1, 0.2, 0.3]))


def test_slope_through_the_metrics_from_per_token_drift():
    """A per-token drift of −0.004 in log π shows up as a slope of −4 per 1000 tokens."""
    rng = np.random.default_rng(3)
    mu = ragged_logps(n_seq=200, seed=3, lo=5, hi=200)
    pi = [x - 0.004 + rng.normal(0, 0.01, x.size) for x in mu]
    m = mm.mismatch_metrics(pi, mu)
    assert m["seq_log_ratio_slope/per_1k_tokens"] == pytest.approx(-4.0, abs=0.1)


def test_bootstrap_ci_contains_the_estimate_and_shrinks_with_more_data():
    def data(n_seq, seed):
        rng = np.random.default_rng(seed)
        mu = ragged_logps(n_seq=n_seq, seed=seed)
        return [x + rng.normal(-0.01, 0.05, x.size) for x in mu], mu

    widths = {}
    for n_seq in (40, 640):
        pi, mu = data(n_seq, seed=n_seq)
        for key in mm.HEADLINE:
            ci = mm.bootstrap_ci(key, pi, mu, n_boot=200, seed=0)
            assert ci["low"] <= ci["estimate"] <= ci["high"], (key, ci)
            widths[n_seq, key] = ci["high"] - ci["low"]
    for key in mm.HEADLINE:  # 16× the sequences: the width should fall about 4×
        assert widths[640, key] < widths[40, key] / 2, key
    pi, mu = data(40, seed=40)
    same = mm.bootstrap_ci(lambda a, b: mm.kl_estimators(a, b)["kl_k1"], pi, mu, n_boot=200, seed=0)
    assert same == mm.bootstrap_ci("kl_k1", pi, mu, n_boot=200, seed=0)
    assert set(mm.headline_cis(pi, mu, n_boot=20)) == set(mm.HEADLINE)


def test_mismatch_metrics_returns_every_documented_key_and_the_aliases():
    lp = ragged_logps(seed=4)
    m = mm.mismatch_metrics([x - 0.01 for x in lp], lp)
    assert list(m) == list(mm.METRICS) + list(mm.ALIASES)
    assert all(type(v) is float for v in m.values())
    assert all(m[alias] == m[key] for alias, key in mm.ALIASES.items())
    assert list(mm.mismatch_metrics(lp, lp, aliases=False)) == list(mm.METRICS)


@pytest.mark.parametrize(
    "pi, mu, match",
    [
        ([], [], "no sequences"),
        ([[-1.0]], [[-1.0], [-2.0]], "1 sequences but log μ has 2"),
        ([[-1.0, -2.0]], [[-1.0]], "sequence 0: log π has 2 tokens but log μ has 1"),
        ([[], []], [[], []], "no tokens"),
        ([[-1.0, float("nan")]], [[-1.0, -1.0]], "non-finite"),
    ],
)
def test_bad_input_raises_a_clear_error(pi, mu, match):
    with pytest.raises(ValueError, match=match):
        mm.mismatch_metrics(pi, mu)


# ---------------------------------------------------------------------------------------------------------
# π by teacher forcing, on a tiny random Qwen2 (no downloads)


@pytest.fixture(scope="module")
def model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=40,
        initializer_range=0.2,
    )
    return Qwen2ForCausalLM(cfg).eval()


def full_forward_logprobs(model, r: Rollout, temperature=1.0) -> np.ndarray:
    """An independent reference: one unpadded fp32 forward of a single sequence, float64 log-softmax."""
    ids = torch.tensor([r.prompt_ids + r.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double() / temperature
    lp = torch.log_softmax(logits, -1)[len(r.prompt_ids) - 1 : -1]
    return lp.gather(-1, torch.tensor(r.token_ids)[:, None])[:, 0].numpy()


@pytest.fixture(scope="module")
def rollouts(model):
    rng = np.random.default_rng(5)
    out = []
    for i in range(16):
        prompt = rng.integers(0, 40, rng.integers(2, 9)).tolist()
        tokens = rng.integers(0, 40, rng.integers(1, 40)).tolist()
        r = Rollout(
            prompt_index=i, prompt="", prompt_ids=prompt, token_ids=tokens, text="", logprobs=[], finish_reason="length"
        )
        r.logprobs = full_forward_logprobs(model, r).tolist()
        out.append(r)
    return out


def test_fp32_teacher_forcing_matches_an_independent_forward(model, rollouts):
    lp = mm.teacher_forced_logprobs(model, rollouts, dtype="fp32", batch_size=5)
    for r, a in zip(rollouts, lp, strict=True):
        assert a.dtype == np.float64 and a.shape == (len(r.token_ids),)
        np.testing.assert_allclose(a, r.logprobs, rtol=0, atol=1e-5)
    hot = mm.teacher_forced_logprobs(model, rollouts[:3], temperature=2.0)
    for r, a in zip(rollouts[:3], hot, strict=True):
        np.testing.assert_allclose(a, full_forward_logprobs(model, r, temperature=2.0), rtol=0, atol=1e-5)


def test_ragged_padded_batches_equal_one_by_one(model, rollouts):
    batched = mm.teacher_forced_logprobs(model, rollouts, dtype="fp32", batch_size=16)
    single = mm.teacher_forced_logprobs(model, rollouts, dtype="fp32", batch_size=1)
    for a, b in zip(batched, single, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_bf16_and_fp16_mismatch_is_nonzero_and_fp16_smaller(model, rollouts):
    mu = [r.logprobs for r in rollouts]
    assert sum(len(m) for m in mu) > 200
    err = {
        dt: mm.mismatch_metrics(mm.teacher_forced_logprobs(model, rollouts, dtype=dt), mu) for dt in ("bf16", "fp16")
    }
    bf16, fp16 = (err[dt]["token_abs_logp_diff/mean"] for dt in ("bf16", "fp16"))
    assert fp16 > 0 and bf16 > 0
    assert fp16 < bf16, (fp16, bf16)
    assert next(model.parameters()).dtype == torch.float32  # the caller's model was not cast


def test_dtype_means_a_cast_copy_in_that_precision(model, rollouts):
    """dtype="bf16" on an fp32 model == the same model cast to bf16 and run as given."""
    import copy

    cast = copy.deepcopy(model).to(torch.bfloat16)
    a = mm.teacher_forced_logprobs(model, rollouts[:4], dtype="bf16")
    b = mm.teacher_forced_logprobs(cast, rollouts[:4], dtype=None)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_bad_dtype_and_bad_rollouts_raise(model, rollouts):
    with pytest.raises(ValueError, match=r"'float16'.*'fp32', 'bf16', 'fp16'"):
        mm.teacher_forced_logprobs(model, rollouts, dtype="float16")
    with pytest.raises(ValueError, match="no rollouts"):
        mm.teacher_forced_logprobs(model, [])
    empty_prompt = Rollout(0, "", [], [1, 2], "", [-1.0, -1.0], "length")
    with pytest.raises(ValueError, match="rollout 0 has an empty prompt"):
        mm.teacher_forced_logprobs(model, [empty_prompt])
    no_tokens = Rollout(0, "", [3, 4], [], "", [], "stop")
    assert mm.teacher_forced_logprobs(model, [no_tokens, rollouts[0]])[0].shape == (0,)


# ---------------------------------------------------------------------------------------------------------
# Figures (built from plain data)


def test_figures_build_from_plain_data():
    from nbkit.plots import mismatch as pm

    mu = ragged_logps(n_seq=30, seed=6, lo=5, hi=100)
    pairs = {"bf16": ([x - 0.01 for x in mu], mu), "fp16": ([x - 0.001 for x in mu], mu)}
    assert len(pm.token_scatter(pairs).data) == 3  # two dtypes and the diagonal
    fig = pm.seq_log_ratio_vs_length(pairs)
    assert [t.name for t in fig.data if t.mode == "lines"] == [
        "bf16: slope -10 per 1k tokens",
        "fp16: slope -1 per 1k tokens",
    ]
    metrics = {dt: mm.mismatch_metrics(*p) for dt, p in pairs.items()}
    bar = pm.ratio_bar(metrics, keys=["token_abs_logp_diff/mean", "kl_k1"])
    np.testing.assert_allclose(bar.data[0].y, [10.0, 10.0], rtol=1e-6)
    assert pm.metrics_table(metrics).data[0].header.values[-1] == "bf16/fp16"
    grid = {e: {t: metrics["bf16"]["kl_k1"] for t in ("fp32", "bf16", "fp16")} for e in ("bf16", "fp16")}
    assert np.asarray(pm.grid_heatmap(grid, "kl_k1").data[0].z).shape == (2, 3)


def test_a_ratio_of_two_estimates_is_read_only_where_the_denominator_lies_above_zero():
    ratio = mm.read_ratio(10.0, (8.0, 12.0), 2.0, (1.0, 3.0), ratio_ci=(3.0, 9.0))
    assert (ratio.kind, ratio.value, ratio.low, ratio.high) == ("ratio", 5.0, 3.0, 9.0)
    assert ratio.sentence == "5× (95% CI 3–9)"
    bound = mm.read_ratio(10.0, (8.0, 12.0), 0.5, (-1.0, 2.0), ratio_ci=(-50.0, 80.0))  # the bootstrap CI is ignored
    assert (bound.kind, bound.value, bound.low, bound.high) == ("lower bound", 4.0, 4.0, math.inf)
    assert "FP16 0.5 (95% CI -1 to 2)" in bound.sentence
    for num_ci, den_ci, why in [
        ((-1.0, 2.0), (-1.0, 2.0), "neither estimate lies above 0"),
        ((8.0, 12.0), (-2.0, -0.1), "FP16's CI does not lie above 0"),
    ]:
        none = mm.read_ratio(0.3, num_ci, -0.5, den_ci, names=("BF16", "FP16"))
        assert none.kind == "undefined" and math.isnan(none.value) and why in none.sentence
    bare = mm.read_ratio(10.0, (math.nan, math.nan), 2.0, (math.nan, math.nan))  # n_boot=0: no CIs to read
    assert (bare.kind, bare.value) == ("ratio", 5.0) and bare.sentence == "5× (no CI computed)"
    assert mm.read_ratio(1.0, (math.nan,) * 2, -0.1, (math.nan,) * 2).kind == "undefined"


def test_the_bootstrap_ci_equals_the_hand_written_loop_it_replaced():
    """``nbkit.stats.stats.bootstrap`` draws the loop's resamples: the same interval, digit for digit."""
    rng = np.random.default_rng(4)
    pi = [rng.normal(-1, 0.3, size=int(k)) for k in rng.integers(1, 9, size=13)]
    mu = [p + rng.normal(0, 0.05, size=p.size) for p in pi]
    fn = mm.HEADLINE["kl_k3"]
    draw, kept = np.random.default_rng(0), []
    for _ in range(300):  # the replaced loop
        idx = draw.integers(0, len(pi), len(pi))
        kept.append(float(fn([pi[i] for i in idx], [mu[i] for i in idx])))
    low, high = np.nanpercentile(kept, [2.5, 97.5])
    got = mm.bootstrap_ci("kl_k3", pi, mu, n_boot=300, seed=0)
    assert (got["low"], got["high"]) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
