"""The length law's figure: Σ log(π/μ) of every response against its length, one colour per dtype and π recipe,
with the fitted line (slope per 1,000 tokens in the legend)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from nbkit.offline import lengthlaw


def seq_log_ratio_vs_length(runs: dict[str, list[dict]], laws: dict | None = None) -> go.Figure:
    """Scatter of per-sequence rows (``nbkit.offline.lengthlaw_measure.measure``) with each label's least-squares
    line."""
    laws = laws or lengthlaw.laws(runs, n_boot=200)
    fig = go.Figure()
    for i, ((label, rows), law) in enumerate(zip(runs.items(), laws.values())):
        colour = qualitative.Plotly[i % len(qualitative.Plotly)]
        x = np.array([r["length"] for r in rows], dtype=float)
        y = np.array([r["sum_log_ratio"] for r in rows], dtype=float)
        fig.add_trace(
            go.Scatter(
                x=x, y=y, mode="markers", name=label, legendgroup=label, opacity=0.6, marker=dict(color=colour, size=5)
            )
        )
        xs = np.array([x.min(), x.max()])
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=y.mean() + law.slope / 1000 * (xs - x.mean()),
                mode="lines",
                legendgroup=label,
                line=dict(color=colour),
                name=f"{label}: {law.slope:+.3g} per 1k [{law.slope_ci[0]:.2g}, {law.slope_ci[1]:.2g}]",
            )
        )
    return fig.update_layout(
        xaxis_title="response length (tokens)",
        yaxis_title="Σ log π − log μ (nats)",
        title="Length law: sequence log-ratio against length (paper: −1.01 BF16, −0.07 FP16 per 1k)",
    )
