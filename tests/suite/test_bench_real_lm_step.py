"""``benchmarks/bench_real_lm_step.py``'s options and the pieces its comparisons rest on: bad options are refused
naming the choices, a step's tokens are its own, two runs' throughput is summed from their step rates, and TRL's own
``GRPOTrainer`` fed the workbook's rollouts steps on the same batch (same prompts, same loss)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_real_lm_step as bench  # noqa: E402


def refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_bad_template_is_refused_naming_the_templates(capsys):
    line = refusal(capsys, ["--template", "chatty"])
    assert "'chatty'" in line and "qwen_math" in line and "smol_answer" in line


def test_an_unknown_algorithm_is_refused_naming_the_presets(capsys):
    line = refusal(capsys, ["--algorithm", "grpo2"])
    assert "'grpo2'" in line and "'grpo'" in line and "'dr_grpo'" in line


def test_an_unknown_gemm_policy_is_refused_naming_the_policies(capsys):
    line = refusal(capsys, ["--gemm", "amx"])
    assert "'amx'" in line and "'bf16-split'" in line and "'fp32-accumulate'" in line
    assert bench.parse_args(["--gemm", "bf16-split"]).gemm == "bf16-split" and bench.parse_args([]).gemm == "auto"


def test_vs_trl_compares_fp32_and_bf16_and_refuses_fp16(capsys):
    assert bench.parse_args(["--vs-trl"]).dtypes == ["fp32", "bf16"]
    assert bench.parse_args([]).dtypes == ["fp32", "bf16", "fp16"]
    line = refusal(capsys, ["--vs-trl", "--dtypes", "fp32", "fp16"])
    assert "['fp16']" in line and "['fp32', 'bf16']" in line


def test_vs_trl_refuses_an_algorithm_whose_loss_reads_the_rollouts_log_probs(capsys):
    """Plain TRL puts μ into the loss only on its vLLM path: such a preset would not be the same step."""
    line = refusal(capsys, ["--vs-trl", "--algorithm", "grpo_token_tis"])
    assert "'grpo_token_tis'" in line and "'grpo'" in line and "grpo_mu_old" not in line
    assert bench.parse_args(["--vs-trl", "--algorithm", "dr_grpo"]).algorithm == "dr_grpo"


def test_a_count_below_one_is_refused(capsys):
    assert "--samples 0" in refusal(capsys, ["--samples", "0"])


def test_a_steps_tokens_are_its_own_not_the_runs_so_far():
    """TRL's ``num_tokens`` counts every token since the run began: step 2's prompt tokens are not step 1's too."""
    rows = [
        {"step": 1, "num_tokens": 1000.0, "completions/mean_length": 50.0},
        {"step": 2, "num_tokens": 1900.0, "completions/mean_length": 40.0},
    ]
    assert bench.step_tokens(rows, 2, 4) == {"prompt": 900.0 - 160.0, "completion": 160.0}
    assert bench.step_tokens(rows, 1, 4) == {"prompt": 800.0, "completion": 200.0}


class Tokenizing:
    """A trainer's ``_tokenize_prompts`` (TRL's: ids, images, multimodal fields), one id per character."""

    def _tokenize_prompts(self, prompts):
        return [[ord(c) for c in p] for p in prompts], None, {}


def test_replay_hands_back_the_recorded_batches_in_order_and_refuses_other_prompts():
    rollouts = bench.Rollouts(
        batches=[([[97], [97]], [[1, 2], [3]], [[-0.5, -0.1], [-2.0]]), ([[98]], [[4]], [[-1.0]])]
    )
    fn = bench.replay(rollouts)
    assert fn(["a", "a"], Tokenizing()) == {
        "prompt_ids": [[97], [97]],
        "completion_ids": [[1, 2], [3]],
        "logprobs": [[-0.5, -0.1], [-2.0]],
    }
    with pytest.raises(RuntimeError, match="batch 2: the plain TRL trainer drew other prompts"):
        fn(["c"], Tokenizing())
    assert fn(["b"], Tokenizing())["completion_ids"] == [[4]]
    with pytest.raises(RuntimeError, match="asked for batch 3; the workbook generated 2"):
        fn(["b"], Tokenizing())


def test_two_runs_throughput_is_their_summed_step_rates_over_one_runs():
    """The first step (engine and kernels warming) is left out when a run has more."""
    alone = {"wall": 100.0, "rows": [[{"step": 1, "time/step": 9.0}, {"step": 2, "time/step": 2.0}]]}
    pair = {
        "wall": 125.0,
        "rows": [
            [{"step": 1, "time/step": 9.0}, {"step": 2, "time/step": 2.5}],
            [{"step": 1, "time/step": 9.0}, {"step": 2, "time/step": 4.0}],
        ],
    }
    ratio = bench.throughput(alone, pair)
    assert ratio["steps"] == pytest.approx(2.0 / 2.5 + 2.0 / 4.0)
    assert ratio["runs"] == pytest.approx(1.6)


@pytest.mark.slow
def test_trls_own_trainer_fed_the_workbooks_rollouts_takes_the_same_step(tmp_path, tiny_random_model, arith_jsonl):
    """Two FP32 steps of the workbook's trainer and of plain ``trl.GRPOTrainer`` with the same config and the
    workbook engine's rollouts: the same prompts (``replay`` checks each batch), the same loss and gradient norm to
    the bit (the brevity reward: answers of different lengths, so the advantages and the gradient are not zero)."""
    import dataclasses

    from nbkit.rl import RLConfig, train

    cfg = RLConfig(
        model=tiny_random_model,
        dataset=arith_jsonl,
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=8,
        reward="brevity",
        train_dtype="fp32",
        output_dir=str(tmp_path / "workbook"),
    )
    rollouts = bench.Rollouts()
    undo = bench.record(rollouts)
    try:
        rows = train(cfg, progress=False).rows
    finally:
        undo()
    assert len(rollouts.batches) == 2 and len(rollouts.batches[0][0]) == 4
    trl = bench.trl_cell(dataclasses.replace(cfg, output_dir=str(tmp_path / "trl")), rollouts)
    assert rollouts.served == 2
    assert [(r["loss"], r["grad_norm"]) for r in trl] == [(r["loss"], r["grad_norm"]) for r in rows]
    assert any(r["grad_norm"] > 0 for r in rows)
    assert all(r["time/step"] > r["score"] > 0 for r in trl)
