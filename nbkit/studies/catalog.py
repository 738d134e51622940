"""The registry of stored studies: for each, its question, its statistic, its table and its computed findings.

The table and sentence functions live with each study's own module (``nbkit.ablation``, ``nbkit.hunt``, ...);
this module only says which of them a reader sees, so RESULTS.md and the notebooks agree by construction.
"""
from __future__ import annotations

from nbkit import ablation, brevity_study, hunt, lengthlaw, moe_study, ppo_study
from nbkit.studies.base import Study


def _ppo_by_dtype(runs: dict[str, list[dict]]) -> list[dict]:
    """``ppo_study.table`` per dtype over seeds: each seed's value, then the mean."""
    per_run = ppo_study.table(runs)
    out = []
    for dtype in sorted({r["dtype"] for r in per_run}, key=lambda d: ("fp16", "bf16", "fp32").index(d)):
        rows = sorted((r for r in per_run if r["dtype"] == dtype), key=lambda r: r["seed"])

        def each(key):
            return [r[key] for r in rows]

        def mean(key):
            xs = [x for x in each(key) if isinstance(x, (int, float))]
            return float(f"{sum(xs) / len(xs):.3g}") if xs else None

        out.append({"dtype": dtype, "seeds": len(rows), "approx KL, mean over steps (each seed)": each("approx KL (mean)"),
                    "approx KL, max (each seed)": each("approx KL (max)"),
                    "accuracy first → last 5 rollouts (each seed)": each("accuracy (first → last 5 rollouts)"),
                    "explained variance, last 5 (mean)": mean("explained variance (last 5 rollouts)"),
                    "mean |Δ log p| (mean)": mean("mean |Δ log p|")})
    return out


def _ppo_findings(runs, rows) -> list[str]:
    by = {r["dtype"]: r for r in rows}
    if "fp16" not in by or "bf16" not in by:
        return []
    ratio = by["bf16"]["mean |Δ log p| (mean)"] / by["fp16"]["mean |Δ log p| (mean)"]
    kl_max = {d: max(by[d]["approx KL, max (each seed)"]) for d in ("fp16", "bf16")}
    return [f"BF16's training-time mismatch is {ratio:.1f}× FP16's (mean |Δ log p| over steps and seeds); the largest "
            f"approx KL of any seed is {kl_max['fp16']:.3g} (FP16) and {kl_max['bf16']:.3g} (BF16), far from the "
            f"paper's BF16 PPO KL > 40."]


def _hunt_table(runs):
    keep = ("length", "lr", "algorithm", "seeds", "fp16 final", "bf16 final", "gap (bf16 − fp16)", "gap [min, max]",
            "gap sign", "mismatch bf16/fp16", "bf16 mismatch growth", "bf16 phantom")
    return [{k: r[k] for k in keep} for r in hunt.phase_map(runs)]


def _hunt_findings(runs, rows) -> list[str]:
    return [hunt.verdict(hunt.phase_map(runs)), hunt.chance_caveat(runs)]


def _lengthlaw_table(runs):
    keep = ("run", "sequences", "mean length", "slope per 1k tokens", "slope CI", "paper slope", "k1 per token",
            "k1 CI", "sequence KL", "sequence KL CI")
    return [{k: r[k] for k in keep} for r in lengthlaw.table(lengthlaw.laws(runs))]


def _lengthlaw_findings(runs, rows) -> list[str]:
    laws = lengthlaw.laws(runs)
    out = []
    for recipe in ("cast", "autocast"):
        bf, fp = laws.get(f"bf16 · {recipe} π"), laws.get(f"fp16 · {recipe} π")
        if bf is None or fp is None:
            continue
        if fp.seq_kl_ci[0] > 0:
            ratio = f"the BF16/FP16 sequence-KL ratio is {bf.seq_kl / fp.seq_kl:.1f}"
        else:
            ratio = ("FP16's sequence KL cannot be told from 0 (its CI covers 0), so the BF16/FP16 ratio has a lower "
                     f"bound only: BF16's lower CI bound over FP16's upper one, {bf.seq_kl_ci[0] / fp.seq_kl_ci[1]:.1f}"
                     if bf.seq_kl_ci[0] > 0 else "neither sequence KL is separated from 0 (both CIs cover 0)")
        out.append(f"π by {recipe}: BF16 slope {bf.slope:.3g} per 1k tokens (CI {bf.slope_ci[0]:.3g} to "
                   f"{bf.slope_ci[1]:.3g}; slope ≈ −1000·k1: {bf.slope_matches_k1}), FP16 {fp.slope:.3g} (CI "
                   f"{fp.slope_ci[0]:.3g} to {fp.slope_ci[1]:.3g}); {ratio}.")
    return out


def _moe_table(runs):
    keep = ("algorithm", "dtype", "seeds", "reached 95%", "final accuracy (mean)", "final accuracy [min, max]",
            "mean |Δ log p| last 5 (mean)", "moe/flip_rate (mean over steps and seeds)")
    return [{k: r[k] for k in keep} for r in moe_study.summary(runs)]


def _moe_findings(runs, rows) -> list[str]:
    by = {(r["algorithm"], r["dtype"]): r for r in rows}
    out = []
    for variant in ("moe.grpo", "moe_replay.grpo"):
        a, b = by.get((variant, "bf16")), by.get((variant, "fp16"))
        if a and b and a["mean |Δ log p| last 5 (mean)"] and b["mean |Δ log p| last 5 (mean)"]:
            out.append(f"{variant.split('.')[0]}: BF16's mismatch over the last 5 steps is "
                       f"{a['mean |Δ log p| last 5 (mean)'] / b['mean |Δ log p| last 5 (mean)']:.1f}× FP16's; final "
                       f"accuracy {a['final accuracy (mean)']} (BF16) vs {b['final accuracy (mean)']} (FP16), "
                       f"ranges {a['final accuracy [min, max]']} and {b['final accuracy [min, max]']}.")
    return out


STUDIES: dict[str, Study] = {s.name: s for s in [
    Study("ablation_tiny_arith", "Precision ablation: train dtype × rollout dtype",
          "Does the (train, rollout) precision pair change how fast the sanity test is passed, and what does each pair "
          "cost? Primary comparison: each pair against BF16/BF16 by the range of steps to 95 % over seeds.",
          "steps to 95 % = first step whose 5-step mean training accuracy ≥ 0.95, per seed; final accuracy = last "
          "5-step mean, mean and [min, max] over seeds; mismatch and seconds averaged over steps and seeds.",
          ablation.table, lambda runs, rows: ablation.findings(rows), "05_precision_ablation"),
    Study("hunt_tiny_long", "Where BF16 breaks: the hunt on tiny-long",
          "Is there a response length × learning rate × algorithm cell where BF16 RL ends behind FP16? Rule, stated "
          "before the results: a cell counts as *BF16 behind* when every seed's paired gap is negative and the mean "
          f"gap is below −{hunt.GAP_MARGIN:g}.",
          "final = last 5-step mean of training accuracy, mean over seeds; gap = BF16 − FP16 paired by seed, mean "
          "and [min, max]; mismatch ratio = mean |Δ log p| over steps; growth = last window over first.",
          _hunt_table, _hunt_findings, "04_where_bf16_breaks"),
    Study("ppo_tiny_arith", "PPO with a critic, FP16 vs BF16",
          "Does BF16 PPO's KL explode on tiny-arith as in the paper (KL > 40)?",
          "per seed: approx KL(π_old ‖ π) mean and max over minibatches; accuracy = mean of the first and the last "
          "5 rollout batches; explained variance over the last 5 rollouts, mean over seeds.",
          _ppo_by_dtype, _ppo_findings, "03_rl_training"),
    Study("moe_tiny_arith", "Mixture of experts: routing and router replay",
          "Does a mixture-of-experts model widen the BF16 gap, and does router replay close it?",
          "final accuracy = last 5-step mean, mean and [min, max] over seeds; mismatch = mean |Δ log p| of the "
          "last 5 steps, mean over seeds; flip rate = mean over steps and seeds.",
          _moe_table, _moe_findings, "02_mismatch_analysis"),
    Study("lengthlaw_smollm2", "The length law at up to 1,024 tokens",
          "Does Σ log(π/μ) fall with response length at BF16's rate and stay flat in FP16, as in the paper "
          "(slopes −1.01 and −0.07 per 1k tokens)?",
          "least-squares slope of each sequence's Σ log(π/μ) against its length, per 1k tokens; per-token k1 and "
          "sequence KL; 95 % bootstrap CIs over sequences (2,000 resamples, seed 0).",
          _lengthlaw_table, _lengthlaw_findings, "02_mismatch_analysis"),
    Study("brevity_smollm2", "A toy task: reward = −length on SmolLM2",
          "Does an FP32 trainer with a BF16 rollout fail to learn to say less, as a public report found?",
          "mean response length at the first step and over the last 3 steps; one seed per pair (an anecdote).",
          brevity_study.table, notebook="04_where_bf16_breaks"),
]}
"""Every stored study a reader can see, in RESULTS.md order."""
