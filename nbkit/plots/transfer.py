"""The transfer figure of the harm-threshold studies: per dose unit, each task's isotonic gap-vs-dose fit with its
threshold and CI band, so a reader sees at a glance in which unit the two tasks' thresholds line up."""

from __future__ import annotations

import math

from plotly.subplots import make_subplots

from nbkit.plots.doctor import TASK_COLORS

TITLE = "Does the harm threshold transfer? Each task's gap-vs-dose fit and threshold, per dose unit"
"""The figure's title."""


def _positive(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def transfer_figure(units: dict[str, dict[str, dict]], labels: dict[str, str], rows: list[dict] | None = None):
    """One panel per unit of ``units`` (unit → task → a stored ``Threshold.to_json``), titled by ``labels`` and, with
    ``rows`` (``harm_transfer.agreement``), the ratio and whether the unit agrees. Per task: the isotonic fit of the
    paired gap to FP32 against the step-0 dose (log axis), the threshold (vertical line) and its 95 % CI (band; a
    censored end runs to the panel's edge); the harm line dashed."""
    names = list(units)
    said = {r["unit"]: r for r in rows or []}
    titles = []
    for u in names:
        r = said.get(u)
        ratio = (r or {}).get("ratio")
        extra = "" if r is None else f" · {'agrees' if r['agrees'] else 'does not agree'}"
        extra += f", ratio {ratio:.2g}" if ratio is not None else ""
        titles.append(f"{labels.get(u, u)}{extra}")
    cols = 2 if len(names) > 1 else 1
    n_rows = math.ceil(len(names) / cols) or 1
    fig = make_subplots(rows=n_rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.08, vertical_spacing=0.14)
    tasks = sorted({t for by_task in units.values() for t in by_task}, key=lambda t: t != "tiny-arith")
    for i, u in enumerate(names):
        row, col = i // cols + 1, i % cols + 1
        xs = [x for t in units[u].values() for x in t.get("doses") or [] if _positive(x)] or [1e-3, 1.0]
        lo_edge, hi_edge = min(xs) / 1.5, max(xs) * 1.5
        harms = set()
        for task, t in units[u].items():
            color = TASK_COLORS[tasks.index(task) % len(TASK_COLORS)]
            harms.add(t.get("harm", -0.05))
            doses, fitted = t.get("doses") or [], t.get("fitted") or []
            if doses and len(doses) == len(fitted):
                fig.add_scatter(
                    x=doses,
                    y=fitted,
                    mode="lines+markers",
                    line=dict(color=color),
                    name=f"{task}: isotonic fit",
                    legendgroup=task,
                    showlegend=i == 0,
                    hovertemplate=f"{task}: dose %{{x:.3g}}, fitted gap %{{y:.3f}}<extra></extra>",
                    row=row,
                    col=col,
                )
            if t.get("outcome") == "crossing" and _positive(t.get("dose")):
                lo, hi = (t.get("ci") or [None, None])[:2]
                lo = lo if _positive(lo) else lo_edge
                hi = hi if _positive(hi) else hi_edge
                fig.add_vrect(x0=lo, x1=hi, fillcolor=color, opacity=0.15, line_width=0, row=row, col=col)
                fig.add_vline(x=t["dose"], line=dict(color=color, width=2), row=row, col=col)
        for harm in harms:
            fig.add_hline(y=harm, line=dict(color="black", dash="dash"), row=row, col=col)
        fig.update_xaxes(type="log", title_text="step-0 dose", row=row, col=col)
        fig.update_yaxes(title_text="gap to FP32" if col == 1 else None, row=row, col=col)
    fig.update_layout(title=TITLE, height=380 * n_rows, legend=dict(orientation="h", y=-0.12))
    return fig
