"""The harm-threshold study as data: its doses, seeds and units, the rule it committed, the amendments on its card,
and how its doses were picked (the offline ladder) and read off a run (``nbkit.studies.harm_threshold`` is the study
built on them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from nbkit import results
from nbkit.records import schema
from nbkit.runtime import outputs
from nbkit.stats import threshold

STUDY = "harm_threshold_tiny_arith"
"""The stored study's folder name under ``data/results``."""
TASK = "tiny-arith"
"""The task the thresholds are measured on (their key in ``THRESHOLDS``)."""
THRESHOLDS = results.RESULTS / "harm_threshold" / "thresholds.json"
"""What ``store`` writes from the stored runs: per unit and task, the threshold with its CI."""
LADDER_FILE = results.RESULTS / "harm_threshold" / "dial_ladder_tiny_arith.json"
"""The offline ladder the channel points were picked from (measured before any run of the study)."""
REFERENCE = "fp32"
POINTS = (
    "e8m3",
    "e8m2",
    "dial-e8m1-c1of16",
    "dial-e8m1-c6of16",
    "dial-e8m1-c8of16",
    "dial-e8m1-c10of16",
    "e8m1",
)
"""The dosed rollout formats, in ascending ladder dose (``pick_points`` on ``LADDER_FILE`` gives the channel ones)."""
SEEDS = tuple(range(5))
"""Seeds of the threshold grid (5: the rule's minimum for a verdict; the threshold's CI is over them)."""
EXTRAS = (("bf16", None), ("fp16", None), ("fp8-e4m3", None), ("nvfp4", "mu_old"))
"""``(rollout format, correction)`` placed on the axis and run for the mechanism, not fitted."""
EXTRA_SEEDS = (0, 1, 2)
"""Seeds of ``EXTRAS`` (a direction, not a verdict)."""
TARGETS = 6
"""Log-spaced target doses from e8m2's ladder dose to e8m1's that ``pick_points`` matches."""
PRIMARY = "token_abs_logp_diff/mean"
"""The primary dose unit: mean per-token |log π − log μ| at step 0."""
UNITS = {
    "token_abs_logp_diff/mean": "per-token mean |log π − log μ|",
    "seq_log_ratio/abs_mean": "sequence |Σ_t log π/μ|, mean over sequences",
    "seq_kl": "sequence KL[μ‖π], mean over sequences",
    "ess_seq_deficit": "1/ESS − 1 of the sequence IS weights (ESS normalised: 1 when π = μ)",
}
"""Candidate dose units: name → what it is. Each is read at step 0 from the run's row (``step0_dose``)."""
EARLY, LATE = range(1, 11), range(41, 51)
"""The shift-share windows (``nbkit.mismatch.shiftshare``): steps 1–10 against steps 41–50."""
HARM = threshold.HARM
N_BOOT, BOOT_SEED = 2000, 0

RULE_TEXT = (
    "doses: rollout formats e8m3, e8m2, dial-e8m1-c1of16, c6of16, c8of16, c10of16, e8m1 (channel points picked "
    "before training from the offline ladder: nearest in log dose to 6 targets log-spaced from e8m2 to e8m1); runs: "
    "the dose-response's run (FP32 trainer, HF engine, GRPO, tiny-arith sanity set, 50 steps, judged every 10), FP32 "
    "rollouts paired on every seed, seeds 0-4; dose of a point: mean over seeds of the step-0 mismatch (first step's "
    "rollouts), primary unit per-token mean |dlog p|, secondary units seq |sum log pi/mu|, seq KL, 1/ESS_seq - 1; "
    "outcome: held-out judge accuracy, mean of steps 40 and 50, paired gap to FP32 per seed; threshold: "
    "nbkit.threshold.estimate (isotonic non-increasing fit of the mean gap in log dose, crossing of -0.05 by "
    "log-linear interpolation, 95 % percentile bootstrap over seeds, 2000 replicates, seed 0, t-corrected spread, "
    "bracket beside; no crossing inside the doses reported as below/above range); extras bf16, fp16, fp8-e4m3, "
    "nvfp4 with mu_old on seeds 0-2 placed on the axis, not fitted; shift-share windows steps 1-10 vs 41-50; read once "
    "after the last sitting"
)
"""The rule in one line, as the card records it."""
RULE_RECORD = {"commit": "574e11afde5764e57d1bf2fd72fe19dc93c2a8e5", "time": "2026-11-26T01:07:47+00:00"}
"""The commit that fixed ``RULE_TEXT`` and its time (``git log -1 --format=%cI``), before any run of the study."""


SOUND = {"commit": "a6c9174adf4ac334fef2221e2572ff67cfe71a59", "time": "2026-11-27T18:28:36+00:00"}
"""The commit that made issue 50's statistics sound in both harm studies, and its time."""
AMENDMENTS = (
    {
        "key": "growth_paragraph",
        "commit": "d280b62d7224e1e24ca6f7d571f1ad9129eed383",
        "time": "2026-11-26T01:12:05+00:00",
        "what": "A paragraph 'why the mismatch grew' was added to the findings: per arm the largest part of the "
        "shift-share split by π's entropy, with whether its bootstrap CI over runs excludes 0, for the arms that "
        "broke (mean gap at or below −0.05) and those that did not. The rule named the windows (steps 1–10 "
        "against 41–50), not which binning is read, how 'broke' is decided or what counts as a claim.",
        "why": "Issue 37's item 4 asks why the mismatch grows in runs that break; the code that reads it was "
        "written while the grid trained.",
    },
    {
        "key": "grew_fell_count",
        "commit": "51b7ffcdc507489b6cec7a41b3e70381705403b2",
        "time": "2026-11-26T02:14:00+00:00",
        "what": "The growth paragraph gained a closing count over the arms whose sequence mismatch grew or fell clear "
        "of its CI of which part was largest.",
        "why": "Added after the study's results were stored (02:11:34 UTC) and read, to summarise the paragraph.",
    },
    {
        "key": "threshold_ci",
        **SOUND,
        "what": "The threshold CI resamples each drawn seed's doses together with its gaps (each replicate's dose of "
        "a point = the mean over its drawn seeds, the points re-sorted by them); the rule's bootstrap held each "
        "dose fixed at its mean over seeds. The CI as first committed is shown beside the amended one.",
        "why": "Issue 50 item 2: single seeds dominate some doses' means (1/ESS − 1: one seed of c1of16 at 39.5 "
        "against 1.2–2.8 for the others), an uncertainty the fixed-dose CI did not carry.",
    },
    {
        "key": "gap_ci",
        **SOUND,
        "what": "Each gap's CI shown (table, figure, thresholds.json) is the 95 % t-interval over seeds that the "
        "verdicts read, not the interval bounded in (−1, 1) on Fisher's scale; an arm 'broke' when that interval "
        "lies wholly below −0.05, not when its mean does.",
        "why": "Issue 50 item 4: the bounded interval could pass a gap the t-interval excludes (one interval must "
        "be drawn and read); item 5: a mean at −0.0504 counted as broken.",
    },
    {
        "key": "growth_rule",
        **SOUND,
        "what": "The growth paragraph claims which part carried the change only for an arm with >= 5 runs whose "
        "entropy and probability binnings put the largest part in the same place; other arms are named with why "
        "they get no claim; its first sentence says in how many arms the mismatch fell and grew.",
        "why": "Issue 50 item 5: the attribution flips with the binning, 3-run bootstraps carried claims, and the "
        "mismatch fell in most arms, which the paragraph (titled 'why it grew') did not say first.",
    },
)
"""Changes to the rule after training began (``nbkit.studies.amendments``), put on the card by ``record`` with the
readings and verdicts each moved (``moves``, computed from the stored runs)."""


def pick_points(ladder: dict[str, float], targets: int = TARGETS, low: str = "e8m2", high: str = "e8m1") -> list[str]:
    """The rule's dose points from an offline ladder (``format → dose``): for each of ``targets`` doses log-spaced
    from ``ladder[low]`` to ``ladder[high]``, the format nearest in log dose (ends: ``low`` and ``high`` themselves);
    each format at most once, in ascending dose."""
    if low not in ladder or high not in ladder or not 0 < ladder[low] < ladder[high]:
        raise ValueError(f"the ladder needs {low} and {high} with 0 < {low} < {high}; got {ladder}")
    lo, hi = math.log(ladder[low]), math.log(ladder[high])
    inner = {k: math.log(v) for k, v in ladder.items() if k not in (low, high) and v > 0}
    picked = [low]
    for i in range(1, targets - 1):
        t = lo + (hi - lo) * i / (targets - 1)
        free = {k: v for k, v in inner.items() if k not in picked}
        picked.append(min(free, key=lambda k: abs(free[k] - t)))
    picked.append(high)
    return sorted(picked, key=lambda k: ladder[k])


def first_step_value(rows: list[dict], key: str) -> float | None:
    """A run's value of ``key`` at its first logged optimiser step (rollouts drawn with the initial weights)."""
    logged = [r for r in rows if r.get(schema.STEP, 0) >= 1 and r.get(key) is not None]
    return min(logged, key=lambda r: r[schema.STEP])[key] if logged else None


def step0_dose(rows: list[dict], unit: str) -> float | None:
    """A run's dose in ``unit`` (``UNITS``): its first optimiser step's value (rollouts drawn with the initial
    weights); ``ess_seq_deficit`` is 1/ESS − 1 of that step's sequence ESS."""
    if unit not in UNITS:
        raise ValueError(f"unknown dose unit {unit!r}; choose from {list(UNITS)}")
    v = first_step_value(rows, schema.ESS_SEQ if unit == "ess_seq_deficit" else schema.mismatch_key(unit))
    if v is None:
        return None
    return (1 / v - 1 if v > 0 else math.inf) if unit == "ess_seq_deficit" else v


def ladder_record(path: Path = LADDER_FILE) -> dict:
    """The stored offline ladder the points were picked from (``{"doses": format → dose, "cpu", "commit", ...}``)."""
    return json.loads(Path(path).read_text())


def measure_ladder(path: Path = LADDER_FILE, steps: int = 16, **ladder) -> dict:
    """Measure the offline ladder the rule picks its points from (e8m3, e8m2, the channel rule's inner points in
    ``steps`` steps, e8m1; ``nbkit.offline.ladder`` defaults: tiny-arith, 32 prompts × 4 samples, seed 0; ``ladder``
    replaces any ``LadderConfig`` field, e.g. another model, its prompts and length) and write it to ``path`` with the
    CPU and commit it ran on."""
    import datetime as _dt

    from nbkit.offline.ladder import LadderConfig, run_ladder
    from nbkit.precision import dial

    names = ("e8m3", "e8m2", *dial.channel_names(steps)[1:-1], "e8m1")
    lc = LadderConfig(**{"model": "tiny-arith", **ladder, "formats": names})
    res = run_ladder(lc)
    rec = {
        "doses": {n: res.metrics[n][schema.METRIC_TOKEN_ABS_LOGP_DIFF] for n in names},
        "ci": {n: [res.cis[n][schema.METRIC_TOKEN_ABS_LOGP_DIFF][k] for k in ("low", "high")] for n in names},
        "unit": schema.METRIC_TOKEN_ABS_LOGP_DIFF,
        "ladder": "nbkit.offline.ladder defaults: tiny-arith, 32 prompts x 4 samples, <= 48 tokens, seed 0"
        if not ladder
        else f"nbkit.offline.ladder: {lc.model}, prompts {lc.prompt_source}, {lc.n_prompts} prompts x "
        f"{lc.samples_per_prompt} samples, <= {lc.max_tokens} tokens, seed {lc.seed}",
        "machine": results.machine(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        **results.git_state(),
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    outputs.write_json(Path(path), rec)
    return rec
