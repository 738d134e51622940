"""RLConfig.fp32_lm_head: the trainer's LM head in FP32 through TRL's own cast_lm_head_to_fp32 (its fused head reads
lm_head.weight directly: the audit records what TRL ran with), the HF engine's head in FP32 audited by the dtype of
the logits it produced, and a vLLM engine-side head (no such switch here) refused before anything loads."""

import pytest

from nbkit.rl import RLConfig, train


def run(tmp_path, model, data, where):
    return train(
        RLConfig(
            model=model,
            dataset=data,
            max_steps=1,
            prompts_per_step=2,
            num_generations=2,
            max_completion_length=8,
            train_dtype="fp16",
            fp32_lm_head=where,
            output_dir=str(tmp_path / where),
        ),
        progress=False,
    ).rows


@pytest.mark.slow
@pytest.mark.parametrize(
    "where,trainer,engine",
    [("none", "fp16", "fp16"), ("trainer", "fp32", "fp16"), ("engine", "fp16", "fp32"), ("both", "fp32", "fp32")],
)
def test_each_side_audits_the_dtype_its_head_produced(where, trainer, engine, tmp_path, tiny_random_model, arith_jsonl):
    (row,) = run(tmp_path, tiny_random_model, arith_jsonl, where)
    assert row["audit/trl_cast_lm_head_to_fp32"] is (trainer == "fp32") and row["audit/engine_lm_head_dtype"] == engine
    assert set(row["audit/matmul_dtypes"]) == {"fp16"}  # every linear layer the trainer ran as a module: FP16


def test_bad_values_and_a_vllm_engine_side_head_are_refused():
    with pytest.raises(ValueError, match=r"unknown fp32_lm_head 'head'; choose one of \('none', 'trainer'"):
        RLConfig(fp32_lm_head="head")
    with pytest.raises(ValueError, match="fp32_lm_head='both' needs an FP32 head in the engine.*'vllm'"):
        RLConfig(fp32_lm_head="both", rollout_engine="vllm")
    assert RLConfig(fp32_lm_head="trainer", rollout_engine="vllm").fp32_lm_head == "trainer"
