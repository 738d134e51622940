"""The rollout-precision dose–response: how much π–μ mismatch does RL training take before it breaks?

The trainer runs in FP32 on tiny-arith's sanity set, so only the rollout engine's precision varies: FP32, FP16,
BF16, FP8 (E4M3, E5M2), FP4 (MXFP4, NVFP4) and the synthetic ``e8m<k>`` dial (``nbkit.formats``), each with the
same seeds and settings. The paper's own pairs (BF16/BF16, FP16/FP16) are marked points. The x-axis is the mismatch
each format *measured* during training (mean per-token |Δ log p| between the FP32 trainer's π and the format's μ);
the y-axis is the policy's accuracy on a held-out set sampled by an FP32 engine (``nbkit.rl.judge``), so "the
policy got worse" is told apart from "this format samples worse".

Primary comparison, fixed before any result: held-out (judge) accuracy late in the run (the mean of the last two
judgments, steps 40 and 50), each format without
correction against FP32 rollouts of the same seed (paired), mean gap over seeds with a 95 % t-interval; a format
*breaks* when the whole interval lies below −``MARGIN``; it *does no detectable harm* when the interval lies above
−``MARGIN``; otherwise the run is *inconclusive* at its seeds (the table says which gap it could have detected).

``nbkit study dose_response_tiny_arith run [--shard i/n]`` trains the grid (the primary contrast first, seed by seed, so a
cut-off study still covers every format), ``... store`` stores the finished runs under ``data/results/``.
"""
from __future__ import annotations

import statistics
from dataclasses import replace

from nbkit import schema
from nbkit.stats import detectable_gap, mean_ci, seeds_needed
from nbkit.studies.base import GridStudy

STUDY = "dose_response_tiny_arith"
"""The stored study's folder name under ``data/results``."""
FORMATS = ("fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "nvfp4", "mxfp4", "e8m2", "e8m1")
"""The ladder of the primary contrast, ordered by the mismatch measured on tiny-arith in a 1-step probe."""
PAIRS = (("bf16", "bf16"), ("fp16", "fp16"))
"""The paper's same-format pairs (train, rollout), marked on the figure (no correction)."""
CORRECTED = {"formats": ("bf16", "fp8-e5m2", "mxfp4", "e8m2"),
             "corrections": ("token_tis", "seq_mis", "icepop", "mu_old")}
"""Where the corrections run (the formats around the break, BF16, FP8): ``nbkit.rl.algorithms.CORRECTIONS``."""
MORE_SEEDS = {"formats": ("fp32", "nvfp4", "mxfp4", "e8m2"), "seeds": (5, 6)}
"""Seeds added after the first five, without correction, for the formats whose verdict was inconclusive at five
seeds (and FP32, their twin): 7 seeds detect a 0.05 gap at the measured noise. Chosen after seeing the first five
seeds' verdicts, which the findings say (a sequential look inflates the rule's error rate somewhat)."""
MARGIN = 0.05
"""The gap (accuracy) the rule calls a break."""
REFERENCE = "fp32"


def base_config(**overrides):
    """One run of the study: FP32 trainer, HF rollout engine, grpo on the tiny-arith sanity set, judged every 10
    steps on the held-out set: ``SANITY_RUN`` with these changes (``overrides`` replace any field)."""
    from nbkit.rl.config import config_from

    return config_from({"train_dtype": "fp32", "rollout_engine": "hf", "steps": 50, "judge_every": 10,
                        "output_dir": f"runs/{STUDY}", "checkpoint_every": 0, **overrides})


JUDGE_WINDOW = 2
"""Judgments averaged into the primary outcome: the last two (steps 40 and 50 of a 50-step run judged every 10)."""


def final_judge(rows: list[dict], window: int = JUDGE_WINDOW) -> float | None:
    """The primary outcome: the mean held-out accuracy of the run's last ``window`` judgments after step 0 (two
    judgments halve the judge's sampling variance; both are late in the run)."""
    judged = [r[schema.JUDGE_ACCURACY] for r in rows if schema.JUDGE_ACCURACY in r and r.get(schema.STEP, 1) > 0]
    return statistics.fmean(judged[-window:]) if judged else None


def _mean_of(rows: list[dict], key: str) -> float | None:
    return schema.mean(schema.series(rows, key))


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def _below_zero(row: dict) -> str:
    """What an inconclusive interval still says when it lies wholly below 0 (worse than FP32, size undecided)."""
    hi = row.get("gap CI high")
    if row.get("verdict") == "inconclusive" and hi is not None and hi == hi and hi < 0:
        return (" by the rule, though its interval lies wholly below 0: worse than FP32, but not surely by more "
                f"than {MARGIN:g}")
    return ""


def verdict(lo: float, hi: float, margin: float = MARGIN) -> str:
    """The pre-registered reading of a gap's 95 % interval."""
    if lo != lo or hi != hi:
        return "one seed: no interval"
    if hi < -margin:
        return "breaks"
    if lo > -margin:
        return "no detectable harm"
    return "inconclusive"


class DoseResponse(GridStudy):
    """The ladder as a stored study. Options: ``formats`` (primary, no correction), ``seeds``, ``corrected`` (a
    dict of ``formats`` and ``corrections`` run on ``corrected_seeds``), ``pairs`` ([train, rollout] marked points),
    ``steps``, ``output_dir`` and ``overrides`` (any ``RLConfig`` field)."""

    name = STUDY
    title = "Rollout-precision dose–response: the mismatch RL training takes before it breaks"
    question = ("With an FP32 trainer, how far can the rollout engine's precision fall (FP32 → FP16 → BF16 → FP8 → FP4 "
                "→ the e8m<k> dial) before the trained policy gets worse, and which correction rescues it? Primary "
                "comparison, stated before the results: held-out accuracy late in the run (FP32-sampled judge, mean of "
                "the last two judgments), each format without correction against FP32 rollouts of the same seed; mean paired gap over seeds with a "
                f"95 % t-interval; a format breaks when the whole interval lies below −{MARGIN:g}, does no detectable "
                f"harm when it lies above −{MARGIN:g}, and is inconclusive otherwise.")
    statistic = ("judge = accuracy on 351 held-out problems × 1 sample drawn by an FP32 engine, mean of the judgments "
                 "at steps 40 and 50; gap = "
                 "format − FP32 paired by seed, mean and 95 % t-interval over seeds; detectable = the gap a paired "
                 "t-test at those seeds finds with 80 % power given the measured SD; mismatch = mean per-token "
                 "|Δ log p| (π FP32 vs μ) over steps and seeds; training accuracy = last 5-step mean. Seeds 5 and 6 of "
                 "FP32, NVFP4, MXFP4 and e8m2 were added after their first five seeds had left them inconclusive "
                 "(a second look, which raises the rule's error rate somewhat).")
    notebook = "06_dose_response"
    output_dir = f"runs/{STUDY}"
    toy = {"formats": ["fp32", "mxfp4"], "seeds": [0], "steps": 1, "pairs": [], "more_seeds": {},
           "corrected": {"formats": ["mxfp4"], "corrections": ["icepop"]}, "corrected_seeds": [0],
           "overrides": {"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8, "judge_every": 0}}

    def defaults(self) -> dict:
        return {"formats": list(FORMATS), "seeds": [0, 1, 2, 3, 4], "steps": 50,
                "corrected": {k: list(v) for k, v in CORRECTED.items()}, "corrected_seeds": [0, 1, 2],
                "pairs": [list(p) for p in PAIRS], "more_seeds": {k: list(v) for k, v in MORE_SEEDS.items()}}

    def grid(self, formats=FORMATS, seeds=(0, 1, 2, 3, 4), steps: int = 50, corrected: dict | None = None,
             corrected_seeds=(0, 1, 2), pairs=PAIRS, output_dir: str | None = None,
             overrides: dict | None = None, more_seeds: dict | None = None) -> dict:
        from nbkit import formats as F

        formats = [F.validate(f) for f in formats]
        corrected = CORRECTED if corrected is None else corrected
        base = base_config(steps=steps, output_dir=output_dir or self.output_dir, **(overrides or {}))
        out = {}

        def add(label, **kw):
            out[label] = replace(base, output_dir=str(base.out / label), **kw)  # (replace re-validates)

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
        return {"format": fmt, "train": config["train_dtype"], "correction": config.get("correction") or "none",
                "seed": int(config["seed"])}

    # -- read half --------------------------------------------------------------------------------------------
    def cells(self, runs, meta) -> dict[tuple[str, str, str], dict[int, list[dict]]]:
        """``(train, format, correction) → seed → rows``."""
        out: dict = {}
        for label, rows in runs.items():
            m = meta[label]
            out.setdefault((m["train"], m["format"], m["correction"]), {})[m["seed"]] = rows
        return out

    def table(self, runs, meta) -> list[dict]:
        cells = self.cells(runs, meta)
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        ref_final = {s: final_judge(r) for s, r in ref.items()}
        rows = []
        for (train, fmt, corr), by_seed in sorted(cells.items(), key=lambda kv: self._order(kv[0])):
            finals = {s: final_judge(r) for s, r in by_seed.items()}
            finals = {s: v for s, v in finals.items() if v is not None}
            gaps = [finals[s] - ref_final[s] for s in sorted(finals) if ref_final.get(s) is not None]
            all_rows = [x for r in by_seed.values() for x in r]
            row = {"train": train, "format": fmt, "correction": corr, "seeds": len(by_seed),
                   "mismatch |Δ log p|": _mean_of(all_rows, schema.TOKEN_ABS_LOGP_DIFF),
                   "judge final (mean)": statistics.fmean(finals.values()) if finals else None}
            if (train, fmt, corr) != ("fp32", REFERENCE, "none") and len(gaps) >= 1:
                m, lo, hi = mean_ci(gaps)
                sd = statistics.stdev(gaps) if len(gaps) >= 2 else float("nan")
                row.update({"gap vs fp32": m, "gap CI low": lo, "gap CI high": hi, "paired seeds": len(gaps),
                            "detectable gap (80 %)": detectable_gap(sd, len(gaps)) if sd == sd else None,
                            "verdict": verdict(lo, hi)})
            else:
                row.update({"gap vs fp32": None, "gap CI low": None, "gap CI high": None, "paired seeds": 0,
                            "detectable gap (80 %)": None, "verdict": "reference" if (train, fmt, corr) ==
                            ("fp32", REFERENCE, "none") else "not judged" if not finals else "no fp32 twin"})
            growth = [(schema.last_window(r, schema.TOKEN_ABS_LOGP_DIFF) or 0) /
                      (schema.first_window(r, schema.TOKEN_ABS_LOGP_DIFF) or float("nan")) for r in by_seed.values()]
            row.update({
                "train accuracy (last 5)": schema.mean([x for r in by_seed.values()
                                                        if (x := schema.last_window(r, schema.ACCURACY)) is not None]),
                "judge step 0": _mean_of([x for r in by_seed.values() for x in r if x.get(schema.STEP) == 0],
                                         schema.JUDGE_ACCURACY),
                "mismatch growth (last/first 5)": statistics.fmean(growth) if growth else None,
                "IS masked/truncated tokens": _mean_of(all_rows, schema.IS_MASKED_TOKEN_FRACTION)
                or _mean_of(all_rows, schema.IS_TRUNCATED_TOKEN_FRACTION),
                "phantom clip": _mean_of(all_rows, schema.PHANTOM_FRACTION),
                "ESS token": _mean_of(all_rows, "mismatch/ess_token"), "ESS seq": _mean_of(all_rows, "mismatch/ess_seq"),
                "grad norm": _mean_of(all_rows, schema.GRAD_NORM), "entropy": _mean_of(all_rows, schema.ENTROPY),
                "s/step": _mean_of(all_rows, schema.TIME_STEP),
                "format ran (audit)": ", ".join(sorted({str(x.get(schema.AUDIT_ROLLOUT_FORMAT) or
                                                            x.get(schema.AUDIT_ROLLOUT_DTYPE)) for x in all_rows
                                                        if schema.ACCURACY in x})),
            })
            rows.append(row)
        return rows

    @staticmethod
    def _order(key):
        train, fmt, corr = key
        ladder = list(FORMATS)
        return (train != "fp32", ladder.index(fmt) if fmt in ladder else 99, fmt, corr != "none", corr)

    def noise(self, runs, meta, rows: list[dict] | None = None) -> dict:
        """The measured noise the power statement uses: SD of the paired gap (pooled over formats without
        correction), the gap detectable at the study's seeds and the seeds a 0.05 gap needs."""
        table = [r for r in (rows if rows is not None else self.table(runs, meta))
                 if r["correction"] == "none" and r["paired seeds"] >= 2
                 and r["train"] == "fp32"]
        cells = self.cells(runs, meta)
        ref = {s: final_judge(r) for s, r in cells.get(("fp32", REFERENCE, "none"), {}).items()}
        variances, n = [], []
        for r in table:
            by_seed = cells[(r["train"], r["format"], r["correction"])]
            gaps = [final_judge(v) - ref[s] for s, v in by_seed.items() if ref.get(s) is not None
                    and final_judge(v) is not None]
            if len(gaps) >= 2 and r["verdict"] != "breaks":
                variances.append(statistics.variance(gaps))
                n.append(len(gaps))
        if not variances:
            return {}
        sd = statistics.fmean(variances) ** 0.5
        return {"sd": sd, "cells": len(variances), "seeds": min(n), "detectable": detectable_gap(sd, min(n)),
                "seeds for 0.05": seeds_needed(sd, MARGIN)}

    def findings(self, runs, meta, rows) -> list[str]:
        out = []
        primary = [r for r in rows if r["correction"] == "none" and r["train"] == "fp32" and r["format"] != REFERENCE]
        for r in primary:
            if r["gap vs fp32"] is None:
                continue
            ci = (f"95 % CI {r['gap CI low']:+.3f} to {r['gap CI high']:+.3f}" if r["gap CI low"] == r["gap CI low"]
                  else "one seed, no interval")
            out.append(f"{r['format']} rollouts (mismatch {r['mismatch |Δ log p|']:.2g} per token): held-out accuracy "
                       f"{r['judge final (mean)']:.3f}, gap to FP32 {r['gap vs fp32']:+.3f} ({ci}, "
                       f"{_seeds(r['paired seeds'])}): {r['verdict']}{_below_zero(r)}.")
        broken = [r["format"] for r in primary if r["verdict"] == "breaks"]
        out.append("Formats that break by the rule: " + (", ".join(broken) if broken else "none") +
                   f" (of {len(primary)} tested; with no true gap the rule's one-sided error is 2.5 % per format).")
        for r in rows:
            if r["correction"] != "none" and r["gap vs fp32"] is not None:
                plain = next((p for p in rows if p["format"] == r["format"] and p["correction"] == "none"
                              and p["train"] == r["train"]), None)
                versus = f" (uncorrected {plain['gap vs fp32']:+.3f})" if plain and plain["gap vs fp32"] is not None else ""
                out.append(f"{r['format']} + {r['correction']}: gap to FP32 {r['gap vs fp32']:+.3f}{versus}, "
                           f"{_seeds(r['paired seeds'])}: {r['verdict']}{_below_zero(r)}.")
        out += self.pair_findings(runs, meta, rows)
        noise = self.noise(runs, meta, rows)  # (the table findings was given, not computed again)
        if noise:
            out.append(f"Noise: one seed's paired gap has SD {noise['sd']:.3f} (pooled over {noise['cells']} formats that "
                       f"do not break); at {noise['seeds']} seeds the experiment detects a gap of "
                       f"{noise['detectable']:.3f} with 80 % power; a 0.05 gap needs {noise['seeds for 0.05']} seeds.")
        return out

    def pair_findings(self, runs, meta, rows) -> list[str]:
        """The paper's same-dtype pairs (trainer and rollouts in one dtype): each against the FP32/FP32 reference,
        and BF16/BF16 against FP16/FP16 paired by seed (the paper's own comparison)."""
        out = []
        for r in rows:
            if r["train"] != "fp32" and r["gap vs fp32"] is not None:
                out.append(f"The paper's {r['train'].upper()}/{r['format'].upper()} pair (mismatch "
                           f"{r['mismatch |Δ log p|']:.2g} per token, both sides {r['train']}): gap to FP32/FP32 "
                           f"{r['gap vs fp32']:+.3f} (95 % CI {r['gap CI low']:+.3f} to {r['gap CI high']:+.3f}, "
                           f"{_seeds(r['paired seeds'])}): {r['verdict']}{_below_zero(r)}.")
        cells = self.cells(runs, meta)
        bf, fp = cells.get(("bf16", "bf16", "none"), {}), cells.get(("fp16", "fp16", "none"), {})
        gaps = [final_judge(bf[s]) - final_judge(fp[s]) for s in sorted(set(bf) & set(fp))
                if final_judge(bf[s]) is not None and final_judge(fp[s]) is not None]
        if len(gaps) >= 2:
            m, lo, hi = mean_ci(gaps)
            out.append(f"BF16/BF16 against FP16/FP16, paired by seed: {m:+.3f} (95 % CI {lo:+.3f} to {hi:+.3f}, "
                       f"{_seeds(len(gaps))}; detectable with 80 % power: "
                       f"{detectable_gap(statistics.stdev(gaps), len(gaps)):.3f}): "
                       + {"no detectable harm": "BF16 is no detectably worse than FP16 (the interval lies above -0.05)",
                          "breaks": "BF16 is worse than FP16 by more than 0.05",
                          "inconclusive": "inconclusive"}[verdict(lo, hi)] + ".")  # the study's one rule
        return out

    def figure(self, runs, meta):
        from nbkit.plots.dose_response import dose_response

        return dose_response(self.table(runs, meta))
