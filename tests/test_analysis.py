"""Specification of ``nbkit.offline.analysis``: prompts, per-model configs, and the engine dtype × training dtype grid."""
from __future__ import annotations

import numpy as np
import pytest

from nbkit.offline import analysis


def test_configs_for_applies_common_settings_then_per_model_overrides():
    cfgs = analysis.configs_for(["smollm2-135m", "tiny-arith"], {"tiny-arith": {"engine": "hf", "n_prompts": 3}},
                                engine="vllm", n_prompts=5)
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
    cfg = analysis.GridConfig(model="tiny-arith", engine="hf", n_prompts=12, samples_per_prompt=2, max_tokens=40,
                              n_boot=20, gemm="native")
    return analysis.run_grid(cfg, progress=False)


def test_grid_has_every_cell_and_the_fp32_floor(grid):
    assert set(grid.metrics) == {(e, t) for e in analysis.GridConfig.engine_dtypes
                                 for t in analysis.GridConfig.train_dtypes}
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
