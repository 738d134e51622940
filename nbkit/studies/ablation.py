"""The paper's precision ablation on the sanity test: train dtype × rollout dtype, same algorithm and seeds.

``nbkit study ablation_tiny_arith run`` trains the grid (notebook 03's tiny-arith defaults: grpo, 16 × 8 per step,
vLLM rollouts) and ``... store`` stores it as ``data/results/<study>/`` (``nbkit.results``) so notebook 05 renders
without re-running. A run's pair and seed are read from its config (``nbkit.records.runlog.coords``).
"""

from __future__ import annotations

from nbkit.records import runlog, schema
from nbkit.stats import stats
from nbkit.studies import prose
from nbkit.studies.base import GridStudy, add_run

PAIRS: list[tuple[str, str]] = [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp32", "fp32")]
"""The paper's grid: (train dtype, rollout dtype)."""

STUDY = "ablation_tiny_arith"
"""The stored study's folder name under ``data/results``."""


def table(runs: dict[str, list[dict]], meta: dict[str, dict], target: float = 0.95, window: int = 5) -> list[dict]:
    """One row per (train, rollout) pair over its seeds: steps to ``target`` (``window``-step mean accuracy), final
    accuracy mean and range, the training-time mismatch (mean |Δ log p| and k3 KL per token, averaged over steps and
    seeds) and seconds per step split into rollout (generation + weight sync) and update."""
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for label, rows in runs.items():
        groups.setdefault((meta[label]["train"], meta[label]["rollout"]), {})[label] = rows
    order = {p: i for i, p in enumerate(PAIRS)}
    out = []
    for (train_dtype, rollout_dtype), group in sorted(groups.items(), key=lambda kv: order.get(kv[0], 99)):
        summary = runlog.summary_table(group, target, window)
        final = [r[f"final accuracy ({window}-step mean)"] for r in summary]
        reach = [r[f"steps to {target:.0%}"] for r in summary]
        rows = [r for rows in group.values() for r in rows]

        def mean(key, rows=rows):
            return prose.mean3([r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]])

        rollout = (mean(schema.TIME_ROLLOUT) or 0) + (mean(schema.TIME_SYNC) or 0)
        out.append(
            {
                "train": train_dtype,
                "rollout": rollout_dtype,
                "seeds": len(group),
                "steps": max(schema.optimiser_steps(r) for r in group.values()),
                "reached": f"{sum(x is not None for x in reach)}/{len(reach)}",
                "each": ", ".join("—" if x is None else str(x) for x in reach),
                "final": round(sum(final) / len(final), 3),
                "final_range": f"[{min(final)}, {max(final)}]",
                "mismatch": mean(schema.TOKEN_ABS_LOGP_DIFF),
                "k3": mean(schema.KL_K3),
                "s_rollout": round(rollout, 2),
                "s_update": mean(schema.TIME_UPDATE),
                "s_total": mean(schema.TIME_STEP),
                "audit_rollout": ", ".join(sorted({str(r.get(schema.AUDIT_ROLLOUT_DTYPE)) for r in rows})),
                "audit_matmuls": ", ".join(sorted({d for r in rows for d in r.get(schema.AUDIT_MATMUL_DTYPES) or []})),
            }
        )
    return prose.display(out, headers(target))


COLUMNS = {
    "train": "train",
    "rollout": "rollout",
    "seeds": "seeds",
    "steps": "steps",
    "reached": "reached {target:.0%}",
    "each": "steps to {target:.0%} (each)",
    "final": "final accuracy (mean)",
    "final_range": "final accuracy [min, max]",
    "mismatch": "mean |Δ log p|",
    "k3": "k3 KL",
    "s_rollout": "s/step rollout",
    "s_update": "s/step update",
    "s_total": "s/step total",
    "audit_rollout": "rollout dtype (audit)",
    "audit_matmuls": "train matmuls (audit)",
}
"""A table row's named fields → the headers it is shown under (``{target}``: the target accuracy, ``headers``)."""


def headers(target: float = 0.95) -> dict[str, str]:
    """``COLUMNS`` with the target accuracy filled in."""
    return {k: v.format(target=target) for k, v in COLUMNS.items()}


# -- the findings: templates over a row's named fields, or values named beside them ----------------------------
PAIR = (
    "{train} train / {rollout} rollout vs {ref_train}/{ref_rollout} ({seeds} seeds): mismatch |Δ log p| "
    "{mismatch_ratio}, step time {time_ratio}, {reach}."
)
REACH = "steps to {target:.0%} {low}–{high} vs {ref_low}–{ref_high}: {apart}"
SEPARATED = "ranges separated"
OVERLAP = "ranges overlap (no difference shown at this size)"
NONE_REACHED = "steps to {target:.0%}: no seed reached it"
REF_NEVER = "steps to {target:.0%}: the reference never reached it"
MISSED = "; {missed} of {seeds} seeds never reached it"
RATIO = "{0:.2f}×"
NO_RATIO = "n/a"
RULES_OUT = "What an overlap can rule out: {resolution}."
RESOLUTION = (
    "with {n} seeds a pair and a pooled seed SD of {sd:.3g} steps to the target, a two-sample t-test ({alpha:.0%} "
    "two-sided) finds a difference with {power:.0%} power only from {gap:.3g} steps up"
)


def findings(rows: list[dict], target: float = 0.95, reference: tuple[str, str] = ("bf16", "bf16")) -> list[str]:
    """Plain sentences computed from ``table`` rows, each pair against ``reference``: its mismatch and step time as
    ratios, and whether its steps-to-``target`` range is separated from the reference's (disjoint ranges over seeds)
    or not. Next to the paper's statements, so a reader sees where this grid agrees and where it does not."""
    rows = prose.named(rows, headers(target))
    by_pair = {(r["train"], r["rollout"]): r for r in rows}
    if reference not in by_pair:
        raise ValueError(f"reference pair {reference} is not in the table; pairs: {sorted(by_pair)}")
    ref = by_pair[reference]

    def steps(r):
        xs = [x.strip() for x in str(r["each"]).split(",")]
        return [int(x) for x in xs if x.isdigit()], sum(not x.isdigit() for x in xs)

    def ratio(r, field):
        a, b = r.get(field), ref.get(field)
        return RATIO.format(a / b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else NO_RATIO

    ref_steps, _ = steps(ref)
    resolution = _resolution([steps(r)[0] for r in rows])
    out = []
    for pair, r in by_pair.items():
        if pair == reference:
            continue
        s, missed = steps(r)
        if s and ref_steps:
            apart = max(s) < min(ref_steps) or min(s) > max(ref_steps)
            reach = REACH.format(
                target=target,
                low=min(s),
                high=max(s),
                ref_low=min(ref_steps),
                ref_high=max(ref_steps),
                apart=SEPARATED if apart else OVERLAP,
            )
        else:
            reach = (NONE_REACHED if not s else REF_NEVER).format(target=target)
        if missed:
            reach += MISSED.format(missed=missed, seeds=r["seeds"])
        out.append(
            PAIR.format_map(
                {
                    **r,
                    "ref_train": reference[0],
                    "ref_rollout": reference[1],
                    "mismatch_ratio": ratio(r, "mismatch"),
                    "time_ratio": ratio(r, "s_total"),
                    "reach": reach,
                }
            )
        )
    if resolution and any(OVERLAP in line for line in out):
        out.append(RULES_OUT.format(resolution=resolution))
    return out


def _resolution(reached: list[list[int]], power: float = 0.8, alpha: float = 0.05) -> str:
    """What an overlap can rule out: the smallest difference in steps-to-target between two pairs that a two-sided
    ``alpha`` two-sample t-test over the grid's seeds finds with ``power``, with the seed SD pooled over the pairs
    (each pair's seeds that reached the target); "" with fewer than two such seeds in every pair."""
    import math

    sd, df = stats.pooled_sd(reached)
    if not df:
        return ""
    n = min(len(s) for s in reached if len(s) >= 2)
    gap = stats.detectable_difference(sd * math.sqrt(2 / n), 2 * n - 2, power, alpha)
    return RESOLUTION.format(n=n, sd=sd, alpha=alpha, power=power, gap=gap)


def base_config(**overrides):
    """Notebook 03's sanity run (``SANITY_RUN``: tiny-arith, grpo, vLLM rollouts where installed), with
    ``overrides``."""
    from nbkit.rl.config import config_from, runnable_here

    return runnable_here(
        config_from(
            {
                "train_dtype": "bf16",
                "output_dir": "reports/runs/05_precision_ablation",
                "checkpoint_every": 0,
                "overwrite": True,
                **overrides,
            }
        )
    )


class Ablation(GridStudy):
    """The grid as a stored study: options ``pairs`` ([train, rollout] lists), ``seeds``, ``steps``, ``algorithm``,
    ``rollout_engine``, ``output_dir``, and any ``RLConfig`` field in ``overrides``."""

    name = STUDY
    title = "Precision ablation: train dtype × rollout dtype"
    question = (
        "Does the (train, rollout) precision pair change how fast the sanity test is passed, and what does "
        "each pair cost? Primary comparison: each pair against BF16/BF16 by the range of steps to 95 % over "
        "seeds."
    )
    statistic = (
        "steps to 95 % = first step whose 5-step mean training accuracy ≥ 0.95, per seed; final accuracy = "
        "last 5-step mean, mean and [min, max] over seeds; mismatch and seconds averaged over steps and seeds."
    )
    notebook = "05_precision_ablation"
    output_dir = "reports/runs/05_precision_ablation"
    toy = {
        "pairs": [["fp32", "fp32"], ["bf16", "fp32"]],
        "seeds": [0],
        "steps": 1,
        "rollout_engine": "hf",
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8},
    }

    def defaults(self) -> dict:
        return {
            "pairs": [list(p) for p in PAIRS],
            "seeds": [0, 1, 2],
            "steps": 100,
            "algorithm": "grpo",
            "rollout_engine": "vllm",
        }

    def grid(
        self,
        pairs=None,
        seeds=(0, 1, 2),
        steps: int = 100,
        algorithm: str = "grpo",
        rollout_engine: str | None = None,
        output_dir: str | None = None,
        overrides: dict | None = None,
    ) -> dict:
        pairs = [tuple(p) for p in (pairs or PAIRS)]
        if any(len(p) != 2 for p in pairs) or len(set(pairs)) != len(pairs):
            raise ValueError(f"pairs must be distinct [train, rollout] pairs such as ['bf16', 'fp32'], got {pairs!r}")
        base = base_config(
            max_steps=steps,
            algorithm=algorithm,
            output_dir=output_dir or self.output_dir,
            **({"rollout_engine": rollout_engine} if rollout_engine else {}),
            **(overrides or {}),
        )
        out = {}
        for seed in seeds:
            for train, rollout in pairs:
                label = runlog.run_label(algorithm, runlog.pair_tag(train, rollout), seed)
                add_run(out, base, label, train_dtype=train, rollout_dtype=rollout, seed=seed)
        return out

    def table(self, runs, meta):
        return table(runs, meta)

    def findings(self, runs, meta, rows):
        return findings(rows)

    def figure(self, runs, meta):
        from nbkit.plots import ablation as ablation_plots

        return ablation_plots.ablation_curves(runs, meta)
