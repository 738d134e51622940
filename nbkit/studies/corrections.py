"""Does a mismatch correction rescue the formats around the break? Paired contrasts, with the rule stated first.

The dose–response study (``nbkit.studies.dose_response``) left NVFP4 and e8m2 rollouts worse than FP32 at five seeds
(intervals wholly below 0) without a verdict against the −0.05 margin, and ran its corrections on three seeds with no
contrast. This study asks, per format and correction, whether the correction *rescues* the format: corrected −
uncorrected on the same seeds (a paired contrast), and the corrected runs against FP32 on the same seeds.

The rule (``RULE_TEXT``), fixed in this module and committed before any of its runs trained:

- **Cells**: rollout formats ``FORMATS`` (NVFP4, e8m2: the two whose uncorrected gap to FP32 lay wholly below 0 at
  the dose–response's first look; MXFP4's interval held 0, e8m1 had broken far past the margin) × corrections
  ``CORRECTIONS`` (Token-TIS, sequence MIS, IcePop: the importance-ratio corrections of ``nbkit.rl.algorithms``;
  ``mu_old`` is a change of PPO's old policy, not a correction of the weights, and collapsed on all its seeds) on
  seeds ``SEEDS``. Every run is the dose–response's run (``dose_response.base_config``: FP32 trainer, HF engine,
  GRPO on the tiny-arith sanity set, 50 steps, judged every 10) with only ``rollout_format``/``correction``/``seed``
  set.
- **Outcome**: the held-out (FP32-sampled judge) accuracy, mean of the last two judgments (steps 40 and 50): the
  dose–response's amended outcome (``dose_response.final_judge``), fixed here before these runs.
- **Contrast**: per seed, corrected − uncorrected; its mean with a 95 % interval (the rule reads the t-interval at
  the contrast's own SD; the page first showed the interval bounded in (−1, 1), as amended the t-interval). Beside it, corrected − FP32 on the
  same seeds against the margin −``MARGIN``.
- **Rescues**: the contrast's interval lies above 0 AND the corrected − FP32 interval lies above −``MARGIN`` (an
  intersection–union test: p = the larger of the two t-tests' p-values). *Helps* (contrast above 0, not shown within
  the margin of FP32), *harms* (contrast below 0), else *no detectable effect*. Fewer than 5 paired seeds: direction
  only.
- **Family**: the 6 rescue claims, Holm (family-wise error ≤ 5 %); the helps/harms claims a second family, Holm over
  the 6 contrasts. Both the unadjusted and the Holm reading are shown; the Holm reading is the study's answer.
- **Power** (``planned_power``): at the effect that matters, a full rescue (corrected gap 0, the uncorrected gap at
  its dose–response mean over 7 seeds), at planning SDs read from the stored dose–response (``PLANNING_SD``), with
  12 seeds: the chance of *rescues* after Holm (lower bound) and unadjusted; the chance of a false rescue at a
  corrected gap of exactly −``MARGIN``.
- **Arms**: FP32, uncorrected and corrected runs of every seed are all trained by this study, on one machine and
  one commit. The stored dose–response holds FP32 and uncorrected runs with configs identical to this grid's (every
  field that changes a run), but identical configs are not identical runs across machines: e8m2 seed 0 re-run on
  an AMD EPYC (this study's CPU) followed the stored run (Intel Xeon) step for step until its rewards diverged at
  step 21 (judge at step 40: 0.818 against 0.832; outcome 0.856 against 0.863). A paired contrast whose arms differ
  in machine and code as well as correction is not the contrast the question asks, so ``reuse`` defaults to None;
  ``--set reuse=dose_response_tiny_arith`` reuses identical-config stored runs as control arms (and the card says
  so). The formats were chosen after reading the dose–response's uncorrected results, which the question says.
- **Stopping**: seeds run in order (``SEEDS``); the verdicts are read once, on every stored seed, after the last
  sitting; a study stopped short of 12 seeds (for compute, not for its results) says so and is read at the seeds it
  has.

``nbkit study corrections_tiny_arith run [--shard i/n] [--set 'seeds=[0,1,2]'] [--set 'formats=["e8m2"]']`` trains
unfinished runs (seed by seed, so a cut-off study has every cell on the same seeds); ``... store`` stores the finished
ones, ``store --keep-stored`` adds a later sitting's. The first ``run`` to train anything writes its start time to
``STARTED`` in the runs' folder; ``store`` puts it on the card as ``training_started`` beside ``RULE_RECORD``.
"""

from __future__ import annotations

import functools
import statistics
from pathlib import Path

from nbkit import results
from nbkit.records.runlog import differing_fields, last_step
from nbkit.stats import noninferiority as NI
from nbkit.stats.stats import bounded_mean_ci, mean_ci
from nbkit.studies import dose_response as DR
from nbkit.studies import prereg, prose
from nbkit.studies.base import add_run

STUDY = "corrections_tiny_arith"
"""The stored study's folder name under ``data/results``."""
FORMATS = ("nvfp4", "e8m2")
"""The formats around the break (see the module's rule)."""
CORRECTIONS = ("token_tis", "seq_mis", "icepop")
"""The corrections tested (``nbkit.rl.algorithms.CORRECTIONS``)."""
SEEDS = tuple(range(12))
"""The planned seeds: at the planning SDs 12 give a full rescue 0.47 (e8m2) to 0.57 (NVFP4) power after Holm, 0.83-0.88
unadjusted (``planned_power``; the page computes these)."""
MARGIN = NI.RULE.margin
"""The corrected runs' non-inferiority margin against FP32 (accuracy)."""
RULE = NI.RULE
"""Level 95 %, margin 0.05, 5 paired seeds at least for a verdict."""
REUSE = DR.STUDY
"""The stored study whose identical-config FP32 and uncorrected runs ``--set reuse=...`` takes as control arms (not
the default: see the module's rule, "Arms")."""
PLANNING_SD = {"fp32": 0.035, "nvfp4": 0.056, "e8m2": 0.018, "corrected": 0.035}
"""Per-arm SD of the outcome over seeds used to plan: FP32, NVFP4 and e8m2 are the SDs of the stored dose–response's
7 seeds (FP32 with its seed-5 outlier at 0.826); a corrected arm is planned at FP32's SD (a rescued run behaves like
FP32; the stored 3-seed corrected cells of e8m2 and MXFP4 range 0.004–0.070)."""
PLANNING_GAP = {"nvfp4": -0.088, "e8m2": -0.040}
"""The uncorrected gap to FP32 a rescue has to close: each format's dose–response mean over 7 seeds."""
STARTED = prereg.STARTED
"""File in the runs' folder the first training ``run`` writes (``nbkit.studies.prereg``)."""
RULE_TEXT = (
    "cells: rollout formats nvfp4, e8m2 x corrections token_tis, seq_mis, icepop, seeds 0-11, the dose-response's run "
    "otherwise; outcome: held-out judge accuracy, mean of the judgments at steps 40 and 50; contrast: corrected - "
    "uncorrected per seed, 95 % t-interval at its own SD; rescues: contrast interval above 0 and corrected - FP32 "
    "interval above -0.05 (intersection-union, p = max); helps / harms / no detectable effect otherwise; < 5 seeds: "
    "direction only; family: the 6 rescue claims, Holm at 5 % (helps/harms: Holm over the 6 contrasts); FP32, "
    "uncorrected and corrected arms all trained by this study (no reuse); verdicts read once, after the last sitting"
)
"""The rule in one line, as the card records it."""
RULE_RECORD = {"commit": "cbe5febd81f216c8ce293ad020dd50ab52ca9ab4", "time": "2026-11-25T22:20:27+00:00"}
"""The commit that fixed ``RULE_TEXT`` and its time (``git log -1 --format=%cI``), before any run of the study."""


DEFAULT = "<the study's own>"
"""``grid``'s ``reuse`` when not given: the study's ``reuse`` attribute (None: a different choice, reuse nothing)."""


COLUMNS = {
    "format": "format",
    "correction": "correction",
    "paired": "paired seeds",
    "uncorrected": "uncorrected − fp32",
    "uncorrected_ci": "uncorrected − fp32 CI",
    "corrected": "corrected − fp32",
    "corrected_ci": "corrected − fp32 CI",
    "contrast": "contrast",
    "contrast_ci": "contrast CI",
    "sd": "contrast SD (own)",
    "verdict": "verdict",
    "holm": "verdict (Holm)",
    "p_rescue": "p rescue",
}
"""A table row's named fields → the headers the page shows them under (``nbkit.studies.prose``)."""
CELL = (
    "{format} + {correction} ({paired} paired seeds): corrected − uncorrected {contrast:+.3f}{contrast_ci}, "
    "corrected − FP32 {corrected:+.3f}{corrected_ci}, uncorrected − FP32 {uncorrected:+.3f} on the same seeds: "
    "{verdict}; family-wise (Holm): {holm}."
)
CI = " (95 % CI {:+.3f} to {:+.3f})"
RESCUED = "Rescued by the rule (Holm over the {judged} rescue claims with a verdict): {rescued}."
SHORT = (
    "The rule planned {planned} paired seeds per cell; cells here have {short}: the study stopped short of its plan, "
    "and its power is below the planned power."
)
"""The page's sentences: templates over a row's named fields (``COLUMNS``)."""


AMENDMENTS = (
    {
        "key": "six_seeds",
        "commit": "d764b89334eae34f90c48f7e51a61f5071fe51b3",
        "time": "2026-11-25T23:57:14+00:00",
        "what": "The study was stored and its verdicts read after its first sitting, at seeds 0–5 of the 12 the rule "
        "planned (read once, after the last sitting); no second sitting followed. The page reads the 6 seeds.",
        "why": "Compute (the rule allows a study stopped short for compute to be read at its seeds); the stop was "
        "not recorded as a decision when the first sitting was read, so it is recorded here (issue 50 item 6).",
    },
    {
        "key": "one_ci",
        "commit": "1099c04f8b26ec196362d9beeec2493b61ea4abc",
        "time": "2026-11-27T18:59:57+00:00",
        "what": "Each interval shown (uncorrected − FP32, corrected − FP32, contrast) is the 95 % t-interval the "
        "rescue rule's t-tests read, not the interval bounded in (−1, 1) on Fisher's scale.",
        "why": "Issue 50 item 4: one interval drawn and read.",
    },
)
"""Changes after training began (``nbkit.studies.amendments``), put on the card by ``record_amendments``."""


class CorrectionsStudy(prereg.PreRegistered):
    """Options: ``formats``, ``corrections``, ``seeds``, ``steps``, ``output_dir``, ``overrides`` (any ``RLConfig``
    field) and ``reuse`` (a stored study whose identical-config control arms are reused; None, the default, trains
    them all)."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    title = "Corrections tested: does a correction rescue the formats around the break?"
    question = (
        "With an FP32 trainer and NVFP4 or e8m2 rollouts (the formats the dose–response left worse than FP32 "
        "at five seeds, chosen after reading it), does Token-TIS, sequence MIS or IcePop rescue the run? Per "
        "format and correction, paired by seed: corrected − uncorrected, and corrected − FP32 against −"
        f"{MARGIN:g}. A correction rescues when both intervals clear (above 0, above −{MARGIN:g}); the six "
        "rescue claims are one family (Holm). Rule fixed in nbkit.studies.corrections before any of its runs "
        "trained; every arm trained by this study on one machine and commit."
    )
    statistic = (
        "outcome = held-out judge accuracy (351 problems × 1 sample, FP32 engine), mean of the judgments at "
        "steps 40 and 50; contrast = corrected − uncorrected per seed, mean over seeds; CI = the 95 % t-interval "
        "the verdict reads (as amended; first shown bounded in (−1, 1) on Fisher's scale); verdict = the rule on the "
        "t-intervals at each "
        "cell's own SD (rescues: contrast above 0 and corrected − FP32 above −0.05); verdict (Holm) = the "
        "six rescue claims with family-wise error 5 % (helps/harms: Holm over the six contrasts); fewer than "
        "5 paired seeds: direction only."
    )
    notebook = "06_dose_response"
    output_dir = f"runs/{STUDY}"
    amendments = AMENDMENTS
    formats: tuple[str, ...] = FORMATS
    """The rollout formats of the cells."""
    corrections: tuple[str, ...] = CORRECTIONS
    """The corrections tested on each format."""
    seeds: tuple[int, ...] = SEEDS
    """The planned seeds."""
    planning_sd: dict = PLANNING_SD
    """Per-arm SDs of the outcome the power is planned at (``fp32``, each format, ``corrected``)."""
    planning_gap: dict = PLANNING_GAP
    """Per format: the uncorrected gap to FP32 a rescue has to close."""
    reuse: str | None = None
    """The stored study whose identical-config control arms are reused by default (None: every arm trained)."""
    toy = {
        "formats": ["mxfp4"],
        "corrections": ["icepop"],
        "seeds": [0],
        "steps": 1,
        "reuse": None,
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {
            "formats": list(self.formats),
            "corrections": list(self.corrections),
            "seeds": list(self.seeds),
            "steps": 50,
            "reuse": self.reuse,
        }

    # -- write half -------------------------------------------------------------------------------------------
    def grid(
        self,
        formats=None,
        corrections=None,
        seeds=None,
        steps: int = 50,
        output_dir: str | None = None,
        overrides: dict | None = None,
        reuse: str | None = DEFAULT,
    ) -> dict:
        """The cells' runs; ``formats``/``corrections``/``seeds`` None and ``reuse`` not given: the study's own."""
        from nbkit.precision import formats as F

        formats = self.formats if formats is None else formats
        corrections = self.corrections if corrections is None else corrections
        seeds = self.seeds if seeds is None else seeds
        from nbkit.rl.algorithms import CORRECTIONS as KNOWN

        formats = [F.validate(f) for f in formats]
        bad = [c for c in corrections if c not in KNOWN or c == "none"]
        if bad:
            raise ValueError(f"unknown correction(s) {bad}; choose from {[c for c in KNOWN if c != 'none']}")
        base = DR.base_config(max_steps=steps, output_dir=output_dir or self.output_dir, **(overrides or {}))
        grid = {}
        add = functools.partial(add_run, grid, base)

        for seed in seeds:  # seed by seed: a cut-off study has every cell on the same seeds
            add(f"fp32-none-s{seed}", rollout_format="fp32", seed=seed)
            for f in formats:
                add(f"{f}-none-s{seed}", rollout_format=f, seed=seed)
                for c in corrections:
                    add(f"{f}-{c}-s{seed}", rollout_format=f, correction=c, seed=seed)
        reused = self.reused(grid, self.reuse if reuse is DEFAULT else reuse)
        return {k: v for k, v in grid.items() if k not in reused}

    def reused(self, grid: dict, reuse: str | None, root: Path = results.RESULTS) -> dict[str, dict]:
        """``label → stored config`` of the control arms (no correction) of ``grid`` that the stored study ``reuse``
        holds with an identical config (``runfolder.differing_fields`` empty) and every step logged."""
        if not reuse or not (results.study_dir(reuse, root) / results.CARD).is_file():
            return {}
        saved = results.card(reuse, root).get("configs", {}).get("runs", {})
        arms = {
            k: c for k, c in grid.items() if c.correction is None and k in saved and not differing_fields(saved[k], c)
        }
        if not arms:
            return {}
        rows = results.load(reuse, root)
        return {k: saved[k] for k, c in arms.items() if k in rows and last_step(rows[k]) >= c.max_steps}

    def card_record(self, options: dict) -> dict:
        """``PreRegistered.card_record`` and ``reused``: the control arms taken from another stored study
        (``{"study", "runs"}``)."""
        out = super().card_record(options)
        reuse = options.get("reuse", self.reuse)
        if reuse:
            full = self.grid(**{**options, "reuse": None})
            out["reused"] = {"study": reuse, "runs": sorted(self.reused(full, reuse))}
        return out

    coords = DR.DoseResponse.coords

    # -- read half: this study's runs and the reused control arms -----------------------------------------------
    def load(self, root: Path = results.RESULTS) -> dict[str, list[dict]]:
        runs = results.load(self.name, root)
        reuse = self.card(root).get("reused") or {}
        if reuse.get("study") and reuse.get("runs"):
            other = results.load(reuse["study"], root)
            runs = {**{k: other[k] for k in reuse["runs"] if k in other}, **runs}
        return runs

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """``AMENDMENTS``' key → the shown intervals whose reading (above/below 0, above/below −margin) moved."""
        out: list[str] = []
        for (fmt, corr), v in self.contrasts(runs, meta).items():
            for label, key, line in (("contrast", "contrast", 0.0), ("corrected − fp32", "vs fp32", -RULE.margin)):
                xs = list(v[key].values())
                if len(xs) < 2:
                    continue
                _, blo, bhi = bounded_mean_ci(xs)
                _, lo, hi = mean_ci(xs)
                if (blo > line) != (lo > line) or (bhi < line) != (hi < line):
                    out.append(f"{fmt} + {corr} {label}: bounded [{blo:+.3f}, {bhi:+.3f}] → t [{lo:+.3f}, {hi:+.3f}]")
        return {"one_ci": out}

    def stored_meta(self, root: Path = results.RESULTS) -> dict[str, dict]:
        card = self.card(root)
        configs = dict(card["configs"]["runs"])
        reuse = card.get("reused") or {}
        if reuse.get("study"):
            other = results.card(reuse["study"], root)["configs"]["runs"]
            configs = {**{k: other[k] for k in reuse.get("runs", []) if k in other}, **configs}
        return self.meta(configs)

    # -- the analysis -------------------------------------------------------------------------------------------
    def contrasts(self, runs, meta) -> dict[tuple[str, str], dict[str, dict[int, float]]]:
        """``(format, correction) → {"contrast", "vs fp32", "uncorrected vs fp32"}``, each ``seed → difference`` on
        the seeds all three arms share (the outcome: ``dose_response.final_judge``, last two judgments)."""
        cells = DR.DoseResponse().cells(runs, meta)
        ref = cells.get(("fp32", "fp32", "none"), {})
        out = {}
        for (train, fmt, corr), by_seed in cells.items():
            if train != "fp32" or corr == "none":
                continue
            plain = cells.get(("fp32", fmt, "none"), {})
            seeds = set(by_seed) & set(plain) & set(ref)
            d = DR.DoseResponse()
            corrected, uncorrected = d.gaps(by_seed, ref, seeds=seeds), d.gaps(plain, ref, seeds=seeds)
            both = sorted(set(corrected) & set(uncorrected))
            out[(fmt, corr)] = {
                "contrast": {s: corrected[s] - uncorrected[s] for s in both},
                "vs fp32": {s: corrected[s] for s in both},
                "uncorrected vs fp32": {s: uncorrected[s] for s in both},
            }
        return dict(
            sorted(out.items(), key=lambda kv: (_order(self.formats, kv[0][0]), _order(self.corrections, kv[0][1])))
        )

    def table(self, runs, meta) -> list[dict]:
        """``cell_rows`` under the page's headers (``COLUMNS``)."""
        return prose.display(self.cell_rows(runs, meta), COLUMNS)

    def cell_rows(self, runs, meta) -> list[dict]:
        """One row of named fields (``COLUMNS``' keys) per corrected cell: its contrasts with their t-intervals and
        the rescue rule's verdicts."""
        con = self.contrasts(runs, meta)
        fam = NI.rescue_family(
            {prose.arm(*k): (list(v["contrast"].values()), list(v["vs fp32"].values())) for k, v in con.items()}, RULE
        )
        rows = []
        for (fmt, corr), v in con.items():
            c, g, u = (list(v[k].values()) for k in ("contrast", "vs fp32", "uncorrected vs fp32"))
            row = {"format": fmt, "correction": corr, "paired": len(c)}
            for name, xs in (("uncorrected", u), ("corrected", g), ("contrast", c)):
                m, lo, hi = mean_ci(xs) if xs else (None, None, None)  # the t-interval the verdict reads
                row |= {name: m, f"{name}_ci": None if m is None or lo != lo else [lo, hi]}
            row["sd"] = statistics.stdev(c) if len(c) >= 2 else None
            verdicts = fam[prose.arm(fmt, corr)]
            row |= {
                "verdict": verdicts["verdict"],
                "holm": verdicts["verdict (Holm)"],
                "p_rescue": verdicts["p rescue"],
            }
            rows.append(row)
        return rows

    # -- sentences ----------------------------------------------------------------------------------------------
    def findings(self, runs, meta, rows) -> list[str]:
        rows = prose.named(rows, COLUMNS)
        out = [
            CELL.format_map({**r, **{k: CI.format(*r[k]) if r[k] else "" for k in ("contrast_ci", "corrected_ci")}})
            for r in rows
            if r["contrast"] is not None
        ]
        judged = [r for r in rows if r["paired"] >= RULE.min_seeds]
        rescued = [prose.arm(r["format"], r["correction"]) for r in judged if r["holm"] == NI.RESCUES]
        out.append(RESCUED.format(judged=len(judged), rescued=", ".join(rescued) if rescued else "none"))
        short = sorted({r["paired"] for r in rows} - {len(self.seeds)})
        if short and rows:
            out.append(SHORT.format(planned=len(self.seeds), short=short))
        out += self.power_findings()
        return out

    def planned_power(self, seeds: int | None = None, sims: int = 20_000) -> dict[str, dict]:
        """Per format: the rescue rule's chance of *rescues* at a full rescue and at a corrected gap of exactly
        −margin (a false rescue), at ``PLANNING_SD`` and ``PLANNING_GAP``, with the family of ``FORMATS`` ×
        ``CORRECTIONS`` claims."""
        seeds = len(self.seeds) if seeds is None else seeds
        sd, gap = self.planning_sd, self.planning_gap
        k = len(self.formats) * len(self.corrections)
        out = {}
        for fmt in self.formats:
            sds = (sd["fp32"], sd[fmt], sd["corrected"])
            out[fmt] = {
                "full rescue": NI.rescue_power(gap[fmt], 0.0, sds, seeds, k, sims=sims),
                "false rescue": NI.rescue_power(gap[fmt] - 0.1, -MARGIN, sds, seeds, k, sims=sims),
            }
        return out

    def power_findings(self) -> list[str]:
        p = self.planned_power()
        parts = [
            f"{fmt} (uncorrected gap {self.planning_gap[fmt]:+.3f}): {v['full rescue']['holm']:.2f} after Holm "
            f"(≥, Holm's first threshold), {v['full rescue']['unadjusted']:.2f} unadjusted; a false rescue at "
            f"a corrected gap of −{MARGIN:g}: {v['false rescue']['unadjusted']:.3f} per cell unadjusted"
            for fmt, v in p.items()
        ]
        sds = ", ".join(f"{k} {v:g}" for k, v in self.planning_sd.items())
        return [
            f"Power as planned ({len(self.seeds)} seeds; per-arm SDs of the outcome over seeds: {sds}; simulated, "
            "20,000 studies): the "
            "chance of 'rescues' at a full rescue (corrected gap 0): " + "; ".join(parts) + "."
        ]

    def plan(self) -> list[str]:
        n = len(self.seeds) * (1 + len(self.formats) * (1 + len(self.corrections)))
        return [
            self.rule_line(),
            f"Planned runs: {n} ({len(self.seeds)} seeds × FP32, {len(self.formats)} formats uncorrected and "
            f"{len(self.formats) * len(self.corrections)} corrected cells).",
            *self.power_findings(),
        ]


def _order(seq, x) -> int:
    return seq.index(x) if x in seq else len(seq)
