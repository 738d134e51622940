"""The anatomy of π − μ adds up: along one path the steps plus the unattributed remainder equal the total to 1e-6 on
every run; where exactly one step differs it carries the whole difference; on an FP32 model every format step is
zero and every implementation step kernel noise; teacher-forced decoding reproduces the HF engine's μ bit for bit;
an FP32 LM head computes in FP32."""

import dataclasses

import numpy as np
import pytest
import torch

from nbkit.engines import HFEngine, SamplingConfig
from nbkit.mismatch import forced
from nbkit.models import models
from nbkit.models.toymodels import arith
from nbkit.offline import anatomy, anatomy_report
from nbkit.plots import anatomy as anatomy_plots
from nbkit.precision import lm_head
from nbkit.records import schema

NOISE = 1e-5  # FP32 kernel differences (two attention kernels, KV-cache vs full forward): ~1e-8 per token measured


def assert_adds_up(res: anatomy.AnatomyResult) -> None:
    """Every group: steps + unattributed = total (measured from the path's two ends) to 1e-6."""
    for group in anatomy.PATHS:
        split = res.split[group]
        parts = sum(split[f][anatomy.DELTA] for f in res.factors(group)) + split[anatomy.UNATTRIBUTED][anatomy.DELTA]
        assert parts == pytest.approx(split["total"][anatomy.DELTA], abs=1e-6), group


@pytest.fixture(scope="module")
def fp32_anatomy():
    return anatomy.run(
        "tiny-arith", engine="hf", dtype="fp32", n_prompts=3, samples_per_prompt=2, max_tokens=40, n_boot=20
    )


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
def test_every_step_on_an_fp32_model_is_zero_or_kernel_noise(fp32_anatomy):
    res = fp32_anatomy
    assert_adds_up(res)
    for f in anatomy.FORMAT_PATH:  # rounding to FP32 changes nothing: exactly zero
        assert res.delta("format", f) == 0.0, f
    assert res.total("format") == 0.0 and res.unattributed("format") == 0.0
    for f in res.factors("implementation"):
        assert abs(res.delta("implementation", f)) < NOISE, f
    assert abs(res.total("implementation")) < NOISE
    assert all(m["token_abs_logp_diff/mean"] < NOISE for m in res.heads.values())
    assert res.layers and max(res.layers) == 0.0


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
def test_when_only_the_engine_differs_its_step_carries_the_whole_difference(fp32_anatomy):
    """An FP32 engine whose μ is shifted by a known amount per token: every other step stays kernel noise."""
    shift = -0.01  # log μ stays a log-probability (≤ 0)
    model, tok = models.load("tiny-arith", "fp32")
    engine = HFEngine(model, "fp32", tokenizer=tok, progress=False)
    rollouts = engine.generate(
        [p["problem"] for p in arith.make_problems(3, seed=5)], SamplingConfig(max_tokens=30, n=2)
    )
    shifted = [dataclasses.replace(r, logprobs=[x + shift for x in r.logprobs]) for r in rollouts]
    res = anatomy.run("tiny-arith", engine="hf", dtype="fp32", rollouts=shifted, loaded=(model, tok), n_boot=50)
    assert_adds_up(res)
    assert res.delta("implementation", "engine") == pytest.approx(shift, abs=NOISE)
    assert res.total("implementation") == pytest.approx(shift, abs=NOISE)
    for f in ("trainer_batch", "kv_cache", "engine_batch"):
        assert abs(res.delta("implementation", f)) < NOISE, f
    assert abs(res.unattributed("implementation")) < 1e-12
    low, high = res.split["implementation"]["engine"]["CI"]
    assert low == pytest.approx(shift, abs=NOISE) and high == pytest.approx(shift, abs=NOISE)


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
def test_table_lists_each_path_step_then_the_unattributed_remainder_and_the_total(fp32_anatomy):
    table = fp32_anatomy.table()
    for group, path in anatomy.PATHS.items():
        rows = table[table.group == group]
        assert list(rows.factor) == [*path, anatomy.UNATTRIBUTED, "total"]
        col = anatomy.DELTA
        assert rows[col].iloc[:-1].sum() == pytest.approx(rows[col].iloc[-1], abs=1e-6)
    assert set(fp32_anatomy.head_table().fp32_lm_head) == set(anatomy.HEAD_CASES)
    fig = anatomy_plots.waterfall(fp32_anatomy, "format")
    assert [t.name for t in fig.data][-1] == "total"
    assert list(fig.data[0].x) == [*anatomy.FORMAT_PATH, anatomy.UNATTRIBUTED]


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_in_a_half_format_the_path_adds_up_and_the_format_steps_are_real_roundings(dtype):
    res = anatomy.run(
        "tiny-arith",
        engine="hf",
        dtype=dtype,
        n_prompts=2,
        samples_per_prompt=2,
        max_tokens=40,
        n_boot=20,
        layers=False,
    )
    assert_adds_up(res)
    for f in anatomy.FORMAT_PATH:  # each switch moves log p (a signed mean may cancel; its size may not)
        assert res.split["format"][f]["abs"] > 1e-7, f
    assert res.delta("implementation", "engine") == 0.0  # HF decoding is the HF engine


def test_a_path_where_exactly_one_step_differs_puts_the_whole_difference_on_it():
    rng = np.random.default_rng(0)
    start = [rng.normal(size=n) for n in (3, 5, 1, 7)]
    moved = [x + rng.normal(size=x.size) * 0.1 for x in start]
    steps = {"a": start, "b": moved, "c": moved}  # only the switch to ``b`` changes anything
    split = anatomy.telescope(start, steps, moved, n_boot=100, seed=1)
    total = split["total"][anatomy.DELTA]
    assert total != 0 and split["b"][anatomy.DELTA] == pytest.approx(total, abs=1e-12)
    assert split["a"][anatomy.DELTA] == split["c"][anatomy.DELTA] == split[anatomy.UNATTRIBUTED][anatomy.DELTA] == 0
    assert split["b"]["CI"] == pytest.approx(split["total"]["CI"], abs=1e-12)  # the same resamples
    assert split["a"]["CI"] == (0.0, 0.0)


@pytest.mark.parametrize("seed", range(5))
def test_steps_plus_the_unattributed_remainder_equal_the_total_on_any_path(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=rng.integers(2, 12))
    states = [[rng.normal(size=n) * 10 ** rng.uniform(-6, 0) for n in lengths] for _ in range(rng.integers(3, 8))]
    steps = {f"s{i}": s for i, s in enumerate(states[1:-1])}
    split = anatomy.telescope(states[0], steps, states[-1], n_boot=50, seed=seed)
    parts = sum(split[k][anatomy.DELTA] for k in (*steps, anatomy.UNATTRIBUTED))
    assert parts == pytest.approx(split["total"][anatomy.DELTA], abs=1e-6)
    low, high = split["total"]["CI"]
    assert low <= split["total"][anatomy.DELTA] <= high or low == high


def test_a_state_scoring_other_tokens_is_refused():
    with pytest.raises(ValueError, match="state 'b' does not score the same sequences and tokens"):
        anatomy.telescope([np.zeros(3)], {"a": [np.zeros(3)], "b": [np.zeros(2)]}, [np.zeros(3)])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_forced_decoding_reproduces_the_hf_engines_mu_bit_for_bit(dtype):
    model, tok = models.load("tiny-arith", dtype)
    engine = HFEngine(model, dtype, tokenizer=tok, progress=False)
    rollouts = engine.generate(
        [p["problem"] for p in arith.make_problems(3, seed=1)], SamplingConfig(max_tokens=30, n=2)
    )
    decoded = forced.decode_logprobs(model, tok, rollouts, batch_size=64)
    for r, lp in zip(rollouts, decoded):
        np.testing.assert_array_equal(lp, np.asarray(r.logprobs))


def test_fp32_lm_head_runs_the_projection_in_fp32_and_is_undone():
    model, _ = models.load("tiny-arith", "bf16")
    ids = torch.tensor([[1, 2, 3, 4]])
    assert model(input_ids=ids).logits.dtype == torch.bfloat16
    w32 = models.load("tiny-arith", "fp32")[0].get_output_embeddings().weight
    lm_head.install(model, w32)
    assert lm_head.installed(model) and model(input_ids=ids).logits.dtype == torch.float32
    assert lm_head.dtype_of(model) == "fp32"
    assert set(dict(model.named_parameters())) == set(dict(models.load("tiny-arith", "bf16")[0].named_parameters()))
    lm_head.remove(model)
    assert not lm_head.installed(model) and model(input_ids=ids).logits.dtype == torch.bfloat16
    assert lm_head.sides("trainer") == (True, False) and lm_head.sides("both") == (True, True)
    with pytest.raises(ValueError, match=r"unknown fp32_lm_head 'head'.*'none', 'trainer', 'engine', 'both'"):
        lm_head.validate("head")


def test_bad_requests_fail_before_any_model_loads():
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        anatomy.AnatomyConfig(dtype="fp8")
    with pytest.raises(ValueError, match="unknown engine 'sglang'"):
        anatomy.AnatomyConfig(engine="sglang")
    with pytest.raises(ValueError, match="sequences must be >= 0"):
        anatomy.AnatomyConfig(sequences=-1)


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
def test_hf_engine_with_an_fp32_lm_head_samples_from_fp32_logits_of_the_fp32_head_weight():
    model, tok = models.load("tiny-arith", "fp32")
    prompts = [p["problem"] for p in arith.make_problems(2, seed=4)]
    plain = HFEngine(model, "bf16", tokenizer=tok, progress=False)
    plain.generate(prompts, SamplingConfig(max_tokens=8))
    assert lm_head.dtype_of(plain.model) == "bf16"
    engine = HFEngine(model, "bf16", tokenizer=tok, progress=False, fp32_lm_head=True)
    rollouts = engine.generate(prompts, SamplingConfig(max_tokens=8))
    assert lm_head.dtype_of(engine.model) == "fp32" and next(engine.model.parameters()).dtype == torch.bfloat16
    head = engine.model.get_output_embeddings()
    assert torch.equal(head._nbkit_fp32_weight, model.get_output_embeddings().weight)  # not the bf16-rounded one
    assert next(model.parameters()).dtype == torch.float32 and not lm_head.installed(model)  # caller's untouched
    decoded = forced.decode_logprobs(engine.model, tok, rollouts)
    for r, lp in zip(rollouts, decoded):
        np.testing.assert_array_equal(lp, np.asarray(r.logprobs))


def _result(dtype: str, total: float, ci: tuple[float, float]) -> anatomy.AnatomyResult:
    token = schema.METRIC_TOKEN_ABS_LOGP_DIFF
    res = anatomy.AnatomyResult(config=anatomy.AnatomyConfig(dtype=dtype), engine="hf", gemm_policy="native")
    entry = {anatomy.DELTA: 0.0, "CI": None}
    res.split["format"] = {
        **{f: dict(entry) for f in anatomy.FORMAT_PATH},
        anatomy.UNATTRIBUTED: dict(entry),
        "total": {anatomy.DELTA: 1e-4, "CI": None},
    }
    res.split["implementation"] = {
        **{f: dict(entry) for f in anatomy.IMPL_PATH},
        anatomy.UNATTRIBUTED: dict(entry),
        "total": {anatomy.DELTA: total, "CI": None},
    }
    res.split["implementation"]["engine"] = {anatomy.DELTA: total * 0.9, "CI": None}
    res.metrics[("implementation", "total")] = {token: total, f"{token} CI": ci}
    res.heads = {"none": {token: total}}
    return res


@pytest.mark.parametrize(
    "bf16, fp16, verdict",
    [
        ((6e-4, (4e-4, 9e-4)), (1e-4, (0.5e-4, 2e-4)), "as in the paper"),
        ((1e-4, (0.5e-4, 2e-4)), (6e-4, (4e-4, 9e-4)), "against the paper's order, on this CPU"),
        ((6e-4, (3.8e-4, 8.9e-4)), (3e-4, (0.8e-4, 6.5e-4)), "cannot be told apart"),
    ],
)
def test_the_anatomys_sentence_is_generated_from_the_numbers_and_calls_an_order_only_when_the_cis_are_apart(
    bf16, fp16, verdict
):
    text = anatomy_report.compare({"bf16": _result("bf16", *bf16), "fp16": _result("fp16", *fp16)})
    assert verdict in text
    assert f"π − μ {bf16[0]:.2g} (95 % CI {bf16[1][0]:.2g}–{bf16[1][1]:.2g})" in text
    assert "largest implementation step `engine`" in text
