"""The registry of stored studies, in RESULTS.md order: each study's question, statistic, table and findings.

A study made of RL runs is a ``GridStudy`` defined next to its grid (``nbkit.hunt.Hunt``, ...); this module
instantiates them and declares the read half of the others, so RESULTS.md, the notebooks and ``nbkit study``
agree by construction.
"""
from __future__ import annotations

from nbkit import ablation, brevity_study, hunt, lengthlaw, moe_study, ppo_study
from nbkit.studies.base import Study


class _Ablation(Study):
    name = ablation.STUDY
    title = "Precision ablation: train dtype × rollout dtype"
    question = ("Does the (train, rollout) precision pair change how fast the sanity test is passed, and what does "
                "each pair cost? Primary comparison: each pair against BF16/BF16 by the range of steps to 95 % over "
                "seeds.")
    statistic = ("steps to 95 % = first step whose 5-step mean training accuracy ≥ 0.95, per seed; final accuracy = "
                 "last 5-step mean, mean and [min, max] over seeds; mismatch and seconds averaged over steps and seeds.")
    notebook = "05_precision_ablation"

    def table(self, runs, meta):
        return ablation.table(runs)

    def findings(self, runs, meta, rows):
        return ablation.findings(rows)


class _PPO(Study):
    name = ppo_study.STUDY
    title = "PPO with a critic, FP16 vs BF16"
    question = "Does BF16 PPO's KL explode on tiny-arith as in the paper (KL > 40)?"
    statistic = ("per seed: approx KL(π_old ‖ π) mean and max over minibatches; accuracy = mean of the first and the "
                 "last 5 rollout batches; explained variance over the last 5 rollouts, mean over seeds.")
    notebook = "03_rl_training"

    def table(self, runs, meta):
        """``ppo_study.table`` per dtype over seeds: each seed's value, then the mean."""
        per_run = ppo_study.table(runs)
        out = []
        for dtype in sorted({r["dtype"] for r in per_run}, key=("fp16", "bf16", "fp32").index):
            rows = sorted((r for r in per_run if r["dtype"] == dtype), key=lambda r: r["seed"])

            def each(key):
                return [r[key] for r in rows]

            def mean(key):
                xs = [x for x in each(key) if isinstance(x, (int, float))]
                return float(f"{sum(xs) / len(xs):.3g}") if xs else None

            out.append({"dtype": dtype, "seeds": len(rows),
                        "approx KL, mean over steps (each seed)": each("approx KL (mean)"),
                        "approx KL, max (each seed)": each("approx KL (max)"),
                        "accuracy first → last 5 rollouts (each seed)": each("accuracy (first → last 5 rollouts)"),
                        "explained variance, last 5 (mean)": mean("explained variance (last 5 rollouts)"),
                        "mean |Δ log p| (mean)": mean("mean |Δ log p|")})
        return out

    def findings(self, runs, meta, rows):
        by = {r["dtype"]: r for r in rows}
        if "fp16" not in by or "bf16" not in by:
            return []
        ratio = by["bf16"]["mean |Δ log p| (mean)"] / by["fp16"]["mean |Δ log p| (mean)"]
        kl_max = {d: max(by[d]["approx KL, max (each seed)"]) for d in ("fp16", "bf16")}
        return [f"BF16's training-time mismatch is {ratio:.1f}× FP16's (mean |Δ log p| over steps and seeds); the "
                f"largest approx KL of any seed is {kl_max['fp16']:.3g} (FP16) and {kl_max['bf16']:.3g} (BF16), far "
                f"from the paper's BF16 PPO KL > 40."]


class _MoE(Study):
    name = moe_study.STUDY
    title = "Mixture of experts: routing and router replay"
    question = "Does a mixture-of-experts model widen the BF16 gap, and does router replay close it?"
    statistic = ("final accuracy = last 5-step mean, mean and [min, max] over seeds; mismatch = mean |Δ log p| of the "
                 "last 5 steps, mean over seeds; flip rate = mean over steps and seeds.")
    notebook = "02_mismatch_analysis"

    def table(self, runs, meta):
        keep = ("algorithm", "dtype", "seeds", "reached 95%", "final accuracy (mean)", "final accuracy [min, max]",
                "mean |Δ log p| last 5 (mean)", "moe/flip_rate (mean over steps and seeds)")
        return [{k: r[k] for k in keep} for r in moe_study.summary(runs)]

    def findings(self, runs, meta, rows):
        by = {(r["algorithm"], r["dtype"]): r for r in rows}
        out = []
        for variant in ("moe.grpo", "moe_replay.grpo"):
            a, b = by.get((variant, "bf16")), by.get((variant, "fp16"))
            if a and b and a["mean |Δ log p| last 5 (mean)"] and b["mean |Δ log p| last 5 (mean)"]:
                out.append(f"{variant.split('.')[0]}: BF16's mismatch over the last 5 steps is "
                           f"{a['mean |Δ log p| last 5 (mean)'] / b['mean |Δ log p| last 5 (mean)']:.1f}× FP16's; "
                           f"final accuracy {a['final accuracy (mean)']} (BF16) vs {b['final accuracy (mean)']} "
                           f"(FP16), ranges {a['final accuracy [min, max]']} and {b['final accuracy [min, max]']}.")
        return out


class _LengthLaw(Study):
    name = lengthlaw.STUDY
    title = "The length law at up to 1,024 tokens"
    question = ("Does Σ log(π/μ) fall with response length at BF16's rate and stay flat in FP16, as in the paper "
                "(slopes −1.01 and −0.07 per 1k tokens)?")
    statistic = ("least-squares slope of each sequence's Σ log(π/μ) against its length, per 1k tokens; per-token k1 "
                 "and sequence KL; 95 % bootstrap CIs over sequences (2,000 resamples, seed 0).")
    notebook = "02_mismatch_analysis"

    def table(self, runs, meta):
        keep = ("run", "sequences", "mean length", "slope per 1k tokens", "slope CI", "paper slope", "k1 per token",
                "k1 CI", "sequence KL", "sequence KL CI")
        return [{k: r[k] for k in keep} for r in lengthlaw.table(lengthlaw.laws(runs))]

    def findings(self, runs, meta, rows):
        laws = lengthlaw.laws(runs)
        out = []
        for recipe in ("cast", "autocast"):
            bf, fp = laws.get(f"bf16 · {recipe} π"), laws.get(f"fp16 · {recipe} π")
            if bf is None or fp is None:
                continue
            if fp.seq_kl_ci[0] > 0:
                ratio = f"the BF16/FP16 sequence-KL ratio is {bf.seq_kl / fp.seq_kl:.1f}"
            elif bf.seq_kl_ci[0] > 0:
                ratio = ("FP16's sequence KL cannot be told from 0 (its CI covers 0), so the BF16/FP16 ratio has a "
                         f"lower bound only: BF16's lower CI bound over FP16's upper one, "
                         f"{bf.seq_kl_ci[0] / fp.seq_kl_ci[1]:.1f}")
            else:
                ratio = "neither sequence KL is separated from 0 (both CIs cover 0)"
            out.append(f"π by {recipe}: BF16 slope {bf.slope:.3g} per 1k tokens (CI {bf.slope_ci[0]:.3g} to "
                       f"{bf.slope_ci[1]:.3g}; slope ≈ −1000·k1: {bf.slope_matches_k1}), FP16 {fp.slope:.3g} (CI "
                       f"{fp.slope_ci[0]:.3g} to {fp.slope_ci[1]:.3g}); {ratio}.")
        return out


class _Brevity(Study):
    name = brevity_study.STUDY
    title = "A toy task: reward = −length on SmolLM2"
    question = "Does an FP32 trainer with a BF16 rollout fail to learn to say less, as a public report found?"
    statistic = "mean response length at the first step and over the last 3 steps; one seed per pair (an anecdote)."
    notebook = "04_where_bf16_breaks"

    def table(self, runs, meta):
        return brevity_study.table(runs)


STUDIES: dict[str, Study] = {s.name: s for s in
                             (_Ablation(), hunt.Hunt(), _PPO(), _MoE(), _LengthLaw(), _Brevity())}
"""Every stored study a reader can see, in RESULTS.md order."""
