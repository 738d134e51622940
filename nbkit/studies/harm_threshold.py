"""Where harm starts: the dose at which an FP32-trained run's held-out accuracy falls 0.05 below FP32 rollouts'.

The dose–response (``nbkit.studies.dose_response``) placed e8m2 (≈ 0.05 per token, inconclusive) and e8m1 (≈ 0.35,
broken) with no dose between them. This study fills the gap with the dial (``nbkit.precision.dial``'s channel rule: e8m1
on a
share of every rounding's channels, e8m2 on the rest) and reads a harm threshold with a CI off the curve.

The rule (``RULE_TEXT``), fixed in this module and committed before any of its runs trained:

- **Doses.** ``POINTS``: e8m3, e8m2, four channel-rule points and e8m1. The channel points were picked before any
  training from the offline ladder (``LADDER_FILE``: per-token |Δ log p| against an FP32 π, 32 prompts × 4 samples,
  seed 0, on this study's CPU) by ``pick_points``: for each of 6 targets log-spaced from e8m2's ladder dose to
  e8m1's, the channel point nearest in log dose. The dial is not monotone in its share
  (``tests/precision/test_dial.py``),
  so the x-axis is the *measured* dose, never the share; e8m3 extends the range below e8m2 (a dose expected to do no
  harm anchors the curve's start).
- **Runs.** The dose–response's run (``dose_response.base_config``: FP32 trainer, HF engine, GRPO on the tiny-arith
  sanity set, 50 steps, judged every 10 on the 351 held-out problems by an FP32 engine) with only ``rollout_format``
  and ``seed`` set; FP32 rollouts on every seed (the paired reference); seeds ``SEEDS`` (0–4), trained seed by seed.
- **Dose of a point.** The mean over its seeds of the step-0 mismatch: each run's first optimiser step's rollouts
  (drawn with the initial weights), as the dose–response's x-axis. Primary unit ``PRIMARY``: per-token mean
  |log π − log μ|. The other candidate units (``UNITS``) are read the same way and get their own thresholds
  (secondary; the transfer to a second task decides which one travels).
- **Outcome.** Held-out judge accuracy, mean of the judgments at steps 40 and 50 (``dose_response.final_judge``);
  per seed and point the paired gap = point − FP32 on that seed.
- **Threshold.** ``nbkit.stats.threshold.estimate`` as committed there: the isotonic (non-increasing) fit of the mean
gap
  against log dose, the dose where it reaches −0.05 by log-linear interpolation, a 95 % percentile bootstrap over
  seeds (2,000 replicates, seed 0, whole rows of gaps per drawn seed, t-corrected spread), the shape-free bracket
  beside it; no crossing inside the doses is reported as such (``below_range`` / ``above_range``), never
  extrapolated. One threshold per unit; the primary unit's is the study's answer.
- **Placed on the axis, not fitted.** ``EXTRAS`` (BF16, FP16, FP8 E4M3 rollouts, and NVFP4 rollouts with μ as PPO's
  π_old) on seeds ``EXTRA_SEEDS`` (0–2), trained after the threshold grid: their step-0 doses place the paper's
  formats on the axis (their gaps are shown as directions only: 3 seeds), and their per-step token bins are the
  mechanism's runs (``nbkit.mismatch.shiftshare``: early steps 1–10 against late steps 41–50).
- **Stopping.** Seeds run in order; read once, on every stored seed, after the last sitting; a study stopped short
  of 5 seeds per point says so and is read at the seeds it has.

``nbkit study harm_threshold_tiny_arith run [--shard i/n]`` trains what is unfinished, ``... store`` stores the
finished runs and writes ``THRESHOLDS`` (what ``nbkit doctor`` reads, ``nbkit.offline.risk``) from them.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from nbkit import results
from nbkit.records import schema
from nbkit.runtime import outputs
from nbkit.stats import threshold
from nbkit.stats.stats import bounded_mean_ci, mean_ci
from nbkit.studies import dose_response as DR
from nbkit.studies import growth, prereg

STUDY = "harm_threshold_tiny_arith"
"""The stored study's folder name under ``data/results``."""
TASK = "tiny-arith"
"""The task the thresholds are measured on (their key in ``THRESHOLDS``)."""
THRESHOLDS = results.RESULTS / "harm_threshold" / "thresholds.json"
"""What ``store`` writes from the stored runs and the doctor reads (``nbkit.offline.risk.STORE``)."""
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


def step0_dose(rows: list[dict], unit: str) -> float | None:
    """A run's dose in ``unit`` (``UNITS``): its first optimiser step's value (rollouts drawn with the initial
    weights); ``ess_seq_deficit`` is 1/ESS − 1 of that step's sequence ESS."""
    if unit not in UNITS:
        raise ValueError(f"unknown dose unit {unit!r}; choose from {list(UNITS)}")
    key = schema.ESS_SEQ if unit == "ess_seq_deficit" else schema.mismatch_key(unit)
    logged = [r for r in rows if r.get(schema.STEP, 0) >= 1 and r.get(key) is not None]
    if not logged:
        return None
    v = min(logged, key=lambda r: r[schema.STEP])[key]
    return (1 / v - 1 if v > 0 else math.inf) if unit == "ess_seq_deficit" else v


class HarmThreshold(prereg.PreRegistered):
    """Options: ``points``, ``seeds``, ``extras`` (``[[format, correction or None], ...]``), ``extra_seeds``,
    ``steps``, ``output_dir``, ``overrides`` (any ``RLConfig`` field)."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    task = TASK
    """The task the thresholds are measured on (its key in ``THRESHOLDS``)."""
    rule_points = POINTS
    """The rule's dosed rollout formats, in ascending ladder dose (what ``gap_matrix`` reads)."""
    rule_seeds = SEEDS
    """The rule's seeds per dose (a study read at fewer says so)."""
    measured_on = "tiny-arith (a 4-layer, ~1 M-parameter model), 50 GRPO steps, FP32 trainer, HF engine"
    """What the task's thresholds were measured on, said with every risk line (``nbkit.offline.risk``)."""
    title = "Where harm starts: a harm threshold with a CI"
    question = (
        "With an FP32 trainer, at which step-0 rollout mismatch does the held-out accuracy fall 0.05 below FP32 "
        "rollouts'? Seven doses from e8m3 to e8m1 (the dial's channel rule fills e8m2–e8m1), 5 seeds each, FP32 "
        "paired by seed; the threshold is read off an isotonic fit of the mean gap against log dose, with a "
        "bootstrap CI over seeds. Rule fixed in nbkit.studies.harm_threshold before any of its runs trained."
    )
    statistic = (
        "outcome = held-out judge accuracy (351 problems × 1 sample, FP32 engine), mean of the judgments at steps 40 "
        "and 50; gap = point − FP32 on the same seed; dose = mean over seeds of the step-0 mismatch; threshold = "
        "dose where the isotonic fit of the mean gap crosses −0.05 (log-linear between doses), 95 % percentile "
        "bootstrap CI over seeds (2,000 replicates, t-corrected; as amended, each drawn seed brings its doses with its gaps, the CI with doses fixed shown beside); gap CI = 95 % t-interval over seeds (not bounded: it may pass −1)."
    )
    notebook = "06_dose_response"
    output_dir = f"runs/{STUDY}"
    toy = {
        "points": ["e8m2", "dial-e8m1-c1of16"],
        "seeds": [0],
        "extras": [["bf16", None]],
        "extra_seeds": [0],
        "steps": 1,
        "overrides": {"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {
            "points": list(POINTS),
            "seeds": list(SEEDS),
            "extras": [list(e) for e in EXTRAS],
            "extra_seeds": list(EXTRA_SEEDS),
            "steps": 50,
        }

    # -- write half -------------------------------------------------------------------------------------------
    def grid(
        self,
        points=POINTS,
        seeds=SEEDS,
        extras=EXTRAS,
        extra_seeds=EXTRA_SEEDS,
        steps: int = 50,
        output_dir: str | None = None,
        overrides: dict | None = None,
    ) -> dict:
        from nbkit.precision import formats as F
        from nbkit.rl.algorithms import CORRECTIONS as KNOWN

        points = [F.validate(p) for p in points]
        extras = [(F.validate(f), c) for f, c in extras]
        bad = [c for _, c in extras if c is not None and c not in KNOWN]
        if bad:
            raise ValueError(f"unknown correction(s) {bad}; choose from {list(KNOWN)}")
        base = self.base_config(steps=steps, output_dir=output_dir or self.output_dir, **(overrides or {}))
        grid = {}

        def add(label, **kw):
            grid[label] = replace(base, output_dir=str(base.out / label), **kw)

        for seed in seeds:  # seed by seed: a cut-off study has every dose on the same seeds
            add(f"{REFERENCE}-none-s{seed}", rollout_format=REFERENCE, seed=seed)
            for p in points:
                add(f"{p}-none-s{seed}", rollout_format=p, seed=seed)
        for seed in extra_seeds:  # after the threshold grid: placed on the axis, not fitted
            for f, c in extras:
                if f"{f}-{c or 'none'}-s{seed}" not in grid:
                    add(f"{f}-{c or 'none'}-s{seed}", rollout_format=f, correction=c, seed=seed)
        return grid

    def base_config(self, **overrides):
        """One run of the study before its rollout format and seed are set: the dose-response's run
        (``dose_response.base_config``)."""
        return DR.base_config(**overrides)

    def coords(self, config: dict) -> dict:
        return DR.DoseResponse().coords(config)

    # -- the analysis (the rule's) -------------------------------------------------------------------------------
    def arms(self, runs, meta) -> dict[tuple[str, str], dict[int, list[dict]]]:
        """``(format, correction) → seed → rows`` of the FP32-trained runs."""
        out: dict = {}
        for label, rows in runs.items():
            m = meta[label]
            if m["train"] == "fp32":
                out.setdefault((m["format"], m["correction"]), {})[m["seed"]] = rows
        return out

    def doses(self, runs, meta, unit: str = PRIMARY) -> dict[tuple[str, str], float]:
        """``arm → dose``: the mean over its seeds of the step-0 mismatch in ``unit``."""
        out = {}
        for arm, by_seed in self.arms(runs, meta).items():
            vals = [d for d in (step0_dose(rows, unit) for rows in by_seed.values()) if d is not None]
            if vals:
                out[arm] = statistics.fmean(vals)
        return out

    def arm_gaps(self, runs, meta) -> dict[tuple[str, str], dict[int, float]]:
        """``arm → seed → gap``: each FP32-trained arm's outcome minus the FP32 reference's on the same seed
        (``DoseResponse.gaps``: seeds where both have the outcome); the reference itself is left out."""
        arms = self.arms(runs, meta)
        ref = arms.get((REFERENCE, "none"), {})
        d = DR.DoseResponse()
        return {arm: d.gaps(by_seed, ref) for arm, by_seed in arms.items() if arm[0] != REFERENCE}

    def gap_matrix(self, runs, meta, points=None) -> tuple[list[str], list[int], np.ndarray]:
        """(points, seeds, gaps): the paired gaps (seeds × points, NaN where a run is missing) of the points that
        are stored (``points``: the rule's ``POINTS`` in their order), on the seeds with an FP32 run."""
        arms = self.arms(runs, meta)
        ref = arms.get((REFERENCE, "none"), {})
        gaps = self.arm_gaps(runs, meta)
        pts = [p for p in (points or self.rule_points) if (p, "none") in arms]
        seeds = sorted(s for s, rows in ref.items() if DR.final_judge(rows) is not None)
        g = np.array([[gaps[(p, "none")].get(s, np.nan) for p in pts] for s in seeds]).reshape(len(seeds), len(pts))
        return pts, seeds, g

    def dose_matrix(self, runs, meta, unit: str = PRIMARY) -> np.ndarray:
        """Each seed's step-0 dose in ``unit`` (seeds × points of ``gap_matrix``, NaN where a run is missing)."""
        pts, seeds, _ = self.gap_matrix(runs, meta)
        arms = self.arms(runs, meta)

        def dose(p, s):
            rows = arms.get((p, "none"), {}).get(s)
            d = step0_dose(rows, unit) if rows is not None else None
            return np.nan if d is None else d

        return np.array([[dose(p, s) for p in pts] for s in seeds], float).reshape(len(seeds), len(pts))

    def thresholds(self, runs, meta, as_committed: bool = False) -> dict[str, threshold.Threshold | str]:
        """``unit → Threshold`` at the stored seeds, or the reason there is none: as amended (``AMENDMENTS``: each
        seed's doses resampled with its gaps), or ``as_committed`` (the doses fixed at their means over seeds)."""
        pts, _, g = self.gap_matrix(runs, meta)
        out: dict = {}
        for unit in UNITS:
            doses = self.doses(runs, meta, unit)
            d = [doses.get((p, "none")) for p in pts]
            if len(pts) < 2 or any(x is None or not x > 0 or not math.isfinite(x) for x in d):
                out[unit] = f"not estimable: doses {dict(zip(pts, d, strict=True))}"
                continue
            per_seed = self.dose_matrix(runs, meta, unit)
            try:
                out[unit] = threshold.estimate(
                    g,
                    d if as_committed else np.where(np.isfinite(g), per_seed, np.nan),
                    harm=HARM,
                    n_boot=N_BOOT,
                    seed=BOOT_SEED,
                    points=None if as_committed else d,
                )
            except ValueError as e:
                out[unit] = f"not estimable: {e}"
        return out

    def store_record(self, root: Path = results.RESULTS) -> dict:
        """What ``THRESHOLDS`` holds, computed from the stored study under ``root`` (``nbkit.offline.risk`` reads it)."""
        card = self.card(root)
        runs, meta = self.load(root), self.meta(card["configs"]["runs"])
        return {**self.record(runs, meta), "commit": card.get("commit")}

    def record(self, runs, meta) -> dict:
        """The thresholds of ``runs`` in the shape ``nbkit.offline.risk`` reads (unit, tasks, units, measured_on)."""
        pts, seeds, g = self.gap_matrix(runs, meta)
        est = self.thresholds(runs, meta)
        committed = self.thresholds(runs, meta, as_committed=True)
        doses = self.doses(runs, meta, PRIMARY)
        arms = self.arms(runs, meta)
        lengths = [
            r["completions/mean_length"]
            for by_seed in arms.values()
            for rows in by_seed.values()
            for r in rows
            if r.get(schema.STEP) == 1 and "completions/mean_length" in r
        ]
        order = sorted(range(len(pts)), key=lambda j: doses.get((pts[j], "none"), math.inf))  # the fit's dose order
        cis = [_mean_ci([x for x in g[:, j] if x == x]) for j in order]
        main = est[PRIMARY]
        task = {
            "doses": [doses.get((pts[j], "none")) for j in order],
            **_with_committed(main, committed[PRIMARY]),
            "mean_gaps": [m for m, _, _ in cis],
            "gap_ci": [[lo, hi] if lo is not None and lo == lo else None for _, lo, hi in cis],
            "seeds": seeds,
            "points": {p: doses[(p, "none")] for p in pts},
            "placed": {
                f if c == "none" else f"{f} + {c}": d
                for (f, c), d in doses.items()
                if f != REFERENCE and not (f in pts and c == "none")
            },
            "response_length": statistics.fmean(lengths) if lengths else None,
            "study": self.name,
            "measured_on": self.measured_on,
        }
        return {
            "unit": PRIMARY,
            "unit_note": "the study's primary unit, pre-registered; its transfer to a second task is not yet tested",
            "measured_on": self.measured_on,
            "tasks": {self.task: task},
            "units": {u: {self.task: _with_committed(t, committed[u])} for u, t in est.items()},
        }

    amendments = AMENDMENTS
    """This study's ``AMENDMENTS`` (a subclass names its own)."""

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """``amendment key → the readings and verdicts it moved`` ("what: before → after"), from ``runs``."""
        out: dict[str, list[str]] = {a["key"]: [] for a in self.amendments}
        est, committed = self.thresholds(runs, meta), self.thresholds(runs, meta, as_committed=True)
        for u, t in est.items():
            c = committed[u]
            if isinstance(t, threshold.Threshold) and isinstance(c, threshold.Threshold) and t.ci != c.ci:
                out.setdefault("threshold_ci", []).append(f"{UNITS[u]} {self.task} CI: {_ci(c.ci)} → {_ci(t.ci)}")
        gaps = self.arm_gaps(runs, meta)
        rows, broke = self.mechanism(runs, meta)
        for (f, c), by_seed in sorted(gaps.items()):
            xs, name = list(by_seed.values()), f if c == "none" else f"{f} + {c}"
            if len(xs) < 2:
                continue
            m, lo, hi = mean_ci(xs)
            _, blo, bhi = bounded_mean_ci(xs)
            if (
                (blo > 0) != (lo > 0)
                or (bhi < 0) != (hi < 0)
                or (bhi < HARM) != (hi < HARM)
                or (blo > HARM) != (lo > HARM)
            ):
                out.setdefault("gap_ci", []).append(f"{name} gap CI: bounded {_ci((blo, bhi))} → t {_ci((lo, hi))}")
            if (m <= HARM) != (name in broke):
                out.setdefault("gap_ci", []).append(
                    f"{name}: {'broke' if m <= HARM else 'did not break'} → {'broke' if name in broke else 'did not break'}"
                )
        text = growth.paragraph(rows, broke)
        for arm in dict.fromkeys(r["arm"] for r in rows):
            if f"{arm} (" in text.split("No claim for ", 1)[-1] and "No claim for " in text:
                out.setdefault("growth_rule", []).append(f"{arm}: a claim by the entropy split → no claim")
        return out

    def record_amendments(self, root: Path = results.RESULTS) -> None:
        """Put ``amendments`` on the stored card with the readings and verdicts each moved (``moves``)."""
        from nbkit.studies import amendments as A

        card = self.card(root)
        moved = self.moves(self.load(root), self.meta(card["configs"]["runs"]))
        for a in self.amendments:
            A.amend(self.name, A.Amendment(a["what"], a["commit"], a["time"], a["why"], moved.get(a["key"], [])), root)

    def store(self, *, wall_seconds: float, command: str, root: Path = results.RESULTS, **kw) -> Path:
        """``GridStudy.store``, then (when ``thresholds_ready``) ``THRESHOLDS`` (beside the study, under ``root``) from
        what is now stored: this study's task replaces its own entry, another task's entry stays
        (``merge_thresholds``)."""
        out = super().store(wall_seconds=wall_seconds, command=command, root=root, **kw)
        if not self.thresholds_ready(root, kw):
            return out
        self.record_amendments(root)
        path = Path(root) / THRESHOLDS.relative_to(results.RESULTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        old = json.loads(path.read_text()) if path.is_file() else None
        outputs.write_json(path, self.thresholds_record(old, root))
        return out

    def thresholds_record(self, old: dict | None, root: Path = results.RESULTS) -> dict:
        """What ``store`` writes to ``THRESHOLDS`` over ``old`` (what it held): this study's thresholds merged in
        (``merge_thresholds``)."""
        return merge_thresholds(old, self.store_record(root))

    def thresholds_ready(self, root: Path, options: dict) -> bool:
        """Whether ``store`` writes ``THRESHOLDS`` from what is now stored under ``root`` (always, here; a study
        stored over sittings waits for its last)."""
        return True

    def mechanism(self, runs, meta) -> tuple[list[dict], set[str]]:
        """(``growth.table`` rows of every arm but FP32 between ``EARLY`` and ``LATE``, the arms that broke: the 95 %
        t-interval of the paired gap to FP32 wholly below the harm line; as amended, ``AMENDMENTS``: the rule first
        read the mean gap at or below it)."""
        gaps = self.arm_gaps(runs, meta)
        named, broke = {}, set()
        for (f, c), by_seed in self.arms(runs, meta).items():
            if f == REFERENCE:
                continue
            name = f if c == "none" else f"{f} + {c}"
            named[name] = [by_seed[s] for s in sorted(by_seed)]
            _, _, hi = _mean_ci(list(gaps[(f, c)].values()))
            if hi is not None and hi == hi and hi < HARM:
                broke.add(name)
        return growth.table(named, EARLY, LATE), broke

    # -- the page ---------------------------------------------------------------------------------------------
    def figure(self, runs, meta):
        """The gap against the step-0 dose: mean paired gaps with CIs, the isotonic fit, the threshold and its CI,
        the harm line, and the formats placed on the axis (``nbkit.plots.doctor.gap_dose_figure``)."""
        from nbkit.plots.doctor import gap_dose_figure

        return gap_dose_figure(self.record(runs, meta), title=f"{self.title} ({self.task}, step-0 dose)")

    def table(self, runs, meta) -> list[dict]:
        pts, seeds, g = self.gap_matrix(runs, meta)
        fit = self.thresholds(runs, meta).get(PRIMARY)
        doses = {u: self.doses(runs, meta, u) for u in UNITS}
        fitted = {}
        if isinstance(fit, threshold.Threshold):  # the fit is in ascending dose; the table in the rule's order
            by_dose = dict(zip(fit.doses, fit.fitted, strict=True))
            fitted = {p: by_dose.get(doses[PRIMARY].get((p, "none"))) for p in pts}
        rows = []
        for j, p in enumerate(pts):
            xs = [x for x in g[:, j] if x == x]
            m, lo, hi = _mean_ci(xs)
            row = {"rollout": p, "seeds": len(xs)}
            row.update({f"dose: {u}": doses[u].get((p, "none")) for u in UNITS})
            row.update({"gap to fp32": m, "gap CI": [lo, hi] if lo is not None and lo == lo else None})
            row["isotonic fit"] = fitted.get(p)
            rows.append(row)
        return rows

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        est, committed = self.thresholds(runs, meta), self.thresholds(runs, meta, as_committed=True)
        thr = [
            {
                "unit": u,
                "outcome": t.outcome if isinstance(t, threshold.Threshold) else t,
                "threshold": t.dose if isinstance(t, threshold.Threshold) else None,
                "95 % CI (amended: doses and gaps resampled)": list(t.ci)
                if isinstance(t, threshold.Threshold)
                else None,
                "95 % CI as first committed (doses fixed)": list(committed[u].ci)
                if isinstance(committed[u], threshold.Threshold)
                else None,
                "bracket": list(t.bracket) if isinstance(t, threshold.Threshold) else None,
            }
            for u, t in est.items()
        ]
        pts = set(self.gap_matrix(runs, meta)[0])
        doses = self.doses(runs, meta)
        placed = [
            {
                "rollout": f if c == "none" else f"{f} + {c}",
                "seeds": len(gaps),
                f"dose: {PRIMARY}": doses.get((f, c)),
                "gap to fp32 (direction only)": statistics.fmean(gaps.values()) if gaps else None,
            }
            for (f, c), gaps in self.arm_gaps(runs, meta).items()
            if not (f in pts and c == "none")
        ]
        mech, _ = self.mechanism(runs, meta)
        return [
            ("Thresholds per dose unit (primary first)", thr),
            ("Placed on the axis, not fitted", placed),
            (
                f"Why the mismatch grew: shift-share split of the sequence mismatch, steps {EARLY.start}–{EARLY.stop - 1}"
                f" against {LATE.start}–{LATE.stop - 1} (CI: bootstrap over runs)",
                mech,
            ),
        ]

    def findings(self, runs, meta, rows) -> list[str]:
        est, committed = self.thresholds(runs, meta), self.thresholds(runs, meta, as_committed=True)
        out = []

        def first(u):  # the reading as first committed, beside the amended one
            c = committed[u]
            return (
                f"; as first committed, doses fixed at their means: {c.describe()}"
                if isinstance(c, threshold.Threshold)
                else ""
            )

        main = est.get(PRIMARY)
        if isinstance(main, threshold.Threshold):
            out.append(
                f"Harm threshold in {UNITS[PRIMARY]} at step 0 (the rule's answer, CI as amended: each drawn seed's "
                f"doses resampled with its gaps): {main.describe()}{first(PRIMARY)}."
            )
        for u, t in est.items():
            if u != PRIMARY and isinstance(t, threshold.Threshold):
                out.append(f"In {UNITS[u]}: {t.describe()} (secondary unit){first(u)}.")
        mech, broke = self.mechanism(runs, meta)
        if mech:
            out.append(growth.paragraph(mech, broke))
        short = sorted({r["seeds"] for r in rows} - {len(self.rule_seeds)})
        if short and rows:
            out.append(
                f"The rule planned {len(self.rule_seeds)} seeds per dose; doses here have {short}: the study stopped short of "
                "its plan."
            )
        return out

    def plan(self) -> list[str]:
        n = len(SEEDS) * (1 + len(POINTS)) + len(EXTRA_SEEDS) * len(EXTRAS)
        return [
            self.rule_line(),
            f"Planned runs: {n} ({len(SEEDS)} seeds × FP32 and {len(POINTS)} doses; {len(EXTRAS)} formats placed on "
            f"the axis × {len(EXTRA_SEEDS)} seeds).",
        ]


def merge_thresholds(old: dict | None, new: dict) -> dict:
    """``THRESHOLDS`` after a study stores: ``new``'s tasks replace their own entries (in ``tasks`` and in every
    unit of ``units``), every other task's entries in ``old`` stay; ``measured_on`` joins the tasks' own (each task
    entry says what it was measured on). ValueError when the two name different primary units (their thresholds
    would not compare)."""
    if not old:
        return new
    if old.get("unit") != new["unit"]:
        raise ValueError(f"the stored thresholds are in unit {old.get('unit')!r}, the new ones in {new['unit']!r}")
    tasks = {**old.get("tasks", {}), **new["tasks"]}
    units = {
        u: {**old.get("units", {}).get(u, {}), **new.get("units", {}).get(u, {})}
        for u in dict.fromkeys([*old.get("units", {}), *new.get("units", {})])
    }
    said = dict.fromkeys(t.get("measured_on") or new["measured_on"] for t in tasks.values())
    out = {**new, "measured_on": "; ".join(said), "tasks": tasks, "units": units}
    if len(tasks) > 1:
        out["unit_note"] = (
            f"the primary unit pre-registered on {TASK}; whether a unit's thresholds agree across "
            f"{', '.join(tasks)} is read from `units` (nbkit.studies.harm_transfer.agreement)"
        )
    return out


def _mean_ci(xs: list[float]) -> tuple[float | None, float | None, float | None]:
    """Mean gap and its 95 % t-interval over seeds (NaN bounds with one seed; as amended, ``AMENDMENTS``: the
    interval first shown was bounded in (−1, 1), which the verdicts never read); (None, None, None) with no gap."""
    return mean_ci(xs) if xs else (None, None, None)


def _ci(ci) -> str:
    return "–".join("censored" if v is None else f"{v:.3g}" for v in ci)


def _with_committed(t, committed) -> dict:
    """A threshold's record with the CI as first committed (doses fixed) beside the amended one."""
    if not isinstance(t, threshold.Threshold):
        return {"outcome": "none", "why": t}
    out = t.to_json()
    if isinstance(committed, threshold.Threshold):
        out["ci_as_committed"] = list(committed.ci)
    return out


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
