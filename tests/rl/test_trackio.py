"""``report_to='trackio'`` end to end, offline: a tiny run reports to trackio's local store (``TRACKIO_DIR`` under the
test's folder, no Space, ``HF_HUB_OFFLINE=1``), and trackio's own API, in a fresh process, reads back the run with
TRL's loss and the workbook's metrics (mismatch, audit, loss scale) at each of its optimiser steps."""

import json
import os
import subprocess
import sys

import pytest

from nbkit.records.runlog import MetricsLog
from nbkit.runtime.paths import ROOT

pytest.importorskip("trackio")

TRAIN = """
from nbkit.runtime import paths; paths.setup_environment()
from nbkit.rl import RLConfig, train
train(RLConfig(max_steps=2, prompts_per_step=2, num_generations=2, max_completion_length=12, train_dtype="fp16",
               rollout_engine="hf", report_to="trackio", output_dir={out!r}), progress=False)
"""

READ = """
import json, trackio
from trackio.sqlite_storage import SQLiteStorage
runs = list(trackio.Api().runs("huggingface"))  # TrainingArguments.project's default
print(json.dumps([{"name": r.name, "output_dir": r.config.get("output_dir"),
                   "logs": SQLiteStorage.get_logs("huggingface", r.name, run_id=r.id)} for r in runs], default=str))
"""


def _python(code: str, env: dict) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_a_run_reported_to_trackio_offline_is_read_back_by_trackio(tmp_path):
    env = {
        **os.environ,
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = tmp_path / "run"
    _python(TRAIN.format(out=str(out)), env)
    assert (tmp_path / "trackio" / "huggingface.db").exists()  # trackio's local store, where TRACKIO_DIR says

    (run,) = json.loads(_python(READ, env).splitlines()[-1])  # one run, read by trackio itself
    assert run["output_dir"] == str(out)  # the run's TrainingArguments: its folder names it
    rows = MetricsLog.read(out / "metrics.jsonl")
    steps = [log for log in run["logs"] if "train/loss" in log]  # TRL's per-step log (its profiling rows aside)
    assert [r["step"] for r in rows] == [1, 2]
    assert [log["train/global_step"] for log in steps] == [1, 2]  # one row per optimiser step, in order
    for row, log in zip(rows, steps):
        assert log["train/loss"] == pytest.approx(row["loss"])  # TRL's loss
        for key in (
            "mismatch/token_abs_logp_diff/mean",
            "mismatch/kl_k3",
            "loss_scale",
            "audit/matmul_dtypes",
            "audit/scaler_enabled",
            "time/rollout",
        ):  # the workbook's mismatch, audit, scaler, timings
            expected = pytest.approx(row[key]) if isinstance(row[key], float) else row[key]
            assert log[f"train/{key}"] == expected, key
        numeric = {k for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}
        assert not {k for k in numeric if f"train/{k}" not in log}, "workbook metrics missing in trackio"
    assert steps[0]["train/audit/scaler_enabled"] is True and steps[0]["train/loss_scale"] > 0  # FP16's live scaler
