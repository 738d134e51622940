"""Two processes for real on CPU: ``accelerate launch --num_processes 2`` (gloo) trains tiny-arith with the HF engine.

One ``metrics.jsonl`` (rank 0), rewards gathered across ranks and equal to the per-rank logs, the precision audit
run on every rank, and a resume from a checkpoint across ranks without duplicate rows. ~1 min on 2 cores.
"""

import json
import socket
import subprocess
import sys

import pytest

from nbkit.rl import RLConfig, train

RUN = [
    "--model",
    "tiny-arith",
    "--prompts-per-step",
    "2",
    "--samples-per-prompt",
    "2",
    "--max-tokens",
    "40",
    "--train-dtype",
    "fp16",
    "--rollout-engine",
    "hf",
    "--checkpoint-every",
    "2",
    "--quiet",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out, *extra) -> subprocess.CompletedProcess:
    """``accelerate launch`` of ``nbkit train`` on 2 CPU processes (``--multi_gpu`` is accelerate's torchrun
    launcher; without CUDA it runs gloo on CPU)."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        "-m",
        "nbkit.cli.train",
        *RUN,
        "--output-dir",
        str(out),
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_two_processes_train_log_once_gather_rewards_audit_every_rank_and_resume(tmp_path):
    out = tmp_path / "mp"
    launch(out, "--steps", "3")
    launch(out, "--steps", "4", "--resume")  # continues from checkpoint-2: step 3 recomputed, not duplicated

    metrics = rows(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3, 4]
    per_rank = {k: rows(out / "ranks" / f"rank-{k}.jsonl") for k in (0, 1)}
    for k, own in per_rank.items():
        assert [r["step"] for r in own] == [1, 2, 3, 4] and {r["rank"] for r in own} == {k}
    for i, row in enumerate(metrics):
        sums, counts = row["ranks/reward_sum"], row["ranks/reward_count"]
        assert counts == [2, 2]  # 2 prompts x 2 samples split over 2 processes
        assert sums == [per_rank[k][i]["reward_sum"] for k in (0, 1)]
        assert row["reward"] == pytest.approx(sum(sums) / sum(counts))  # TRL's gathered mean = the ranks' sums
        assert row["ranks/audit_matmul_dtypes"] == [per_rank[k][i]["audit/matmul_dtypes"] for k in (0, 1)]
        assert all(set(a) == {"fp16"} for a in row["ranks/audit_matmul_dtypes"])
        assert row["loss_scale"] > 0 and row["audit/rollout_dtype"] == "fp16"
    assert json.loads((out / "summary.json").read_text())["num_processes"] == 2

    single = train(
        RLConfig(
            model="tiny-arith",
            prompts_per_step=2,
            num_generations=2,
            max_completion_length=40,
            max_steps=2,
            output_dir=str(tmp_path / "one"),
        ),
        progress=False,
    ).rows
    assert set(single[0]) == set(metrics[0]), "a 2-process row differs in format from a 1-process row"
    assert single[0]["ranks/reward_count"] == [4] and not (tmp_path / "one" / "ranks").exists()


def test_a_batch_that_does_not_split_over_the_processes_is_refused(monkeypatch):
    from nbkit.rl.run import per_device_batch

    assert per_device_batch(RLConfig(prompts_per_step=2, num_generations=2), 2) == 2
    with pytest.raises(ValueError, match="6 completions cannot be split evenly over 4 processes"):
        per_device_batch(RLConfig(prompts_per_step=3, num_generations=2), 4)
