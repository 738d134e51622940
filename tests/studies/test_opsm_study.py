"""The OPSM study: its doses follow from the stored harm threshold by its committed rule, one reused control arm is
retrained to check the reuse, and the check stays out of the contrasts."""

from __future__ import annotations

import pytest

from nbkit import results
from nbkit.records import schema
from nbkit.studies import harm_threshold as HT
from nbkit.studies import opsm as O


def _run(dose, acc):
    return [
        {schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5},
        {schema.STEP: 1, schema.TOKEN_ABS_LOGP_DIFF: dose, schema.ESS_SEQ: 0.5, "time/step": 1.0},
        {schema.STEP: 40, schema.JUDGE_ACCURACY: acc},
        {schema.STEP: 50, schema.JUDGE_ACCURACY: acc},
    ]


def _store_harm(root, gaps: dict[str, float]):
    """A harm study under ``root`` with the given true gap per point (doses in POINTS order), 5 seeds."""
    points = list(gaps)
    grid = HT.HarmThreshold().grid(points=points, extras=[], output_dir=str(root / "runs"))
    runs = {}
    for label, cfg in grid.items():
        f, s = cfg.rollout_format, cfg.seed
        ref = 0.9 + 0.002 * s
        runs[label] = _run(0.0, ref) if f == "fp32" else _run(0.01 * 2 ** points.index(f), ref + gaps[f] + 0.001 * s)
    results.store(
        HT.STUDY,
        runs,
        command="test",
        wall_seconds=1.0,
        root=root,
        configs={"grid": {}, "runs": {k: c.to_dict() for k, c in grid.items()}},
    )


def test_the_doses_are_the_two_points_bracketing_the_stored_threshold(tmp_path):
    _store_harm(tmp_path, {"e8m3": 0.0, "e8m2": -0.01, "dial-e8m1-c1of16": -0.03, "dial-e8m1-c6of16": -0.2})
    assert O.near_threshold(tmp_path) == ("dial-e8m1-c1of16", "dial-e8m1-c6of16")


def test_with_no_crossing_the_doses_are_the_two_nearest_the_side_the_threshold_lies_on(tmp_path):
    _store_harm(tmp_path / "a", {"e8m3": -0.2, "e8m2": -0.3, "e8m1": -0.5})
    assert O.near_threshold(tmp_path / "a") == ("e8m3", "e8m2")
    _store_harm(tmp_path / "b", {"e8m3": 0.0, "e8m2": -0.01, "e8m1": -0.02})
    assert O.near_threshold(tmp_path / "b") == ("e8m2", "e8m1")


def test_without_a_stored_harm_study_the_grid_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=HT.STUDY):
        O.near_threshold(tmp_path)
    study = O.OPSMStudy()
    if not study.formats:  # (once the harm study is stored, its doses are the default)
        with pytest.raises(ValueError, match="store it first"):
            study.grid()
        assert "once it is stored" in " ".join(study.plan())


def test_a_reused_control_arm_is_retrained_once_beside_and_kept_out_of_the_contrasts(monkeypatch):
    study = O.OPSMStudy()
    monkeypatch.setattr(
        O.OPSMStudy,
        "reused",
        lambda self, grid, reuse, root=None: {k: {} for k, c in grid.items() if reuse and not c.correction},
    )
    grid = study.grid(formats=["e8m2", "e8m1"], reuse=HT.STUDY)
    assert set(grid) == {f"{f}-{c}-s{s}" for f in ("e8m2", "e8m1") for c in O.CORRECTIONS for s in O.SEEDS} | {
        "check-e8m2-none-s0"
    }
    check = grid["check-e8m2-none-s0"]
    assert check.rollout_format == "e8m2" and check.correction is None and check.seed == 0
    rows = {"e8m2-none-s0": _run(0.05, 0.8), "check-e8m2-none-s0": _run(0.05, 0.8)}
    rows["check-e8m2-none-s0"][1]["time/step"] = 2.0  # timing aside
    assert O.same_rows(rows["e8m2-none-s0"], rows["check-e8m2-none-s0"])
    assert not O.same_rows(rows["e8m2-none-s0"], _run(0.05, 0.81))
    meta = {k: {"format": "e8m2", "train": "fp32", "correction": "none", "seed": 0} for k in rows}
    seen = {}
    monkeypatch.setattr(
        O.corrections.CorrectionsStudy, "contrasts", lambda self, runs, meta: seen.setdefault("runs", set(runs))
    )
    study.contrasts(rows, meta)
    assert seen["runs"] == {"e8m2-none-s0"}
