"""The predictors' scoring rule (``nbkit.stats.predictive``): a monotone fit scored by leave-one-format-out and
leave-one-task-out error, and a winner only when every paired comparison says so (issue 50, item 2)."""

from __future__ import annotations

import numpy as np
import pytest

from nbkit.mismatch import candidates as C
from nbkit.stats import predictive as P

FORMATS = [f"f{i}" for i in range(10)]
LENGTHS = {"short": 10, "long": 60}


def synthetic_runs(gap_of, seed: int = 0, seeds: int = 5, noise: float = 0.005) -> P.Points:
    """Two tasks (responses of 10 and 60 tokens) × 10 formats whose per-token log-ratios have a bias and a spread
    drawn independently; every candidate is computed from them (``nbkit.mismatch.candidates.values``); each seed's
    gap = ``gap_of(format's bias, spread)`` + noise."""
    rng = np.random.default_rng(seed)
    bias, spread = rng.uniform(0.0, 0.05, len(FORMATS)), rng.uniform(0.01, 0.3, len(FORMATS))
    tasks, formats, gaps, rows = [], [], [], []
    for task, length in LENGTHS.items():
        for f, b, s in zip(FORMATS, bias, spread, strict=True):
            mu = [np.log(rng.uniform(0.05, 1.0, length)) for _ in range(64)]
            pi = [np.minimum(m - b + rng.normal(0, s, length), 0.0) for m in mu]
            flips = [rng.random(length) < 0.01 for _ in mu]
            adv = C.grpo_advantages(rng.integers(0, 2, 64), 8)
            rows.append(C.values(pi, mu, flips, adv, 0.2))
            tasks.append(task)
            formats.append(f)
            gaps.append({k: gap_of(b, s) + rng.normal(0, noise) for k in range(seeds)})
    values = {c: np.array([r[c] for r in rows]) for c in C.CANDIDATES}
    return P.Points(tasks, formats, gaps, values)


def test_when_the_gap_depends_on_the_bias_alone_the_bias_candidate_wins_leave_one_out():
    pts = synthetic_runs(lambda b, s: -2.0 * b)
    sc = P.score(pts, n_boot=120, seed=0)
    assert sc.verdict["leaders"] == {"lofo": "bias", "loto": "bias"}
    assert sc.verdict["winner"] == "bias", sc.verdict["reason"]
    assert all(c["clear"] for c in sc.verdict["comparisons"])
    assert len(sc.verdict["comparisons"]) == 2 * (len(C.CANDIDATES) - 1)


def test_when_the_gap_follows_no_candidate_there_is_no_clear_winner():
    rng = np.random.default_rng(7)
    pure = rng.uniform(-0.1, 0.0, len(FORMATS))
    pts = synthetic_runs(lambda b, s: 0.0, noise=0.0)
    pts.gaps = [{k: pure[FORMATS.index(f)] + rng.normal(0, 0.02) for k in range(5)} for f in pts.formats]
    sc = P.score(pts, n_boot=120, seed=0)
    assert sc.verdict["winner"] is None
    assert "includes 0" in sc.verdict["reason"] or "differs between schemes" in sc.verdict["reason"]


def test_two_candidates_that_carry_the_same_information_cannot_beat_each_other():
    pts = synthetic_runs(lambda b, s: -2.0 * b)
    pts.values = {"bias": pts.values["bias"], "twice": 2 * pts.values["bias"]}
    sc = P.score(pts, n_boot=100, seed=0)
    assert sc.verdict["winner"] is None and "includes 0" in sc.verdict["reason"]


def test_different_leaders_under_the_two_schemes_is_no_clear_winner():
    scores = P.Scores(
        errors={"lofo": {"a": 0.01, "b": 0.02}, "loto": {"a": 0.03, "b": 0.02}},
        replicates={s: {"a": np.full(50, 0.01), "b": np.full(50, 0.02)} for s in P.SCHEMES},
        n_boot=50,
        seed=0,
    )
    v = P.verdict(scores)
    assert v["winner"] is None and v["leaders"] == {"lofo": "a", "loto": "b"}
    assert "differs between schemes" in v["reason"]


def test_the_fit_is_non_increasing_and_predicts_flat_beyond_its_points():
    x, y = [0.1, 0.2, 0.3, 0.4], [0.0, 0.01, -0.05, -0.04]
    curve = P.fit(x, y)
    assert np.all(np.diff(curve[1]) <= 1e-12)
    assert P.predict(curve, [0.0, 1.0]).tolist() == [curve[1][0], curve[1][-1]]
    assert P.predict(curve, [0.15])[0] == pytest.approx((curve[1][0] + curve[1][1]) / 2)


def test_leave_one_format_out_holds_a_format_out_on_every_task_at_once():
    held = P.folds(["a", "a", "b", "b"], ["x", "y", "x", "z"], "lofo")
    assert [h.tolist() for h in held] == [[0, 2], [1], [3]]
    assert [h.tolist() for h in P.folds(["a", "a", "b", "b"], ["x", "y", "x", "z"], "loto")] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="unknown scheme 'loo'"):
        P.folds(["a"], ["x"], "loo")


def test_the_bootstrap_draws_seeds_per_task_shared_by_its_points():
    pts = P.Points(
        tasks=["a", "a", "a"],
        formats=["x", "y", "z"],
        gaps=[{0: 0.0, 1: 1.0}, {0: 0.0, 1: 1.0}, {0: 0.0, 1: 1.0}],
        values={"c": np.array([1.0, 2.0, 3.0]), "d": np.array([3.0, 2.0, 1.0])},
    )
    reps = P.replicate_gaps(pts, 200, 0)
    assert np.all(reps[:, 0] == reps[:, 1]) and np.all(reps[:, 1] == reps[:, 2])  # same seeds for every point
    assert set(np.unique(reps)) <= {0.0, 0.5, 1.0}


def test_bad_points_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match=">= 3 points"):
        P.Points(["a"], ["x"], [{0: 0.0}], {})
    with pytest.raises(ValueError, match="without any paired gap: \\['a/y'\\]"):
        P.Points(["a"] * 3, ["x", "y", "z"], [{0: 0.0}, {}, {0: 0.0}], {})
    with pytest.raises(ValueError, match="candidate 'c' needs one finite value per point"):
        P.Points(["a"] * 3, ["x", "y", "z"], [{0: 0.0}] * 3, {"c": np.array([1.0, np.nan, 2.0])})


def test_the_batched_errors_equal_the_fit_and_predict_of_each_fold():
    rng = np.random.default_rng(3)
    x = np.round(rng.uniform(0, 1, 12), 1)  # ties pooled
    ys = rng.normal(0, 0.05, (4, 12))
    held = P.folds(["a"] * 6 + ["b"] * 6, [f"f{i % 5}" for i in range(12)], "lofo")
    for y, batched in zip(ys, P.cv_errors(x, ys, held), strict=True):
        errs = []
        for idx in held:
            keep = np.setdiff1d(np.arange(12), idx)
            errs += np.abs(P.predict(P.fit(x[keep], y[keep]), x[idx]) - y[idx]).tolist()
        assert batched == pytest.approx(np.mean(errs), abs=1e-12)


# -- against a constant (the reading the predictors study added after its results, as an amendment) ---------------
def test_the_constant_predicts_each_held_out_point_by_the_mean_gap_of_the_points_its_fold_was_fit_on():
    # tasks a, b × formats f1, f2, one seed each: gaps a/f1 −0.1, a/f2 −0.3, b/f1 0.0, b/f2 −0.2
    pts = P.Points(
        tasks=["a", "a", "b", "b"],
        formats=["f1", "f2", "f1", "f2"],
        gaps=[{0: -0.1}, {0: -0.3}, {0: 0.0}, {0: -0.2}],
        values={"x": np.array([1.0, 2.0, 1.0, 2.0]), "z": np.array([2.0, 1.0, 2.0, 1.0])},
    )
    sc = P.score(pts, n_boot=20, seed=3)
    # LOFO: f1 held out → mean(−0.3, −0.2) = −0.25, errors 0.15 and 0.25; f2 held out → mean(−0.1, 0.0) = −0.05,
    # errors 0.25 and 0.15: mean 0.2. LOTO: a from b's mean −0.1 (errors 0, 0.2), b from a's −0.2 (0.2, 0): mean 0.1
    assert sc.constant == pytest.approx({"lofo": 0.2, "loto": 0.1})
    # scored on the very replicates the candidates were (one seed per point: every replicate is the observed gaps)
    assert sc.constant_replicates["lofo"] == pytest.approx(np.full(20, 0.2))
    assert sc.constant_ci("loto") == pytest.approx((0.1, 0.1))


def test_the_constant_is_scored_on_the_candidates_own_bootstrap_replicates():
    pts = synthetic_runs(lambda b, s: -2.0 * b)
    sc = P.score(pts, n_boot=30, seed=5)
    reps = P.replicate_gaps(pts, 30, 5)
    for s in P.SCHEMES:
        held = P.folds(pts.tasks, pts.formats, s)
        assert sc.constant_replicates[s] == pytest.approx(P.constant_errors(reps, held))
        assert sc.replicates[s]["bias"] == pytest.approx(P.cv_errors(pts.values["bias"], reps, held))


def test_a_candidate_the_gap_depends_on_beats_the_constant_under_both_schemes():
    sc = P.score(synthetic_runs(lambda b, s: -2.0 * b), n_boot=200, seed=0)
    read = P.against_constant(sc)
    assert "bias" in read["beats"]["lofo"] and "bias" in read["beats"]["loto"]
    row = next(r for r in read["rows"] if r["candidate"] == "bias" and r["scheme"] == "lofo")
    assert row["ci"][1] < 0 and row["diff"] == pytest.approx(sc.errors["lofo"]["bias"] - sc.constant["lofo"])
    assert read["level"] == pytest.approx(1 - P.ALPHA / len(C.CANDIDATES))
    assert len(read["rows"]) == len(P.SCHEMES) * len(C.CANDIDATES)


def test_when_the_gap_is_noise_no_candidate_beats_the_constant():
    rng = np.random.default_rng(7)
    pure = rng.uniform(-0.1, 0.0, len(FORMATS))
    pts = synthetic_runs(lambda b, s: 0.0, noise=0.0)
    pts.gaps = [{k: pure[FORMATS.index(f)] + rng.normal(0, 0.02) for k in range(5)} for f in pts.formats]
    read = P.against_constant(P.score(pts, n_boot=200, seed=0))
    assert read["beats"] == {"lofo": [], "loto": []}
    assert not any(r["beats"] for r in read["rows"])


def test_the_winners_prediction_interval_is_the_95_quantile_of_its_leave_one_format_out_errors():
    # values 0..3, gaps already non-increasing: held-out errors 0.1 (left edge, flat), 0 and 0.05 (interpolated),
    # 0.2 (right edge, flat); their 95 % quantile (linear) is 0.1 + 0.85 × 0.1.
    pts = P.Points(["t"] * 4, ["a", "b", "c", "d"], [{0: g} for g in (0.0, -0.1, -0.2, -0.4)], {"c": np.arange(4.0)})
    rec = P.prediction_curve(pts, "c")
    assert rec["curve"] == {"x": [0.0, 1.0, 2.0, 3.0], "gap": [0.0, -0.1, -0.2, -0.4]}
    assert rec["interval"]["half_width"] == pytest.approx(0.185)
    assert rec["range"] == [0.0, 3.0]
