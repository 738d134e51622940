"""``nbkit plan``: the printed commands are exact — each trainer command parses into the profile's RLConfig, its
accelerate config launches the run's precision, and each server serves the rollout dtype with TRL's flags."""

import re
import shlex

import pytest

from nbkit.cli import plan
from nbkit.cli import train as cli_train
from nbkit.rl import launch, sizing
from nbkit.runtime.paths import ROOT
from nbkit.workbook import gpu_budget


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
        assert (
            cfg.model,
            cfg.algorithm,
            cfg.train_dtype,
            cfg.max_steps,
            cfg.learning_rate,
            cfg.max_completion_length,
        ) == (
            want.model,
            want.algorithm,
            want.train_dtype,
            want.max_steps,
            want.learning_rate,
            want.max_completion_length,
        )
        assert cfg.rollout_engine == "vllm" and cfg.vllm_mode == mode
        config_file = argv[argv.index("--config_file") + 1]
        processes = int(argv[argv.index("--num_processes") + 1])
        env = launch.launch_env(ROOT / config_file, num_processes=processes)
        launch.check_launch(cfg.train_dtype, env)  # the config launches the run's own precision
        assert processes == (1 if want.algorithm == "ppo" else 4 if mode == "server" else 8)
        assert (cfg.prompts_per_step * cfg.num_generations) % processes == 0


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


@pytest.fixture
def python3_at(monkeypatch):
    """Sets the version the preflight reads from the node's ``python3`` (and the interpreters found on PATH), so a
    test never depends on this machine's interpreter."""
    from nbkit import preflight

    def at(version, newer=None):
        monkeypatch.setattr(preflight, "interpreter_version", lambda python: version if python == "python3" else None)
        monkeypatch.setattr(preflight, "newer_python", lambda needed: newer)

    return at


def test_the_commands_run_as_printed_on_a_fresh_node(python3_at):
    """Install first, then the model into the project's cache, then servers and trainers: every executable the
    venv's, and every command that names the hub model online (the workbook's entry points default offline);
    notebook 04's grid trains the project's own tiny-long, offline."""
    python3_at((3, 12, 3))
    steps = plan.make_plan("gpu", gpus=8).steps
    assert steps[0] == (steps[0][0], [f"make venv TORCH_SPEC={plan.GPU_VLLM_SPEC} VLLM_SPEC="])
    model = plan.run_configs("gpu")[0].model
    assert steps[1][1] == [f"HF_HOME=.cache/hf HF_HUB_OFFLINE=0 .venv/bin/hf download {model}"]
    assert {c.model for c in gpu_budget.hunt_runs("gpu").values()} == {"tiny-long"}  # shipped in data/models
    for title, lines in steps[2:]:
        for argv in commands("\n".join(lines)):
            exe = next(a for a in argv if "=" not in a)
            assert exe.startswith(".venv/bin/"), (title, exe)
            if argv[argv.index(exe) + 1] == "study":  # notebook 04's grid: nothing to download, stays offline
                assert not any(a.startswith("HF_") for a in argv), argv
                continue
            assert model in argv and "HF_HUB_OFFLINE=0" in argv[: argv.index(exe)]
    from nbkit.runtime import paths

    assert paths.cache_env()["HF_HUB_OFFLINE"] == "1"  # why the flag is needed: the entry points' default


@pytest.mark.parametrize("gpus", [8, 1])
def test_the_install_line_names_a_newer_python_only_when_the_nodes_python3_is_too_old(python3_at, gpus):
    """The GPU vLLM needs Python >= 3.11 (its wheel's Requires-Python): with a new enough ``python3`` the install
    line is plain ``make venv``; with Ubuntu 22.04's 3.10 it passes ``PYTHON=`` a newer interpreter found on PATH,
    and the preflight line above names the old version and that fix; with none on PATH it says what to install."""
    install = f"TORCH_SPEC={plan.GPU_VLLM_SPEC} VLLM_SPEC="
    python3_at((3, 11, 0))
    fine = plan.make_plan("gpu", gpus=gpus)
    assert fine.steps[0][1] == [f"make venv {install}"]
    assert not [p for p in fine.preflight if p.startswith("Python")]
    python3_at((3, 10, 12), newer="python3.12")
    old = plan.make_plan("gpu", gpus=gpus)
    assert old.steps[0][1] == [f"make venv PYTHON=python3.12 {install}"]
    assert [p for p in old.preflight if p.startswith("Python")] == [
        "Python 3.10.12 (python3) is older than the 3.11 the GPU vLLM needs: run make with PYTHON=python3.12"
    ]
    assert "# preflight: Python 3.10.12 (python3)" in old.text()
    python3_at((3, 10, 12), newer=None)
    none = plan.make_plan("gpu", gpus=gpus)
    assert none.steps[0][1] == [f"make venv {install}"]
    (line,) = [p for p in none.preflight if p.startswith("Python")]
    assert "install Python 3.11 or newer" in line and "pass PYTHON=..." in line


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


def study_commands(text: str) -> list[list[str]]:
    return [c for c in commands(text) if ".venv/bin/nbkit" in c and "study" in c]


@pytest.mark.parametrize("gpus", [8, 1])
def test_the_plan_runs_notebook_04s_hunt_grid_one_shard_per_gpu(gpus):
    """Notebook 04's live grid (issue 54, deliver 2): ``nbkit study hunt_tiny_long run`` once per GPU, shard i of
    ``gpus`` on GPU i, with the very options notebook 04 passes under the profile, so the shards train exactly the
    notebook's runs into the notebook's folders; each response length's estimate printed above."""
    from nbkit.cli import study as cli_study
    from nbkit.studies import hunt
    from nbkit.studies.catalog import STUDIES

    text = plan.make_plan("gpu", gpus=gpus).text()
    shards = study_commands(text)
    assert len(shards) == gpus
    notebook = gpu_budget.hunt_runs("gpu")
    assert len(notebook) == 3 * 3 * 3 * 3 * 2  # the gpu profile's lengths x lrs x algorithms x seeds x dtypes
    for i, argv in enumerate(shards):
        assert argv[0] == f"CUDA_VISIBLE_DEVICES={i}" and argv[1] == ".venv/bin/nbkit"
        assert argv[2:5] == ["study", hunt.STUDY, "run"] and argv[argv.index("--shard") + 1] == f"{i}/{gpus}"
        options = cli_study.parse_options([argv[j + 1] for j, a in enumerate(argv) if a == "--set"])
        cli_study.check_options(STUDIES[hunt.STUDY], options)  # nbkit study accepts every option
        assert options == gpu_budget.hunt_options("gpu")
        assert STUDIES[hunt.STUDY].grid(**options) == notebook
    assert {c.output_dir.rsplit("/", 1)[0] for c in notebook.values()} == {"runs/gpu/04_hunt"}  # the profile's
    for length in ("short", "medium", "long"):
        assert f"# hunt {length}, fp16; hunt {length}, bf16: per training GPU (estimate" in text


def test_the_plans_ppo_and_hunt_runs_follow_the_notebooks_parameters(monkeypatch):
    """One source of truth: the plan prints the PPO slice and the hunt grid the notebooks would run under the
    profile (``nbkit.workbook.gpu_budget``, which ``nbkit gpu-budget`` sizes), not a list of its own."""
    from nbkit.workbook.profiles import PROFILES

    monkeypatch.setitem(PROFILES["gpu"]["03_rl_training"], "ppo_dtypes", ["bf16"])
    monkeypatch.setitem(PROFILES["gpu"]["03_rl_training"], "ppo_seeds", [0, 1])
    monkeypatch.setitem(PROFILES["gpu"]["04_where_bf16_breaks"], "live_lengths", ["long"])
    text = plan.make_plan("gpu", gpus=8).text()
    ppo_lines = [ln for ln in text.splitlines() if "--algorithm ppo" in ln]
    assert len(ppo_lines) == 2 and all("--train-dtype bf16" in ln for ln in ppo_lines)  # bf16 only, seeds 0 and 1
    assert ["--seed 1" in ln for ln in ppo_lines] == [False, True]
    shard = study_commands(text)[0]
    assert shard[shard.index("--set") + 1] == 'lengths=["long"]'
    assert "# hunt long, fp16; hunt long, bf16" in text and "hunt short" not in text
    budget_runs = {(nb, run) for nb, run, _ in gpu_budget.notebook_runs("gpu")}
    assert ("03_rl_training", "PPO (critic), fp16") not in budget_runs  # gpu-budget reads the same slice
    assert {r for r in budget_runs if r[0] == "04_where_bf16_breaks"} == {
        ("04_where_bf16_breaks", "hunt long, fp16"),
        ("04_where_bf16_breaks", "hunt long, bf16"),
    }
    for printed, notebook in zip(plan.ppo_configs("gpu"), gpu_budget.ppo_runs("gpu").values()):
        kept = ("output_dir", "overwrite", "checkpoint_every")  # what the plan sets: its folders, resumable runs
        assert {k: v for k, v in vars(printed).items() if k not in kept} == {
            k: v for k, v in vars(notebook).items() if k not in kept
        }


def test_an_80gb_card_reporting_79_6_gib_gets_no_memory_warning_and_sizes_the_default_plan(monkeypatch):
    """Issue 72, item 2: ``nvidia-smi`` on an H100 80GB says 81,559 MiB (79.6 GiB); the default ``--gpu-gib`` is
    that size, and ``--gpu-gib 80`` is no warning either; a 40 GB card still is."""
    from nbkit import preflight

    answers = {"memory.total": "81559\n" * 8, "driver_version": "580.95.05\n" * 8}  # nvidia-smi's recorded answers
    monkeypatch.setattr(preflight, "_output", lambda program, *args: answers.get(args[0].partition("=")[2]))
    default = plan.make_plan("gpu", gpus=8)
    assert default.gpu_gib == 79.6 and default.text().startswith("# 8 GPUs of 79.6 GiB")
    for printed in (default, plan.make_plan("gpu", gpus=8, gpu_gib=80)):
        assert not [p for p in printed.preflight if "GiB, less than" in p], printed.preflight
    answers["memory.total"] = "40960\n" * 8
    (small,) = [p for p in plan.make_plan("gpu", gpus=8, gpu_gib=80).preflight if "less than" in p]
    assert small.startswith("8 of 8 GPUs hold 40.0 GiB, less than the 80 GiB")


def test_the_server_serves_the_models_resolved_path_within_its_positions():
    """Issue 72, item 3: a shipped model's name is no hub id, and ``--max-model-len`` above its positions (128 for
    tiny-arith) stops vLLM at start-up; the 1.5B model's context (131,072) holds the plan's 2,048 + max_tokens."""
    from nbkit.rl import RLConfig, memory

    tiny = plan.server_command(RLConfig(model="tiny-arith", max_completion_length=24, rollout_engine="vllm"), 1, 8123)
    assert tiny[tiny.index("serve") + 1] == "data/models/tiny-arith" and (ROOT / "data/models/tiny-arith").is_dir()
    assert int(tiny[tiny.index("--max-model-len") + 1]) == memory.model_shape("tiny-arith").context == 128
    for argv in [c for c in commands(plan.make_plan("gpu", gpus=8).text()) if "serve" in c]:
        cfg = plan.run_configs("gpu")[0]
        assert argv[argv.index("serve") + 1] == cfg.model
        assert int(argv[argv.index("--max-model-len") + 1]) == cfg.max_completion_length + sizing.PROMPT_BUDGET


def test_the_server_listens_on_localhost_on_free_ports_and_says_to_restart_it_after_a_crash():
    """Issue 72, items 5-7: the dev-mode server (weight updates, collective RPC) on 127.0.0.1 unless
    ``--server-host`` says otherwise; its port and accelerate's rendezvous found free (or given), never 8000 / 29500;
    under each server a line naming what to restart after a crashed run."""
    import socket

    printed = plan.make_plan("gpu", gpus=8).text()
    servers = [c for c in commands(printed) if "serve" in c]
    trainers = [c for c in commands(printed) if ".venv/bin/accelerate" in c]
    ports = {int(s[s.index("--port") + 1]) for s in servers}
    (port,) = ports
    rendezvous = {int(c[c.index("--main_process_port") + 1]) for c in trainers}
    assert len(trainers) == 6 and len(rendezvous) == 1 and not (ports | rendezvous) & {8000, 29500, 51216}
    for free in ports | rendezvous:
        with socket.socket() as s:
            s.bind(("", free))  # free on this node (nothing of the plan listens yet)
    assert {s[s.index("--host") + 1] for s in servers} == {"127.0.0.1"}
    assert {c[c.index("--vllm-server-base-url") + 1] for c in trainers} == {f"http://127.0.0.1:{port}"}
    lines = printed.splitlines()
    for i, line in enumerate(lines):
        if " serve " in line:
            assert lines[i + 1] == plan.RESTART_LINE and "stop this server and start it again" in lines[i + 1]
    given = plan.make_plan("gpu", gpus=8, port=8123, host="10.0.0.5", main_process_port=29511).text()
    assert {c[c.index("--host") + 1] for c in commands(given) if "serve" in c} == {"10.0.0.5"}
    assert "--vllm-server-base-url http://10.0.0.5:8123" in given and "--main_process_port 29511" in given
