"""The PPO study's precision comparison (issue 36, deliverable 7): per dtype the π–μ mismatch KL, PPO's KL and the
critic's value error with intervals over seeds, and BF16 − FP16 paired by seed, from synthetic runs of known values."""

from __future__ import annotations

import math
import statistics

import pytest

from nbkit.records import schema
from nbkit.stats.stats import mean_ci
from nbkit.studies import ppo

K3 = {"fp16": [1e-6, 2e-6, 1.5e-6, 1e-6, 3e-6], "bf16": [5e-5, 4e-5, 6e-5, 5.5e-5, 4.5e-5]}
EV = {"fp16": [0.30, 0.25, 0.35, 0.28, 0.32], "bf16": [0.20, 0.22, 0.31, 0.18, 0.26]}


def _runs(dtypes=("fp16", "bf16"), seeds=range(5)):
    runs, meta = {}, {}
    for d in dtypes:
        for s in seeds:
            rows = []
            for step in range(1, 41):  # EV is -1 for the first 20 steps: only the last 20 count
                rows.append(
                    {
                        schema.STEP: step,
                        schema.KL_K3: K3[d][s],
                        schema.SEQ_KL: K3[d][s] * 40 - 1e-4,
                        schema.TOKEN_ABS_LOGP_DIFF: 10 * K3[d][s],
                        schema.PPO_APPROX_KL: 0.01,
                        schema.VALUE_LOSS: 0.1 if step <= 20 else 0.05 + 0.01 * s,
                        schema.VALUE_EXPLAINED_VARIANCE: -1.0 if step <= 20 else EV[d][s],
                        "accuracy": 0.5,
                    }
                )
            runs[f"ppo-{d}-s{s}"], meta[f"ppo-{d}-s{s}"] = rows, {"dtype": d, "seed": s}
    return runs, meta


def _row(rows, **match):
    return next(r for r in rows if all(r[k] == v for k, v in match.items()))


def test_each_dtype_reports_the_mismatch_kl_and_the_critics_error_over_seeds_with_intervals():
    runs, meta = _runs()
    table = ppo.precision_table(runs, meta)
    ev = _row(table, dtype="bf16", metric="explained variance, last 20 steps")
    assert ev["seeds"] == 5 and ev["mean"] == pytest.approx(statistics.fmean(EV["bf16"]))
    assert ev["95 % CI"] == pytest.approx(list(mean_ci(EV["bf16"])[1:]))  # may be negative: plain t-interval
    kl = _row(table, dtype="fp16", metric="token KL[μ‖π] (mismatch, k3 ≥ 0), run mean")
    assert kl["mean"] == pytest.approx(statistics.fmean(K3["fp16"]))
    assert 0 < kl["95 % CI"][0] < kl["mean"] < kl["95 % CI"][1]  # on the log scale: never below 0
    assert mean_ci(K3["fp16"])[1] < kl["95 % CI"][0]  # where the plain t-interval reaches lower
    loss = _row(table, dtype="fp16", metric="value loss, last 20 steps")
    assert loss["mean"] == pytest.approx(0.07)  # the last 20 steps' 0.05 + 0.01·seed, not the first 20's 0.1


def test_bf16_minus_fp16_is_paired_by_seed_with_its_interval_and_a_ratio_for_positive_metrics():
    runs, meta = _runs()
    diff = ppo.paired_difference(runs, meta)
    ev = _row(diff, metric="explained variance, last 20 steps")
    d = [b - f for b, f in zip(EV["bf16"], EV["fp16"])]
    assert ev["bf16 − fp16"] == pytest.approx(statistics.fmean(d)) and ev["seeds"] == 5
    assert ev["95 % CI"] == pytest.approx(list(mean_ci(d)[1:]))
    assert ev["bf16 / fp16"] is None  # explained variance can be negative: no ratio
    kl = _row(diff, metric="token KL[μ‖π] (mismatch, k3 ≥ 0), run mean")
    logs = [math.log(b / f) for b, f in zip(K3["bf16"], K3["fp16"])]
    assert kl["bf16 / fp16"] == pytest.approx(math.exp(statistics.fmean(logs)))
    lo, hi = kl["bf16 / fp16 95 % CI"]
    assert lo < kl["bf16 / fp16"] < hi and lo > 1  # BF16's mismatch clearly above FP16's
    loss = _row(diff, metric="value loss, last 20 steps")
    assert loss["bf16 − fp16"] == pytest.approx(0.0) and loss["bf16 / fp16"] == pytest.approx(1.0)


def test_the_findings_state_each_paired_difference_and_one_seed_gets_no_interval():
    runs, meta = _runs()
    study = ppo.PPOStudy()
    text = " ".join(study.findings(runs, meta, study.table(runs, meta)))
    assert "BF16 − FP16 in explained variance, last 20 steps, paired over 5 seeds" in text
    one, one_meta = _runs(seeds=[0])
    assert "one seed, no interval" in " ".join(study.findings(one, one_meta, study.table(one, one_meta)))
    only_bf16, m = _runs(dtypes=("bf16",))
    assert ppo.paired_difference(only_bf16, m) == []
    assert [c for c, _ in study.page_tables(runs, meta, [])][1].startswith("BF16 − FP16 paired by seed")


def test_last_20_steps_reads_the_steps_not_the_last_20_logged_values():
    """Explained variance logged once per rollout (every 4th step of 100): "last 20 steps" averages the 5 values of
    steps 81-100, not the last 20 logged values (steps 24-100); the reading as first shown stays beside it."""
    rows = [
        {schema.STEP: step, schema.VALUE_EXPLAINED_VARIANCE: 0.5 if step > 80 else -0.5}
        for step in range(1, 101)
        if step % 4 == 0
    ]
    values = ppo.per_seed({"ppo-fp16-s0": rows}, {"ppo-fp16-s0": {"dtype": "fp16", "seed": 0}})["fp16"][0]
    assert values["explained variance, last 20 steps"] == pytest.approx(0.5)
    first = values["explained variance, last 20 steps" + ppo.AS_FIRST_SHOWN.format(n=20)]
    assert first == pytest.approx((5 * 0.5 - 15 * 0.5) / 20)


def test_the_stored_studys_amendment_is_recorded_by_the_shared_machinery_with_the_readings_it_moved(tmp_path):
    """``record_amendments`` (``GridStudy``'s) puts ``AMENDMENTS`` on a copy of the stored card with the readings the
    stored runs say it moved: the same record the stored card carries."""
    import json
    import shutil

    from nbkit import results
    from nbkit.studies import amendments

    shutil.copytree(results.study_dir(ppo.STUDY), tmp_path / ppo.STUDY)
    path = tmp_path / ppo.STUDY / results.CARD
    card = json.loads(path.read_text())
    stored = card.pop("amendments")
    path.write_text(json.dumps(card))
    ppo.PPOStudy().record_amendments(tmp_path)
    assert results.card(ppo.STUDY, tmp_path)["amendments"] == stored
    assert [len(a.verdicts_moved) for a in amendments.read({"amendments": stored})] == [2]  # it moved two readings


def test_the_findings_read_named_fields_so_a_header_can_change_without_touching_them(monkeypatch):
    """The tables are shown under ``COLUMNS``' and ``PAIRED``' headers; every sentence reads the named fields."""
    runs, meta = _runs()
    study = ppo.PPOStudy()
    text = study.findings(runs, meta, study.table(runs, meta))
    monkeypatch.setattr(ppo, "COLUMNS", {k: f"<{v}>" for k, v in ppo.COLUMNS.items()})
    monkeypatch.setattr(ppo, "PAIRED", {k: f"<{v}>" for k, v in ppo.PAIRED.items()})
    rows = study.table(runs, meta)
    assert "<approx KL, max (each seed)>" in rows[0] and "<bf16 − fp16>" in ppo.paired_difference(runs, meta)[0]
    assert study.findings(runs, meta, rows) == text
