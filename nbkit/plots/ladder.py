"""The rollout-precision ladder as a figure: one panel per headline metric, formats along x, log-scale y.

Takes the table of ``nbkit.ladder.LadderResult.table()`` (plain data). Error bars are the bootstrap 95 % CIs.
A log axis cannot show a value ≤ 0 (an unbiased KL estimate of a tiny mismatch can come out negative): such a point
is left out and named in the panel's title, never clipped to a made-up positive value.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nbkit.ladder import HEADLINE_KEYS
from nbkit.mismatch import METRICS

TITLES = {"token_abs_logp_diff/mean": "per-token mean |Δ log p|", "kl_k1": "token KL[μ‖π] (k1)",
          "seq_kl": "sequence KL[μ‖π]"}
"""Panel titles of the headline metrics."""


def ladder_figure(table, keys=HEADLINE_KEYS, title: str = "Rollout format vs FP32 trainer") -> go.Figure:
    """Panels of ``keys`` (columns of ``table``, with ``<key> low`` / ``<key> high`` CIs when present) against the
    formats in table order, on log y axes; BF16 and FP16 in their workbook colours, the rest in one colour."""
    fig = make_subplots(rows=1, cols=len(keys), subplot_titles=[_panel_title(table, k) for k in keys])
    colors = ["#E45756" if f == "bf16" else "#54A24B" if f == "fp16" else "#4C78A8" for f in table["format"]]
    for col, key in enumerate(keys, start=1):
        y = table[key].to_numpy(dtype=float)
        ok = y > 0
        err = {}
        if f"{key} low" in table:
            low, high = table[f"{key} low"].to_numpy(dtype=float), table[f"{key} high"].to_numpy(dtype=float)
            err = dict(error_y=dict(type="data", symmetric=False, array=(high - y)[ok],
                                    arrayminus=np.clip(y - low, 0, None)[ok]))
        fig.add_trace(go.Scatter(
            x=table["format"][ok], y=y[ok], mode="markers+lines", marker=dict(size=9, color=np.array(colors)[ok]),
            line=dict(color="#BBBBBB"), name=key, showlegend=False,
            hovertemplate="%{x}: %{y:.3g}<extra>" + METRICS.get(key, key) + "</extra>", **err), row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_layout(title=title, height=420, width=max(420 * len(keys), 700))
    return fig


def _panel_title(table, key) -> str:
    """The metric's name, plus the formats whose value could not be drawn on a log axis."""
    hidden = [f for f, v in zip(table["format"], table[key]) if not v > 0]
    return TITLES.get(key, key) + (f" ({', '.join(hidden)}: ≤ 0, not drawn)" if hidden else "")
