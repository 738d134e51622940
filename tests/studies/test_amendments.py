"""A study card's record of its rule (``nbkit.studies.amendments``): the page says "fixed before the results" only
when the card proves it, and shows an amended outcome beside the original one."""

from __future__ import annotations

import pytest

from nbkit.records import schema
from nbkit.studies import amendments as A
from nbkit.studies import dose_response as D
from nbkit.studies.results_md import stored_section

START = "2026-01-01T10:00:00+00:00"


def _run(j40: float, j50: float) -> list[dict]:
    rows = [{schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5}]
    for s in range(1, 51):
        row = {schema.STEP: s, schema.ACCURACY: 0.6, schema.TOKEN_ABS_LOGP_DIFF: 0.01}
        if s in (40, 50):
            row[schema.JUDGE_ACCURACY] = j40 if s == 40 else j50
        rows.append(row)
    return rows


def _study():
    """Five seeds where the last judgment alone leaves bf16 inconclusive and the mean of the last two does not."""
    ref = {s: _run(0.80, 0.80) for s in range(5)}
    bf16 = {s: _run(0.80 + d, 0.80 - d) for s, d in enumerate([0.0, 0.06, -0.06, 0.05, -0.05])}
    runs, meta = {}, {}
    for fmt, cells in (("fp32", ref), ("bf16", bf16)):
        for s, rows in cells.items():
            runs[f"{fmt}-none-s{s}"] = rows
            meta[f"{fmt}-none-s{s}"] = {"format": fmt, "train": "fp32", "correction": "none", "seed": s}
    return D.DoseResponse(), runs, meta


def _card(rule_time: str | None, start: str | None = START) -> dict:
    card = {
        "study": D.STUDY,
        "commit": "a" * 40,
        "dirty": False,
        "command": "nbkit study x run",
        "machine": {},
        "date": "2026-01-01T12:00:00+00:00",
        "wall_seconds": 60.0,
        "runs": [],
        "configs": {},
        "amendments": [
            A.Amendment(
                "The outcome became the mean of the last two judgments.",
                "b" * 40,
                "2026-01-01T10:06:00+00:00",
                "two judgments halve the judge's variance",
                ["bf16: inconclusive → no detectable harm"],
            ).to_card()
        ],
    }
    if rule_time:
        card["rule"] = {"what": "the last judgment", "commit": "c" * 40, "time": rule_time}
    if start:
        card["training_started"] = {"time": start, "commit": "d" * 40, "evidence": "a test"}
    return card


def test_a_post_start_amendment_is_shown_beside_the_original_outcome_and_never_as_fixed_before_the_results():
    study, runs, meta = _study()
    page = stored_section(study, runs, meta, _card(rule_time="2026-01-01T11:00:00+00:00"))  # rule after the start
    assert "before the results" not in page
    assert "after training began: 6 min after the first run started" in page
    assert "the card cannot show it was fixed in advance" in page
    # both outcomes side by side: the last judgment leaves bf16 inconclusive, the mean of the last two does not
    looks = {r["format"]: r for r in study.looks(runs, meta)}["bf16"]
    assert looks["original outcome · first look (seeds 0–4)"].endswith("inconclusive")
    assert looks["amended outcome · first look (seeds 0–4)"].endswith("no detectable harm")
    assert "original outcome · first look" in page and "amended outcome · first look" in page
    assert "under the outcome as first committed (last judgment): inconclusive" in page


def test_only_a_rule_committed_before_the_first_run_is_called_fixed_before_the_results():
    study, runs, meta = _study()
    page = stored_section(study, runs, meta, _card(rule_time="2026-01-01T09:00:00+00:00"))
    lines = [line for line in page.splitlines() if "before the results" in line]
    assert len(lines) == 1 and lines[0].startswith("- The rule as first committed")  # the rule, not the amendment
    assert "before the results" not in stored_section(study, runs, meta, _card("2026-01-01T09:00:00+00:00", None))
    assert not A.rule_fixed_before_results(_card(None))


def test_a_malformed_amendment_or_time_is_refused_naming_what_is_missing():
    with pytest.raises(ValueError, match=r"lacks \['why', 'when.time'\]"):
        A.read({"study": "x", "amendments": [{"what": "w", "when": {"commit": "c"}, "verdicts_moved": []}]})
    with pytest.raises(ValueError, match="no time zone"):
        A.before_training({"training_started": {"time": START}}, "2026-01-01T10:00:00")


def test_amend_writes_the_record_onto_a_stored_card_and_replaces_an_amendment_of_the_same_what(tmp_path):
    from nbkit import results

    results.store("toy", {"r": [{"step": 1}]}, command="make toy", wall_seconds=1.0, root=tmp_path)
    a = A.Amendment("w", "e" * 40, "2026-01-01T10:06:00+00:00", "because", [])
    A.amend("toy", a, tmp_path, training_started={"time": START, "commit": "d" * 40})
    A.amend("toy", A.Amendment("w", "e" * 40, "2026-01-01T10:06:00+00:00", "because", ["x: a → b"]), tmp_path)
    card = results.card("toy", tmp_path)
    assert [x.verdicts_moved for x in A.read(card)] == [["x: a → b"]] and card["training_started"]["time"] == START
    with pytest.raises(ValueError, match="unknown card record fields"):
        A.amend("toy", a, tmp_path, start=START)


def test_record_amendments_puts_each_declared_amendment_on_the_card_with_what_the_stored_runs_say_it_moved(tmp_path):
    from nbkit import results
    from nbkit.studies.base import GridStudy

    class Toy(GridStudy):
        name = "toy_study"
        amendments = (
            {"key": "a", "what": "First change.", "commit": "a" * 40, "time": "2026-01-01T11:00:00+00:00", "why": "x"},
            {"key": "b", "what": "Second change.", "commit": "b" * 40, "time": "2026-01-01T12:00:00+00:00", "why": "y"},
        )
        amendment_record = {
            "rule": {"what": "the rule", "commit": "c" * 40, "time": "2026-01-01T09:00:00+00:00"},
            "training_started": {"time": START, "commit": "d" * 40, "evidence": "a test"},
        }

        def coords(self, config):
            return {"seed": config["seed"]}

        def moves(self, runs, meta):
            return {"a": [f"seeds {sorted(m['seed'] for m in meta.values())}: {len(runs)} runs read"]}

    runs = {f"s{s}": [{schema.STEP: 1, schema.ACCURACY: 0.5}] for s in (0, 1)}
    configs = {"grid": {}, "runs": {f"s{s}": {"seed": s} for s in (0, 1)}}
    results.store(Toy.name, runs, command="test", wall_seconds=1.0, configs=configs, root=tmp_path)
    Toy().record_amendments(tmp_path)
    card = results.card(Toy.name, tmp_path)
    recorded = A.read(card)
    assert [a.what for a in recorded] == ["First change.", "Second change."]
    assert [a.verdicts_moved for a in recorded] == [["seeds [0, 1]: 2 runs read"], []]
    assert card["rule"]["what"] == "the rule" and card["training_started"]["evidence"] == "a test"
    Toy().record_amendments(tmp_path)  # recorded again: replaced, not repeated
    assert len(results.card(Toy.name, tmp_path)["amendments"]) == 2


def test_a_sittings_training_commit_is_the_cards_training_started_only_where_the_card_places_it():
    parts = [
        {"commit": "s" * 40, "date": "2026-01-01T11:00:00+00:00", "wall_seconds": 2400.0, "runs": ["a"]},  # 10:20
        {"commit": "t" * 40, "date": "2026-01-01T12:00:00+00:00", "wall_seconds": 1200.0, "runs": ["b"]},  # 11:40
    ]
    card = {"parts": parts, "training_started": {"time": "2026-01-01T10:19:00+00:00", "commit": "d" * 40}}
    assert A.sitting_training_commits(card) == ["d" * 40, None]  # the first sitting's; the second's is not recorded
    late = {**card, "training_started": {"time": "2026-01-01T10:30:00+00:00", "commit": "d" * 40}}
    assert A.sitting_training_commits(late) == [None, None]  # after the first sitting's start: not placed
    unknown = {**card, "parts": [{**parts[0], "wall_seconds": None}, parts[1]]}
    assert A.sitting_training_commits(unknown) == [None, None]  # no wall time: no start to place it against
    assert A.sitting_training_commits({"parts": parts}) == [None, None]


def test_a_rule_committed_before_its_first_run_but_after_its_outcomes_were_read_is_not_fixed_before_the_results():
    card = _card(rule_time="2026-01-01T09:00:00+00:00")  # before the first run's start (10:00)
    assert A.rule_fixed_before_results(card)
    card["outcomes_read"] = {"time": "2026-01-01T06:53:00+00:00", "commit": "e" * 40, "evidence": "a page"}
    assert A.outcomes_read_first(card) and not A.rule_fixed_before_results(card)
    line = A.record_lines(card)[0]
    assert "but not the outcomes it scores: they had been stored and read by 2026-01-01 06:53 UTC (`eeeeeee`" in line
    assert "2 h 07 min before the rule's commit; a page)" in line and "before the results')." in line
    card["outcomes_read"]["time"] = "2026-01-01T09:30:00+00:00"  # read after the rule: the rule came first
    assert A.rule_fixed_before_results(card)
