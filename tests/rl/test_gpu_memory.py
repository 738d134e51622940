"""The memory estimate of the gpu profile's runs: PPO's critic and its optimiser counted, TRL's chunked head (no
full logits) modelled, and every run of notebooks 03 and 05 sized to fit one 80 GiB GPU."""

from nbkit.rl import memory
from nbkit.runtime.paths import ROOT
from nbkit.workbook import gpu_budget

SHAPE = memory.model_shape("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")


def test_ppos_critic_and_its_adamw_state_are_counted():
    critic = memory.state_bytes(SHAPE, "multi_gpu", 4, critic=True) - memory.state_bytes(SHAPE, "multi_gpu", 4)
    backbone = SHAPE.params - SHAPE.vocab * SHAPE.hidden  # the critic copies the backbone, not the untied lm_head
    assert abs(critic - 18 * backbone) < 18 * 2 * SHAPE.hidden
    assert 25 < critic / memory.GIB < 27  # weights, gradients, two AdamW moments, half copies: ~26 GiB
    sharded = memory.state_bytes(SHAPE, "zero3", 4, critic=True) - memory.state_bytes(SHAPE, "zero3", 4)
    assert abs(sharded - critic * 16 / 18 / 4) < 64 * SHAPE.hidden  # sharded like the policy's


def test_trls_chunked_head_builds_no_full_logits():
    tokens = 10_240
    fused = memory.head_bytes(SHAPE, tokens)
    full = memory.head_bytes(SHAPE, tokens, fused=False)
    assert full == tokens * memory.LOGIT_BYTES * SHAPE.vocab  # ~8.7 GiB for one sequence (half + saved FP32)
    assert fused < full / 4  # one tile and the FP32 lm_head gradient, not a logit per token and vocabulary entry
    # the fused head grows with hidden size per token, not with the vocabulary
    assert memory.head_bytes(SHAPE, 2 * tokens) - fused < 2 * tokens * 8 * SHAPE.hidden


def test_every_run_of_the_gpu_profiles_notebooks_fits_one_gpu():
    rows = gpu_budget.budget("gpu")
    kinds = {(r.notebook, r.run.split(",")[0].split(" /")[0]) for r in rows}
    assert ("03_rl_training", "PPO (critic)") in kinds and ("05_precision_ablation", "train fp32") in kinds
    too_big = [(r.notebook, r.run, round(r.peak_gib, 1)) for r in rows if not r.fits]
    assert too_big == []


def test_the_gpu_pages_table_is_the_estimate():
    assert gpu_budget.table(gpu_budget.budget("gpu")) in (ROOT / "docs" / "gpu.md").read_text()


def test_ppos_critic_activations_are_counted_checkpointed_beside_the_policys():
    """Issue 72, item 4: the critic's forward and backward run inside π's loss, so its activations are held beside
    π's; checkpointed like π (≈ 3 GiB for one 10,240-token sequence of the 1.5B model) rather than whole (≈ 35)."""
    tokens = 10_240
    checkpointed = memory.critic_activation_bytes(SHAPE, 1, tokens) / memory.GIB
    whole = memory.critic_activation_bytes(SHAPE, 1, tokens, checkpointing=False) / memory.GIB
    assert 2.5 < checkpointed < 4 and 30 < whole < 40
    args = dict(shape=SHAPE, share=8, seq_tokens=tokens, kind="single_gpu", trainers=1, gpu_gib=80, largest=1)
    grpo, ppo = memory.fit_micro_batch(**args), memory.fit_micro_batch(**args, critic=True)
    assert abs(ppo.activations_gib - grpo.activations_gib - checkpointed) < 1e-9
