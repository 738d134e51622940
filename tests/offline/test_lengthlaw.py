"""The length-law helper: recovers a planted per-token bias as a slope per 1,000 tokens, and finds none where none
was planted; the slope agrees with −1,000 × the per-token k1 KL when the bias is the only effect."""

import numpy as np
import pytest

from nbkit.offline import lengthlaw, lengthlaw_measure


def _sequences(bias_per_token, n=400, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 2049, size=n)
    return [rng.normal(-bias_per_token, noise, size=L) for L in lengths]


def test_a_planted_per_token_bias_comes_back_as_the_slope_and_as_k1():
    law = lengthlaw.fit(_sequences(1e-3), n_boot=500)  # −1.0 nats per 1,000 tokens, the paper's BF16 figure
    assert law.slope_ci[0] <= -1.0 <= law.slope_ci[1]
    assert law.slope_ci[1] < 0  # the CI excludes zero: the slope is found, not just allowed
    assert law.k1_ci[0] <= 1e-3 <= law.k1_ci[1] and law.k1_ci[0] > 0
    assert law.slope_matches_k1
    assert law.seq_kl == pytest.approx(1e-3 * law.mean_length, rel=0.1)


def test_no_planted_bias_gives_a_slope_ci_that_covers_zero_about_95_percent_of_the_time():
    laws = [lengthlaw.fit(_sequences(0.0, n=200, seed=100 + s), n_boot=300) for s in range(40)]
    slope_cover = sum(law.slope_ci[0] <= 0 <= law.slope_ci[1] for law in laws)
    k1_cover = sum(law.k1_ci[0] <= 0 <= law.k1_ci[1] for law in laws)
    assert slope_cover >= 34 and k1_cover >= 34  # a 95% CI: 38 of 40 expected, 34 leaves room for chance
    assert sum(law.slope_ci[1] < 0 for law in laws) <= 3  # and it does not claim a BF16-like fall


def test_a_slope_that_is_not_minus_k1_is_reported_as_such():
    # the bias grows with length (Σ = −c·L² instead of −k·L): slope and −1000·k1 disagree beyond their CIs
    rng = np.random.default_rng(2)
    seqs = [rng.normal(-2e-6 * L, 0.01, size=L) for L in rng.integers(50, 2049, size=300)]
    law = lengthlaw.fit(seqs, n_boot=500)
    assert not law.slope_matches_k1


def test_bf16_over_fp16_sequence_kl_ratio():
    laws = {
        "bf16": lengthlaw.fit(_sequences(1e-3, noise=0.005), n_boot=50),
        "fp16": lengthlaw.fit(_sequences(1e-4, noise=0.005), n_boot=50),
    }
    reading = lengthlaw.seq_kl_ratio(laws)
    assert reading.kind == "ratio" and reading.value == pytest.approx(10, rel=0.2)
    assert reading.sentence.startswith(f"{reading.value:.3g}×")
    assert lengthlaw.seq_kl_ratio({"bf16": laws["bf16"]}) is None


def test_a_sequence_kl_ratio_over_an_fp16_kl_that_covers_zero_is_a_lower_bound_only():
    laws = {
        "bf16": lengthlaw.fit(_sequences(1e-3, noise=0.005), n_boot=200),
        "fp16": lengthlaw.fit(_sequences(0.0, noise=0.005), n_boot=200),
    }
    assert laws["fp16"].seq_kl_ci[0] < 0 < laws["fp16"].seq_kl_ci[1]
    reading = lengthlaw.seq_kl_ratio(laws)
    assert reading.kind == "lower bound"
    assert reading.value == pytest.approx(laws["bf16"].seq_kl_ci[0] / laws["fp16"].seq_kl_ci[1])
    assert "cannot be told from 0" in reading.sentence
    assert [r["run"] for r in lengthlaw.table(laws)] == ["bf16", "fp16"]


@pytest.mark.parametrize(
    "bad, match",
    [
        ([[0.1], [0.2]], "at least 3 sequences"),
        ([[0.1, 0.2]] * 4, "varied lengths"),
        ([[0.1], [np.nan, 0.1], [0.1, 0.2, 0.3]], "NaN"),
    ],
)
def test_bad_inputs_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        lengthlaw.fit(bad)


def test_measure_gives_cast_and_autocast_pi_per_half_dtype_and_one_row_per_sequence():
    runs = lengthlaw_measure.measure(
        "tiny-arith",
        ("bf16", "fp32"),
        n_prompts=4,
        samples_per_prompt=2,
        max_tokens=40,
        prompt_source="arith",
        engine="hf",
    )
    assert sorted(runs) == ["bf16-autocast", "bf16-cast", "fp32-cast"]  # FP32 autocast is the cast itself
    for label, rows in runs.items():
        assert len(rows) == 8 and all(r["length"] > 0 and np.isfinite(r["sum_log_ratio"]) for r in rows), label
    # the same bf16 rollouts under both recipes: same lengths, different π (autocast keeps FP32 weights)
    assert [r["length"] for r in runs["bf16-cast"]] == [r["length"] for r in runs["bf16-autocast"]]
    assert [r["sum_log_ratio"] for r in runs["bf16-cast"]] != [r["sum_log_ratio"] for r in runs["bf16-autocast"]]
    assert sorted(lengthlaw.laws(runs, n_boot=50)) == ["bf16 · autocast π", "bf16 · cast π", "fp32 · cast π"]
