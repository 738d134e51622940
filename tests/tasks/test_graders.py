"""Specification of nbkit.tasks.graders' strict integer graders (SmolLM2's short-answer task, issue 51): the answer is
read only where the template asks for it, never guessed from the last number as math-verify does."""

import pytest

from nbkit.tasks import GRADERS, Task, TaskConfig


def graded(grader: str) -> Task:
    return Task(TaskConfig(source="inline", template="raw", grader=grader), problems=[])


@pytest.mark.parametrize(
    "response, answer",
    [
        ("\\boxed{8}", "8"),
        ("The answer is \\boxed{ 405 }.", "405"),
        ("\\boxed{-3}", "-3"),
        ("\\boxed{08}", "8"),
        ("\\boxed{8}", " 8 "),
    ],
)
def test_boxed_int_accepts_the_integer_in_the_only_box(response, answer):
    assert graded("boxed_int").reward(response, answer) == 1.0


@pytest.mark.parametrize(
    "response, answer",
    [
        ("\\boxed{9}", "8"),
        ("\\boxed{-8}", "8"),
        ("\\boxed{80}", "8"),
    ],
)
def test_boxed_int_rejects_a_wrong_integer(response, answer):
    task = graded("boxed_int")
    assert task.reward(response, answer) == 0.0 and task.extract(response) is not None


@pytest.mark.parametrize(
    "response",
    [
        "1 times 8 is still \\boxed{}.",  # math-verify grades this 8 (the last number): no answer here
        "8",  # no box
        "1 times 8 is 8.",
        "\\boxed{8.0}",  # not an integer
        "\\boxed{x = 8}",
        "\\boxed{3} or \\boxed{8}",  # hedging
        "\\boxed{8} \\boxed{8}",
        "\\boxed{\\boxed{8}}",
        "\\boxed{8",  # never closed
        "\\boxed{8} and \\boxed{",
        "",
    ],
)
def test_boxed_int_finds_no_answer_where_the_box_is_missing_empty_hedged_or_not_an_integer(response):
    task = graded("boxed_int")
    assert GRADERS["boxed_int"].extract(response) is None
    assert task.reward(response, "8") == 0.0


@pytest.mark.parametrize(
    "response, answer",
    [("12", "12"), ("12.", "12"), (" The answer is 12", "12"), ("-4", "-4"), ("12 apples", "12")],
)
def test_first_int_accepts_a_right_first_integer(response, answer):
    assert graded("first_int").reward(response, answer) == 1.0


@pytest.mark.parametrize(
    "response, answer",
    [("13", "12"), ("7 plus 5 is 12", "12"), ("4", "-4"), ("120", "12")],
)
def test_first_int_grades_the_first_integer_only(response, answer):
    task = graded("first_int")
    assert task.reward(response, answer) == 0.0 and task.extract(response) is not None


@pytest.mark.parametrize("response", ["", "twelve", "I do not know.", "\\boxed{}"])
def test_first_int_finds_no_answer_without_an_integer(response):
    assert GRADERS["first_int"].extract(response) is None
    assert graded("first_int").reward(response, "12") == 0.0


@pytest.mark.parametrize("grader", ["boxed_int", "first_int"])
def test_only_integer_references_can_be_checked(grader):
    task = graded(grader)
    assert task.answer_ok("405") and task.answer_ok("-3")
    assert not task.answer_ok("1/2") and not task.answer_ok("") and not task.answer_ok(None)
    assert task.reward("\\boxed{1}", "1/2") == 0.0  # an unreadable reference scores 0, never crashes
