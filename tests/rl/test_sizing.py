"""A GPU run's micro-batch and vLLM sleep come from the memory estimate when the run starts (``nbkit.rl.sizing``):
the 1.5B model on an 80 GiB device gets the accumulation ``nbkit.rl.memory`` says, PPO's critic is counted, one
sequence that cannot fit is refused before the model loads, and without a GPU nothing changes."""

import json
import types
from dataclasses import replace

import pytest
import torch

from nbkit.rl import memory, sizing
from nbkit.rl.config import RLConfig, config_from
from nbkit.rl.run import grpo_config, micro_batch
from nbkit.workbook import gpu_budget
from nbkit.workbook.profiles import PROFILES

R1 = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
SHAPE = memory.model_shape(R1)
SEQ = 8192 + 2048  # the gpu profile's max_tokens + the plan's prompt budget


def gpu_run(**overrides) -> RLConfig:
    """Notebook 03's run in the gpu profile (1.5B model, 64 prompts x 8 samples, 8,192 tokens, colocated vLLM)."""
    return config_from({**PROFILES["gpu"]["03_rl_training"]["config_overrides"], **overrides})


def test_the_15b_model_on_an_80_gib_device_gets_the_accumulation_of_the_memory_model():
    cfg = gpu_run()
    assert cfg.gradient_accumulation_steps == 1 and not cfg.vllm_enable_sleep_mode  # the profile leaves both to the run
    sized, fit = sizing.size(cfg, 1, SEQ, 80, "single_gpu")
    asleep = memory.fit_micro_batch(SHAPE, 512, SEQ, "single_gpu", 1, 80, vllm_share=0.3, vllm_sleeps=True)
    awake = memory.fit_micro_batch(SHAPE, 512, SEQ, "single_gpu", 1, 80, vllm_share=0.3, vllm_sleeps=False)
    assert asleep.micro_batch > awake.micro_batch  # sleeping frees vLLM's 24 GiB for activations: chosen
    assert (sized.gradient_accumulation_steps, sized.vllm_enable_sleep_mode) == (
        asleep.gradient_accumulation_steps,
        True,
    )
    assert fit == asleep and fit.peak_gib <= memory.HEADROOM * 80
    args = grpo_config(sized, SEQ)  # what TRL is given
    assert args.per_device_train_batch_size == asleep.micro_batch == 8  # FP32 checkpointed states (issue 54)
    assert args.gradient_accumulation_steps == 64 and args.vllm_enable_sleep_mode
    # 4 DDP trainers hold a quarter of the batch each: the same micro-batch, a quarter of the accumulation
    ddp, _ = sizing.size(cfg, 4, SEQ, 80, "multi_gpu")
    assert (micro_batch(ddp, 4), ddp.gradient_accumulation_steps) == (8, 16)


def test_the_device_memory_is_read_from_cuda_when_no_size_is_stated(monkeypatch):
    cfg = gpu_run()
    assert sizing.device_gib(cfg) is None  # no GPU here and none stated: the CPU path
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=80 * 2**30))
    assert sizing.device_gib(cfg) == 80
    assert sizing.device_gib(replace(cfg, gpu_memory_gib=40)) == 40  # a stated size wins (a share of the GPU)


def test_ppos_critic_is_counted_and_what_cannot_fit_is_refused_with_the_terms():
    ppo = next(cfg for _, run, cfg in gpu_budget.notebook_runs("gpu") if run.startswith("PPO"))  # notebook 03's
    assert ppo.vllm_gpu_memory_utilization == 0.15 and ppo.prompts_per_step * ppo.num_generations == 512
    sized, fit = sizing.size(ppo, 1, SEQ, 80, "single_gpu")
    expected = memory.fit_micro_batch(
        SHAPE,
        512,
        SEQ,
        "single_gpu",
        1,
        80,
        vllm_share=0.15,
        vllm_sleeps=True,
        critic=True,
        minibatches=ppo.ppo_minibatches,
    )
    assert fit == expected and fit.states_gib > 55  # policy and critic with their AdamW states
    assert micro_batch(sized, 1) == expected.micro_batch < 16  # the critic leaves less room than GRPO's 16
    with pytest.raises(ValueError, match=r"one sequence of 10240 tokens does not fit a 80 GiB GPU: states 55\.7 GiB"):
        sizing.size(replace(ppo, vllm_gpu_memory_utilization=0.3), 1, SEQ, 80, "single_gpu")
    sharded, _ = sizing.size(replace(ppo, vllm_gpu_memory_utilization=0.3), 4, SEQ, 80, "fsdp2")  # states / 4: fits
    assert micro_batch(sharded, 4) >= 1


def test_a_larger_configured_accumulation_is_kept_and_a_smaller_one_raised():
    cap = gpu_run(gradient_accumulation_steps=128)  # 4 sequences per micro-batch: the user's cap
    assert sizing.size(cap, 1, SEQ, 80, "single_gpu")[0].gradient_accumulation_steps == 128
    assert (
        sizing.size(gpu_run(gradient_accumulation_steps=8), 1, SEQ, 80, "single_gpu")[0].gradient_accumulation_steps
        == 64
    )


def test_the_launch_kind_comes_from_accelerates_environment(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    assert sizing.launch_kind(1, {}) == "single_gpu" and sizing.launch_kind(4, {}) == "multi_gpu"
    assert sizing.launch_kind(4, {"ACCELERATE_USE_FSDP": "true"}) == "fsdp2"
    env = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": str(ds)}
    assert sizing.launch_kind(4, env) == "zero3"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    with pytest.raises(ValueError, match="ZeRO stage 1"):
        sizing.launch_kind(4, env)


def test_without_a_gpu_the_cpu_path_is_unchanged():
    cfg = RLConfig(dataset="no/such/dataset", rollout_engine="vllm", gradient_accumulation_steps=2)
    same, fit = sizing.for_device(cfg, 1)
    assert same is cfg and fit is None  # nothing read: the dataset would have been refused
    args = grpo_config(cfg)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.vllm_enable_sleep_mode) == (
        64,
        2,
        False,
    )


def test_a_run_that_cannot_fit_its_stated_gpu_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from nbkit.rl import run

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_model)
    cfg = RLConfig(
        rollout_engine="hf",
        prompts_per_step=4,
        num_generations=4,
        gpu_memory_gib=0.01,
        output_dir=str(tmp_path / "run"),
    )
    with pytest.raises(ValueError, match="one sequence of 48 tokens does not fit a 0.01 GiB GPU"):
        run.train(cfg, progress=False)
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.slow
def test_a_run_trains_with_the_accumulation_sized_for_its_stated_gpu(tmp_path):
    """tiny-arith, one step, on a stated GPU that holds 5 of its 16 sequences: 4 per micro-batch, 4 micro-batches."""
    from nbkit.rl import run

    cfg = RLConfig(
        rollout_engine="hf", prompts_per_step=4, num_generations=4, max_steps=1, output_dir=str(tmp_path / "run")
    )
    shape, seq = memory.model_shape("tiny-arith"), sizing.longest_sequence(cfg)
    room = memory.state_bytes(shape, "single_gpu", 1) + memory.activation_bytes(shape, 5, seq)
    cfg = replace(cfg, gpu_memory_gib=room / memory.HEADROOM / memory.GIB)
    result = run.train(cfg, progress=False)
    saved = json.loads((result.out / "config.json").read_text())
    assert saved["gradient_accumulation_steps"] == 4  # 16 sequences, at most 5 fit: micro-batches of 4
    assert result.steps == 1
