"""Does the harm threshold transfer? The harm-threshold study again on tiny-long, at answers ~6× tiny-arith's.

``nbkit.studies.harm_threshold`` measures where harm starts on tiny-arith (31.5-token answers) in four candidate
dose units. A threshold means something for a user's model only in a unit that travels: this study repeats the
measurement on a second task whose answers are ~6× longer (tiny-long, ``REGIME``: chains of ``long_arith`` steps,
~180 tokens) and reads, for each unit, whether the two tasks' thresholds agree. The analysis, record, figure and
mechanism are ``HarmThreshold``'s, unchanged; only the task (model, data, judge set, length, lr) and the doses differ.

The rule (``RULE_TEXT``, committed as ``RULE_RECORD`` says once the pilot had fixed ``LR``):

- **Task.** tiny-long on ``DATASET`` (the regime's perfectible set, notebook 01's recipe on ``TRAIN_POOL`` problems:
  ``tiny_long_regimes.build_set``), ``max_tokens`` = the regime's reference length + 24, judged every 10 steps on
  ``JUDGE_SET`` (the same recipe on a disjoint pool: ``build_judge_set``) by an FP32 engine, 1 sample a problem.
- **lr.** Fixed by ``pilot`` before the rule is committed: FP32 rollouts, seed 0, 50 steps at each of ``PILOT_LRS``;
  an lr *learns* when its judge accuracy at step 50 exceeds step 0's by more than ``PILOT_RISE``; ``LR`` = the
  smallest lr that learns (written into this module with the rule). If none learns, the rule is not committed as it
  stands (another regime or lr range first).
- **Doses.** ``POINTS``: e8m3 (the anchor below e8m2, as on tiny-arith) and ``pick_points(ladder, TARGETS)`` on
  tiny-long's own offline ladder (``LADDER_FILE``, measured before any training at this regime's length and
  prompts): e8m2, the channel points nearest in log dose to the targets log-spaced between, e8m1.
- **Runs, dose, outcome, threshold.** As ``harm_threshold``: FP32 trainer, HF engine, GRPO, 50 steps, FP32 rollouts
  paired on every seed, seeds 0–4 seed by seed, the step-0 mismatch in each of ``harm_threshold.UNITS``, the mean
  held-out judge accuracy of steps 40 and 50, ``nbkit.stats.threshold.estimate`` per unit. No extras (the mechanism
  reads
  the dosed runs themselves). *Amended* (``AMENDMENTS``, after training began, before any outcome was read): the
  extras BF16, FP16 and NVFP4 with μ as π_old on seeds 0–2, placed on the axis and read by the mechanism, not fitted,
  as on tiny-arith.
- **Transfer.** For each unit, tiny-arith's threshold (stored in ``harm_threshold.THRESHOLDS`` by its own study) and
  tiny-long's: ``agreement`` gives the ratio tiny-long / tiny-arith (both crossings only) and whether the 95 % CIs
  overlap (a censored CI end reaches 0 or ∞). A unit *agrees* when both tasks show a crossing and the CIs overlap;
  the units that agree are the transferable doses; if none agrees, the study says so.

    python -m nbkit.studies.harm_transfer pilot --store     # the lr pilot (FP32, 50 steps, PILOT_LRS) -> PILOT_FILE
    python -m nbkit.studies.harm_transfer ladder            # tiny-long's offline ladder -> LADDER_FILE
    python -m nbkit.studies.harm_transfer train-set         # DATASET (the regime's perfectible set, TRAIN_POOL)
    python -m nbkit.studies.harm_transfer judge-set         # JUDGE_SET (the held-out set, disjoint from DATASET)
    python -m nbkit.studies.harm_transfer transfer          # the transfer reading into THRESHOLDS (store does it too)
    nbkit study harm_transfer_tiny_long run | store         # the grid (after the rule is committed)
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from nbkit import results
from nbkit.records import schema
from nbkit.runtime import outputs
from nbkit.stats import threshold
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


def base_config(lr: float | None = None, **overrides):
    """One run of the study before its rollout format and seed are set (``overrides`` replace any field); refuses
    to build before the pilot has fixed ``LR`` unless ``lr`` is given."""
    from nbkit.rl.config import config_from

    lr = LR if lr is None else lr
    if lr is None:
        raise ValueError(
            "harm_transfer.LR is not fixed yet: run `python -m nbkit.studies.harm_transfer pilot` and commit the "
            "rule with its lr, or pass lr= (overrides: {'lr': ...})"
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
            "steps": STEPS,
            "prompts_per_step": PROMPTS,
            "samples_per_prompt": SAMPLES,
            "max_tokens": TL.max_tokens(REGIME),
            "lr": lr,
            "judge_every": 10,
            "judge_set": JUDGE_SET,
            "judge_samples": 1,
            "output_dir": f"runs/{STUDY}",
            "checkpoint_every": 0,
            **overrides,
        }
    )


def kw_options(kw: dict) -> dict:
    """The grid options among ``store``'s keyword arguments (``keep_stored`` and ``replace`` are not options)."""
    return {k: v for k, v in kw.items() if k not in ("keep_stored", "replace")}


def _interval(t: dict) -> tuple[float, float] | None:
    """Where a task's threshold lies (stored ``Threshold.to_json``): the CI of a crossing (a censored end reaches 0
    or ∞), below or above the measured doses for a threshold outside them, None when none was estimable."""
    out = t.get("outcome")
    if out == "crossing":
        # the rule as first committed read the CI with the doses fixed (``ci_as_committed`` once amended)
        lo, hi = t.get("ci_as_committed") or t.get("ci") or (None, None)  # stored without a CI: 0 and ∞
        return (0.0 if lo is None else lo, math.inf if hi is None else hi)
    if out == "below_range":
        return (0.0, t["doses"][0])
    if out == "above_range":
        return (t["doses"][-1], math.inf)
    return None


def agreement(units: dict[str, dict[str, dict]], first: str = REFERENCE_TASK, second: str = TASK) -> list[dict]:
    """The transfer table of the rule: per unit (``units``: unit → task → stored threshold, as
    ``harm_threshold.THRESHOLDS`` holds them) the two tasks' thresholds and CIs, the ratio ``second``/``first`` (both
    crossings), whether the intervals overlap, and whether the unit *agrees* (both crossings and overlapping CIs)."""
    rows = []
    for unit in H.UNITS:
        a, b = units.get(unit, {}).get(first), units.get(unit, {}).get(second)
        ia, ib = (_interval(a) if a else None), (_interval(b) if b else None)
        both = bool(a and b and a.get("outcome") == b.get("outcome") == "crossing")
        overlap = None if ia is None or ib is None else max(ia[0], ib[0]) <= min(ia[1], ib[1])
        rows.append(
            {
                "unit": unit,
                f"{first}: outcome": a.get("outcome") if a else "not stored",
                f"{first}: threshold": a.get("dose") if a else None,
                f"{first}: CI": list(ia) if ia else None,
                f"{second}: outcome": b.get("outcome") if b else "not stored",
                f"{second}: threshold": b.get("dose") if b else None,
                f"{second}: CI": list(ib) if ib else None,
                f"ratio {second}/{first}": b["dose"] / a["dose"] if both else None,
                "CIs overlap": overlap,
                "agrees": both and bool(overlap),
            }
        )
    return rows


def verdict(rows: list[dict], first: str = REFERENCE_TASK, second: str = TASK) -> str:
    """The rule's sentence from ``agreement``'s rows: the units that agree with their ratios, or that none does."""
    key = f"ratio {second}/{first}"
    agree = [r for r in rows if r["agrees"]]
    if not agree:
        said = "; ".join(
            f"{r['unit']}: {first} {r[f'{first}: outcome']}, {second} {r[f'{second}: outcome']}"
            + ("" if r["CIs overlap"] is None else f", CIs {'overlap' if r['CIs overlap'] else 'do not overlap'}")
            for r in rows
        )
        return f"No unit's thresholds agree between {first} and {second} ({said}): no dose unit transfers here."
    named = ", ".join(f"{H.UNITS[r['unit']]} (ratio {r[key]:.3g})" for r in agree)
    return (
        f"The transferable dose (thresholds on {first} and {second} agree, 95 % CIs overlap): {named}; ratio "
        f"{second}/{first} beside each."
    )


def band_verdict(joint: dict[str, dict], first: str = REFERENCE_TASK, second: str = TASK) -> str:
    """The amended rule's sentence (``TRANSFER_RULE``) from each unit's joint bootstrap (unit → ``Transfer.to_json``):
    the units that transfer with their ratios and CIs, or that none does, with every unit's reading."""
    said = "; ".join(
        f"{H.UNITS[u]}: {j['verdict']} (ratio "
        + ("none: a task has no crossing" if j["ratio"] is None else f"{j['ratio']:.3g}")
        + f", 95 % CI {j['ci'][0]:.3g}–{j['ci'][1]:.3g})"
        for u, j in joint.items()
    )
    lo, hi = next(iter(joint.values()))["band"] if joint else BAND
    yes = [u for u, j in joint.items() if j["verdict"] == threshold.TRANSFERS]
    head = (
        f"Transfer by the amended rule (joint bootstrap of both tasks' seeds, the ratio {second}/{first}'s 95 % CI "
        f"read against the band [{lo:g}, {hi:g}]): "
    )
    if yes:
        return head + f"the dose that transfers: {', '.join(H.UNITS[u] for u in yes)}. Per unit: {said}."
    return head + f"no unit is shown to transfer. Per unit: {said}."


def overlap_note(
    units: dict[str, dict[str, dict]],
    lengths: tuple[float | None, float | None] = (None, None),
    first: str = REFERENCE_TASK,
    second: str = TASK,
) -> str | None:
    """What an agreement by overlap can and cannot say, from the numbers (beside the rule: ``AMENDMENTS``' second
    entry): the range of the agreeing units' ratios, how wide each task's 95 % CI is (its upper end over its lower
    end), and the two tasks' mean response ``lengths`` (``first``'s, ``second``'s). None when no unit agrees."""
    rows = [r for r in agreement(units, first, second) if r["agrees"]]
    if not rows:
        return None
    key = f"ratio {second}/{first}"
    lo, hi = min(rows, key=lambda r: r[key]), max(rows, key=lambda r: r[key])
    widths = [
        c[1] / c[0] for r in rows for c in (r[f"{first}: CI"], r[f"{second}: CI"]) if 0 < c[0] and math.isfinite(c[1])
    ]
    said = (
        f"Beside the rule (an amendment after the reading; no verdict moved): among the units that agree, the ratio "
        f"{second}/{first} runs from {lo[key]:.3g} ({H.UNITS[lo['unit']]}) to {hi[key]:.3g} ({H.UNITS[hi['unit']]})"
        + (", on both sides of 1" if lo[key] < 1 < hi[key] else "")
    )
    if widths:
        said += f", and their 95 % CIs span {min(widths):.2g}× to {max(widths):.2g}× (upper end over lower end)"
    said += (
        ": at this width, overlapping CIs say the two tasks' thresholds cannot be told apart with these seeds, not "
        "that they are equal."
    )
    if all(lengths):
        said += (
            f" {second}'s responses are {lengths[1] / lengths[0]:.2g}× {first}'s ({lengths[1]:.3g} against "
            f"{lengths[0]:.3g} tokens): a unit that grows with length moves by about that factor between the tasks."
        )
    return said


def transfer_record(
    units: dict[str, dict[str, dict]],
    first: str = REFERENCE_TASK,
    second: str = TASK,
    joint: dict[str, dict] | None = None,
) -> dict:
    """The rule's transfer reading as ``THRESHOLDS`` keeps it for ``nbkit.offline.risk``: the two tasks, the verdict
    and per unit whether it agrees, the ratio ``second``/``first`` and whether the CIs overlap (``agreement``: the
    rule as first committed); with ``joint`` (unit → ``Transfer.to_json``) the amended rule's reading too: the
    verdict by the band, and per unit its ``reading``, ratio CI and band (``agrees_as_committed`` keeps the first)."""
    rows = agreement(units, first, second)
    out = {
        "tasks": [first, second],
        "study": STUDY,
        "verdict": verdict(rows, first, second),
        "units": {
            r["unit"]: {"agrees": r["agrees"], "ratio": r[f"ratio {second}/{first}"], "cis_overlap": r["CIs overlap"]}
            for r in rows
        },
    }
    if joint:
        out["verdict_as_committed"] = out["verdict"]
        out["verdict"] = band_verdict(joint, first, second)
        out["band"] = list(BAND)
        for u, j in joint.items():
            r = out["units"].setdefault(u, {})
            r.update(
                {
                    "agrees_as_committed": r.get("agrees"),
                    "agrees": j["verdict"] == threshold.TRANSFERS,
                    "reading": j["verdict"],
                    "joint_ratio": j["ratio"],
                    "ratio_ci": j["ci"],
                }
            )
    return out


def with_transfer(thresholds: dict, joint: dict[str, dict] | None = None) -> dict:
    """``thresholds`` (as ``THRESHOLDS`` holds them) with the rule's transfer reading (``transfer_record``, the
    amended one from ``joint``) when both tasks' are in them; unchanged otherwise."""
    if not {REFERENCE_TASK, TASK} <= set(thresholds.get("tasks", {})):
        return thresholds
    return {
        **thresholds,
        "unit_note": f"the primary unit, pre-registered on {REFERENCE_TASK}",
        "transfer": transfer_record(thresholds.get("units", {}), joint=joint),
    }


def store_transfer(root: Path = results.RESULTS) -> Path | None:
    """Add the transfer reading to the thresholds stored under ``root`` (``with_transfer``; ``HarmTransfer.store``
    writes it with them once every run of the rule is stored). None when no thresholds or not both tasks' are
    stored."""
    path = Path(root) / H.THRESHOLDS.relative_to(results.RESULTS)
    study = HarmTransfer()
    runs = study.load(root)
    joint = study.joint(runs, study.meta(study.card(root)["configs"]["runs"]), root) if runs else None
    read = with_transfer(_read(path), joint)
    return outputs.write_json(path, read) if "transfer" in read else None


class HarmTransfer(H.HarmThreshold):
    """``HarmThreshold`` on tiny-long at ``REGIME``. Options: ``points``, ``seeds``, ``extras``, ``extra_seeds``,
    ``steps``, ``output_dir``, ``overrides`` (any ``RLConfig`` field, ``lr`` among them)."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    task = TASK
    rule_points = POINTS
    rule_seeds = SEEDS
    measured_on = (
        f"tiny-long (a ~1 M-parameter model) at ~{TL.max_tokens(REGIME) - TL.TOKEN_MARGIN}-token answers, 50 GRPO "
        "steps, FP32 trainer, HF engine"
    )
    title = "Does the harm threshold transfer? tiny-long at 6× tiny-arith's answer length"
    question = (
        "Is the harm threshold measured on tiny-arith the same on tiny-long at answers ~6× longer, in some dose unit? "
        f"{len(POINTS)} doses from e8m3 to e8m1 (picked from tiny-long's own offline ladder), 5 seeds each, FP32 "
        "paired by seed; for each candidate unit the thresholds of the two tasks, their ratio, and whether their "
        "CIs overlap. Rule fixed in nbkit.studies.harm_transfer before any of its runs trained."
    )
    statistic = (
        "as harm_threshold_tiny_arith (judge: the held-out set of the regime, 1 sample a problem, FP32 engine; "
        "outcome: mean of the judgments at steps 40 and 50); transfer: the threshold ratio tiny-long/tiny-arith "
        "and the overlap of the 95 % bootstrap CIs per unit."
    )
    output_dir = f"runs/{STUDY}"
    toy = {
        "points": ["e8m2", "dial-e8m1-c1of16"],
        "seeds": [0],
        "steps": 1,
        "overrides": {"lr": 1e-4, "prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {
            "points": list(POINTS),
            "seeds": list(SEEDS),
            "extras": [list(e) for e in EXTRAS],
            "extra_seeds": list(EXTRA_SEEDS),
            "steps": STEPS,
        }

    def grid(
        self,
        points=POINTS,
        seeds=SEEDS,
        extras=EXTRAS,
        extra_seeds=EXTRA_SEEDS,
        steps: int = STEPS,
        output_dir: str | None = None,
        overrides: dict | None = None,
    ) -> dict:
        return super().grid(points, seeds, extras, extra_seeds, steps, output_dir, overrides)

    def base_config(self, **overrides):
        return base_config(**overrides)

    # -- sittings: blind until the last one ---------------------------------------------------------------------
    def missing(self, runs, options: dict | None = None) -> list[str]:
        """The runs of the grid at ``options`` that ``runs`` lacks, in grid order. ``options`` None: the stored
        study's grid when ``runs`` are its runs (``sitting``); other runs (a toy grid, a live slice) are not a sitting
        of the rule, and nothing is missing from them."""
        options = self.sitting(runs) if options is None else options
        return [] if options is None else [label for label in self.grid(**options) if label not in runs]

    def sitting(self, runs) -> dict | None:
        """The stored study's grid options when ``runs`` are exactly its stored runs, else None."""
        if not (results.study_dir(self.name) / results.CARD).is_file():
            return None
        card = self.card()
        return self.grid_options(card) if set(runs) == set(card.get("runs") or []) else None

    def progress(self, runs, options: dict | None = None) -> list[dict]:
        """Per arm of the grid (rollout format and correction), the runs stored of those planned and their seeds:
        all a page shows before the last sitting."""
        planned: dict[str, list[str]] = {}
        for label in self.grid(**(options if options is not None else self.sitting(runs) or {})):
            arm, seed = label.rsplit("-s", 1)
            planned.setdefault(arm, []).append(seed)
        rows = []
        for arm, seeds in planned.items():
            stored = [s for s in seeds if f"{arm}-s{s}" in runs]
            rows.append(
                {
                    "rollout": arm.removesuffix("-none").replace("-mu_old", " + mu_old"),
                    "runs stored": f"{len(stored)} of {len(seeds)}",
                    "seeds stored": ", ".join(stored) or "none",
                }
            )
        return rows

    def table(self, runs, meta) -> list[dict]:
        return self.progress(runs) if self.missing(runs) else super().table(runs, meta)

    def store(self, *, wall_seconds: float, command: str, root: Path = results.RESULTS, **kw) -> Path:
        """``HarmThreshold.store`` with ``AMENDMENTS`` put on the card."""
        path = super().store(wall_seconds=wall_seconds, command=command, root=root, **kw)
        self.record_amendments(root)
        return path

    amendments = tuple({**a, "key": a.get("key", f"first-{i}")} for i, a in enumerate(AMENDMENTS)) + SOUND_AMENDMENTS

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """``HarmThreshold.moves`` with the transfer rule's (each unit's reading as first committed → amended) and
        the first amendments' own (stated by hand: none moved a verdict)."""
        out = super().moves(runs, meta)
        for i, a in enumerate(AMENDMENTS):
            out[f"first-{i}"] = list(a["verdicts_moved"])
        if self.missing(runs):
            return out
        rows, joint = {r["unit"]: r for r in self.transfer(runs, meta)}, self.joint(runs, meta)
        for u, j in joint.items():
            before = "agrees" if rows[u]["agrees"] else "does not agree"
            out.setdefault("transfer", []).append(f"{H.UNITS[u]}: {before} → {j['verdict']}")
        return out

    def thresholds_record(self, old: dict | None, root: Path = results.RESULTS) -> dict:
        """``HarmThreshold``'s, with the rule's transfer reading (``with_transfer``, amended by the joint bootstrap:
        the doctor says whether its unit transfers); written once every run of the rule is stored
        (``thresholds_ready``)."""
        runs = self.load(root)
        return with_transfer(
            super().thresholds_record(old, root), self.joint(runs, self.meta(self.card(root)["configs"]["runs"]), root)
        )

    def joint(self, runs, meta, root: Path = results.RESULTS) -> dict[str, dict]:
        """The amended transfer rule's reading per unit (``TRANSFER_RULE``: ``threshold.transfer`` of tiny-arith's
        stored study, under ``root``, and this one's ``runs``: each task's gaps with its seeds' own doses, the band
        ``BAND``, ``H.N_BOOT`` replicates, seed ``H.BOOT_SEED``): unit → ``Transfer.to_json``; {} when tiny-arith's
        study is not stored under ``root``."""
        key = (id(runs), str(root))
        if getattr(self, "_joint", (None,))[0] == key:  # the page asks twice (table and findings)
            return self._joint[1]
        ref = H.HarmThreshold()
        try:
            ref_runs = ref.load(root)
            ref_meta = ref.meta(ref.card(root)["configs"]["runs"])
        except FileNotFoundError:  # tiny-arith's study is not stored here: the rule as first committed alone
            return {}
        out = {}
        for unit in H.UNITS:
            tasks = []
            for study, r, m in ((ref, ref_runs, ref_meta), (self, runs, meta)):
                _, _, g = study.gap_matrix(r, m)
                d = study.dose_matrix(r, m, unit)
                tasks.append((g, np.where(np.isfinite(g), d, np.nan)))
            try:
                t = threshold.transfer(*tasks, band=BAND, harm=H.HARM, n_boot=H.N_BOOT, seed=H.BOOT_SEED)
            except ValueError:
                continue
            out[unit] = t.to_json()
        self._joint = (key, out)
        return out

    def thresholds_ready(self, root: Path, options: dict) -> bool:
        """The tiny-long thresholds join ``THRESHOLDS`` (which the doctor reads) only once every run of the rule is
        stored: an earlier sitting stores its runs and nothing read from them."""
        return not self.missing(self.load(root), kw_options(options))

    # -- the transfer ----------------------------------------------------------------------------------------
    def units(self, runs, meta, stored: Path = H.THRESHOLDS, record: dict | None = None) -> dict[str, dict[str, dict]]:
        """Per unit, the stored thresholds of the other tasks (``stored``: tiny-arith's) and this study's from
        ``runs`` (unit → task → ``Threshold.to_json``); ``record``: ``self.record(runs, meta)`` when already made."""
        units = _read(stored).get("units", {})
        mine = (self.record(runs, meta) if record is None else record)["units"]
        return {u: {**units.get(u, {}), TASK: mine[u][TASK]} for u in H.UNITS}

    def transfer(self, runs, meta, stored: Path = H.THRESHOLDS) -> list[dict]:
        """``agreement`` of tiny-arith's stored thresholds (``stored``) with this study's, computed from ``runs``."""
        return agreement(self.units(runs, meta, stored))

    def figure(self, runs, meta):
        """Per unit, both tasks' isotonic gap-vs-dose fits with their thresholds and CIs
        (``nbkit.plots.transfer.transfer_figure``), each panel titled with the unit's agreement and ratio; None
        before the last sitting."""
        from nbkit.plots.transfer import transfer_figure

        if self.missing(runs):
            return None
        units = self.units(runs, meta)
        return transfer_figure(units, H.UNITS, agreement(units))

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        if self.missing(runs):
            return []
        joint = self.joint(runs, meta)
        table = [
            {
                **{(f"{k} (doses fixed)" if k.endswith(": CI") else k): v for k, v in r.items() if k != "agrees"},
                "agrees (as first committed)": r["agrees"],
                "joint ratio": joint.get(r["unit"], {}).get("ratio"),
                "ratio 95 % CI (joint bootstrap)": joint.get(r["unit"], {}).get("ci"),
                f"reading (amended: band [{BAND[0]:g}, {BAND[1]:g}])": joint.get(r["unit"], {}).get("verdict"),
            }
            for r in self.transfer(runs, meta)
        ]
        return [
            ("Transfer: each unit's thresholds on tiny-arith and tiny-long", table),
            *super().page_tables(runs, meta, rows),
        ]

    def findings(self, runs, meta, rows) -> list[str]:
        missing = self.missing(runs)
        if missing:
            return [
                f"{len(runs)} of the rule's {len(runs) + len(missing)} runs are stored; the rest train in later "
                "sittings. The rule is read once, after the last sitting: until then this page shows which runs "
                "are stored and nothing measured by them (no dose, gap, threshold or transfer)."
            ]
        record = self.record(runs, meta)  # the thresholds' bootstrap, once
        units = self.units(runs, meta, record=record)
        lengths = (
            _read(H.THRESHOLDS).get("tasks", {}).get(REFERENCE_TASK, {}).get("response_length"),
            record["tasks"][TASK].get("response_length"),
        )
        note = overlap_note(units, lengths)
        joint = self.joint(runs, meta)
        return [
            band_verdict(joint),
            "As first committed (a unit agrees when both tasks cross and their 95 % CIs overlap; replaced by the "
            "amendment above, shown beside it): " + verdict(agreement(units)),
            *([note] if note else []),
            *super().findings(runs, meta, rows),
        ]

    def plan(self) -> list[str]:
        lr = f"lr {LR:g}" if LR is not None else "lr not yet fixed (the pilot fixes it)"
        return [
            self.rule_line(),
            f"Planned runs: {len(SEEDS) * (1 + len(POINTS)) + len(EXTRA_SEEDS) * len(EXTRAS)} ({len(SEEDS)} seeds × "
            f"FP32 and {len(POINTS)} doses; {len(EXTRAS)} formats placed on the axis × {len(EXTRA_SEEDS)} seeds, by "
            f"amendment), {lr}.",
        ]


# -- before the rule: the pilot, the ladder, the judge set ----------------------------------------------------
def pilot(
    lrs=PILOT_LRS,
    steps: int = STEPS,
    seed: int = 0,
    output_dir: str = f"runs/{STUDY}_pilot",
    rise: float = PILOT_RISE,
    store: Path | None = None,
    **overrides,
) -> dict:
    """Train FP32/FP32 at each lr for ``steps`` steps (the study's run otherwise) and report per lr the judge
    accuracy at step 0 and at the last step, the rise, whether it learns (rise > ``rise``), the seconds per step and
    per judgment; ``"lr"`` = the smallest lr that learns (None if none does). Written to ``output_dir/pilot.json``;
    finished runs are read back, not re-trained; ``store`` (e.g. ``PILOT_FILE``): a copy of the record there too."""
    from nbkit import rl

    bad = [x for x in lrs if not (isinstance(x, int | float) and x > 0)]
    if bad or not lrs:
        raise ValueError(f"lrs must be positive numbers, got {list(lrs)}")
    out: dict = {"steps": steps, "seed": seed, "rise": rise, "runs": {}}
    for lr in lrs:
        cfg = base_config(
            lr=lr,
            steps=steps,
            seed=seed,
            rollout_format="fp32",
            output_dir=f"{output_dir}/lr{lr:g}",
            **overrides,
        )
        rows = _rows(cfg) if H.HarmThreshold.finished(cfg) else rl.train(replace(cfg, overwrite=True)).rows
        judged = [(r[schema.STEP], r[schema.JUDGE_ACCURACY]) for r in rows if schema.JUDGE_ACCURACY in r]
        first, last = (judged[0][1], judged[-1][1]) if len(judged) >= 2 else (None, None)
        step_s = [r[schema.TIME_STEP] for r in rows if schema.TIME_STEP in r]
        judge_s = [r[schema.TIME_JUDGE] for r in rows if r.get(schema.TIME_JUDGE) and r.get(schema.STEP, 0) > 0]
        out["runs"][f"{lr:g}"] = {
            "lr": lr,
            "judge": judged,
            "rise": None if first is None else last - first,
            "learns": first is not None and last - first > rise,
            "train_accuracy_last": next((r["accuracy"] for r in reversed(rows) if "accuracy" in r), None),
            "seconds_per_step": statistics.fmean(step_s) if step_s else None,
            "seconds_per_judgment": statistics.fmean(judge_s) if judge_s else None,
        }
    learning = sorted(v["lr"] for v in out["runs"].values() if v["learns"])
    out["lr"] = learning[0] if learning else None
    out["machine"] = results.machine()
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    outputs.write_json(Path(output_dir) / "pilot.json", out)
    if store is not None:
        outputs.write_json(Path(store), out)
    return out


def budget(
    seconds_per_step: dict[str, float], seconds_per_judgment: float, jobs: int = 2, seconds_startup: float = 30.0
) -> dict:
    """The grid's wall time from measured costs: ``seconds_per_step`` maps ``"fp32"`` and ``"dial"`` (every dosed
    format and extra: each rounds in software on the HF engine) to seconds per optimiser step; each run has ``STEPS``
    steps, ``STEPS // 10 + 1`` judgments and a start-up; ``jobs`` runs at once (each at the measured speed)."""
    judgments = STEPS // 10 + 1
    per_run = {k: STEPS * v + judgments * seconds_per_judgment + seconds_startup for k, v in seconds_per_step.items()}
    n_ref, n_dose = len(SEEDS), len(SEEDS) * len(POINTS) + len(EXTRA_SEEDS) * len(EXTRAS)
    total = n_ref * per_run["fp32"] + n_dose * per_run["dial"]
    return {
        "runs": n_ref + n_dose,
        "seconds_per_run": per_run,
        "cpu_hours": total / 3600,
        "wall_hours": total / 3600 / jobs,
        "jobs": jobs,
    }


def _read(path: Path) -> dict:
    """A stored JSON file ({} when absent)."""
    return json.loads(Path(path).read_text()) if Path(path).is_file() else {}


def _rows(cfg) -> list[dict]:
    with open(Path(cfg.output_dir) / "metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def measure_ladder(path: Path = LADDER_FILE) -> dict:
    """tiny-long's offline ladder at ``REGIME`` (``harm_threshold.measure_ladder``: its prompts from ``DATASET``, its
    response budget), written to ``path``."""
    return H.measure_ladder(path, model=TL.MODEL, prompt_source=DATASET, max_tokens=TL.max_tokens(REGIME))


def points_from_ladder(ladder: dict[str, float]) -> list[str]:
    """The rule's doses from a ladder: e8m3 and ``pick_points(ladder, TARGETS)``, in ascending ladder dose."""
    return sorted(["e8m3", *H.pick_points(ladder, TARGETS)], key=lambda k: ladder[k])


def judge_task(pool_size: int = JUDGE_POOL, seed: int = JUDGE_SEED, train: str = DATASET):
    """The held-out pool as a task: ``pool_size`` problems of the regime drawn with ``seed`` (as
    ``tiny_long_regimes.build_set`` draws the training pool with seed 0), those of the training set ``train``
    removed (the judge refuses a shared problem: ``nbkit.rl.judge.load_set``)."""
    from nbkit import tasks
    from nbkit.tasks.long_arith import LongArithConfig

    trained = {p["problem"] for p in tasks.make_task(source=train, grader="arith").problems}
    task = tasks.make_task(
        source="long_arith", pool_size=pool_size, seed=seed, long_arith=LongArithConfig.regime(REGIME)
    )
    return replace(task, problems=[p for p in task.problems if p["problem"] not in trained])


def build_judge_set(pool_size: int = JUDGE_POOL, seed: int = JUDGE_SEED, n_samples: int = 16):
    """``JUDGE_SET``: notebook 01's recipe (keep the problems tiny-long in FP32 solves in [0.2, 0.8] of
    ``n_samples`` samples) on ``judge_task``, as tiny-arith's held-out set was made (``data/tiny_arith_heldout``: the
    training set's recipe on a pool drawn with seed 1)."""
    from nbkit.tasks import dataset

    cfg = dataset.BuildConfig(
        name=Path(JUDGE_SET).name,
        model=TL.MODEL,
        engine="hf",
        dtype="fp32",
        n_samples=n_samples,
        lo=0.2,
        hi=0.8,
        seed=seed,
        max_tokens=TL.max_tokens(REGIME),
        batch_prompts=16,
    )
    return dataset.build(judge_task(pool_size, seed), cfg)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m nbkit.studies.harm_transfer", description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("pilot", "ladder", "train-set", "judge-set", "points", "transfer"))
    p.add_argument("--lrs", type=float, nargs="+", default=list(PILOT_LRS), help="pilot: candidate lrs")
    p.add_argument("--steps", type=int, default=STEPS, help="pilot: steps per run (the rule: 50)")
    p.add_argument("--output-dir", default=f"runs/{STUDY}_pilot", help="pilot: where its runs go")
    p.add_argument("--store", action="store_true", help=f"pilot: also write the record to {PILOT_FILE}")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    if a.what == "pilot":
        res = pilot(a.lrs, a.steps, output_dir=a.output_dir, store=PILOT_FILE if a.store else None)
        for k, v in res["runs"].items():
            print(
                f"lr {k}: judge {v['judge']}; rise {v['rise']}; learns: {v['learns']}; "
                f"{v['seconds_per_step']} s/step, {v['seconds_per_judgment']} s/judgment"
            )
        print(f"smallest lr that learns (rise > {res['rise']}): {res['lr']}")
    elif a.what == "ladder":
        rec = measure_ladder()
        print(json.dumps(rec["doses"], indent=1))
        print("points:", points_from_ladder(rec["doses"]))
    elif a.what == "points":
        print(points_from_ladder(H.ladder_record(LADDER_FILE)["doses"]))
    elif a.what == "transfer":
        path = store_transfer()
        print(f"wrote the transfer reading into {path}" if path else f"{H.THRESHOLDS} lacks {REFERENCE_TASK} or {TASK}")
    elif a.what == "train-set":
        print(TL.build_set(REGIME).card["counts"])
    else:
        print(build_judge_set().card["counts"])
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
