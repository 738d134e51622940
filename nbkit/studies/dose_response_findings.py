"""The dose–response page's sentences: templates filled with the named fields of the study's table rows.

``COLUMNS`` names each field of a table row and gives its display header (``nbkit.studies.prose``); the table is shown
under the headers, and every sentence here is a template over the named fields, computed from the stored runs.
``Findings`` is the part of ``nbkit.studies.dose_response.DoseResponse`` that writes them.
"""

from __future__ import annotations

import statistics

from nbkit.stats import noninferiority as NI
from nbkit.stats.stats import bounded_mean_ci, mean_ci
from nbkit.studies import prose
from nbkit.studies.dose_response_rule import (
    BREAK_GAP,
    FIRST_LOOK,
    JUDGE_WINDOW,
    MARGIN,
    ORIGINAL_WINDOW,
    PAIR_CONTRAST,
    REFERENCE,
    SIMS,
)

COLUMNS = {
    "train": "train",
    "format": "format",
    "correction": "correction",
    "seeds": "seeds",
    "dose": "dose: mismatch at step 0",
    "judge": "judge final (mean)",
    "gap": "gap vs fp32",
    "ci_low": "gap CI low",
    "ci_high": "gap CI high",
    "ci_bounded": "gap CI kept in [−1, 1]",
    "paired": "paired seeds",
    "sd": "gap SD (own)",
    "verdict": "verdict",
    "holm": "verdict (Holm)",
    "original": "verdict, original outcome",
    "detectable": "breaks detectable at (80 %)",
    "p_no_harm": "P(no harm | gap 0)",
    "p_breaks": f"P(breaks | gap {BREAK_GAP:+g})",
    "run_mean": "mismatch, run mean (mechanism)",
    "growth": "mismatch growth (last/first 5)",
    "train_accuracy": "train accuracy (last 5)",
    "judge0": "judge step 0",
    "masked": "IS masked/truncated tokens",
    "phantom": "phantom clip",
    "ess_token": "ESS token",
    "ess_seq": "ESS seq",
    "grad_norm": "grad norm",
    "entropy": "entropy",
    "s_step": "s/step",
    "audit": "format ran (audit)",
}
"""A table row's named fields → the headers the page shows them under, in the table's column order."""

# -- templates: each ``{field}`` is a named field of a row, or a value named beside it -------------------------
FORMAT = (
    "{format} rollouts (dose: mismatch {dose:.2g} per token at step 0; {run_mean:.2g} averaged over the run): "
    "held-out accuracy {judge:.3f}, gap to FP32 {gap:+.3f} ({ci}, {paired_seeds}{own_sd}): {verdict}{below_zero}"
    "{extra}."
)
CI = "95 % CI {ci_low:+.3f} to {ci_high:+.3f}"
OWN_SD = ", own SD {sd:.3f}"
HOLM = "; family-wise (Holm over the page's {claims} claims): {holm}"
ORIGINAL = "; under the outcome as first committed (last judgment): {original}"
BELOW_ZERO = (
    " by the rule, though its interval lies wholly below 0: worse than FP32, but not surely by more than {margin:g}"
)
BROKEN = "Formats that break by the rule: {broken} (of {tested} tested)."
ERRORS = (
    "Error rates of the rule, simulated ({sims:,} studies; normal seed noise at each cell's own SD and seeds; the "
    "{cells} claims the page makes, taken as independent): with no true gap a false 'breaks' anywhere has chance "
    "{none_at_0:.3f} (each cell's one-sided error at a gap of 0 is ≈ 0, not 2.5 %); with every true gap at exactly "
    "−{margin:g} at least one claim is false with chance {none_at_margin:.2f} unadjusted and {holm_at_margin:.3f} "
    "after Holm's adjustment (the 'verdict (Holm)' column); at {break_gap:+g} a false 'no detectable harm' anywhere "
    "has chance {none_at_break:.3f}."
)
POWER = (
    "Power against the margin, not against 0 (each cell's own SD and seeds): the chance of 'no detectable harm' when "
    "the true gap is 0 ranges {no_harm_min:.2f}–{no_harm_max:.2f}, of 'breaks' at a true gap of {break_gap:+g} "
    "{breaks_min:.2f}–{breaks_max:.2f}; 'breaks' is called with 80 % power only from a true gap of "
    "{detectable_hi:+.3f} (the smallest SD) to {detectable_lo:+.3f} (the largest)."
)
SECOND_LOOK = (
    "Seeds {first}–{last} were a second look at {cells}, taken because the first look was inconclusive: at a true "
    "gap of exactly −{margin:g} the two-look procedure ({n1} seeds, then {n} if inconclusive) calls 'no detectable "
    "harm' with chance {two:.3f}, against {one:.3f} for one look at {n} seeds (simulated; at the margin the chance "
    "does not depend on the SD). The table above shows both looks."
)
INTERVALS = (
    "The intervals shown are the rule's t-intervals, the ones the verdicts read (a plain interval of a mean: with a "
    "large gap on few seeds it can reach below −1). As first shown (amended: one interval drawn and read) they were "
    "bounded in (−1, 1) on Fisher's atanh scale, which gives a different verdict in {differ}."
)
BOUNDS = (
    "As amended after the results (see the record): an accuracy gap lies in [−1, 1], and a t-interval that leaves "
    "those bounds ({left}) is kept inside them beside the interval as computed (the table's 'gap CI kept in [−1, 1]' "
    "column, the looks table's 'in [−1, 1]'), clipped at the bound: the true gap always lies inside, so the clipped "
    "interval covers it whenever the t-interval does; {moved}."
)
UNMOVED = "no verdict moves, since the rule reads at −{margin:g} and 0, inside the bounds"
OUTSIDE = "{cell} ({where}) {lo:+.3f} to {hi:+.3f} → {clo:+.3f} to {chi:+.3f}"
DISAGREES = "{cell} under {outcome} at the {look} ({n_seeds}): {rule} by the rule, {bounded} by the bounded interval"
CORRECTED = "{format} + {correction}: gap to FP32 {gap:+.3f} ({paired_seeds}): {verdict}{versus}."
VERSUS = (
    "; uncorrected on the same {same_seeds} {uncorrected:+.3f}, corrected − uncorrected {contrast:+.3f} ({reading})"
)
PAIR = (
    "The paper's {TRAIN}/{FORMAT} pair (dose {dose:.2g} per token at step 0, both sides {train}): gap to FP32/FP32 "
    "{gap:+.3f} (95 % CI {ci_low:+.3f} to {ci_high:+.3f}, {paired_seeds}): {verdict}{below_zero}; Holm: {holm}; "
    "under the outcome as first committed: {original}."
)
BF16_FP16 = (
    "BF16/BF16 against FP16/FP16, paired by seed: {mean:+.3f} (95 % CI {lo:+.3f} to {hi:+.3f}, {n_seeds}; own SD "
    "{sd:.3f}): {reading}{holm}."
)
BF16_FP16_READING = {
    NI.NO_HARM: "BF16 is no detectably worse than FP16 (the interval lies above -0.05)",
    NI.BREAKS: "BF16 is worse than FP16 by more than 0.05",
    NI.INCONCLUSIVE: "inconclusive",
}
BF16_FP16_HOLM = "; Holm over the page's {claims} claims: {holm}"
DOSE = (
    "The dose (x-axis) is each format's mismatch at step 0, the first optimiser step's rollouts drawn with the "
    "initial weights, fixed before any training; the run average stays as a mechanism column, since the run's own "
    "fate moves it (step 0 → run mean: {moved}). {order}"
)
DOSE_MOVED = "{format} {dose:.2g} → {run_mean:.2g}"
SAME_ORDER = "Both order the formats alike."
OTHER_ORDER = "They order the formats differently: by dose {by_dose}; by run mean {by_mean}."


BOUND = 1.0
"""An accuracy gap (a difference of two accuracies in [0, 1]) lies in [−BOUND, BOUND]."""


def in_bounds(lo: float, hi: float) -> tuple[float, float]:
    """A gap's interval kept inside [−1, 1]: clipped at the bounds (a true gap always lies inside them, so the clipped
    interval covers it whenever the interval does; an interval inside them is returned as it is)."""
    return max(lo, -BOUND), min(hi, BOUND)


def below_zero(row: dict) -> str:
    """What an inconclusive interval still says when it lies wholly below 0 (worse than FP32, size undecided);
    ``row``: a table row's named fields."""
    hi = row.get("ci_high")
    if row.get("verdict") == "inconclusive" and hi is not None and hi == hi and hi < 0:
        return BELOW_ZERO.format(margin=MARGIN)
    return ""


class Findings:
    """The sentences of ``DoseResponse``'s page (its ``cells``, ``gaps``, ``family``, ``holm``, ``cell_verdict`` and
    ``error_rates`` give the numbers)."""

    def findings(self, runs, meta, rows) -> list[str]:
        rows = prose.named(rows, COLUMNS)
        primary = [r for r in rows if r["correction"] == "none" and r["train"] == "fp32" and r["format"] != REFERENCE]
        fam = self.family(runs, meta)
        out = []
        for r in primary:
            if r["gap"] is None:
                continue
            extra = HOLM.format(claims=len(fam), holm=r["holm"]) if r["holm"] != "—" else ""
            if r["original"] not in ("—", r["verdict"]):
                extra += ORIGINAL.format(original=r["original"])
            said = {
                "ci": CI.format_map(r) if r["ci_low"] == r["ci_low"] else "one seed, no interval",
                "paired_seeds": prose.seeds(r["paired"]),
                "own_sd": OWN_SD.format_map(r) if r["paired"] >= 2 else "",
                "below_zero": below_zero(r),
                "extra": extra,
            }
            out.append(FORMAT.format_map({**r, **said}))
        broken = [r["format"] for r in primary if r["verdict"] == NI.BREAKS]
        out.append(BROKEN.format(broken=", ".join(broken) if broken else "none", tested=len(primary)))
        out += self.error_findings(runs, meta, rows)
        out += self.correction_findings(runs, meta, rows)
        out += self.pair_findings(runs, meta, rows)
        out += self.dose_findings(rows)
        return out

    def error_findings(self, runs, meta, rows) -> list[str]:
        """What the rule's verdicts can be trusted for: power against the margin per cell and the family's error
        rates, simulated (``rows``: named fields)."""
        er = self.error_rates(runs, meta)
        if not er["cells"]:
            return []
        b = er["by_gap"]
        judged = [r for r in rows if r["p_no_harm"] is not None]
        out = [
            ERRORS.format(
                sims=SIMS,
                cells=er["cells"],
                margin=MARGIN,
                break_gap=BREAK_GAP,
                none_at_0=b[0.0]["none"],
                none_at_margin=b[-MARGIN]["none"],
                holm_at_margin=b[-MARGIN]["holm"],
                none_at_break=b[BREAK_GAP]["none"],
            ),
            POWER.format(
                break_gap=BREAK_GAP,
                no_harm_min=min(r["p_no_harm"] for r in judged),
                no_harm_max=max(r["p_no_harm"] for r in judged),
                breaks_min=min(r["p_breaks"] for r in judged),
                breaks_max=max(r["p_breaks"] for r in judged),
                detectable_hi=max(r["detectable"] for r in judged),
                detectable_lo=min(r["detectable"] for r in judged),
            ),
        ]
        if er.get("second_look"):
            sl = er["second_look"]
            n1, n = sl["seeds"]
            out.append(
                SECOND_LOOK.format(
                    first=n1,
                    last=n - 1,
                    cells=", ".join(sl["cells"]),
                    margin=MARGIN,
                    n1=n1,
                    n=n,
                    two=sl["two looks"],
                    one=sl["one look"],
                )
            )
        differ = self.interval_disagreements(runs, meta)
        out.append(INTERVALS.format(differ="; ".join(differ) if differ else "no cell with a verdict"))
        outside = self.outside_bounds(runs, meta)
        if outside:
            moved = [o for o in outside if o["verdict"] != o["verdict in bounds"]]
            out.append(
                BOUNDS.format(
                    left="; ".join(OUTSIDE.format_map(o) for o in outside),
                    moved="verdicts that move: "
                    + "; ".join(f"{o['cell']}: {o['verdict']} → {o['verdict in bounds']}" for o in moved)
                    if moved
                    else UNMOVED.format(margin=MARGIN),
                )
            )
        return out

    def outside_bounds(self, runs, meta) -> list[dict]:
        """Each interval the page shows (the table's, every cell on every seed under the amended outcome; the looks
        table's, each uncorrected cell under both outcomes at each look) that leaves [−1, 1]: ``cell``, ``where``,
        the t-interval ``lo``/``hi``, its clipped ``clo``/``chi`` (``in_bounds``) and the rule's reading of each (a
        verdict from ``min_seeds`` paired seeds, else the direction, which the clipping cannot move)."""
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        out = []
        for key, by_seed in sorted(cells.items(), key=lambda kv: self._order(kv[0])):
            if key == ("fp32", REFERENCE, "none"):
                continue
            shown = [("the table", JUDGE_WINDOW, None)]
            if key[2] == "none":
                for outcome, window in (("original outcome", ORIGINAL_WINDOW), ("amended outcome", JUDGE_WINDOW)):
                    shown.append((f"{outcome} · first look", window, set(FIRST_LOOK)))
                    if set(by_seed) - set(FIRST_LOOK):
                        shown.append((f"{outcome} · second look", window, None))
            for where, window, seeds in shown:
                g = list(self.gaps(by_seed, ref, window, seeds).values())
                if len(g) < 2:
                    continue
                _, lo, hi = mean_ci(g)
                if -BOUND <= lo and hi <= BOUND:
                    continue
                clo, chi = in_bounds(lo, hi)
                judged = len(g) >= NI.RULE.min_seeds
                out.append(
                    {
                        "cell": prose.arm(key[1], key[2], key[0]),
                        "where": where,
                        "lo": lo,
                        "hi": hi,
                        "clo": clo,
                        "chi": chi,
                        "verdict": NI.verdict(lo, hi) if judged else self.cell_verdict(g),
                        "verdict in bounds": NI.verdict(clo, chi) if judged else self.cell_verdict(g),
                    }
                )
        return out

    def interval_disagreements(self, runs, meta) -> list[str]:
        """Cells with a verdict (both outcomes, both looks) whose bounded interval reads otherwise than the rule's
        t-interval."""
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        out = []
        for key, by_seed in sorted(cells.items(), key=lambda kv: self._order(kv[0])):
            for outcome, window in (
                ("the outcome as first committed", ORIGINAL_WINDOW),
                ("the amended outcome", JUDGE_WINDOW),
            ):
                for look, seeds in (("first look", set(FIRST_LOOK)), ("every seed", None)):
                    g = list(self.gaps(by_seed, ref, window, seeds).values())
                    if (
                        key == ("fp32", REFERENCE, "none")
                        or len(g) < NI.RULE.min_seeds
                        or (seeds is None and not set(by_seed) - set(FIRST_LOOK))
                    ):
                        continue
                    _, lo, hi = bounded_mean_ci(g)
                    if NI.verdict(lo, hi) != self.cell_verdict(g):
                        out.append(
                            DISAGREES.format(
                                cell=prose.arm(key[1], key[2], key[0]),
                                outcome=outcome,
                                look=look,
                                n_seeds=prose.seeds(len(g)),
                                rule=self.cell_verdict(g),
                                bounded=NI.verdict(lo, hi),
                            )
                        )
        return out

    def correction_findings(self, runs, meta, rows) -> list[str]:
        """Each correction cell beside the same format uncorrected on the same seeds (a paired contrast, direction
        only while the cells have fewer than ``min_seeds`` seeds; ``rows``: named fields)."""
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        out = []
        for r in rows:
            if r["correction"] == "none" or r["gap"] is None:
                continue
            corrected = self.gaps(cells[(r["train"], r["format"], r["correction"])], ref)
            same = self.gaps(cells.get((r["train"], r["format"], "none"), {}), ref, seeds=set(corrected))
            contrast = [corrected[s] - same[s] for s in same]
            versus = (
                VERSUS.format(
                    same_seeds=prose.seeds(len(same)),
                    uncorrected=statistics.fmean(same.values()),
                    contrast=statistics.fmean(contrast),
                    reading=self.cell_verdict(contrast).split(" (")[0].replace("reference", "uncorrected"),
                )
                if contrast
                else ""
            )
            out.append(CORRECTED.format_map({**r, "paired_seeds": prose.seeds(r["paired"]), "versus": versus}))
        return out

    def pair_findings(self, runs, meta, rows) -> list[str]:
        """The paper's same-dtype pairs (trainer and rollouts in one dtype): each against the FP32/FP32 reference,
        and BF16/BF16 against FP16/FP16 paired by seed (the paper's own comparison; ``rows``: named fields)."""
        holm = self.holm(runs, meta)
        fam = self.family(runs, meta)
        out = [
            PAIR.format_map(
                {
                    **r,
                    "TRAIN": r["train"].upper(),
                    "FORMAT": r["format"].upper(),
                    "paired_seeds": prose.seeds(r["paired"]),
                    "below_zero": below_zero(r),
                }
            )
            for r in rows
            if r["train"] != "fp32" and r["gap"] is not None
        ]
        cells = self.cells(runs, meta)
        bf, fp = cells.get(("bf16", "bf16", "none"), {}), cells.get(("fp16", "fp16", "none"), {})
        gaps = list(self.gaps(bf, fp).values())
        if len(gaps) >= 2:
            m, lo, hi = mean_ci(gaps)
            v = self.cell_verdict(gaps)
            out.append(
                BF16_FP16.format(
                    mean=m,
                    lo=lo,
                    hi=hi,
                    n_seeds=prose.seeds(len(gaps)),
                    sd=statistics.stdev(gaps),
                    reading=BF16_FP16_READING.get(v, v),
                    holm=BF16_FP16_HOLM.format(claims=len(fam), holm=holm[PAIR_CONTRAST])
                    if PAIR_CONTRAST in holm
                    else "",
                )
            )
        return out

    @staticmethod
    def dose_findings(rows) -> list[str]:
        """The x-axis: the dose fixed before training (step 0) against the run average the run's own fate moves
        (``rows``: named fields)."""
        primary = [
            r for r in rows if r["correction"] == "none" and r["train"] == "fp32" and r["dose"] and r["run_mean"]
        ]
        if len(primary) < 2:
            return []
        by_dose = [r["format"] for r in sorted(primary, key=lambda r: r["dose"])]
        by_mean = [r["format"] for r in sorted(primary, key=lambda r: r["run_mean"])]
        moved = "; ".join(DOSE_MOVED.format_map(r) for r in primary if r["format"] != REFERENCE)
        order = (
            SAME_ORDER
            if by_dose == by_mean
            else OTHER_ORDER.format(by_dose=", ".join(by_dose), by_mean=", ".join(by_mean))
        )
        return [DOSE.format(moved=moved, order=order)]
