"""A pre-registered study that tests a prediction (issue 51): it refuses to train until its rule holds a committed
prediction for every predicted arm, and its page puts each prediction beside the observed gap."""

from __future__ import annotations

import pytest

from nbkit.studies import prereg
from nbkit.studies.base import GridStudy

PREDICTION = {"gap": -0.05, "lo": -0.09, "hi": -0.01}


class Predicting(prereg.PreRegistered):
    """A study predicting two arms; its grid is never reached when the predictions are incomplete."""

    name = "toy_predicting"
    predicted_arms = ("bf16", "fp16")
    rule_record = {"commit": "a" * 40, "time": "2026-11-28T00:00:00+00:00"}

    def grid(self, **options):
        self.grid_built = True
        return {}


def _study(predictions, rule_record=Predicting.rule_record):
    study = Predicting()
    study.predictions, study.rule_record, study.grid_built = predictions, rule_record, False
    return study


@pytest.mark.parametrize(
    ("predictions", "rule_record", "names"),
    [
        ({}, Predicting.rule_record, r"\['bf16', 'fp16'\]"),
        ({"bf16": {"per-token": PREDICTION}}, Predicting.rule_record, r"\['fp16'\]"),
        ({"bf16": {"per-token": PREDICTION}, "fp16": {}}, Predicting.rule_record, r"\['fp16'\]"),
        (
            {"bf16": {"per-token": PREDICTION}, "fp16": {"per-token": {"gap": 0.2, "lo": -0.1, "hi": 0.1}}},
            Predicting.rule_record,
            "fp16/per-token",
        ),
        ({"bf16": {"per-token": PREDICTION}, "fp16": {"per-token": PREDICTION}}, {}, "not committed"),
    ],
)
def test_a_study_refuses_to_train_while_its_rule_lacks_a_committed_prediction_per_arm(
    predictions, rule_record, names, tmp_path
):
    study = _study(predictions, rule_record)
    with pytest.raises(prereg.PredictionsMissing, match=names):
        study.run(output_dir=str(tmp_path))
    assert not study.grid_built and not (tmp_path / prereg.STARTED).exists()  # refused before anything


def test_a_study_with_every_prediction_committed_trains(tmp_path, monkeypatch):
    monkeypatch.setattr(GridStudy, "run", lambda self, *a, **k: {"ran": True})
    study = _study({"bf16": {"per-token": PREDICTION}, "fp16": {"per-token": PREDICTION}})
    assert study.run(output_dir=str(tmp_path)) == {"ran": True} and study.grid_built


def test_a_study_without_predicted_arms_needs_no_predictions(tmp_path, monkeypatch):
    monkeypatch.setattr(GridStudy, "run", lambda self, *a, **k: {"ran": True})
    study = _study({})
    study.predicted_arms = ()
    assert study.run(output_dir=str(tmp_path)) == {"ran": True}


def test_the_page_shows_each_prediction_beside_the_observed_gap_and_reads_the_gap_not_an_overlap():
    study = _study({"bf16": {"per-token": PREDICTION, "seq KL": {"gap": 0.0, "lo": -0.02, "hi": 0.02}}})
    rows = study.predicted_beside_observed({"bf16": {"gap": -0.03, "lo": -0.08, "hi": 0.02}})
    assert [(r["arm"], r["predictor"], r["inside"]) for r in rows] == [
        ("bf16", "per-token", True),
        ("bf16", "seq KL", False),  # the CIs overlap, but the observed gap lies outside the predicted interval
    ]
    assert rows[0]["predicted interval"] == (-0.09, -0.01) and rows[0]["observed CI"] == (-0.08, 0.02)
    assert study.predicted_beside_observed({})[0]["inside"] is None  # not observed yet
