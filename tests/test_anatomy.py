"""The anatomy of π − μ: on an FP32 model every factor is zero (format) or kernel noise (implementation); in a half
format the format factors are real roundings; the table shows the factors' sum, the total and their interaction;
teacher-forced decoding reproduces the HF engine's μ bit for bit; an FP32 LM head computes in FP32."""
import numpy as np
import pytest
import torch

from nbkit import forced, lm_head, models, schema
from nbkit.engines import HFEngine, SamplingConfig
from nbkit.offline import anatomy
from nbkit.tasks import arith

NOISE = 1e-5  # FP32 kernel differences (two attention kernels, KV-cache vs full forward): ~1e-8 per token measured


@pytest.fixture(scope="module")
def fp32_anatomy():
    return anatomy.run("tiny-arith", engine="hf", dtype="fp32", n_prompts=3, samples_per_prompt=2, max_tokens=40,
                       n_boot=20, alone_sequences=2)


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
def test_every_factor_alone_on_an_fp32_model_is_zero_or_kernel_noise(fp32_anatomy):
    res = fp32_anatomy
    for f in anatomy.FORMAT_FACTORS:  # rounding to FP32 changes nothing: exactly zero
        assert res.metrics[("format", f)]["token_abs_logp_diff/mean"] == 0.0, f
    assert res.total("format") == 0.0
    for f in res.factors("implementation"):
        assert res.metrics[("implementation", f)]["token_abs_logp_diff/mean"] < NOISE, f
    assert res.total("implementation") < NOISE
    assert all(m["token_abs_logp_diff/mean"] < NOISE for m in res.heads.values())
    assert res.layers and max(res.layers) == 0.0


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
def test_table_shows_the_factors_sum_the_total_and_their_interaction(fp32_anatomy):
    table = fp32_anatomy.table()
    for group in ("format", "implementation"):
        rows = table[table.group == group].set_index("factor")
        col = "token_abs_logp_diff/mean"
        factors = [f for f in rows.index if f not in ("sum of factors", "measured total", "interaction (total − sum)")]
        assert rows.loc["sum of factors", col] == pytest.approx(rows.loc[factors, col].sum())
        assert rows.loc["interaction (total − sum)", col] == pytest.approx(
            rows.loc["measured total", col] - rows.loc["sum of factors", col])
    assert set(fp32_anatomy.head_table().fp32_lm_head) == set(anatomy.HEAD_CASES)
    fig = anatomy.waterfall(fp32_anatomy)
    assert [t.name for t in fig.data][-1] == "measured total"


@pytest.mark.slow  # a whole anatomy / two engines: > 20 s on 2 shared cores
def test_in_bf16_the_format_factors_are_real_roundings():
    res = anatomy.run("tiny-arith", engine="hf", dtype="bf16", n_prompts=2, samples_per_prompt=2, max_tokens=40,
                      n_boot=0, alone_sequences=1, layers=False)
    for f in anatomy.FORMAT_FACTORS:  # BF16's 8-bit significand: ~1e-4 per token on tiny-arith
        assert res.metrics[("format", f)]["token_abs_logp_diff/mean"] > 1e-6, f
    assert res.metrics[("implementation", "engine")]["token_abs_logp_diff/mean"] == 0.0  # HF decoding is the HF engine


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_forced_decoding_reproduces_the_hf_engines_mu_bit_for_bit(dtype):
    model, tok = models.load("tiny-arith", dtype)
    engine = HFEngine(model, dtype, tokenizer=tok, progress=False)
    rollouts = engine.generate([p["problem"] for p in arith.make_problems(3, seed=1)], SamplingConfig(max_tokens=30, n=2))
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
    with pytest.raises(ValueError, match="alone_sequences must be >= 1"):
        anatomy.AnatomyConfig(alone_sequences=0)


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
    res.metrics[("implementation", "engine")] = {token: total * 0.9}
    res.metrics[("implementation", "gemm_kernel")] = {token: total * 0.1}
    res.metrics[("implementation", "total")] = {token: total, f"{token} CI": ci}
    res.heads = {"none": {token: total}}
    return res


@pytest.mark.parametrize("bf16, fp16, verdict", [
    ((6e-4, (4e-4, 9e-4)), (1e-4, (0.5e-4, 2e-4)), "as in the paper"),
    ((1e-4, (0.5e-4, 2e-4)), (6e-4, (4e-4, 9e-4)), "the inversion, on this CPU"),
    ((6e-4, (3.8e-4, 8.9e-4)), (3e-4, (0.8e-4, 6.5e-4)), "cannot be told apart"),
])
def test_the_anatomys_sentence_is_generated_from_the_numbers_and_calls_an_order_only_when_the_cis_are_apart(
        bf16, fp16, verdict):
    text = anatomy.compare({"bf16": _result("bf16", *bf16), "fp16": _result("fp16", *fp16)})
    assert verdict in text
    assert f"π − μ {bf16[0]:.2g} (95 % CI {bf16[1][0]:.2g}–{bf16[1][1]:.2g})" in text
    assert "largest implementation factor `engine`" in text
