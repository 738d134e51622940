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
finished runs and writes ``THRESHOLDS`` from them.

The study as data (the constants named above, ``RULE_TEXT``, ``AMENDMENTS``, ``pick_points`` and the offline ladder)
is ``nbkit.studies.harm_threshold_rule``; its page (figure, tables, sentences) is
``nbkit.studies.harm_threshold_findings``.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from pathlib import Path

import numpy as np

from nbkit import results
from nbkit.records import schema
from nbkit.runtime import outputs
from nbkit.stats import threshold
from nbkit.stats.stats import bounded_mean_ci, mean_ci
from nbkit.studies import dose_response as DR
from nbkit.studies import growth, prereg, prose
from nbkit.studies.base import add_run, group_seeds
from nbkit.studies.harm_threshold_findings import Page, mean_gap_ci
from nbkit.studies.harm_threshold_rule import (  # the study as data (read through this module too)
    AMENDMENTS,
    BOOT_SEED,
    EARLY,
    EXTRA_SEEDS,
    EXTRAS,
    HARM,
    LATE,
    N_BOOT,
    POINTS,
    PRIMARY,
    REFERENCE,
    RULE_RECORD,
    RULE_TEXT,
    SEEDS,
    STUDY,
    TASK,
    THRESHOLDS,
    UNITS,
    step0_dose,
)


class HarmThreshold(Page, prereg.PreRegistered):
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
    extras = EXTRAS
    """The rule's ``(rollout format, correction)`` placed on the axis, not fitted."""
    extra_seeds = EXTRA_SEEDS
    """The seeds of ``extras``."""
    steps = 50
    """Optimiser steps per run."""
    measured_on = "tiny-arith (a 4-layer, ~1 M-parameter model), 50 GRPO steps, FP32 trainer, HF engine"
    """What the task's thresholds were measured on (``measured_on`` in ``THRESHOLDS``)."""
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
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {
            "points": list(self.rule_points),
            "seeds": list(self.rule_seeds),
            "extras": [list(e) for e in self.extras],
            "extra_seeds": list(self.extra_seeds),
            "steps": self.steps,
        }

    # -- write half -------------------------------------------------------------------------------------------
    def grid(
        self,
        points=None,
        seeds=None,
        extras=None,
        extra_seeds=None,
        steps: int | None = None,
        output_dir: str | None = None,
        overrides: dict | None = None,
    ) -> dict:
        """``label → RLConfig``: FP32 and every point seed by seed, then the extras; an option left None is the
        rule's (``defaults``)."""
        from nbkit.precision import formats as F

        d = self.defaults()
        points = d["points"] if points is None else points
        seeds = d["seeds"] if seeds is None else seeds
        steps = d["steps"] if steps is None else steps
        extras = d["extras"] if extras is None else extras
        extra_seeds = d["extra_seeds"] if extra_seeds is None else extra_seeds
        from nbkit.rl.algorithms import CORRECTIONS as KNOWN

        points = [F.validate(p) for p in points]
        extras = [(F.validate(f), c) for f, c in extras]
        bad = [c for _, c in extras if c is not None and c not in KNOWN]
        if bad:
            raise ValueError(f"unknown correction(s) {bad}; choose from {list(KNOWN)}")
        base = self.base_config(max_steps=steps, output_dir=output_dir or self.output_dir, **(overrides or {}))
        grid = {}
        add = functools.partial(add_run, grid, base)

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

    coords = DR.DoseResponse.coords

    # -- the analysis (the rule's) -------------------------------------------------------------------------------
    def arms(self, runs, meta) -> dict[tuple[str, str], dict[int, list[dict]]]:
        """``(format, correction) → seed → rows`` of the FP32-trained runs."""
        return group_seeds(runs, meta, lambda m: (m["format"], m["correction"]) if m["train"] == "fp32" else None)

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
        """What ``THRESHOLDS`` holds, computed from the stored study under ``root``."""
        card = self.card(root)
        runs, meta = self.load(root), self.meta(card["configs"]["runs"])
        return {**self.record(runs, meta), "commit": card.get("commit")}

    def record(self, runs, meta) -> dict:
        """The thresholds of ``runs`` in ``THRESHOLDS``' shape (unit, tasks, units, measured_on)."""
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
        cis = [mean_gap_ci([x for x in g[:, j] if x == x]) for j in order]
        main = est[PRIMARY]
        task = {
            "doses": [doses.get((pts[j], "none")) for j in order],
            **_with_committed(main, committed[PRIMARY]),
            "mean_gaps": [m for m, _, _ in cis],
            "gap_ci": [[lo, hi] if lo is not None and lo == lo else None for _, lo, hi in cis],
            "seeds": seeds,
            "points": {p: doses[(p, "none")] for p in pts},
            "placed": {
                prose.arm(f, c): d for (f, c), d in doses.items() if f != REFERENCE and not (f in pts and c == "none")
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
            xs, name = list(by_seed.values()), prose.arm(f, c)
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
            name = prose.arm(f, c)
            named[name] = [by_seed[s] for s in sorted(by_seed)]
            _, _, hi = mean_gap_ci(list(gaps[(f, c)].values()))
            if hi is not None and hi == hi and hi < HARM:
                broke.add(name)
        return growth.table(named, EARLY, LATE), broke


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
