"""The predictors study (``nbkit.studies.predictors``): its points come from the stored studies by the committed
rule, the rule precedes the computation on the card, and what the doctor reads is computed from the stored study."""

from __future__ import annotations

import json
import subprocess

import pytest

from nbkit import results
from nbkit.studies import amendments, predictors
from nbkit.studies.catalog import STUDIES

STORED = (results.RESULTS / predictors.STUDY / results.CARD).is_file()


def test_a_seed_stored_by_several_studies_counts_once():
    assert predictors.point_gaps({"a": {0: -0.1, 1: 0.0}, "b": {0: -0.3, 2: 0.2}}) == {0: -0.2, 1: 0.0, 2: 0.2}


def test_the_points_are_every_uncorrected_fp32_trained_arm_with_a_paired_fp32_reference():
    points = predictors.source_gaps()
    assert all(fmt != "fp32" for _, fmt in points)
    assert {t for t, _ in points} == {"tiny-arith", "tiny-long"}
    assert len(points) >= 10 and len({f for _, f in points}) >= 10
    # a correction changes the training, not the dose: nvfp4 + mu_old and the corrections' arms add no point of theirs
    assert set(points[("tiny-arith", "nvfp4")]) == {"dose_response_tiny_arith", "corrections_tiny_arith"}
    # the OPSM study's uncorrected arms are the harm study's own runs: the same gaps, counted once per seed
    e8m3 = points[("tiny-arith", "e8m3")]
    assert e8m3["opsm_tiny_arith"] == e8m3["harm_threshold_tiny_arith"]


def test_the_study_is_registered_and_measuring_refuses_an_uncommitted_rule(monkeypatch, tmp_path):
    assert isinstance(STUDIES[predictors.STUDY], predictors.Predictors)
    monkeypatch.setattr(predictors, "RULE_RECORD", {})
    with pytest.raises(ValueError, match="rule is not committed yet"):
        predictors.measure(work=tmp_path)
    assert not any(tmp_path.iterdir()), "nothing written before the refusal"


def test_the_rule_text_is_what_its_recorded_commit_holds():
    shown = subprocess.run(
        ["git", "show", f"{predictors.RULE_RECORD['commit']}:nbkit/studies/predictors.py"],
        capture_output=True,
        text=True,
        cwd=results.ROOT,
    )
    if shown.returncode != 0:
        pytest.skip("no git history here")
    assert "RULE_TEXT = (" in shown.stdout
    import ast

    tree = ast.parse(shown.stdout)
    (node,) = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RULE_TEXT"]
    assert ast.literal_eval(node.value) == predictors.RULE_TEXT


@pytest.mark.skipif(not STORED, reason="the predictors study is not stored")
def test_the_card_proves_the_rule_came_before_the_computation():
    card = results.card(predictors.STUDY)
    assert card["rule"]["commit"] == predictors.RULE_RECORD["commit"]
    assert amendments.rule_fixed_before_results(card)
    assert not results.verify(predictors.STUDY)


@pytest.mark.slow
@pytest.mark.skipif(not STORED, reason="the predictors study is not stored")
def test_what_the_doctor_reads_is_computed_from_the_stored_study():
    stored = json.loads(predictors.PREDICTOR.read_text())
    fresh = json.loads(json.dumps(predictors.predictor_record(results.load(predictors.STUDY))))
    assert stored == fresh
