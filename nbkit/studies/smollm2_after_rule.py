"""The rule of the real-LM prediction study (``nbkit.studies.smollm2_after``), as committed at ``RULE_RECORD``
before any of its runs (it sat in that module then; moved here unchanged): the arms' criteria, the committed
predictions, the power of the rule applied and its blinded seed extension."""

from __future__ import annotations

import math
import statistics

from nbkit.stats.stats import ci_side_power

SEEDS = tuple(range(5))
"""The study's seeds before the blinded extension (``seeds_planned``)."""
PREDICTOR = "token_abs"
"""The predictor the power is planned on: per-token mean |Δ log p| at step 0, the harm threshold's primary unit."""
CRITERIA: dict[str, tuple[str, float]] = {
    "fp32/fp16": ("above", -0.05),
    "fp32/bf16": ("below", -0.02),
    "bf16/bf16": ("below", -0.02),
    "fp16/fp16": ("above", -0.05),
}
"""The headline prediction per arm as a rule that can fail: BF16 harms (the gap's 95 % CI lies wholly ``below``
−0.02), FP16 does not harm by 0.05 (its CI lies wholly ``above`` −0.05). ``verdict`` reads the one interval."""
SEEDS_MAX = 10
"""The blinded seed extension's cap (``seeds_planned``)."""
PLANNING_SD = 0.03
"""The SD of one seed's paired gap the plan assumes before any reference run exists: the judge's sampling floor at
the pilot's plateau (0.82 on 500 problems: 0.017 per judgment, ≈ 0.012 for the mean of two, ≈ 0.017 for a gap)
with room for seed-to-seed training variance, which one pilot seed cannot show."""
POWER_TARGET = 0.8
THRESHOLD, THRESHOLD_CI = 0.0549, (0.0214, 0.0883)
"""Tiny-arith's per-token harm threshold and its 95 % CI (harm_threshold_tiny_arith, as amended), as the rule
states them."""

RULE_TEXT = (
    "arms: FP32 trainer x {FP16, BF16} vLLM rollouts, BF16/BF16, FP16/FP16, each against FP32/FP32 paired by seed, "
    "seeds 0-4 seed by seed; runs: the pilot's (SmolLM2-135M-Instruct, LoRA r8 lr 5e-4, number_after on "
    "data/smollm2_after_sanity, grpo_mu_old, 8 prompts x 8 samples, <= 16 tokens, 50 steps, vLLM rollouts in the "
    "arm's dtype with 32-token blocks, shared_prefix), judged at steps 0, 20, 40 and 50 on the 500 problems of "
    "data/smollm2_after_heldout (1 sample each, FP32 HF engine); outcome: judge accuracy, mean of steps 40 and 50; "
    "gap = arm - FP32/FP32 on the same seed, one 95 % t-interval over seeds per arm, the only interval read; "
    "prediction (the headline, per arm): BF16 rollouts harm, FP16 do not: a BF16 arm holds when its CI lies wholly "
    "below -0.02 and fails when it lies wholly above -0.02; an FP16 arm holds when its CI lies wholly above -0.05 and "
    "fails when it lies wholly below -0.05; otherwise undecided; the prediction holds when all four arms hold, fails "
    "when any arm fails (an intersection-union test: a false 'holds' at most 5 %; a false 'fails' at most 2.5 % per "
    "arm, 10 % over the four, Bonferroni); predictions per arm and candidate (PREDICTIONS, from the step-0 doses "
    "measured in data/results/smollm2_after_doses by nbkit.studies.predicted, fit on predictors_tiny's 20 points, "
    "+/- the 95 % quantile of leave-one-task-out errors): each shown beside the observed gap with whether the "
    "observed mean lies inside (reported, not a verdict: intervals ~0.9 wide cannot fail), and per candidate the "
    "mean |observed - predicted| over the four arms, the smallest named closest (ties within 0.005 named together); "
    "per-token threshold reading: tiny-arith's threshold 0.0549 (95 % CI 0.0214-0.0883) per token; an arm dosed below "
    "the CI is predicted not to cross -0.05, one inside it is undetermined (FP16 arms below, BF16 arms inside); "
    "power: planned on token_abs's predicted gaps with a planning SD of 0.03 per seed's gap (seeds_planned); "
    "blinded extension: when FP32/FP32 has finished seeds 0-4, sd = sqrt(2) x the SD of its five outcomes (no gap "
    "read), and the study runs the smallest number of seeds in 5-10 giving every arm's criterion power >= 0.8 at "
    "its predicted gap (10 if none), the 5-seed reading shown beside as the first look; cut: the positive control "
    "(e8m2 needs the HF engine and its own FP32 reference, 10 more runs)"
)
"""The rule in one line, as the card records it."""
RULE_RECORD: dict = {"commit": "e0c078f5d5fe4d69cc2353f17bed8d173a30af1c", "time": "2026-11-28T06:47:18+00:00"}
"""The commit that fixed ``RULE_TEXT`` with ``PREDICTIONS`` and its time; empty: nothing may train."""
PREDICTIONS: dict = {
    "fp32/fp16": {
        "token_abs": {"gap": -0.0094, "lo": -0.4577, "hi": 0.4389, "value": 0.00469, "in_range": True},
        "bias": {"gap": 0.0123, "lo": -0.4362, "hi": 0.4609, "value": -0.0002492, "in_range": False},
        "seq_kl": {"gap": 0.0123, "lo": -0.5339, "hi": 0.5586, "value": -0.001079, "in_range": False},
        "seq_abs": {"gap": 0.0011, "lo": -0.5452, "hi": 0.5474, "value": 0.01223, "in_range": True},
        "ess_deficit": {"gap": 0.0011, "lo": -0.4815, "hi": 0.4837, "value": 0.0002877, "in_range": True},
    },
    "fp32/bf16": {
        "token_abs": {"gap": -0.0586, "lo": -0.5068, "hi": 0.3897, "value": 0.04219, "in_range": True},
        "bias": {"gap": -0.0152, "lo": -0.4637, "hi": 0.4334, "value": 0.00373, "in_range": True},
        "seq_kl": {"gap": -0.0066, "lo": -0.5528, "hi": 0.5397, "value": 0.01848, "in_range": True},
        "seq_abs": {"gap": -0.0072, "lo": -0.5535, "hi": 0.5391, "value": 0.1111, "in_range": True},
        "ess_deficit": {"gap": -0.007, "lo": -0.4896, "hi": 0.4756, "value": 0.01843, "in_range": True},
    },
    "bf16/bf16": {
        "token_abs": {"gap": -0.0586, "lo": -0.5069, "hi": 0.3897, "value": 0.0515, "in_range": True},
        "bias": {"gap": -0.017, "lo": -0.4655, "hi": 0.4316, "value": 0.004292, "in_range": True},
        "seq_kl": {"gap": -0.0071, "lo": -0.5533, "hi": 0.5392, "value": 0.02132, "in_range": True},
        "seq_abs": {"gap": -0.0072, "lo": -0.5535, "hi": 0.539, "value": 0.1394, "in_range": True},
        "ess_deficit": {"gap": -0.0102, "lo": -0.4928, "hi": 0.4724, "value": 0.0301, "in_range": True},
    },
    "fp16/fp16": {
        "token_abs": {"gap": -0.0113, "lo": -0.4596, "hi": 0.437, "value": 0.005932, "in_range": True},
        "bias": {"gap": 0.0123, "lo": -0.4362, "hi": 0.4609, "value": -0.0004151, "in_range": False},
        "seq_kl": {"gap": 0.0123, "lo": -0.5339, "hi": 0.5586, "value": -0.001959, "in_range": False},
        "seq_abs": {"gap": 0.0011, "lo": -0.5452, "hi": 0.5474, "value": 0.01646, "in_range": True},
        "ess_deficit": {"gap": 0.0011, "lo": -0.4815, "hi": 0.4837, "value": 0.0004532, "in_range": True},
    },
}
"""``arm label → predictor → {"gap", "lo", "hi", "value", "in_range"}``, committed with the rule: printed by
``predicted.predictions`` from the doses in ``DOSES`` (4 decimals; ``value`` the arm's measured candidate,
``in_range`` False where it lies outside the stored points' range: the fit's end value, an extrapolation). Each
interval is ± the 95 % quantile of the candidate's leave-one-task-out errors over the 20 stored points."""


def verdict(arm: str, obs: dict | None) -> str:
    """``holds``, ``fails`` or ``undecided`` (``not run`` without an observation): the arm's ``CRITERIA`` read on
    its observed gap's 95 % CI (``observed``)."""
    if not obs or obs.get("seeds", 0) < 2:
        return "not run"
    side, bound = CRITERIA[arm]
    below, above = obs["hi"] < bound, obs["lo"] > bound
    if side == "below":
        return "holds" if below else "fails" if above else "undecided"
    return "holds" if above else "fails" if below else "undecided"


def headline(verdicts: dict[str, str]) -> str:
    """The prediction as a whole: ``fails`` if any arm fails, ``holds`` if every arm of ``CRITERIA`` holds, else
    ``undecided``."""
    vs = [verdicts.get(a, "not run") for a in CRITERIA]
    return "fails" if "fails" in vs else "holds" if all(v == "holds" for v in vs) else "undecided"


def power(sd: float, n: int) -> dict[str, float]:
    """``arm → power`` of its criterion at ``PREDICTOR``'s predicted gap, ``n`` seeds, SD ``sd`` per seed's gap."""
    return {
        arm: ci_side_power(PREDICTIONS[arm][PREDICTOR]["gap"], sd, n, bound, side)
        for arm, (side, bound) in CRITERIA.items()
    }


def seeds_planned(reference_finals: list[float] | None = None) -> tuple[int, float]:
    """(seeds, the SD it plans on): the rule's blinded extension. With the FP32/FP32 outcomes of seeds 0-4
    (``reference_finals``, no gap read) the SD of a gap is √2 × their SD (conservative when pairing helps);
    before them, ``PLANNING_SD``. The seeds: the smallest n in ``len(SEEDS)``..``SEEDS_MAX`` whose power reaches
    ``POWER_TARGET`` for every arm, else ``SEEDS_MAX``."""
    if reference_finals is None:
        sd = PLANNING_SD
    else:
        if len(reference_finals) < len(SEEDS):
            raise ValueError(f"the extension reads the reference's {len(SEEDS)} seeds, got {len(reference_finals)}")
        sd = math.sqrt(2) * statistics.stdev(reference_finals[: len(SEEDS)])
    if sd <= 0:
        return len(SEEDS), sd
    for n in range(len(SEEDS), SEEDS_MAX + 1):
        if min(power(sd, n).values()) >= POWER_TARGET:
            return n, sd
    return SEEDS_MAX, sd
