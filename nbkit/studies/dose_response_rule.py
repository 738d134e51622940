"""The dose–response study as data: its grid's formats and seeds, the rule it reads, the record and amendments on
its card, and the outcome and dose of a run (``nbkit.studies.dose_response`` is the study built on them).
"""

from __future__ import annotations

import statistics

from nbkit.records import schema
from nbkit.stats import noninferiority as NI

STUDY = "dose_response_tiny_arith"
"""The stored study's folder name under ``data/results``."""
LADDER = ("fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "nvfp4", "mxfp4", "e8m2", "e8m1")
"""The ladder of the primary contrast, ordered by the mismatch measured on tiny-arith in a 1-step probe."""
PAIRS = (("bf16", "bf16"), ("fp16", "fp16"))
"""The paper's same-format pairs (train, rollout), marked on the figure (no correction)."""
CORRECTED = {
    "formats": ("bf16", "fp8-e5m2", "mxfp4", "e8m2"),
    "corrections": ("token_tis", "seq_mis", "icepop", "mu_old"),
}
"""Where the corrections run (the formats around the break, BF16, FP8): ``nbkit.rl.algorithms.CORRECTIONS``."""
MORE_SEEDS = {"formats": ("fp32", "nvfp4", "mxfp4", "e8m2"), "seeds": (5, 6)}
"""Seeds added after the first five, without correction, for the formats whose verdict was inconclusive at five
seeds (and FP32, their twin): 7 seeds detect a 0.05 gap at the measured noise. Chosen after seeing the first five
seeds' verdicts, which the findings say (a sequential look inflates the rule's error rate somewhat)."""
MARGIN = NI.RULE.margin
"""The gap (accuracy) the rule calls a break."""
REFERENCE = "fp32"
FIRST_LOOK = (0, 1, 2, 3, 4)
"""The seeds of the first look (the grid's seeds before ``MORE_SEEDS`` were added)."""
TRUE_GAPS = (0.0, -MARGIN, -0.12)
"""True gaps at which the rule's error rates are simulated: none, exactly the margin, a clear break."""
BREAK_GAP = -0.12
"""The true gap at which the table gives each cell's chance of a "breaks" verdict."""
SIMS = 20_000
"""Simulated studies per error rate (seeded: the page's numbers are the same on every machine)."""
PAIR_CONTRAST = "bf16/bf16 − fp16/fp16"
"""The family's name of the paper's own comparison (BF16/BF16 against FP16/FP16, paired by seed)."""


RULE_RECORD = {
    "what": "the held-out accuracy at the last judged step, each format against FP32 on the same seed, 95 % "
    "t-interval of the mean paired gap against −0.05",
    "commit": "8e330504616b470ffc3581fa7e4d90fa2d036497",
    "time": "2026-11-24T20:44:14+00:00",
}
"""The rule as first committed (the study's first commit)."""
TRAINING_STARTED = {
    "time": "2026-11-24T21:03:23+00:00",
    "commit": "45fd0fb9a3aec50b2e57239bded2d9ccdb934cad",
    "evidence": "the study's first stored sitting (commit 2309504) is dated 21:47:03 UTC with 2,620 s of wall time, "
    "so its first run began by 21:03:23; the code it trained, 45fd0fb, was committed at 21:03:02",
}
"""When the first run began, and how that is known."""
BOUNDS_AMENDMENT = {
    "key": "bounds",
    "commit": "5d9a8caca26ea3dcc0ef309f0e0ac09e74061199",
    "time": "2026-12-07T23:49:18+00:00",
    "what": "Each accuracy-gap interval the page shows is kept inside [-1, 1], the bounds of what it estimates: where "
    "the rule's 95 % t-interval leaves them (3-seed cells: mxfp4 + mu_old, e8m2 + mu_old; e8m1 under the outcome "
    "as first committed at the first look), it is clipped at the bound, beside the interval as computed (a 'gap CI "
    "kept in [-1, 1]' column in the table, 'in [-1, 1]' in the looks table). The verdicts read the same (the rule "
    "reads at -0.05 and 0).",
    "why": "Found after the results (issue 74): the table printed intervals below -1 (mxfp4 + mu_old -1.284, e8m2 + "
    "mu_old -1.12) for a difference of two accuracies, which lies in [-1, 1]. Clipping keeps the t-interval the "
    "verdicts read (one interval drawn and read, as one_ci amended): the true gap always lies inside the bounds, so "
    "the clipped interval covers it whenever the t-interval does.",
}
"""Intervals kept inside their bounds (``dose_response_findings.in_bounds``); commit and time: the commit that made
it, recorded by the next."""
AMENDMENTS = (
    {
        "key": "outcome",
        "commit": "baa750fa08aedd1500eec54108951a371f89c10a",
        "time": "2026-11-24T21:09:19+00:00",
        "what": "The primary outcome changed from the held-out accuracy at the last judgment (step 50) to the mean of "
        "the last two judgments (steps 40 and 50).",
        "why": "The judge samples each of the 351 held-out problems once, so two judgments halve its sampling variance "
        "(the commit's reason). The commit says the change came before any contrast was read; the card cannot "
        "show that: the first sitting had been training for about six minutes.",
    },
    {
        "key": "worse_than_fp32",
        "commit": "2fc92b0a2814534d2280441a693fdbc899185928",
        "time": "2026-11-24T22:10:47+00:00",
        "what": "A reading was added beside the rule's verdicts: an inconclusive cell whose interval lies wholly "
        "below 0 is said to be worse than FP32, its size undecided. The rule's three verdicts are unchanged.",
        "why": "Made 23 minutes after the study's results were first regenerated (21:47 UTC), after they were read: "
        "'inconclusive' alone hid that these cells were worse than FP32 (recorded by issue 50 item 6).",
    },
    {
        "key": "seeds",
        "commit": "698570e2f4f9ce20db9520b711c1fd535ea4b1ab",
        "time": "2026-11-24T23:44:25+00:00",
        "what": "Seeds 5 and 6 were added for FP32, NVFP4, MXFP4 and e8m2 (no correction), after their first five seeds "
        "had been stored and read: a second, sequential look (trained at e366061).",
        "why": "Five seeds had left NVFP4, MXFP4 and e8m2 inconclusive, and the noise measured then (pooled over "
        "formats) said a 0.05 gap needed more seeds.",
    },
    {
        "key": "reanalysis",
        "commit": "49495a35b65bfeb6d621d99fe4e4a22388cd760d",
        "time": "2026-11-25T19:25:37+00:00",
        "what": "Issue 36's re-analysis: a cell with fewer than 5 paired seeds reports its direction only; the claims are "
        "also read family-wise (Holm); the intervals shown are bounded in (−1, 1); each cell's own SD replaces "
        "the pooled one; the x-axis is the mismatch at step 0 instead of the run average.",
        "why": "A reviewer's reading: 2-df SDs are no basis for a claim, ten unadjusted claims at the margin carry a "
        "large family-wise error, an accuracy difference cannot lie below −1, the pooled SD mixed 0.02 with 0.07, "
        "and the run average is moved by the run's own fate.",
    },
    {
        "key": "one_ci",
        "commit": "1099c04f8b26ec196362d9beeec2493b61ea4abc",
        "time": "2026-11-27T18:59:57+00:00",
        "what": "Each gap's interval shown (table, figure, findings) is the rule's 95 % t-interval, the one its "
        "verdict reads; the interval bounded in (−1, 1) on Fisher's scale that was shown beside the verdicts is "
        "gone from the display, named only where it would read otherwise.",
        "why": "Issue 50 item 4: the bounded interval passed gaps the t-interval excludes (e8m2 + μ as π_old), so "
        "the page drew one interval and read another.",
    },
    BOUNDS_AMENDMENT,
)
"""The changes made after training began (``nbkit.studies.amendments``); ``verdicts_moved`` is computed from the
stored runs (``DoseResponse.moves``), the commits' times from git."""


def base_config(**overrides):
    """One run of the study: FP32 trainer, HF rollout engine, grpo on the tiny-arith sanity set, judged every 10
    steps on the held-out set: ``SANITY_RUN`` with these changes (``overrides`` replace any field)."""
    from nbkit.rl.config import config_from

    return config_from(
        {
            "train_dtype": "fp32",
            "rollout_engine": "hf",
            "max_steps": 50,
            "judge_every": 10,
            "output_dir": f"runs/{STUDY}",
            "checkpoint_every": 0,
            **overrides,
        }
    )


JUDGE_WINDOW = 2
"""Judgments averaged into the primary outcome as amended: the last two (steps 40 and 50 of a 50-step run judged
every 10)."""
ORIGINAL_WINDOW = 1
"""The outcome as first committed (8e33050): the last judgment alone."""


def final_judge(rows: list[dict], window: int = JUDGE_WINDOW) -> float | None:
    """The primary outcome: the mean held-out accuracy of the run's last ``window`` judgments after step 0 (two
    judgments halve the judge's sampling variance; both are late in the run)."""
    judged = [r[schema.JUDGE_ACCURACY] for r in rows if schema.JUDGE_ACCURACY in r and r.get(schema.STEP, 1) > 0]
    return statistics.fmean(judged[-window:]) if judged else None


def step0_mismatch(rows: list[dict]) -> float | None:
    """The dose of a run: the mismatch of its first optimiser step's rollouts (drawn with the initial weights)."""
    logged = [r for r in rows if r.get(schema.STEP, 0) >= 1 and r.get(schema.TOKEN_ABS_LOGP_DIFF) is not None]
    return min(logged, key=lambda r: r[schema.STEP])[schema.TOKEN_ABS_LOGP_DIFF] if logged else None
