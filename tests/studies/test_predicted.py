"""Predicted gaps for a new model's arms (issue 51, item 2): each candidate's fit on the stored points, with its
leave-one-task-out interval, flagged outside the measured range, in the shape a pre-registered study commits."""

import numpy as np
import pytest

from nbkit.stats import predictive
from nbkit.studies import predicted
from nbkit.studies import predictors as P


@pytest.fixture(scope="module")
def points():
    return P.points_of(P.Predictors().load())


def test_a_value_at_a_stored_point_is_predicted_by_the_fit_with_the_leave_one_task_out_interval(points):
    x = points.values["token_abs"]
    j = int(np.argsort(x)[len(x) // 2])
    curve = predictive.prediction_curve(points, "token_abs", "loto")
    out = predicted.predictions({"bf16": {"token_abs": float(x[j])}})["bf16"]["token_abs"]
    fitted = float(np.interp(x[j], curve["curve"]["x"], curve["curve"]["gap"]))
    assert out["gap"] == pytest.approx(fitted)
    assert out["hi"] - out["gap"] == pytest.approx(curve["interval"]["half_width"]) == out["gap"] - out["lo"]
    assert out["in_range"] and "leave-one-task-out" in out["how"]


def test_the_task_held_out_interval_differs_from_the_format_held_out_one(points):
    lofo = predictive.prediction_curve(points, "token_abs", "lofo")["interval"]["half_width"]
    loto = predictive.prediction_curve(points, "token_abs", "loto")["interval"]["half_width"]
    assert lofo != loto
    with pytest.raises(ValueError, match="'lopo'.*lofo.*loto"):
        predictive.prediction_curve(points, "token_abs", "lopo")


def test_a_value_beyond_the_measured_range_is_flagged_as_an_extrapolation(points):
    beyond = float(points.values["seq_kl"].max()) * 10
    out = predicted.predictions({"e8m0": {"seq_kl": beyond}})["e8m0"]["seq_kl"]
    assert not out["in_range"] and out["lo"] <= out["gap"] <= out["hi"]


def test_an_unknown_candidate_or_a_missing_value_is_refused_before_any_fit(monkeypatch):
    monkeypatch.setattr(P, "points_of", lambda *a, **k: pytest.fail("fitted before the input was checked"))
    with pytest.raises(ValueError, match="'dose'.*choose from.*token_abs"):
        predicted.predictions({"bf16": {"dose": 0.01}})
    with pytest.raises(ValueError, match="'bias'.*no finite value"):
        predicted.predictions({"bf16": {"bias": float("nan")}})
