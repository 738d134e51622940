"""The doctor's figure: when the sequence log-ratio leaves TRL's mask and the PPO clip range (``nbkit doctor``)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from nbkit import mismatch
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
