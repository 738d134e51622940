"""A prediction tested: per arm, each predictor's committed gap and interval beside the observed gap's 95 % CI, with
the lines the rule reads (``nbkit.studies.smollm2_after``), so a reader sees where the runs landed against what was
predicted before them."""

from __future__ import annotations

import plotly.graph_objects as go

TITLE = "Predicted before the runs, observed after: the held-out accuracy gap to FP32 per arm"
"""The figure's title."""


def _bars(centres: list[float], intervals: list, **style) -> dict:
    """plotly's ``error_x`` for intervals ``(lo, hi)`` around ``centres``."""
    return dict(
        type="data",
        symmetric=False,
        array=[hi - c for c, (_, hi) in zip(centres, intervals, strict=True)],
        arrayminus=[c - lo for c, (lo, _) in zip(centres, intervals, strict=True)],
        **style,
    )


def predicted_observed_figure(rows: list[dict], lines: dict[float, str] | None = None) -> go.Figure:
    """``rows``: ``PreRegistered.predicted_beside_observed`` (arm, predictor, predicted gap and interval, observed
    gap and CI). One line per arm: each predictor's gap (open markers, its interval as a thin bar, offset so they
    do not overlap) and the observed gap with its CI (filled black); ``lines``: ``x → label`` drawn dashed. The axis
    spans the gaps, the observed CIs and the lines: a predicted interval wider than that runs off the plot."""
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    predictors = list(dict.fromkeys(r["predictor"] for r in rows))
    fig = go.Figure()
    step = 0.5 / max(len(predictors), 1)
    for k, pred in enumerate(predictors):
        mine = [r for r in rows if r["predictor"] == pred]
        fig.add_scatter(
            x=[r["predicted gap"] for r in mine],
            y=[arms.index(r["arm"]) + 0.15 + k * step for r in mine],
            mode="markers",
            marker=dict(symbol="circle-open", size=8),
            error_x=_bars([r["predicted gap"] for r in mine], [r["predicted interval"] for r in mine], thickness=1),
            name=f"predicted: {pred}",
            hovertemplate=f"{pred}: %{{x:.3f}}<extra></extra>",
        )
    seen = {r["arm"]: r for r in rows if r["observed gap"] is not None}
    if seen:
        obs = list(seen.values())
        fig.add_scatter(
            x=[r["observed gap"] for r in obs],
            y=[arms.index(r["arm"]) for r in obs],
            mode="markers",
            marker=dict(color="black", size=11),
            error_x=_bars(
                [r["observed gap"] for r in obs], [r["observed CI"] for r in obs], thickness=2.5, color="black"
            ),
            name="observed (95 % CI over seeds)",
            hovertemplate="observed %{x:.3f}<extra></extra>",
        )
    for k, (x, label) in enumerate(sorted((lines or {}).items())):
        fig.add_vline(
            x=x,
            line=dict(color="grey", dash="dash"),
            annotation_text=label,
            annotation_position="top left" if k == 0 else "top right",
        )
    # the axis spans the gaps, the observed CIs and the lines; wider predicted intervals run off it (their ends hover)
    xs = [r["predicted gap"] for r in rows] + list(lines or {})
    xs += [v for r in seen.values() for v in (r["observed gap"], *r["observed CI"])]
    pad = 0.25 * (max(xs) - min(xs) or 0.1)
    fig.update_xaxes(range=[min(xs) - pad, max(xs) + pad])
    fig.update_yaxes(tickvals=list(range(len(arms))), ticktext=arms, title="arm (train/rollout)")
    fig.update_xaxes(title="held-out accuracy gap to FP32/FP32 (paired by seed)")
    halves = [(r["predicted interval"][1] - r["predicted interval"][0]) / 2 for r in rows]
    note = f"<br><sup>predicted intervals ± {min(halves):.2f} to {max(halves):.2f}: they run off the axis</sup>"
    fig.update_layout(title=TITLE + (note if halves else ""), template="plotly_white", height=140 + 90 * len(arms))
    return fig
