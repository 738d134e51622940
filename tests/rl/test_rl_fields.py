"""The RL settings that used to be hard-coded are RLConfig fields that reach TRL and the rollout engine."""

import json

import pytest

from nbkit.rl import RLConfig, train
from nbkit.rl.run import grpo_config
from nbkit.tasks import arith
from nbkit.toymodels import tiny_arith


def test_sampling_kl_and_vllm_memory_fields_reach_trls_config(tmp_path):
    cfg = RLConfig(top_p=0.9, top_k=20, beta=0.04, vllm_gpu_memory_utilization=0.5, output_dir=str(tmp_path))
    args = grpo_config(cfg)
    assert (args.top_p, args.top_k, args.beta, args.vllm_gpu_memory_utilization) == (0.9, 20, 0.04, 0.5)
    assert args.per_device_train_batch_size == cfg.prompts_per_step * cfg.samples_per_prompt  # one process


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("top_p", 1.5, "top_p must be in (0, 1]"),
        ("top_k", -1, "top_k must be >= 0"),
        ("beta", -0.1, "beta must be >= 0"),
        ("vllm_gpu_memory_utilization", 0.0, "vllm_gpu_memory_utilization must be in (0, 1]"),
        ("hf_engine_batch_size", 0, "hf_engine_batch_size must be >= 1"),
        ("vllm_max_num_batched_tokens", 0, "vllm_max_num_batched_tokens must be >= 1"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
        RLConfig(**{field: value})


@pytest.mark.slow
def test_a_run_with_a_kl_penalty_top_p_and_small_engine_batches_trains(tmp_path):
    model = tmp_path / "tiny"
    spec = tiny_arith.TinyArithConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, seed=1)
    tiny_arith.build_model(spec).save_pretrained(model)
    tiny_arith.build_tokenizer().save_pretrained(model)
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in arith.make_problems(16, seed=7)))
    result = train(
        RLConfig(
            model=str(model),
            dataset=str(data),
            steps=1,
            prompts_per_step=2,
            samples_per_prompt=2,
            max_tokens=12,
            top_p=0.9,
            beta=0.04,
            hf_engine_batch_size=1,
            train_dtype="bf16",
            output_dir=str(tmp_path / "run"),
        ),
        progress=False,
    )
    row = result.rows[0]
    assert "kl" in row  # TRL logs the KL to the reference model only when beta > 0
    assert row["audit/rollout_dtype"] == "bf16" and row["ranks/reward_count"] == [4]


def test_gradient_checkpointing_is_trls_default_and_can_be_turned_off(tmp_path):
    assert grpo_config(RLConfig(output_dir=str(tmp_path))).gradient_checkpointing is True
    assert grpo_config(RLConfig(gradient_checkpointing=False, output_dir=str(tmp_path))).gradient_checkpointing is False


@pytest.mark.slow
def test_gradient_checkpointing_changes_the_time_not_the_numbers(tmp_path, arith_jsonl):
    """Two FP16 steps under fp32-accumulate (the AVX2 CPU's policy: attention routed, recomputed in backward) with
    and without checkpointing: the same losses, gradient norms and mismatch, to the bit."""
    runs = {
        on: train(
            RLConfig(
                dataset=arith_jsonl,
                steps=2,
                prompts_per_step=2,
                samples_per_prompt=2,
                max_tokens=20,
                train_dtype="fp16",
                gemm="fp32-accumulate",
                gradient_checkpointing=on,
                output_dir=str(tmp_path / str(on)),
            ),
            progress=False,
        ).rows
        for on in (True, False)
    }
    keys = ("loss", "grad_norm", "mismatch/token_abs_logp_diff/mean", "reward")
    assert [[row[k] for k in keys] for row in runs[True]] == [[row[k] for k in keys] for row in runs[False]]
    assert all(row["audit/gemm_routed"]["sdpa/fp16"] > 0 for rows in runs.values() for row in rows)
