"""Specification of nbkit.tasks: templates, sources, and answer checking on tricky answers."""

import json

import datasets
import pytest

from nbkit.tasks import (
    GRADERS,
    TEMPLATES,
    Task,
    TaskConfig,
    arith,
    load_problems,
    make_task,
    normalize_answer,
    parse_reference,
)


def math_task(template="qwen_math") -> Task:
    return Task(TaskConfig(source="inline", template=template), problems=[])


# ---------------------------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    "response, answer",
    [
        ("so the answer is \\boxed{\\frac{1}{2}}", "1/2"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\dfrac{3}{4}}", "0.75"),
        ("\\boxed{\\boxed{\\frac{1}{2}}}", "\\frac12"),  # nested boxes, bare LaTeX reference
        ("We get $x = \\boxed{-3}$.", "-3"),
        ("\\boxed{1,000}", "1000"),  # thousands separator in the response
        ("\\boxed{1000}", "1,000"),  # ... and in the reference
        ("\\boxed{142}", "142.0"),  # amc stores floats
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{x^2+2x}", "x(x+2)"),
        ("\\boxed{2\\sqrt{3}}", "2\\sqrt3"),
    ],
)
def test_math_verify_accepts_equivalent_answers(response, answer):
    assert math_task().reward(response, answer) == 1.0


@pytest.mark.parametrize(
    "response, answer",
    [
        ("\\boxed{3}", "-3"),  # sign matters
        ("\\boxed{12}", "1,2"),  # "1,2" is a set, not twelve
        ("\\boxed{\\frac{2}{3}}", "\\frac{1}{2}"),
        ("\\boxed{3}, no wait: \\boxed{7}", "7"),  # math-verify reads several boxes as a set:
        ("\\boxed{7}, no wait: \\boxed{3}", "7"),  # hedging is never rewarded
    ],
)
def test_math_verify_rejects_wrong_answers(response, answer):
    assert math_task().reward(response, answer) == 0.0


@pytest.mark.parametrize("response", ["", "I do not know.", "\\boxed{}", "\\boxed{", "}}}\\frac{", "\\boxed{\\sqrt{"])
def test_no_answer_is_incorrect_not_a_crash(response):
    task = math_task()
    assert task.reward(response, "5") == 0.0
    answer = task.grader.extract(response)  # the grader itself: ``Task.extract`` would hide an exception
    assert answer is None or isinstance(answer, str)


def test_no_answer_extracts_none():
    assert math_task().extract("I do not know.") is None
    assert math_task().extract("\\boxed{\\frac{1}{2}}") is not None


def test_unreadable_reference_scores_zero_and_is_flagged():
    task = math_task()
    assert task.reward("\\boxed{5}", None) == 0.0
    assert not task.answer_ok(None)
    assert not task.answer_ok("")
    assert task.answer_ok("\\frac{1}{2}")


def test_reference_with_its_own_box_is_parsed_as_written():
    solution = "Since $2+3=5$, the answer is $\\boxed{5}$."  # a MATH `solution` column
    assert parse_reference(solution)
    assert math_task().reward("\\boxed{5}", solution) == 1.0
    assert math_task().reward("\\boxed{6}", solution) == 0.0


def test_r1_distill_grades_only_after_think():
    task = math_task("r1_distill_qwen")
    assert task.cfg.grader == "r1_distill"
    assert task.reward("maybe \\boxed{5}? still thinking", "5") == 0.0  # no </think>: no answer yet
    assert task.extract("maybe \\boxed{5}? still thinking") is None
    assert task.reward("hmm \\boxed{4}</think>The answer is \\boxed{5}.", "5") == 1.0
    assert task.reward("hmm \\boxed{5}</think>The answer is \\boxed{4}.", "5") == 0.0


@pytest.mark.parametrize(
    "raw, expected",
    [
        (142.0, "142"),
        (0.25, "0.25"),
        (["9.6\n"], "9.6"),
        (["1", "2"], "1, 2"),
        (None, None),
        ("  ", None),
        (7, "7"),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_arith_grader_is_nbkit_arith():
    task = make_task(TaskConfig(source="arith", pool_size=3))
    p = task.problems[0]
    assert task.cfg.grader == "arith" and task.prompt(p) == p["problem"]  # the raw template
    assert task.reward(p["solution"], p["answer"]) == 1.0
    assert task.reward(p["solution"] + "9", p["answer"]) == 0.0
    assert task.reward("1+2+0=03", p["answer"]) == 0.0 and task.extract("1+2+0=03") is None
    assert not task.answer_ok("12a")
    assert GRADERS["arith"].correct is arith.is_correct


# ---------------------------------------------------------------------------------------------- templates


def test_templates():
    assert TEMPLATES["raw"]("1+1") == "1+1"
    assert TEMPLATES["qwen_math"]("Q?") == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    )
    r1 = TEMPLATES["r1_distill_qwen"]("Q?")
    assert r1.startswith("<｜begin▁of▁sentence｜><｜User｜>Q? Please reason") and r1.endswith(
        "<｜Assistant｜><think>\n"
    )
    assert "\\boxed{}" in TEMPLATES["plain"]("Q?") and TEMPLATES["plain"]("Q?").startswith("Q?")
    with pytest.raises(ValueError, match="unknown template"):
        TaskConfig(template="nope")


# ---------------------------------------------------------------------------------------------- sources


def test_arith_source_is_seeded_and_has_knobs():
    a = load_problems(TaskConfig(source="arith", pool_size=20, seed=1))
    assert a == load_problems(TaskConfig(source="arith", pool_size=20, seed=1))
    assert a != load_problems(TaskConfig(source="arith", pool_size=20, seed=2))
    two = load_problems(TaskConfig(source="arith", pool_size=5, arith=arith.ArithConfig(digits=2)))
    assert all(len(p["problem"]) == len("12+34=") for p in two)
    with pytest.raises(ValueError, match="pool_size"):
        TaskConfig(source="arith", pool_size=0)


def test_shipped_sources():
    assert len(load_problems(TaskConfig(source="sanity_math_1460"))) == 1460
    math500 = load_problems(TaskConfig(source="eval/math", pool_size=50, seed=3))
    assert len(math500) == 50 and len({p["source_index"] for p in math500}) == 50
    amc = load_problems(TaskConfig(source="eval/amc"))
    assert all(isinstance(p["answer"], str) for p in amc)  # floats normalised to text


def _rows():
    return [
        {"question": "What is $1+1$?", "final": "2", "level": 1},
        {"question": "What is $\\frac{1}{2}+\\frac{1}{2}$?", "final": "1", "level": 2},
    ]


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "dataset", "datasetdict"])
def test_local_sources_with_custom_columns(tmp_path, kind):
    rows = _rows()
    if kind == "jsonl":
        path = tmp_path / "p.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    elif kind == "json":
        path = tmp_path / "p.json"
        path.write_text(json.dumps(rows))
    elif kind == "parquet":
        path = tmp_path / "p.parquet"
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    elif kind == "dataset":
        path = tmp_path / "ds"
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    else:
        path = tmp_path / "dd"
        datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(path))
    task = make_task(TaskConfig(source=str(path), problem_key="question", answer_key="final", template="plain"))
    assert [p["problem"] for p in task.problems] == [r["question"] for r in rows]
    assert [p["answer"] for p in task.problems] == ["2", "1"]
    assert [p["level"] for p in task.problems] == [1, 2]  # other columns are kept
    assert task.reward("\\boxed{2}", task.problems[0]["answer"]) == 1.0


def test_missing_column_names_it_and_lists_available(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows()))
    with pytest.raises(ValueError) as err:
        load_problems(TaskConfig(source=str(path), problem_key="question"))  # answer_key "answer" missing
    msg = str(err.value)
    assert "'answer'" in msg and "question" in msg and "final" in msg and "level" in msg


def test_empty_and_missing_sources(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_problems(TaskConfig(source=str(empty)))
    with pytest.raises(FileNotFoundError, match="not found"):
        load_problems(TaskConfig(source=str(tmp_path / "nope.parquet")))


def test_datasetdict_with_several_splits_needs_a_split(tmp_path):
    ds = datasets.Dataset.from_list([{"problem": "1+1", "answer": "2"}])
    datasets.DatasetDict({"a": ds, "b": ds}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match="split"):
        load_problems(TaskConfig(source=str(tmp_path / "dd")))
    assert len(load_problems(TaskConfig(source=str(tmp_path / "dd"), split="b"))) == 1
