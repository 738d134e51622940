"""Rollout formats (``nbkit.precision.formats``): each element format rounds as its spec says, each quantized GEMM stays
within
its format's error bound, the HF engine really runs the format inside its forward, and a run whose requested format
did not run fails its audit.

Reference roundings are torch's own casts (bfloat16, float16, float8_e4m3fn, float8_e5m2); the FP4 block formats
are checked on hand-computed cases from the OCP MX v1.0 and NVFP4 definitions.
"""

import math
from collections import Counter

import numpy as np
import pytest
import torch

from nbkit.engines import SamplingConfig, make_engine
from nbkit.mismatch.mismatch import teacher_forced_logprobs
from nbkit.models import models
from nbkit.models.toymodels import arith
from nbkit.offline import ladder
from nbkit.precision import formats
from nbkit.precision.formats import E2M1, E4M3, E5M2, e8m
from nbkit.rl import RLConfig, train
from nbkit.rl.amp import PrecisionError


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, any NaN equal to any NaN."""
    nan = torch.isnan(a) & torch.isnan(b)
    return bool(((a.view(torch.int32) == b.view(torch.int32)) | nan).all())


def awkward_floats(n: int = 200_000, seed: int = 0) -> torch.Tensor:
    """Random float32 bit patterns (every exponent: zeros, subnormals, inf, NaN) plus normals over fp32's range."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31 - 1, (n,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    wide = torch.randn(n, generator=g) * torch.exp2(torch.randint(-150, 128, (n,), generator=g).float())
    special = torch.tensor(
        [
            0.0,
            -0.0,
            float("inf"),
            -float("inf"),
            float("nan"),
            1e-45,
            -1e-45,
            3.4028235e38,
            -3.4028235e38,
            1.1754944e-38,
        ]
    )
    return torch.cat([bits, wide, special])


# --- element formats ----------------------------------------------------------------------------------------


def test_e8m7_rounds_bit_for_bit_like_torchs_bfloat16_cast():
    x = awkward_floats()
    assert same_bits(e8m(7).round(x), x.to(torch.bfloat16).float())


def test_e8m7_breaks_ties_to_even_and_overflows_to_inf_like_bfloat16():
    one_ulp = 2.0**-7
    ties = torch.tensor(
        [1 + one_ulp / 2, 1 + 3 * one_ulp / 2, -(1 + one_ulp / 2), 2.0**-133 * 1.5, (2 - 2.0**-8) * 2.0**127]
    )  # even below, even above, negative, a bf16 subnormal, past max
    assert e8m(7).round(ties).tolist() == ties.to(torch.bfloat16).float().tolist()
    assert e8m(7).round(ties).tolist()[:2] == [1.0, 1 + 2 * one_ulp] and math.isinf(e8m(7).round(ties)[-1])


@pytest.mark.parametrize("k", range(0, 24))
def test_the_dials_bit_rounding_is_its_reference_definition(k):
    x = awkward_floats(50_000, seed=k)
    fmt = e8m(k)
    assert same_bits(fmt.round(x), fmt.round_reference(x))


def test_e8m10_has_fp16s_mantissa_within_fp16s_normal_range():
    x = torch.randn(100_000) * 100
    x = x[(x.abs() > 2.0**-14) & (x.abs() < 65504)]
    assert same_bits(e8m(10).round(x), x.to(torch.float16).float())


@pytest.mark.parametrize("elem,dtype", [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)])
def test_fp8_elements_round_like_torchs_float8_cast_after_saturation(elem, dtype):
    x = awkward_floats()
    x = x[~torch.isnan(x)]
    ref = x.clamp(-elem.max, elem.max).to(dtype).float()
    assert same_bits(elem.round(x), ref)


@pytest.mark.parametrize("elem,dtype", [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)])
@pytest.mark.parametrize("per_row", [True, False], ids=["per-row", "per-tensor"])
def test_fp8_quantization_matches_torchs_cast_with_the_same_scales(elem, dtype, per_row):
    x = torch.randn(64, 256) * torch.exp(2 * torch.randn(64, 1))  # rows of very different magnitude
    x[3] = 0.0  # a zero row keeps scale 1 (no division by zero)
    q, scale = formats.fp8_quantize(x, elem, per_row)
    amax = x.abs().amax(-1, keepdim=True) if per_row else x.abs().amax()
    expected_scale = torch.where(amax > 0, amax / elem.max, torch.ones_like(amax))
    assert torch.equal(scale, expected_scale)
    assert same_bits(q, (x / expected_scale).clamp(-elem.max, elem.max).to(dtype).float())
    assert q.abs().max() <= elem.max and not torch.isnan(q).any()


def test_e2m1_grid_ties_and_saturation():
    x = torch.tensor([0.0, 0.24, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 7.0, 1e9, -0.25, -2.5, -7.0])
    assert E2M1.round(x).tolist() == [0, 0, 0, 0.5, 1, 1, 2, 2, 4, 4, 6, 6, 6, -0.0, -2, -6]


# --- FP4 block formats: hand-computed cases ---------------------------------------------------------------


def mx(values, k=32) -> list[float]:
    x = torch.zeros(1, k)
    x[0, : len(values)] = torch.tensor(values)
    return formats.mxfp4_quantize(x)[0, : len(values)].tolist()


def test_mxfp4_block_scale_is_the_power_of_two_below_amax_over_4():
    # amax 3 → floor(log2 3) = 1 → X = 2^(1-2) = 0.5; 3/X = 6 (exact),
    # 0.3/X = 0.6 → 0.5 → 0.25, 1.1/X = 2.2 → 2 → 1
    assert mx([3.0, 0.3, 1.1, -0.8]) == [3.0, 0.25, 1.0, -0.75]


def test_mxfp4_zeros_subnormals_and_saturation():
    assert mx([0.0] * 32) == [0.0] * 32  # an all-zero block: scale clamped, no NaN
    # amax 4 → X = 1: E2M1's subnormal 0.5 kept, 0.25 ties to 0, 0.75 ties to the even 1.0
    assert mx([4.0, 0.5, 0.25, 0.75]) == [4.0, 0.5, 0.0, 1.0]
    # amax 7.5 → X = 2^(2-2) = 1 and 7.5 saturates at 6: the block's largest element loses a fifth of itself
    assert mx([7.5, 1.0]) == [6.0, 1.0]


def test_mxfp4_one_outlier_flushes_its_block_but_not_the_next():
    x = torch.ones(1, 64)
    x[0, 0] = 100.0  # block 1: X = 2^(6-2) = 16, 1/16 → 0; 100/16 = 6.25 → 6 → 96
    q = formats.mxfp4_quantize(x)[0]
    assert q[0] == 96.0 and (q[1:32] == 0).all() and (q[32:] == 1.0).all()


def test_mxfp4_pads_a_ragged_last_block():
    x = torch.tensor([[4.0] * 32 + [0.3, 3.0, 0.7]])  # last block of 3: amax 3 → X = 0.5
    assert formats.mxfp4_quantize(x)[0, 32:].tolist() == [0.25, 3.0, 0.75]


def nv(x) -> tuple[list[float], float]:
    q, s = formats.nvfp4_quantize(torch.tensor([x]))
    return (q[0] * s).tolist(), float(s)


def test_nvfp4_tensor_and_block_scales():
    anchor = [2688.0] + [0.0] * 15  # amax 6·448 → tensor scale s = 1, this block's scale 448
    values, s = nv(anchor + [6.0, 3.0, 1.0, 0.4] + [0.0] * 12)
    assert s == 1.0 and values[16:20] == [6.0, 3.0, 1.0, 0.5]  # block scale E4M3(6/6) = 1: the E2M1 grid itself
    # block amax 5: scale E4M3(5/6 = 0.833) = 0.8125; 5/0.8125 = 6.15 saturates at 6 → 4.875
    values, _ = nv(anchor + [5.0, 1.0] + [0.0] * 14)
    assert values[16:18] == [4.875, 0.8125]


def test_nvfp4_zeros_subnormal_block_scales_and_an_outlier():
    assert nv([0.0] * 16) == ([0.0] * 16, 1.0)  # all zero: tensor scale 1, no NaN
    anchor = [2688.0] + [0.0] * 15
    # block amax 0.006: 0.006/6 = 0.001 is an E4M3 subnormal → 2^-9; 0.006/2^-9 = 3.07 → 3 → 3·2^-9
    values, _ = nv(anchor + [0.006] + [0.0] * 15)
    assert values[16] == 3 * 2.0**-9
    # one outlier with its block: scale 448, so 1/448 → 0 in E2M1
    values, _ = nv([2688.0] + [1.0] * 15)
    assert values == [2688.0] + [0.0] * 15


# --- quantized GEMMs: the error bound ---------------------------------------------------------------------


def element_bound(x: torch.Tensor, fmt) -> torch.Tensor:
    """A priori |q(x) − x| per element from the format's definition (half a spacing at x's binade or the
    subnormal spacing of the block's scale, or the saturation loss), computed independently of the quantizer."""
    x = x.double()
    if fmt.scheme == "e8m":
        return x.abs() * 2.0 ** -(fmt.element.man_bits + 1)
    if fmt.scheme == "fp8":
        e = fmt.element
        return torch.maximum(
            x.abs() * 2.0 ** -(e.man_bits + 1),
            (x.abs().amax(-1, keepdim=True) / e.max) * 2.0 ** (e.emin - e.man_bits - 1) * 2,
        )
    size = 32 if fmt.scheme == "mxfp4" else 16
    blocks = x.view(x.shape[0], -1, size)
    amax = blocks.abs().amax(-1, keepdim=True)
    if fmt.scheme == "mxfp4":
        scale = 2.0 ** (torch.floor(torch.log2(amax.clamp(min=1e-300))) - 2)
    else:
        s = x.abs().amax() / (448 * 6)
        scale = (amax / 6 / s) * (1 + 2.0**-4) * s  # the block scale, up to E4M3's rounding
    bound = torch.maximum(blocks.abs() * 0.25, 0.25 * scale)
    return torch.maximum(bound, blocks.abs() - 6 * scale * (1 - 2.0**-4)).view_as(x)


QUANTIZED = ["fp8-e4m3", "fp8-e4m3-channel", "fp8-e5m2", "mxfp4", "nvfp4", "e8m3", "e8m7", "e8m10"]


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_operands_stay_within_their_element_bound(name):
    fmt = formats.get(name)
    x = torch.randn(32, 256) * torch.exp(torch.randn(32, 256))  # heavy tails: outliers in some blocks
    q, scale = formats.quantize_operand(x, fmt, "activation")
    dequantized = q.double() * scale.double()
    assert ((dequantized - x.double()).abs() <= element_bound(x, fmt) * 1.0001 + 1e-30).all()


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_quantized_gemm_stays_within_its_formats_error_bound(name):
    fmt = formats.get(name)
    g = torch.Generator().manual_seed(1)
    a = torch.randn(48, 512, generator=g) * torch.exp(torch.randn(48, 1, generator=g))
    w = torch.randn(96, 512, generator=g) * 0.05
    bias = torch.randn(96, generator=g)
    out = formats.quantized_linear(a, w, fmt, bias, out_dtype=torch.float32)
    exact = a.double() @ w.double().T + bias.double()
    da, dw = (
        element_bound(a, fmt),
        element_bound(w, fmt)
        if fmt.scheme != "fp8" or fmt.weight_scale == "channel"
        else element_bound(w.reshape(1, -1), fmt).reshape(w.shape),
    )
    bound = da @ w.double().abs().T + a.double().abs() @ dw.T + da @ dw.T  # operand errors, first and second order
    bound += 512 * 2.0**-24 * (a.double().abs() @ w.double().abs().T)  # FP32 accumulation of exact products
    if fmt.scheme == "e8m":
        bound += exact.abs() * 2.0 ** -(fmt.element.man_bits + 1) * 1.01  # the result's rounding to e8m<k>
    err = (out.double() - exact).abs()
    assert (err <= bound).all()
    assert err.max() > 0  # it did quantize something


def test_quantized_linear_rounds_once_to_the_base_dtype():
    a, w = torch.randn(16, 64).bfloat16(), torch.randn(32, 64).bfloat16()
    out = formats.quantized_linear(a, w, "fp8-e4m3")
    assert out.dtype == torch.bfloat16
    fp32 = formats.quantized_linear(a, w, "fp8-e4m3", out_dtype=torch.float32)
    assert torch.equal(out, fp32.bfloat16())


# --- inside the engine ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def arith_model():
    model, tok = models.load("tiny-arith")
    prompts = [p["problem"] for p in arith.make_problems(4, seed=3)]
    return model, tok, prompts


def sample(arith_model, **engine_kwargs):
    model, tok, prompts = arith_model
    engine = make_engine("hf", model, tokenizer=tok, progress=False, **engine_kwargs)
    return engine, engine.generate(prompts, SamplingConfig(max_tokens=24, n=2, seed=5))


def test_an_fp32_rollout_format_gives_mu_equal_to_the_fp32_trainers_pi(arith_model):
    engine, rollouts = sample(arith_model, format="fp32")
    pi = teacher_forced_logprobs(arith_model[0], rollouts, dtype="fp32")
    diff = np.abs(np.concatenate(pi) - np.concatenate([r.logprobs for r in rollouts]))
    assert diff.max() < 1e-4  # kernel noise only (batched generate vs one forward)
    assert engine.format_gemms == Counter() and rollouts[0].meta["format"] == "fp32"


def test_e8m7_rollouts_are_bf16_rollouts_bit_for_bit(arith_model):
    _, dial = sample(arith_model, format="e8m7", gemm="fp32-accumulate")
    _, bf16 = sample(arith_model, dtype="bf16", gemm="fp32-accumulate")
    assert [r.token_ids for r in dial] == [r.token_ids for r in bf16]
    assert [r.logprobs for r in dial] == [r.logprobs for r in bf16]


def test_a_quantized_format_runs_inside_the_engines_forward_and_is_counted(arith_model):
    model = arith_model[0]
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules()) - 1  # the LM head stays BF16
    engine, rollouts = sample(arith_model, format="fp8-e4m3")
    steps = max(len(r.token_ids) for r in rollouts)  # one forward per generated position (prefill included)
    assert engine.dtype == "bf16" and {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert engine.format_gemms["fp8-e4m3"] == linears * steps
    assert formats.audit("fp8-e4m3", engine.take_format_gemms())["audit/rollout_format_gemms"] == linears * steps
    _, bf16 = sample(arith_model, dtype="bf16")
    assert [r.logprobs for r in rollouts] != [r.logprobs for r in bf16]


@pytest.mark.slow
def test_the_mismatch_grows_down_the_ladder(arith_model):
    """FP8 E4M3 (3 mantissa bits, fine scales) must sit well below the FP4 formats (1 mantissa bit)."""

    def mismatch(name):
        _, rollouts = sample(arith_model, format=name)
        pi = teacher_forced_logprobs(arith_model[0], rollouts, dtype="fp32")
        return np.mean(np.abs(np.concatenate(pi) - np.concatenate([r.logprobs for r in rollouts])))

    fp8, mxfp4, nvfp4 = mismatch("fp8-e4m3"), mismatch("mxfp4"), mismatch("nvfp4")
    assert 0 < fp8 < mxfp4 / 2 and fp8 < nvfp4 / 2


def test_a_weight_written_in_place_is_quantized_again():
    lin = torch.nn.Linear(64, 32, bias=False).bfloat16()
    x = torch.randn(4, 64).bfloat16()
    with torch.no_grad(), formats.policy("nvfp4", model=lin) as mode:
        first = lin(x)
        lin.weight.mul_(2)  # what a weight sync does (copy_ in place)
        second = lin(x)
    assert mode.counts["nvfp4"] == 2
    assert torch.equal(second, formats.quantized_linear(x, lin.weight, "nvfp4"))
    assert not torch.equal(first, second)


# --- names, engines and the audit -------------------------------------------------------------------------


def test_an_unknown_format_is_named_with_the_choices_before_anything_loads():
    with pytest.raises(ValueError, match=r"'fp5'.*fp8-e4m3.*mxfp4.*nvfp4.*e8m1"):
        formats.validate("fp5")
    with pytest.raises(ValueError, match=r"'fp5'.*nvfp4"):
        make_engine("hf", "no-such-model", format="fp5")
    with pytest.raises(ValueError, match=r"'fp5'.*nvfp4"):
        RLConfig(rollout_format="fp5")


def test_a_format_and_a_contradicting_dtype_are_refused():
    with pytest.raises(ValueError, match="runs in bf16"):
        RLConfig(rollout_format="nvfp4", rollout_dtype="fp16")
    with pytest.raises(ValueError, match="runs in bf16"):
        make_engine("hf", "tiny-arith", "fp16", format="mxfp4")
    assert RLConfig(rollout_format="nvfp4", train_dtype="fp32").rollout == "bf16"
    assert RLConfig(rollout_format="e8m9", train_dtype="fp16").rollout == "fp32"


def test_vllm_runs_fp8_only_on_cuda_and_otherwise_names_the_hf_engine():
    assert formats.vllm_kwargs("fp8-e4m3", cuda=True) == {"quantization": "fp8"}
    assert formats.vllm_kwargs("bf16", cuda=False) == {}
    with pytest.raises(ValueError, match="CUDA.*HF engine"):
        formats.vllm_kwargs("fp8-e4m3", cuda=False)
    with pytest.raises(ValueError, match="not at all.*HF engine"):
        formats.vllm_kwargs("nvfp4", cuda=True)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="HF engine"):
            RLConfig(rollout_format="fp8-e4m3", rollout_engine="vllm")


def test_the_audit_fails_a_rollout_whose_requested_format_did_not_run():
    assert formats.audit("nvfp4", {"nvfp4": 12, "sdpa/bf16": 4}) == {
        "audit/rollout_format": "nvfp4",
        "audit/rollout_format_gemms": 12,
    }
    with pytest.raises(PrecisionError, match="'nvfp4' but no GEMM ran in it"):
        formats.audit("nvfp4", Counter({"bf16": 12}))
    with pytest.raises(PrecisionError, match="'nvfp4' but GEMMs ran in"):
        formats.audit("nvfp4", {"mxfp4": 12})
    assert formats.audit("bf16", {})["audit/rollout_format"] == "bf16"  # a plain dtype: its own dtype audit


def test_an_rl_run_in_a_rollout_format_audits_it_every_step(tmp_path, tiny_random_model, arith_jsonl):
    cfg = RLConfig(
        model=tiny_random_model,
        dataset=arith_jsonl,
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        output_dir=str(tmp_path / "run"),
        train_dtype="fp32",
        rollout_format="fp8-e4m3",
    )
    rows = train(cfg, progress=False).rows
    assert len(rows) == 2
    for row in rows:
        assert row["audit/rollout_format"] == "fp8-e4m3" and row["audit/rollout_format_gemms"] > 0
        assert row["audit/rollout_dtype"] == "bf16"


def test_an_rl_run_whose_rollout_format_did_not_run_fails(tmp_path, tiny_random_model, arith_jsonl, monkeypatch):
    import contextlib

    @contextlib.contextmanager
    def plain(fmt, half_gemm="auto", model=None, device=None):  # an engine that forgot its format
        yield None

    monkeypatch.setattr(formats, "policy", plain)
    cfg = RLConfig(
        model=tiny_random_model,
        dataset=arith_jsonl,
        max_steps=1,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        output_dir=str(tmp_path / "run"),
        train_dtype="fp32",
        rollout_format="mxfp4",
    )
    with pytest.raises(PrecisionError, match="'mxfp4' but no GEMM ran in it"):
        train(cfg, progress=False)


# --- the offline ladder -----------------------------------------------------------------------------------


def test_the_ladder_measures_each_format_against_the_fp32_trainer():
    from nbkit.plots.ladder import ladder_figure

    cfg = ladder.LadderConfig(
        formats=("fp32", "bf16", "mxfp4"), n_prompts=3, samples_per_prompt=2, max_tokens=12, n_boot=20
    )
    res = ladder.run_ladder(cfg)
    table = res.table()
    assert list(table["format"]) == ["fp32", "bf16", "mxfp4"]
    assert list(table["quantized GEMMs"])[0] == 0 and list(table["quantized GEMMs"])[2] > 0
    diff = dict(zip(table["format"], table["token_abs_logp_diff/mean"]))
    assert diff["fp32"] < 1e-5 < diff["bf16"] < diff["mxfp4"]  # exact, then the format's rounding
    for key in ladder.HEADLINE_KEYS:
        assert (table[f"{key} low"] <= table[key] + 1e-12).all() and (table[key] <= table[f"{key} high"] + 1e-12).all()
    fig = ladder_figure(table)
    assert all(fig.layout[f"yaxis{i if i > 1 else ''}"].type == "log" for i in range(1, 4))


def test_a_ladder_with_an_unknown_format_is_refused_before_any_model_loads():
    with pytest.raises(ValueError, match=r"'fp6'.*nvfp4"):
        ladder.LadderConfig(model="no-such-model", formats=("bf16", "fp6"))


# --- the mechanism variants: stochastic rounding, weights only, activations only ----------------------------


def rounding_bias(rnd, x: torch.Tensor, elem, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element of ``x``: the mean error in magnitude of ``n`` roundings ``rnd(x)``, in units of the grid's
    spacing, and its standard error (sample std / √n)."""
    unit = elem.spacing(x).double() * torch.sign(x).double()
    errs = torch.stack([(rnd(x).double() - x.double()) / unit for _ in range(n)])
    return errs.mean(0), errs.std(0) / math.sqrt(n)


def off_grid(elem, n: int = 256, seed: int = 0) -> torch.Tensor:
    """Values (of both signs) a fraction 0.1–0.45 of a spacing above a grid point in magnitude (round to nearest
    always rounds them down in magnitude)."""
    g = torch.Generator().manual_seed(seed)
    grid = elem.round(torch.randn(n, generator=g) * torch.exp2(torch.randint(-8, 8, (n,), generator=g).float()))
    grid = grid[grid != 0]
    up = grid.abs() + (0.1 + 0.35 * torch.rand(grid.shape, generator=g)) * elem.spacing(grid.abs())
    return torch.copysign(up, grid)


@pytest.mark.parametrize("elem", [e8m(3), e8m(1), E5M2], ids=lambda e: e.name)
def test_stochastic_rounding_is_unbiased_within_its_standard_error(elem):
    x = off_grid(elem)
    g = torch.Generator().manual_seed(1)
    mean, se = rounding_bias(lambda t: elem.round_stochastic(t, g), x, elem, n=4000)
    assert (se > 0).all()
    assert ((mean.abs() / se) < 4.5).all()  # every element (256 tests at 4.5 se)
    pooled = mean.mean() / (mean.std() / math.sqrt(len(mean)))
    assert abs(pooled) < 3
    # the same test detects round-to-nearest's bias: it always rounds these values down
    near_mean, _ = rounding_bias(elem.round, x, elem, n=2)  # deterministic: its spread is 0
    assert (near_mean < -0.09).all() and abs(near_mean.mean() / (near_mean.std() / math.sqrt(len(x)))) > 3


@pytest.mark.parametrize("elem", [e8m(3), E5M2], ids=lambda e: e.name)
def test_stochastic_rounding_lands_on_a_neighbour_and_is_reproducible_by_seed(elem):
    x = torch.randn(5000) * 10
    a = elem.round_stochastic(x, torch.Generator().manual_seed(3))
    b = elem.round_stochastic(x, torch.Generator().manual_seed(3))
    assert same_bits(a, b)
    assert not torch.equal(a, elem.round_stochastic(x, torch.Generator().manual_seed(4)))
    down = torch.floor(x / elem.spacing(x)) * elem.spacing(x)
    assert ((a == down) | (a == down + elem.spacing(x))).all()
    assert torch.equal(elem.round(a), a)  # on the grid
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -2.5])
    assert same_bits(elem.round_stochastic(special, torch.Generator().manual_seed(0)), special)


def test_a_stochastic_format_needs_a_generator_and_a_nearest_one_refuses_it():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="e8m3-linear-sr.*Generator"):
        formats.quantize_operand(x, "e8m3-linear-sr", "activation")
    with pytest.raises(ValueError, match="e8m3-linear-rn.*no generator"):
        formats.quantize_operand(x, "e8m3-linear-rn", "activation", torch.Generator())
    with pytest.raises(ValueError, match="e8m3-linear-sr.*Generator"):
        formats.FormatGemm("e8m3-linear-sr")


@pytest.mark.parametrize(
    ("name", "rounded", "kept"), [("e8m3-weights", "weight", "activation"), ("e8m3-acts", "activation", "weight")]
)
def test_weights_only_and_activations_only_leave_the_other_operand_bitwise_fp32(name, rounded, kept):
    x = torch.randn(16, 64)
    fmt = formats.get(name)
    assert fmt.base == "fp32"
    same, _ = formats.quantize_operand(x, fmt, kept)
    assert same_bits(same, x)
    q, _ = formats.quantize_operand(x, fmt, rounded)
    assert same_bits(q, e8m(3).round(x)) and not torch.equal(q, x)


def _round_linear_inputs(model, head):
    """Forward pre-hooks rounding every linear layer's input (the LM head's excepted) to e8m3."""
    return [
        m.register_forward_pre_hook(lambda mod, args: (e8m(3).round(args[0]),))
        for m in model.modules()
        if isinstance(m, torch.nn.Linear) and m is not head
    ]


def test_weights_only_and_activations_only_run_inside_a_forward_as_their_definitions(arith_model):
    """e8m3-weights = an FP32 forward with every linear weight (not the head) rounded to e8m3; e8m3-acts = an FP32
    forward with every linear input (not the head's) rounded; bit for bit, and each GEMM counted for the audit."""
    import copy

    model, tok, prompts = arith_model
    ids = torch.tensor([tok(prompts[0])["input_ids"]])
    head = model.get_output_embeddings()
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules()) - 1
    with torch.no_grad():
        rounded = copy.deepcopy(model)
        for m in rounded.modules():
            if isinstance(m, torch.nn.Linear) and m is not rounded.get_output_embeddings():
                m.weight.copy_(e8m(3).round(m.weight))
        want_w = rounded(ids).logits
        handles = _round_linear_inputs(model, head)
        want_a = model(ids).logits
        for h in handles:
            h.remove()
        plain = model(ids).logits
        for name, want in (("e8m3-weights", want_w), ("e8m3-acts", want_a)):
            with formats.policy(name, model=model) as mode:
                got = model(ids).logits
            assert torch.equal(got, want) and not torch.equal(got, plain), name
            assert formats.audit(name, mode.counts)["audit/rollout_format_gemms"] == linears


def test_a_stochastic_rollout_follows_its_seed_and_is_audited(arith_model):
    model, tok, prompts = arith_model
    runs = [sample(arith_model, format="e8m3-linear-sr") for _ in range(2)]
    assert [r.logprobs for r in runs[0][1]] == [r.logprobs for r in runs[1][1]]
    assert formats.audit("e8m3-linear-sr", runs[0][0].take_format_gemms())["audit/rollout_format_gemms"] > 0
    engine = make_engine("hf", model, tokenizer=tok, progress=False, format="e8m3-linear-sr")
    other = engine.generate(prompts, SamplingConfig(max_tokens=24, n=2, seed=6))
    assert [r.logprobs for r in other] != [r.logprobs for r in runs[0][1]]
    _, nearest = sample(arith_model, format="e8m3-linear-rn")
    assert [r.logprobs for r in nearest] != [r.logprobs for r in runs[0][1]]
