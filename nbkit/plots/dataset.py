"""Figures of the perfectible dataset: pass rates of the pool and of the kept problems (notebook 01)."""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go


def pass_rate_histogram(
    pool_rates: list[float], kept_rates: list[float], n_samples: int, window: tuple[float, float], title: str = ""
) -> go.Figure:
    """One bar per possible pass rate k/N: every evaluated problem (grey) and the kept ones (blue), with the
    kept window shaded. Exact k/N bars, not bins: with N = 40 each bar is one count of correct samples."""
    xs = [k / n_samples for k in range(n_samples + 1)]
    pool, kept = Counter(round(r * n_samples) for r in pool_rates), Counter(round(r * n_samples) for r in kept_rates)
    fig = go.Figure(
        [
            go.Bar(
                x=xs,
                y=[pool[k] for k in range(n_samples + 1)],
                name=f"pool ({len(pool_rates)})",
                marker_color="#b0b0b0",
            ),
            go.Bar(
                x=xs,
                y=[kept[k] for k in range(n_samples + 1)],
                name=f"kept ({len(kept_rates)})",
                marker_color="#1f77b4",
            ),
        ]
    )
    lo, hi = window
    half = 0.5 / n_samples
    fig.add_vrect(
        x0=lo - half,
        x1=hi + half,
        fillcolor="#1f77b4",
        opacity=0.08,
        line_width=0,
        annotation_text=f"window [{lo:g}, {hi:g}]",
        annotation_position="top left",
    )
    fig.update_layout(
        title=title or f"Pass rate over {n_samples} samples per problem",
        barmode="overlay",
        bargap=0.05,
        xaxis_title="pass rate (correct samples / N)",
        yaxis_title="problems",
        xaxis_range=[-half * 2, 1 + half * 2],
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        template="plotly_white",
        height=380,
    )
    return fig
