"""The user's own tracker (``RLConfig.report_to``): refused when it could not record the run, and fed every key of
the workbook's metric rows (mismatch, audit, loss scale, timings) beside TRL's own.

No tracker package is installed here: the feed is checked with a transformers ``TrainerCallback`` registered as a
reporting integration, which receives the ``on_log`` payloads a tracker's callback would."""

import importlib.util

import pytest
from transformers import TrainerCallback
from transformers.integrations import integration_utils

from nbkit.records.runlog import MetricsLog
from nbkit.rl import RLConfig, trackers, train


def test_wandb_under_the_workbooks_wandb_mode_disabled_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match=r"report_to='wandb' but WANDB_MODE=disabled"):
        trackers.check_report_to("wandb", {"WANDB_MODE": "disabled"})


def test_no_tracker_needs_nothing():
    trackers.check_report_to("none", {"WANDB_MODE": "disabled"})


@pytest.mark.parametrize("tracker", ["trackio", "wandb"])
def test_a_tracker_whose_package_is_missing_is_refused_before_the_run(tracker):
    if importlib.util.find_spec(tracker) is not None:
        pytest.skip(f"{tracker} is installed here")
    with pytest.raises(ValueError, match=rf"report_to='{tracker}' needs the '{tracker}' package.*pip install"):
        trackers.check_report_to(tracker, {"WANDB_MODE": "online"})


def test_a_run_reporting_to_wandb_with_wandb_mode_disabled_stops_before_anything_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")  # what nbkit.runtime.paths.cache_env sets unless the user set it first
    cfg = RLConfig(report_to="wandb", model=str(tmp_path / "no-model"), output_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="WANDB_MODE=disabled"):
        train(cfg, progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


class Recorder(TrainerCallback):
    """Stands where a tracker's callback stands (transformers' reporting integrations): keeps each on_log payload."""

    payloads: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        Recorder.payloads.append(dict(logs or {}))


@pytest.mark.slow
def test_every_key_of_the_workbooks_metric_rows_reaches_the_trackers_callbacks(
    tmp_path, tiny_random_model, arith_jsonl, monkeypatch
):
    Recorder.payloads = []
    monkeypatch.setitem(integration_utils.INTEGRATION_TO_CALLBACK, "tensorboard", Recorder)
    monkeypatch.setitem(trackers.PACKAGES, "tensorboard", ("transformers",))  # no tensorboard installed here
    cfg = RLConfig(
        model=tiny_random_model,
        dataset=arith_jsonl,
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        train_dtype="fp16",
        rollout_engine="hf",
        report_to="tensorboard",
        output_dir=str(tmp_path / "run"),
    )
    rows = MetricsLog.read(train(cfg, progress=False).out / "metrics.jsonl")
    steps = [p for p in Recorder.payloads if "loss" in p]  # the end-of-run summary carries train_loss instead
    assert [r["step"] for r in rows] == [1, 2] and len(steps) == 2
    for row, payload in zip(rows, steps):
        missing = set(row) - {"step"} - set(payload)
        assert not missing, sorted(missing)
        for key in ("mismatch/token_abs_logp_diff/mean", "audit/matmul_dtypes", "loss_scale", "time/rollout"):
            assert payload[key] == row[key], key
    assert steps[0]["audit/scaler_enabled"] is True and steps[0]["loss_scale"] > 0  # FP16's live scaler
