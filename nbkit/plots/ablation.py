"""The precision ablation's figure: one curve per (train, rollout) pair, averaged over its seeds, in the layout of
the paper's ablation (accuracy, mismatch, KL, step time against step)."""

from __future__ import annotations

import plotly.graph_objects as go

from nbkit.plots.training import training_curves
from nbkit.records import schema

PANELS = (
    ("accuracy", "training accuracy", False),
    (schema.TOKEN_ABS_LOGP_DIFF, "mean |log π − log μ| per token", True),
    (schema.KL_K3, "KL[μ‖π] per token (k3)", True),
    (schema.TIME_STEP, "seconds per step", False),
)
"""(metric key, panel title, log y axis)."""


def by_pair(runs: dict[str, list[dict]], meta: dict[str, dict]) -> dict[str, list[dict]]:
    """``train/rollout → rows`` averaged over seeds step by step (a step missing in some seed averages the rest);
    ``meta`` holds each run's coordinates (``nbkit.records.runlog.coords``)."""
    groups: dict[str, dict[int, list[dict]]] = {}
    for label, rows in runs.items():
        train_dtype, rollout_dtype = meta[label]["train"], meta[label]["rollout"]
        for r in rows:
            groups.setdefault(f"{train_dtype} train / {rollout_dtype} rollout", {}).setdefault(
                r[schema.STEP], []
            ).append(r)
    out = {}
    for name, steps in groups.items():
        out[name] = []
        for step, rows in sorted(steps.items()):
            avg = {"step": step}
            for key, _, _ in PANELS:
                xs = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
                if xs:
                    avg[key] = sum(xs) / len(xs)
            out[name].append(avg)
    return out


def ablation_curves(runs: dict[str, list[dict]], meta: dict[str, dict], smooth: int = 5) -> go.Figure:
    """Accuracy, mismatch, k3 KL and step time against step, one colour per pair (mean over seeds)."""
    fig = training_curves(by_pair(runs, meta), panels=PANELS, smooth=smooth)
    return fig.update_layout(title="Precision ablation: train dtype × rollout dtype (mean over seeds)")


def cost_bars(table: list[dict]) -> go.Figure:
    """Seconds per step split into rollout and update per pair (rows of ``nbkit.studies.ablation.table``)."""
    names = [f"{r['train']}/{r['rollout']}" for r in table]
    fig = go.Figure(
        [
            go.Bar(name="rollout (generate + sync)", x=names, y=[r["s/step rollout"] for r in table]),
            go.Bar(name="update", x=names, y=[r["s/step update"] for r in table]),
            go.Bar(
                name="other (scoring, mismatch pass)",
                x=names,
                y=[max(0.0, (r["s/step total"] or 0) - r["s/step rollout"] - (r["s/step update"] or 0)) for r in table],
            ),
        ]
    )
    return fig.update_layout(
        barmode="stack",
        yaxis_title="seconds per step",
        xaxis_title="train / rollout dtype",
        title="Cost of each precision pair",
    )
