"""Issue 74 item 1, the record corrected: each correction is an amendment on its study's card that names the commit
that made it at that commit's time, came after training began, and moved what the stored runs say it moved; putting
the declared amendments back on a copy of the card gives the card as stored (nothing typed by hand)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from nbkit import results
from nbkit.studies import amendments as A
from nbkit.studies import dose_response, mechanism, predictors, smollm2_after, smollm2_after_transfer
from nbkit.studies import smollm2_after_record as record

CORRECTIONS = {
    smollm2_after.STUDY: (
        smollm2_after.SmolLM2After,
        [
            record.CLOSEST_CAVEAT_AMENDMENT,
            record.MACHINE_DEVIATION_AMENDMENT,
            record.SITTINGS_AMENDMENT,
            smollm2_after_transfer.PER_ARM_AMENDMENT,
            record.ANSWER_LENGTH_AMENDMENT,
        ],
    ),
    predictors.STUDY: (predictors.Predictors, [predictors.BEFORE_RESULTS_AMENDMENT]),
    mechanism.STUDY: (mechanism.Mechanism, [mechanism.NULL_AMENDMENT]),
    dose_response.STUDY: (dose_response.DoseResponse, [dose_response.AMENDMENTS[-1]]),
}
MOVED = {  # what each moved, as the stored runs give it (the tests of each study assert the readings themselves)
    "closest-caveat": 1,
    "machine-deviation": 0,
    "training-commits": 2,
    "transfer-per-arm": 2,
    "answer-length": 0,
    "before_results": 1,
    "null": 2,
    "bounds": 3,
}


def _stored(name: str) -> bool:
    return (results.RESULTS / name / results.CARD).is_file()


@pytest.mark.parametrize("name", list(CORRECTIONS))
def test_each_correction_is_on_its_card_with_its_commit_time_and_what_the_runs_say_it_moved(name):
    if not _stored(name):
        pytest.skip(f"{name} is not stored")
    cls, declared = CORRECTIONS[name]
    study = cls()
    card = study.card()
    moved = study.moves(study.load(), study.stored_meta())
    on_card = {a.commit: a for a in A.read(card)}
    assert [a for a in declared if a not in study.amendments] == []
    for spec in declared:
        a = on_card[spec["commit"]]
        assert (a.what, a.time, a.why) == (spec["what"], spec["time"], spec["why"])
        assert a.verdicts_moved == moved.get(spec["key"], []) and len(a.verdicts_moved) == MOVED[spec["key"]]
        assert A.before_training(card, a.time) is False  # each made after training began, and the card says so
        when = subprocess.run(
            ["git", "show", "-s", "--format=%cI", a.commit], capture_output=True, text=True, cwd=results.ROOT
        )
        if when.returncode == 0:
            assert when.stdout.strip() == a.time, f"{spec['key']}: the card's time is its commit's"
    assert not results.verify(name), "amendments and the record leave the card's seal intact"


@pytest.mark.parametrize("name", list(CORRECTIONS))
def test_the_declared_amendments_put_back_on_a_copy_of_the_card_give_the_card_as_stored(name, tmp_path):
    if not _stored(name):
        pytest.skip(f"{name} is not stored")
    shutil.copytree(results.study_dir(name), tmp_path / name)
    path = tmp_path / name / results.CARD
    card = json.loads(path.read_text())
    stored = {k: card.pop(k) for k in ("amendments", "outcomes_read") if k in card}
    path.write_text(json.dumps(card))
    cls, _ = CORRECTIONS[name]
    cls().record_amendments(tmp_path)
    again = results.card(name, tmp_path)
    assert {k: again.get(k) for k in stored} == stored
