"""The predictors study's figure: every candidate's cross-validation error with its CI, per scheme, beside the
constant's (the reading added after the results), so a reader sees which candidates, if any, predict the gap better
than no candidate at all."""

from __future__ import annotations

from plotly.subplots import make_subplots

TITLE = "Which candidate predicts the gap? Cross-validation error with 95 % CIs, against a constant prediction"
"""The figure's title."""
SCHEME_NAMES = {"lofo": "leave one format out", "loto": "leave one task out"}
"""Panel title of each scheme."""


def error_figure(record: dict):
    """One panel per scheme of ``record`` (``nbkit.studies.predictors.predictor_record``): each candidate's error as
    a dot with its 95 % CI (candidates sorted by their first scheme's error), filled where its paired difference to
    the constant beats it (``record["against_constant"]``); the constant's error a dashed line, its CI a band."""
    schemes = list(record["errors"])
    against = record.get("against_constant") or {}
    beats = against.get("beats") or {}
    rows = sorted(record["table"], key=lambda r: r[f"{schemes[0]} error"], reverse=True)
    names = [r["candidate"] for r in rows]
    fig = make_subplots(
        rows=1, cols=len(schemes), shared_yaxes=True, subplot_titles=[SCHEME_NAMES.get(s, s) for s in schemes]
    )
    for j, s in enumerate(schemes, start=1):
        err = [r[f"{s} error"] for r in rows]
        lo = [r[f"{s} 95 % CI"][0] for r in rows]
        hi = [r[f"{s} 95 % CI"][1] for r in rows]
        won = set(beats.get(s, []))
        fig.add_scatter(
            x=err,
            y=names,
            mode="markers",
            marker=dict(
                size=9,
                color="#1f77b4",
                symbol=["circle" if c in won else "circle-open" for c in names],
            ),
            error_x=dict(
                type="data",
                symmetric=False,
                array=[h - e for h, e in zip(hi, err, strict=True)],
                arrayminus=[e - lo_ for e, lo_ in zip(err, lo, strict=True)],
            ),
            name="candidate (filled: beats the constant)",
            showlegend=j == 1,
            hovertemplate="%{y}: error %{x:.3f}<extra></extra>",
            row=1,
            col=j,
        )
        const = (against.get("constant") or {}).get(s)
        if const:
            fig.add_vrect(
                x0=const["ci"][0], x1=const["ci"][1], fillcolor="grey", opacity=0.2, line_width=0, row=1, col=j
            )
            fig.add_vline(
                x=const["error"],
                line=dict(color="black", dash="dash"),
                annotation_text=f"constant {const['error']:.3f}",
                row=1,
                col=j,
            )
        fig.update_xaxes(title_text="mean |predicted − observed gap|", rangemode="tozero", row=1, col=j)
    fig.update_layout(title=TITLE, height=140 + 32 * len(names), legend=dict(orientation="h", y=-0.15))
    return fig
