"""The corrections study (issue 36, deliverable 3): its grid, the rescue rule on synthetic runs (paired contrasts,
intersection–union, Holm), its power by simulation, the card's record of the rule and the first run's start, and its
page before and after it is stored."""

from __future__ import annotations

import json

import pytest

from nbkit import results
from nbkit.records import schema
from nbkit.stats import noninferiority as NI
from nbkit.studies import amendments, results_md
from nbkit.studies import corrections as C
from nbkit.studies import dose_response as DR


def test_the_grid_is_seed_major_and_each_run_is_the_dose_responses_run_with_only_format_correction_and_seed(tmp_path):
    study = C.CorrectionsStudy()
    grid = study.grid(output_dir=str(tmp_path))
    assert len(grid) == len(C.SEEDS) * (1 + len(C.FORMATS) * (1 + len(C.CORRECTIONS))) == 108
    assert list(grid)[:9] == [
        "fp32-none-s0",
        "nvfp4-none-s0",
        "nvfp4-token_tis-s0",
        "nvfp4-seq_mis-s0",
        "nvfp4-icepop-s0",
        "e8m2-none-s0",
        "e8m2-token_tis-s0",
        "e8m2-seq_mis-s0",
        "e8m2-icepop-s0",
    ]
    dose = DR.DoseResponse().grid(
        output_dir=str(tmp_path),
        seeds=[3],
        corrected={"formats": ["e8m2"], "corrections": ["icepop"]},
        corrected_seeds=[3],
        more_seeds={},
        pairs=[],
    )
    for label in ("e8m2-none-s3", "e8m2-icepop-s3", "fp32-none-s3"):
        assert grid[label] == dose[label]  # the very config the dose–response trains, folder included
    assert study.coords(grid["nvfp4-seq_mis-s7"].to_dict()) == {
        "format": "nvfp4",
        "train": "fp32",
        "correction": "seq_mis",
        "seed": 7,
    }


def test_an_unknown_correction_or_format_is_refused_naming_the_choices(tmp_path):
    with pytest.raises(ValueError, match="magic.*icepop"):
        C.CorrectionsStudy().grid(corrections=["magic"], output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="fp5"):
        C.CorrectionsStudy().grid(formats=["fp5"], output_dir=str(tmp_path))


def _rows(outcome: float, steps: int = 50) -> list[dict]:
    """A run whose last two judgments (steps 40 and 50) average to ``outcome``."""
    return [
        {schema.STEP: 0, schema.JUDGE_ACCURACY: 0.6},
        {schema.STEP: 30, schema.JUDGE_ACCURACY: 0.1},
        {schema.STEP: 40, schema.JUDGE_ACCURACY: outcome - 0.01},
        {schema.STEP: steps, schema.JUDGE_ACCURACY: outcome + 0.01, schema.ACCURACY: 0.5},
    ]


FP32 = [0.90, 0.88, 0.92, 0.89, 0.91]
NOISE = [0.004, -0.006, 0.002, 0.005, -0.003]
ARMS = {  # (format, correction) -> outcome per seed
    ("e8m2", "none"): [f - 0.08 + n for f, n in zip(FP32, NOISE)],
    ("e8m2", "token_tis"): [f + n for f, n in zip(FP32, reversed(NOISE))],  # back to FP32: rescues
    ("e8m2", "seq_mis"): [f - 0.075 + n for f, n in zip(FP32, NOISE[1:] + NOISE[:1])],  # no effect
    ("e8m2", "icepop"): [f - 0.20 + n for f, n in zip(FP32, NOISE)],  # harms
    ("nvfp4", "none"): [f - 0.10 + n for f, n in zip(FP32, NOISE)],
    ("nvfp4", "token_tis"): [f - 0.06 + n for f, n in zip(FP32, reversed(NOISE))],  # helps, not within the margin
}


def _synthetic(seeds=range(5), short: dict | None = None):
    study = C.CorrectionsStudy()
    runs, configs = {}, {}
    grid = study.grid(formats=["e8m2", "nvfp4"], seeds=list(seeds), output_dir="runs/x")
    for label, cfg in grid.items():
        m = study.coords(cfg.to_dict())
        key = (m["format"], m["correction"])
        values = FP32 if key == ("fp32", "none") else ARMS.get(key)
        if values is None or m["seed"] >= (short or {}).get(key, 99):
            continue
        runs[label], configs[label] = _rows(values[m["seed"]]), cfg.to_dict()
    return study, runs, study.meta(configs), configs


def test_the_findings_read_named_fields_so_a_header_can_change_without_touching_a_sentence(monkeypatch):
    study, runs, meta, _ = _synthetic()
    said = study.findings(runs, meta, study.table(runs, meta))
    monkeypatch.setattr(C, "COLUMNS", {k: f"shown as {v}" for k, v in C.COLUMNS.items()})
    rows = study.table(runs, meta)
    assert "shown as contrast CI" in rows[0] and "contrast CI" not in rows[0]
    assert study.findings(runs, meta, rows) == said
    assert any(s.startswith("e8m2 + token_tis (5 paired seeds): corrected − uncorrected +0.080") for s in said)


def test_the_rescue_rule_reads_each_cell_from_its_paired_contrast_and_its_gap_to_fp32():
    study, runs, meta, _ = _synthetic(short={("nvfp4", "token_tis"): 3})
    rows = {(r["format"], r["correction"]): r for r in study.table(runs, meta)}
    assert set(rows) == set(ARMS) - {("e8m2", "none"), ("nvfp4", "none")}
    rescued = rows[("e8m2", "token_tis")]
    assert rescued["paired seeds"] == 5
    assert rescued["contrast"] == pytest.approx(0.08, abs=1e-9)  # corrected − uncorrected, same seeds
    assert rescued["corrected − fp32"] == pytest.approx(sum(NOISE) / 5, abs=1e-9)
    assert rescued["verdict"] == rescued["verdict (Holm)"] == NI.RESCUES
    assert rows[("e8m2", "seq_mis")]["verdict"] == NI.NO_EFFECT
    assert rows[("e8m2", "icepop")]["verdict"] == NI.HARMS
    small = rows[("nvfp4", "token_tis")]
    assert small["paired seeds"] == 3 and small["verdict"].startswith("direction only (3 seeds")
    assert small["verdict (Holm)"] == "—"  # no place in the family
    for r in rows.values():  # the interval shown is the t-interval the rescue rule's t-tests read
        for k, key in (("contrast CI", "contrast"), ("corrected − fp32 CI", "corrected − fp32")):
            if r[k]:
                half = (r[k][1] - r[k][0]) / 2
                assert r[k][0] + half == pytest.approx(r[key]) and r[k][0] <= r[key] <= r[k][1]


def test_helps_without_reaching_fp32_is_not_a_rescue():
    study, runs, meta, _ = _synthetic()
    row = next(r for r in study.table(runs, meta) if (r["format"], r["correction"]) == ("nvfp4", "token_tis"))
    assert row["contrast"] == pytest.approx(0.04, abs=1e-9) and row["corrected − fp32"] == pytest.approx(
        -0.06 + sum(NOISE) / 5
    )
    assert row["verdict"] == f"{NI.HELPS}, not shown within the margin of FP32"


def test_holm_over_the_family_withholds_a_claim_that_one_cell_alone_would_make():
    gaps_c = [0.03, 0.01, 0.05, 0.02, 0.04]  # t ≈ 4.2 at 4 df: p ≈ 0.013
    vs_ref = [0.0, 0.01, -0.01, 0.0, 0.005]
    cells = {f"cell {i}": ([g + 0.0 for g in gaps_c], vs_ref) for i in range(6)}
    cells["cell 0"] = ([0.03, 0.029, 0.031, 0.03, 0.032], vs_ref)  # a tight contrast: p tiny
    fam = NI.rescue_family(cells)
    assert NI.p_against(gaps_c, 0.0) == pytest.approx(0.0132, abs=1e-3)
    assert [fam[k]["verdict"] for k in cells] == [NI.RESCUES] * 6  # each interval alone clears
    holm = [fam[k]["verdict (Holm)"] for k in cells]
    assert holm[0] == NI.RESCUES and set(holm[1:]) == {NI.NO_EFFECT}  # 0.013 > 0.05/5: withheld after Holm


def test_a_false_rescue_at_the_margin_has_the_non_inferiority_tests_error_and_power_grows_with_seeds():
    """A correction that certainly helps (uncorrected far below) but leaves the runs exactly at −margin: a rescue
    is then false, and its chance is the one-sided 2.5 % of the non-inferiority test (Holm's α/k below it)."""
    false = NI.rescue_power(-0.5, -NI.RULE.margin, (0.02, 0.02, 0.02), n=8, k=6, sims=40_000)
    assert false["unadjusted"] == pytest.approx(0.025, abs=0.004)
    assert false["holm"] < false["unadjusted"] / 3
    low, high = (NI.rescue_power(-0.06, 0.0, (0.035, 0.03, 0.035), n=n, k=6, sims=20_000) for n in (5, 15))
    assert low["holm"] < high["holm"] and low["unadjusted"] < high["unadjusted"]
    with pytest.raises(ValueError, match="n >= 2"):
        NI.rescue_power(-0.1, 0.0, (0.1, 0.1, 0.1), n=1, k=6)


def test_the_card_records_the_rule_and_the_first_runs_start_so_the_page_can_say_the_rule_came_first(tmp_path):
    study = C.CorrectionsStudy()
    opts = {"output_dir": str(tmp_path / "runs")}
    assert "training_started" not in study.card_record(opts)  # nothing trained yet: no start to claim
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / C.STARTED).write_text(json.dumps({"time": "2026-11-26T08:00:00+00:00", "commit": "abc"}))
    record = study.card_record(opts)
    assert record["rule"]["commit"] == C.RULE_RECORD["commit"] and record["rule"]["what"] == C.RULE_TEXT
    assert amendments.rule_fixed_before_results(record)
    assert "fixed before the results" in " ".join(amendments.record_lines(record))
    (tmp_path / "runs" / C.STARTED).write_text(json.dumps({"time": "2026-11-25T20:00:00+00:00"}))  # before the rule
    record = study.card_record(opts)
    assert not amendments.rule_fixed_before_results(record)
    assert "before the results" not in " ".join(amendments.record_lines(record))


def test_the_first_training_run_writes_its_start_once_and_a_finished_grid_writes_none(tmp_path, monkeypatch):
    from nbkit.studies.base import GridStudy

    study = C.CorrectionsStudy()
    opts = {"output_dir": str(tmp_path / "runs"), "seeds": [0], "formats": ["e8m2"], "corrections": ["icepop"]}
    monkeypatch.setattr(GridStudy, "run", lambda self, *a, **k: {})  # (training itself: tests/studies/test_studies.py)
    study.run(**opts)
    first = json.loads((tmp_path / "runs" / C.STARTED).read_text())
    assert first["time"] and "commit" in first
    study.run(**opts)
    assert json.loads((tmp_path / "runs" / C.STARTED).read_text()) == first  # never rewritten
    monkeypatch.setattr(C.CorrectionsStudy, "finished", staticmethod(lambda cfg: True))
    study.run(output_dir=str(tmp_path / "other"), seeds=[0])
    assert not (tmp_path / "other" / C.STARTED).exists()


def test_identical_stored_control_arms_are_reused_only_on_request_and_only_when_identical(tmp_path):
    study = C.CorrectionsStudy()
    full = study.grid(formats=["e8m2"], corrections=["icepop"], seeds=[0, 1], output_dir=str(tmp_path))
    stored = {
        "fp32-none-s0": full["fp32-none-s0"].to_dict(),
        "e8m2-none-s0": {**full["e8m2-none-s0"].to_dict(), "output_dir": "/elsewhere"},  # bookkeeping only
        "e8m2-none-s1": {**full["e8m2-none-s1"].to_dict(), "learning_rate": 0.5},
    }  # another run
    results.store(
        DR.STUDY,
        {k: _rows(0.9) for k in stored},
        command="x",
        wall_seconds=1.0,
        root=tmp_path / "r",
        configs={"runs": stored},
    )
    assert set(study.reused(full, DR.STUDY, tmp_path / "r")) == {"fp32-none-s0", "e8m2-none-s0"}
    assert study.reused(full, None, tmp_path / "r") == {}
    assert len(study.grid(formats=["e8m2"], corrections=["icepop"], seeds=[0, 1], output_dir=str(tmp_path))) == 6


def test_the_page_before_the_study_is_stored_shows_the_plan_and_no_result():
    page = results_md.section(C.CorrectionsStudy()) if not (results.RESULTS / C.STUDY).is_dir() else None
    if page is None:
        pytest.skip("the study is stored: its page is RESULTS.md's (tests/studies/test_results_md.py)")
    assert "**Not stored yet**" in page and "no result" in page and C.RULE_RECORD["commit"][:7] in page
    assert "rescues" not in page.split("**The plan**")[0].split("**Question.**")[0]
    assert "Power as planned (12 seeds" in page


def test_the_page_of_stored_synthetic_runs_shows_the_table_the_verdicts_and_the_record(tmp_path):
    study, runs, meta, configs = _synthetic()
    results.store(
        C.STUDY,
        runs,
        command="test",
        wall_seconds=1.0,
        root=tmp_path,
        configs={"runs": configs},
        record=study.card_record({"output_dir": str(tmp_path / "none")}),
    )
    card = study.card(tmp_path)
    page = results_md.stored_section(study, study.load(tmp_path), study.stored_meta(tmp_path), card)
    assert "| e8m2 | token_tis | 5 |" in page and NI.RESCUES in page and NI.HARMS in page
    assert "Rescued by the rule (Holm over the 4 rescue claims with a verdict): e8m2 + token_tis." in page
    assert "stopped short of its plan" in page  # 5 seeds of the planned 12
    assert f"`{C.RULE_RECORD['commit'][:7]}`" in page
