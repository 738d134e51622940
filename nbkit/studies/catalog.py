"""The registry of stored studies, in RESULTS.md order: each study's question, statistic, table and findings.

A study made of RL runs is a ``GridStudy`` defined next to its grid (``nbkit.studies.hunt.Hunt``, ...); the length law,
whose runs are sampled sequences rather than RL runs, declares its read half here. RESULTS.md, the notebooks and
``nbkit study`` read every study through this registry, so they agree by construction.
"""

from __future__ import annotations

from nbkit.offline import lengthlaw
from nbkit.studies import (
    ablation,
    brevity,
    corrections,
    dose_response,
    harm_threshold,
    harm_transfer,
    hunt,
    mechanism,
    moe,
    opsm,
    ppo,
    ppo_critic,
    predictors,
    smollm2_after,
)
from nbkit.studies.base import Study


class _LengthLaw(Study):
    name = lengthlaw.STUDY
    title = "The length law at up to 1,024 tokens"
    question = (
        "Does Σ log(π/μ) fall with response length at BF16's rate and stay flat in FP16, as in the paper "
        "(slopes −1.01 and −0.07 per 1k tokens)?"
    )
    statistic = (
        "least-squares slope of each sequence's Σ log(π/μ) against its length, per 1k tokens; per-token k1 "
        "and sequence KL; 95 % bootstrap CIs over sequences (2,000 resamples, seed 0)."
    )
    notebook = "02_mismatch_analysis"

    def reproduce(self, card: dict) -> str:
        """The card's command with the module named as it is today (a card keeps the command as it was run)."""
        words = card.get("command", "").split(" ", 3)
        if words[:2] == ["python", "-m"] and len(words) > 2:
            words[2] = lengthlaw.__name__
        return " ".join(words)

    def table(self, runs, meta):
        keep = (
            "run",
            "sequences",
            "mean length",
            "slope per 1k tokens",
            "slope CI",
            "paper slope",
            "k1 per token",
            "k1 CI",
            "sequence KL",
            "sequence KL CI",
        )
        return [{k: r[k] for k in keep} for r in lengthlaw.table(lengthlaw.laws(runs))]

    def findings(self, runs, meta, rows):
        laws = lengthlaw.laws(runs)
        out = []
        for recipe in ("cast", "autocast"):
            bf, fp = laws.get(f"bf16 · {recipe} π"), laws.get(f"fp16 · {recipe} π")
            if bf is None or fp is None:
                continue
            ratio = f"BF16/FP16 sequence KL: {lengthlaw.seq_kl_ratio({'bf16': bf, 'fp16': fp}).sentence}"
            out.append(
                f"π by {recipe}: BF16 slope {bf.slope:.3g} per 1k tokens (CI {bf.slope_ci[0]:.3g} to "
                f"{bf.slope_ci[1]:.3g}; slope ≈ −1000·k1: {bf.slope_matches_k1}), FP16 {fp.slope:.3g} (CI "
                f"{fp.slope_ci[0]:.3g} to {fp.slope_ci[1]:.3g}); {ratio}."
            )
        return out


STUDIES: dict[str, Study] = {
    s.name: s
    for s in (
        ablation.Ablation(),
        hunt.Hunt(),
        ppo.PPOStudy(),
        ppo_critic.PPOCriticStudy(),
        moe.MoEStudy(),
        _LengthLaw(),
        brevity.BrevityStudy(),
        dose_response.DoseResponse(),
        corrections.CorrectionsStudy(),
        harm_threshold.HarmThreshold(),
        harm_transfer.HarmTransfer(),
        opsm.OPSMStudy(),
        predictors.Predictors(),
        mechanism.Mechanism(),
        smollm2_after.SmolLM2After(),
    )
}
"""Every stored study a reader can see, in RESULTS.md order."""

PLANNED = {
    "corrections_tiny_arith": "rule committed at cbe5feb before any run; runs not yet trained",
    "mechanism_tiny_arith": "rule committed at 6489c6f before any run; runs stored as they finish",
    "smollm2_after": "rule and predictions committed at e0c078f before any run; runs stored as they finish",
}
"""Registered studies that may be missing from ``data/results`` (their rule is committed, their runs are not stored
yet): RESULTS.md shows their question and plan, and says no result exists."""
