"""The harm-threshold study: its points follow from the stored ladder by the committed rule, its grid trains the
threshold doses seed by seed before the formats it only places, and its analysis reads the rule's threshold."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nbkit.records import schema
from nbkit.stats import threshold
from nbkit.studies import harm_threshold as H
from nbkit.studies import harm_threshold_rule as HR


def test_the_channel_points_are_the_ones_the_rule_picks_from_the_stored_ladder():
    ladder = HR.ladder_record()
    assert HR.pick_points(ladder["doses"]) == [p for p in H.POINTS if p != "e8m3"]
    assert ladder["unit"] == schema.METRIC_TOKEN_ABS_LOGP_DIFF and ladder["commit"]
    doses = [ladder["doses"][p] for p in H.POINTS]
    assert doses == sorted(doses), "the points ascend in ladder dose"
    assert math.log(doses[-1] / doses[1]) / (len(H.POINTS) - 2) < math.log(2), "no gap of 2x between dial points"


def test_pick_points_refuses_a_ladder_without_its_ends():
    with pytest.raises(ValueError, match="e8m2 and e8m1"):
        HR.pick_points({"e8m2": 0.05})


def test_the_grid_trains_every_dose_and_fp32_seed_by_seed_then_the_placed_formats():
    grid = H.HarmThreshold().grid()
    labels = list(grid)
    assert len(labels) == len(H.SEEDS) * (1 + len(H.POINTS)) + len(H.EXTRA_SEEDS) * len(H.EXTRAS)
    first = labels[: 1 + len(H.POINTS)]
    assert first == ["fp32-none-s0", *[f"{p}-none-s0" for p in H.POINTS]]
    threshold_part = labels[: len(H.SEEDS) * (1 + len(H.POINTS))]
    assert all(grid[k].correction is None and grid[k].train_dtype == "fp32" for k in threshold_part)
    assert {grid[k].rollout_format for k in labels[len(threshold_part) :]} == {f for f, _ in H.EXTRAS}
    assert grid["nvfp4-mu_old-s0"].correction == "mu_old"
    assert {grid[k].max_steps for k in labels} == {50} and {grid[k].judge_every for k in labels} == {10}


def test_a_bad_point_or_correction_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="e8m9x"):
        H.HarmThreshold().grid(points=["e8m9x"])
    with pytest.raises(ValueError, match="choose from"):
        H.HarmThreshold().grid(extras=[["bf16", "no_such"]])


def _run(dose, judge40, judge50, ess=0.5):
    return [
        {schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5},
        {
            schema.STEP: 1,
            schema.TOKEN_ABS_LOGP_DIFF: dose,
            schema.mismatch_key("seq_log_ratio/abs_mean"): 30 * dose,
            schema.mismatch_key("seq_kl"): 20 * dose,
            schema.ESS_SEQ: ess,
            "completions/mean_length": 30.0,
        },
        {schema.STEP: 40, schema.JUDGE_ACCURACY: judge40},
        {schema.STEP: 50, schema.JUDGE_ACCURACY: judge50},
    ]


def test_the_analysis_reads_a_known_crossing_from_paired_gaps_and_step0_doses():
    study = H.HarmThreshold()
    doses = {"e8m3": 0.01, "e8m2": 0.05, "dial-e8m1-c1of16": 0.1, "e8m1": 0.4}
    true_gap = {"e8m3": 0.0, "e8m2": -0.02, "dial-e8m1-c1of16": -0.08, "e8m1": -0.5}
    rng = np.random.default_rng(0)
    runs, meta = {}, {}
    for s in range(5):
        ref = 0.9 + 0.01 * s
        runs[f"fp32-none-s{s}"] = _run(0.0, ref, ref, ess=1.0)
        meta[f"fp32-none-s{s}"] = {"format": "fp32", "train": "fp32", "correction": "none", "seed": s}
        for p, d in doses.items():
            acc = ref + true_gap[p] + rng.normal(0, 0.005)
            runs[f"{p}-none-s{s}"] = _run(d * (1 + 0.01 * s), acc, acc, ess=1 / (1 + 10 * d))
            meta[f"{p}-none-s{s}"] = {"format": p, "train": "fp32", "correction": "none", "seed": s}
    est = study.thresholds(runs, meta)
    main = est[H.PRIMARY]
    assert isinstance(main, threshold.Threshold) and main.outcome == "crossing"
    # the isotonic fit crosses -0.05 halfway (in gap) between 0.05·1.02 and 0.1·1.02, log-linearly
    assert 0.05 < main.dose < 0.1
    assert main.ci[0] < main.dose < main.ci[1]
    assert set(est) == set(H.UNITS) and all(isinstance(t, threshold.Threshold) for t in est.values())
    assert H.step0_dose(runs["e8m2-none-s0"], "ess_seq_deficit") == pytest.approx(0.5)
    rows = study.table(runs, meta)
    assert [r["rollout"] for r in rows] == ["e8m3", "e8m2", "dial-e8m1-c1of16", "e8m1"]
    assert rows[-1]["gap to fp32"] == pytest.approx(-0.5, abs=0.01) and rows[0]["seeds"] == 5
    with pytest.raises(ValueError, match="choose from"):
        H.step0_dose(runs["e8m2-none-s0"], "nope")
    rec = study.record(runs, meta)["tasks"][H.TASK]
    assert rec["doses"] == sorted(rec["doses"]) and rec["outcome"] == "crossing"
    assert rec["mean_gaps"][-1] == pytest.approx(-0.5, abs=0.01) and rec["mean_gaps"][0] == pytest.approx(0, abs=0.01)


def test_the_record_keeps_each_gap_beside_its_own_dose_when_the_measured_doses_reorder_the_points():
    study = H.HarmThreshold()
    runs, meta = {}, {}
    measured = {"e8m3": 0.3, "e8m2": 0.01}  # measured step-0 doses in the reverse of the rule's order
    for s in range(3):
        runs[f"fp32-none-s{s}"] = _run(0.0, 0.9, 0.9, ess=1.0)
        meta[f"fp32-none-s{s}"] = {"format": "fp32", "train": "fp32", "correction": "none", "seed": s}
        for p, d in measured.items():
            acc = 0.9 - (0.4 if p == "e8m3" else 0.0) + 0.001 * s
            runs[f"{p}-none-s{s}"] = _run(d, acc, acc)
            meta[f"{p}-none-s{s}"] = {"format": p, "train": "fp32", "correction": "none", "seed": s}
    rec = study.record(runs, meta)["tasks"][H.TASK]
    assert rec["doses"] == [pytest.approx(0.01), pytest.approx(0.3)]
    assert rec["mean_gaps"][0] == pytest.approx(0.001) and rec["mean_gaps"][1] == pytest.approx(-0.399)
    fit = {r["rollout"]: r["isotonic fit"] for r in study.table(runs, meta)}
    assert fit["e8m3"] < -0.3 < fit["e8m2"]


def test_store_writes_the_thresholds_the_doctor_reads_computed_from_the_stored_runs(tmp_path):
    study = H.HarmThreshold()
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    study.run(progress=False, **opts)
    study.store(wall_seconds=1.0, command="test", root=tmp_path / "results", **opts)
    stored = json.loads((tmp_path / "results" / "harm_threshold" / "thresholds.json").read_text())
    assert stored == json.loads(json.dumps(study.store_record(tmp_path / "results")))
    assert stored["unit"] == H.PRIMARY and set(stored["units"]) == set(H.UNITS)
    task = stored["tasks"][H.TASK]
    assert task["outcome"] == "none" and "not estimable" in task["why"]  # one seed: no threshold is guessed
    assert set(task["points"]) == {"e8m2", "dial-e8m1-c1of16"} and set(task["placed"]) == {"bf16"}
    assert not (H.THRESHOLDS.parent / "thresholds.json").exists() or H.THRESHOLDS.is_file()


def test_placed_format_labels_close_on_the_axis_take_rows_of_their_own_and_far_ones_share_the_first():
    from nbkit.plots.doctor import label_rows

    labels = [(-3.0, "FP16"), (-2.97, "BF16"), (-2.9, "FP8-E4M3"), (0.0, "NVFP4"), (-1.0, "MXFP4")]
    rows = label_rows(labels, decades=6)
    assert len(set(rows[:3])) == 3  # three labels within a tenth of a decade: three rows
    assert rows[3] == rows[4] == 0  # alone where they are: the first row
    assert label_rows(labels[:2], decades=0.01) == [0, 0]  # zoomed in, the same two are far apart
