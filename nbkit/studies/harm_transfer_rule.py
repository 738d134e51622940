"""The harm-transfer study as data: its task and regime, doses, seeds, the rule it committed and its amendments, and
the run it trains (``nbkit.studies.harm_transfer`` is the study built on them).
"""

from __future__ import annotations

from nbkit import results
from nbkit.studies import harm_threshold as H
from nbkit.studies import tiny_long_regimes as TL

STUDY = "harm_transfer_tiny_long"
"""The stored study's folder name under ``data/results``."""
TASK = "tiny-long"
"""The task's key in ``harm_threshold.THRESHOLDS``."""
REFERENCE_TASK = H.TASK
"""The task the transfer is read against (tiny-arith)."""
REGIME = "mid"
"""tiny-long's length regime (``long_arith.REGIMES``): 16 additions, 180 response tokens (5.7× tiny-arith's 31.5)."""
DATASET = f"data/{TL.set_name(REGIME)}"
"""The training set: the regime's perfectible set (``tiny_long_regimes.build_set``)."""
JUDGE_SET = f"data/{TL.set_name(REGIME)}_heldout"
"""The judge's held-out set: the same recipe on a disjoint pool (``build_judge_set``)."""
LADDER_FILE = results.RESULTS / "harm_threshold" / "dial_ladder_tiny_long.json"
"""tiny-long's offline ladder at ``REGIME`` (measured before any run; ``measure_ladder``)."""
PILOT_FILE = results.RESULTS / "harm_threshold" / "pilot_tiny_long.json"
"""The pilot's record (``pilot``: per lr the judge accuracy at steps 0-50, the rise, whether it learns), stored."""
LR: float | None = 5e-5
"""The learning rate, fixed by ``pilot`` before the rule is committed (None: the grid refuses to build): the
smallest of ``PILOT_LRS`` that learns in ``PILOT_FILE`` (a test re-reads it)."""
PILOT_LRS = (5e-5, 1e-4, 2e-4)
"""Candidate lrs of the pilot (the hunt: 1e-3 collapses tiny-long, 1e-4 moves it with 16 responses a step)."""
PILOT_RISE = 0.1
"""An lr learns when its FP32 run's judge accuracy at step 50 exceeds step 0's by more than this."""
TARGETS = 4
"""Log-spaced target doses from e8m2 to e8m1 that ``pick_points`` matches (ends included): 4 dial doses."""
POINTS = ("e8m3", "e8m2", "dial-e8m1-c2of16", "dial-e8m1-c8of16", "e8m1")
"""The dosed rollout formats in ascending ladder dose: e8m3 and ``pick_points(ladder, TARGETS)`` on ``LADDER_FILE``
(a test checks they follow from the stored ladder)."""
SEEDS = tuple(range(5))
"""Seeds per dose (the rule's minimum for a verdict)."""
STEPS = 50
"""Optimiser steps per run (judged at 0, 10, ..., 50)."""
PROMPTS, SAMPLES = 16, 8
"""Prompts per step and samples per prompt (tiny-arith's shape: 128 responses a step)."""
TRAIN_POOL = TL.regime_pool(REGIME)
"""Problems ``tiny_long_regimes.build_set`` samples for ``DATASET`` (seed 0; ~40 % land in the window): 158 kept, so
50 steps × 16 prompts see each about 5 times (tiny-arith's 585-problem set: 1.4 times), not 19 as 100 would give."""
JUDGE_POOL, JUDGE_SEED = 800, 1
"""The held-out pool (problems drawn with ``JUDGE_SEED``, the training set's problems removed) and its seed."""

RULE_TEXT = (
    f"task tiny-long at regime {REGIME} (16 additions, 180-token answers), training set {DATASET} (perfectible, "
    f"pool of {TRAIN_POOL}), judge set "
    f"{JUDGE_SET} (disjoint, same perfectible recipe), max_tokens reference + 24; lr {LR if LR is not None else '(not yet fixed)'}, "
    f"fixed before this commit by the pilot (FP32 rollouts, seed 0, 50 steps, lrs 5e-5/1e-4/2e-4; the smallest whose "
    f"judge accuracy at step 50 exceeds step 0's by more than 0.1); doses: e8m3 and pick_points(tiny-long's offline ladder, 4 targets) = "
    f"{', '.join(POINTS)}; runs, dose, outcome and threshold as harm_threshold_tiny_arith (FP32 trainer, HF engine, "
    "GRPO, 16 prompts x 8 samples, 50 steps judged every 10 by an FP32 engine with 1 sample a problem, FP32 rollouts "
    "paired on every seed, seeds 0-4 seed by seed; dose = mean over seeds of the step-0 mismatch in each unit; "
    "outcome = mean judge accuracy of steps 40 and 50, paired gap to FP32; threshold = nbkit.threshold.estimate per "
    "unit); no extras; transfer: for each unit (per-token |dlog p|, seq |sum log pi/mu|, seq KL, 1/ESS_seq - 1) the "
    "threshold on each task (tiny-arith's from its stored study), the ratio tiny-long/tiny-arith and whether the "
    "95 % CIs overlap (censored ends reach 0 or infinity); a unit agrees when both tasks show a crossing and the CIs "
    "overlap; the unit whose thresholds agree (CIs overlap) is the transferable dose; if several agree all are "
    "named with their ratios; if none agrees, say so; read once after the last sitting"
)
"""The rule in one line, as the card records it."""
EXTRAS = (("bf16", None), ("fp16", None), ("nvfp4", "mu_old"))
"""``(rollout format, correction)`` run for the mechanism and placed on the axis, not fitted (the amendment's)."""
EXTRA_SEEDS = (0, 1, 2)
"""Seeds of ``EXTRAS`` (a direction, not a verdict)."""
AMENDMENTS = (
    {
        "what": "Extras added to the grid: BF16, FP16 and NVFP4 with μ as π_old (rollout formats; FP32 trainer) on "
        "seeds 0–2, after the threshold grid; placed on the dose axis and read by the shift-share mechanism, not "
        "fitted. The rule had said 'no extras'. Doses, seeds, outcome, threshold and transfer rule unchanged.",
        "why": "Issue 37's item 4 asks for the growth split of runs that break (e8m1, μ as π_old on FP4) and runs that "
        "do not (BF16, FP16) on both tasks; tiny-arith has them as extras, tiny-long's rule had none. Made while "
        "seed 1 trained, before any outcome of the study was read (the page is blind until the last sitting).",
        "verdicts_moved": [],
        "commit": "bcaca6c6006d9ab3c6c654aac5aa319ab683e4e1",
        "time": "2026-11-26T04:53:10+00:00",
    },
    {
        "what": "A sentence added to the findings beside the rule's verdict (overlap_note): the range of the agreeing "
        "units' ratios, the widths of their 95 % CIs and the two tasks' response lengths. The agreement rule, its "
        "verdict and every number it reads are unchanged.",
        "why": "Made after the rule was read (the last sitting stored at 08:01 UTC): three units agreed, with ratios "
        "on both sides of 1 and CIs several-fold wide, so an overlap is weak evidence of equal thresholds; the "
        "reader is told so beside the verdict, from the stored numbers.",
        "verdicts_moved": [],
        "commit": "d752d3055e463039ffc6713752181b6aefd7287e",
        "time": "2026-11-26T08:05:17+00:00",
    },
)
"""Changes to the rule after training began (``nbkit.studies.amendments``), put on the card by ``store``; ``commit``
and ``time`` name the commit that made each."""
RULE_RECORD = {"commit": "53e236eaf758de090fff8bdb30297caf7594284e", "time": "2026-11-26T03:51:11+00:00"}
"""The commit that fixed ``RULE_TEXT`` (with the pilot's ``LR``) and its time, before any run of the grid."""
BAND = (0.5, 2.0)
"""The equivalence band of the amended transfer rule (``TRANSFER_RULE``): thresholds within a factor 2 are equal
for a user's purpose (a risk line read off the wrong task's threshold is then at most 2× off)."""
TRANSFER_RULE = (
    "transfer, amended (issue 50, item 1; stated before it is computed): per unit, a joint bootstrap of the two "
    "tasks' thresholds (each task's seeds resampled with replacement, independently of the other's, each drawn seed "
    "bringing its doses and its gaps; nbkit.threshold.estimate's fit, crossing and t-corrected gaps, 2000 "
    "replicates, seed 0) gives the ratio tiny-long/tiny-arith and its 95 % percentile CI (a replicate with no "
    "crossing on one task counts at the censored end: ratio 0 or infinity; with none on both, at whichever end "
    "is farther from the band); read against the equivalence band [0.5, 2]: 'transfers' when the whole CI lies "
    "inside the band, 'differs' when it lies wholly outside (above 2 or below 0.5), 'cannot tell' otherwise; the "
    "units that transfer are named with their ratios and CIs, and if none does the study says so. Replaces 'a "
    "unit agrees when both tasks show a crossing and the 95 % CIs overlap', which is shown beside it as the "
    "reading first committed"
)
"""The amended transfer rule (``BAND``), committed on its own before any code computes it."""
SOUND_AMENDMENTS = (
    {
        "key": "transfer",
        "commit": "e096b68208aa114328c0045a6dae7d3016834079",
        "time": "2026-11-27T18:11:29+00:00",
        "what": "The transfer rule: " + TRANSFER_RULE.split(": ", 1)[1] + ".",
        "why": "Issue 50 item 3: 'the CIs overlap' is not a transfer rule (wider CIs make agreement more likely); "
        "the band and the three readings were committed on their own before any code computed them.",
    },
    *(a for a in H.AMENDMENTS if a["key"] in ("threshold_ci", "gap_ci", "growth_rule")),
)
"""Issue 50's amendments (the transfer rule, and the threshold CI, gap CI and growth rule shared with
``harm_threshold``), put on the card by ``record_amendments`` with what each moved."""


def base_config(learning_rate: float | None = None, **overrides):
    """One run of the study before its rollout format and seed are set (``overrides`` replace any field); refuses
    to build before the pilot has fixed ``LR`` unless ``learning_rate`` is given."""
    from nbkit.rl.config import config_from

    lr = LR if learning_rate is None else learning_rate
    if lr is None:
        raise ValueError(
            "harm_transfer.LR is not fixed yet: run `python -m nbkit.studies.harm_transfer pilot` and commit the "
            "rule with its lr, or pass learning_rate= (overrides: {'learning_rate': ...})"
        )
    return config_from(
        {
            "model": TL.MODEL,
            "dataset": DATASET,
            "template": "raw",
            "grader": "arith",
            "algorithm": "grpo",
            "train_dtype": "fp32",
            "rollout_engine": "hf",
            "max_steps": STEPS,
            "prompts_per_step": PROMPTS,
            "num_generations": SAMPLES,
            "max_completion_length": TL.max_tokens(REGIME),
            "learning_rate": lr,
            "judge_every": 10,
            "judge_set": JUDGE_SET,
            "judge_samples": 1,
            "output_dir": f"runs/{STUDY}",
            "checkpoint_every": 0,
            **overrides,
        }
    )
