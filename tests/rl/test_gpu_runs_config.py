"""What a long GPU run needs from its config: bounded checkpoints, gradients accumulated and reduced in FP32 under
ZeRO (as under DDP), LoRA refused where its merges would round the frozen base, and the user's own tracker."""

import json

import pytest
import torch

from nbkit.cli import plan
from nbkit.cli import train as cli_train
from nbkit.rl import RLConfig, launch
from nbkit.rl.run import grpo_config

# -- checkpoints: at most save_total_limit kept -----------------------------------------------------------------


def test_checkpoints_are_bounded_by_default_and_the_bound_is_settable():
    assert RLConfig().save_total_limit == 2
    assert grpo_config(RLConfig(checkpoint_every=5)).save_total_limit == 2
    cfg, _ = cli_train.resolve(["--checkpoint-every", "5", "--save-total-limit", "3", "--print-config"])
    assert grpo_config(cfg).save_total_limit == 3
    with pytest.raises(ValueError, match="save_total_limit"):
        RLConfig(save_total_limit=0)


def test_the_gpu_plans_runs_keep_two_checkpoints():
    for cfg in plan.run_configs("gpu"):
        assert cfg.checkpoint_every and grpo_config(cfg).save_total_limit == 2


# -- ZeRO: FP32 gradient accumulation and reduction ------------------------------------------------------------


@pytest.mark.parametrize("stage,precision", [(s, p) for s in (2, 3) for p in launch.PRECISIONS])
def test_zero_accumulates_and_reduces_gradients_in_fp32(stage, precision):
    pytest.importorskip("deepspeed", reason="DeepSpeed not installed here")
    from deepspeed.runtime.config import DeepSpeedConfig

    ds = json.loads((launch.ROOT / "configs" / "deepspeed" / f"zero{stage}-{precision}.json").read_text())
    ds.update(
        train_batch_size=16, train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=16, gradient_clipping=1.0
    )  # what transformers fills in for "auto"
    ds["zero_optimization"] = {k: (1_000_000 if v == "auto" else v) for k, v in ds["zero_optimization"].items()}
    parsed = DeepSpeedConfig(ds, mpu=None)
    assert parsed.grad_accum_dtype == "fp32"  # the engine hands ZeRO an FP32 gradient accumulation buffer
    assert parsed.communication_data_type == torch.float32  # reduce-scatter in FP32, as DDP all-reduces FP32 grads


# -- LoRA under ZeRO ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["zero2", "zero3"])
def test_lora_under_a_half_zero_launch_is_refused_with_the_reason(kind):
    env = launch.launch_env(launch.config_path(kind, "bf16"), num_processes=4)
    with pytest.raises(ValueError, match="no FP32 copy of frozen weights.*use multi_gpu or fsdp2"):
        launch.check_lora(True, "bf16", env)
    launch.check_lora(False, "bf16", env)  # all weights under ZeRO: FP32 masters for every one


@pytest.mark.parametrize("kind", ["multi_gpu", "fsdp2"])
def test_lora_under_ddp_or_fsdp2_is_allowed(kind):
    launch.check_lora(True, "fp16", launch.launch_env(launch.config_path(kind, "fp16"), num_processes=4))


# -- report_to --------------------------------------------------------------------------------------------------


def test_report_to_passes_through_to_trl_and_defaults_to_none():
    assert grpo_config(RLConfig()).report_to == []  # "none": transformers' own empty list
    assert grpo_config(RLConfig(report_to="tensorboard")).report_to == ["tensorboard"]
    with pytest.raises(ValueError, match=r"unknown report_to 'mlflow'; choose one of \('none', 'trackio'"):
        RLConfig(report_to="mlflow")
