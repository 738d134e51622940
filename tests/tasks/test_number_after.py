"""Specification of SmolLM2's RL task (issue 51): ``number_after`` problems, the ``smol_after`` template and the
``first_int`` grader on its answers."""

import pytest

from nbkit import tasks
from nbkit.models.toymodels import number_after
from nbkit.models.toymodels.number_after import NumberAfterConfig


def test_problems_are_deterministic_by_seed_distinct_and_answered_correctly():
    first, again = number_after.make_problems(300, seed=4), number_after.make_problems(300, seed=4)
    assert first == again and first != number_after.make_problems(300, seed=5)
    assert len({p["problem"] for p in first}) == 300
    for p in first:
        n = int(p["problem"].removeprefix("What number comes after ").removesuffix("?"))
        assert 10 <= n <= 999 and p["answer"] == str(n + 1)


def test_the_template_examples_are_never_drawn():
    cfg = NumberAfterConfig(20, 700)
    problems = number_after.make_problems(len(cfg.numbers()), cfg)
    asked = {p["problem"] for p in problems}
    assert len(asked) == 681 - 4
    assert not asked & {q for q, _ in number_after.EXAMPLES}
    with pytest.raises(ValueError, match="between 1 and 677"):
        number_after.make_problems(678, cfg)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lo=-1), "lo must be an integer between 0 and 999999, got -1"),
        (dict(hi=10**6), "hi must be an integer between 0 and 999999, got 1000000"),
        (dict(lo=50, hi=40), "hi must be >= lo, got lo=50, hi=40"),
        (dict(lo=23, hi=23), r"holds only the template's example numbers \[23, 59, 347, 699\]"),
    ],
)
def test_bad_ranges_are_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NumberAfterConfig(**kwargs)


def test_the_source_is_registered_with_its_template_and_strict_grader():
    cfg = tasks.TaskConfig(source="number_after", pool_size=5, seed=3, template="smol_after")
    assert "number_after" in tasks.GENERATED_SOURCES and cfg.grader == "first_int"
    task = tasks.make_task(cfg)
    assert task.problems == [{**p, "source_index": i} for i, p in enumerate(number_after.make_problems(5, seed=3))]
    with pytest.raises(ValueError, match="give pool_size > 0"):
        tasks.TaskConfig(source="number_after", template="smol_after")


def test_smol_after_prompt_is_chatml_asking_for_the_number_with_four_example_turns():
    prompt = tasks.TEMPLATES["smol_after"]("What number comes after 128?")
    assert prompt == (
        "<|im_start|>system\nAnswer with the number only.<|im_end|>\n"
        "<|im_start|>user\nWhat number comes after 23?<|im_end|>\n<|im_start|>assistant\n24<|im_end|>\n"
        "<|im_start|>user\nWhat number comes after 59?<|im_end|>\n<|im_start|>assistant\n60<|im_end|>\n"
        "<|im_start|>user\nWhat number comes after 347?<|im_end|>\n<|im_start|>assistant\n348<|im_end|>\n"
        "<|im_start|>user\nWhat number comes after 699?<|im_end|>\n<|im_start|>assistant\n700<|im_end|>\n"
        "<|im_start|>user\nWhat number comes after 128?<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    "response, reward, extracted",
    [
        ("348", 1.0, "348"),  # right
        ("348.", 1.0, "348"),
        ("349", 0.0, "349"),  # wrong
        ("347 is followed by 348", 0.0, "347"),  # the number only: the first integer is the answer
        ("less than 19", 0.0, "19"),
        ("I am not sure.", 0.0, None),  # unparsable: no answer
    ],
)
def test_grader_on_fixed_answers(response, reward, extracted):
    task = tasks.make_task(tasks.TaskConfig(source="number_after", pool_size=1, template="smol_after"))
    assert task.reward(response, "348") == reward
    assert task.extract(response) == extracted
