"""tiny-long and its task: answers reach the configured length, the grader is exact, bad knobs fail clearly.

Lengths are in tokens of the character tokenizer (one token a character, plus <eos>). The task's reference answers
have exactly ``LongArithConfig.response_tokens`` tokens; the regimes' nominal lengths (~100, ~300, ~800) are met
within 5 %. The shipped model's greedy answers must reach the regime's length within 10 % (it may slip a step or
write a wrong digit, which changes the result, not the length).
"""

import json

import pytest
import torch

from nbkit import tasks
from nbkit.models import models
from nbkit.models.toymodels import long_arith, tiny_arith, tiny_long
from nbkit.models.toymodels.long_arith import LongArithConfig

NOMINAL = {"short": 100, "mid": 180, "medium": 300, "long": 800}


def n_tokens(text: str) -> int:
    return len(tiny_arith.build_tokenizer().encode(text, add_special_tokens=False)) + 1  # + <eos>


@pytest.mark.parametrize("regime", sorted(long_arith.REGIMES))
def test_reference_answers_have_the_configured_length(regime):
    cfg = LongArithConfig.regime(regime)
    problems = long_arith.make_problems(20, cfg, seed=3)
    lengths = {n_tokens(p["solution"]) for p in problems}
    assert lengths == {cfg.response_tokens}
    assert abs(cfg.response_tokens - NOMINAL[regime]) <= 0.05 * NOMINAL[regime]


def test_the_length_grows_with_the_step_knob():
    lengths = [LongArithConfig(steps=s).response_tokens for s in (1, 10, 40, long_arith.MAX_STEPS)]
    assert lengths == sorted(lengths) and lengths[0] < 20 and 900 < lengths[-1] < 1000


def test_solution_is_a_chain_of_exact_sums_ending_in_the_answer():
    p = long_arith.make_problems(1, LongArithConfig(steps=3), seed=0)[0]
    x, rest = p["problem"].split("+")
    d, n = rest.rstrip("=").split("*")
    assert int(n) == 3 and int(p["answer"]) == (int(x) + 3 * int(d)) % 100
    assert p["solution"].startswith(f"03{x}+{d}=") and p["solution"].endswith("|" + p["answer"])
    for step in filter(None, p["solution"].split("|")[0].split(",")):  # each <i><x>+<d>=<q>: q = (x + d) mod 10^len(q)
        lhs, q = step[2:].split("=")
        x_i, d_i = lhs.split("+")
        assert (int(x_i) + int(d_i)) % 10 ** len(q) == int(q), step


def test_problems_are_seeded_and_distinct():
    a = long_arith.make_problems(50, LongArithConfig(steps=5), seed=1)
    assert a == long_arith.make_problems(50, LongArithConfig(steps=5), seed=1)
    assert len({p["problem"] for p in a}) == 50
    assert a != long_arith.make_problems(50, LongArithConfig(steps=5), seed=2)


def test_grader_accepts_the_correct_scratchpad_and_rejects_a_wrong_one():
    task = tasks.make_task(source="long_arith", pool_size=5, long_arith=LongArithConfig.regime("medium"))
    assert task.cfg.grader == "arith"
    p = task.problems[0]
    assert task.reward(p["solution"], p["answer"]) == 1.0
    wrong = (int(p["answer"]) + 1) % 100
    body = p["solution"].rsplit("|", 1)[0]
    assert task.reward(f"{body}|{wrong:02d}", p["answer"]) == 0.0
    assert task.reward(body, p["answer"]) == 0.0  # cut before the result: no answer


@pytest.mark.parametrize(
    "kwargs,named",
    [
        (dict(steps=0), "between 1 and 90"),
        (dict(steps=91), "between 1 and 90"),
        (dict(steps="long"), "got 'long'"),
        (dict(steps=2.5), "got 2.5"),
        (dict(width=4), "one of (2, 3)"),
    ],
)
def test_bad_knob_values_name_the_valid_range(kwargs, named):
    with pytest.raises(ValueError, match="steps|width") as err:
        LongArithConfig(**kwargs)
    assert named in str(err.value)


def test_unknown_regime_names_the_choices():
    with pytest.raises(
        ValueError, match=r"unknown length regime 'huge'; choose one of \['long', 'medium', 'mid', 'short'\]"
    ):
        LongArithConfig.regime("huge")


def test_the_task_refuses_an_empty_generated_pool():
    with pytest.raises(ValueError, match="long_arith source generates problems"):
        tasks.TaskConfig(source="long_arith")


@pytest.fixture(scope="module")
def tiny_long_model():
    return models.load("tiny-long")


def test_tiny_long_loads_with_room_for_the_longest_chain(tiny_long_model):
    model, tok = tiny_long_model
    assert model.config.max_position_embeddings >= LongArithConfig(steps=long_arith.MAX_STEPS).response_tokens + 12
    assert tok.encode("12+34*05=", add_special_tokens=False) == tiny_arith.build_tokenizer().encode(
        "12+34*05=", add_special_tokens=False
    )
    build = json.loads((tiny_long.CHECKPOINT / "nbkit_build.json").read_text())
    assert build["recipe"]["max_positions"] == model.config.max_position_embeddings
    assert build["train_seconds"] > 0 and build["final_loss"] < 1.0


@pytest.mark.parametrize("regime", sorted(long_arith.REGIMES))
def test_greedy_answers_of_the_shipped_model_reach_the_regime_length(tiny_long_model, regime):
    model, tok = tiny_long_model
    cfg = LongArithConfig.regime(regime)
    problems = long_arith.make_problems(2, cfg, seed=11)
    enc = tok([p["problem"] for p in problems], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=False,
            max_new_tokens=cfg.response_tokens + 60,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    for row in out[:, enc["input_ids"].shape[1] :]:
        text = tok.decode(row, skip_special_tokens=True)
        length = n_tokens(text)
        assert abs(length - cfg.response_tokens) <= 0.1 * cfg.response_tokens, (regime, length, text[-80:])
        assert "|" in text


@pytest.mark.parametrize("regime", sorted(long_arith.REGIMES))
def test_each_regime_has_a_perfectible_set_of_tiny_long(regime):
    from nbkit.studies import tiny_long_regimes
    from nbkit.tasks import dataset

    path = tiny_long.CHECKPOINT.parent.parent / tiny_long_regimes.set_name(regime)
    card = dataset.load_card(path)
    assert card["model"] == "tiny-long" and card["task"]["source"] == "long_arith"
    assert card["task"]["long_arith"]["steps"] == long_arith.REGIMES[regime]
    assert card["counts"]["kept"] > 0
    rows = tasks.make_task(source=str(path), grader="arith").problems
    lo, hi = card["window"]
    assert len(rows) == card["counts"]["kept"]
    assert all(lo <= r["pass_rate"] <= hi and r["steps"] == long_arith.REGIMES[regime] for r in rows)
