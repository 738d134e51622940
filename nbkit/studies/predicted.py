"""Predicted accuracy gaps for a new model's arms, from every stored candidate predictor (issue 51, item 2).

A study that tests the prediction on a model the stored runs never saw (SmolLM2 on its own task) measures each arm's
step-0 candidates offline (``nbkit.studies.predictors.measure_task`` on its prompts and lengths), then asks here what
each candidate's fit on the stored points (``predictors_tiny``: tiny-arith and tiny-long) predicts. The interval is
± the 95 % quantile of the candidate's *leave-one-task-out* errors by default: the new model is a new task, so the
error that matters is the one made on a task the fit did not see. A value outside the range the fit was made on is
flagged: its prediction is the fit's end value, an extrapolation. The result has the shape
``nbkit.studies.prereg.PreRegistered.predictions`` takes (``gap``, ``lo``, ``hi`` per arm and candidate).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nbkit import results
from nbkit.stats import predictive
from nbkit.studies import predictors as P


def predictions(
    values: dict[str, dict[str, float]], root: Path = results.RESULTS, scheme: str = "loto"
) -> dict[str, dict[str, dict]]:
    """``arm → candidate → {"gap", "lo", "hi", "value", "in_range", "how"}`` for ``values`` (``arm → candidate →
    its measured value``), each from that candidate's fit on the stored points (``prediction_curve``, ``scheme``'s
    interval). An unknown candidate or a non-finite value is refused before anything is fitted."""
    known = sorted(P.candidates())
    for arm, by_cand in values.items():
        bad = [c for c in by_cand if c not in known]
        if bad:
            raise ValueError(f"arm {arm!r}: unknown candidate(s) {bad}; choose from {known}")
        nan = [c for c, v in by_cand.items() if not np.isfinite(v)]
        if nan:
            raise ValueError(f"arm {arm!r}: candidate(s) {nan} have no finite value: {[by_cand[c] for c in nan]}")
    points = P.points_of(P.Predictors().load(root), root)
    curves = {c: predictive.prediction_curve(points, c, scheme) for c in {c for v in values.values() for c in v}}
    out: dict[str, dict[str, dict]] = {}
    for arm, by_cand in values.items():
        for cand, value in by_cand.items():
            curve = curves[cand]
            gap = float(np.interp(value, curve["curve"]["x"], curve["curve"]["gap"]))
            half = curve["interval"]["half_width"]
            lo_x, hi_x = curve["range"]
            out.setdefault(arm, {})[cand] = {
                "gap": gap,
                "lo": gap - half,
                "hi": gap + half,
                "value": float(value),
                "in_range": bool(lo_x <= value <= hi_x),
                "how": f"{curve['interval']['how']}; fit on {len(points.tasks)} stored points "
                f"({', '.join(sorted(set(points.tasks)))}), measured range {lo_x:.3g}–{hi_x:.3g}",
            }
    return out
