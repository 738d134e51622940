"""The project's own models are trained by a short SFT loop: a few steps of it lower the loss on its batches."""

from __future__ import annotations

from dataclasses import replace

from nbkit.models.toymodels import tiny_arith, tiny_long


def test_tiny_arith_sft_runs_its_steps_and_logs_a_finite_falling_loss():
    _, _, log = tiny_arith.train(replace(tiny_arith.TinyArithConfig(), steps=8), progress=False)
    losses = [r["loss"] for r in log]
    assert len(losses) == 8 and all(x == x for x in losses)
    assert sum(losses[-3:]) < sum(losses[:3])


def test_tiny_long_sft_resumes_from_its_state_file(tmp_path):
    cfg = replace(tiny_long.TinyLongConfig(), steps=4)
    *_, done = tiny_long.train(cfg, max_seconds=0.0, state=tmp_path, progress=False)  # stops after one step
    assert not done and (tmp_path / "state.pt").exists()
    _, _, log, done = tiny_long.train(cfg, state=tmp_path, progress=False)
    assert done and [r["step"] for r in log] == [0, 1, 2, 3]
    assert all(r["loss"] > 0 for r in log)
