"""The prediction tested on a real LM (issue 51): GRPO on SmolLM2-135M-Instruct in FP32, FP16 and BF16.

Every consequence the workbook has measured comes from its own 1 M-parameter models. Here the stored curves predict,
from each arm's step-0 mismatch, how much held-out accuracy SmolLM2 loses when its rollouts (or its trainer and
rollouts) run in half precision, and the runs test it.

The design (the rule is *not committed yet*: ``RULE_RECORD`` is empty, so ``run`` refuses to train):

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
- **Prediction.** Committed with the rule, per arm and candidate: the predicted gap and its interval.
- **Outcome.** Held-out judge accuracy, mean of the judgments at steps 40 and 50 (``dose_response.final_judge``);
  per seed the paired gap = arm − FP32 on that seed, its 95 % t-interval over seeds (the one read).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from nbkit import results
from nbkit.records import schema
from nbkit.records.runlog import pair_tag
from nbkit.runtime import outputs
from nbkit.stats.stats import mean_ci
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

RULE_TEXT = (
    "DRAFT, to be fixed with the pilot's reading and the measured doses: arms FP32 trainer x {FP16, BF16} vLLM "
    "rollouts, BF16/BF16, FP16/FP16 against FP32/FP32 paired by seed, seeds 0-4, the pilot's run (SmolLM2-135M, "
    "number_after, 8 x 8, <= 16 tokens, 50 steps, judged every 10 on 500 held-out problems by an FP32 engine); "
    "outcome: judge accuracy, mean of steps 40 and 50, gap per seed, 95 % t-interval; predictions per arm and "
    "candidate from its step-0 dose (nbkit.studies.predicted)"
)
"""The rule in one line, as the card records it (a draft until ``RULE_RECORD`` is set)."""
RULE_RECORD: dict = {}
"""The commit that fixed ``RULE_TEXT`` with ``PREDICTIONS`` and its time; empty: nothing may train."""
PREDICTIONS: dict = {}
"""``arm label → predictor → {"gap", "lo", "hi"}``, committed with the rule."""


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
        judge_every=10,
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
    toy = {"seeds": [0], "steps": 1, "overrides": {"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8}}

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

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        return [("predicted beside observed", self.predicted_beside_observed(self.observed(runs, meta)))]

    def plan(self) -> list[str]:
        measured = doses()
        return [
            self.rule_line(),
            f"Arms: {', '.join(arm_name(*a) for a in ARMS)} against {arm_name(*REFERENCE)}, seeds "
            f"{SEEDS[0]}–{SEEDS[-1]}.",
            "Step-0 doses measured: "
            + (", ".join(f"{a} {m['candidates']['token_abs']:.3g} per token" for a, m in measured.items()) or "not yet")
            + ".",
        ]
