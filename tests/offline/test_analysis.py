"""Specification of ``nbkit.offline.analysis``: prompts, per-model configs, and the engine dtype × training dtype grid."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nbkit.offline import analysis


def test_configs_for_applies_common_settings_then_per_model_overrides():
    cfgs = analysis.configs_for(
        ["smollm2-135m", "tiny-arith"], {"tiny-arith": {"engine": "hf", "n_prompts": 3}}, engine="vllm", n_prompts=5
    )
    assert [(c.model, c.engine, c.n_prompts) for c in cfgs] == [("smollm2-135m", "vllm", 5), ("tiny-arith", "hf", 3)]
    with pytest.raises(ValueError, match="not in the list"):
        analysis.configs_for(["tiny-arith"], {"smollm2-135m": {}})


def test_prompts_arith_and_chat_formatted_math():
    assert analysis.load_prompts("arith", 3, seed=1)[0].endswith("=")
    tok = _ChatTok()
    prompts = analysis.load_prompts("eval/math", 4, tok)
    assert len(prompts) == 4 and all(p.startswith("<user>") and p.endswith("<assistant>") for p in prompts)
    assert all(analysis.SHORT_ANSWER in p for p in prompts)
    plain = analysis.load_prompts("eval/math", 4, None, chat_template=False)
    assert [len(p) for p in plain] == sorted(len(p) for p in plain)  # shortest problems first
    with pytest.raises(FileNotFoundError, match="arith"):
        analysis.load_prompts("no/such/source", 2)


class _ChatTok:
    """A stand-in tokenizer with a chat template (the test needs only apply_chat_template)."""

    chat_template = "stub"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "<user>" + messages[0]["content"] + "<assistant>"


@pytest.fixture(scope="module")
def grid():
    # torch's own half kernels on both sides: under the fp32-accumulate policy (CPUs without FP16 units) the HF engine
    # and the π forward round the same fp32 sums once and agree to ~1e-6, leaving no mismatch to bracket
    cfg = analysis.GridConfig(
        model="tiny-arith", engine="hf", n_prompts=12, samples_per_prompt=2, max_tokens=40, n_boot=20, gemm="native"
    )
    return analysis.run_grid(cfg, progress=False)


def test_grid_has_every_cell_and_the_fp32_floor(grid):
    assert set(grid.metrics) == {
        (e, t) for e in analysis.GridConfig.engine_dtypes for t in analysis.GridConfig.train_dtypes
    }
    assert grid.metrics[("fp32", "fp32")]["token_abs_logp_diff/max"] <= 1e-4
    for e in ("bf16", "fp16"):
        assert grid.metrics[(e, e)]["token_abs_logp_diff/mean"] > 0
    heat = grid.grid("kl_k3")
    assert set(heat) == {"fp32", "bf16", "fp16"} and set(heat["bf16"]) == {"fp32", "bf16", "fp16"}
    pairs = grid.pairs()
    for e, (pi, mu) in pairs.items():
        assert [len(a) for a in pi] == [len(r) for r in grid.rollouts[e]] == [len(b) for b in mu]
    assert len(grid.table()) == 9


def test_ratio_table_matches_the_metrics_and_brackets_the_estimate(grid):
    table = analysis.ratio_table([grid], n_boot=200)
    row = table[table["metric"] == "token |Δlog p| (mean)"].iloc[0]
    bf16, fp16 = (grid.metrics[(d, d)]["token_abs_logp_diff/mean"] for d in ("bf16", "fp16"))
    assert row["bf16"] == pytest.approx(bf16) and row["fp16"] == pytest.approx(fp16)
    assert row["bf16/fp16"] == pytest.approx(bf16 / fp16)
    assert 0 < row["CI low"] < row["CI high"]
    assert np.isfinite(table["bf16/fp16"]).any()
    assert "BF16/FP16" in analysis.summary([grid], table)


class _Planted:
    """A grid result with planted per-token log π − log μ: BF16 biased by 0.01 nats per token, FP16 unbiased."""

    engine = "planted"
    config = analysis.GridConfig(model="planted")

    def pairs(self):
        rng = np.random.default_rng(0)
        cell = lambda bias: ([rng.normal(-bias, 0.05, 30) for _ in range(64)], [np.zeros(30)] * 64)  # noqa: E731
        return {"bf16": cell(0.01), "fp16": cell(0.0)}


def test_a_ratio_is_given_only_where_fp16s_own_ci_lies_above_zero():
    table = analysis.ratio_table([_Planted()], n_boot=300).set_index("metric")
    token = table.loc["token |Δlog p| (mean)"]  # |Δ| > 0 in both cells: an ordinary ratio with its CI
    assert token["reading"] == "ratio" and token["CI low"] <= token["bf16/fp16"] <= token["CI high"]
    k1 = table.loc["sequence KL[μ‖π] (k1)"]  # FP16's k1 is noise around 0: no ratio, BF16's low over FP16's high
    assert k1["fp16 CI"][0] < 0 < k1["fp16 CI"][1] and k1["bf16 CI"][0] > 0
    assert k1["reading"] == "lower bound" and np.isnan(k1["bf16/fp16"]) and np.isnan(k1["CI low"])
    assert k1["lower bound"] == pytest.approx(k1["bf16 CI"][0] / k1["fp16 CI"][1])
    assert k1["finding"].startswith("≥ ") and "cannot be told from 0" in k1["finding"]


def test_the_ratio_figure_draws_ratios_and_bounds_and_names_the_metrics_without_either():
    from nbkit.plots.mismatch import ratio_ci_bar

    table = analysis.ratio_table([_Planted()], n_boot=200)
    table.loc[table["metric"] == "sequence KL[μ‖π] (Σ k3)", "reading"] = "undefined"  # as when both CIs cover 0
    bars = ratio_ci_bar(table)
    (trace,) = bars.data
    assert "sequence KL[μ‖π] (Σ k3)" not in trace.x
    k1 = list(trace.x).index("sequence KL[μ‖π] (k1)")
    assert trace.text[k1].startswith("≥ ") and trace.marker.pattern.shape[k1] == "/"
    assert "planted: sequence KL[μ‖π] (Σ k3)" in bars.layout.annotations[0].text


def test_the_setting_says_when_the_hf_engine_ran_the_trainers_own_recipe():
    """Under ``fp32-accumulate`` HF generate and the π forward share one recipe: μ = π up to FP32 roundings, in any
    format, so the grid compares no engine with the trainer, and its setting line says so."""
    cfg = analysis.GridConfig(
        model="tiny-arith",
        engine="hf",
        engine_dtypes=("bf16",),
        train_dtypes=("bf16",),
        n_prompts=4,
        samples_per_prompt=2,
        max_tokens=16,
        n_boot=0,
        gemm="fp32-accumulate",
    )
    shared = analysis.run_grid(cfg, progress=False)
    assert "GEMM fp32-accumulate" in shared.setting() and "by construction" in shared.setting()
    assert shared.metrics[("bf16", "bf16")]["token_abs_logp_diff/mean"] < 1e-4  # what "by construction" means
    native = analysis.run_grid(dataclasses.replace(cfg, gemm="native"), progress=False)
    assert "GEMM native" in native.setting() and "by construction" not in native.setting()
    assert "by construction" in analysis.summary([shared], analysis.ratio_table([shared], n_boot=0))


@pytest.mark.slow
@pytest.mark.skipif(len(__import__("nbkit.runtime.pool").runtime.pool.free_cores()) < 2, reason="needs two free cores")
def test_grids_split_by_engine_dtype_give_the_cells_of_one_grid_however_many_run_at_once(small_grid):
    cfg = small_grid
    (together,), (alone,) = (analysis.run_grids([cfg], progress=False, workers=w) for w in (2, 1))
    assert together.config == alone.config == cfg  # the merged result names the whole grid, not one job's part
    assert list(together.rollouts) == ["fp32", "bf16"] and set(together.metrics) == {
        (e, t) for e in cfg.engine_dtypes for t in cfg.train_dtypes
    }
    np.testing.assert_equal(together.metrics, alone.metrics)  # bit for bit (NaN where both are NaN)
    np.testing.assert_equal(together.cis, alone.cis)
    for e in cfg.engine_dtypes:
        assert [r.token_ids for r in together.rollouts[e]] == [r.token_ids for r in alone.rollouts[e]]
    assert "rel_prob_err/mean" in together.metrics[("bf16", "bf16")]  # against FP32 π, computed inside the job
