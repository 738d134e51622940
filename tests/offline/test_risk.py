"""The doctor's risk lines (``nbkit.offline.risk``): a dose placed against stored harm thresholds with their CIs,
and no guess when nothing is stored."""

from __future__ import annotations

import json

import pytest

from nbkit.offline import risk
from nbkit.offline.doctor import DoctorConfig, DoctorResult
from nbkit.records import schema

UNIT = schema.METRIC_TOKEN_ABS_LOGP_DIFF
DIAGS = {"bf16": {UNIT: 0.05}, "fp16": {UNIT: 0.004}}


def stored(tmp_path, tasks, unit=UNIT):
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"unit": unit, "measured_on": "1 M-parameter models, 50 steps", "tasks": tasks}))
    return risk.load(path)


def test_with_no_stored_threshold_it_says_so_and_reads_no_risk(tmp_path):
    assert risk.load(tmp_path / "absent.json") is None
    out = risk.lines(DIAGS, None)
    assert len(out) == 2 and all("no stored harm threshold" in line and "no risk is read" in line for line in out)
    assert not any("threshold 0" in line for line in out)  # no number stands in for a threshold


def test_a_dose_is_placed_against_each_tasks_threshold_and_ci(tmp_path):
    s = stored(
        tmp_path,
        {
            "tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.03, 0.12]},
            "tiny-long": {"outcome": "crossing", "dose": 0.01, "ci": [0.006, 0.02]},
        },
    )
    bf16, fp16 = risk.lines(DIAGS, s)
    assert bf16.startswith("risk BF16 here: dose 0.05")
    assert "tiny-arith threshold 0.08 (CI 0.03–0.12): inside its CI" in bf16
    assert "tiny-long threshold 0.01 (CI 0.006–0.02): above it, beyond its CI" in bf16
    assert "tiny-arith threshold 0.08 (CI 0.03–0.12): below it, short of its CI" in fp16
    assert "1 M-parameter models, 50 steps" in bf16 and risk.CAVEAT in bf16


def test_the_threshold_estimators_record_is_what_the_store_holds(tmp_path):
    import numpy as np

    from nbkit.stats import threshold

    est = threshold.estimate(np.tile(-0.02 * np.arange(6), (5, 1)), np.geomspace(0.03, 0.5, 6))
    s = stored(tmp_path, {"tiny-arith": est.to_json()})
    line = risk.lines({"bf16": {UNIT: 0.5}}, s)[0]
    assert f"tiny-arith threshold {est.dose:.3g}" in line and "above it, beyond its CI" in line


def test_a_task_without_a_crossing_is_reported_as_such(tmp_path):
    s = stored(
        tmp_path,
        {
            "tiny-arith": {"outcome": "above_range"},
            "tiny-long": {"outcome": "crossing", "dose": 0.2, "ci": [0.1, None]},
        },
    )
    line = risk.lines({"bf16": {UNIT: 0.05}}, s)[0]
    assert "tiny-arith: no threshold inside its measured doses (it lies above them)" in line
    assert "CI 0.1–above the doses" in line


def test_a_unit_the_diagnosis_lacks_is_named_not_guessed(tmp_path):
    s = stored(tmp_path, {"tiny-arith": {"outcome": "crossing", "dose": 1.0, "ci": [0.5, 2.0]}}, unit="seq_kl")
    assert risk.lines({"bf16": {UNIT: 0.05}}, s) == [
        "risk BF16: the thresholds are in 'seq_kl', which this diagnosis did not measure"
    ]


def test_a_malformed_store_is_refused(tmp_path):
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"tasks": {}}))
    with pytest.raises(ValueError, match="needs 'unit' and 'tasks'"):
        risk.load(path)


def test_the_doctors_text_carries_the_risk_lines(monkeypatch):
    diag = {
        UNIT: 0.05,
        "kl_k3": 1e-3,
        "seq_log_ratio/abs_mean": 0.1,
        "length_to_mask": 100.0,
        "length_to_clip": 30.0,
        "clip_fraction": 0.01,
        "seq_rms/measured": 0.1,
        "seq_rms/predicted": 0.1,
    }
    monkeypatch.setattr(risk, "load", lambda path=None: None)
    monkeypatch.setattr(risk, "load_predictor", lambda path=None: None)
    result = DoctorResult(DoctorConfig(model="tiny-arith", engine="hf"), "hf", {"bf16": diag}, "fp16", [], 1.0, 1.0)
    assert "risk BF16: no stored harm threshold" in result.text()


def test_each_line_says_whether_its_unit_transfers_and_names_the_units_that_do(tmp_path):
    tasks = {"tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.03, 0.12]}}
    s = stored(tmp_path, tasks)

    def reading(units):
        transfer = {"tasks": ["tiny-arith", "tiny-long"], "study": "harm_transfer_tiny_long", "units": units}
        return risk.lines({"bf16": {UNIT: 0.05}}, {**s, "transfer": transfer})[0]

    agrees = reading({UNIT: {"agrees": True, "ratio": 0.427, "cis_overlap": True}})
    assert f"{UNIT}'s thresholds agree across tiny-arith and tiny-long (95 % CIs overlap; ratio" in agrees
    assert "0.427" in agrees and "harm_transfer_tiny_long" in agrees
    apart = reading(
        {
            UNIT: {"agrees": False, "ratio": 5.0, "cis_overlap": False},
            "seq_kl": {"agrees": True, "ratio": 2.3, "cis_overlap": True},
        }
    )
    assert "do not agree" in apart and "CIs do not overlap" in apart and "units whose thresholds agree: seq_kl" in apart
    alone = reading({UNIT: {"agrees": False, "ratio": None, "cis_overlap": None}})
    assert "no crossing on both tasks" in alone and "no unit's thresholds agree" in alone
    assert "agree" not in risk.lines({"bf16": {UNIT: 0.05}}, s)[0], "no transfer stored: none is claimed"


def test_the_transfer_line_reads_the_amended_band_rule_where_the_record_has_it():
    """Issue 50: a unit whose ratio CI straddles the band is 'not shown to transfer', whatever its CIs overlap."""
    from nbkit.offline import risk as R

    rec = {
        "tasks": ["tiny-arith", "tiny-long"],
        "study": "harm_transfer_tiny_long",
        "band": [0.5, 2.0],
        "units": {
            "u": {
                "agrees": False,
                "agrees_as_committed": True,
                "reading": "cannot tell",
                "joint_ratio": 0.43,
                "ratio_ci": [0.2, 1.83],
                "cis_overlap": True,
            }
        },
    }
    line = R.transfer_note("u", rec)
    assert "u is not shown to transfer" in line and "0.43" in line and "[0.5, 2]" in line


# -- issue 50 item 5: the doctor reads the predictor the predictors study picked ------------------------------------
TRANSFER = {
    "tasks": ["tiny-arith", "tiny-long"],
    "study": "harm_transfer_tiny_long",
    "band": [0.5, 2.0],
    "units": {UNIT: {"reading": "cannot tell", "joint_ratio": 0.43, "ratio_ci": [0.2, 1.83]}},
}
EVIDENCE = {"tasks": ["tiny-arith", "tiny-long"], "models": {"tiny-arith": "tiny-arith", "tiny-long": "tiny-long"}}


def predictor(tmp_path, **fields):
    path = tmp_path / "predictor.json"
    path.write_text(json.dumps({"study": "predictors_tiny", **EVIDENCE, **fields}))
    return risk.load_predictor(path)


def winner(tmp_path, cand="token_abs", half=0.02):
    return predictor(
        tmp_path,
        verdict="winner",
        winner=cand,
        candidates={cand: "what it is"},
        curve={"x": [0.01, 0.05, 0.1], "gap": [0.0, -0.02, -0.08]},
        interval={"half_width": half, "how": "± the 95 % quantile of the LOFO errors"},
        range=[0.01, 0.1],
    )


def test_with_a_winner_each_line_predicts_the_gap_with_its_interval_and_names_its_evidence(tmp_path):
    s = {
        **stored(tmp_path, {"tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.03, 0.12]}}),
        "transfer": TRANSFER,
    }
    bf16, fp16 = risk.lines(DIAGS, s, predictor=winner(tmp_path))
    assert bf16.startswith("risk BF16 here: predicted accuracy gap to FP32 -0.02 (95 % prediction interval -0.04 to +0")
    assert "from token_abs = 0.05" in bf16 and "predictors_tiny" in bf16
    assert "tiny-arith (model tiny-arith), tiny-long (model tiny-long)" in bf16
    assert "not shown to transfer" in bf16, "the transfer rule says 'cannot tell' for this unit"
    assert "threshold 0.08" not in bf16, "the winner's prediction replaces the threshold reading"
    assert "extrapolation" in fp16, "0.004 lies below the measured range: said, not hidden"


def test_a_winner_the_transfer_rule_never_read_is_not_shown_to_transfer_and_one_not_measured_reads_no_risk(tmp_path):
    line = risk.lines({"bf16": {UNIT: 0.05, "seq_kl": 0.05}}, None, predictor=winner(tmp_path, "clip_out"))[0]
    assert "which this diagnosis did not measure" in line and "no risk is read" in line
    diag = {UNIT: 0.05, "clip_fraction": 0.05}
    line = risk.lines(
        {"bf16": diag}, {"unit": UNIT, "tasks": {}, "transfer": TRANSFER}, predictor=winner(tmp_path, "clip_out")
    )[0]
    assert "predicted accuracy gap to FP32 -0.02" in line
    assert "not shown to transfer: harm_transfer_tiny_long did not read clip_out" in line


def test_with_no_clear_winner_the_per_token_line_is_one_reading_among_several(tmp_path):
    s = stored(tmp_path, {"tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.03, 0.12]}})
    none = predictor(
        tmp_path, verdict="no clear winner", winner=None, reason="the lowest error differs between schemes"
    )
    bf16 = risk.lines({"bf16": {UNIT: 0.05}}, s, predictor=none)[0]
    assert bf16.startswith("risk BF16 here: no clear winner among the candidate predictors (predictors_tiny")
    assert "the lowest error differs between schemes" in bf16 and "tiny-long (model tiny-long)" in bf16
    assert "one among several, not a verdict: dose 0.05" in bf16
    assert "tiny-arith threshold 0.08 (CI 0.03–0.12): inside its CI" in bf16


def test_the_doctor_reads_the_predictor_beside_its_thresholds_store(tmp_path):
    s = stored(tmp_path, {"tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.03, 0.12]}})
    winner(tmp_path)
    cfg = DoctorConfig(model="tiny-arith", engine="hf", thresholds=str(tmp_path / "thresholds.json"))
    result = DoctorResult(cfg, "hf", {"bf16": {UNIT: 0.05}}, "fp16", [], 1.0, 1.0)
    assert result.predictor()["winner"] == "token_abs" and s is not None
    assert "predicted accuracy gap to FP32" in result.risk_lines()[0]


def test_a_malformed_predictor_store_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no predictor verdict"):
        predictor(tmp_path, verdict="maybe")
    with pytest.raises(ValueError, match="lacks its curve"):
        predictor(tmp_path, verdict="winner", winner="bias")


def test_with_no_clear_winner_the_line_says_whether_any_candidate_beats_a_constant_when_that_is_stored(tmp_path):
    s = stored(tmp_path, {"tiny-arith": {"outcome": "crossing", "dose": 0.08, "ci": [0.03, 0.12]}})
    base = {"verdict": "no clear winner", "winner": None, "reason": "the lowest error differs between schemes"}
    none = predictor(tmp_path, **base, against_constant={"beats": {"lofo": [], "loto": []}})
    line = risk.lines({"bf16": {UNIT: 0.05}}, s, predictor=none)[0]
    assert "against a constant prediction (a reading added after the results): none beats it under both" in line
    assert "one among several, not a verdict: dose 0.05" in line
    some = predictor(tmp_path, **base, against_constant={"beats": {"lofo": ["clip_out", "bias"], "loto": ["bias"]}})
    line = risk.lines({"bf16": {UNIT: 0.05}}, s, predictor=some)[0]
    assert "bias beat(s) it under both schemes (clip_out under one only)" in line
    unread = risk.lines({"bf16": {UNIT: 0.05}}, s, predictor=predictor(tmp_path, **base))[0]
    assert "constant" not in unread, "a predictor stored before the reading says nothing about it"
