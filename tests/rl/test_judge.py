"""The held-out judge (``nbkit.rl.judge``): the policy's accuracy on problems it never trained on, sampled by an FP32
engine holding the trainer's current weights, logged at step 0, every ``judge_every`` steps and at the last step.

The unit tests hand the judge a stand-in trainer (the shipped tiny-arith weights behind TRL's weight-iterator
interface); one slow test trains for real and checks the rows.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from nbkit import engines, tasks
from nbkit.models import models
from nbkit.records import schema
from nbkit.rl import RLConfig, amp, judge, train
from nbkit.runtime import paths
from nbkit.tasks import heldout

JUDGE_SET = "data/tiny_arith_heldout"
TRAIN_SET = "data/tiny_arith_sanity"


class StandIn:
    """What the judge reads of a trainer: its accelerator and TRL's named-weights iterator."""

    def __init__(self, model):
        self.model = model
        self.accelerator = SimpleNamespace(process_index=0, num_processes=1, device=torch.device("cpu"))
        self.vllm_generation = SimpleNamespace(
            _iter_named_params=lambda: ((n, p.data) for n, p in model.named_parameters())
        )


@pytest.fixture(scope="module")
def judge_problems():
    cfg = RLConfig(dataset=TRAIN_SET, judge_every=1)
    train_problems = tasks.make_task(tasks.TaskConfig(source=TRAIN_SET, template="raw", grader="arith")).problems
    return judge.load_set(cfg, train_problems)


def small_judge(judge_problems, n=48, samples=2) -> judge.Judge:
    task, problems = judge_problems
    return judge.Judge(RLConfig(judge_every=1, judge_samples=samples, max_completion_length=40), task, problems[:n])


@pytest.fixture
def policy():
    model, _ = models.load("tiny-arith", "fp32")
    return model


# -- the held-out set ----------------------------------------------------------------------------------------


def test_the_judge_set_is_large_and_shares_no_problem_with_anything_tiny_arith_saw(judge_problems):
    task, problems = judge_problems
    assert len(problems) >= judge.MIN_PROBLEMS
    texts = {p["problem"] for p in problems}
    assert len(texts) == len(problems)
    train_texts = {p["problem"] for p in tasks.make_task(tasks.TaskConfig(source=TRAIN_SET)).problems}
    assert not texts & train_texts
    assert not texts & {p["problem"] for p in heldout.seen_tiny_arith_problems()}  # nor its SFT problems
    assert all(task.answer_ok(p["answer"]) for p in problems)
    assert "tiny_arith_heldout" in (paths.DATA / "README.md").read_text()  # data/README.md says how it was made


def test_unseen_drops_exactly_the_seen_problems():
    a, b, c = ({"problem": t, "answer": "0"} for t in ("1+1=", "2+2=", "3+3="))
    assert heldout.unseen([a, b, c], [b, {"problem": "9+9="}]) == [a, c]


def test_a_judge_set_that_overlaps_the_training_set_or_is_too_small_is_refused_before_any_model_loads(
    tmp_path, arith_jsonl, monkeypatch
):
    from transformers import AutoModelForCausalLM

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the judge set was checked")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_model)
    with pytest.raises(ValueError, match=r"judge_set 'data/tiny_arith_sanity' shares 585 problems with the training"):
        train(RLConfig(dataset=TRAIN_SET, judge_every=2, judge_set=TRAIN_SET, output_dir=str(tmp_path / "a")))
    with pytest.raises(ValueError, match=r"has 64 problems .* the judge needs at least 256"):
        train(RLConfig(dataset=TRAIN_SET, judge_every=2, judge_set=arith_jsonl, output_dir=str(tmp_path / "b")))


# -- the judge on a stand-in trainer ---------------------------------------------------------------------------


def test_the_judge_samples_in_fp32_and_counts_every_response(judge_problems, policy):
    j = small_judge(judge_problems)
    out = j.evaluate(StandIn(policy), step=0)
    assert set(out[schema.JUDGE_MATMUL_DTYPES]) == {"fp32"} and out[schema.JUDGE_MATMUL_DTYPES]["fp32"] > 0
    assert out[schema.JUDGE_RESPONSES] == 48 * 2
    assert 0.2 < out[schema.JUDGE_ACCURACY] < 0.8  # problems kept for pass rates in [0.2, 0.8]
    assert next(j.engine.model.parameters()).dtype == torch.float32
    j.close()


def test_the_judge_grades_the_trainers_current_weights(judge_problems, policy):
    j = small_judge(judge_problems)
    before = j.evaluate(StandIn(policy), step=1)[schema.JUDGE_ACCURACY]
    with torch.no_grad():
        policy.lm_head.weight.zero_()  # uniform next-token distribution: no sum comes out right
    after = j.evaluate(StandIn(policy), step=1)[schema.JUDGE_ACCURACY]
    assert before > 0.2 and after == 0.0
    j.close()


def test_the_judge_is_reproducible_and_leaves_trainings_random_stream_alone(judge_problems, policy):
    j = small_judge(judge_problems)
    torch.manual_seed(11)
    expected = torch.rand(4)
    torch.manual_seed(11)
    first = j.evaluate(StandIn(policy), step=4)[schema.JUDGE_ACCURACY]
    assert torch.equal(torch.rand(4), expected)  # as if the judge had not run
    assert j.evaluate(StandIn(policy), step=4)[schema.JUDGE_ACCURACY] == first  # same weights, same step
    j.close()


def test_a_judge_whose_matmuls_are_not_fp32_stops_the_run(judge_problems, policy, monkeypatch):
    real = engines.HFEngine
    monkeypatch.setattr(engines, "HFEngine", lambda model, dtype, **kw: real(model, "bf16", **kw))
    j = small_judge(judge_problems, n=4, samples=1)
    with pytest.raises(amp.PrecisionError, match="the held-out judge must sample in FP32, but its matmuls ran in"):
        j.evaluate(StandIn(policy), step=2)
    j.close()


# -- a real run --------------------------------------------------------------------------------------------------


def short_run(tmp_path, name, **kw):
    cfg = RLConfig(
        dataset=TRAIN_SET,
        algorithm="dr_grpo",
        train_dtype="fp32",
        rollout_dtype="bf16",
        max_steps=3,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=40,
        learning_rate=1e-3,
        seed=5,
        output_dir=str(tmp_path / name),
        **kw,
    )
    return train(cfg, progress=False).rows


@pytest.mark.slow
def test_a_run_logs_the_judge_at_step_0_every_k_steps_and_the_last_and_trains_as_without_it(tmp_path, judge_problems):
    judged = short_run(tmp_path, "judged", judge_every=2, judge_samples=1)
    plain = short_run(tmp_path, "plain")
    assert [r[schema.STEP] for r in judged] == [0, 1, 2, 3]
    assert [schema.JUDGE_ACCURACY in r for r in judged] == [True, False, True, True]  # 0, every 2nd, the last
    assert set(judged[0]) == {
        schema.STEP,
        schema.JUDGE_ACCURACY,
        schema.JUDGE_RESPONSES,
        schema.JUDGE_MATMUL_DTYPES,
        schema.TIME_JUDGE,
    }  # step 0: before any update, the judge alone
    n = len(judge_problems[1])
    for row in (judged[0], judged[2], judged[3]):
        assert row[schema.JUDGE_RESPONSES] == n
        assert set(row[schema.JUDGE_MATMUL_DTYPES]) == {"fp32"}  # FP32 judge beside a BF16 rollout engine
        assert 0 <= row[schema.JUDGE_ACCURACY] <= 1
    for a, b in zip(judged[1:], plain, strict=True):  # the judge changes nothing of training
        assert (
            a[schema.ACCURACY] == b[schema.ACCURACY] and a["loss"] == b["loss"] and a["audit/rollout_dtype"] == "bf16"
        )
    for key in (
        schema.ESS_TOKEN,
        schema.ESS_SEQ,
        schema.PPL_RATIO,
        schema.LOG_PPL_DIFF,
        schema.GRAD_NORM,
        schema.ENTROPY,
        schema.PHANTOM_FRACTION,
    ):  # the mechanism metrics, every step
        assert all(key in r for r in plain), key
        assert all(schema.known(k) for r in judged for k in r)


def test_a_judged_runs_step_0_row_is_not_a_step():
    from pathlib import Path

    from nbkit.rl.run import RunResult

    rows = [{schema.STEP: 0, schema.JUDGE_ACCURACY: 0.5}, {schema.STEP: 1, schema.ACCURACY: 1.0}]
    result = RunResult(Path("run"), rows, 0.0, [])
    assert result.steps == 1 and result.final_accuracy == 1.0
