"""What about the mismatch harms RL? Mechanism pairs at matched per-token dose (issue 50, item 3).

Across the stored formats every candidate statistic of the mismatch rises with the others, so the stored runs cannot
say whether harm follows the mismatch's *size*, its *bias*, whether the error is *fixed* (the same every forward,
e.g. weights rounded once) or *fresh* (drawn anew in each operation), or its alignment with the advantage. This study
holds the size fixed and changes one property at a time: pairs of rollout formats at matched per-token mean
|log π − log μ|, each trained as an FP32-trainer GRPO run against FP32 rollouts on the same seed.

The rule (``RULE_TEXT``), fixed in this module and committed before any of its runs trained (``RULE_RECORD``):

- **Pairs.** ``PAIRS``, each (a, b, what it separates), members chosen before any training from the offline ladder
  (``LADDER_FILE`` and ``LOW_BITS_FILE``: per-token |Δ log p| against FP32 π on tiny-arith, 32 arith prompts × 4
  samples, seed 0, this study's CPU, an AVX2-only AMD EPYC shared with other jobs; ``calibration`` gives each pair's
  ladder doses and ratio) as the closest match in dose:
  1. *bias*: linear operands rounded to nearest (a biased error) against rounded stochastically (unbiased, its draws
     from an explicit generator seeded by the rollout's seed), both on an FP32 forward: ``e8m2-linear-rn`` (0.0073)
     against ``e8m3-linear-sr`` (0.0069), ratio 1.05. Stochastic rounding errs more per rounding, so the match takes
     one mantissa bit more; no pair matches nearer the dose where harm was seen (e8m1-linear-rn 0.0285 against
     e8m2-linear-sr 0.0154: ratio 1.85), so this pair sits below it (FP8 E5M2 at 0.012 showed no harm): it can show a
     difference only if bias harms where size alone does not;
  2. *fixed against fresh*: the linear layers' weights only rounded (the same error in every forward of a step)
     against their activations only (a new error in every operation), both to nearest on an FP32 forward:
     ``e8m0-weights`` (0.0226; weights to powers of two) against ``e8m1-acts`` (0.0200), ratio 1.12;
  3. *where the rounding sits*: the full dial's ``e8m3`` (every GEMM's operands and output and attention, BF16
     elsewhere; 0.0163) against ``fp8-e5m2`` (linear operands with per-token / per-tensor scales; 0.0124), ratio
     1.32, the stored studies' near-dose pair.
- **Runs.** The dose–response's run (``dose_response.base_config``: FP32 trainer, HF engine, GRPO on the tiny-arith
  sanity set, 50 steps, judged every 10 on the 351 held-out problems by an FP32 engine) with only ``rollout_format``
  and ``seed`` set; FP32 rollouts on every seed (the paired reference, trained on this study's CPU: never paired with
  FP32 runs stored from another); seeds ``SEEDS`` (0–4), trained seed by seed (a cut-off study has every arm on the
  same seeds).
- **Outcome.** Held-out judge accuracy, mean of the judgments at steps 40 and 50 (``dose_response.final_judge``, the
  stored dose–response outcome); per seed and arm the paired gap = arm − FP32 on that seed; each gap's CI is the
  95 % t-interval over seeds (the one drawn and read).
- **Dose in the runs.** Each arm's step-0 per-token mean |Δ log p| (the first step's rollouts, initial weights), mean
  over seeds; a pair whose run doses differ by more than ``MATCH`` (ratio outside [1/2, 2]) is *not matched* and gets
  no mechanism reading (its difference is reported, not attributed).
- **Rule per pair.** d = gap(a) − gap(b) per seed (paired by seed: both arms and FP32 share it), its mean and
  t-interval over seeds at the family-wise level 1 − 0.05/3 (Bonferroni over the three pairs). Verdict: "a harms
  more" when the interval lies wholly below 0, "b harms more" when wholly above, else "no difference shown" (and the
  interval's half-width says what difference the study could have seen).
- **Answer.** Pair 1 reads bias: "a harms more" = the biased error harms more at equal size. Pair 2 reads fixed
  against fresh: "a harms more" = the fixed error harms more. Pair 3 reads where the rounding sits at FP8's dose.
  Where a matched pair shows no difference, harm at that dose follows the size, not that property (within the
  interval). Alignment with the advantage is not varied here (no format sets it) and the runs do not log it: the
  paragraph says so.
  *As amended after the last run* (``AMENDMENTS``): "no difference shown" is not read as harm following the size;
  the paragraph says how large a difference each interval still allows and reads the prediction pair by pair.
  *As amended after the results* (``NULL_AMENDMENT``, issue 74): a predicted null ("no difference shown") holds only
  by an equivalence test within a margin committed with the rule; none was (``NULL_MARGIN``), so it reads undecided,
  the reading as first amended beside.
- **Prediction** (written before any run). Fixed against fresh: the weights-only arm harms more (the FP4 block
  formats, which fix an error into the weights, cost more accuracy per unit of dose than the dial). Bias: no
  difference shown (both arms sit below the dose where harm was seen). Where: e8m3 harms more than FP8 E5M2 (the
  stored studies' point estimates, −0.038 against −0.011). With 5 seeds a difference below about 0.03 is expected to
  read "no difference shown".
- **Stopping.** Runs may span sittings (each stored as it finishes, ``store --keep-stored``); the study is read once,
  after the last run, on every run of the grid: until then its page says "not read yet: k of n runs" and shows no
  outcome.

``nbkit study mechanism_tiny_arith run`` trains what is unfinished (``--keep-stored`` in a later sitting),
``... store`` stores the finished runs. ``measure_ladder`` re-measures the calibration.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from pathlib import Path

from nbkit import results
from nbkit.records import schema
from nbkit.runtime import outputs
from nbkit.stats.stats import mean_ci
from nbkit.studies import dose_response as DR
from nbkit.studies import prereg
from nbkit.studies.base import add_run, group_seeds
from nbkit.studies.harm_threshold_rule import first_step_value

STUDY = "mechanism_tiny_arith"
"""The stored study's folder name under ``data/results``."""
LADDER_FILE = results.RESULTS / "mechanism" / "ladder_tiny_arith.json"
"""The offline ladder the pair members were chosen from (measured before any run of the study): the third pair's
formats and each mechanism variant at 2–5 mantissa bits; ``LOW_BITS_FILE`` holds 0 and 1 bit, measured next (the
first ladder's weights-only and activations-only doses stayed below the dose where harm was seen)."""
LOW_BITS_FILE = results.RESULTS / "mechanism" / "ladder_tiny_arith_low_bits.json"
"""The calibration's second ladder (same settings): the mechanism variants at 0 and 1 mantissa bits."""
VARIANTS = ("linear-rn", "linear-sr", "weights", "acts")
CANDIDATES = ("fp8-e5m2", "e8m3", *(f"e8m{k}-{v}" for v in VARIANTS for k in (2, 3, 4, 5)))
"""The formats of ``LADDER_FILE``."""
LOW_BITS = tuple(f"e8m{k}-{v}" for v in VARIANTS for k in (0, 1))
"""The formats of ``LOW_BITS_FILE``."""
REFERENCE = "fp32"
PAIRS = (
    ("e8m2-linear-rn", "e8m3-linear-sr", "bias: nearest (biased) against stochastic (unbiased) rounding"),
    ("e8m0-weights", "e8m1-acts", "fixed against fresh: the weights only against the activations only"),
    ("e8m3", "fp8-e5m2", "where the rounding sits: the full dial's e8m3 against FP8 E5M2's linear operands"),
)
"""``(a, b, what the pair separates)``: a is the member whose harm the prediction names first."""
SEEDS = tuple(range(5))
"""Seeds per arm (5: the minimum for a verdict)."""
LEVEL = 1 - 0.05 / len(PAIRS)
"""Each pair's interval: family-wise 95 % over the pairs (Bonferroni)."""
MATCH = 2.0
"""A pair is matched in the runs when its arms' step-0 doses differ by at most this factor."""
PRIMARY = schema.TOKEN_ABS_LOGP_DIFF
"""The dose: per-token mean |log π − log μ| of the first step's rollouts."""
BIAS = schema.mismatch_key("kl_k1")
"""The signed per-token mean log μ − log π at step 0 (shown beside the dose)."""

RULE_TEXT = (
    "pairs at matched per-token dose (offline ladder, tiny-arith, 32 prompts x 4, seed 0, this CPU): bias "
    "e8m2-linear-rn vs e8m3-linear-sr (ladder ratio 1.05); fixed vs fresh e8m0-weights vs e8m1-acts (1.12); where "
    "e8m3 vs fp8-e5m2 (1.32); runs: "
    "the dose-response's run (FP32 trainer, HF engine, GRPO, tiny-arith sanity set, 50 steps, judged every 10), FP32 "
    "rollouts paired on every seed on this CPU, seeds 0-4 seed by seed; outcome: held-out judge accuracy, mean of "
    "steps 40 and 50, gap = arm - FP32 per seed, 95 % t-interval per gap; per pair d = gap(a) - gap(b) per seed, "
    "t-interval at 1 - 0.05/3 (Bonferroni over 3 pairs): wholly below 0 = a harms more, wholly above = b harms more, "
    "else no difference shown; a pair whose step-0 run doses differ by more than 2x is not matched (no mechanism "
    "reading); prediction: fixed (weights) harms more than fresh (activations), bias pair no difference shown, "
    "e8m3 more than fp8-e5m2; runs may span sittings, read once after the last run"
)
"""The rule in one line, as the card records it."""
RULE_RECORD: dict = {"commit": "6489c6facd596b66256fc02b79fb315bb914db1f", "time": "2026-11-27T21:26:32+00:00"}
"""The commit that fixed ``RULE_TEXT`` and its time (``git log -1 --format=%cI``), before any run of the study."""


PREDICTED = {
    "bias": "no difference shown",
    "fixed against fresh": "a harms more",
    "where the rounding sits": "a harms more",
}
"""The committed prediction per pair (``RULE_TEXT``'s "prediction"), as the verdict it names ("a harms more": the
pair's first member)."""

AMENDMENTS = (
    {
        "key": "paragraph",
        "commit": "62f64974f93eaea936db38f2daac3c4bd71af53b",
        "time": "2026-11-28T01:01:33+00:00",
        "what": "The paragraph no longer says that, where a matched pair shows no difference, harm 'follows the size "
        "of the mismatch, not that property': it says how large a difference each interval still allows, names the "
        "seeds that make an interval wide, and reads the committed prediction pair by pair. The paragraph as first "
        "written stays beside it.",
        "why": "Read after the last run: 'no difference shown' is not evidence of no difference; the fixed-against-"
        "fresh interval spans more than 1.1 in accuracy because one weights-only seed collapsed, so the sentence "
        "claimed more than the rule can show. The rule's verdicts are unchanged.",
    },
)
"""Changes to the page's readings after the runs (``nbkit.studies.amendments``), put on the card at ``store``."""
NULL_MARGIN: float | None = None
"""The equivalence margin committed for a predicted null ("no difference shown"): none was (``RULE_TEXT`` names
none), so such a prediction reads undecided whatever its interval (``prediction_reading``)."""
NULL_AMENDMENT = {
    "key": "null",
    "commit": "45e23d2e4c9e3d1d1ffc9bf441f33a7b6a87d825",
    "time": "2026-12-07T23:43:13+00:00",
    "what": "The prediction is read pair by pair with a predicted null ('no difference shown', the bias pair) held only "
    "by an equivalence test: its interval wholly inside a margin committed with the rule. The rule commits none, so "
    "the bias pair's prediction reads 'undecided (no equivalence margin was committed)' instead of 'held'; the "
    "reading as first amended (a null counted as held when its interval spanned 0) is shown beside.",
    "why": "Found after the results (issue 74): an interval that includes 0 (here -0.097 to +0.041) fails to show a "
    "difference; it does not show the absence of one, so counting it as the null prediction holding read an "
    "inconclusive interval as a confirmation. The module's note that a difference below about 0.03 was expected to "
    "read 'no difference shown' is a power statement, not a margin, and the interval does not lie within it either.",
}
"""A predicted null read only by a committed equivalence margin; commit and time: the commit that made it, recorded
later."""
WIDE = 0.1
"""A pair's interval half-width above which the paragraph names the per-seed gaps that make it wide."""


def measure_ladder(path: Path = LADDER_FILE, formats=CANDIDATES, **ladder) -> dict:
    """The offline ladder (``nbkit.offline.ladder`` defaults, as ``harm_threshold``'s calibration: tiny-arith, its
    arith prompts, 32 prompts × 4 samples, <= 48 tokens, seed 0; ``ladder`` replaces any ``LadderConfig`` field) of
    ``formats``, written to ``path`` with the CPU, the commit and the wall time."""
    import time

    from nbkit.offline.ladder import LadderConfig, run_ladder

    start = time.perf_counter()
    lc = LadderConfig(**{"model": "tiny-arith", **ladder, "formats": tuple(formats)})
    res = run_ladder(lc)
    key = schema.METRIC_TOKEN_ABS_LOGP_DIFF
    rec = {
        "doses": {n: res.metrics[n][key] for n in formats},
        "ci": {n: [res.cis[n][key][k] for k in ("low", "high")] for n in formats},
        "kl_k1": {n: res.metrics[n].get("kl_k1") for n in formats},
        "unit": key,
        "ladder": f"nbkit.offline.ladder: {lc.model}, prompts {lc.prompt_source}, {lc.n_prompts} prompts x "
        f"{lc.samples_per_prompt} samples, <= {lc.max_tokens} tokens, seed {lc.seed}",
        "machine": results.machine(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.perf_counter() - start, 1),
        **results.git_state(),
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    outputs.write_json(Path(path), rec)
    return rec


def ladder_doses(paths=(LADDER_FILE, LOW_BITS_FILE)) -> dict[str, float]:
    """``format → dose`` of the stored calibration ladders (``measure_ladder``'s records), merged."""
    return {k: v for p in paths for k, v in json.loads(Path(p).read_text())["doses"].items()}


def calibration(doses: dict[str, float] | None = None) -> list[dict]:
    """Per pair, the members' ladder doses and their ratio a / b (from the stored ladders)."""
    doses = ladder_doses() if doses is None else doses
    return [
        {"pair": what, "a": a, "b": b, "dose a": doses[a], "dose b": doses[b], "ratio a/b": doses[a] / doses[b]}
        for a, b, what in PAIRS
    ]


def step0(rows: list[dict], key: str = PRIMARY) -> float | None:
    """A run's value of ``key`` at its first optimiser step (``harm_threshold_rule.first_step_value``)."""
    return first_step_value(rows, key)


class Mechanism(prereg.PreRegistered):
    """Options: ``pairs`` (``[[a, b], ...]``), ``seeds``, ``steps``, ``output_dir``, ``overrides`` (any ``RLConfig``
    field)."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    amendments = (*AMENDMENTS, NULL_AMENDMENT)
    title = "What about the mismatch harms RL: mechanism pairs at matched dose"
    question = (
        "Does harm to RL follow the size of the rollout mismatch, its bias, or whether the error is fixed (weights "
        "rounded) or fresh (each operation)? Three pairs of rollout formats at matched per-token |Δ log p| (nearest "
        "against stochastic rounding; weights only against activations only; FP8 E5M2 against e8m3), FP32 trainer, "
        "5 seeds each, FP32 rollouts paired by seed; per pair the difference of the two FP32-paired gaps with a "
        "family-wise CI over the three pairs. Rule fixed in nbkit.studies.mechanism before any of its runs trained."
    )
    statistic = (
        "outcome = held-out judge accuracy (351 problems × 1 sample, FP32 engine), mean of the judgments at steps 40 "
        "and 50; gap = arm − FP32 on the same seed, 95 % t-interval over seeds; per pair d = gap(a) − gap(b) per "
        "seed, t-interval at 1 − 0.05/3 (Bonferroni over 3 pairs); dose = step-0 per-token mean |Δ log p|, mean over "
        "seeds. Read once, after the last run of the grid."
    )
    notebook = "06_dose_response"
    output_dir = f"runs/{STUDY}"
    toy = {
        "pairs": [["e8m2-linear-rn", "e8m3-linear-sr"]],
        "seeds": [0],
        "steps": 1,
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {"pairs": [[a, b] for a, b, _ in PAIRS], "seeds": list(SEEDS), "steps": 50}

    # -- write half -------------------------------------------------------------------------------------------
    def grid(self, pairs=None, seeds=SEEDS, steps: int = 50, output_dir: str | None = None, overrides=None) -> dict:
        from nbkit.precision import formats as F

        pairs = [(a, b) for a, b, _ in PAIRS] if pairs is None else [tuple(p) for p in pairs]
        bad = [p for p in pairs if len(p) != 2]
        if bad:
            raise ValueError(f"each pair names two rollout formats, got {bad}")
        arms = [F.validate(f) for p in pairs for f in p]
        base = DR.base_config(max_steps=steps, output_dir=output_dir or self.output_dir, **(overrides or {}))
        grid = {}
        for seed in seeds:  # seed by seed: a cut-off study has every arm on the same seeds
            for f in (REFERENCE, *dict.fromkeys(arms)):
                add_run(grid, base, f"{f}-s{seed}", rollout_format=f, seed=seed)
        return grid

    coords = DR.DoseResponse.coords

    # -- the analysis (the rule's) ------------------------------------------------------------------------------
    def complete(self, runs) -> tuple[int, int]:
        """(runs stored, runs of the rule's grid): the study is read only when they are equal."""
        grid = self.grid()
        return len(set(grid) & set(runs)), len(grid)

    def arms(self, runs, meta) -> dict[str, dict[int, list[dict]]]:
        """``format → seed → rows`` of the FP32-trained runs."""
        return group_seeds(runs, meta, lambda m: m["format"] if m["train"] == "fp32" else None)

    def gaps(self, runs, meta) -> dict[str, dict[int, float]]:
        """``format → seed → gap`` to FP32 on the same seed (``DoseResponse.gaps``)."""
        arms = self.arms(runs, meta)
        ref = arms.get(REFERENCE, {})
        return {f: DR.DoseResponse().gaps(by_seed, ref) for f, by_seed in arms.items() if f != REFERENCE}

    def doses(self, runs, meta, key: str = PRIMARY) -> dict[str, float]:
        """``format → mean over seeds of the step-0 value of key``."""
        out = {}
        for f, by_seed in self.arms(runs, meta).items():
            vals = [v for v in (step0(rows, key) for rows in by_seed.values()) if v is not None]
            if vals:
                out[f] = statistics.fmean(vals)
        return out

    def pair_readings(self, runs, meta) -> list[dict]:
        """Per pair of ``PAIRS``: the run doses and their ratio, matched or not, d's mean and family-wise interval
        over the seeds both arms share, and the verdict."""
        gaps, doses = self.gaps(runs, meta), self.doses(runs, meta)
        out = []
        for a, b, what in PAIRS:
            ga, gb = gaps.get(a, {}), gaps.get(b, {})
            seeds = sorted(set(ga) & set(gb))
            d = [ga[s] - gb[s] for s in seeds]
            m, lo, hi = mean_ci(d, LEVEL) if d else (None, None, None)
            ratio = doses[a] / doses[b] if a in doses and b in doses and doses[b] > 0 else None
            matched = ratio is not None and 1 / MATCH <= ratio <= MATCH
            if lo is None or lo != lo:
                verdict = "not estimable (fewer than 2 seeds)"
            elif hi < 0:
                verdict = f"{a} harms more"
            elif lo > 0:
                verdict = f"{b} harms more"
            else:
                verdict = "no difference shown"
            out.append(
                {
                    "pair": what,
                    "a": a,
                    "b": b,
                    "seeds": len(seeds),
                    "dose a": doses.get(a),
                    "dose b": doses.get(b),
                    "dose ratio a/b": ratio,
                    "matched": matched,
                    "d = gap(a) − gap(b)": m,
                    f"{LEVEL:.4g} CI": [lo, hi] if lo is not None else None,
                    "verdict": verdict if matched else f"not matched (dose ratio {ratio}): {verdict}, not attributed",
                }
            )
        return out

    # -- the page ---------------------------------------------------------------------------------------------
    def table(self, runs, meta) -> list[dict]:
        """Per arm: seeds stored, the step-0 dose and signed bias; the gap to FP32 with its 95 % t-interval only once
        every run of the rule's grid is stored (never on partial data)."""
        done, total = self.complete(runs)
        read = done == total
        gaps, doses, bias = self.gaps(runs, meta), self.doses(runs, meta), self.doses(runs, meta, BIAS)
        rows = []
        arms = self.arms(runs, meta)
        order = [REFERENCE, *(f for a, b, _ in PAIRS for f in (a, b))]
        for f, by_seed in sorted(arms.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0])):
            row = {"rollout": f, "seeds": len(by_seed), "step-0 dose": doses.get(f), "step-0 kl_k1": bias.get(f)}
            xs = list(gaps.get(f, {}).values())
            m, lo, hi = mean_ci(xs) if read and xs else (None, None, None)
            row.update({"gap to fp32": m, "gap CI": [lo, hi] if lo is not None and lo == lo else None})
            rows.append(row)
        return rows

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        out = [("Calibration: the offline ladder's doses of each pair (chosen before any run)", calibration())]
        done, total = self.complete(runs)
        if done == total:
            out.append(("The rule per pair (family-wise over the three pairs)", self.pair_readings(runs, meta)))
        return out

    def findings(self, runs, meta, rows) -> list[str]:
        done, total = self.complete(runs)
        if done < total:
            return [
                f"Not read yet: {done} of {total} runs stored ({total - done} to train); the rule reads the study once, "
                "after the last run, so no gap or verdict is shown."
            ]
        readings = self.pair_readings(runs, meta)
        return [
            self.amended_paragraph(readings, self.gaps(runs, meta)),
            "As first amended (before a predicted null was read by an equivalence margin; see the record): "
            + self.prediction_reading(readings, equivalence=False),
            "As first written (before the amendment on the card): " + self.paragraph(readings),
        ]

    def paragraph(self, readings: list[dict]) -> str:
        """The one paragraph answering the question, from the pair readings."""

        def ci(r):
            lo, hi = r[f"{LEVEL:.4g} CI"]
            return f"d = {r['d = gap(a) − gap(b)']:+.3f}, {LEVEL:.1%} CI {lo:+.3f} to {hi:+.3f}"

        bias, fixed, where = readings
        parts = []
        for r, name, a_means in (
            (bias, "Bias", "the biased (nearest) error harms more"),
            (fixed, "Fixed against fresh", "the fixed error (weights) harms more"),
            (where, "Where the rounding sits", f"{where['a']} harms more"),
        ):
            said = (
                a_means
                if r["verdict"] == f"{r['a']} harms more"
                else (f"{r['b']} harms more" if r["verdict"] == f"{r['b']} harms more" else f"{r['verdict']}")
            )
            parts.append(
                f"{name} ({r['a']} against {r['b']}, step-0 doses {r['dose a']:.4f} and {r['dose b']:.4f}, ratio "
                f"{r['dose ratio a/b']:.2f}): {said} ({ci(r)}, {r['seeds']} seeds)"
            )
        size_only = [
            r["pair"].split(":")[0] for r in readings if r["matched"] and r["verdict"] == "no difference shown"
        ]
        tail = (
            f" Where a matched pair shows no difference ({', '.join(size_only)}), harm at this dose follows the size of "
            "the mismatch, not that property, within the interval."
            if size_only
            else ""
        )
        return (
            "; ".join(parts)
            + "."
            + tail
            + " Alignment with the advantage is not varied by any pair and not logged by the runs: this study does not "
            "answer it."
        )

    def store(self, *, wall_seconds, command: str, root: Path = results.RESULTS, **kw) -> Path:
        """``GridStudy.store``, then ``AMENDMENTS`` put on the card (``record_amendments``)."""
        path = super().store(wall_seconds=wall_seconds, command=command, root=root, **kw)
        self.record_amendments(root)
        return path

    def amended_paragraph(self, readings: list[dict], gaps: dict[str, dict[int, float]], equivalence=True) -> str:
        """The paragraph as amended (``AMENDMENTS``): each pair's verdict; for a pair with no difference shown, the
        largest difference its interval still allows and, where it is wide (``WIDE``), the per-seed gaps of both
        arms; then the committed prediction read pair by pair (``prediction_reading``; ``equivalence``: a predicted
        null read by a committed margin, as ``NULL_AMENDMENT`` amends)."""
        said = []
        for r in readings:
            name = r["pair"].split(":")[0]
            lo, hi = r[f"{LEVEL:.4g} CI"]
            line = (
                f"{name} ({r['a']} against {r['b']}, step-0 doses {r['dose a']:.4f} and {r['dose b']:.4f}): "
                f"{r['verdict']} (d = {r['d = gap(a) − gap(b)']:+.3f}, {LEVEL:.1%} CI {lo:+.3f} to {hi:+.3f}, "
                f"{r['seeds']} seeds)"
            )
            if r["verdict"] == "no difference shown":
                line += f"; a difference of up to {max(-lo, hi):.2f} in accuracy either way is not ruled out"
            if (hi - lo) / 2 > WIDE:
                per_seed = "; ".join(
                    f"{f}: " + ", ".join(f"{g:+.2f}" for _, g in sorted(gaps.get(f, {}).items()))
                    for f in (r["a"], r["b"])
                )
                line += f" — gaps to FP32 by seed 0–{r['seeds'] - 1}: {per_seed}"
            said.append(line)
        return (
            "; ".join(said)
            + ". No pair's interval excludes a difference, so the study does not separate size from bias, from fixed "
            "against fresh error, or from where the rounding sits: it neither shows that harm follows the size alone "
            "nor that it does not."
            * all(r["verdict"] == "no difference shown" for r in readings)
            + " "
            + self.prediction_reading(readings, equivalence=equivalence)
            + " Alignment with the advantage is not varied by any pair and not logged by the runs: this study does "
            "not answer it."
        )

    @staticmethod
    def prediction_held(readings: list[dict], equivalence: bool = True) -> list[tuple[str, str, str]]:
        """Per pair ``(name, predicted verdict, reading)``: ``held`` or ``not shown`` for a predicted difference (the
        verdict names it or not); for a predicted null ("no difference shown"), with ``equivalence`` (as amended:
        ``NULL_AMENDMENT``) ``held`` only when its interval lies within ``NULL_MARGIN`` either side of 0, ``not
        shown`` when the verdict shows a difference, else undecided (naming the missing margin where none was
        committed); without it (as first amended) ``held`` whenever the verdict is "no difference shown"."""
        out = []
        for r in readings:
            name = r["pair"].split(":")[0].lower()
            expected = PREDICTED[name]
            expected = {"a harms more": f"{r['a']} harms more", "b harms more": f"{r['b']} harms more"}.get(
                expected, expected
            )
            if expected != "no difference shown" or not equivalence:
                said = "held" if r["verdict"] == expected else "not shown"
            elif r["verdict"] != "no difference shown":
                said = "not shown"
            elif NULL_MARGIN is None:
                said = "undecided (no equivalence margin was committed)"
            else:
                lo, hi = r[f"{LEVEL:.4g} CI"]
                said = "held" if -NULL_MARGIN < lo and hi < NULL_MARGIN else "undecided (outside the margin)"
            out.append((name, expected, said))
        return out

    def prediction_reading(self, readings: list[dict], equivalence: bool = True) -> str:
        """The committed prediction read pair by pair (``prediction_held``) in one sentence."""
        held = self.prediction_held(readings, equivalence)
        ok = [n for n, _, h in held if h == "held"]
        nulls = [(n, e, h) for n, e, h in held if h.startswith("undecided")]
        missed = [(n, e) for n, e, h in held if h == "not shown"]
        parts = [f"{n}: predicted '{e}' (a null, which only an equivalence test can confirm): {h}" for n, e, h in nulls]
        if missed:
            parts.append("; ".join(f"{n}: predicted '{e}'" for n, e in missed) + ", which the intervals do not show")
        return (
            f"The prediction committed with the rule held for {len(ok)} of {len(held)} pairs"
            + (f" ({', '.join(ok)})" if ok else "")
            + (f"; {'; '.join(parts)}" if parts else "")
            + "."
        )

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """What the amendments moved, from the runs (nothing before the study is read): the paragraph's none of the
        rule's verdicts; ``NULL_AMENDMENT`` each pair whose prediction reads otherwise as first amended (a null held
        whenever no difference is shown) and by an equivalence margin, and the count held."""
        done, total = self.complete(runs)
        if done < total:
            return {}
        readings = self.pair_readings(runs, meta)
        before, after = self.prediction_held(readings, False), self.prediction_held(readings, True)
        moved = [f"prediction reading, {n}: {b} → {a}" for (n, _, b), (_, _, a) in zip(before, after) if a != b]
        if moved:
            held = [sum(h == "held" for *_, h in x) for x in (before, after)]
            moved.append(f"the prediction held for {held[0]} of {len(before)} pairs → {held[1]} of {len(after)}")
        return {"paragraph": [], NULL_AMENDMENT["key"]: moved}

    def plan(self) -> list[str]:
        n = len(self.grid())
        return [
            self.rule_line(),
            f"Planned runs: {n} ({len(SEEDS)} seeds × FP32 and {len(PAIRS) * 2} formats in {len(PAIRS)} pairs).",
        ]
