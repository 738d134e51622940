"""Specification of nbkit.tasks.heldout's SmolLM2 judge problems: seeded, outside the training set's reserve."""

import pytest

from nbkit.models.toymodels import number_after
from nbkit.tasks import heldout


def test_judge_problems_are_seeded_distinct_and_never_in_the_reserve():
    train = number_after.make_problems(128, seed=0)
    judge = heldout.number_after_judge_problems(500, train)
    assert judge == heldout.number_after_judge_problems(500, train)
    reserved = {p["problem"] for p in number_after.make_problems(heldout.NUMBER_AFTER_RESERVE, seed=0)}
    asked = [p["problem"] for p in judge]
    assert len(set(asked)) == 500 and not set(asked) & reserved
    assert not set(asked) & {p["problem"] for p in train}
    every = number_after.make_problems(986, seed=heldout.JUDGE_SEED)
    assert all(every[p["source_index"]]["problem"] == p["problem"] for p in judge)


def test_a_training_pool_outside_the_reserve_is_refused():
    grown = number_after.make_problems(986, seed=0)[:450]  # past the 400 reserved problems
    with pytest.raises(ValueError, match="50 training problems lie outside the judge's reserve of 400"):
        heldout.number_after_judge_problems(500, grown)


def test_asking_for_more_problems_than_are_left_is_refused():
    with pytest.raises(ValueError, match="count must be at most 586"):
        heldout.number_after_judge_problems(587, [])
