"""Figures of the hunt (notebook 04): the phase map of the BF16 − FP16 gap over length × (lr, algorithm), and one
cell's curves in the paper's layout with FP16 and BF16 averaged over seeds."""

from __future__ import annotations

import plotly.graph_objects as go

from nbkit.models.toymodels.long_arith import REGIMES
from nbkit.plots.training import training_curves
from nbkit.records import schema

PANELS = (
    ("accuracy", "training accuracy", False),
    (schema.TOKEN_ABS_LOGP_DIFF, "mean |log π − log μ| per token", True),
    ("grad_norm", "gradient norm", True),
    (schema.PHANTOM_FRACTION, "phantom-clip fraction (first minibatch)", False),
)
"""(metric key, panel title, log y axis)."""


def phase_map(rows: list[dict], metric: str = "gap (bf16 − fp16)", title: str | None = None) -> go.Figure:
    """Heatmap of ``metric`` (a column of ``nbkit.studies.hunt.phase_map``): lengths down, (lr, algorithm) across; the
    gap is coloured on a scale centred on 0 and each cell is annotated with its value and its verdict."""
    ys = [x for x in REGIMES if any(r["length"] == x for r in rows)]
    xs = sorted({(r["lr"], r["algorithm"]) for r in rows})
    at = {(r["length"], r["lr"], r["algorithm"]): r for r in rows}
    z, text = [], []
    for y in ys:
        cells = [at.get((y, *x)) for x in xs]
        z.append([c[metric] if c and c[metric] is not None else None for c in cells])
        text.append(
            [
                ""
                if c is None
                else f"{c[metric]}<br>{c['gap sign']}<br>{c['gap [min, max]']}"
                if metric.startswith("gap")
                else f"{c[metric]}"
                for c in cells
            ]
        )
    gap = metric.startswith("gap")
    bound = max((abs(v) for row in z for v in row if v is not None), default=1.0) or 1.0
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"lr {lr:g}<br>{a}" for lr, a in xs],
            y=ys,
            text=text,
            texttemplate="%{text}",
            colorscale="RdBu" if gap else "Viridis",
            zmid=0 if gap else None,
            zmin=-bound if gap else None,
            zmax=bound if gap else None,
            colorbar=dict(title=metric),
        )
    )
    return fig.update_layout(
        title=title or f"Phase map: {metric} (mean over seeds)",
        yaxis_title="response length",
        height=120 + 110 * len(ys),
    )


BREVITY_PANELS = (
    ("completions/mean_length", "mean response length (tokens)", False),
    ("reward", "reward (−tokens / max_tokens)", False),
    (schema.TOKEN_ABS_LOGP_DIFF, "mean |log π − log μ| per token", True),
    (schema.PHANTOM_FRACTION, "phantom-clip fraction (first minibatch)", False),
)
"""Panels of the brevity toy task's figure."""


def average_by(runs: dict[str, list[dict]], group_of, panels=PANELS) -> dict[str, list[dict]]:
    """``group → rows`` averaged over the runs of each group step by step (``group_of(label)`` names the group;
    a step missing in some run averages the rest)."""
    steps: dict[str, dict[int, list[dict]]] = {}
    sizes: dict[str, int] = {}
    for name, rows in runs.items():
        group = group_of(name)
        sizes[group] = sizes.get(group, 0) + 1
        for r in rows:
            steps.setdefault(group, {}).setdefault(r[schema.STEP], []).append(r)
    return {
        f"{group} (mean of {sizes[group]} seeds)": [
            {
                "step": step,
                **{
                    k: sum(xs) / len(xs)
                    for k, _, _ in panels
                    if (xs := [r[k] for r in rows if isinstance(r.get(k), (int, float)) and r[k] == r[k]])
                },
            }
            for step, rows in sorted(by_step.items())
        ]
        for group, by_step in sorted(steps.items())
    }


def by_dtype(runs: dict[str, list[dict]], meta: dict[str, dict]) -> dict[str, list[dict]]:
    """``dtype → rows`` of hunt runs averaged over seeds step by step (``meta``: each run's coordinates)."""
    return average_by(runs, lambda name: meta[name]["dtype"])


def cell_curves(runs: dict[str, list[dict]], meta: dict[str, dict], cell: dict, smooth: int = 3) -> go.Figure:
    """Accuracy, mismatch, gradient norm and phantom clipping against step for one cell, FP16 vs BF16."""
    fig = training_curves(by_dtype(runs, meta), panels=PANELS, smooth=smooth)
    return fig.update_layout(
        title=f"{cell['length']} responses, lr {cell['lr']:g}, {cell['algorithm']}: FP16 vs BF16 (mean over seeds)"
    )


def brevity_curves(runs: dict[str, list[dict]], meta: dict[str, dict], smooth: int = 1) -> go.Figure:
    """The brevity toy task (``nbkit.studies.brevity``): length, reward, mismatch and phantom clipping against step,
    one colour per (train, rollout) pair, mean over seeds (``meta``: each run's coordinates)."""

    def pair(name):
        return f"{meta[name]['train']} train / {meta[name]['rollout']} rollout"

    fig = training_curves(average_by(runs, pair, BREVITY_PANELS), panels=BREVITY_PANELS, smooth=smooth)
    return fig.update_layout(title="Toy task: reward = −length, μ as π_old (SmolLM2-135M, LoRA, vLLM rollouts)")
