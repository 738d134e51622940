"""The doctor's figure (``nbkit doctor``): when the sequence log-ratio leaves TRL's mask and the PPO clip range; and
the harm-threshold study's gap-vs-dose figure (``gap_dose_figure``)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from nbkit.mismatch import mismatch
from nbkit.offline.doctor import EPSILON, MASK_CAP, DoctorResult, rms_at
from nbkit.plots.mismatch import COLORS


def crossing_figure(result: DoctorResult):
    """Model RMS of log R against length per dtype, the mask and clip thresholds, and the measured sequences."""
    top = max(result.config.target_length, 10)
    lengths = np.unique(np.geomspace(1, top, 200).round())
    fig = go.Figure()
    for d, g in result.diagnoses.items():
        fig.add_scatter(
            x=lengths,
            y=[rms_at(g, n) for n in lengths],
            mode="lines",
            name=f"{d}: model RMS of log R",
            line=dict(color=COLORS.get(d)),
        )
        if d in result.pairs:
            seq, n = mismatch.seq_log_ratio(*result.pairs[d])
            fig.add_scatter(
                x=n,
                y=np.abs(seq),
                mode="markers",
                name=f"{d}: measured |log R|",
                opacity=0.5,
                marker=dict(size=5, color=COLORS.get(d)),
            )
    fig.add_hline(y=math.log(MASK_CAP), line_dash="dash", annotation_text=f"TRL sequence mask log {MASK_CAP:g}")
    fig.add_hline(y=math.log(1 + EPSILON), line_dash="dot", annotation_text=f"clip range log {1 + EPSILON:g}")
    fig.update_layout(
        title="When does the sequence log-ratio leave the mask and the clip range?",
        xaxis=dict(type="log", title="response length (tokens)"),
        yaxis=dict(type="log", title="|log π/μ| of a sequence"),
    )
    return fig


HARM_TITLE = "Where harm starts: paired accuracy gap to FP32 against dose"
"""The gap-vs-dose figure's default title."""
TASK_COLORS = ("#4C78A8", "#F58518", "#72B7B2", "#B279A2")
"""One colour per stored task, in the store's order."""


def _finite(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0  # a dose drawn on a log axis


def gap_dose_figure(stored: dict, title: str = HARM_TITLE):
    """The harm thresholds of ``stored`` (a record of ``harm_threshold.THRESHOLDS``' shape: ``unit`` and ``tasks``): per
    task the mean paired gap to FP32 at each dose with its CI, the isotonic fit the threshold is read from, the
    threshold with its CI band, the formats placed on the dose axis only (``placed``); across tasks the harm line."""
    unit, tasks = stored["unit"], stored["tasks"]
    xs = [x for t in tasks.values() for x in (t.get("doses") or [])]
    xs += [x for t in tasks.values() for x in (t.get("placed") or {}).values()]
    xs = [x for x in xs if _finite(x)] or [1e-3, 1.0]
    x_lo, x_hi = min(xs) / 1.5, max(xs) * 1.5
    harms = {t.get("harm", -0.05) for t in tasks.values()}
    ys = [0.0, *harms]
    for t in tasks.values():
        ys += [v for v in t.get("mean_gaps") or [] if v is not None]
        ys += [v for ci in t.get("gap_ci") or [] if ci for v in ci if v is not None]
    y_lo, y_hi = min(ys) - 0.05, max(ys) + 0.05
    fig = go.Figure()
    labels = []  # (dose, text, color) of every placed format: drawn last, in rows that keep them apart
    for k, (task, t) in enumerate(tasks.items()):
        color = TASK_COLORS[k % len(TASK_COLORS)]
        doses, gaps = t.get("doses") or [], t.get("mean_gaps")
        names = {v: f for f, v in (t.get("points") or {}).items()}
        if gaps and len(gaps) == len(doses):
            cis = t.get("gap_ci") or [None] * len(doses)
            up = [(ci[1] - g) if ci and ci[1] is not None else 0 for g, ci in zip(gaps, cis)]
            down = [(g - ci[0]) if ci and ci[0] is not None else 0 for g, ci in zip(gaps, cis)]
            fig.add_scatter(
                x=doses,
                y=gaps,
                mode="markers",
                name=f"{task}: mean paired gap (CI over seeds)",
                marker=dict(color=color, size=8),
                error_y=dict(type="data", array=up, arrayminus=down, visible=True),
                text=[names.get(d, "") for d in doses],
                hovertemplate="%{text} dose %{x:.3g}: gap %{y:.3f}<extra></extra>",
            )
        if t.get("fitted") and len(t["fitted"]) == len(doses):
            fig.add_scatter(x=doses, y=t["fitted"], mode="lines", name=f"{task}: isotonic fit", line=dict(color=color))
        if t.get("outcome") == "crossing" and _finite(t.get("dose")):
            lo, hi = (t.get("ci") or [None, None])[:2]
            lo = lo if _finite(lo) else x_lo  # a censored side runs to the figure's edge
            hi = hi if _finite(hi) else x_hi
            fig.add_scatter(
                x=[lo, hi, hi, lo, lo],
                y=[y_lo, y_lo, y_hi, y_hi, y_lo],
                mode="lines",
                fill="toself",
                opacity=0.15,
                line=dict(width=0, color=color),
                name=f"{task}: threshold CI {lo:.3g}–{hi:.3g}",
                hoverinfo="name",
            )
            fig.add_scatter(
                x=[t["dose"], t["dose"]],
                y=[y_lo, y_hi],
                mode="lines",
                line=dict(color=color, width=2),
                name=f"{task}: threshold {t['dose']:.3g}",
            )
        placed = {f: v for f, v in (t.get("placed") or {}).items() if _finite(v)}
        if placed:
            fig.add_scatter(
                x=list(placed.values()),
                y=[y_lo] * len(placed),
                mode="markers",
                text=[f.upper() for f in placed],
                hovertemplate="%{text}: dose %{x:.3g} (placed on the axis, not dosed)<extra></extra>",
                marker=dict(symbol="triangle-up", size=11, color=color),
                name=f"{task}: formats placed on the axis (not dosed)",
            )
            labels += [(v, f.upper(), color) for f, v in placed.items()]
    for harm in sorted(harms):
        fig.add_scatter(
            x=[x_lo, x_hi],
            y=[harm, harm],
            mode="lines",
            line=dict(color="black", dash="dash"),
            name=f"harm line {harm:g}",
        )
    rows = label_rows([(math.log10(x), text) for x, text, _ in labels], math.log10(x_hi) - math.log10(x_lo))
    placed_labels = [
        dict(
            x=math.log10(x),  # an annotation on a log axis takes the exponent
            y=y_lo,
            text=text,
            font=dict(color=color, size=11),
            showarrow=True,
            arrowhead=0,
            arrowwidth=1,
            arrowcolor=color,
            ax=0,
            ay=-(14 + LABEL_ROW_PX * row),
        )
        for (x, text, color), row in zip(labels, rows)
    ]
    fig.update_layout(
        title=title,
        xaxis=dict(type="log", title=f"dose ({unit})", range=[math.log10(x_lo), math.log10(x_hi)]),
        yaxis=dict(title="accuracy gap to FP32 (paired by seed)", range=[y_lo, y_hi]),
        annotations=[
            dict(
                text=f"thresholds measured on {stored.get('measured_on', 'unstated models')}: evidence, not a guarantee",
                xref="paper",
                yref="paper",
                x=0,
                y=1.0,
                showarrow=False,
                yanchor="bottom",
                font=dict(size=10),
            )
        ]
        + placed_labels,
    )
    return fig


LABEL_ROW_PX = 15
"""Height of one row of placed-format labels above the axis, in pixels."""


def label_rows(labels: list[tuple[float, str]], decades: float, plot_px: float = 700, char_px: float = 7.5):
    """A row per label (``(log10 dose, text)``, in order) so that no two labels of one row overlap: each takes the
    lowest row whose labels are all far enough from it, their half-widths apart plus a gap, on a plot area of
    ``plot_px`` pixels spanning ``decades`` (a narrower figure may still crowd them)."""
    px_per_decade = plot_px / max(decades, 1e-9)
    placed: list[list[tuple[float, float]]] = []  # row -> (centre px, half-width px) of its labels
    out = []
    for x, text in labels:
        centre, half = x * px_per_decade, len(text) * char_px / 2
        row = next(
            (i for i, taken in enumerate(placed) if all(abs(centre - c) >= half + h + 6 for c, h in taken)),
            len(placed),
        )
        if row == len(placed):
            placed.append([])
        placed[row].append((centre, half))
        out.append(row)
    return out
