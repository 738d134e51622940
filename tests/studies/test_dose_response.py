"""The dose–response study (notebook 06): its grid, its rule, the amendments on its card and its verdicts (the
statistics behind them: tests/stats/test_stats.py, tests/stats/test_noninferiority.py)."""

from __future__ import annotations

import statistics

import pytest

from nbkit import results
from nbkit.records import schema
from nbkit.stats.stats import mean_ci
from nbkit.studies import dose_response as D
from nbkit.studies import dose_response_findings as F
from nbkit.studies.base import GridStudy


@pytest.mark.parametrize(
    "lo,hi,reading",
    [
        (-0.3, -0.1, "breaks"),
        (-0.04, 0.02, "no detectable harm"),
        (-0.2, 0.01, "inconclusive"),
        (-0.06, -0.051, "breaks"),
        (float("nan"), float("nan"), "one seed: no interval"),
    ],
)
def test_the_rule_reads_the_whole_interval_against_the_margin(lo, hi, reading):
    assert D.verdict(lo, hi) == reading


def test_the_grid_puts_the_primary_contrast_first_and_reads_coordinates_from_configs(tmp_path):
    study = D.DoseResponse()
    grid = study.grid(
        formats=["fp32", "bf16", "mxfp4"],
        seeds=[0, 1],
        corrected={"formats": ["mxfp4"], "corrections": ["icepop", "token_tis"]},
        corrected_seeds=[0],
        pairs=[["bf16", "bf16"]],
        output_dir=str(tmp_path),
        overrides={"judge_every": 0},
        more_seeds={"formats": ["fp32", "mxfp4"], "seeds": [1, 2]},
    )
    labels = list(grid)
    assert labels[:6] == [
        "fp32-none-s0",
        "bf16-none-s0",
        "mxfp4-none-s0",
        "fp32-none-s1",
        "bf16-none-s1",
        "mxfp4-none-s1",
    ]
    assert labels[6:] == [
        "mxfp4-icepop-s0",
        "mxfp4-token_tis-s0",
        "bf16-train-bf16-s0",
        "bf16-train-bf16-s1",
        "fp32-none-s2",
        "mxfp4-none-s2",
    ]  # the added seeds last, a seed already there not twice
    cfg = grid["mxfp4-icepop-s0"]
    assert (cfg.train_dtype, cfg.rollout_format, cfg.correction, cfg.seed) == ("fp32", "mxfp4", "icepop", 0)
    assert study.coords(cfg.to_dict()) == {"format": "mxfp4", "train": "fp32", "correction": "icepop", "seed": 0}
    assert study.coords(grid["bf16-train-bf16-s1"].to_dict()) == {
        "format": "bf16",
        "train": "bf16",
        "correction": "none",
        "seed": 1,
    }
    assert len({c.output_dir for c in grid.values()}) == len(grid)


def test_an_unknown_format_or_correction_is_refused_naming_the_choices(tmp_path):
    with pytest.raises(ValueError, match="fp5.*mxfp4"):
        D.DoseResponse().grid(formats=["fp5"], output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="magic.*icepop"):
        D.DoseResponse().grid(
            formats=["fp32"], corrected={"formats": ["bf16"], "corrections": ["magic"]}, output_dir=str(tmp_path)
        )


def _run(judge_final: float, mismatch: float, steps: int = 6) -> list[dict]:
    rows = [{schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5}]
    for s in range(1, steps + 1):
        row = {schema.STEP: s, schema.ACCURACY: 0.6, schema.TOKEN_ABS_LOGP_DIFF: mismatch}
        if s == steps:
            row[schema.JUDGE_ACCURACY] = judge_final
        rows.append(row)
    return rows


def test_the_table_pairs_each_format_with_fp32_by_seed_and_applies_the_rule():
    finals = {
        "fp32": [0.80, 0.85, 0.90, 0.82, 0.88],
        "bf16": [0.81, 0.84, 0.91, 0.83, 0.87],
        "e8m1": [0.40, 0.50, 0.45, 0.42, 0.47],
        "mxfp4": [0.80, 0.70, 0.95, 0.60, 0.88],
    }
    runs, meta = {}, {}
    for fmt, xs in finals.items():
        for seed, x in enumerate(xs):
            runs[f"{fmt}-{seed}"] = _run(x, {"fp32": 1e-7, "bf16": 1e-3, "mxfp4": 3e-2, "e8m1": 0.4}[fmt])
            meta[f"{fmt}-{seed}"] = {"format": fmt, "train": "fp32", "correction": "none", "seed": seed}
    study = D.DoseResponse()
    rows = {r["format"]: r for r in study.table(runs, meta)}
    assert [r["format"] for r in study.table(runs, meta)] == ["fp32", "bf16", "mxfp4", "e8m1"]  # ladder order
    assert rows["fp32"]["verdict"] == "reference"
    assert rows["e8m1"]["gap vs fp32"] == pytest.approx(-0.402) and rows["e8m1"]["verdict"] == "breaks"
    assert rows["bf16"]["verdict"] == "no detectable harm"
    assert rows["mxfp4"]["verdict"] == "inconclusive"
    assert rows["bf16"]["judge step 0"] == 0.5 and rows["e8m1"]["mismatch, run mean (mechanism)"] == pytest.approx(0.4)
    assert rows["e8m1"]["dose: mismatch at step 0"] == pytest.approx(0.4)
    assert rows["mxfp4"]["gap SD (own)"] == pytest.approx(statistics.stdev([0.0, -0.15, 0.05, -0.22, 0.0]))
    text = " ".join(study.findings(runs, meta, study.table(runs, meta)))
    assert "Formats that break by the rule: e8m1" in text and "own SD" in text
    assert "2.5 % per format" not in text  # the old, false error-rate sentence


def test_the_findings_read_named_fields_so_a_header_can_change_without_touching_a_sentence(monkeypatch):
    runs, meta = {}, {}
    for fmt, xs in {"fp32": [0.8, 0.85, 0.9, 0.82, 0.88], "e8m1": [0.4, 0.5, 0.45, 0.42, 0.47]}.items():
        for seed, x in enumerate(xs):
            runs[f"{fmt}-{seed}"] = _run(x, {"fp32": 1e-7, "e8m1": 0.4}[fmt])
            meta[f"{fmt}-{seed}"] = {"format": fmt, "train": "fp32", "correction": "none", "seed": seed}
    study = D.DoseResponse()
    said = study.findings(runs, meta, study.table(runs, meta))
    renamed = {k: f"shown as {v}" for k, v in F.COLUMNS.items()}
    monkeypatch.setattr(F, "COLUMNS", renamed)
    monkeypatch.setattr(D, "COLUMNS", renamed)
    rows = study.table(runs, meta)
    assert "shown as gap vs fp32" in rows[0] and "gap vs fp32" not in rows[0]
    assert study.findings(runs, meta, rows) == said
    assert any(s.startswith("e8m1 rollouts (dose: mismatch 0.4 per token at step 0") for s in said)


def test_a_cell_under_five_seeds_gets_its_direction_only():
    assert D.DoseResponse.cell_verdict([0.01, 0.02, 0.015]).startswith("direction only: not worse")
    assert D.DoseResponse.cell_verdict([-0.3, -0.2, -0.25, -0.3]).startswith("direction only: worse")
    assert D.DoseResponse.cell_verdict([-0.3, -0.2, -0.25, -0.3, -0.28]) == "breaks"


def test_the_dose_is_the_first_optimiser_steps_mismatch_not_the_run_average():
    rows = [{schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5}] + [
        {schema.STEP: s, schema.TOKEN_ABS_LOGP_DIFF: 0.1 * s} for s in range(1, 6)
    ]
    assert D.step0_mismatch(rows) == pytest.approx(0.1)
    assert D.step0_mismatch(rows[:1]) is None


def test_a_one_process_grid_and_a_two_process_grid_deal_every_run_once():
    study = D.DoseResponse()
    assert study.twins == 1
    shards = [[j for j in range(10) if study.shard_of(j, 2) == i] for i in (0, 1)]
    assert shards == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    twin = type("Twin", (GridStudy,), {"twins": 2})()
    dealt = [[j for j in range(8) if twin.shard_of(j, 2) == i] for i in (0, 1)]
    assert sorted(dealt[0] + dealt[1]) == list(range(8)) and len(dealt[0]) == len(dealt[1])


def test_the_outcome_is_the_mean_of_the_last_two_judgments_after_step_0():
    rows = [
        {schema.STEP: 0, schema.JUDGE_ACCURACY: 0.1},
        {schema.STEP: 10, schema.JUDGE_ACCURACY: 0.5},
        {schema.STEP: 20, schema.ACCURACY: 0.9},
        {schema.STEP: 40, schema.JUDGE_ACCURACY: 0.7},
        {schema.STEP: 50, schema.JUDGE_ACCURACY: 0.8},
    ]
    assert D.final_judge(rows) == pytest.approx(0.75)
    assert D.final_judge(rows[:1]) is None  # step 0 alone is no outcome
    assert D.final_judge([{schema.STEP: 3, schema.ACCURACY: 1.0}]) is None


def test_the_stored_study_loads_names_a_real_commit_and_its_table_follows_the_rule():
    import subprocess

    from nbkit.runtime.paths import ROOT

    study = D.DoseResponse()
    runs, meta = study.load(), study.stored_meta()
    card = study.card()
    for part in results.parts(card):  # every sitting that trained stored runs names a commit of this repository
        assert (
            subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{part['commit']}^{{commit}}"]).returncode == 0
        )
    assert sorted(r for p in results.parts(card) for r in p["runs"]) == sorted(card["runs"])
    rows = study.table(runs, meta)
    primary = {r["format"]: r for r in rows if r["correction"] == "none" and r["train"] == "fp32"}
    assert primary["fp32"]["verdict"] == "reference" and len(primary) >= 5
    cells = study.cells(runs, meta)
    for r in rows:
        if r["paired seeds"] >= 2:
            gaps = list(
                study.gaps(cells[(r["train"], r["format"], r["correction"])], cells[("fp32", "fp32", "none")]).values()
            )
            _, lo, hi = mean_ci(gaps)  # the verdict reads the rule's t-interval; fewer than 5 seeds: direction only
            assert r["verdict"] == (D.verdict(lo, hi) if len(gaps) >= 5 else D.DoseResponse.cell_verdict(gaps))
            # the interval shown is the one the verdict reads (issue 50: one interval drawn and read)
            assert (r["gap CI low"], r["gap CI high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert all(r["format ran (audit)"] == r["format"] for r in primary.values())  # the format that ran is the one asked


def test_an_inconclusive_interval_below_zero_is_said_to_be_worse_than_fp32():
    assert "wholly below 0" in F.below_zero({"verdict": "inconclusive", "ci_high": -0.01})
    assert F.below_zero({"verdict": "inconclusive", "ci_high": 0.02}) == ""
    assert F.below_zero({"verdict": "breaks", "ci_high": -0.2}) == ""


def test_the_stored_card_records_each_amendment_with_the_verdicts_the_runs_say_it_moved():
    """The card's amendments name real commits at their real times, and each list of moved verdicts is what the
    stored runs give now (the card cannot say a change moved nothing when it did)."""
    import subprocess

    from nbkit.runtime.paths import ROOT
    from nbkit.studies import amendments as A

    study = D.DoseResponse()
    card = study.card()
    moved = study.moves(study.load(), study.stored_meta())
    recorded = A.read(card)
    assert [a.what for a in recorded] == [a["what"] for a in D.AMENDMENTS]
    for a, spec in zip(recorded, D.AMENDMENTS):
        assert a.verdicts_moved == moved[spec["key"]]
        when = subprocess.run(
            ["git", "-C", str(ROOT), "show", "-s", "--format=%cI", a.commit], capture_output=True, text=True
        ).stdout.strip()
        assert when == a.time and A.before_training(card, a.time) is False  # every one came after training began
    assert "fp8-e5m2: inconclusive → no detectable harm" in moved["outcome"] and moved["seeds"] == []
    assert A.rule_fixed_before_results(card)  # 8e33050 (20:44) precedes the first run (21:03); baa750f (21:09) not


def test_an_interval_is_kept_inside_the_bounds_of_an_accuracy_gap_by_clipping_only_where_it_leaves_them():
    assert F.in_bounds(-1.284, 0.107) == (-1.0, 0.107)
    assert F.in_bounds(-0.2, 1.3) == (-0.2, 1.0) and F.in_bounds(-0.5, 0.5) == (-0.5, 0.5)


def test_the_stored_intervals_that_leave_minus_one_to_one_are_kept_inside_beside_the_computed_ones():
    study = D.DoseResponse()
    runs, meta = study.load(), study.stored_meta()
    outside = study.outside_bounds(runs, meta)
    assert [(o["cell"], o["where"]) for o in outside] == [
        ("mxfp4 + mu_old", "the table"),
        ("e8m2 + mu_old", "the table"),
        ("e8m1", "original outcome · first look"),
    ]
    assert [round(o["lo"], 3) for o in outside] == [-1.284, -1.12, -1.029] and {o["clo"] for o in outside} == {-1.0}
    assert all(o["verdict"] == o["verdict in bounds"] for o in outside)  # the rule reads at -0.05 and 0
    rows = {(r["format"], r["correction"]): r for r in study.table(runs, meta)}
    mu = rows[("mxfp4", "mu_old")]
    assert mu["gap CI low"] == pytest.approx(-1.284, abs=5e-4)  # the interval as computed stays
    assert mu["gap CI kept in [−1, 1]"] == pytest.approx([-1.0, 0.107], abs=5e-4)  # beside it, inside the bounds
    for r in rows.values():
        if r["gap CI low"] is not None:
            lo, hi = r["gap CI kept in [−1, 1]"]
            assert -1 <= lo <= hi <= 1 and (lo, hi) == F.in_bounds(r["gap CI low"], r["gap CI high"])
    looks = {r["format"]: r for r in study.looks(runs, meta)}
    assert (
        "[-1.029, -0.139] (in [−1, 1]: [-1.000, -0.139]) breaks"
        in looks["e8m1"]["original outcome · first look (seeds 0–4)"]
    )
    moved = study.moves(runs, meta)["bounds"]
    assert moved[0] == (
        "shown interval, mxfp4 + mu_old (the table): -1.284 to +0.107 → -1.000 to +0.107 beside it (direction only: "
        "worse than the reference (3 seeds), unchanged)"
    )
    assert len(moved) == 3 and all(m.endswith("unchanged)") for m in moved)
    text = " ".join(study.findings(runs, meta, study.table(runs, meta)))
    assert "no verdict moves, since the rule reads at −0.05 and 0, inside the bounds." in text
