"""Does DeepSeek-V3.2's off-policy sequence mask rescue a run at the doses around the harm threshold?

``nbkit.rl.opsm`` drops a negative-advantage sequence whose mean log μ − log π per token exceeds δ. This study tests
it where it matters: at the two doses of the harm-threshold study (``nbkit.studies.harm_threshold``) on either side
of its threshold, against no correction and against sequence MIS, paired by seed. It is a
``corrections.CorrectionsStudy`` of other cells; the analysis is that study's, unchanged.

The rule (``RULE_TEXT``), fixed in this module and committed before any of its runs trained, and before the harm
study was read:

- **Cells**: the two dose points of the stored ``harm_threshold_tiny_arith`` that bracket its primary threshold
  (``near_threshold``: the last point, in measured dose, whose isotonic fit lies above −0.05 and the first at or
  below it; with no crossing inside the doses, the two points nearest the side the threshold lies on) × corrections
  ``opsm`` (δ = ``nbkit.rl.opsm.DEFAULT_DELTA`` = 0.01 nats per token) and ``seq_mis`` on seeds 0–4. Every run is
  the harm study's run (``dose_response.base_config``) with only ``rollout_format``/``correction``/``seed`` set.
- **Outcome, contrast, verdicts, family**: those of ``corrections`` (held-out judge, mean of steps 40 and 50;
  corrected − uncorrected per seed; *rescues* when that interval lies above 0 and corrected − FP32 above −0.05;
  Holm over the 4 rescue claims; fewer than 5 paired seeds: direction only).
- **Arms**: the FP32 and uncorrected arms are the harm study's runs with identical configs, trained on this machine
  (``reuse``). Identical configs on one machine and an unchanged training path give identical runs; that is
  checked, not assumed: the grid retrains the lower dose's uncorrected seed-0 run as ``check-<format>-none-s0``,
  kept out of the contrasts, and the page says whether its rows equal the reused run's (timing columns aside).
- **Power**: planned at the harm study's own SDs and mean gaps at the two doses (``planned_power``).
- **Stopping**: seeds in order; read once after the last sitting.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import replace

from nbkit import results
from nbkit.records import schema
from nbkit.studies import corrections
from nbkit.studies import dose_response as DR
from nbkit.studies import harm_threshold as HT
from nbkit.studies.corrections import DEFAULT

STUDY = "opsm_tiny_arith"
"""The stored study's folder name under ``data/results``."""
CORRECTIONS = ("opsm", "seq_mis")
SEEDS = tuple(range(5))
CHECK = "check-"
"""Label prefix of the retrained control run that checks the reused arms."""
RULE_TEXT = (
    "cells: the two dose points of the stored harm_threshold_tiny_arith bracketing its primary threshold (last point "
    "whose isotonic fit lies above -0.05 and first at or below it, in measured dose; no crossing: the two points "
    "nearest the side the threshold lies on) x corrections opsm (delta 0.01 nats per token) and seq_mis, seeds 0-4, "
    "the harm study's run otherwise; outcome, contrast, verdicts and family as corrections_tiny_arith (judge mean of "
    "steps 40 and 50; corrected - uncorrected; rescues: contrast above 0 and corrected - FP32 above -0.05; Holm over "
    "the 4 rescue claims; < 5 seeds: direction only); FP32 and uncorrected arms reused from the harm study (identical "
    "configs, this machine), checked by retraining the lower dose's uncorrected seed-0 run; power at the harm study's "
    "SDs and gaps; read once after the last sitting"
)
RULE_RECORD = {"commit": "0664fcfb69854c72345525832114a1a70a126d82", "time": "2026-11-26T01:19:22+00:00"}
"""The commit that fixed ``RULE_TEXT`` and its time, before any run of the study and before the harm study was stored."""


def near_threshold(root=results.RESULTS) -> tuple[str, str]:
    """The rule's two dose points from the stored harm study under ``root``; ValueError when it is not stored or
    has fewer than two doses."""
    card = results.study_dir(HT.STUDY, root) / results.CARD
    if not card.is_file():
        raise ValueError(f"{STUDY} picks its doses from the stored {HT.STUDY}, which is not stored under {root}")
    return _near_threshold(str(root), card.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _near_threshold(root: str, stamp: int) -> tuple[str, str]:
    """``near_threshold`` of the card stored at ``stamp`` (the bootstrap is read once per stored study)."""
    h = HT.HarmThreshold()
    runs, meta = h.load(root), h.stored_meta(root)
    est = h.thresholds(runs, meta)[HT.PRIMARY]
    doses = h.doses(runs, meta)
    pts = sorted(h.gap_matrix(runs, meta)[0], key=lambda p: doses[(p, "none")])
    if len(pts) < 2 or isinstance(est, str):
        raise ValueError(f"{HT.STUDY} has no threshold estimate to bracket: {est}")
    fit = dict(zip(est.doses, est.fitted, strict=True))
    above = [p for p in pts if fit[doses[(p, "none")]] > est.harm]
    if est.outcome == "crossing":
        lo = above[-1]
        return lo, pts[pts.index(lo) + 1]
    return (pts[0], pts[1]) if est.outcome == "below_range" else (pts[-2], pts[-1])


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """Whether two runs logged the same rows, timing columns aside."""
    strip = [schema.without_timing(rows) for rows in (a, b)]
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(*strip, strict=True))


def _same(x: dict, y: dict) -> bool:
    if x.keys() != y.keys():
        return False
    return all(
        (isinstance(v, float) and isinstance(y[k], float) and math.isnan(v) and math.isnan(y[k])) or v == y[k]
        for k, v in x.items()
    )


class OPSMStudy(corrections.CorrectionsStudy):
    """``CorrectionsStudy`` at the harm threshold's two bracketing doses, OPSM and sequence MIS, arms reused from
    the harm study (checked by one retrained run)."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    title = "OPSM at the harm threshold: does the off-policy sequence mask rescue the doses around it?"
    question = (
        "At the two doses of the harm-threshold study on either side of its threshold, does DeepSeek-V3.2's "
        "off-policy sequence mask (δ = 0.01 nats per token) rescue an FP32-trained run, against no correction and "
        "against sequence MIS? Paired by seed; the corrections study's rule and family (Holm over 4 claims). Rule "
        "fixed in nbkit.studies.opsm before any of its runs trained and before the harm study was read."
    )
    statistic = corrections.CorrectionsStudy.statistic.replace("six", "four")
    output_dir = f"runs/{STUDY}"
    corrections = CORRECTIONS
    seeds = SEEDS
    reuse = HT.STUDY
    toy = {
        "formats": ["e8m2"],
        "corrections": ["opsm"],
        "seeds": [0],
        "steps": 1,
        "reuse": None,
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8, "judge_every": 0},
    }

    @property
    def formats(self) -> tuple[str, ...]:
        """The two doses bracketing the stored harm threshold (``near_threshold``); () while it is not stored."""
        try:
            return near_threshold()
        except ValueError:
            return ()

    def _harm_arms(self) -> dict:
        h = HT.HarmThreshold()
        return h.arms(h.load(), h.stored_meta())

    @property
    def planning_gap(self) -> dict:
        """Each dose's mean paired gap to FP32 in the stored harm study."""
        h = HT.HarmThreshold()
        gaps = h.arm_gaps(h.load(), h.stored_meta())
        return {f: statistics.fmean(gaps[(f, "none")].values()) for f in self.formats}

    @property
    def planning_sd(self) -> dict:
        """The outcome's SD over seeds per arm in the stored harm study (a corrected arm planned at FP32's)."""
        arms = self._harm_arms()
        sd = {
            f: statistics.stdev(DR.final_judge(r) for r in arms[(f, "none")].values())
            for f in (HT.REFERENCE, *self.formats)
        }
        return {**sd, "corrected": sd[HT.REFERENCE]}

    def grid(
        self,
        formats=None,
        corrections=None,
        seeds=None,
        steps: int = 50,
        output_dir=None,
        overrides=None,
        reuse=DEFAULT,
    ):
        """The cells' runs, plus the retrained check of one reused control arm (``CHECK``)."""
        formats = self.formats if formats is None else formats
        if not formats:
            raise ValueError(f"{STUDY} picks its doses from the stored {HT.STUDY}: store it first, or pass formats")
        grid = super().grid(formats, corrections, seeds, steps, output_dir, overrides, reuse)
        reuse = self.reuse if reuse is DEFAULT else reuse
        if reuse:
            full = super().grid(formats, corrections, seeds, steps, output_dir, overrides, None)
            first = f"{formats[0]}-none-s{(self.seeds if seeds is None else seeds)[0]}"
            if first in full and first not in grid:  # reused: retrain it once beside, to check the reuse
                c = full[first]
                grid[CHECK + first] = replace(c, output_dir=str(c.out.parent / (CHECK + first)))
        return grid

    def contrasts(self, runs, meta):
        """``CorrectionsStudy.contrasts`` without the check run."""
        keep = [k for k in runs if not k.startswith(CHECK)]
        return super().contrasts({k: runs[k] for k in keep}, {k: meta[k] for k in keep})

    def plan(self) -> list[str]:
        if self.formats:
            return super().plan()
        return [
            self.rule_line(),
            f"Planned runs: 2 doses × ({len(self.corrections)} corrections) × {len(self.seeds)} seeds, the doses "
            f"picked from {HT.STUDY} once it is stored; FP32 and uncorrected arms reused from it, one retrained.",
        ]

    def findings(self, runs, meta, rows) -> list[str]:
        out = super().findings(runs, meta, rows)
        for k in [k for k in runs if k.startswith(CHECK)]:
            twin = k[len(CHECK) :]
            if twin in runs:
                same = same_rows(runs[k], runs[twin])
                out.append(
                    f"Reuse check: {twin} retrained by this study logged "
                    + (
                        "the same rows as the reused run (timing columns aside)."
                        if same
                        else "other rows than the "
                        "reused run: the reused arms are not this study's runs, and the contrasts mix two runs."
                    )
                )
        return out
