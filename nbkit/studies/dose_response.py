"""The rollout-precision dose–response: how much π–μ mismatch does RL training take before it breaks?

The trainer runs in FP32 on tiny-arith's sanity set, so only the rollout engine's precision varies: FP32, FP16,
BF16, FP8 (E4M3, E5M2), FP4 (MXFP4, NVFP4) and the synthetic ``e8m<k>`` dial (``nbkit.precision.formats``: note that the
dial
rounds every GEMM's operands *and* outputs and both attention products, where FP8/FP4 round linear operands only),
each with the same seeds and settings. The paper's own pairs (BF16/BF16, FP16/FP16) are marked points. The x-axis,
the *dose*, is each format's mismatch at step 0 (mean per-token |Δ log p| between the FP32 trainer's π and the
format's μ on the first optimiser step's rollouts, drawn with the initial weights), fixed before any training; the
run average, which the run's own fate moves, is a mechanism column. The y-axis is the policy's accuracy on a held-out
set sampled by an FP32 engine (``nbkit.rl.judge``), so "the policy got worse" is told apart from "this format
samples worse".

Primary comparison: held-out (judge) accuracy late in the run, each format without correction against FP32
rollouts of the same seed (paired), mean gap over seeds with a 95 % t-interval; a format *breaks* when the whole
interval lies below −``MARGIN``; it *does no detectable harm* when the interval lies above −``MARGIN``; otherwise
it is *inconclusive* at its seeds. The rule as first committed (8e33050) read the *last* judgment; after training
had begun the outcome was amended to the mean of the last two judgments (baa750f), and seeds 5–6 were added to four
formats after the first look: both are on the stored card's ``amendments`` (``nbkit.studies.amendments``), and the
page shows the original and amended outcome, first and second look, side by side. A cell with fewer than five paired
seeds reports its direction only; the family of claims is also read after Holm's adjustment; power and error rates
are simulated at each cell's own SD (``nbkit.stats.noninferiority``).

``nbkit study dose_response_tiny_arith run [--shard i/n]`` trains the grid (the primary contrast first, seed by seed, so a
cut-off study still covers every format), ``... store`` stores the finished runs under ``data/results/``.

The study as data (grid constants, rule, amendments, outcome) is ``nbkit.studies.dose_response_rule``; its page's
sentences are templates over named fields in ``nbkit.studies.dose_response_findings``.
"""

from __future__ import annotations

import functools
import statistics

from nbkit.records import schema
from nbkit.stats import noninferiority as NI
from nbkit.stats.stats import mean_ci
from nbkit.studies import prose
from nbkit.studies.base import GridStudy, add_run, group_seeds
from nbkit.studies.dose_response_findings import COLUMNS, Findings, below_zero, in_bounds
from nbkit.studies.dose_response_rule import (
    AMENDMENTS,
    BREAK_GAP,
    CORRECTED,
    FIRST_LOOK,
    JUDGE_WINDOW,
    LADDER,
    MARGIN,
    MORE_SEEDS,
    ORIGINAL_WINDOW,
    PAIR_CONTRAST,
    PAIRS,
    REFERENCE,
    RULE_RECORD,
    SIMS,
    STUDY,
    TRAINING_STARTED,
    TRUE_GAPS,
    base_config,
    final_judge,
    step0_mismatch,
)


def _mean_of(rows: list[dict], key: str) -> float | None:
    return schema.mean(schema.series(rows, key))


def verdict(lo: float, hi: float, margin: float = MARGIN) -> str:
    """The rule's reading of a gap's 95 % interval (``nbkit.stats.noninferiority.verdict``)."""
    return NI.verdict(lo, hi, margin)


class DoseResponse(Findings, GridStudy):
    """The ladder as a stored study. Options: ``formats`` (primary, no correction), ``seeds``, ``corrected`` (a
    dict of ``formats`` and ``corrections`` run on ``corrected_seeds``), ``pairs`` ([train, rollout] marked points),
    ``steps``, ``output_dir`` and ``overrides`` (any ``RLConfig`` field)."""

    name = STUDY
    title = "Rollout-precision dose–response: the mismatch RL training takes before it breaks"
    question = (
        "With an FP32 trainer, how far can the rollout engine's precision fall (FP32 → FP16 → BF16 → FP8 → FP4 "
        "→ the e8m<k> dial) before the trained policy gets worse, and which correction rescues it? Primary "
        "comparison: held-out accuracy late in the run (FP32-sampled judge), each format without correction "
        "against FP32 rollouts of the same seed; mean paired gap over seeds with a 95 % t-interval; a format "
        f"breaks when the whole interval lies below −{MARGIN:g}, does no detectable harm when it lies above "
        f"−{MARGIN:g}, and is inconclusive otherwise. The outcome as first committed was the last judgment; "
        "it was amended after training began (the record below says when, and what it moved)."
    )
    statistic = (
        "judge = accuracy on 351 held-out problems × 1 sample drawn by an FP32 engine; outcome = the mean of "
        "the judgments at steps 40 and 50 (as amended; 'original outcome' = the step-50 judgment alone); "
        "gap = format − FP32 paired by seed, mean over seeds; CI = the 95 % t-interval over seeds, the one "
        "the verdict reads (as amended; it was first shown bounded in (−1, 1): the findings name any cell where that "
        "interval reads otherwise); beside it, the same interval kept inside [−1, 1], the bounds of an accuracy "
        "gap (clipped, as amended after the results: the same verdicts); verdict = the rule on the t-interval, "
        f"only for cells with ≥ {NI.RULE.min_seeds} paired seeds (fewer: direction only); verdict (Holm) = "
        "the same claims with the family-wise error over every claim on the page held at 5 % (Holm); own "
        "SD = the SD of that cell's paired gaps (no pooling); breaks detectable at = the true gap the rule "
        "calls a break with 80 % power; P(no harm | gap 0), P(breaks | gap −0.12) = the rule's chances at "
        "those true gaps, simulated at the cell's own SD and seeds; dose = mismatch (mean per-token "
        "|Δ log p|, π FP32 vs μ) of the first optimiser step's rollouts, before any update; run mean = the "
        "same over every step and seed (a mechanism: the run's fate moves it); training accuracy = last "
        "5-step mean. Seeds 5 and 6 of FP32, NVFP4, MXFP4 and e8m2 were added after their first five seeds "
        "had left them inconclusive: a second, sequential look."
    )
    notebook = "06_dose_response"
    output_dir = f"runs/{STUDY}"
    amendments = AMENDMENTS
    amendment_record = {"rule": RULE_RECORD, "training_started": TRAINING_STARTED}
    toy = {
        "formats": ["fp32", "mxfp4"],
        "seeds": [0],
        "steps": 1,
        "pairs": [],
        "more_seeds": {},
        "corrected": {"formats": ["mxfp4"], "corrections": ["icepop"]},
        "corrected_seeds": [0],
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {
            "formats": list(LADDER),
            "seeds": [0, 1, 2, 3, 4],
            "steps": 50,
            "corrected": {k: list(v) for k, v in CORRECTED.items()},
            "corrected_seeds": [0, 1, 2],
            "pairs": [list(p) for p in PAIRS],
            "more_seeds": {k: list(v) for k, v in MORE_SEEDS.items()},
        }

    def grid(
        self,
        formats=LADDER,
        seeds=(0, 1, 2, 3, 4),
        steps: int = 50,
        corrected: dict | None = None,
        corrected_seeds=(0, 1, 2),
        pairs=PAIRS,
        output_dir: str | None = None,
        overrides: dict | None = None,
        more_seeds: dict | None = None,
    ) -> dict:
        from nbkit.precision import formats as F

        formats = [F.validate(f) for f in formats]
        corrected = CORRECTED if corrected is None else corrected
        base = base_config(max_steps=steps, output_dir=output_dir or self.output_dir, **(overrides or {}))
        out = {}
        add = functools.partial(add_run, out, base)

        # order = priority (a cut-off study has the primary contrast first): every format without correction, seed
        # by seed; then the corrections; then the paper's pairs
        for seed in seeds:
            for f in formats:
                add(f"{f}-none-s{seed}", rollout_format=f, seed=seed)
        for seed in corrected_seeds:
            for f in corrected.get("formats", ()):
                for c in corrected.get("corrections", ()):
                    add(f"{F.validate(f)}-{c}-s{seed}", rollout_format=f, correction=c, seed=seed)
        for seed in seeds:
            for train, rollout in pairs:
                add(f"{train}-train-{rollout}-s{seed}", train_dtype=train, rollout_dtype=rollout, seed=seed)
        more = MORE_SEEDS if more_seeds is None else more_seeds
        for seed in more.get("seeds", ()):  # last: added once five seeds had left these formats inconclusive
            for f in more.get("formats", ()):
                if f"{F.validate(f)}-none-s{seed}" not in out:
                    add(f"{F.validate(f)}-none-s{seed}", rollout_format=f, seed=seed)
        return out

    def coords(self, config: dict) -> dict:
        fmt = config.get("rollout_format") or config.get("rollout_dtype") or config["train_dtype"]
        return {
            "format": fmt,
            "train": config["train_dtype"],
            "correction": config.get("correction") or "none",
            "seed": int(config["seed"]),
        }

    # -- read half --------------------------------------------------------------------------------------------
    def cells(self, runs, meta) -> dict[tuple[str, str, str], dict[int, list[dict]]]:
        """``(train, format, correction) → seed → rows``."""
        return group_seeds(runs, meta, lambda m: (m["train"], m["format"], m["correction"]))

    # -- the outcome and its gaps --------------------------------------------------------------------------------
    def gaps(
        self, by_seed: dict[int, list[dict]], ref: dict[int, list[dict]], window: int = JUDGE_WINDOW, seeds=None
    ) -> dict[int, float]:
        """``seed → gap`` (cell − reference, same seed) of the outcome over the last ``window`` judgments (2: the
        amended outcome, 1: the original), on ``seeds`` (None: every seed both sides have)."""
        out = {}
        for s in sorted(by_seed):
            if seeds is not None and s not in seeds or s not in ref:
                continue
            a, b = final_judge(by_seed[s], window), final_judge(ref[s], window)
            if a is not None and b is not None:
                out[s] = a - b
        return out

    @staticmethod
    def cell_verdict(gaps: list[float], rule: NI.Rule = NI.RULE) -> str:
        """The rule on a cell's paired gaps: its direction only below ``rule.min_seeds`` seeds, else the verdict of
        the 95 % t-interval."""
        if len(gaps) < 2:
            return "one seed: no interval"
        if len(gaps) < rule.min_seeds:
            return f"{NI.direction(statistics.fmean(gaps))} ({prose.seeds(len(gaps))})"
        _, lo, hi = mean_ci(gaps, rule.level)
        return NI.verdict(lo, hi, rule.margin)

    def family(self, runs, meta, window: int = JUDGE_WINDOW) -> dict[str, list[float]]:
        """The claims the page makes (every cell with a verdict: ≥ ``min_seeds`` paired seeds), ``name → gaps``: the
        formats and the paper's pairs against FP32/FP32, and BF16/BF16 against FP16/FP16 paired by seed."""
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        out = {}
        for key, by_seed in sorted(cells.items(), key=lambda kv: self._order(kv[0])):
            if key == ("fp32", REFERENCE, "none"):
                continue
            g = list(self.gaps(by_seed, ref, window).values())
            if len(g) >= NI.RULE.min_seeds:
                out[prose.arm(key[1], key[2], key[0])] = g
        bf, fp = cells.get(("bf16", "bf16", "none"), {}), cells.get(("fp16", "fp16", "none"), {})
        g = list(self.gaps(bf, fp, window).values())
        if len(g) >= NI.RULE.min_seeds:
            out[PAIR_CONTRAST] = g
        return out

    def holm(self, runs, meta, window: int = JUDGE_WINDOW) -> dict[str, str]:
        """``name → verdict`` of the family's claims after Holm's adjustment (family-wise error 5 %)."""
        fam = self.family(runs, meta, window)
        return dict(zip(fam, NI.holm_verdicts(list(fam.values()))))

    def table(self, runs, meta) -> list[dict]:
        """``cell_rows`` under the page's headers (``dose_response_findings.COLUMNS``)."""
        return prose.display(self.cell_rows(runs, meta), COLUMNS)

    def cell_rows(self, runs, meta) -> list[dict]:
        """One row of named fields (``COLUMNS``' keys) per cell: the outcome, its paired gap to FP32 with the rule's
        interval and verdicts, the rule's power at the cell's own SD, and the mechanism's means."""
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        holm = self.holm(runs, meta)
        rows = []
        for (train, fmt, corr), by_seed in sorted(cells.items(), key=lambda kv: self._order(kv[0])):
            finals = {s: v for s, r in by_seed.items() if (v := final_judge(r)) is not None}
            all_rows = [x for r in by_seed.values() for x in r]
            row = {
                "train": train,
                "format": fmt,
                "correction": corr,
                "seeds": len(by_seed),
                "dose": schema.mean([x for r in by_seed.values() if (x := step0_mismatch(r)) is not None]),
                "judge": statistics.fmean(finals.values()) if finals else None,
            }
            gaps = list(self.gaps(by_seed, ref).values())
            if (train, fmt, corr) != ("fp32", REFERENCE, "none") and gaps:
                m, lo, hi = mean_ci(gaps)  # the t-interval the verdict reads (as amended: ONE_CI)
                sd = statistics.stdev(gaps) if len(gaps) >= 2 else float("nan")
                judged = len(gaps) >= NI.RULE.min_seeds and sd > 0
                original = list(self.gaps(by_seed, ref, ORIGINAL_WINDOW).values())
                row |= {
                    "gap": m,
                    "ci_low": lo,
                    "ci_high": hi,
                    "ci_bounded": list(in_bounds(lo, hi)) if lo == lo else None,  # as amended: BOUNDS_AMENDMENT
                    "paired": len(gaps),
                    "sd": sd,
                    "verdict": self.cell_verdict(gaps),
                    "holm": holm.get(prose.arm(fmt, corr, train), "—"),
                    "original": self.cell_verdict(original) if original else "—",
                    "detectable": NI.break_detectable(sd, len(gaps)) if judged else None,
                    "p_no_harm": NI.rates(0.0, sd, len(gaps))[NI.NO_HARM] if judged else None,
                    "p_breaks": NI.rates(BREAK_GAP, sd, len(gaps))[NI.BREAKS] if judged else None,
                }
            else:
                reference = (train, fmt, corr) == ("fp32", REFERENCE, "none")
                row |= {
                    **dict.fromkeys(("gap", "ci_low", "ci_high", "ci_bounded"), None),
                    "paired": 0,
                    "sd": None,
                    "verdict": "reference" if reference else "no fp32 twin" if finals else "not judged",
                    "holm": "—",
                    "original": "—",
                    **dict.fromkeys(("detectable", "p_no_harm", "p_breaks"), None),
                }
            growth = [
                (schema.last_window(r, schema.TOKEN_ABS_LOGP_DIFF) or 0)
                / (schema.first_window(r, schema.TOKEN_ABS_LOGP_DIFF) or float("nan"))
                for r in by_seed.values()
            ]
            audit = {
                str(x.get(schema.AUDIT_ROLLOUT_FORMAT) or x.get(schema.AUDIT_ROLLOUT_DTYPE))
                for x in all_rows
                if schema.ACCURACY in x
            }
            row |= {
                "run_mean": _mean_of(all_rows, schema.TOKEN_ABS_LOGP_DIFF),
                "growth": statistics.fmean(growth) if growth else None,
                "train_accuracy": schema.mean(
                    [x for r in by_seed.values() if (x := schema.last_window(r, schema.ACCURACY)) is not None]
                ),
                "judge0": _mean_of(
                    [x for r in by_seed.values() for x in r if x.get(schema.STEP) == 0], schema.JUDGE_ACCURACY
                ),
                "masked": _mean_of(all_rows, schema.IS_MASKED_TOKEN_FRACTION)
                or _mean_of(all_rows, schema.IS_TRUNCATED_TOKEN_FRACTION),
                "phantom": _mean_of(all_rows, schema.PHANTOM_FRACTION),
                "ess_token": _mean_of(all_rows, "mismatch/ess_token"),
                "ess_seq": _mean_of(all_rows, "mismatch/ess_seq"),
                "grad_norm": _mean_of(all_rows, schema.GRAD_NORM),
                "entropy": _mean_of(all_rows, schema.ENTROPY),
                "s_step": _mean_of(all_rows, schema.TIME_STEP),
                "audit": ", ".join(sorted(audit)),
            }
            rows.append(row)
        return rows

    @staticmethod
    def _order(key):
        train, fmt, corr = key
        ladder = list(LADDER)
        return (train != "fp32", ladder.index(fmt) if fmt in ladder else 99, fmt, corr != "none", corr)

    def looks(self, runs, meta) -> list[dict]:
        """Each cell without correction under the original outcome (last judgment) and the amended one (mean of the
        last two), at the first look (seeds ``FIRST_LOOK``) and, where seeds were added after it, the second look
        (every stored seed): mean gap, the rule's 95 % t-interval and its verdict."""
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        out = []

        def cell(by_seed, window, seeds):
            g = list(self.gaps(by_seed, ref, window, seeds).values())
            if len(g) < 2:
                return "—"
            m, lo, hi = mean_ci(g)
            kept = in_bounds(lo, hi)
            bounded = f" (in [−1, 1]: [{kept[0]:+.3f}, {kept[1]:+.3f}])" if kept != (lo, hi) else ""
            return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]{bounded} {self.cell_verdict(g)}"

        for key, by_seed in sorted(cells.items(), key=lambda kv: self._order(kv[0])):
            if key[2] != "none" or key == ("fp32", REFERENCE, "none"):
                continue
            more = sorted(set(by_seed) - set(FIRST_LOOK))
            row = {"train": key[0], "format": key[1]}
            for label, window in (("original", ORIGINAL_WINDOW), ("amended", JUDGE_WINDOW)):
                row[f"{label} outcome · first look ({prose.seeds(len(set(by_seed) & set(FIRST_LOOK)))})"] = cell(
                    by_seed, window, set(FIRST_LOOK)
                )
            for label, window in (("original", ORIGINAL_WINDOW), ("amended", JUDGE_WINDOW)):
                row[f"{label} outcome · second look, sequential"] = (
                    f"{cell(by_seed, window, None)} ({prose.seeds(len(by_seed))})" if more else "— (no seeds added)"
                )
            out.append({k.replace(" (5 seeds)", " (seeds 0–4)"): v for k, v in row.items()})
        return out

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """``amendment key → the verdicts it moved`` ("cell: before → after"), computed from the runs: the outcome
        change (last judgment → mean of the last two, every stored seed, the rule as it stood: a verdict from two
        seeds up); the added seeds (first look → every seed, amended outcome); the re-analysis (the rule as it stood
        → direction only below five seeds, and the family-wise (Holm) reading of the claims); the intervals kept inside
        [−1, 1] (``outside_bounds``: each shown interval that leaves them, and its reading, which cannot move)."""
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})

        def plain(g):  # the rule as it stood before the re-analysis
            if len(g) < 2:
                return "one seed: no interval"
            _, lo, hi = mean_ci(g)
            return NI.verdict(lo, hi)

        out = {"outcome": [], "seeds": [], "reanalysis": [], "worse_than_fp32": [], "one_ci": []}
        out["bounds"] = [  # each shown interval kept inside [−1, 1], beside the one computed
            f"shown interval, {o['cell']} ({o['where']}): {o['lo']:+.3f} to {o['hi']:+.3f} → {o['clo']:+.3f} to "
            f"{o['chi']:+.3f} beside it ({o['verdict']}"
            + (f" → {o['verdict in bounds']})" if o["verdict in bounds"] != o["verdict"] else ", unchanged)")
            for o in self.outside_bounds(runs, meta)
        ]
        out["one_ci"] = [
            f"shown interval: {d.replace(' by the rule, ', ' by the t-interval, ')}"
            for d in self.interval_disagreements(runs, meta)
        ]
        for r in self.cell_rows(runs, meta):  # the reading added beside the verdicts (no verdict moved)
            if below_zero(r):
                out["worse_than_fp32"].append(
                    f"{prose.arm(r['format'], r['correction'], r['train'])}: {r['verdict']} → {r['verdict']}, worse "
                    "than FP32 (size undecided)"
                )
        holm = self.holm(runs, meta)
        for key, by_seed in sorted(cells.items(), key=lambda kv: self._order(kv[0])):
            if key == ("fp32", REFERENCE, "none"):
                continue
            name = prose.arm(key[1], key[2], key[0])
            a, b = (plain(list(self.gaps(by_seed, ref, w).values())) for w in (ORIGINAL_WINDOW, JUDGE_WINDOW))
            if a != b:
                out["outcome"].append(f"{name}: {a} → {b}")
            if set(by_seed) - set(FIRST_LOOK):
                first = plain(list(self.gaps(by_seed, ref, JUDGE_WINDOW, set(FIRST_LOOK)).values()))
                if first != b:
                    out["seeds"].append(f"{name}: {first} → {b}")
            now = self.cell_verdict(list(self.gaps(by_seed, ref).values()))
            if now != b:
                out["reanalysis"].append(f"{name}: {b} → {now.split(' (')[0]}")
            if holm.get(name, b) != b:
                out["reanalysis"].append(f"{name}, family-wise (Holm): {b} → {holm[name]}")
        bf, fp = cells.get(("bf16", "bf16", "none"), {}), cells.get(("fp16", "fp16", "none"), {})
        cont = list(self.gaps(bf, fp).values())
        if PAIR_CONTRAST in holm and holm[PAIR_CONTRAST] != plain(cont):
            out["reanalysis"].append(f"{PAIR_CONTRAST}, family-wise (Holm): {plain(cont)} → {holm[PAIR_CONTRAST]}")
        return out

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        return [
            (
                "The outcome as first committed (last judgment) and as amended (mean of the last two), at the first "
                "look (seeds 0–4) and the second (seeds 5–6 added after the first look; a sequential look, not a "
                "fresh experiment)",
                self.looks(runs, meta),
            )
        ]

    # -- sentences --------------------------------------------------------------------------------------------
    def error_rates(self, runs, meta) -> dict:
        """The rule's error rates by simulation over the family of claims the page makes (each cell at its own SD
        and seeds, normal seed noise, cells independent): per true gap in ``TRUE_GAPS``, the chance of at least one
        false claim, unadjusted and after Holm; and the sequential look's one-sided error at the margin."""
        fam = self.family(runs, meta)
        spec = [(statistics.stdev(g), len(g)) for g in fam.values() if statistics.stdev(g) > 0]
        out = {"cells": len(spec), "by_gap": {}}
        if not spec:
            return out
        for gap in TRUE_GAPS:
            out["by_gap"][gap] = {adj: NI.familywise(spec, gap, adjust=adj, sims=SIMS) for adj in ("none", "holm")}
        second = sorted(
            prose.arm(k[1], k[2], k[0])
            for k, by_seed in self.cells(runs, meta).items()
            if k[2] == "none" and k[0] == "fp32" and k[1] != REFERENCE and set(by_seed) - set(FIRST_LOOK)
        )
        if second:  # at a true gap of exactly −margin the chance is the same at any SD (the t-statistic's law)
            n1 = len(FIRST_LOOK)
            n = n1 + len(
                set.union(*(set(b) for k, b in self.cells(runs, meta).items() if prose.arm(k[1], k[2], k[0]) in second))
                - set(FIRST_LOOK)
            )
            out["second_look"] = {
                "cells": second,
                "seeds": (n1, n),
                "two looks": NI.rates(-MARGIN, 1.0, n, looks=(n1,), sims=SIMS)[NI.NO_HARM],
                "one look": NI.rates(-MARGIN, 1.0, n, sims=SIMS)[NI.NO_HARM],
            }
        return out

    def figure(self, runs, meta):
        from nbkit.plots.dose_response import dose_response

        return dose_response(self.table(runs, meta))
