"""Specification of the primer's widgets: their callbacks, called directly, update state and what is displayed."""

from __future__ import annotations

import pytest

from nbkit.precision import number_formats as P
from nbkit.workbook.widgets import BitExplorer, GridExplorer, LossScaleExplorer, RatioExplorer


def shown_bits(explorer: BitExplorer, fmt: str) -> str:
    """The 0/1 string the toggle buttons of ``fmt`` display."""
    buttons = explorer.buttons[fmt]
    assert all(b.value == (b.description == "1") for b in buttons)
    return "".join(b.description for b in buttons)


def test_bit_explorer_shows_the_typed_value_in_every_format():
    ex = BitExplorer("1.0")
    assert shown_bits(ex, "fp16") == "0011110000000000"
    assert shown_bits(ex, "bf16") == "0011111110000000"
    assert shown_bits(ex, "fp32") == "0" + "01111111" + "0" * 23
    ex.value_input.value = "1e-7"
    assert ex.target == 1e-7
    assert ex.decomposition("fp16").kind == "subnormal" and ex.decomposition("fp8_e4m3fn").kind == "zero"
    assert shown_bits(ex, "fp16") == format(P.to_bits(1e-7, "fp16"), "016b")
    assert "subnormal" in ex.labels["fp16"].value


def test_flipping_the_last_mantissa_bit_moves_one_by_eps():
    ex = BitExplorer("1.0")
    ex.flip_bit("bf16", 15)
    assert ex.decomposition("bf16").rounded == 1.0 + 2.0**-7
    assert shown_bits(ex, "bf16").endswith("1") and "1.0078125" in ex.labels["bf16"].value
    ex.flip_bit("fp16", 15)
    assert ex.decomposition("fp16").rounded == 1.0 + 2.0**-10
    ex.flip_bit("bf16", 15)
    assert ex.decomposition("bf16").rounded == 1.0  # flipping back restores


def test_clicking_a_bit_button_flips_that_bit():
    ex = BitExplorer("1.0")
    ex.buttons["fp16"][0].value = True  # the sign bit
    assert ex.decomposition("fp16").rounded == -1.0
    ex.buttons["bf16"][1].value = True  # top exponent bit: 0 11111111 0000000 is inf
    assert ex.decomposition("bf16").kind == "inf" and "inf" in ex.labels["bf16"].value
    assert ex.decomposition("fp16").rounded == -1.0  # other formats untouched


def test_bit_explorer_reports_unreadable_input_and_keeps_its_state():
    ex = BitExplorer("0.5")
    before = dict(ex.bits)
    ex.value_input.value = "zero point five"
    assert "zero point five" in ex.message.value and ex.bits == before and ex.target == 0.5
    ex.value_input.value = "0.25"
    assert ex.message.value == "" and ex.decomposition("fp32").rounded == 0.25
    with pytest.raises(ValueError, match="0..15"):
        ex.flip_bit("fp16", 16)


def test_grid_explorer_counts_values_in_the_window_and_redraws():
    ex = GridExplorer(center=1.0, rel_width=0.03)
    assert ex.counts == {f: len(P.representable_grid(0.97, 1.03, f)) for f in ("fp16", "bf16")}
    assert ex.counts["fp16"] > 5 * ex.counts["bf16"]
    ex.center.value = 1e-5
    lo, hi = ex.center.value * (1 - ex.rel_width.value), ex.center.value * (1 + ex.rel_width.value)
    assert ex.counts["fp16"] == len(P.representable_grid(lo, hi, "fp16"))
    assert all(lo <= x <= hi for trace in ex.figure.data for x in trace.x)
    ex.formats.value = ("fp8_e5m2",)
    assert list(ex.counts) == ["fp8_e5m2"] and [t.name for t in ex.figure.data] == ["fp8_e5m2"]
    (shown,) = ex.out.outputs  # the output widget holds exactly the current figure
    traces = shown["data"]["application/vnd.plotly.v1+json"]["data"]
    assert [t["name"] for t in traces] == ["fp8_e5m2"] and traces[0]["x"] == list(ex.figure.data[0].x)


def test_grid_explorer_explains_a_window_too_large_to_draw():
    ex = GridExplorer(center=1.0, rel_width=0.3, formats=("fp32",))
    assert "max_points" in ex.summary.value and ex.figure is None


def test_ratio_explorer_recomputes_on_every_change():
    ex = RatioExplorer(0.9002, 0.9001)
    rows = {r.format: r for r in ex.rows}
    assert rows["bf16"].ratio == 1.0 and "bf16" in ex.table.value
    ex.mu.value = 0.5
    ex.clip.value = 0.1
    assert all(r.clipped for r in ex.rows) and "yes" in ex.table.value
    assert ex.rows[0].ratio == pytest.approx(0.9002 / 0.5)


def test_ratio_explorer_shows_the_error_for_a_probability_out_of_range():
    ex = RatioExplorer()
    ex.mu.value = 0.0
    assert ex.rows == [] and "0.0" in ex.table.value and "(0, 1]" in ex.table.value


def test_loss_scale_explorer_follows_the_slider():
    ex = LossScaleExplorer(log2_scale=16)
    assert ex.demo.scale == 2.0**16 and ex.demo.counts()["with scale"]["zero"] == 0
    ex.log2_scale.value = 0  # scale 1 = no scaling: both rows agree
    counts = ex.demo.counts()
    assert ex.demo.scale == 1.0 and counts["with scale"] == counts["without scale"]
    assert counts["with scale"]["zero"] > 0
    table_unscaled = ex.table.value
    ex.log2_scale.value = 30
    overflowed = ex.demo.counts()["with scale"]["inf"]
    assert overflowed > 0 and ex.table.value != table_unscaled
    assert f"<td style='padding:2px 8px'>{overflowed}</td>" in ex.table.value
    assert ex.figure.data[1].name == f"with scale {2.0**30:g}"
