"""Specification of SmolLM2's short-answer task (issue 51): ``word_arith`` problems, the ``smol_answer`` template and
the ``boxed_int`` grader on its answers."""

import pytest

from nbkit import tasks
from nbkit.models.toymodels import word_arith
from nbkit.models.toymodels.word_arith import WordArithConfig


@pytest.mark.parametrize("op", sorted(word_arith.OPS))
def test_problems_are_deterministic_by_seed_distinct_and_answered_correctly(op):
    cfg = WordArithConfig(op, 3, 2)
    first, again = word_arith.make_problems(200, cfg, seed=4), word_arith.make_problems(200, cfg, seed=4)
    assert first == again and first != word_arith.make_problems(200, cfg, seed=5)
    assert len({p["problem"] for p in first}) == 200
    word, fn = word_arith.OPS[op]
    for p in first:
        _, a, w, b = p["problem"].rstrip("?").rsplit(" ", 3)
        assert w == word and len(a) == 3 and len(b) == 2 and a[0] != "0" and b[0] != "0"
        assert p["answer"] == str(fn(int(a), int(b)))


def test_every_problem_of_a_small_space_can_be_drawn():
    cfg = WordArithConfig("mul", 1, 1)
    assert cfg.space() == 81
    problems = word_arith.make_problems(81, cfg)
    assert {p["problem"] for p in problems} == {f"What is {a} times {b}?" for a in range(1, 10) for b in range(1, 10)}
    with pytest.raises(ValueError, match="between 1 and 81"):
        word_arith.make_problems(82, cfg)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(op="div"), r"unknown op 'div'; choose one of \['add', 'mul', 'sub'\]"),
        (dict(digits_a=0), "digits_a must be an integer between 1 and 6, got 0"),
        (dict(digits_b=7), "digits_b must be an integer between 1 and 6, got 7"),
    ],
)
def test_bad_parameters_are_refused_with_the_valid_choices(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WordArithConfig(**kwargs)


def test_the_source_is_registered_and_graded_by_the_strict_boxed_integer_grader():
    cfg = tasks.TaskConfig(
        source="word_arith", pool_size=5, seed=3, template="smol_answer", word_arith=WordArithConfig("sub", 3, 2)
    )
    assert "word_arith" in tasks.GENERATED_SOURCES and cfg.grader == "boxed_int"
    task = tasks.make_task(cfg)
    assert [p["problem"] for p in task.problems] == [
        p["problem"] for p in word_arith.make_problems(5, cfg.word_arith, seed=3)
    ]
    assert [p["source_index"] for p in task.problems] == list(range(5))
    with pytest.raises(ValueError, match="give pool_size > 0"):
        tasks.TaskConfig(source="word_arith", template="smol_answer")


def test_smol_answer_prompt_is_chatml_with_one_example_turn():
    prompt = tasks.TEMPLATES["smol_answer"]("What is 3 plus 4?")
    assert prompt.startswith("<|im_start|>system\nGive only the final answer")
    assert "<|im_start|>user\nWhat is 12 plus 7?<|im_end|>\n<|im_start|>assistant\n\\boxed{19}<|im_end|>\n" in prompt
    assert prompt.endswith("<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "response, reward, extracted",
    [
        ("\\boxed{405}", 1.0, "405"),  # right
        ("\\boxed{415}", 0.0, "415"),  # wrong
        ("I am not sure.", 0.0, None),  # unparsable: no answer
        ("1 times 405 is still \\boxed{}.", 0.0, None),  # an empty box: math-verify would read the last number
    ],
)
def test_grader_on_fixed_answers(response, reward, extracted):
    task = tasks.make_task(tasks.TaskConfig(source="word_arith", pool_size=1, template="smol_answer"))
    assert task.reward(response, "405") == reward
    assert task.extract(response) == extracted
