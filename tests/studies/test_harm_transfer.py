"""The transfer study: the harm-threshold study on tiny-long, its doses from tiny-long's own stored ladder by the
same rule, its grid seed by seed, the rule's transfer reading per unit, and a thresholds store that keeps both tasks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nbkit.models.toymodels import long_arith
from nbkit.records import schema
from nbkit.rl import judge
from nbkit.studies import harm_threshold as H
from nbkit.studies import harm_threshold_rule as HR
from nbkit.studies import harm_transfer as T
from nbkit.studies import harm_transfer_reading as TR
from nbkit.studies import harm_transfer_rule as R
from nbkit.studies import harm_transfer_setup as S
from nbkit.studies import tiny_long_regimes as TL
from nbkit.studies.catalog import STUDIES


def test_the_points_are_e8m3_and_the_ones_pick_points_takes_from_tiny_longs_stored_ladder():
    ladder = HR.ladder_record(R.LADDER_FILE)
    assert S.points_from_ladder(ladder["doses"]) == list(T.POINTS)
    assert ladder["unit"] == schema.METRIC_TOKEN_ABS_LOGP_DIFF and ladder["commit"] and "tiny-long" in ladder["ladder"]
    doses = [ladder["doses"][p] for p in T.POINTS]
    assert doses == sorted(doses) and len(T.POINTS) >= 4, "at least 4 doses, ascending in ladder dose"


def test_the_grid_is_tiny_long_at_the_regime_fp32_paired_seed_by_seed_then_the_amendments_extras():
    grid = T.HarmTransfer().grid(overrides={"learning_rate": 1e-4})
    labels = list(grid)
    per_seed = 1 + len(T.POINTS)
    n = len(T.SEEDS) * per_seed
    assert len(T.SEEDS) == 5 and len(labels) == n + len(T.EXTRA_SEEDS) * len(T.EXTRAS)
    for s in T.SEEDS:
        assert labels[s * per_seed : (s + 1) * per_seed] == [f"fp32-none-s{s}", *[f"{p}-none-s{s}" for p in T.POINTS]]
    assert labels[n:] == [f"{f}-{c or 'none'}-s{s}" for s in T.EXTRA_SEEDS for f, c in T.EXTRAS], "extras come last"
    cfgs = list(grid.values())
    assert {c.model for c in cfgs} == {"tiny-long"} and {c.dataset for c in cfgs} == {R.DATASET}
    assert {c.max_completion_length for c in cfgs} == {TL.max_tokens(T.REGIME)} and {c.judge_set for c in cfgs} == {
        R.JUDGE_SET
    }
    assert {(c.train_dtype, c.rollout_engine, c.max_steps, c.judge_every) for c in cfgs} == {("fp32", "hf", 50, 10)}
    assert {c.correction for c in cfgs[:n]} == {None} and grid["nvfp4-mu_old-s0"].correction == "mu_old"
    assert TL.max_tokens(T.REGIME) - TL.TOKEN_MARGIN >= 5 * 31.5, "answers at least 5x tiny-arith's"


def test_each_change_after_the_rule_is_an_amendment_that_names_its_commit_and_moves_no_verdict():
    extras, note = T.AMENDMENTS
    assert "no extras" in T.RULE_TEXT and "Extras added" in extras["what"]
    assert "overlap_note" in note["what"] and "after the rule was read" in note["why"]
    for a in T.AMENDMENTS:  # each recorded by the commit after the one that made it, in the order made
        assert a["verdicts_moved"] == [] and len(a["commit"]) == 40 and a["time"] > T.RULE_RECORD["time"]
    assert extras["time"] < note["time"]
    card = T.HarmTransfer().card()
    on_card = [a["when"]["commit"] for a in card["amendments"]]
    assert on_card == [a["commit"] for a in (*T.AMENDMENTS, *T.SOUND_AMENDMENTS)], "on the card"


def test_the_grid_refuses_to_build_before_the_pilot_fixed_the_lr(monkeypatch):
    monkeypatch.setattr(R, "LR", None)  # the rule's lr (harm_transfer_rule), not fixed yet
    with pytest.raises(ValueError, match="pilot"):
        T.HarmTransfer().grid()


def test_the_lr_is_the_smallest_that_learns_in_the_stored_pilot():
    pilot = json.loads(R.PILOT_FILE.read_text())
    runs = pilot["runs"].values()
    assert sorted(r["lr"] for r in runs) == sorted(R.PILOT_LRS) and pilot["steps"] == T.STEPS
    for r in runs:  # "learns" is the rule's reading of the stored judgments
        (s0, first), (s50, last) = r["judge"][0], r["judge"][-1]
        assert (s0, s50) == (0, T.STEPS) and r["learns"] == (last - first > R.PILOT_RISE)
    assert T.LR == pilot["lr"] == min(r["lr"] for r in runs if r["learns"])
    assert {c.learning_rate for c in T.HarmTransfer().grid().values()} == {T.LR}
    assert f"lr {T.LR}" in T.RULE_TEXT


def test_the_study_is_registered_and_reads_its_own_task():
    study = STUDIES[T.STUDY]
    assert isinstance(study, T.HarmTransfer) and study.task == "tiny-long" and study.rule_points == T.POINTS
    assert T.RULE_RECORD == {} or T.LR is not None, "the rule is committed only with the pilot's lr"
    assert "transferable dose" in T.RULE_TEXT and "if none agrees, say so" in T.RULE_TEXT


def _crossing(dose, lo, hi, doses=(0.01, 1.0)):
    return {"outcome": "crossing", "dose": dose, "ci": [lo, hi], "doses": list(doses)}


def test_agreement_names_the_unit_whose_two_thresholds_overlap_and_their_ratio():
    units = {
        "token_abs_logp_diff/mean": {"tiny-arith": _crossing(0.1, 0.07, 0.14), "tiny-long": _crossing(0.12, 0.09, 0.2)},
        "seq_log_ratio/abs_mean": {"tiny-arith": _crossing(3.0, 2.0, 4.0), "tiny-long": _crossing(20.0, 15.0, 30.0)},
        "seq_kl": {"tiny-arith": _crossing(1.0, 0.5, None), "tiny-long": {"outcome": "above_range", "doses": [1, 8]}},
        "ess_seq_deficit": {"tiny-arith": {"outcome": "none", "why": "not estimable"}},
    }
    rows = {r["unit"]: r for r in T.agreement(units)}
    assert rows["token_abs_logp_diff/mean"]["agrees"] and rows["token_abs_logp_diff/mean"]["ratio"] == pytest.approx(
        1.2
    )
    assert not rows["seq_log_ratio/abs_mean"]["agrees"] and rows["seq_log_ratio/abs_mean"]["overlap"] is False
    kl = rows["seq_kl"]  # a censored CI reaches infinity and meets "above 8", but only crossings can agree
    assert kl["overlap"] is True and not kl["agrees"] and kl["ratio"] is None
    assert kl["first_ci"] == [0.5, math.inf] and kl["second_ci"] == [8, math.inf]
    assert rows["ess_seq_deficit"]["overlap"] is None and rows["ess_seq_deficit"]["second_outcome"] == "not stored"
    assert TR.columns()["ratio"] == "ratio tiny-long/tiny-arith" and TR.columns()["first_ci"] == "tiny-arith: CI"
    said = T.verdict(list(rows.values()))
    assert "transferable" in said and H.UNITS["token_abs_logp_diff/mean"] in said and "1.2" in said


def test_the_transfer_record_keeps_per_unit_agreement_ratio_and_overlap_for_the_doctor():
    units = {u: {"tiny-arith": _crossing(1.0, 0.8, 1.2), "tiny-long": _crossing(1.1, 0.9, 1.3)} for u in H.UNITS}
    units["seq_kl"]["tiny-long"] = _crossing(5.0, 4.0, 6.0)
    rec = TR.transfer_record(units)
    assert rec["tasks"] == ["tiny-arith", "tiny-long"] and rec["study"] == T.STUDY
    assert rec["units"][H.PRIMARY] == {"agrees": True, "ratio": pytest.approx(1.1), "cis_overlap": True}
    assert rec["units"]["seq_kl"] == {"agrees": False, "ratio": pytest.approx(5.0), "cis_overlap": False}
    assert rec["verdict"] == T.verdict(T.agreement(units))
    json.dumps(rec, allow_nan=False)  # plain JSON: no infinity from a censored CI end


def test_beside_the_verdict_the_page_says_how_wide_the_overlapping_cis_are_and_how_far_the_ratios_run():
    units = {
        "token_abs_logp_diff/mean": {
            "tiny-arith": _crossing(0.05, 0.02, 0.1),
            "tiny-long": _crossing(0.02, 0.01, 0.05),
        },
        "seq_log_ratio/abs_mean": {"tiny-arith": _crossing(1.0, 0.5, 2.0), "tiny-long": _crossing(2.0, 1.5, 6.0)},
        "seq_kl": {"tiny-arith": _crossing(1.0, 0.5, 2.0), "tiny-long": _crossing(9.0, 8.0, 10.0)},  # apart
    }
    said = T.overlap_note(units, (30.0, 180.0))
    assert "runs from 0.4 (per-token" in said and "to 2 (sequence |" in said and "on both sides of 1" in said
    assert "span 4× to 5×" in said, "each task's CI of each agreeing unit: upper end over lower end"
    assert "cannot be told apart" in said and "6× tiny-arith's (180 against 30 tokens)" in said
    assert "no verdict moved" in said and "amendment" in said
    disagree = {u: {"tiny-arith": _crossing(1.0, 0.8, 1.2), "tiny-long": _crossing(5.0, 4.0, 6.0)} for u in H.UNITS}
    assert T.overlap_note(disagree) is None, "with no unit agreeing there is no overlap to qualify"
    assert "responses" not in T.overlap_note(units), "lengths unknown: no length sentence"


def test_with_no_unit_agreeing_the_verdict_says_so():
    units = {u: {"tiny-arith": _crossing(1.0, 0.8, 1.2), "tiny-long": _crossing(5.0, 4.0, 6.0)} for u in H.UNITS}
    said = T.verdict(T.agreement(units))
    assert said.startswith("No unit") and "no dose unit transfers" in said


def _record(task, unit_value, measured):
    return {
        "unit": H.PRIMARY,
        "unit_note": "note",
        "measured_on": measured,
        "tasks": {task: {"outcome": "crossing", "dose": unit_value, "measured_on": measured}},
        "units": {u: {task: {"outcome": "crossing", "dose": unit_value}} for u in H.UNITS},
    }


def test_storing_one_task_keeps_the_other_tasks_thresholds():
    arith = _record("tiny-arith", 0.1, "tiny-arith models")
    long = _record("tiny-long", 0.2, "tiny-long models")
    both = H.merge_thresholds(arith, long)
    assert set(both["tasks"]) == {"tiny-arith", "tiny-long"} and both["tasks"]["tiny-arith"]["dose"] == 0.1
    assert all(set(both["units"][u]) == {"tiny-arith", "tiny-long"} for u in H.UNITS)
    assert both["measured_on"] == "tiny-arith models; tiny-long models" and "harm_transfer" in both["unit_note"]
    again = H.merge_thresholds(both, _record("tiny-arith", 0.3, "tiny-arith models"))  # re-storing one task
    assert again["tasks"]["tiny-arith"]["dose"] == 0.3 and again["tasks"]["tiny-long"]["dose"] == 0.2
    assert H.merge_thresholds(None, arith) == arith and H.merge_thresholds(arith, arith) == arith
    with pytest.raises(ValueError, match="unit"):
        H.merge_thresholds(arith, {**long, "unit": "seq_kl"})


@pytest.mark.slow
def test_store_merges_the_tiny_long_task_into_the_thresholds_tiny_arith_stored(tmp_path):
    path = tmp_path / "results" / H.THRESHOLDS.relative_to(H.results.RESULTS)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_record("tiny-arith", 0.1, "tiny-arith models")))
    study = T.HarmTransfer()
    opts = {**study.toy, "output_dir": str(tmp_path / "runs")}
    study.run(progress=False, **opts)
    study.store(wall_seconds=1.0, command="test", root=tmp_path / "results", **opts)
    stored = json.loads(path.read_text())
    assert set(stored["tasks"]) == {"tiny-arith", "tiny-long"} and stored["tasks"]["tiny-arith"]["dose"] == 0.1
    assert stored["transfer"] == TR.transfer_record(stored["units"]), "the complete grid stores the transfer reading"
    assert stored["transfer"]["tasks"] == ["tiny-arith", "tiny-long"] and set(stored["transfer"]["units"]) == set(
        H.UNITS
    )
    # a sitting that leaves runs of its grid missing stores them without reading thresholds from them
    path.write_text(json.dumps(_record("tiny-arith", 0.1, "tiny-arith models")))
    wider = {**opts, "seeds": [0, 1]}
    study.store(wall_seconds=1.0, command="test", root=tmp_path / "results", replace=True, **wider)
    assert set(json.loads(path.read_text())["tasks"]) == {"tiny-arith"}
    assert "transfer" not in json.loads(path.read_text()), "no transfer is read before the last sitting"
    assert study.missing(study.load(tmp_path / "results"), wider) == [
        "fp32-none-s1",
        "e8m2-none-s1",
        "dial-e8m1-c1of16-none-s1",
    ]
    assert (
        stored["tasks"]["tiny-long"]["study"] == T.STUDY and "tiny-long" in stored["tasks"]["tiny-long"]["measured_on"]
    )


def test_the_judge_set_is_large_enough_and_disjoint_from_the_training_set():
    cfg = T.HarmTransfer().grid(overrides={"learning_rate": 1e-4})["fp32-none-s0"]
    from nbkit import tasks

    train = tasks.make_task(source=cfg.dataset, grader="arith").problems
    _, usable = judge.load_set(cfg, train)  # raises on a shared problem or fewer than MIN_PROBLEMS
    assert len(usable) >= judge.MIN_PROBLEMS
    assert {p["steps"] for p in usable} == {p["steps"] for p in train} == {long_arith.REGIMES[T.REGIME]}


def test_the_pool_of_the_judge_set_drops_every_training_problem():
    from nbkit import tasks

    trained = {p["problem"] for p in tasks.make_task(source=R.DATASET, grader="arith").problems}
    full = S.judge_task(pool_size=2000)
    assert trained and not trained & {p["problem"] for p in full.problems}
    assert len(full.problems) < 2000, "the seed-1 pool of 2000 shares some problems with the training pool"
    assert np.all([p["steps"] == long_arith.REGIMES[T.REGIME] for p in full.problems])


def test_the_budget_counts_every_run_of_the_grid_and_its_judgments():
    b = S.budget({"fp32": 10.0, "dial": 20.0}, seconds_per_judgment=5.0, jobs=2, seconds_startup=0.0)
    dosed = len(T.SEEDS) * len(T.POINTS) + len(T.EXTRA_SEEDS) * len(T.EXTRAS)
    assert b["runs"] == len(T.SEEDS) + dosed
    ref, dose = 50 * 10 + 6 * 5, 50 * 20 + 6 * 5
    assert b["seconds_per_run"] == {"fp32": ref, "dial": dose}
    assert b["cpu_hours"] == pytest.approx((5 * ref + dosed * dose) / 3600)
    assert b["wall_hours"] == pytest.approx(b["cpu_hours"] / 2)


def test_the_training_set_is_the_regimes_own_recipe_and_rebuilding_the_regimes_keeps_its_pool():
    from nbkit.tasks import dataset

    card = dataset.load_card(R.DATASET)
    assert card["task"]["pool_size"] == R.TRAIN_POOL == TL.regime_pool(T.REGIME) == 400
    assert card["task"]["long_arith"]["steps"] == long_arith.REGIMES[T.REGIME] and card["window"] == [0.2, 0.8]
    assert TL.regime_pool("medium") == 100, "the hunt's regimes keep the pool they were built on"


def test_the_transfer_figure_draws_one_panel_per_unit_with_each_tasks_fit_threshold_and_ci():
    from nbkit.plots.transfer import transfer_figure

    def fitted(dose, lo, hi, doses):
        return {**_crossing(dose, lo, hi, doses), "fitted": [-0.01, -0.04, -0.2], "harm": -0.05}

    units = {
        "token_abs_logp_diff/mean": {
            "tiny-arith": fitted(0.05, 0.02, 0.09, (0.02, 0.06, 0.3)),
            "tiny-long": fitted(0.06, 0.03, None, (0.01, 0.05, 0.4)),  # a censored upper end: band to the edge
        },
        "seq_kl": {
            "tiny-arith": fitted(1.0, 0.3, 2.0, (0.2, 1.2, 4.0)),
            "tiny-long": {"outcome": "above_range", "doses": [0.1, 3.0]},
        },
    }
    fig = transfer_figure(units, H.UNITS, T.agreement(units))
    fits = [t for t in fig.data if t.name.endswith("isotonic fit")]
    assert [(t.name, t.xaxis) for t in fits] == [
        ("tiny-arith: isotonic fit", "x"),
        ("tiny-long: isotonic fit", "x"),
        ("tiny-arith: isotonic fit", "x2"),
    ]
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(bands) == 3 and {s.xref for s in bands} == {"x", "x2"}
    long_band = next(s for s in bands if s.x0 == 0.03)
    assert long_band.x1 == pytest.approx(0.4 * 1.5), "a censored end runs to the panel's edge"
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith(H.UNITS["token_abs_logp_diff/mean"]) and "agrees, ratio 1.2" in titles[0]
    assert "does not agree" in titles[1] and fig.layout.xaxis.type == fig.layout.xaxis2.type == "log"


def test_before_the_last_sitting_the_page_shows_which_runs_are_stored_and_nothing_they_measured():
    study = T.HarmTransfer()
    bogus = [{schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5, H.PRIMARY: 0.1}]
    runs = {"fp32-none-s0": bogus, f"{T.POINTS[0]}-none-s0": bogus, f"{T.POINTS[0]}-none-s1": bogus}
    assert study.missing(runs) == [] or study.sitting(runs) is not None, "runs not stored are no sitting"
    study.sitting = lambda r: {} if r is runs else None  # these runs as the stored sitting of the rule's grid
    planned = len(T.SEEDS) * (1 + len(T.POINTS)) + len(T.EXTRA_SEEDS) * len(T.EXTRAS)
    assert len(study.missing(runs, {})) == planned - 3
    rows = study.table(runs, {})
    assert [r["rollout"] for r in rows] == ["fp32", *T.POINTS, "bf16", "fp16", "nvfp4 + mu_old"]
    assert [(r["runs stored"], r["seeds stored"]) for r in rows[:3]] == [
        ("1 of 5", "0"),
        ("2 of 5", "0, 1"),
        ("0 of 5", "none"),
    ]
    assert all(set(r) == {"rollout", "runs stored", "seeds stored"} for r in rows), "no dose, gap or threshold"
    assert study.page_tables(runs, {}, rows) == [] and study.figure(runs, {}) is None
    (said,) = study.findings(runs, {}, rows)
    assert said.startswith(f"3 of the rule's {planned} runs are stored")
    assert study.progress(runs, {})[-1] == {
        "rollout": "nvfp4 + mu_old",
        "runs stored": "0 of 3",
        "seeds stored": "none",
    }


def test_the_transfer_rule_was_amended_in_its_own_commit_before_the_commit_that_computes_it():
    """Issue 50: the band and the three readings committed first (e096b68), the computation after (a6c9174)."""
    transfer, *shared = T.SOUND_AMENDMENTS
    assert transfer["commit"].startswith("e096b68") and "[0.5, 2]" in transfer["what"] and T.BAND == (0.5, 2.0)
    assert all(transfer["time"] < a["time"] for a in shared)


def test_each_amendment_of_issue_50_appears_on_the_page_beside_the_reading_it_changed():
    """The stored page: the transfer by the band beside the reading as first committed (CIs overlap), each
    threshold's amended CI beside the CI with doses fixed, and every amendment on the record with what it moved."""
    from nbkit.studies.results_md import section

    page = section(T.HarmTransfer())
    by_band, first = (line for line in page.splitlines() if line.startswith(("- Transfer by", "- As first")))
    assert "no unit is shown to transfer" in by_band and "cannot tell" in by_band
    assert "CIs overlap" in first and "agree" in first
    assert "as first committed, doses fixed at their means" in page
    for a in T.SOUND_AMENDMENTS:
        assert f"Amendment, commit `{a['commit'][:7]}`" in page
    assert "agrees → cannot tell" in page  # the verdicts it moved, computed from the stored runs
