"""The accelerate configs of ``configs/accelerate``: every one parses and validates with accelerate's own launcher
code (and DeepSpeed's own config parser where DeepSpeed is installed), FP16 and BF16 are never enabled together,
and a launch for one precision refuses a run in the other."""

import json

import pytest

from nbkit.rl import RLConfig, launch, train

ALL = [(k, p) for k in launch.KINDS for p in launch.PRECISIONS]


def test_every_kind_ships_an_fp16_and_a_bf16_variant_and_nothing_else():
    shipped = sorted(p.name for p in launch.CONFIGS.glob("*.yaml"))
    assert shipped == sorted(f"{k}-{p}.yaml" for k, p in ALL)


@pytest.mark.parametrize("kind,precision", ALL)
def test_accelerate_parses_the_config_and_launches_the_requested_precision_only(kind, precision):
    env = launch.launch_env(launch.config_path(kind, precision), num_processes=None if kind == "single_gpu" else 4)
    assert launch.launched_precision(env) == precision
    if kind.startswith("zero"):
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["ACCELERATE_MIXED_PRECISION"] == "no"  # the DeepSpeed file alone decides
        ds = json.loads(open(env["ACCELERATE_DEEPSPEED_CONFIG_FILE"]).read())
        assert ds["zero_optimization"]["stage"] == int(kind[-1])
        assert ds[precision]["enabled"] is True and ds[{"fp16": "bf16", "bf16": "fp16"}[precision]]["enabled"] is False
        if precision == "fp16":  # dynamic loss scaling with the workbook's growth interval
            assert ds["fp16"]["loss_scale"] == 0 and ds["fp16"]["initial_scale_power"] == 16
            assert ds["fp16"]["loss_scale_window"] == RLConfig().loss_scale_growth_interval
            assert ds["fp16"]["hysteresis"] == 2
    else:
        assert env["ACCELERATE_MIXED_PRECISION"] == precision
        assert "ACCELERATE_DEEPSPEED_CONFIG_FILE" not in env
    if kind == "fsdp2":
        assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == "2"


@pytest.mark.parametrize("stage,precision", [(s, p) for s in (2, 3) for p in launch.PRECISIONS])
def test_accelerates_deepspeed_plugin_reads_the_precision_block(stage, precision):
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.environment import patch_environment

    env = launch.launch_env(launch.config_path(f"zero{stage}", precision), num_processes=4)
    with patch_environment(**env):
        plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == stage
    assert plugin.deepspeed_config[precision]["enabled"] is True


@pytest.mark.parametrize("stage,precision", [(s, p) for s in (2, 3) for p in launch.PRECISIONS])
def test_deepspeeds_own_parser_accepts_the_file_with_autos_filled(stage, precision):
    pytest.importorskip("deepspeed", reason="DeepSpeed not installed here")
    from deepspeed.runtime.config import DeepSpeedConfig

    ds = json.loads(
        launch.config_path(f"zero{stage}", precision)
        .parent.parent.joinpath("deepspeed", f"zero{stage}-{precision}.json")
        .read_text()
    )
    # what transformers fills in for "auto" from the TrainingArguments (one process here)
    ds.update(
        train_batch_size=16, train_micro_batch_size_per_gpu=16, gradient_accumulation_steps=1, gradient_clipping=1.0
    )
    ds["zero_optimization"] = {k: (1_000_000 if v == "auto" else v) for k, v in ds["zero_optimization"].items()}
    parsed = DeepSpeedConfig(ds, mpu=None)
    assert parsed.zero_optimization_stage == stage
    assert (parsed.float16_config.enabled, parsed.bfloat16_config.enabled) == (precision == "fp16", precision == "bf16")
    if precision == "fp16":
        assert parsed.float16_config.loss_scale == 0 and parsed.float16_config.initial_scale_power == 16


def test_a_deepspeed_config_enabling_both_is_rejected():
    with pytest.raises(ValueError, match="enables both fp16 and bf16"):
        launch.deepspeed_precision({"fp16": {"enabled": True}, "bf16": {"enabled": True}})


def test_unknown_config_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown accelerate config 'zero1'; choose one of \('single_gpu'"):
        launch.config_path("zero1", "fp16")


@pytest.mark.parametrize(
    "env,train_dtype,ok",
    [
        ({}, "fp16", True),  # not under accelerate
        ({"ACCELERATE_MIXED_PRECISION": "no"}, "fp16", True),  # accelerate's default: the run decides
        ({"ACCELERATE_MIXED_PRECISION": "fp16"}, "fp16", True),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, "fp16", False),
        ({"ACCELERATE_MIXED_PRECISION": "fp16"}, "fp32", False),
    ],
)
def test_a_launch_for_another_precision_is_refused(env, train_dtype, ok):
    if ok:
        launch.check_launch(train_dtype, env)
    else:
        with pytest.raises(ValueError, match=f"accelerate was launched for .* but train_dtype='{train_dtype}'"):
            launch.check_launch(train_dtype, env)


def test_train_refuses_a_bf16_deepspeed_launch_of_an_fp16_run_before_loading(monkeypatch, tmp_path):
    env = launch.launch_env(launch.config_path("zero2", "bf16"), num_processes=2)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", env["ACCELERATE_DEEPSPEED_CONFIG_FILE"])
    with pytest.raises(ValueError, match="launched for bf16 but train_dtype='fp16'"):
        train(RLConfig(train_dtype="fp16", model=str(tmp_path / "no-model"), output_dir=str(tmp_path / "run")))


@pytest.mark.parametrize("kind", ["fsdp2", "zero3"])
def test_a_sharded_config_without_a_gpu_is_refused_not_run_as_ddp(kind):
    env = launch.launch_env(launch.config_path(kind, "bf16"), num_processes=2)
    with pytest.raises(ValueError, match="config but there is no GPU here: the run would silently train as plain DDP"):
        launch.check_launch("bf16", env, has_accelerator=False)
    launch.check_launch("bf16", env, has_accelerator=True)
