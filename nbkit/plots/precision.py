"""Figures of the precision primer: the grids, ratios, accumulation error, loss scaling and the GradScaler trace.

Each function takes the result of an ``nbkit.precision.number_formats`` experiment (or computes a cheap one) and returns
a
``plotly.graph_objects.Figure``; nothing here measures anything new.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nbkit.precision import number_formats as P

COLORS = {
    "fp32": "#7f7f7f",
    "fp16": "#1f77b4",
    "bf16": "#d62728",
    "fp8_e4m3fn": "#9467bd",
    "fp8_e5m2": "#8c564b",
    "float64": "#2ca02c",
}
"""One colour per format, the same in every figure."""


def format_table(formats: Sequence = tuple(P.NUMBER_FORMATS)) -> go.Figure:
    """The format table (bits, bias, eps, range) as a plotly table."""
    fs = [P.get_format(f) for f in formats]
    header = [
        "format",
        "sign/exp/mantissa bits",
        "bias",
        "eps (2^-m)",
        "smallest subnormal",
        "smallest normal",
        "largest finite",
        "overflow",
        "torch dtype",
    ]
    cells = [
        [f.name for f in fs],
        [f"{f.sign_bits}/{f.exponent_bits}/{f.mantissa_bits}" for f in fs],
        [f.bias for f in fs],
        [f"{f.eps:.4g}" for f in fs],
        [f"{f.smallest_subnormal:.4g}" for f in fs],
        [f"{f.smallest_normal:.4g}" for f in fs],
        [f"{f.max_finite:.6g}" for f in fs],
        [f.overflow for f in fs],
        [str(f.torch_dtype) for f in fs],
    ]
    fig = go.Figure(go.Table(header=dict(values=header), cells=dict(values=cells)))
    fig.update_layout(height=60 + 35 * len(fs), margin=dict(l=10, r=10, t=10, b=10))
    return fig


def grid_figure(
    centers: Sequence[float] = (1.0, 1e-5), formats: Sequence = ("fp16", "bf16"), rel_width: float = 0.03
) -> go.Figure:
    """The representable values of each format within ``center * (1 ± rel_width)``, one panel per center."""
    titles = []
    for c in centers:
        spacing = ", ".join(f"{P.get_format(f).name} ulp {P.ulp(c, f):.3g}" for f in formats)
        titles.append(f"near {c:g}: {spacing}")
    fig = make_subplots(rows=len(centers), cols=1, subplot_titles=titles, vertical_spacing=0.18)
    for row, c in enumerate(centers, start=1):
        lo, hi = c * (1 - rel_width), c * (1 + rel_width)
        for f in formats:
            name = P.get_format(f).name
            grid = P.representable_grid(lo, hi, f)
            fig.add_trace(
                go.Scatter(
                    x=grid,
                    y=[name] * len(grid),
                    mode="markers",
                    name=name,
                    marker=dict(symbol="line-ns-open", size=18, color=COLORS.get(name)),
                    showlegend=row == 1,
                    legendgroup=name,
                    hovertemplate=f"{name}: %{{x:.8g}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
        fig.add_vline(x=c, line=dict(color="black", dash="dot"), row=row, col=1)
        fig.update_xaxes(range=[lo, hi], exponentformat="e" if c < 1e-3 else "none", row=row, col=1)
    fig.update_layout(
        title="Representable values: FP16's grid is 8x finer than BF16's wherever both are normal",
        height=220 * len(centers) + 80,
    )
    return fig


def ratio_figure(rows: Sequence[P.RatioRow], clip: float = 0.2) -> go.Figure:
    """|log(π/μ)| per format for two close probabilities, against PPO's clip edge log(1 + clip)."""
    names = [r.format for r in rows]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=[abs(r.log_ratio) for r in rows],
            marker_color=[COLORS.get(n, "#333") for n in names],
            text=[f"π/μ = {r.ratio:.6f}" for r in rows],
            textposition="outside",
            hovertemplate="%{x}: |log π/μ| = %{y:.3g}<extra></extra>",
        )
    )
    fig.add_hline(
        y=math.log1p(clip), line=dict(color="black", dash="dash"), annotation_text=f"PPO clip edge log(1+{clip:g})"
    )
    pi, mu = rows[0].pi, rows[0].mu
    fig.update_layout(
        title=f"π = {pi:g}, μ = {mu:g} stored in each format: the ratio the loss sees",
        yaxis=dict(title="|log π/μ| (0 = rounded to the same value)", type="log"),
        xaxis_title="format of the stored probabilities",
        height=420,
    )
    return fig


def one_ulp_ratio_figure(formats: Sequence = ("fp16", "bf16"), n: int = 400) -> go.Figure:
    """The smallest ratio above 1 two neighbouring probabilities can have, against the probability."""
    p = np.logspace(-3, 0, n)
    fig = go.Figure()
    for f in formats:
        name = P.get_format(f).name
        fig.add_trace(
            go.Scatter(
                x=p, y=P.one_ulp_ratio(p, f) - 1, mode="lines", name=name, line=dict(color=COLORS.get(name), shape="hv")
            )
        )
    fig.update_layout(
        title="One rounding step between π and μ: the ratio it creates (minus 1)",
        xaxis=dict(title="probability", type="log"),
        yaxis=dict(title="π/μ − 1", type="log"),
        height=400,
    )
    return fig


def accumulation_figure(result: P.AccumulationResult) -> go.Figure:
    """Error of a summed sequence log-prob against sequence length, accumulated in each dtype (solid) and
    from rounded inputs alone (dashed), log-log."""
    fig = go.Figure()
    for name, errs in result.mean_abs_error.items():
        fig.add_trace(
            go.Scatter(
                x=result.lengths,
                y=errs,
                mode="lines+markers",
                name=f"{name} accumulated",
                line=dict(color=COLORS.get(name)),
            )
        )
        fig.add_trace(
            go.Scatter(
                x=result.lengths,
                y=result.input_rounding_error[name],
                mode="lines",
                name=f"{name} inputs rounded, exact sum",
                line=dict(color=COLORS.get(name), dash="dash"),
            )
        )
    fig.update_layout(
        title=f"Σ log p over a sequence: |low-precision sum − float64 sum|, mean of "
        f"{result.n_sequences} random sequences",
        xaxis=dict(title="sequence length (tokens)", type="log"),
        yaxis=dict(title="absolute error of Σ log p (nats)", type="log"),
        height=450,
    )
    return fig


def loss_scaling_figure(demo: P.LossScalingDemo) -> go.Figure:
    """Relative error of gradients stored in fp16 with and without a loss scale (gaps = stored exactly)."""
    fp16 = P.get_format("fp16")
    fig = go.Figure()
    for label, err, color in (
        ("without scale", demo.rel_error_unscaled, COLORS["bf16"]),
        (f"with scale {demo.scale:g}", demo.rel_error_scaled, COLORS["fp16"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=demo.grads,
                y=np.where(err > 0, err, np.nan),
                mode="markers",
                name=label,
                marker=dict(color=color, size=6),
            )
        )
    fig.add_vrect(
        x0=fp16.smallest_subnormal / 2,
        x1=fp16.smallest_normal,
        fillcolor="orange",
        opacity=0.15,
        line_width=0,
        annotation_text="fp16 subnormal",
        annotation_position="top left",
    )
    fig.add_vrect(
        x0=demo.grads.min(),
        x1=fp16.smallest_subnormal / 2,
        fillcolor="gray",
        opacity=0.15,
        line_width=0,
        annotation_text="flushed to 0",
        annotation_position="bottom left",
    )
    fig.add_hline(y=fp16.unit_roundoff, line=dict(color="black", dash="dot"), annotation_text="fp16 eps/2")
    fig.update_layout(
        title="Gradients stored in FP16: relative error without and with loss scaling",
        xaxis=dict(title="true gradient magnitude", type="log", exponentformat="power"),
        yaxis=dict(title="relative error (1 = lost entirely)", type="log"),
        height=430,
    )
    return fig


def grad_scaler_figure(trace: Sequence[P.ScalerStep]) -> go.Figure:
    """Loss scale per step of a live GradScaler run, skipped steps marked."""
    steps = [s.step for s in trace]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=("loss scale", "loss"), vertical_spacing=0.12)
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[s.scale for s in trace],
            mode="lines+markers",
            name="scale used",
            line=dict(color=COLORS["fp16"], shape="hv"),
        ),
        row=1,
        col=1,
    )
    skipped = [s for s in trace if s.skipped]
    fig.add_trace(
        go.Scatter(
            x=[s.step for s in skipped],
            y=[s.scale for s in skipped],
            mode="markers",
            name="step skipped (inf/NaN gradient)",
            marker=dict(symbol="x", size=14, color=COLORS["bf16"]),
        ),
        row=1,
        col=1,
    )
    injected = [s.step for s in trace if s.injected_inf]
    fig.add_trace(
        go.Scatter(x=steps, y=[s.loss for s in trace], mode="lines+markers", name="loss", line=dict(color="#333")),
        row=2,
        col=1,
    )
    for step in injected:
        fig.add_vline(x=step, line=dict(color=COLORS["bf16"], dash="dot"))
    fig.update_yaxes(type="log", dtick=math.log10(2), tickformat=".0f", row=1, col=1)
    fig.update_xaxes(title_text="optimizer step", row=2, col=1)
    fig.update_layout(
        title="torch.amp.GradScaler: an inf gradient skips the step and halves the scale; "
        "the scale doubles again after growth_interval good steps",
        height=520,
    )
    return fig
