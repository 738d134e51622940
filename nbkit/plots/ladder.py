"""The rollout-precision ladder as a figure: one panel per headline metric, formats along x, log-scale y.

Takes the table of ``nbkit.offline.ladder.LadderResult.table()`` (plain data). Error bars are the bootstrap 95 % CIs.
A log axis cannot show a value ≤ 0 (an unbiased KL estimate of a tiny mismatch can come out negative): such a point
is left out and named under its panel, never clipped to a made-up positive value; a point whose lower CI bound is
≤ 0 is drawn hollow, with no lower bar.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nbkit.mismatch.mismatch import METRICS
from nbkit.offline.ladder import HEADLINE_KEYS
from nbkit.records import schema

TITLES = {
    schema.METRIC_TOKEN_ABS_LOGP_DIFF: "per-token mean |Δ log p|",
    "kl_k1": "token KL[μ‖π] (k1)",
    "seq_kl": "sequence KL[μ‖π]",
}
"""Panel titles of the headline metrics."""


def ladder_figure(table, keys=HEADLINE_KEYS, title: str = "Rollout format vs FP32 trainer") -> go.Figure:
    """Panels of ``keys`` (columns of ``table``, with ``<key> low`` / ``<key> high`` CIs when present) against the
    formats in table order, on log y axes; BF16 and FP16 in their workbook colours, the rest in one colour."""
    fig = make_subplots(rows=1, cols=len(keys), subplot_titles=[TITLES.get(k, k) for k in keys])
    colors = ["#E45756" if f == "bf16" else "#54A24B" if f == "fp16" else "#4C78A8" for f in table["format"]]
    for col, key in enumerate(keys, start=1):
        y = table[key].to_numpy(dtype=float)
        ok = y > 0
        err, hollow = {}, np.zeros_like(ok)
        if f"{key} low" in table:
            low, high = table[f"{key} low"].to_numpy(dtype=float), table[f"{key} high"].to_numpy(dtype=float)
            hollow = ~(low > 0)
            err = dict(
                error_y=dict(
                    type="data", symmetric=False, array=(high - y)[ok], arrayminus=np.where(hollow, 0.0, y - low)[ok]
                )
            )
        symbols = np.where(hollow, "circle-open", "circle")[ok]
        fig.add_trace(
            go.Scatter(
                x=table["format"][ok],
                y=y[ok],
                mode="markers+lines",
                marker=dict(
                    size=9, color=np.array(colors)[ok], symbol=symbols, line=dict(width=2, color=np.array(colors)[ok])
                ),
                line=dict(color="#BBBBBB"),
                name=key,
                showlegend=False,
                hovertemplate="%{x}: %{y:.3g}<extra>" + METRICS.get(key, key) + "</extra>",
                **err,
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(type="log", row=1, col=col)
        hidden = [f for f, v in zip(table["format"], y) if not v > 0]
        fig.update_xaxes(title_text=f"≤ 0, not drawn: {', '.join(hidden)}" if hidden else "", row=1, col=col)
    fig.update_layout(title=title + " (hollow: 95 % CI reaches ≤ 0)", height=460, width=max(420 * len(keys), 700))
    return fig
