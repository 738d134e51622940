"""The predictors study (``nbkit.studies.predictors``): its points come from the stored studies by the committed
rule, the rule precedes the computation on the card, and what the doctor reads is computed from the stored study."""

from __future__ import annotations

import json
import subprocess

import pytest

from nbkit import results
from nbkit.stats import predictive
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
def test_the_card_proves_the_rule_came_before_the_computation_but_not_before_the_results():
    card = results.card(predictors.STUDY)
    assert card["rule"]["commit"] == predictors.RULE_RECORD["commit"]
    assert amendments.before_training(card, card["rule"]["time"]) is True  # before the candidates were computed
    assert amendments.outcomes_read_first(card) and not amendments.rule_fixed_before_results(card)
    assert not results.verify(predictors.STUDY), "the record's fields leave the card's seal intact"


def _git(*args) -> str | None:
    shown = subprocess.run(["git", *args], capture_output=True, text=True, cwd=results.ROOT)
    return shown.stdout.strip() if shown.returncode == 0 else None


def test_the_gaps_it_scores_were_stored_and_read_before_the_rule_as_git_shows():
    """``OUTCOMES_READ`` as found in git: the source studies' runs last changed before the rule's commit and never
    after it, and RESULTS.md last regenerated before it, showing every source study."""
    rule = predictors.RULE_RECORD["commit"]
    runs = [f"data/results/{s}/runs" for s in predictors.SOURCES]
    last = _git("log", "-1", "--format=%H %cI", rule, "--", *runs)
    if last is None:
        pytest.skip("no git history here")
    assert last == "ff9da47e96dc66210fc4968213cf951366062d6b 2026-11-26T08:01:00+00:00"
    assert _git("log", "--format=%H", f"{rule}..HEAD", "--", *runs) == "", "no source run changed after the rule"
    read = predictors.OUTCOMES_READ
    assert _git("log", "-1", "--format=%H %cI", f"{rule}~1", "--", "RESULTS.md") == f"{read['commit']} {read['time']}"
    page = _git("show", f"{read['commit']}:RESULTS.md")
    for name in predictors.SOURCES:  # each source study's section shows its table, its gaps read
        section = page[page.index(f"## {STUDIES[name].title}") :].split("\n## ")[0]
        assert "**Not shown.**" not in section and "**Not stored yet**" not in section and "|---" in section
    assert _git("show", "-s", "--format=%cI", rule) == predictors.RULE_RECORD["time"] > read["time"]


@pytest.mark.skipif(not STORED, reason="the predictors study is not stored")
def test_the_page_says_the_rule_was_fixed_before_its_first_run_not_before_the_results_the_first_reading_beside():
    from nbkit.studies.amendments import record_lines

    study = predictors.Predictors()
    card = study.card()
    (line,) = [x for x in record_lines(card) if x.startswith("The rule as first committed")]
    assert "but not the outcomes it scores: they had been stored and read by 2026-11-27 19:03 UTC (`b9a8b5b`, " in line
    assert "2 h 07 min before the rule's commit" in line
    assert line.endswith(
        "The rule was fixed before its first run, not before the results (as first read, before the amendment "
        "below: 'that rule was fixed before the results')."
    )
    assert study.moves(study.load(), study.stored_meta())["before_results"] == [
        "rule record: fixed before the results → fixed before its first run (the candidates' measurement), not "
        "before the results (the gaps it scores were stored and read before its commit)"
    ]


@pytest.mark.slow
@pytest.mark.skipif(not STORED, reason="the predictors study is not stored")
def test_what_the_doctor_reads_is_computed_from_the_stored_study():
    stored = json.loads(predictors.PREDICTOR.read_text())
    fresh = json.loads(json.dumps(predictors.predictor_record(results.load(predictors.STUDY))))
    assert stored == fresh


# -- the reading against a constant, added after the results: an amendment on the card, shown beside the verdict ----
PREDICTORS = "nbkit/studies/predictors.py"


def test_the_constant_reading_was_committed_where_its_amendment_says():
    (a,) = [a for a in predictors.AMENDMENTS if a["key"] == "constant_baseline"]
    shown = subprocess.run(
        ["git", "show", "-s", "--format=%cI", a["commit"]], capture_output=True, text=True, cwd=results.ROOT
    )
    if shown.returncode != 0:
        pytest.skip("no git history here")
    assert shown.stdout.strip() == a["time"]
    for path, name in (("nbkit/stats/predictive.py", "def against_constant"), (PREDICTORS, "def constant_finding")):
        held = subprocess.run(
            ["git", "show", f"{a['commit']}:{path}"], capture_output=True, text=True, cwd=results.ROOT
        )
        assert name in held.stdout, f"{path} at {a['commit'][:7]} lacks {name}"


@pytest.mark.skipif(not STORED, reason="the predictors study is not stored")
def test_the_constant_reading_is_an_amendment_on_the_card_that_moved_no_verdict():
    card = results.card(predictors.STUDY)
    (a,) = [a for a in amendments.read(card) if a.what == predictors.CONSTANT_WHAT]
    assert a.verdicts_moved == [] and a.commit == predictors.AMENDMENTS[0]["commit"]
    assert not amendments.before_training(card, a.time), "added after the results, and the card says so"
    assert not results.verify(predictors.STUDY), "an amendment leaves the card's sealed sum intact"
    stored = json.loads(predictors.PREDICTOR.read_text())["against_constant"]
    assert "after the results" in stored["reading"] and set(stored["beats"]) == {"lofo", "loto"}


@pytest.mark.skipif(not STORED, reason="the predictors study is not stored")
def test_the_shared_record_amendments_puts_the_same_amendment_back_on_a_copy_of_the_card(tmp_path):
    import shutil

    shutil.copytree(results.study_dir(predictors.STUDY), tmp_path / predictors.STUDY)
    path = tmp_path / predictors.STUDY / results.CARD
    card = json.loads(path.read_text())
    stored = card.pop("amendments")
    path.write_text(json.dumps(card))
    predictors.Predictors().record_amendments(tmp_path)
    assert results.card(predictors.STUDY, tmp_path)["amendments"] == stored
    assert [a["what"] for a in stored] == [a["what"] for a in predictors.Predictors.amendments]


@pytest.mark.skipif(not STORED, reason="the predictors study is not stored")
def test_the_page_shows_the_amended_reading_beside_the_committed_verdict_and_the_figure_draws_both(monkeypatch):
    from nbkit.studies import results_md

    monkeypatch.setattr(predictors, "N_BOOT", 200)  # the page's wording, not its numbers, is under test here
    monkeypatch.setattr(predictors, "_SCORES", {})
    study = predictors.Predictors()
    runs, meta, card = study.load(), study.stored_meta(), study.card()
    text = results_md.stored_section(study, runs, meta, card)
    commit = predictors.AMENDMENTS[0]["commit"][:7]
    assert f"- Amendment, commit `{commit}`" in text and "after training began" in text
    verdict = text.index("- Verdict: no clear winner.")
    amended = text.index("- Amended reading (added after the results, recorded on the card; the verdict above is")
    assert verdict < amended, "the committed verdict first, the added reading after it"
    assert "**Amended reading (added after the results, on the card): each candidate against a constant" in text
    assert "Bonferroni over the 11 candidates within a scheme" in text

    fig = study.figure(runs, meta)
    dots = [t for t in fig.data if t.type == "scatter"]
    assert [t.xaxis for t in dots] == ["x", "x2"] and all(len(t.y) == 11 for t in dots)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(lines) == len(bands) == 2, "the constant's error and its CI, in each scheme's panel"
    _, sc = predictors.scores(runs)
    assert sorted(s.x0 for s in lines) == pytest.approx(sorted(sc.constant.values()))
    beats = predictive.against_constant(sc)["beats"]["lofo"]
    filled = [c for c, m in zip(dots[0].y, dots[0].marker.symbol, strict=True) if m == "circle"]
    assert sorted(filled) == sorted(beats), "filled dots are the candidates that beat the constant"
