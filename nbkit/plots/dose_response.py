"""The dose–response figure: held-out accuracy against the rollout format's mismatch at step 0, the dose (log x)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

DOSE = "dose: mismatch at step 0"
"""The x-axis column of ``nbkit.studies.dose_response``'s table."""


def dose_response(rows: list[dict]):
    """Left: judge accuracy late in the run (mean of the last two judgments; mean over seeds, bars = the rule's 95 % t-interval
    of the paired gap moved onto the mean) against the dose (per-token mismatch of the first step's rollouts, before
    any update), one line per correction, the paper's same-format pairs marked.
    Right: the mechanism per format (IS tokens masked/truncated, ESS per token, mismatch growth over the run)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.62, 0.38],
        subplot_titles=("held-out accuracy vs rollout mismatch", "mechanism per format (no correction)"),
    )
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get(DOSE) and r.get("judge final (mean)") is not None:
            key = r["correction"] if r["train"] == "fp32" else f"{r['train']} train (paper's pair)"
            groups.setdefault(key, []).append(r)
    for key, group in groups.items():
        group = sorted(group, key=lambda r: r[DOSE])
        err_hi = [
            (r["gap CI high"] - r["gap vs fp32"])
            if r.get("gap CI high") == r.get("gap CI high") and r.get("gap CI high") is not None
            else 0
            for r in group
        ]
        err_lo = [
            (r["gap vs fp32"] - r["gap CI low"])
            if r.get("gap CI low") == r.get("gap CI low") and r.get("gap CI low") is not None
            else 0
            for r in group
        ]
        fig.add_trace(
            go.Scatter(
                x=[r[DOSE] for r in group],
                y=[r["judge final (mean)"] for r in group],
                error_y=dict(type="data", array=err_hi, arrayminus=err_lo, visible=True),
                mode="lines+markers+text" if key == "none" else ("markers+text" if "train" in key else "lines+markers"),
                text=[r["format"] for r in group] if key == "none" or "train" in key else None,
                textposition="top center",
                name=f"correction: {key}" if "train" not in key else key,
                customdata=[[r["seeds"], r.get("verdict", "")] for r in group],
                hovertemplate="%{text}<br>dose %{x:.2g}<br>judge %{y:.3f}<br>seeds %{customdata[0]}"
                "<br>%{customdata[1]}<extra></extra>",
            ),
            row=1,
            col=1,
        )
    plain = sorted(
        (r for r in rows if r["correction"] == "none" and r["train"] == "fp32" and r.get(DOSE)), key=lambda r: r[DOSE]
    )
    for name, col in (
        ("mismatch growth (last/first 5)", "mismatch growth"),
        ("ESS token", "ESS per token"),
        ("entropy", "entropy"),
    ):
        fig.add_trace(
            go.Scatter(
                x=[r[DOSE] for r in plain],
                y=[r.get(name) for r in plain],
                mode="lines+markers",
                name=col,
                text=[r["format"] for r in plain],
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(type="log", title_text="dose: mean per-token |Δ log p| (π FP32 vs μ) at step 0")
    fig.update_yaxes(title_text="held-out accuracy, late (FP32 judge)", row=1, col=1)
    fig.update_layout(height=460, legend=dict(orientation="h", y=-0.25))
    return fig
