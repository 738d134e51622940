"""The shift-share split of the growth in sequence-level mismatch (``nbkit.mismatch.shiftshare``): exact parts, each
cause
found where it was planted, bootstrap CIs over steps and over runs, rows read through the ``bins/`` keys."""

from __future__ import annotations

import numpy as np
import pytest

from nbkit.mismatch import shiftshare, tokenbins


def simulated_window(
    rng, steps=10, sequences=32, length=30.0, mix=(0.6, 0.3, 0.1), per_bin=(1e-3, 1e-2, 0.1), noise=0.05
):
    """Per-step bins drawn from fixed truths: tokens multinomial over the mix, per-bin means with relative noise."""
    mix, per_bin = np.asarray(mix), np.asarray(per_bin)
    tokens = np.stack([rng.multinomial(round(length * sequences), mix) for _ in range(steps)]).astype(float)
    mism = per_bin * (1 + noise * rng.standard_normal((steps, mix.size)))
    return shiftshare.Window(tokens, mism, np.full(steps, sequences))


def test_the_parts_sum_to_the_total_exactly_on_arbitrary_windows():
    rng = np.random.default_rng(0)
    for _ in range(50):
        bins = int(rng.integers(2, 7))
        a = shiftshare.Window(rng.integers(0, 50, (4, bins)), rng.random((4, bins)), rng.integers(1, 9, 4))
        b = shiftshare.Window(rng.integers(0, 50, (6, bins)), rng.random((6, bins)), rng.integers(1, 9, 6))
        split = shiftshare.decompose(a, b)
        assert sum(split.parts.values()) == pytest.approx(split.late - split.early, abs=1e-12)


def test_the_sequence_mismatch_is_the_summed_token_mismatch_per_completion():
    w = shiftshare.Window([[10, 0, 5], [2, 3, 0]], [[0.1, 9.9, 0.4], [0.2, 0.3, 7.0]], [3, 2])
    split = shiftshare.decompose(w, w)
    assert split.early == pytest.approx((10 * 0.1 + 5 * 0.4 + 2 * 0.2 + 3 * 0.3) / 5)  # empty bins' values ignored
    assert split.total == 0 and all(v == 0 for v in split.parts.values())


def test_length_growth_alone_is_put_in_the_length_part():
    rng = np.random.default_rng(1)
    early = simulated_window(rng, length=30)
    late = simulated_window(rng, length=150)  # 5x longer answers, same mix, same error per token
    split = shiftshare.bootstrap(early, late, n_boot=500)
    assert split.total > 0
    assert split.shares["length"] >= 0.95, split.shares
    assert split.ci["length"][0] > 0 and split.ci["mix"][0] < 0 < split.ci["mix"][1]


def test_a_peakier_policy_alone_is_put_in_the_mix_part():
    rng = np.random.default_rng(2)
    early = simulated_window(rng, mix=(0.2, 0.3, 0.5))
    late = simulated_window(rng, mix=(0.7, 0.2, 0.1))  # tokens move to the low-error bin: the mismatch falls
    split = shiftshare.decompose(early, late)
    assert split.total < 0 and split.shares["mix"] >= 0.95, split.shares


def test_a_larger_error_per_token_alone_is_put_in_the_per_bin_part():
    rng = np.random.default_rng(3)
    early = simulated_window(rng, per_bin=(1e-3, 1e-2, 0.1))
    late = simulated_window(rng, per_bin=(3e-3, 3e-2, 0.3))
    split = shiftshare.decompose(early, late)
    assert split.shares["per_bin"] >= 0.95, split.shares


def test_a_bin_empty_in_one_window_counts_as_mix_not_as_per_bin_change():
    early = shiftshare.Window([[10, 0]], [[0.1, 0.0]], [1])
    late = shiftshare.Window([[10, 10]], [[0.1, 0.5]], [1])  # a new bin appears with its own error
    split = shiftshare.decompose(early, late)
    assert split.parts["per_bin"] == pytest.approx(0.0)
    assert sum(split.parts.values()) == pytest.approx(split.late - split.early)


def test_a_bootstrap_over_runs_draws_whole_runs():
    rng = np.random.default_rng(4)
    early = [simulated_window(rng, length=30) for _ in range(5)]
    late = [simulated_window(rng, length=60) for _ in range(5)]
    split = shiftshare.bootstrap(early, late, n_boot=300)
    assert split.unit == "runs" and split.ci["total"][0] <= split.total <= split.ci["total"][1]
    assert split.shares["length"] >= 0.95
    with pytest.raises(ValueError, match=">= 2 runs"):
        shiftshare.bootstrap(early[:1], late[:1])


def test_windows_are_read_from_metrics_rows_by_their_bin_keys():
    k = tokenbins.n_bins("prob")
    rows = [
        {
            "step": s,
            tokenbins.SEQUENCES: 4,
            tokenbins.RESPONSE_LENGTH: 2.5,
            **{tokenbins.tokens_key("prob", i): (2 if i == 0 else 8 if i == k - 1 else 0) for i in range(k)},
            tokenbins.mismatch_key("prob", 0): 0.5,
            tokenbins.mismatch_key("prob", k - 1): 0.01,
        }
        for s in (1, 2, 3)
    ]
    w = shiftshare.window(rows, "prob", steps=[2, 3])
    assert w.tokens.shape == (2, k) and w.tokens[0, 0] == 2 and w.mismatch[1, k - 1] == 0.01
    with pytest.raises(ValueError, match="no bins"):
        shiftshare.window([{"step": 1}], "prob", steps=[1])
    with pytest.raises(ValueError, match="unknown binning"):
        shiftshare.window(rows, "logit", steps=[1])
