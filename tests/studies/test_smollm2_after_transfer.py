"""The transfer question's third point (issue 51 item 4): each toy task's stored harm threshold, per unit, read as
a prediction for each SmolLM2 arm, and the arm's one interval read against it."""

import pytest

from nbkit.studies import smollm2_after as S
from nbkit.studies import smollm2_after_transfer as T
from tests.studies.test_smollm2_after import AS_PREDICTED, QUIET, _study_runs

THRESHOLD = {"outcome": "crossing", "dose": 0.05, "ci": [0.02, 0.09]}


@pytest.mark.parametrize(
    ("dose", "expected"), [(0.1, "crosses"), (0.01, "does not cross"), (0.05, "no prediction"), (0.02, "no prediction")]
)
def test_a_dose_above_the_thresholds_ci_predicts_a_crossing_below_it_none_inside_it_nothing(dose, expected):
    assert T.expected(dose, THRESHOLD) == expected


def test_a_threshold_without_a_crossing_predicts_nothing():
    assert T.expected(1.0, {"outcome": "above_range", "dose": None, "ci": None}) == "no prediction"


@pytest.mark.parametrize(
    ("lo", "hi", "seen"), [(-0.2, -0.06, "crossed"), (-0.04, 0.01, "did not cross"), (-0.07, -0.03, "undecided")]
)
def test_the_arms_one_interval_observes_a_crossing_only_when_wholly_below_the_harm_line(lo, hi, seen):
    assert T.observed({"gap": (lo + hi) / 2, "lo": lo, "hi": hi}) == seen
    assert T.observed(None) == "blind"


def test_each_pair_reads_agrees_contradicts_or_cannot_tell():
    assert T.reading("crosses", "crossed") == "agrees"
    assert T.reading("does not cross", "did not cross") == "agrees"
    assert T.reading("crosses", "did not cross") == "contradicts"
    assert T.reading("does not cross", "crossed") == "contradicts"
    assert T.reading("crosses", "undecided") == "cannot tell"
    assert T.reading("no prediction", "crossed") == "no prediction"
    assert T.reading("crosses", "blind") == "blind"


def test_the_table_reads_every_unit_task_and_arm_from_the_committed_doses():
    stored = {"token_abs_logp_diff/mean": {"tiny-long": THRESHOLD}}
    preds = {"a": {"token_abs": {"value": 0.2}}, "b": {"token_abs": {"value": 0.001}}}
    obs = {"a": {"lo": -0.3, "hi": -0.1}, "b": {"lo": -0.2, "hi": -0.08}}
    rows = T.table(preds, obs, stored)
    assert [(r["arm"], r["expected"], r["observed"], r["reading"]) for r in rows] == [
        ("a", "crosses", "crossed", "agrees"),
        ("b", "does not cross", "crossed", "contradicts"),
    ]
    assert T.summary(rows).endswith(
        "tiny-long's thresholds: 1 of 2 predictions agree, 1 contradict, 0 cannot tell (token_abs b)."
    )
    blind = T.table(preds, {}, stored)
    assert {r["observed"] for r in blind} == {"blind"}
    assert "tiny-long's thresholds predict 2 outcomes (1 crossing); read when the study is." in T.summary(blind)


def test_the_page_shows_the_predictions_while_blind_and_the_readings_once_complete():
    study = S.SmolLM2After()
    units = len(T.thresholds())
    runs, meta = _study_runs(AS_PREDICTED, QUIET, skip={("fp16/fp16", 4)})
    rows = dict(study.page_tables(runs, meta, []))["the transfer question's third point"]
    assert len(rows) == units * 2 * len(S.ARMS) and {r["observed"] for r in rows} == {"blind"}
    assert any("third point" in f and "read when the study is" in f for f in study.findings(runs, meta, []))
    runs, meta = _study_runs(AS_PREDICTED, QUIET)  # BF16 arms at -0.06 (crossed), FP16 arms near 0 (did not)
    rows = dict(study.page_tables(runs, meta, []))["the transfer question's third point"]
    by_arm = {r["arm"]: r["observed"] for r in rows}
    assert by_arm == {
        "fp32/fp16": "did not cross",
        "fp16/fp16": "did not cross",
        "fp32/bf16": "crossed",
        "bf16/bf16": "crossed",
    }
    findings = study.findings(runs, meta, [])
    assert any(f.startswith("Counted per arm (as amended after unblinding") for f in findings)
    assert any(
        f.startswith("As first written (counted per unit): The transfer question's third point") for f in findings
    )


# -- counted per arm (issue 74 item 1): one interval counts once per task ------------------------------------------
def _unit(unit, arm, exp, seen):
    return {"unit": unit, "task": "toy", "arm": arm, "expected": exp, "observed": seen, "reading": T.reading(exp, seen)}


def test_one_arms_interval_counts_once_however_many_units_predict_for_it():
    obs = {"a": {"gap": 0.0, "lo": -0.03, "hi": 0.03}, "b": {"gap": -0.1, "lo": -0.2, "hi": -0.06}}
    rows = [_unit(u, "a", "does not cross", "did not cross") for u in ("token_abs", "seq_abs", "seq_kl")]
    rows += [_unit("token_abs", "b", "crosses", "crossed"), _unit("seq_abs", "b", "does not cross", "crossed")]
    arms = {r["arm"]: r for r in T.per_arm(rows, obs)}
    assert arms["a"]["reading"] == "agrees" and arms["a"]["units' predictions"].endswith("token_abs, seq_abs, seq_kl")
    assert arms["b"]["reading"] == "mixed: agrees for token_abs; contradicts for seq_abs"
    assert T.per_arm_counts(list(arms.values())) == {"toy": {"agrees": ["a"], "mixed": ["b"]}}
    text = T.per_arm_summary(list(arms.values()), obs)
    assert "1 of 2 arms agree (a), 0 contradict, 1 mixed (b), 0 cannot tell" in text
    assert "b's interval lay wholly below -0.05" in text and "follows from the intervals" not in text
    assert T.per_arm_moved(rows, obs) == [
        "transfer count, toy: 4 of 5 predictions agree, 1 contradict, 0 cannot tell (per unit) → 1 of 2 arms agree, "
        "0 contradict, 0 cannot tell, 1 mixed (per arm)"
    ]


@pytest.mark.skipif(not (S.results.RESULTS / S.STUDY / S.results.CARD).is_file(), reason="not stored")
def test_the_stored_transfer_reading_counted_per_arm_says_what_it_could_and_could_not_show():
    study = S.SmolLM2After()
    runs, meta = study.load(), study.stored_meta()
    obs, rows = study.read(runs, meta), study.transfer_table(runs, meta)
    counts = T.per_arm_counts(T.per_arm(rows, obs))
    expected = {"agrees": ["fp32/fp16"], "cannot tell": ["fp32/bf16", "bf16/bf16", "fp16/fp16"]}
    assert counts == {"tiny-arith": expected, "tiny-long": expected}  # fp32/fp16's one interval: once per task
    per_unit = [r for r in rows if r["task"] == "tiny-arith" and r["arm"] == "fp32/fp16"]
    assert [r["reading"] for r in per_unit] == ["agrees"] * 4  # as first written: counted four times
    text = " ".join(study.findings(runs, meta, []))
    assert "tiny-arith's thresholds: 1 of 4 arms agree (fp32/fp16), 0 contradict, 3 cannot tell" in text
    assert "No arm's interval lay wholly below -0.05, so no 'does not cross' could be contradicted." in text
    assert "'0 contradict' follows from the intervals" in text and "(bf16/bf16 on tiny-long)" in text
    assert "As first written (counted per unit): " in text and "4 of 14 predictions agree" in text
    assert study.moves(runs, meta)["transfer-per-arm"] == [
        "transfer count, tiny-arith: 4 of 14 predictions agree, 0 contradict, 10 cannot tell (per unit) → 1 of 4 "
        "arms agree, 0 contradict, 3 cannot tell (per arm)",
        "transfer count, tiny-long: 4 of 15 predictions agree, 0 contradict, 11 cannot tell (per unit) → 1 of 4 arms "
        "agree, 0 contradict, 3 cannot tell (per arm)",
    ]
