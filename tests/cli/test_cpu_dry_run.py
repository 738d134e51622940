"""The gpu profile's launches dry-run on CPU (``nbkit.cli.dry_run``): the very accelerate/DeepSpeed config files of
``nbkit plan`` with only ``num_processes`` changed (8 GPUs -> 2 CPU processes, gloo), tiny-arith for the 1.5B model.
DDP trains the profile's first step; FSDP2 and ZeRO cannot run here, and each test pins down exactly why, so the
"What a CPU cannot check" list of docs/gpu.md stays true (its list is generated from the launch kinds)."""

import json
import socket
import subprocess
import sys

import pytest
import yaml

from nbkit.cli import dry_run
from nbkit.cli.plan import run_configs, trainer_flags
from nbkit.records.runlog import MetricsLog
from nbkit.rl import launch
from nbkit.runtime.paths import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(config, *module_and_args) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config),
        "--main_process_port",
        str(free_port()),
        "-m",
        *module_and_args,
    ]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_cpu_configs_are_the_plans_with_only_the_process_count_changed(tmp_path):
    for kind in dry_run.KINDS:
        for precision in launch.PRECISIONS:
            original = yaml.safe_load(launch.config_path(kind, precision).read_text())
            derived = yaml.safe_load(dry_run.cpu_config(kind, precision, tmp_path).read_text())
            changed = {k for k in original.keys() | derived.keys() if original.get(k) != derived.get(k)}
            ds = original.get("deepspeed_config", {}).get("deepspeed_config_file")
            assert changed == ({"num_processes", "deepspeed_config"} if ds else {"num_processes"})
            assert derived["num_processes"] == 2
            if ds:  # the same DeepSpeed file, named from the project root
                assert derived["deepspeed_config"] == {
                    **original["deepspeed_config"],
                    "deepspeed_config_file": str(ROOT / ds),
                }


def test_the_gpu_page_lists_what_a_cpu_cannot_check_for_every_launch_kind():
    assert set(dry_run.CPU_CANNOT) == set(launch.KINDS)
    assert set(dry_run.KINDS) == set(launch.KINDS) - {"single_gpu"}
    section = (ROOT / "docs" / "gpu.md").read_text().split("## What a CPU cannot check")[1]
    assert dry_run.readme_section() in section


@pytest.mark.slow
def test_ddp_trains_the_gpu_profiles_first_step_on_two_cpu_processes(tmp_path):
    cfg = dry_run.first_run(str(tmp_path / "run"))
    first = run_configs("gpu")[0]
    assert (cfg.algorithm, cfg.train_dtype, cfg.learning_rate, cfg.seed) == (
        first.algorithm,
        first.train_dtype,
        first.learning_rate,
        first.seed,
    )
    config = dry_run.cpu_config("multi_gpu", cfg.train_dtype, tmp_path)
    done = accelerate_launch(config, "nbkit.cli.train", *trainer_flags(cfg), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = MetricsLog.read(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_processes"] == 2
    assert rows[0]["ranks/reward_count"] == [4, 4]  # each rank scored its half of 2 prompts x 4 samples
    assert rows[0]["audit/scaler_enabled"] is True  # the profile's first run is FP16: a live loss scaler


@pytest.mark.slow
def test_fsdp2_cannot_run_under_accelerates_cpu_backend(tmp_path):
    config = dry_run.cpu_config("fsdp2", "bf16", tmp_path)
    done = accelerate_launch(config, "nbkit.cli.dry_run")
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(ranks) == 2  # two processes started, but each alone: accelerate built no FSDP and no process group
    assert {(r["distributed_type"], r["num_processes"], r["fsdp_policy_installed"]) for r in ranks} == {
        ("DistributedType.NO", 1, False)
    }
    refused = accelerate_launch(config, "nbkit.cli.train", *trainer_flags(dry_run.first_run(str(tmp_path / "run"))))
    assert refused.returncode != 0 and "FSDP config but there is no GPU here" in refused.stderr


@pytest.fixture(scope="module")
def deepspeed_shm_op():
    """DeepSpeed's shared-memory comm op, which its CPU backend compiles on first use (~45 s in a fresh clone; then
    loaded from ``TORCH_EXTENSIONS_DIR``): built once, before both ZeRO launches, on the worker that runs them (their
    group in ``tests/conftest.py``). Two workers' launches each waited on torch's build lock while the other built."""
    from deepspeed.accelerator import get_accelerator

    get_accelerator().create_op_builder("ShareMemCommBuilder").load()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["zero2", "zero3"])
def test_zero_stops_at_deepspeeds_batch_check_on_cpu(tmp_path, kind, deepspeed_shm_op):
    done = accelerate_launch(dry_run.cpu_config(kind, "bf16", tmp_path), "nbkit.cli.dry_run")
    assert done.returncode != 0
    assert "Setting accelerator to CPU" in done.stdout + done.stderr  # DeepSpeed's own CPU fallback
    assert dry_run.DEEPSPEED_CPU_ERROR in done.stderr
