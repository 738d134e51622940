"""The paper's precision ablation on the sanity test: train dtype × rollout dtype, same algorithm and seeds.

``python -m nbkit.ablation`` trains the grid (notebook 03's tiny-arith defaults: grpo, 16 × 8 per step, vLLM
rollouts) and stores it as ``data/results/<study>/`` (``nbkit.results``) so notebook 05 renders without re-running.
"""
from __future__ import annotations

import argparse
import time

from nbkit import schema

PAIRS: list[tuple[str, str]] = [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp32", "fp32")]
"""The paper's grid: (train dtype, rollout dtype)."""

STUDY = "ablation_tiny_arith"
"""The stored study's folder name under ``data/results``."""


def table(runs: dict[str, list[dict]], target: float = 0.95, window: int = 5) -> list[dict]:
    """One row per (train, rollout) pair over its seeds: steps to ``target`` (``window``-step mean accuracy), final
    accuracy mean and range, the training-time mismatch (mean |Δ log p| and k3 KL per token, averaged over steps and
    seeds) and seconds per step split into rollout (generation + weight sync) and update."""
    from nbkit.rl import study

    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for label, rows in runs.items():
        _, train_dtype, rollout_dtype, _ = study.parse_pair(label)
        groups.setdefault((train_dtype, rollout_dtype), {})[label] = rows
    order = {p: i for i, p in enumerate(PAIRS)}
    out = []
    for (train_dtype, rollout_dtype), group in sorted(groups.items(), key=lambda kv: order.get(kv[0], 99)):
        summary = study.summary_table(group, target, window)
        final = [r[f"final accuracy ({window}-step mean)"] for r in summary]
        reach = [r[f"steps to {target:.0%}"] for r in summary]
        rows = [r for rows in group.values() for r in rows]

        def mean(key):
            xs = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
            return float(f"{sum(xs) / len(xs):.3g}") if xs else None

        rollout = (mean(schema.TIME_ROLLOUT) or 0) + (mean(schema.TIME_SYNC) or 0)
        out.append({
            "train": train_dtype, "rollout": rollout_dtype, "seeds": len(group), "steps": max(len(r) for r in group.values()),
            f"reached {target:.0%}": f"{sum(x is not None for x in reach)}/{len(reach)}",
            f"steps to {target:.0%} (each)": ", ".join("—" if x is None else str(x) for x in reach),
            "final accuracy (mean)": round(sum(final) / len(final), 3),
            "final accuracy [min, max]": f"[{min(final)}, {max(final)}]",
            "mean |Δ log p|": mean(schema.TOKEN_ABS_LOGP_DIFF), "k3 KL": mean(schema.KL_K3),
            "s/step rollout": round(rollout, 2), "s/step update": mean(schema.TIME_UPDATE),
            "s/step total": mean(schema.TIME_STEP),
            "rollout dtype (audit)": ", ".join(sorted({str(r.get(schema.AUDIT_ROLLOUT_DTYPE)) for r in rows})),
            "train matmuls (audit)": ", ".join(sorted({d for r in rows for d in r.get(schema.AUDIT_MATMUL_DTYPES) or []})),
        })
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
    out = []
    for pair, r in by_pair.items():
        if pair == reference:
            continue
        s, missed = steps(r)
        if s and ref_steps:
            apart = max(s) < min(ref_steps) or min(s) > max(ref_steps)
            reach = (f"steps to {target:.0%} {min(s)}–{max(s)} vs {min(ref_steps)}–{max(ref_steps)}: "
                     + ("ranges separated" if apart else "ranges overlap (no difference shown at this size)"))
        else:
            reach = f"steps to {target:.0%}: " + ("no seed reached it" if not s else "the reference never reached it")
        if missed:
            reach += f"; {missed} of {r['seeds']} seeds never reached it"
        out.append(f"{pair[0]} train / {pair[1]} rollout vs {reference[0]}/{reference[1]} ({r['seeds']} seeds): "
                   f"mismatch |Δ log p| {ratio(r, 'mean |Δ log p|')}, step time {ratio(r, 's/step total')}, {reach}.")
    return out


def base_config(**overrides):
    """Notebook 03's default run (tiny-arith sanity set, grpo, vLLM rollouts), with ``overrides``."""
    from nbkit.engines import vllm_available
    from nbkit.rl import RLConfig

    kw = dict(model="tiny-arith", dataset="data/tiny_arith_sanity", template="raw", grader="arith", algorithm="grpo",
              train_dtype="bf16", rollout_engine="vllm" if vllm_available() else "hf", steps=100,
              prompts_per_step=16, samples_per_prompt=8, lr=2e-4, max_tokens=40, seed=0,
              output_dir="reports/runs/05_precision_ablation", checkpoint_every=0, overwrite=True)
    kw.update(overrides)
    return RLConfig(**kw)


def main(argv: list[str] | None = None) -> None:
    """Train the grid and store it (``--no-store`` keeps only the run folders)."""
    from nbkit import results
    from nbkit.rl import study

    p = argparse.ArgumentParser(prog="python -m nbkit.ablation", description=__doc__)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--pairs", nargs="+", default=[f"{t}/{r}" for t, r in PAIRS], help="train/rollout, e.g. bf16/fp32")
    p.add_argument("--algorithm", default="grpo")
    p.add_argument("--output-dir", default="reports/runs/05_precision_ablation")
    p.add_argument("--study", default=STUDY)
    p.add_argument("--no-store", action="store_true")
    a = p.parse_args(argv)
    pairs = [tuple(x.split("/")) for x in a.pairs]
    if any(len(x) != 2 for x in pairs):
        p.error(f"--pairs takes train/rollout items such as bf16/fp32, got {a.pairs}")
    base = base_config(steps=a.steps, output_dir=a.output_dir, algorithm=a.algorithm)
    t0 = time.time()
    study.run_grid(base, [a.algorithm], [], seeds=a.seeds, pairs=pairs)
    if not a.no_store:
        import sys
        results.store(a.study, a.output_dir, command="python -m nbkit.ablation " + " ".join(sys.argv[1:] if argv is None else argv),
                      wall_seconds=time.time() - t0, configs={"pairs": a.pairs, "seeds": a.seeds, "steps": a.steps,
                                                              "algorithm": a.algorithm})


if __name__ == "__main__":
    from nbkit import paths as _paths

    _paths.setup_environment()
    main()
