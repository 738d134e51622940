"""The paper's precision ablation on the sanity test: train dtype × rollout dtype, same algorithm and seeds.

``nbkit study ablation_tiny_arith run`` trains the grid (notebook 03's tiny-arith defaults: grpo, 16 × 8 per step,
vLLM rollouts) and ``... store`` stores it as ``data/results/<study>/`` (``nbkit.results``) so notebook 05 renders
without re-running. A run's pair and seed are read from its config (``nbkit.records.runlog.coords``).
"""

from __future__ import annotations

from nbkit.records import runlog, schema
from nbkit.stats import stats
from nbkit.studies.base import GridStudy

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
            xs = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
            return float(f"{sum(xs) / len(xs):.3g}") if xs else None

        rollout = (mean(schema.TIME_ROLLOUT) or 0) + (mean(schema.TIME_SYNC) or 0)
        out.append(
            {
                "train": train_dtype,
                "rollout": rollout_dtype,
                "seeds": len(group),
                "steps": max(schema.optimiser_steps(r) for r in group.values()),
                f"reached {target:.0%}": f"{sum(x is not None for x in reach)}/{len(reach)}",
                f"steps to {target:.0%} (each)": ", ".join("—" if x is None else str(x) for x in reach),
                "final accuracy (mean)": round(sum(final) / len(final), 3),
                "final accuracy [min, max]": f"[{min(final)}, {max(final)}]",
                "mean |Δ log p|": mean(schema.TOKEN_ABS_LOGP_DIFF),
                "k3 KL": mean(schema.KL_K3),
                "s/step rollout": round(rollout, 2),
                "s/step update": mean(schema.TIME_UPDATE),
                "s/step total": mean(schema.TIME_STEP),
                "rollout dtype (audit)": ", ".join(sorted({str(r.get(schema.AUDIT_ROLLOUT_DTYPE)) for r in rows})),
                "train matmuls (audit)": ", ".join(
                    sorted({d for r in rows for d in r.get(schema.AUDIT_MATMUL_DTYPES) or []})
                ),
            }
        )
    return out


def findings(rows: list[dict], target: float = 0.95, reference: tuple[str, str] = ("bf16", "bf16")) -> list[str]:
    """Plain sentences computed from ``table`` rows, each pair against ``reference``: its mismatch and step time as
    ratios, and whether its steps-to-``target`` range is separated from the reference's (disjoint ranges over seeds)
    or not. Next to the paper's statements, so a reader sees where this grid agrees and where it does not."""
    by_pair = {(r["train"], r["rollout"]): r for r in rows}
    if reference not in by_pair:
        raise ValueError(f"reference pair {reference} is not in the table; pairs: {sorted(by_pair)}")
    ref = by_pair[reference]
    key = f"steps to {target:.0%} (each)"

    def steps(r):
        xs = [x.strip() for x in str(r[key]).split(",")]
        return [int(x) for x in xs if x.isdigit()], sum(not x.isdigit() for x in xs)

    def ratio(r, col):
        a, b = r.get(col), ref.get(col)
        return f"{a / b:.2f}×" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "n/a"

    ref_steps, _ = steps(ref)
    resolution = _resolution([steps(r)[0] for r in rows])
    out = []
    for pair, r in by_pair.items():
        if pair == reference:
            continue
        s, missed = steps(r)
        if s and ref_steps:
            apart = max(s) < min(ref_steps) or min(s) > max(ref_steps)
            reach = f"steps to {target:.0%} {min(s)}–{max(s)} vs {min(ref_steps)}–{max(ref_steps)}: " + (
                "ranges separated" if apart else "ranges overlap (no difference shown at this size)"
            )
        else:
            reach = f"steps to {target:.0%}: " + ("no seed reached it" if not s else "the reference never reached it")
        if missed:
            reach += f"; {missed} of {r['seeds']} seeds never reached it"
        out.append(
            f"{pair[0]} train / {pair[1]} rollout vs {reference[0]}/{reference[1]} ({r['seeds']} seeds): "
            f"mismatch |Δ log p| {ratio(r, 'mean |Δ log p|')}, step time {ratio(r, 's/step total')}, {reach}."
        )
    if resolution and any("ranges overlap" in line for line in out):
        out.append(f"What an overlap can rule out: {resolution}.")
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
    return (
        f"with {n} seeds a pair and a pooled seed SD of {sd:.3g} steps to the target, a two-sample t-test "
        f"({alpha:.0%} two-sided) finds a difference with {power:.0%} power only from {gap:.3g} steps up"
    )


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
        "overrides": {"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8},
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
        from dataclasses import replace

        pairs = [tuple(p) for p in (pairs or PAIRS)]
        if any(len(p) != 2 for p in pairs) or len(set(pairs)) != len(pairs):
            raise ValueError(f"pairs must be distinct [train, rollout] pairs such as ['bf16', 'fp32'], got {pairs!r}")
        base = base_config(
            steps=steps,
            algorithm=algorithm,
            output_dir=output_dir or self.output_dir,
            **({"rollout_engine": rollout_engine} if rollout_engine else {}),
            **(overrides or {}),
        )
        out = {}
        for seed in seeds:
            for train_dtype, rollout_dtype in pairs:
                label = runlog.run_label(algorithm, runlog.pair_tag(train_dtype, rollout_dtype), seed)
                out[label] = replace(
                    base,
                    train_dtype=train_dtype,
                    rollout_dtype=rollout_dtype,
                    seed=seed,
                    output_dir=str(base.out / label),
                )
        return out

    def coords(self, config: dict) -> dict:
        return runlog.coords(config)

    def table(self, runs, meta):
        return table(runs, meta)

    def findings(self, runs, meta, rows):
        return findings(rows)

    def figure(self, runs, meta):
        from nbkit.plots import ablation as ablation_plots

        return ablation_plots.ablation_curves(runs, meta)
