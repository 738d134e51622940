"""The brevity toy study's table: convergence is the first 3-step mean length at or under 10 % of max_tokens."""

from __future__ import annotations

from pathlib import Path

from nbkit.studies import brevity


def _rows(lengths: list[float], mismatch: float) -> list[dict]:
    return [
        {
            "step": i + 1,
            "completions/mean_length": n,
            "reward": -n / 128,
            "mismatch/token_abs_logp_diff/mean": mismatch,
            "clip/phantom_fraction": 0.0,
            "time/step": 30.0,
        }
        for i, n in enumerate(lengths)
    ]


def meta_of(runs: dict) -> dict:
    """Coordinates as ``BrevityStudy.coords`` reads them from each run's config."""
    out = {}
    for label in runs:
        _, *tag, seed = label.split("-")
        train, rollout = tag[0], (tag[1][:-1] if len(tag) > 1 else tag[0])
        out[label] = brevity.BrevityStudy().coords(
            brevity.config(train, rollout, int(seed[1:]), Path("/tmp/brevity")).to_dict()
        )
    return out


def test_the_table_reports_per_pair_when_each_seed_converged_or_a_dash():
    runs = {
        "brevity-fp16-s0": _rows([128, 90, 20, 10, 8, 6], 0.005),
        "brevity-fp16-s1": _rows([128, 120, 110, 100, 90, 80], 0.005),
        "brevity-bf16-s0": _rows([128, 128, 128, 128, 128, 128], 0.04),
    }
    rows = brevity.table(runs, meta_of(runs))
    assert [(r["train"], r["rollout"]) for r in rows] == [("fp16", "fp16"), ("bf16", "bf16")]
    fp16, bf16 = rows
    assert fp16["converged (≤ 10% of max) at step"] == "5, —"  # steps 3-5: (20 + 10 + 8) / 3 = 12.7 ≤ 12.8
    assert bf16["converged (≤ 10% of max) at step"] == "—"
    assert fp16["length, first step"] == 128 and bf16["mean |Δ log p|"] == 0.04


def test_the_findings_name_the_pairs_that_never_converged_and_read_named_fields(monkeypatch):
    runs = {
        "brevity-fp16-s0": _rows([128, 90, 20, 10, 8, 6], 0.005),
        "brevity-bf16-s0": _rows([128, 128, 128, 128, 128, 128], 0.04),
    }
    study = brevity.BrevityStudy()
    text = study.findings(runs, meta_of(runs), brevity.table(runs, meta_of(runs)))
    assert text == [brevity.ANECDOTE, "No run of bf16/bf16 reached 10% of max_tokens within its steps."]
    monkeypatch.setattr(brevity, "COLUMNS", {k: f"<{v}>" for k, v in brevity.COLUMNS.items()})
    rows = brevity.table(runs, meta_of(runs))
    assert "<converged (≤ 10% of max) at step>" in rows[0]
    assert study.findings(runs, meta_of(runs), rows) == text  # a header can change without touching the prose


def test_each_run_is_the_toy_task_on_smollm2_with_mu_as_pi_old():
    cfg = brevity.config("fp32", "bf16", 2, Path("/tmp/brevity"))
    assert (cfg.model, cfg.reward, cfg.algorithm, cfg.rollout_engine, cfg.lora) == (
        "smollm2-135m",
        "brevity",
        "grpo_mu_old",
        "vllm",
        True,
    )
    assert (cfg.train_dtype, cfg.rollout) == ("fp32", "bf16")
    assert Path(cfg.output_dir).name == "brevity-fp32-bf16r-s2"


def test_the_brevity_figure_has_one_curve_per_pair_averaged_over_seeds():
    from nbkit.plots import hunt as hunt_plots

    runs = {
        "brevity-fp16-s0": _rows([128, 64], 0.005),
        "brevity-fp16-s1": _rows([128, 32], 0.005),
        "brevity-bf16-s0": _rows([128, 128], 0.04),
    }
    fig = hunt_plots.brevity_curves(runs, meta_of(runs))
    lengths = {t.name: list(t.y) for t in fig.data if t.yaxis == "y"}
    assert lengths == {
        "bf16 train / bf16 rollout (mean of 1 seeds)": [128, 128],
        "fp16 train / fp16 rollout (mean of 2 seeds)": [128, 48],
    }


def test_the_grid_names_exactly_the_pairs_and_seeds_asked_for():
    grid = brevity.BrevityStudy().grid(pairs=[["fp32", "bf16"], ["fp16", "fp16"]], seeds=[1], steps=3)
    assert sorted(grid) == ["brevity-fp16-s1", "brevity-fp32-bf16r-s1"]
    assert {c.max_steps for c in grid.values()} == {3}
