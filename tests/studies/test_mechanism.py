"""The mechanism pairs study (``nbkit.studies.mechanism``): its grid is the rule's, its pairs are the calibration's
closest matches, each pair's verdict reads the family-wise interval of the paired difference (and can go either way
or not be attributed), and nothing is read before every run of the grid is stored."""

import math
import re

import pytest

from nbkit.records import schema
from nbkit.studies import mechanism as M
from nbkit.studies.catalog import STUDIES


def test_the_grid_is_every_pair_member_and_fp32_on_five_seeds_seed_by_seed():
    study = STUDIES[M.STUDY]
    grid = study.grid()
    formats = ["fp32", *(f for a, b, _ in M.PAIRS for f in (a, b))]
    assert len(grid) == len(formats) * 5 == 35
    assert list(grid)[: len(formats)] == [f"{f}-s0" for f in formats]  # seed 0's arms first
    for label, cfg in grid.items():
        assert cfg.train_dtype == "fp32" and cfg.max_steps == 50 and cfg.judge_every == 10
        assert label == f"{cfg.rollout_format}-s{cfg.seed}"
        assert study.coords(cfg.to_dict())["format"] == cfg.rollout_format


def test_an_unknown_format_in_a_pair_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown rollout format 'e8m3-sideways'.*choose one of"):
        STUDIES[M.STUDY].grid(pairs=[["e8m3-sideways", "fp32"]])


def test_each_pair_is_the_calibrations_match_as_the_rule_states_it():
    cal = M.calibration()
    assert [(r["a"], r["b"]) for r in cal] == [(a, b) for a, b, _ in M.PAIRS]
    stated = [float(x) for x in re.findall(r"\((?:ladder ratio )?(\d\.\d\d)\)", M.RULE_TEXT)]
    assert [round(r["ratio a/b"], 2) for r in cal] == stated
    assert all(1 / M.MATCH <= r["ratio a/b"] <= M.MATCH for r in cal)


def fake_runs(gap_a: list[float], gap_b: list[float], dose_a=0.02, dose_b=0.02, pair=0, seeds=5):
    """Runs of every arm on ``seeds`` seeds: FP32 at 0.5, pair ``pair``'s arms at 0.5 + their gaps, others at 0.5."""
    a, b, _ = M.PAIRS[pair]
    runs, meta = {}, {}
    for s in range(seeds):
        for f in ["fp32", *(x for p in M.PAIRS for x in p[:2])]:
            acc = 0.5 + (gap_a[s] if f == a else gap_b[s] if f == b else 0.0)
            dose = dose_a if f == a else dose_b if f == b else 0.01
            runs[f"{f}-s{s}"] = [
                {schema.STEP: 1, M.PRIMARY: dose, M.BIAS: 0.0},
                {schema.STEP: 40, schema.JUDGE_ACCURACY: acc},
                {schema.STEP: 50, schema.JUDGE_ACCURACY: acc},
            ]
            meta[f"{f}-s{s}"] = {"format": f, "train": "fp32", "correction": "none", "seed": s}
    return runs, meta


@pytest.mark.parametrize(
    ("gap_a", "gap_b", "verdict"),
    [
        ([-0.10, -0.12, -0.09, -0.11, -0.10], [0.0, 0.01, -0.01, 0.0, 0.0], "a"),
        ([0.0, 0.01, -0.01, 0.0, 0.0], [-0.10, -0.12, -0.09, -0.11, -0.10], "b"),
        ([-0.05, 0.04, -0.02, 0.03, 0.0], [0.01, -0.03, 0.02, -0.04, 0.0], "none"),
    ],
)
def test_a_pairs_verdict_reads_its_family_wise_interval_either_way(gap_a, gap_b, verdict):
    study = STUDIES[M.STUDY]
    reading = study.pair_readings(*fake_runs(gap_a, gap_b))[0]
    a, b = M.PAIRS[0][:2]
    lo, hi = reading[f"{M.LEVEL:.4g} CI"]
    d = [x - y for x, y in zip(gap_a, gap_b, strict=True)]
    assert math.isclose(reading["d = gap(a) − gap(b)"], sum(d) / 5)
    assert hi - lo > 0 and reading["matched"]
    want = {"a": f"{a} harms more", "b": f"{b} harms more", "none": "no difference shown"}[verdict]
    assert reading["verdict"] == want


def test_the_family_wise_interval_is_wider_than_a_single_95_percent_one():
    from nbkit.stats.stats import mean_ci

    gap_a, gap_b = [-0.06, -0.01, -0.04, -0.02, -0.05], [0.0] * 5
    reading = STUDIES[M.STUDY].pair_readings(*fake_runs(gap_a, gap_b))[0]
    lo, hi = reading[f"{M.LEVEL:.4g} CI"]
    _, lo95, hi95 = mean_ci(gap_a)
    assert lo < lo95 and hi > hi95


def test_a_pair_whose_run_doses_differ_more_than_twofold_is_not_attributed():
    runs, meta = fake_runs([-0.1] * 5, [0.0] * 5, dose_a=0.03, dose_b=0.01)
    reading = STUDIES[M.STUDY].pair_readings(runs, meta)[0]
    assert not reading["matched"] and reading["verdict"].startswith("not matched")


def test_nothing_is_read_before_every_run_of_the_grid_is_stored():
    study = STUDIES[M.STUDY]
    runs, meta = fake_runs([-0.1] * 5, [0.0] * 5)
    cut = {k: v for k, v in runs.items() if not k.endswith("-s4")}
    rows = study.table(cut, meta)
    assert all(r["gap to fp32"] is None and r["gap CI"] is None for r in rows)
    assert study.findings(cut, meta, rows) == [
        "Not read yet: 28 of 35 runs stored (7 to train); the rule reads the study once, after the last run, so no gap "
        "or verdict is shown."
    ]
    assert len(study.page_tables(cut, meta, rows)) == 1  # the calibration only: no pair reading
    full = study.table(runs, meta)
    assert all((r["gap to fp32"] is not None) == (r["rollout"] != "fp32") for r in full)
    assert len(study.page_tables(runs, meta, full)) == 2
    text = study.findings(runs, meta, full)[0]
    assert f"{M.PAIRS[0][0]} harms more" in text or "biased (nearest) error harms more" in text
    assert "not logged" in text


def test_as_amended_no_difference_is_not_read_as_harm_following_size_and_the_first_reading_stays_beside_it():
    study = STUDIES[M.STUDY]
    collapsed = [-0.79, -0.08, -0.08, -0.07, -0.14]  # one seed collapsed: a wide interval
    runs, meta = fake_runs(collapsed, [-0.02, -0.07, 0.0, -0.04, -0.05], pair=1)
    amended, _, first = study.findings(runs, meta, study.table(runs, meta))
    assert "follows the size of the mismatch, not that property" in first
    assert "follows the size of the mismatch, not that property" not in amended
    assert first.startswith("As first written (before the amendment on the card)")
    assert "not ruled out" in amended and "neither shows that harm follows the size alone nor that it does not" in (
        amended
    )
    a, b, _ = M.PAIRS[1]
    assert f"{a}: -0.79, -0.08, -0.08, -0.07, -0.14" in amended  # the seeds that make the interval wide
    assert "held for 0 of 3 pairs; bias: predicted 'no difference shown'" in amended  # a null needs a margin
    assert [x["key"] for x in M.AMENDMENTS] == ["paragraph"] and study.amendments == (*M.AMENDMENTS, M.NULL_AMENDMENT)


def test_a_predicted_null_holds_only_within_a_committed_equivalence_margin(monkeypatch):
    study = STUDIES[M.STUDY]
    runs, meta = fake_runs([-0.01, 0.0, 0.01, -0.005, 0.005], [0.0, 0.005, -0.005, 0.01, -0.01], pair=0)
    readings = study.pair_readings(runs, meta)
    assert readings[0]["verdict"] == "no difference shown"
    assert study.prediction_held(readings, equivalence=False)[0][2] == "held"  # as first amended
    assert M.NULL_MARGIN is None  # the rule commits none
    assert study.prediction_held(readings)[0][2] == "undecided (no equivalence margin was committed)"
    monkeypatch.setattr(M, "NULL_MARGIN", 0.1)  # had one been committed, an interval inside it would hold
    assert study.prediction_held(readings)[0][2] == "held"
    monkeypatch.setattr(M, "NULL_MARGIN", 0.001)
    assert study.prediction_held(readings)[0][2] == "undecided (outside the margin)"


STORED = (M.results.RESULTS / M.STUDY / M.results.CARD).is_file()


@pytest.mark.skipif(not STORED, reason="mechanism_tiny_arith is not stored")
def test_the_stored_bias_pair_reads_undecided_not_held_and_the_first_reading_stays_beside():
    study = STUDIES[M.STUDY]
    runs, meta = study.load(), study.stored_meta()
    bias = study.pair_readings(runs, meta)[0]
    assert bias["verdict"] == "no difference shown" and bias["0.9833 CI"] == pytest.approx([-0.097, 0.041], abs=5e-4)
    amended, before, _ = study.findings(runs, meta, study.table(runs, meta))
    assert (
        "The prediction committed with the rule held for 0 of 3 pairs; bias: predicted 'no difference shown' (a "
        "null, which only an equivalence test can confirm): undecided (no equivalence margin was committed)"
    ) in amended
    assert before.startswith("As first amended (before a predicted null was read by an equivalence margin")
    assert "The prediction committed with the rule held for 1 of 3 pairs (bias);" in before
    assert study.moves(runs, meta) == {
        "paragraph": [],
        "null": [
            "prediction reading, bias: held → undecided (no equivalence margin was committed)",
            "the prediction held for 1 of 3 pairs → 0 of 3",
        ],
    }


def test_the_prediction_is_read_as_committed_in_the_rule():
    assert (
        "prediction: fixed (weights) harms more than fresh (activations), bias pair no difference shown, e8m3 more "
        "than fp8-e5m2" in M.RULE_TEXT
    )
    assert M.PREDICTED == {
        "bias": "no difference shown",
        "fixed against fresh": "a harms more",
        "where the rounding sits": "a harms more",
    }
    assert [p[2].split(":")[0].lower() for p in M.PAIRS] == list(M.PREDICTED)
