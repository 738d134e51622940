"""Training curves in the layout of the paper's Fig. 3: reward, π–μ mismatch (log scale), gradient norm and
loss scale against step, one colour per run."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from nbkit.records import schema

PANELS = (
    ("accuracy", "training accuracy", False),
    (schema.TOKEN_ABS_LOGP_DIFF, "mean |log π − log μ| per token", True),
    ("grad_norm", "gradient norm", True),
    ("loss_scale", "FP16 loss scale", True),
)
"""(metric key, panel title, log y axis)."""


def training_curves(runs: dict[str, list[dict]], panels=PANELS, smooth: int = 1) -> go.Figure:
    """A 2×2 grid of metrics vs step, runs overlaid (``smooth`` = moving-average window)."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels], horizontal_spacing=0.1)
    colours = qualitative.Plotly
    for i, (label, rows) in enumerate(runs.items()):
        for j, (key, _, _) in enumerate(panels):
            pts = [(r[schema.STEP], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
            if not pts:
                continue
            steps, values = zip(*pts)
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=_moving(values, smooth),
                    name=label,
                    legendgroup=label,
                    showlegend=j == 0,
                    line=dict(color=colours[i % len(colours)]),
                ),
                row=j // 2 + 1,
                col=j % 2 + 1,
            )
    for j, (_, _, log) in enumerate(panels):
        if log:
            fig.update_yaxes(type="log", row=j // 2 + 1, col=j % 2 + 1)
        fig.update_xaxes(title_text="step", row=j // 2 + 1, col=j % 2 + 1)
    fig.update_layout(height=650, title="RL training: precision side by side", legend_title="run")
    return fig


def step_time_breakdown(runs: dict[str, list[dict]]) -> go.Figure:
    """Mean seconds per step split into rollout, weight sync, scoring, mismatch pass and update, per run."""
    parts = (schema.TIME_ROLLOUT, schema.TIME_SYNC, schema.TIME_SCORE, schema.TIME_MISMATCH, schema.TIME_UPDATE)
    fig = go.Figure()
    for part in parts:
        fig.add_trace(
            go.Bar(
                name=part.split("/")[1],
                x=list(runs),
                y=[sum(r.get(part, 0) for r in rows) / max(schema.optimiser_steps(rows), 1) for rows in runs.values()],
            )
        )
    fig.update_layout(barmode="stack", yaxis_title="seconds per step", title="Where a step's time goes")
    return fig


def _moving(values, k: int):
    if k <= 1:
        return list(values)
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - k + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out
