"""``nbkit plan``: the printed commands are exact — each trainer command parses into the profile's RLConfig, its
accelerate config launches the run's precision, and each server serves the rollout dtype with TRL's flags."""

import re
import shlex

import pytest

from nbkit.cli import plan
from nbkit.cli import train as cli_train
from nbkit.rl import launch
from nbkit.runtime.paths import ROOT


def commands(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("mode", plan.MODES)
def test_every_trainer_command_is_the_profiles_run_under_the_matching_accelerate_config(mode):
    printed = plan.make_plan("gpu", gpus=8, mode=mode).text()
    trainers = [c for c in commands(printed) if ".venv/bin/accelerate" in c]
    grpo, ppo = plan.run_configs("gpu"), plan.ppo_configs("gpu")
    expected = [c for d in ("fp16", "bf16") for c in grpo + ppo if c.train_dtype == d]
    assert len(trainers) == len(expected) == 6  # grpo, pg_seq_is and notebook 03's ppo, in FP16 and BF16
    for argv, want in zip(trainers, expected):
        i = argv.index("nbkit.cli.train")
        cfg, _ = cli_train.resolve(argv[i + 1 :])
        assert (cfg.model, cfg.algorithm, cfg.train_dtype, cfg.steps, cfg.lr, cfg.max_tokens) == (
            want.model,
            want.algorithm,
            want.train_dtype,
            want.steps,
            want.lr,
            want.max_tokens,
        )
        assert cfg.rollout_engine == "vllm" and cfg.vllm_mode == mode
        config_file = argv[argv.index("--config_file") + 1]
        processes = int(argv[argv.index("--num_processes") + 1])
        env = launch.launch_env(ROOT / config_file, num_processes=processes)
        launch.check_launch(cfg.train_dtype, env)  # the config launches the run's own precision
        assert processes == (1 if want.algorithm == "ppo" else 4 if mode == "server" else 8)
        assert (cfg.prompts_per_step * cfg.samples_per_prompt) % processes == 0


def test_each_precision_gets_a_server_in_that_dtype_with_trls_flags():
    printed = plan.make_plan("gpu", gpus=8).text()
    servers = [c for c in commands(printed) if "serve" in c]
    assert [s[s.index("--dtype") + 1] for s in servers] == ["float16", "bfloat16"]
    for s in servers:
        assert s[0].startswith("CUDA_VISIBLE_DEVICES=4,5,6,7") and s[1] == "VLLM_SERVER_DEV_MODE=1"
        assert s[2:5] == ["HF_HOME=.cache/hf", "HF_HUB_OFFLINE=0", ".venv/bin/vllm"]  # online, the venv's vLLM
        assert s[s.index("--logprobs-mode") + 1] == "processed_logprobs"  # what TRL's IS correction needs
        assert "--weight-transfer-config" in s and s[s.index("--tensor-parallel-size") + 1] == "4"


def test_a_gpu_count_that_cannot_split_the_batch_names_the_ones_that_can():
    with pytest.raises(
        ValueError,
        match=r"512 completions cannot be split evenly over 7 processes.*"
        r"--server-gpus in \[4, 6, 7\]",
    ):
        plan.make_plan("gpu", gpus=8, server_gpus=1)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"profile": "laptop"}, "unknown profile 'laptop'"),
        ({"profile": "cpu"}, "profile 'cpu' sets no RL algorithms"),  # the notebook's own defaults: nothing to plan
        ({"mode": "remote"}, "unknown mode 'remote'"),
        ({"gpus": 1, "mode": "server"}, "server mode needs >= 2 GPUs"),
        ({"kind": "zero1"}, "unknown accelerate config 'zero1'"),
    ],
)
def test_bad_requests_are_refused_with_the_choices(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plan.make_plan(**{"profile": "gpu", **kwargs})


def test_what_the_readme_says_plan_prints_is_what_it_prints():
    """The README describes `nbkit plan --profile gpu --gpus 8` instead of pasting it: a vLLM server per precision
    on 4 GPUs (its dtype, context and processed log-probs), training on the other 4 with the matching accelerate
    config, each under a memory estimate."""
    readme = (ROOT / "README.md").read_text()
    assert "nbkit plan --profile gpu --gpus 8" in readme
    text = plan.make_plan("gpu", gpus=8).text()
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in text and "vllm serve" in text and "--max-model-len" in text
    assert "--dtype float16" in text and "--dtype bfloat16" in text and "processed_logprobs" in text
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3 HF_HUB_OFFLINE=0 .venv/bin/accelerate launch" in text
    assert "configs/accelerate/multi_gpu-fp16.yaml" in text and "configs/accelerate/multi_gpu-bf16.yaml" in text
    assert "memory.py" in text and "peak" in text


def test_the_commands_run_as_printed_on_a_fresh_node():
    """Install first, then the model into the project's cache, then servers and trainers: every executable the
    venv's, and every command that names the hub model online (the workbook's entry points default offline)."""
    steps = plan.make_plan("gpu", gpus=8).steps
    assert steps[0] == (steps[0][0], [f"make venv TORCH_SPEC={plan.GPU_VLLM_SPEC} VLLM_SPEC="])
    model = plan.run_configs("gpu")[0].model
    assert steps[1][1] == [f"HF_HOME=.cache/hf HF_HUB_OFFLINE=0 .venv/bin/hf download {model}"]
    for title, lines in steps[2:]:
        for argv in commands("\n".join(lines)):
            exe = next(a for a in argv if "=" not in a)
            assert exe.startswith(".venv/bin/"), (title, exe)
            assert model in argv and "HF_HUB_OFFLINE=0" in argv[: argv.index(exe)]
    from nbkit.runtime import paths

    assert paths.cache_env()["HF_HUB_OFFLINE"] == "1"  # why the flag is needed: the entry points' default


def test_a_local_model_needs_no_download_and_stays_offline(tmp_path):
    assert plan.is_hub_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    assert not plan.is_hub_model(str(tmp_path)) and not plan.is_hub_model("tiny-arith")


def test_the_plan_runs_notebook_03s_ppo_in_one_process_each():
    """PPO's critic trains in one process (the trainer refuses more): the plan gives each PPO run one GPU and the
    single-GPU config, sized for it, instead of a DDP command that would stop at start-up (issue 54, item 2)."""
    text = plan.make_plan("gpu", gpus=8).text()
    ppo_lines = [ln for ln in text.splitlines() if "--algorithm ppo" in ln]
    assert len(ppo_lines) == 2  # fp16 and bf16
    for line in ppo_lines:
        assert "--num_processes 1" in line and "configs/accelerate/single_gpu-" in line
        assert line.startswith("CUDA_VISIBLE_DEVICES=0 ")
    assert text.count("# PPO (critic in one process): per training GPU") == 2


def test_the_plan_prints_the_nodes_preflight_failures_and_a_newer_python():
    configs = plan.run_configs("gpu")
    problems, python = plan.node_preflight(
        configs,
        80,
        python_version=(3, 10, 12),
        better_python="python3.12",
        driver="550.54.15",
        gpus=[80.0] * 8,
        free=10 * 2**30,
    )
    assert python == "python3.12"
    assert [p.split(" ")[0] for p in problems] == ["Python", "NVIDIA", "10"]  # one line each: python, driver, disk
    assert "checkpoints need" in problems[2]
    fine, none = plan.node_preflight(
        configs, 80, python_version=(3, 12, 1), driver="580.95.05", gpus=[80.0] * 8, free=2**50
    )
    assert (fine, none) == ([], None)
