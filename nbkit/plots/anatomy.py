"""Figures of ``nbkit.offline.anatomy``: the additive split of π − μ as a waterfall, and the per-layer divergence."""

from __future__ import annotations

import numpy as np

from nbkit.offline import anatomy


def waterfall(res, group: str = "implementation"):
    """One group's path as a waterfall: each step's signed Δ log p per token stacked on the ones before it (with its
    bootstrap CI), then the unattributed remainder, then the total measured from the path's two ends (the stack ends
    exactly where the total bar does)."""
    import plotly.graph_objects as go

    split = res.split[group]
    names = [*res.factors(group), anatomy.UNATTRIBUTED]
    values = [split[n][anatomy.DELTA] for n in names]
    base = np.concatenate([[0.0], np.cumsum(values)[:-1]])
    lows = [(split[n]["CI"] or (v, v))[0] for n, v in zip(names, values)]
    highs = [(split[n]["CI"] or (v, v))[1] for n, v in zip(names, values)]
    colors = ["#4c78a8" if n != anatomy.UNATTRIBUTED else "#bab0ac" for n in names]
    fig = go.Figure()
    fig.add_bar(
        x=names,
        y=values,
        base=base,
        name="step (Δ from the state before)",
        marker_color=colors,
        error_y=dict(
            type="data",
            symmetric=False,
            array=[h - v for h, v in zip(highs, values)],
            arrayminus=[v - lo for lo, v in zip(lows, values)],
        ),
    )
    total = split["total"]
    lo, hi = total["CI"] or (total[anatomy.DELTA],) * 2
    fig.add_bar(
        x=["total"],
        y=[total[anatomy.DELTA]],
        name="total",
        marker_color="#f58518",
        error_y=dict(
            type="data", symmetric=False, array=[hi - total[anatomy.DELTA]], arrayminus=[total[anatomy.DELTA] - lo]
        ),
    )
    fig.update_layout(
        title=f"{res.config.model} · {res.engine} · {res.config.dtype}: {group} path, "
        f"signed Δ log p per token (steps + unattributed = total)",
        yaxis_title=anatomy.DELTA,
        showlegend=True,
    )
    return fig


def layer_figure(res):
    """Relative hidden-state error against FP32, layer by layer (where the gap grows inside the network)."""
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Scatter(x=list(range(len(res.layers))), y=res.layers, mode="lines+markers", name=res.config.dtype)
    )
    fig.update_layout(
        title=f"{res.config.model} in {res.config.dtype}: hidden-state error against FP32 by layer",
        xaxis_title="layer (0 = embeddings)",
        yaxis=dict(type="log", title="‖h − h_FP32‖ / ‖h_FP32‖"),
    )
    return fig
