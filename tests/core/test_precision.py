"""Specification of nbkit.precision.number_formats: the format table against torch.finfo, rounding against torch's casts
bit for
bit, the grid/ulp properties, the primer's experiments and the errors bad input gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nbkit.precision import number_formats as P

LOW = ["fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2"]
UINT = {8: torch.uint8, 16: torch.int16, 32: torch.int32}


def torch_bits(t: torch.Tensor, f: P.NumberFormat) -> np.ndarray:
    """torch's bit patterns of a tensor of dtype ``f.torch_dtype``, as non-negative int64."""
    return t.view(UINT[f.bits]).numpy().astype(np.int64) & ((1 << f.bits) - 1)


def random_inputs(f: P.NumberFormat, n: int = 40_000, seed: int = 0) -> torch.Tensor:
    """≥ 100,000 float32 values for casting to ``f``: random bit patterns (every exponent, inf, NaN), log-uniform
    magnitudes over the format's range incl. subnormals and past its max, exact ties, and edge cases."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randint(-(2**31), 2**31, (n,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    lo, hi = math.log2(f.smallest_subnormal) - 3, math.log2(f.max_finite) + 1
    mags = torch.exp2(torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo)
    signs = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    log_uniform = (mags * signs).float()
    # exact ties: midpoints between neighbours of f (need m + 1 bits: exact in float32)
    pats = torch.randint(0, (1 << f.bits) - 1, (n,), generator=g).numpy()
    lo_v, hi_v = P.from_bits(pats, f), P.from_bits(pats + 1, f)
    ok = np.isfinite(lo_v) & np.isfinite(hi_v) & (np.sign(lo_v) == np.sign(hi_v))
    ties = torch.tensor((lo_v[ok] + hi_v[ok]) / 2).float()
    assert torch.equal(ties.double(), torch.tensor((lo_v[ok] + hi_v[ok]) / 2))  # really exact in float32
    top_tie = f.max_finite + P.ulp(f.max_finite, f) / 2
    edges = torch.tensor(
        [
            0.0,
            -0.0,
            math.inf,
            -math.inf,
            math.nan,
            f.max_finite,
            -f.max_finite,
            top_tie,
            -top_tie,
            np.nextafter(np.float32(top_tie), np.float32(0)),
            2 * f.max_finite,
            f.smallest_subnormal,
            f.smallest_subnormal / 2,
            f.smallest_subnormal * 0.75,
            f.smallest_normal,
            f.smallest_normal - f.smallest_subnormal,
            1.0,
            -1.0,
            3.4e38,
        ],
        dtype=torch.float32,
    )
    return torch.cat([patterns, log_uniform, ties, edges])


# ------------------------------------------------------------------------------------------------ the table


@pytest.mark.parametrize("name", list(P.NUMBER_FORMATS))
def test_format_table_matches_torch_finfo(name):
    f = P.NUMBER_FORMATS[name]
    info = torch.finfo(f.torch_dtype)
    assert f.bits == info.bits
    assert f.eps == info.eps
    assert f.smallest_normal == info.smallest_normal == info.tiny
    assert f.max_finite == info.max
    assert f.bias == 2 ** (f.exponent_bits - 1) - 1
    # torch's own decoding of the pattern 0...01 is the smallest subnormal
    assert f.smallest_subnormal == torch.tensor([1], dtype=UINT[f.bits]).view(f.torch_dtype).item()


def test_format_widths_are_the_published_ones():
    widths = {n: (f.sign_bits, f.exponent_bits, f.mantissa_bits) for n, f in P.NUMBER_FORMATS.items()}
    assert widths == {
        "fp32": (1, 8, 23),
        "fp16": (1, 5, 10),
        "bf16": (1, 8, 7),
        "fp8_e4m3fn": (1, 4, 3),
        "fp8_e5m2": (1, 5, 2),
    }


@pytest.mark.parametrize(
    "alias, name",
    [
        ("float16", "fp16"),
        ("half", "fp16"),
        ("HALF", "fp16"),
        ("bfloat16", "bf16"),
        ("torch.bfloat16", "bf16"),
        ("float32", "fp32"),
        ("e4m3", "fp8_e4m3fn"),
        ("float8_e5m2", "fp8_e5m2"),
        (torch.float16, "fp16"),
        (torch.bfloat16, "bf16"),
        (torch.float32, "fp32"),
    ],
)
def test_get_format_accepts_aliases_and_torch_dtypes(alias, name):
    assert P.get_format(alias) is P.NUMBER_FORMATS[name]


# ------------------------------------------------------------------------------------------ bit for bit


@pytest.mark.parametrize("name", LOW)
def test_rounding_matches_torch_cast_bit_for_bit(name):
    f = P.NUMBER_FORMATS[name]
    x = random_inputs(f)
    assert len(x) >= 100_000
    cast = x.to(f.torch_dtype)
    expected, got = torch_bits(cast, f), P.to_bits(x, f).astype(np.int64)
    nan = torch.isnan(x).numpy()
    assert nan.any() and (~nan).sum() >= 100_000
    mismatch = np.flatnonzero((expected != got) & ~nan)
    assert mismatch.size == 0, f"{mismatch.size} differ, e.g. x={x[mismatch[:3]].tolist()}"
    assert np.isnan(P.from_bits(got[nan], f)).all() and torch.isnan(cast[torch.from_numpy(nan)].float()).all()
    # round_to returns the same values torch's cast does, signed zeros included
    ref, mine = cast.to(torch.float64).numpy(), P.round_to(x, f)
    assert np.array_equal(ref, mine, equal_nan=True)
    assert np.array_equal(np.signbit(ref[~nan]), np.signbit(mine[~nan]))


def test_bf16_rounding_matches_torch_cast_bit_for_bit_on_exact_ties():
    f = P.NUMBER_FORMATS["bf16"]
    pats = np.arange(0x3F80, 0x3F80 + 200)  # [1, 2) and above: mantissas alternate even/odd
    ties = (P.from_bits(pats, f) + P.from_bits(pats + 1, f)) / 2
    got = P.to_bits(ties, f)
    assert np.array_equal(got, torch_bits(torch.tensor(ties, dtype=torch.float32).to(torch.bfloat16), f))
    assert np.all(got % 2 == 0) and np.array_equal(got, np.where(pats % 2 == 0, pats, pats + 1))


def test_fp32_rounding_from_float64_matches_torch_cast_bit_for_bit():
    f = P.NUMBER_FORMATS["fp32"]
    g = torch.Generator().manual_seed(1)
    n = 50_000
    mags = torch.exp2(torch.rand(n, generator=g, dtype=torch.float64) * 290 - 155)  # subnormal .. overflow
    patterns = torch.randint(-(2**63), 2**63 - 1, (n,), generator=g, dtype=torch.int64).view(torch.float64)
    pats = torch.randint(0, 0x7F7FFFFF, (n,), generator=g, dtype=torch.int64).numpy()
    ties = torch.tensor((P.from_bits(pats, f) + P.from_bits(pats + 1, f)) / 2)
    x = torch.cat([mags, -mags, patterns, ties])
    nan = torch.isnan(x).numpy()
    expected, got = torch_bits(x.to(torch.float32), f), P.to_bits(x, f).astype(np.int64)
    assert np.array_equal(expected[~nan], got[~nan])
    assert np.array_equal(x.to(torch.float32).double().numpy(), P.round_to(x, f), equal_nan=True)


@pytest.mark.parametrize("name", LOW)
def test_compose_from_torch_bit_fields_gives_torch_values(name):
    f = P.NUMBER_FORMATS[name]
    cast = random_inputs(f, seed=2).to(f.torch_dtype)
    bits = torch_bits(cast, f)
    sign, exponent = bits >> (f.bits - 1), (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1)
    mantissa = bits & ((1 << f.mantissa_bits) - 1)
    assert np.array_equal(P.compose(sign, exponent, mantissa, f), cast.to(torch.float64).numpy(), equal_nan=True)


@pytest.mark.parametrize("name", LOW)
def test_decompose_fields_and_kind_agree_with_torch(name):
    f = P.NUMBER_FORMATS[name]
    x = random_inputs(f, n=2_500, seed=3)
    cast = x.to(f.torch_dtype)
    bits, values = torch_bits(cast, f), cast.to(torch.float64).numpy()
    for xi, b, v in zip(x.tolist(), bits.tolist(), values.tolist()):
        if math.isnan(xi):
            assert P.decompose(xi, f).kind == "nan"
            continue
        d = P.decompose(xi, f)
        assert d.bits == b and d.bit_string == format(b, f"0{f.bits}b")
        assert d.bit_string == str(d.sign) + d.exponent_bits + d.mantissa_bits
        assert (d.sign, d.exponent, d.mantissa) == (b >> (f.bits - 1), int(d.exponent_bits, 2), int(d.mantissa_bits, 2))
        kind = "inf" if math.isinf(v) else "zero" if v == 0 else "subnormal" if abs(v) < f.smallest_normal else "normal"
        assert d.kind == kind and (d.rounded == v)
        if kind == "normal":
            assert 2.0**d.unbiased_exponent <= abs(v) < 2.0 ** (d.unbiased_exponent + 1)


def test_decompose_of_one_tenth_in_bf16():
    d = P.decompose(0.1, "bf16")
    assert (d.sign, d.exponent_bits, d.mantissa_bits) == (0, "01111011", "1001101")
    assert d.unbiased_exponent == -4 and d.kind == "normal" and d.rounded == 0.10009765625


def test_overflow_goes_to_inf_except_e4m3fn_which_saturates_like_torch():
    for name in ("fp16", "bf16", "fp8_e5m2"):
        f = P.NUMBER_FORMATS[name]
        assert P.round_to(f.max_finite * 1.5, f) == math.inf and P.round_to(-math.inf, f) == -math.inf
    e4m3 = P.NUMBER_FORMATS["fp8_e4m3fn"]
    assert P.round_to([1000.0, math.inf, -math.inf], e4m3).tolist() == [448.0, 448.0, -448.0]
    assert math.isnan(P.round_to(math.nan, e4m3)) and P.decompose(math.nan, e4m3).bit_string == "01111111"


def test_round_to_rounds_float64_once_where_torch_double_rounds_via_float32():
    # just above the tie between 1 and 1 + 2^-7; float32 rounds it onto the tie, then ties-to-even gives 1
    x = 1.0 + 2.0**-8 + 2.0**-30
    assert P.round_to(x, "bf16") == 1.0 + 2.0**-7
    assert torch.tensor(x, dtype=torch.float64).to(torch.bfloat16).item() == 1.0


# ---------------------------------------------------------------------------------------- ulp and the grid


@pytest.mark.parametrize("name", list(P.NUMBER_FORMATS))
def test_ulp_is_eps_at_one_and_smallest_subnormal_at_zero(name):
    f = P.NUMBER_FORMATS[name]
    assert P.ulp(1.0, f) == f.eps and P.ulp(0.0, f) == f.smallest_subnormal
    assert P.ulp(-1.0, f) == f.eps and P.ulp(f.smallest_normal / 3, f) == f.smallest_subnormal


@pytest.mark.parametrize("name", LOW)
def test_ulp_is_the_gap_to_the_next_representable_value(name):
    f = P.NUMBER_FORMATS[name]
    pats = np.arange(0, P.to_bits(f.max_finite, f))  # every non-negative finite value below the max
    v = P.from_bits(pats, f)
    assert np.array_equal(P.ulp(v, f), P.from_bits(pats + 1, f) - v)


@pytest.mark.parametrize("name", list(P.NUMBER_FORMATS))
def test_relative_rounding_error_is_at_most_unit_roundoff_in_the_normal_range(name):
    f = P.NUMBER_FORMATS[name]
    g = torch.Generator().manual_seed(4)
    lo, hi = math.log2(f.smallest_normal), math.log2(f.max_finite)
    x = torch.exp2(torch.rand(50_000, generator=g, dtype=torch.float64) * (hi - lo) + lo).numpy()
    err = P.relative_rounding_error(x, f)
    bound = f.unit_roundoff / (1 + f.unit_roundoff)  # worst case: half a step above a power of two
    assert err.max() <= bound
    assert err.max() > 0.9 * bound  # the bound is attained, not loose
    assert np.array_equal(P.round_to(P.round_to(x, f), f), P.round_to(x, f))  # idempotent
    assert P.relative_rounding_error(0.0, f) == 0.0


def test_subnormals_lose_relative_precision():
    f = P.NUMBER_FORMATS["fp16"]
    assert P.relative_rounding_error(1e-7, f) > 10 * f.unit_roundoff


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp32"])
def test_representable_grid_holds_2_to_the_m_values_per_binade(name):
    f = P.NUMBER_FORMATS[name]
    grid = (
        P.representable_grid(1.0, 2.0 - 1e-12, f)
        if f.mantissa_bits < 17
        else P.representable_grid(1.0, 1.0 + 1e3 * f.eps, f)
    )
    expected = 2**f.mantissa_bits if f.mantissa_bits < 17 else 1001
    assert len(grid) == expected and grid[0] == 1.0
    assert np.all(np.diff(grid) == f.eps) and np.array_equal(P.round_to(grid, f), grid)


def test_representable_grid_spans_zero_and_is_symmetric():
    grid = P.representable_grid(-0.02, 0.02, "fp8_e4m3fn")
    assert np.array_equal(grid, -grid[::-1]) and np.count_nonzero(grid == 0) == 1
    assert grid.max() <= 0.02 and grid.min() >= -0.02


def test_fp16_grid_near_one_is_eight_times_finer_than_bf16_and_equally_fine_near_1e_minus_5():
    near_one = [len(P.representable_grid(0.97, 1.03, f)) for f in ("fp16", "bf16")]
    assert 7 <= near_one[0] / near_one[1] <= 9
    assert P.ulp(1e-5, "fp16") == P.ulp(1e-5, "bf16") == 2.0**-24


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, bad, choices",
    [
        (lambda: P.get_format("fp12"), "'fp12'", "fp16"),
        (lambda: P.get_format(torch.int32), "torch.int32", "torch.float16"),
        (lambda: P.round_to(1.0, "float8"), "'float8'", "bf16"),
        (lambda: P.ulp(math.nan, "fp16"), "nan", "finite"),
        (lambda: P.relative_rounding_error([1.0, math.inf], "bf16"), "inf", "finite"),
        (lambda: P.representable_grid(0.0, math.inf, "fp16"), "inf", "finite"),
        (lambda: P.representable_grid(0.0, 10.0, "fp32"), "max_points", "narrow the interval"),
        (lambda: P.compose(0, 32, 0, "fp16"), "32", "0..31"),
        (lambda: P.from_bits(256, "fp8_e5m2"), "256", "0..255"),
        (lambda: P.probability_ratios(1.5, 0.9), "1.5", "(0, 1]"),
        (lambda: P.one_ulp_ratio(0.0, "bf16"), "0.0", "(0, 1]"),
        (lambda: P.accumulation_error(max_length=512, n_random=100), "100", "max_length=512"),
        (lambda: P.loss_scaling_demo(scale=-1.0), "-1.0", "positive"),
        (lambda: P.grad_scaler_trace(n_steps=5, inject_inf_at=[7]), "[7]", "0..4"),
    ],
)
def test_bad_input_raises_value_error_naming_the_value_and_the_choices(call, bad, choices):
    with pytest.raises(ValueError) as e:
        call()
    assert bad in str(e.value) and choices in str(e.value)


# -------------------------------------------------------------------------------- the primer's experiments


def test_bf16_rounds_0_9001_and_0_9002_to_the_same_value_so_the_ratio_is_exactly_one():
    rows = {r.format: r for r in P.probability_ratios(0.9002, 0.9001)}
    assert list(rows) == ["float64", "fp32", "fp16", "bf16"]
    assert rows["bf16"].pi == rows["bf16"].mu and rows["bf16"].ratio == 1.0 and rows["bf16"].k3 == 0.0
    assert rows["bf16"].tokens_to_clip == math.inf
    assert abs(rows["fp32"].ratio - rows["float64"].ratio) < 1e-7
    assert rows["fp16"].ratio == P.round_to(0.9002, "fp16") / P.round_to(0.9001, "fp16") != 1.0
    for r in rows.values():
        assert not r.clipped and r.k3 >= 0 and r.k1 == -r.log_ratio
        assert r.log_ratio == 0 or math.isclose(r.tokens_to_clip * abs(r.log_ratio), math.log(1.2))


def test_bf16_inflates_a_tiny_difference_straddling_a_rounding_boundary_to_a_whole_grid_step():
    boundary = (P.round_to(0.9, "bf16") + P.round_to(0.9, "bf16") + P.ulp(0.9, "bf16")) / 2
    rows = {r.format: r for r in P.probability_ratios(boundary + 1e-5, boundary - 1e-5)}
    assert rows["float64"].ratio - 1 < 3e-5
    assert rows["bf16"].ratio - 1 > 100 * (rows["float64"].ratio - 1)
    assert rows["bf16"].ratio == pytest.approx(1 + P.ulp(0.9, "bf16") / P.round_to(boundary - 1e-5, "bf16"))


def test_one_ulp_ratio_of_bf16_is_eight_times_that_of_fp16():
    p = np.linspace(0.05, 0.99, 50)
    ratio = (P.one_ulp_ratio(p, "bf16") - 1) / (P.one_ulp_ratio(p, "fp16") - 1)
    assert np.all((ratio > 7.5) & (ratio < 8.5))


def test_accumulation_error_grows_with_length_and_is_largest_in_bf16():
    res = P.accumulation_error(max_length=300, n_random=300 * 8, seed=0)
    assert res.lengths == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300] and res.n_sequences == 8
    last = {k: v[-1] for k, v in res.mean_abs_error.items()}
    assert last["bf16"] > last["fp16"] > last["fp32"] > 0
    assert res.mean_abs_error["bf16"][-1] > res.mean_abs_error["bf16"][0]
    # the running sum really rounds in the dtype: far more error than the rounded inputs alone carry
    assert last["bf16"] > 10 * res.input_rounding_error["bf16"][-1]
    again = P.accumulation_error(max_length=300, n_random=300 * 8, seed=0)
    assert again.mean_abs_error == res.mean_abs_error  # seeded


def test_loss_scaling_rescues_gradients_that_fp16_flushes_to_zero():
    demo = P.loss_scaling_demo(scale=2.0**16)
    g32 = demo.grads.astype(np.float32).astype(np.float64)
    fp16 = P.NUMBER_FORMATS["fp16"]
    counts = demo.counts()
    assert counts["without scale"]["zero"] == np.sum(g32 <= fp16.smallest_subnormal / 2) > 0
    assert (
        counts["without scale"]["subnormal"]
        == np.sum((g32 > fp16.smallest_subnormal / 2) & (g32 < fp16.smallest_normal))
        > 0
    )
    assert counts["with scale"] == {"zero": 0, "subnormal": 0, "normal": len(demo.grads), "inf": 0}
    assert demo.rel_error_scaled.max() <= fp16.unit_roundoff < demo.rel_error_unscaled.max()
    assert P.loss_scaling_demo(scale=2.0**30).counts()["with scale"]["inf"] > 0  # too large a scale overflows


def test_grad_scaler_skips_the_injected_step_halves_the_scale_then_grows_back():
    gi = 3
    trace = P.grad_scaler_trace(n_steps=12, inject_inf_at=[4], init_scale=1024.0, growth_interval=gi)
    assert [s.step for s in trace if s.skipped] == [4] == [s.step for s in trace if s.injected_inf]
    hit = trace[4]
    assert hit.next_scale == hit.scale / 2 and trace[5].scale == hit.scale / 2
    assert trace[5].loss == hit.loss  # the skipped step left the model as it was
    assert all(s.next_scale >= s.scale for s in trace if not s.skipped)
    # after growth_interval good steps the scale doubles again
    assert trace[4 + gi].next_scale == 2 * trace[4 + gi].scale == hit.scale
    assert all(trace[k].next_scale == trace[k].scale for k in range(5, 4 + gi))


# ------------------------------------------------------------------------------------------------ figures


def test_figures_show_the_measured_data():
    from nbkit.plots import precision as PP

    trace = P.grad_scaler_trace(n_steps=8, inject_inf_at=[2, 5], growth_interval=2)
    marked = PP.grad_scaler_figure(trace).data[1]
    assert list(marked.x) == [2, 5] and list(marked.y) == [trace[2].scale, trace[5].scale]
    grid = PP.grid_figure(centers=(1.0,), rel_width=0.03)
    assert {t.name: len(t.x) for t in grid.data} == {
        f: len(P.representable_grid(0.97, 1.03, f)) for f in ("fp16", "bf16")
    }


def test_show_embeds_plotlyjs_once_per_kernel(monkeypatch):
    import IPython.display

    from nbkit import plots

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    monkeypatch.setattr(plots, "_plotlyjs_sent", False)
    fig = plots.precision.format_table()
    plots.show(fig)
    plots.show(fig)
    assert "plotly.js v" in shown[0] and "plotly.js v" not in shown[1]
    assert "plotly-graph-div" in shown[1]
