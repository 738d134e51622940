"""The prediction tested on a real LM (issue 51): GRPO on SmolLM2-135M-Instruct in FP32, FP16 and BF16.

Every consequence the workbook has measured comes from its own 1 M-parameter models. Here the stored curves predict,
from each arm's step-0 mismatch, how much held-out accuracy SmolLM2 loses when its rollouts (or its trainer and
rollouts) run in half precision, and the runs test it.

The design (``RULE_TEXT``, committed with ``PREDICTIONS`` before any run; ``RULE_RECORD`` names that commit):

- **Task.** ``number_after`` ("What number comes after n?", template ``smol_after``, grader ``first_int``): the
  perfectible set ``data/smollm2_after_sanity`` (pass rate over 8 FP32 samples in [0.2, 0.8]) and the 500-problem
  held-out judge set ``data/smollm2_after_heldout``; the pilot (``data/smollm2_after_pilot``, seeds 100+) shows
  whether and how the run learns.
- **Arms.** ``ARMS``: FP32 trainer × {FP32, FP16, BF16} vLLM rollouts (the rollout's mismatch alone), BF16/BF16 and
  FP16/FP16 (the paper's pair); FP32/FP32 is the reference, paired by seed. Each step audited as every run is
  (trainer GEMMs in their dtype, a live loss scaler in FP16, the engine in the rollout's dtype).
- **Dose.** ``measure_doses``: each arm's step-0 mismatch, measured before the study's runs by one step of the arm's
  own run (the study's prompts, lengths, engine and trainer; seeds ``DOSE_SEEDS``, outside the study's); the
  candidates those metrics give (``CANDIDATE_KEYS``) feed ``nbkit.studies.predicted.predictions``.
- **Prediction.** Committed with the rule, per arm and candidate: the predicted gap and its interval; the headline
  as a rule that can fail (``CRITERIA``, ``verdict``, ``headline``): BF16 arms' CIs below −0.02, FP16 arms' above −0.05.
- **Outcome.** Held-out judge accuracy, mean of the judgments at steps 40 and 50 (``dose_response.final_judge``);
  per seed the paired gap = arm − FP32 on that seed, its 95 % t-interval over seeds (the one read).
- **Seeds.** Five, extended blind (``seeds_planned``: from the reference arm's spread alone, no gap read) up to
  ``SEEDS_MAX`` when five give any arm's criterion less than 0.8 power at its predicted gap.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from nbkit import results
from nbkit.records import schema
from nbkit.records.runlog import pair_tag
from nbkit.runtime import outputs
from nbkit.stats.stats import ci_side_power, mean_ci
from nbkit.studies import dose_response as DR
from nbkit.studies import prereg
from nbkit.studies.harm_threshold_rule import first_step_value

STUDY = "smollm2_after"
"""The stored study's folder under ``data/results``."""
REFERENCE = ("fp32", "fp32")
ARMS: tuple[tuple[str, str], ...] = (("fp32", "fp16"), ("fp32", "bf16"), ("bf16", "bf16"), ("fp16", "fp16"))
"""(train dtype, rollout dtype) of each predicted arm; ``REFERENCE`` runs on every seed beside them."""
SEEDS = tuple(range(5))
DOSE_SEEDS = (200, 201)
"""Seeds of the dose measurement (outside the study's and the pilot's): one step each, their mean recorded."""
DOSE_PROMPTS = 16
"""Prompts of each dose step (× the run's 8 samples): 16 keeps the update's activations (no checkpointing with
``shared_prefix``) near 5 GB; 32 took 15 GB and was killed for memory beside a running pilot."""
DOSES = results.RESULTS / "smollm2_after_doses"
"""Where ``measure_doses`` writes each arm's step-0 candidates (``<train>-<rollout>.json``), before any run."""
CANDIDATE_KEYS = {
    "token_abs": schema.TOKEN_ABS_LOGP_DIFF,
    "bias": schema.mismatch_key("kl_k1"),
    "seq_kl": schema.mismatch_key("seq_kl"),
    "seq_abs": schema.mismatch_key("seq_log_ratio/abs_mean"),
    "ess_deficit": schema.mismatch_key("ess_seq"),  # read as 1 / ESS − 1
}
"""Candidates of ``nbkit.studies.predictors`` a run's logged metrics give (the others need per-token arrays)."""

PREDICTOR = "token_abs"
"""The predictor the power is planned on: per-token mean |Δ log p| at step 0, the harm threshold's primary unit."""
CRITERIA: dict[str, tuple[str, float]] = {
    "fp32/fp16": ("above", -0.05),
    "fp32/bf16": ("below", -0.02),
    "bf16/bf16": ("below", -0.02),
    "fp16/fp16": ("above", -0.05),
}
"""The headline prediction per arm as a rule that can fail: BF16 harms (the gap's 95 % CI lies wholly ``below``
−0.02), FP16 does not harm by 0.05 (its CI lies wholly ``above`` −0.05). ``verdict`` reads the one interval."""
SEEDS_MAX = 10
"""The blinded seed extension's cap (``seeds_planned``)."""
PLANNING_SD = 0.03
"""The SD of one seed's paired gap the plan assumes before any reference run exists: the judge's sampling floor at
the pilot's plateau (0.82 on 500 problems: 0.017 per judgment, ≈ 0.012 for the mean of two, ≈ 0.017 for a gap)
with room for seed-to-seed training variance, which one pilot seed cannot show."""
POWER_TARGET = 0.8

RULE_TEXT = (
    "arms: FP32 trainer x {FP16, BF16} vLLM rollouts, BF16/BF16, FP16/FP16, each against FP32/FP32 paired by seed, "
    "seeds 0-4 seed by seed; runs: the pilot's (SmolLM2-135M-Instruct, LoRA r8 lr 5e-4, number_after on "
    "data/smollm2_after_sanity, grpo_mu_old, 8 prompts x 8 samples, <= 16 tokens, 50 steps, vLLM rollouts in the "
    "arm's dtype with 32-token blocks, shared_prefix), judged at steps 0, 20, 40 and 50 on the 500 problems of "
    "data/smollm2_after_heldout (1 sample each, FP32 HF engine); outcome: judge accuracy, mean of steps 40 and 50; "
    "gap = arm - FP32/FP32 on the same seed, one 95 % t-interval over seeds per arm, the only interval read; "
    "prediction (the headline, per arm): BF16 rollouts harm, FP16 do not: a BF16 arm holds when its CI lies wholly "
    "below -0.02 and fails when it lies wholly above -0.02; an FP16 arm holds when its CI lies wholly above -0.05 and "
    "fails when it lies wholly below -0.05; otherwise undecided; the prediction holds when all four arms hold, fails "
    "when any arm fails (an intersection-union test: a false 'holds' at most 5 %; a false 'fails' at most 2.5 % per "
    "arm, 10 % over the four, Bonferroni); predictions per arm and candidate (PREDICTIONS, from the step-0 doses "
    "measured in data/results/smollm2_after_doses by nbkit.studies.predicted, fit on predictors_tiny's 20 points, "
    "+/- the 95 % quantile of leave-one-task-out errors): each shown beside the observed gap with whether the "
    "observed mean lies inside (reported, not a verdict: intervals ~0.9 wide cannot fail), and per candidate the "
    "mean |observed - predicted| over the four arms, the smallest named closest (ties within 0.005 named together); "
    "per-token threshold reading: tiny-arith's threshold 0.0549 (95 % CI 0.0214-0.0883) per token; an arm dosed below "
    "the CI is predicted not to cross -0.05, one inside it is undetermined (FP16 arms below, BF16 arms inside); "
    "power: planned on token_abs's predicted gaps with a planning SD of 0.03 per seed's gap (seeds_planned); "
    "blinded extension: when FP32/FP32 has finished seeds 0-4, sd = sqrt(2) x the SD of its five outcomes (no gap "
    "read), and the study runs the smallest number of seeds in 5-10 giving every arm's criterion power >= 0.8 at "
    "its predicted gap (10 if none), the 5-seed reading shown beside as the first look; cut: the positive control "
    "(e8m2 needs the HF engine and its own FP32 reference, 10 more runs)"
)
"""The rule in one line, as the card records it."""
RULE_RECORD: dict = {"commit": "e0c078f5d5fe4d69cc2353f17bed8d173a30af1c", "time": "2026-11-28T06:47:18+00:00"}
"""The commit that fixed ``RULE_TEXT`` with ``PREDICTIONS`` and its time; empty: nothing may train."""
PREDICTIONS: dict = {
    "fp32/fp16": {
        "token_abs": {"gap": -0.0094, "lo": -0.4577, "hi": 0.4389, "value": 0.00469, "in_range": True},
        "bias": {"gap": 0.0123, "lo": -0.4362, "hi": 0.4609, "value": -0.0002492, "in_range": False},
        "seq_kl": {"gap": 0.0123, "lo": -0.5339, "hi": 0.5586, "value": -0.001079, "in_range": False},
        "seq_abs": {"gap": 0.0011, "lo": -0.5452, "hi": 0.5474, "value": 0.01223, "in_range": True},
        "ess_deficit": {"gap": 0.0011, "lo": -0.4815, "hi": 0.4837, "value": 0.0002877, "in_range": True},
    },
    "fp32/bf16": {
        "token_abs": {"gap": -0.0586, "lo": -0.5068, "hi": 0.3897, "value": 0.04219, "in_range": True},
        "bias": {"gap": -0.0152, "lo": -0.4637, "hi": 0.4334, "value": 0.00373, "in_range": True},
        "seq_kl": {"gap": -0.0066, "lo": -0.5528, "hi": 0.5397, "value": 0.01848, "in_range": True},
        "seq_abs": {"gap": -0.0072, "lo": -0.5535, "hi": 0.5391, "value": 0.1111, "in_range": True},
        "ess_deficit": {"gap": -0.007, "lo": -0.4896, "hi": 0.4756, "value": 0.01843, "in_range": True},
    },
    "bf16/bf16": {
        "token_abs": {"gap": -0.0586, "lo": -0.5069, "hi": 0.3897, "value": 0.0515, "in_range": True},
        "bias": {"gap": -0.017, "lo": -0.4655, "hi": 0.4316, "value": 0.004292, "in_range": True},
        "seq_kl": {"gap": -0.0071, "lo": -0.5533, "hi": 0.5392, "value": 0.02132, "in_range": True},
        "seq_abs": {"gap": -0.0072, "lo": -0.5535, "hi": 0.539, "value": 0.1394, "in_range": True},
        "ess_deficit": {"gap": -0.0102, "lo": -0.4928, "hi": 0.4724, "value": 0.0301, "in_range": True},
    },
    "fp16/fp16": {
        "token_abs": {"gap": -0.0113, "lo": -0.4596, "hi": 0.437, "value": 0.005932, "in_range": True},
        "bias": {"gap": 0.0123, "lo": -0.4362, "hi": 0.4609, "value": -0.0004151, "in_range": False},
        "seq_kl": {"gap": 0.0123, "lo": -0.5339, "hi": 0.5586, "value": -0.001959, "in_range": False},
        "seq_abs": {"gap": 0.0011, "lo": -0.5452, "hi": 0.5474, "value": 0.01646, "in_range": True},
        "ess_deficit": {"gap": 0.0011, "lo": -0.4815, "hi": 0.4837, "value": 0.0004532, "in_range": True},
    },
}
"""``arm label → predictor → {"gap", "lo", "hi", "value", "in_range"}``, committed with the rule: printed by
``predicted.predictions`` from the doses in ``DOSES`` (4 decimals; ``value`` the arm's measured candidate,
``in_range`` False where it lies outside the stored points' range: the fit's end value, an extrapolation). Each
interval is ± the 95 % quantile of the candidate's leave-one-task-out errors over the 20 stored points."""


def verdict(arm: str, obs: dict | None) -> str:
    """``holds``, ``fails`` or ``undecided`` (``not run`` without an observation): the arm's ``CRITERIA`` read on
    its observed gap's 95 % CI (``observed``)."""
    if not obs or obs.get("seeds", 0) < 2:
        return "not run"
    side, bound = CRITERIA[arm]
    below, above = obs["hi"] < bound, obs["lo"] > bound
    if side == "below":
        return "holds" if below else "fails" if above else "undecided"
    return "holds" if above else "fails" if below else "undecided"


def headline(verdicts: dict[str, str]) -> str:
    """The prediction as a whole: ``fails`` if any arm fails, ``holds`` if every arm of ``CRITERIA`` holds, else
    ``undecided``."""
    vs = [verdicts.get(a, "not run") for a in CRITERIA]
    return "fails" if "fails" in vs else "holds" if all(v == "holds" for v in vs) else "undecided"


def power(sd: float, n: int) -> dict[str, float]:
    """``arm → power`` of its criterion at ``PREDICTOR``'s predicted gap, ``n`` seeds, SD ``sd`` per seed's gap."""
    return {
        arm: ci_side_power(PREDICTIONS[arm][PREDICTOR]["gap"], sd, n, bound, side)
        for arm, (side, bound) in CRITERIA.items()
    }


def seeds_planned(reference_finals: list[float] | None = None) -> tuple[int, float]:
    """(seeds, the SD it plans on): the rule's blinded extension. With the FP32/FP32 outcomes of seeds 0-4
    (``reference_finals``, no gap read) the SD of a gap is √2 × their SD (conservative when pairing helps);
    before them, ``PLANNING_SD``. The seeds: the smallest n in ``len(SEEDS)``..``SEEDS_MAX`` whose power reaches
    ``POWER_TARGET`` for every arm, else ``SEEDS_MAX``."""
    if reference_finals is None:
        sd = PLANNING_SD
    else:
        if len(reference_finals) < len(SEEDS):
            raise ValueError(f"the extension reads the reference's {len(SEEDS)} seeds, got {len(reference_finals)}")
        sd = math.sqrt(2) * statistics.stdev(reference_finals[: len(SEEDS)])
    if sd <= 0:
        return len(SEEDS), sd
    for n in range(len(SEEDS), SEEDS_MAX + 1):
        if min(power(sd, n).values()) >= POWER_TARGET:
            return n, sd
    return SEEDS_MAX, sd


def label(train: str, rollout: str, seed: int) -> str:
    """``fp32-bf16r-s3`` (``fp16-s3`` when trainer and rollouts agree)."""
    return f"{pair_tag(train, rollout)}-s{seed}"


def arm_name(train: str, rollout: str) -> str:
    return f"{train}/{rollout}"


def config(train: str, rollout: str, seed: int, out: Path, steps: int = 50, **overrides):
    """One run: the pilot's configuration (``data/smollm2_after_pilot/pilot.py``) in the arm's dtypes."""
    from nbkit.rl import RLConfig

    kw = dict(
        model="smollm2-135m",
        dataset="data/smollm2_after_sanity",
        template="smol_after",
        grader="first_int",
        algorithm="grpo_mu_old",
        train_dtype=train,
        rollout_dtype=rollout,
        rollout_engine="vllm",
        lora=True,
        lr=5e-4,
        steps=steps,
        prompts_per_step=8,
        samples_per_prompt=8,
        max_tokens=16,
        judge_every=20,
        judge_set="data/smollm2_after_heldout",
        checkpoint_every=0,
        shared_prefix=True,
        gradient_checkpointing=False,
        vllm_block_size=32,
        seed=seed,
        output_dir=str(out / label(train, rollout, seed)),
    )
    kw.update(overrides)
    return RLConfig(**kw)


def candidate_values(row: dict) -> dict[str, float]:
    """The ``CANDIDATE_KEYS`` candidates from one step's metrics row (``ess_deficit`` = 1 / ESS − 1)."""
    out = {}
    for cand, key in CANDIDATE_KEYS.items():
        v = row.get(key)
        if isinstance(v, (int, float)):
            out[cand] = 1.0 / v - 1.0 if cand == "ess_deficit" else float(v)
    return out


def measure_doses(work: Path, arms=(REFERENCE, *ARMS), folder: Path = DOSES, progress: bool = True) -> None:
    """Each arm's step-0 candidates: one step of its own run (``DOSE_PROMPTS`` prompts, judge off, seeds
    ``DOSE_SEEDS``) trained into ``work``; their mean over seeds written to ``folder/<train>-<rollout>.json`` with
    the time and commit as each arm finishes (an arm already there is not measured again)."""
    import datetime as _dt

    from nbkit.rl.run import train

    for t, r in arms:
        path = Path(folder) / f"{t}-{r}.json"
        if path.is_file():
            continue
        rows = [
            train(config(t, r, s, Path(work), steps=1, prompts_per_step=DOSE_PROMPTS, judge_every=0), progress).rows
            for s in DOSE_SEEDS
        ]
        per_seed = [candidate_values(rs[0]) for rs in rows]
        outputs.write_json(
            path,
            {
                "arm": arm_name(t, r),
                "candidates": {c: statistics.fmean(v[c] for v in per_seed) for c in CANDIDATE_KEYS},
                "seeds": list(DOSE_SEEDS),
                "prompts": DOSE_PROMPTS,
                "step_seconds": statistics.fmean(rs[0][schema.TIME_STEP] for rs in rows),
                "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                **results.git_state(),
            },
        )


def doses(folder: Path = DOSES) -> dict[str, dict]:
    """``arm → its measured record`` (``measure_doses``), for the arms measured so far."""
    return {(rec := json.loads(p.read_text()))["arm"]: rec for p in sorted(Path(folder).glob("*.json"))}


class SmolLM2After(prereg.PreRegistered):
    """Options: ``arms`` (``[[train, rollout], ...]``), ``seeds``, ``steps``, ``output_dir``, ``overrides``."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    predictions = PREDICTIONS
    predicted_arms = tuple(arm_name(t, r) for t, r in ARMS)
    title = "The prediction tested on a real LM: SmolLM2-135M in FP32, FP16 and BF16"
    question = (
        "Does SmolLM2-135M-Instruct lose the held-out accuracy the stored curves predict from each arm's step-0 "
        "mismatch, when GRPO's rollouts (FP32 trainer) or trainer and rollouts run in FP16 or BF16? FP32 rollouts "
        "paired by seed; the predictions are committed with the rule before the first run."
    )
    statistic = (
        "outcome = held-out judge accuracy (500 problems × 1 sample, FP32 engine), mean of the judgments at steps 40 "
        "and 50; gap = arm − FP32/FP32 on the same seed, 95 % t-interval over seeds."
    )
    output_dir = f"runs/{STUDY}"
    twins = 1 + len(ARMS)
    toy = {
        "arms": [["fp32", "bf16"]],
        "seeds": [0],
        "steps": 1,
        "overrides": {"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {"arms": [list(a) for a in ARMS], "seeds": list(SEEDS), "steps": 50}

    def grid(self, arms=None, seeds=SEEDS, steps: int = 50, output_dir: str | None = None, overrides=None) -> dict:
        arms = ARMS if arms is None else [tuple(a) for a in arms]
        out = Path(output_dir or self.output_dir)
        grid = {}
        for seed in seeds:  # seed by seed: a cut-off study has every arm on the same seeds
            for t, r in (REFERENCE, *dict.fromkeys(arms)):
                grid[label(t, r, seed)] = config(t, r, seed, out, steps, **(overrides or {}))
        return grid

    def coords(self, config: dict) -> dict:
        return {
            "train": config["train_dtype"],
            "rollout": config.get("rollout_dtype") or config["train_dtype"],
            "seed": int(config["seed"]),
        }

    def gaps(self, runs, meta) -> dict[str, dict[int, float]]:
        """``arm → seed → gap`` to FP32/FP32 on the same seed."""
        arms: dict = {}
        for lab, rows in runs.items():
            m = meta[lab]
            arms.setdefault(arm_name(m["train"], m["rollout"]), {})[m["seed"]] = rows
        ref = arms.pop(arm_name(*REFERENCE), {})
        return {a: DR.DoseResponse().gaps(by_seed, ref) for a, by_seed in arms.items()}

    def observed(self, runs, meta) -> dict[str, dict]:
        """``arm → {"gap", "lo", "hi", "seeds"}``: the mean paired gap and its 95 % t-interval."""
        out = {}
        for arm, by_seed in self.gaps(runs, meta).items():
            if by_seed:
                m, lo, hi = mean_ci(list(by_seed.values()))
                out[arm] = {"gap": m, "lo": lo, "hi": hi, "seeds": len(by_seed)}
        return out

    def table(self, runs, meta) -> list[dict]:
        """Per arm: seeds, the step-0 per-token dose in the runs, and the gap with its CI."""
        obs = self.observed(runs, meta)
        rows = []
        for t, r in ARMS:
            arm = arm_name(t, r)
            doses = [
                v
                for lab, rs in runs.items()
                if arm_name(meta[lab]["train"], meta[lab]["rollout"]) == arm
                and (v := first_step_value(rs, schema.TOKEN_ABS_LOGP_DIFF)) is not None
            ]
            o = obs.get(arm, {})
            rows.append(
                {
                    "arm": arm,
                    "seeds": o.get("seeds", 0),
                    "step-0 dose": statistics.fmean(doses) if doses else None,
                    "gap": o.get("gap"),
                    "95 % CI": [o["lo"], o["hi"]] if o else None,
                }
            )
        return rows

    def verdicts(self, runs, meta) -> list[dict]:
        """Per arm of ``CRITERIA``: its criterion, the observed gap and its CI, and ``verdict``; a last row with the
        ``headline``."""
        obs = self.observed(runs, meta)
        rows = []
        for arm, (side, bound) in CRITERIA.items():
            o = obs.get(arm)
            rows.append(
                {
                    "arm": arm,
                    "predicted": f"95 % CI wholly {side} {bound}",
                    "seeds": o["seeds"] if o else 0,
                    "gap": o["gap"] if o else None,
                    "95 % CI": [o["lo"], o["hi"]] if o else None,
                    "verdict": verdict(arm, o),
                }
            )
        rows.append({"arm": "all four", "verdict": headline({r["arm"]: r["verdict"] for r in rows})})
        return rows

    def closeness(self, runs, meta) -> list[dict]:
        """Per candidate: the mean |observed − predicted| gap over the arms observed, smallest first."""
        obs = self.observed(runs, meta)
        rows = []
        for cand in CANDIDATE_KEYS:
            errs = [abs(o["gap"] - PREDICTIONS[a][cand]["gap"]) for a, o in obs.items() if a in PREDICTIONS]
            if errs:
                rows.append(
                    {"predictor": cand, "arms": len(errs), "mean |observed − predicted|": statistics.fmean(errs)}
                )
        return sorted(rows, key=lambda r: r["mean |observed − predicted|"])

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        return [
            ("the prediction, arm by arm", self.verdicts(runs, meta)),
            ("predicted beside observed", self.predicted_beside_observed(self.observed(runs, meta))),
            ("which predictor came closest", self.closeness(runs, meta)),
        ]

    def plan(self) -> list[str]:
        measured = doses()
        return [
            self.rule_line(),
            f"Arms: {', '.join(arm_name(*a) for a in ARMS)} against {arm_name(*REFERENCE)}, seeds "
            f"{SEEDS[0]}–{SEEDS[-1]}.",
            "Step-0 doses measured: "
            + (", ".join(f"{a} {m['candidates']['token_abs']:.3g} per token" for a, m in measured.items()) or "not yet")
            + ".",
            f"Power of each arm's criterion at {PREDICTOR}'s predicted gap, planning SD {PLANNING_SD} per seed's gap: "
            + "; ".join(
                f"{n} seeds: " + ", ".join(f"{a} {p:.2f}" for a, p in power(PLANNING_SD, n).items())
                for n in (len(SEEDS), SEEDS_MAX)
            )
            + f" (the plan before any reference run: {seeds_planned()[0]} seeds).",
        ]
