"""Plotly figures of the π–μ mismatch (the paper's offline analysis, its Fig. 5, and the dtype grid).

Every function takes plain data, never engines or models: ragged per-token log-probs as lists of 1-D arrays
(one per sequence), keyed by a label such as the dtype, or metric dicts from ``nbkit.mismatch.mismatch``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from nbkit.mismatch.mismatch import METRICS, fit_slope, seq_log_ratio, token_log_ratio
from nbkit.records import schema

RATIO_KEYS = (
    schema.METRIC_TOKEN_ABS_LOGP_DIFF,
    schema.METRIC_TOKEN_ABS_LOGP_DIFF_MAX,
    "rollout_probs_diff_mean",
    "kl_k1",
    "kl_k3",
    "chi2_token",
    "seq_kl",
    "seq_log_ratio/abs_mean",
)
"""Metrics compared as BF16/FP16 ratios by default (all ≥ 0 or sign-stable and growing with the mismatch)."""

COLORS = {"fp32": "#4C78A8", "bf16": "#E45756", "fp16": "#54A24B"}
"""One colour per dtype across every figure; other labels get plotly's defaults."""

Pairs = Mapping[str, tuple[Sequence, Sequence]]  # label -> (logp_pi, logp_mu), ragged per sequence


def token_scatter(pairs: Pairs, space: str = "log", max_points: int = 5000, seed: int = 0) -> go.Figure:
    """Per-token π (y) against μ (x) for each label, with the diagonal π = μ.

    ``space="log"``: probabilities on log axes (shows the low-probability tokens where BF16 errs most);
    ``"prob"``: linear probability axes. At most ``max_points`` random tokens per label are drawn.
    """
    if space not in ("log", "prob"):
        raise ValueError(f"unknown space {space!r}; choose 'log' or 'prob'")
    rng = np.random.default_rng(seed)
    fig, lo = go.Figure(), 1.0
    for label, (logp_pi, logp_mu) in pairs.items():
        token_log_ratio(logp_pi, logp_mu)  # validates the pair
        pi, mu = (np.exp(np.concatenate([np.asarray(x, dtype=np.float64) for x in lp])) for lp in (logp_pi, logp_mu))
        if mu.size > max_points:
            keep = rng.choice(mu.size, max_points, replace=False)
            mu, pi = mu[keep], pi[keep]
        lo = min(lo, float(mu.min()), float(pi.min()))
        fig.add_scatter(
            x=mu, y=pi, mode="markers", name=label, opacity=0.5, marker=dict(size=4, color=COLORS.get(label))
        )
    lo = max(lo, 1e-12) if space == "log" else 0.0
    fig.add_scatter(x=[lo, 1.0], y=[lo, 1.0], mode="lines", name="π = μ", line=dict(color="black", dash="dash"))
    axis = dict(type="log") if space == "log" else dict(range=[0, 1])
    fig.update_layout(
        title="Token probabilities: training π vs rollout μ",
        legend_title="dtype",
        xaxis=dict(title="μ (rollout)", **axis),
        yaxis=dict(title="π (training)", **axis),
    )
    return fig


def seq_log_ratio_vs_length(pairs: Pairs, max_points: int = 3000, seed: int = 0) -> go.Figure:
    """Sequence log-ratio log(π/μ) = Σ_t (log π − log μ) against response length, a fitted line per label.

    The legend gives each slope per 1000 tokens. The paper's Fig. 5 slopes (−1.01 BF16, −0.07 FP16) are of
    that magnitude but their units are not stated in our notes: check the figure before comparing numbers.
    """
    rng = np.random.default_rng(seed)
    fig = go.Figure()
    for label, (logp_pi, logp_mu) in pairs.items():
        s, n = seq_log_ratio(logp_pi, logp_mu)
        slope, intercept = fit_slope(n, s)
        color = COLORS.get(label)
        shown = rng.choice(s.size, max_points, replace=False) if s.size > max_points else np.arange(s.size)
        fig.add_scatter(
            x=n[shown],
            y=s[shown],
            mode="markers",
            name=label,
            opacity=0.5,
            legendgroup=label,
            marker=dict(size=5, color=color),
        )
        if np.isfinite(slope):
            xs = np.array([n.min(), n.max()])
            fig.add_scatter(
                x=xs,
                y=intercept + slope * xs,
                mode="lines",
                legendgroup=label,
                name=f"{label}: slope {1000 * slope:+.3g} per 1k tokens",
                line=dict(color=color),
            )
    fig.update_layout(
        title="Sequence log-ratio vs response length",
        xaxis_title="response length (tokens)",
        yaxis_title="log(π/μ) summed over the response",
    )
    return fig


def _ratio(metrics: Mapping[str, Mapping[str, float]], key: str, num: str, den: str) -> float:
    """metrics[num][key] / metrics[den][key]; NaN when the denominator is 0 or missing."""
    a, b = metrics[num].get(key, np.nan), metrics[den].get(key, np.nan)
    return float(a / b) if b not in (0, 0.0) and np.isfinite(b) else float("nan")


def ratio_bar(
    metrics: Mapping[str, Mapping[str, float]], keys: Sequence[str] = RATIO_KEYS, num: str = "bf16", den: str = "fp16"
) -> go.Figure:
    """Bar chart of ``metrics[num][k] / metrics[den][k]`` per metric (log y axis; 1 = no difference)."""
    ratios = [_ratio(metrics, k, num, den) for k in keys]
    fig = go.Figure(
        go.Bar(
            x=list(keys),
            y=ratios,
            text=[f"{r:.3g}×" for r in ratios],
            textposition="outside",
            hovertext=[METRICS.get(k, k) for k in keys],
        )
    )
    fig.add_hline(y=1.0, line_dash="dash", line_color="black")
    fig.update_layout(title=f"Mismatch ratio {num.upper()} / {den.upper()}", yaxis=dict(type="log", title="ratio"))
    return fig


def ratio_ci_bar(ratios, num: str = "bf16", den: str = "fp16") -> go.Figure:
    """The BF16/FP16 readings of ``nbkit.offline.analysis.ratio_table``, one colour per model (log y axis; 1 = no
    difference): ratios with their CIs as error bars, lower bounds as hatched bars marked "≥", and the metrics
    with no ratio (``den``'s CI not above 0) named under the plot: the offline analysis in one picture."""
    col = f"{num}/{den}"
    fig = go.Figure()
    missing = []
    for model, rows in ratios.groupby("model", sort=False):
        shown = rows[rows["reading"] != "undefined"]
        missing += [f"{model}: {m}" for m in rows.loc[rows["reading"] == "undefined", "metric"]]
        bound = shown["reading"] == "lower bound"
        y = shown[col].where(~bound, shown["lower bound"])
        fig.add_trace(
            go.Bar(
                x=list(shown["metric"]),
                y=list(y),
                name=model,
                textposition="outside",
                text=[("≥ " if b else "") + f"{v:.3g}×" for v, b in zip(y, bound)],
                marker_pattern_shape=["/" if b else "" for b in bound],
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=list((shown["CI high"] - y).fillna(0)),
                    arrayminus=list((y - shown["CI low"]).fillna(0)),
                ),
            )
        )
    fig.add_hline(y=1.0, line_dash="dash", line_color="black")
    if missing:
        fig.add_annotation(
            text=f"no ratio ({den.upper()}'s CI does not lie above 0): " + "; ".join(missing),
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0,
            y=-0.3,
            xanchor="left",
            align="left",
        )
    fig.update_layout(
        title=f"Mismatch ratio {num.upper()} / {den.upper()} with 95% CIs (engine and training in "
        "the same dtype; hatched: lower bound only)",
        yaxis=dict(type="log", title="ratio"),
        barmode="group",
        margin=dict(b=140 if missing else 80),
    )
    return fig


def metrics_table(
    metrics: Mapping[str, Mapping[str, float]],
    keys: Sequence[str] | None = None,
    ratio: tuple[str, str] | None = ("bf16", "fp16"),
) -> go.Figure:
    """The metric dicts side by side as a table figure, one column per label, plus a num/den ratio column."""
    labels = list(metrics)
    keys = list(keys) if keys is not None else [k for k in METRICS if any(k in m for m in metrics.values())]
    cols = [keys] + [[f"{metrics[lab].get(k, np.nan):.4g}" for k in keys] for lab in labels]
    header = ["metric"] + labels
    if ratio is not None and ratio[0] in metrics and ratio[1] in metrics:
        cols.append([f"{_ratio(metrics, k, *ratio):.3g}" for k in keys])
        header.append(f"{ratio[0]}/{ratio[1]}")
    fig = go.Figure(go.Table(header=dict(values=header), cells=dict(values=cols, align=["left"] + ["right"] * 9)))
    fig.update_layout(title="Mismatch metrics")
    return fig


def grid_heatmap(
    grid: Mapping[str, Mapping[str, float]], metric: str = schema.METRIC_TOKEN_ABS_LOGP_DIFF, log_color: bool = True
) -> go.Figure:
    """Heatmap of one metric over engine dtype (rows, ``grid`` keys) × training dtype (columns, inner keys).

    ``log_color`` colours by log10 of the value (the cells span orders of magnitude); the text shows the value.
    """
    rows = list(grid)
    cols = list(dict.fromkeys(c for r in rows for c in grid[r]))
    z = np.array([[grid[r].get(c, np.nan) for c in cols] for r in rows], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        color = np.where(z > 0, np.log10(z), np.nan) if log_color else z
    fig = go.Figure(
        go.Heatmap(
            z=color,
            x=cols,
            y=rows,
            text=[[f"{v:.3g}" for v in row] for row in z],
            texttemplate="%{text}",
            colorscale="Reds",
            colorbar=dict(title="log10" if log_color else ""),
        )
    )
    fig.update_layout(
        title=f"{metric}: engine dtype × training dtype",
        xaxis_title="training dtype (π)",
        yaxis_title="engine dtype (μ)",
    )
    return fig
