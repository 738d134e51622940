"""Which property of π − μ predicts the harm? Candidate predictors scored by a rule committed before any score
(issue 50, item 2).

The rule (``RULE_TEXT``), fixed in this module and committed before any candidate was computed (not before the
results: every gap it scores had been stored and read before its commit, ``OUTCOMES_READ``; only the candidates'
values were new):

- **Question.** Across every stored FP32-trainer run with an FP32 reference paired by seed, which statistic of the
  step-0 mismatch predicts the accuracy gap to FP32 best, across formats and across tasks, or does none clearly?
- **Points.** One per (task, rollout format): every arm of ``SOURCES`` trained in FP32 with no correction whose
  study holds FP32-rollout runs on the same seeds (tiny-arith: the dose–response, the harm threshold, the corrections
  study and OPSM, whose uncorrected arms are the harm study's own; tiny-long: the transfer study). Corrected arms are
  left out: a correction changes the training, not the dose. ``opsm_tiny_arith`` holds no FP32 run of its own and
  adds no point.
- **Outcome.** The paired gap per seed = the arm's held-out judge accuracy (``dose_response.final_judge``: mean of the
  judgments at steps 40 and 50) − the FP32 run's on that seed, in the same study; a seed stored by several studies
  counts once (the mean of its paired gaps); a point's gap = the mean over its seeds.
- **Candidates** (``nbkit.mismatch.candidates.CANDIDATES``): per-token mean |Δ|; the signed mean E_μ[log μ − log π];
  RMS and p99 of |Δ|; the fraction of sampled tokens whose ratio leaves the PPO clip [1 − ε, 1 + ε] (ε = TRL
  GRPOConfig's default ``epsilon``, which every source run used: no run set it); sequence KL; sequence |Σ|;
  1/ESS − 1; argmax flips; |Δ| on the 10 % of sampled tokens with the lowest μ; |cov(log R, A)| with A the GRPO advantage.
- **Where they are measured.** The stored runs hold per-step aggregates only, so every candidate is measured
  offline (``nbkit.offline.ladder`` with ``argmax_flips``) on the same initial weights as the runs' step 0 (the
  task's model), with the study's own prompts and lengths: ``PROMPTS`` problems of the run's training set drawn
  with seed ``SEED``, its template, ``samples_per_prompt`` responses each (the run's group), its ``max_tokens`` and
  temperature, the HF engine in the format, FP32 π; rewards by the run's grader. One measurement per point.
- **Score** (``nbkit.stats.predictive``): isotonic non-increasing fit of the mean gap on the candidate, linear
  interpolation, constant beyond the range; leave-one-format-out and leave-one-task-out mean absolute prediction
  error; bootstrap over seeds (``N_BOOT`` replicates, seed ``BOOT_SEED``, seeds drawn per task and shared by its
  points), 95 % percentile CI per error.
- **Winner.** The candidate with the lowest error under both schemes whose paired difference to every other
  candidate, under both schemes, has a Bonferroni percentile interval (family-wise 0.05 over 2·(K − 1) comparisons)
  wholly above 0; otherwise "no clear winner", with the comparisons that failed.

``python -m nbkit.studies.predictors measure`` measures the candidates (resumable: each point is kept in
``runs/predictors_tiny`` as it finishes; the start time and commit go to ``started.json`` there first),
``... store`` stores them with the card and writes ``PREDICTOR``.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from pathlib import Path

import numpy as np

from nbkit import results
from nbkit.records.runlog import RENAMED, renamed
from nbkit.runtime import outputs
from nbkit.stats import predictive
from nbkit.studies import corrections, harm_threshold, harm_transfer, opsm
from nbkit.studies import dose_response as DR
from nbkit.studies.base import Study

STUDY = "predictors_tiny"
"""The stored study's folder name under ``data/results``."""
SOURCES = {
    DR.STUDY: "tiny-arith",
    harm_threshold.STUDY: "tiny-arith",
    corrections.STUDY: "tiny-arith",
    opsm.STUDY: "tiny-arith",
    harm_transfer.STUDY: "tiny-long",
}
"""The stored studies the points come from → their task."""
REFERENCE = "fp32"
PROMPTS = 32
"""Problems of each task's training set the candidates are measured on (× the run's ``samples_per_prompt``)."""
SEED = 0
"""Seed of the problems drawn and of the samplers."""
N_BOOT, BOOT_SEED = 4000, 0
"""Bootstrap replicates of the scoring and their seed."""
CANDIDATES: dict[str, str] = {}  # filled from nbkit.mismatch.candidates at first use (it imports torch)
PREDICTOR = results.RESULTS / "harm_threshold" / "predictor.json"
"""What ``store`` writes from the stored study: the verdict, and a winner's fit and prediction interval."""
WORK = Path("runs") / STUDY
"""Where ``measure`` keeps each finished point (resumable) and ``started.json``."""
STARTED = "started.json"

NOTES = (
    "Candidates measured by the offline ladder on each task's initial weights (the runs' step 0) with the runs' "
    "training problems (32, seed 0), group size, max_tokens and temperature, HF engine in the format, FP32 π, "
    "rewards by the run's grader: not the runs' own step-0 rollouts, which the stored runs keep only as per-step "
    "aggregates."
)
"""The card's note on where the candidates were measured."""

RULE_TEXT = (
    "question: which statistic of the step-0 mismatch predicts the FP32-paired accuracy gap across formats and "
    "tasks; points: every (task, format) arm trained in FP32 without correction with FP32 rollouts on the same seeds "
    "in the same study (dose_response, harm_threshold, corrections, opsm on tiny-arith; harm_transfer on tiny-long), "
    "corrected arms left out; outcome: held-out judge accuracy (mean of steps 40 and 50) minus FP32 on the same seed, "
    "a seed in several studies counted once, point gap = mean over seeds; candidates: per-token mean |d|, signed "
    "mean E_mu[log mu - log pi], RMS |d|, p99 |d|, fraction of tokens outside the PPO clip [1-eps, 1+eps] (TRL "
    "default eps), seq KL, seq |sum|, 1/ESS - 1, argmax flips, |d| on the 10 % of sampled tokens with the lowest mu, |cov(log R, GRPO "
    "advantage)|; measured offline on the initial weights with the run's prompts (32 training problems, seed 0), "
    "group size, max_tokens, temperature, grader; score: isotonic non-increasing fit of mean gap on candidate, "
    "linear interpolation, leave-one-format-out and leave-one-task-out mean absolute error, bootstrap over seeds "
    "per task (4000 replicates, seed 0) with 95 % percentile CIs; winner: lowest error under both schemes and every "
    "paired difference's Bonferroni interval (family-wise 0.05 over 2(K-1) comparisons) above 0, else no clear winner"
)
"""The rule in one line, as the card records it."""
RULE_RECORD: dict = {"commit": "0a35ea342c3f6f810fef6d70e7a12d16159e808a", "time": "2026-11-27T21:09:56+00:00"}
"""``{"commit", "time"}`` of the commit that fixed ``RULE_TEXT`` (empty until then)."""

CONSTANT_WHAT = (
    "A reading added after the results, beside the committed rule's verdict: each candidate's error is compared "
    "with a constant prediction (each held-out point predicted by the mean gap of the points its fold was fit on: "
    "under leave-one-format-out the other formats' points, under leave-one-task-out the other task's mean gap), on "
    "the same folds and bootstrap replicates; a candidate beats the constant under a scheme only where the "
    "percentile interval of its paired err − constant, Bonferroni over the candidates within a scheme "
    "(family-wise 0.05 per scheme), lies wholly below 0. The pre-registered verdict is read as before."
)
"""The amendment's ``what`` (``nbkit.studies.amendments``)."""
AMENDMENTS: tuple[dict, ...] = (
    {
        "key": "constant_baseline",
        "commit": "6f0d7782bb0160737e2695be3d4c757a5c6e2df6",
        "time": "2026-11-27T21:55:39+00:00",
        "what": CONSTANT_WHAT,
        "why": "A reviewer's first question of a 'no clear winner' verdict: does any candidate predict the gap "
        "better than no candidate at all? The committed rule compared candidates only with each other (issue 50 "
        "item 2).",
    },
)
"""Readings added after the results (``nbkit.studies.amendments``), put on the card by
``record_amendments``."""

OUTCOMES_READ = {
    "time": "2026-11-27T19:03:00+00:00",
    "commit": "b9a8b5b735c3f1ce89fcba1886202be8a29cf3ba",
    "evidence": "RESULTS.md regenerated, every source study's section showing its gaps; their runs were last stored "
    "at ff9da47 (harm_transfer_tiny_long, 2026-11-26 08:01 UTC) and none has changed since; only the candidates' "
    "values, measured after the rule, were new",
}
"""When the gaps the rule scores had last been stored and read before its commit (``amendments.outcomes_read_first``),
found in git: the last commit before the rule touching the source studies' runs and the last regenerating RESULTS.md
(``tests/studies/test_predictors.py`` checks both against git)."""
BEFORE_RESULTS_AMENDMENT = {
    "key": "before_results",
    "commit": "ecff2beb7cd374060eb356dd75740947f4c781ac",
    "time": "2026-12-07T23:39:08+00:00",
    "what": "The record's sentence that the rule 'was fixed before the results' is corrected: the rule's commit "
    "precedes the measurement of the candidates (its first run), but every gap it scores had been stored (by "
    "2026-11-26 08:01 UTC) and shown on RESULTS.md (at 2026-11-27 19:03 UTC) before it; only the candidates' values "
    "were new. The card records when the outcomes were read (outcomes_read) and the page says the rule was fixed "
    "before its first run, not before the results, with the sentence as first read beside.",
    "why": "Found after the results (issue 74): 'fixed before the results' was read from the rule's commit "
    "preceding the measurement's start alone, while the outcomes a predictor is scored against came from five "
    "studies stored and read before it; git shows when (the source runs' last commit, ff9da47, and RESULTS.md's "
    "last regeneration before the rule, b9a8b5b, 2 h 07 min before it).",
}
"""The 'fixed before the results' sentence corrected; commit and time: the commit that made it, recorded by the next."""


def candidates() -> dict[str, str]:
    """``nbkit.mismatch.candidates.CANDIDATES`` (imported on first use: it brings torch)."""
    if not CANDIDATES:
        from nbkit.mismatch.candidates import CANDIDATES as C

        CANDIDATES.update(C)
    return CANDIDATES


# -- the points and their gaps (the stored studies) ---------------------------------------------------------------
def source_gaps(root: Path = results.RESULTS) -> dict[tuple[str, str], dict[str, dict[int, float]]]:
    """``(task, format) → study → seed → paired gap`` of every FP32-trained uncorrected arm of ``SOURCES`` with an
    FP32 reference in its own study (``DoseResponse.gaps``: the amended outcome)."""
    studies = {
        s.name: s
        for s in (
            DR.DoseResponse(),
            harm_threshold.HarmThreshold(),
            corrections.CorrectionsStudy(),
            opsm.OPSMStudy(),
            harm_transfer.HarmTransfer(),
        )
    }
    d = DR.DoseResponse()
    out: dict = {}
    for name, task in SOURCES.items():
        study = studies[name]
        cells = d.cells(study.load(root), study.stored_meta(root))
        ref = cells.get(("fp32", REFERENCE, "none"), {})
        if not ref:
            continue
        for (train, fmt, corr), by_seed in cells.items():
            if train == "fp32" and corr == "none" and fmt != REFERENCE:
                gaps = d.gaps(by_seed, ref)
                if gaps:
                    out.setdefault((task, fmt), {})[name] = gaps
    return out


def point_gaps(by_study: dict[str, dict[int, float]]) -> dict[int, float]:
    """One gap per seed: the mean of that seed's paired gaps over the studies that stored it."""
    seeds = sorted({s for g in by_study.values() for s in g})
    return {s: float(np.mean([g[s] for g in by_study.values() if s in g])) for s in seeds}


def run_settings(root: Path = results.RESULTS) -> dict[str, dict]:
    """task → the settings its runs sampled with (model, dataset, template, grader, group size, max_tokens,
    temperature), read from the FP32 reference's stored config of the task's first source."""
    out = {}
    for name, task in SOURCES.items():
        if task in out:
            continue
        configs = results.card(name, root)["configs"]["runs"]
        cfg = renamed(
            next(c for c in configs.values() if c.get("rollout_format") == REFERENCE and not c.get("correction"))
        )
        out[task] = {
            k: cfg[RENAMED.get(k, k)]
            for k in ("model", "dataset", "template", "grader", "samples_per_prompt", "max_tokens", "temperature")
        }
    return out


# -- measuring the candidates (the write half) ---------------------------------------------------------------------
def epsilon() -> float:
    """The PPO clip ε the source runs trained with: TRL GRPOConfig's default (``RLConfig`` sets none for grpo)."""
    import dataclasses

    from trl import GRPOConfig

    return float(next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == "epsilon"))


def measure_task(task: str, formats: list[str], settings: dict, work: Path = WORK, progress: bool = True) -> None:
    """Measure every candidate for ``formats`` on ``task`` (``settings``: ``run_settings``), one ladder per format,
    each point written to ``work/<task>--<format>.json`` as it finishes (one already there is not re-measured)."""
    from nbkit import tasks as T
    from nbkit.mismatch import candidates as C
    from nbkit.offline.ladder import LadderConfig, run_ladder
    from nbkit.precision import formats as F

    t = T.make_task(T.TaskConfig(source=settings["dataset"], template=settings["template"], grader=settings["grader"]))
    usable = [p for p in t.problems if t.answer_ok(p["answer"])]
    chosen = [usable[i] for i in np.random.default_rng(SEED).choice(len(usable), PROMPTS, replace=False)]
    prompts = tuple(t.prompt(p) for p in chosen)
    eps = epsilon()
    for fmt in formats:
        path = work / f"{task}--{fmt}.json"
        if path.is_file():
            continue
        start = time.perf_counter()
        lc = LadderConfig(
            model=settings["model"],
            formats=(F.validate(fmt),),
            prompts=prompts,
            samples_per_prompt=settings["samples_per_prompt"],
            max_tokens=settings["max_tokens"],
            temperature=settings["temperature"],
            seed=SEED,
            n_boot=0,
            argmax_flips=True,
        )
        res = run_ladder(lc)
        rolls = res.rollouts[fmt]
        rewards = [t.reward(r.text, chosen[r.prompt_index]["answer"]) for r in rolls]
        adv = C.grpo_advantages(rewards, settings["samples_per_prompt"])
        mu = [np.asarray(r.logprobs, dtype=np.float64) for r in rolls]
        row = {
            "task": task,
            "format": fmt,
            **settings,
            "prompts": PROMPTS,
            "seed": SEED,
            "epsilon": eps,
            **C.values(res.logp_pi[fmt], mu, res.flips[fmt], adv, eps),
            "n_sequences": len(rolls),
            "n_tokens": int(sum(len(r) for r in rolls)),
            "mean_reward": float(np.mean(rewards)),
            "audit": res.audits[fmt],
            "seconds": time.perf_counter() - start,
        }
        outputs.write_json(path, row)
        if progress:
            print(f"[predictors] {task} {fmt}: {row['seconds']:.0f} s", flush=True)


def measure(root: Path = results.RESULTS, work: Path = WORK) -> None:
    """Measure every point's candidates (``measure_task`` per task); writes ``started.json`` (time, commit) to
    ``work`` before the first measurement, never rewritten."""
    if not RULE_RECORD:
        raise ValueError("the rule is not committed yet (RULE_RECORD is empty): commit it before measuring")
    work.mkdir(parents=True, exist_ok=True)
    if not (work / STARTED).is_file():
        outputs.write_json(
            work / STARTED,
            {"time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), **results.git_state()},
        )
    points = sorted(source_gaps(root))
    settings = run_settings(root)
    for task in dict.fromkeys(t for t, _ in points):
        measure_task(task, [f for t, f in points if t == task], settings[task], work)


def store(root: Path = results.RESULTS, work: Path = WORK, command: str = "") -> Path:
    """Store the measured points as the study (one run per point, its one row), its card recording the rule and
    when the measurement started; then ``PREDICTOR`` from what is stored."""
    points = sorted(source_gaps(root))
    missing = [f"{t}--{f}" for t, f in points if not (work / f"{t}--{f}.json").is_file()]
    if missing:
        raise ValueError(f"points not measured yet: {missing}; run `python -m nbkit.studies.predictors measure`")
    rows = {f"{t}--{f}": [json.loads((work / f"{t}--{f}.json").read_text())] for t, f in points}
    started = json.loads((work / STARTED).read_text())
    out = results.store(
        STUDY,
        rows,
        command=command or "python -m nbkit.studies.predictors measure && python -m nbkit.studies.predictors store",
        wall_seconds=sum(r[0]["seconds"] for r in rows.values()),
        configs={"points": {k: {"task": r[0]["task"], "format": r[0]["format"]} for k, r in rows.items()}},
        notes=NOTES,
        root=root,
        record={
            "rule": {"what": RULE_TEXT, **RULE_RECORD},
            "training_started": {
                "time": started["time"],
                "commit": started.get("commit") or "?",
                "evidence": "written to started.json by `python -m nbkit.studies.predictors measure` before its "
                "first candidate was computed",
            },
        },
    )
    write_predictor(root)
    return out


# -- the read half ------------------------------------------------------------------------------------------------
def points_of(runs: dict[str, list[dict]], root: Path = results.RESULTS) -> predictive.Points:
    """The scoring's points: each stored point's candidates, its gaps from the source studies."""
    gaps = source_gaps(root)
    labels = sorted(runs)
    rows = [runs[k][0] for k in labels]
    missing = [k for k, r in zip(labels, rows, strict=True) if (r["task"], r["format"]) not in gaps]
    if missing:
        raise ValueError(f"stored points without paired gaps in the source studies: {missing}")
    return predictive.Points(
        tasks=[r["task"] for r in rows],
        formats=[r["format"] for r in rows],
        gaps=[point_gaps(gaps[(r["task"], r["format"])]) for r in rows],
        values={c: np.array([r[c] for r in rows], dtype=np.float64) for c in candidates()},
    )


_SCORES: dict = {}


def scores(runs: dict[str, list[dict]], root: Path = results.RESULTS) -> tuple[predictive.Points, predictive.Scores]:
    """The points and their ``predictive.score`` (``N_BOOT``, ``BOOT_SEED``), computed once per stored data."""
    pts = points_of(runs, root)
    key = json.dumps([pts.tasks, pts.formats, pts.gaps, {c: v.tolist() for c, v in pts.values.items()}], default=str)
    if key not in _SCORES:
        _SCORES[key] = predictive.score(pts, N_BOOT, BOOT_SEED)
    return pts, _SCORES[key]


def models_of(runs: dict[str, list[dict]]) -> dict[str, str]:
    """task → the model its points were measured on."""
    return {r[0]["task"]: r[0]["model"] for r in runs.values()}


def predictor_record(runs: dict[str, list[dict]], root: Path = results.RESULTS) -> dict:
    """What ``PREDICTOR`` holds: the verdict with every candidate's errors and their CIs (``table``) and the winner's
    comparisons, and for a winner ``predictive.prediction_curve``."""
    pts, sc = scores(runs, root)
    v = sc.verdict
    rec = {
        "study": STUDY,
        "verdict": "winner" if v["winner"] else "no clear winner",
        "winner": v["winner"],
        "reason": v["reason"],
        "leaders": v["leaders"],
        "candidates": candidates(),
        "tasks": sorted(set(pts.tasks)),
        "models": models_of(runs),
        "errors": sc.errors,
        "table": sc.table(),
        "comparisons": v["comparisons"],
        "comparison_level": v["level"],
        "against_constant": {
            **predictive.against_constant(sc),
            "reading": "added after the results (an amendment on the card), not part of the committed rule",
        },
        "n_boot": sc.n_boot,
        "boot_seed": sc.seed,
    }
    if v["winner"]:
        rec.update(predictive.prediction_curve(pts, v["winner"]))
    return rec


def constant_finding(read: dict) -> str:
    """The amended reading in one sentence (``predictive.against_constant``'s ``read``), marked as added after the
    results."""
    const = ", ".join(
        f"{s.upper()} {read['constant'][s]['error']:.3g} (CI {read['constant'][s]['ci'][0]:.3g}–"
        f"{read['constant'][s]['ci'][1]:.3g})"
        for s in predictive.SCHEMES
    )
    beats = read["beats"]
    both = [c for c in beats[predictive.SCHEMES[0]] if all(c in beats[s] for s in predictive.SCHEMES)]
    said = "; ".join(f"under {s.upper()}: {', '.join(beats[s]) or 'none'}" for s in predictive.SCHEMES)
    return (
        f"Amended reading (added after the results, recorded on the card; the verdict above is the committed "
        f"rule's and is unchanged): a constant prediction errs {const}. Candidates that beat it (err − constant's "
        f"{100 * read['level']:.2f} % interval wholly below 0, Bonferroni over {len(read['rows']) // len(beats)} "
        f"candidates per scheme): {said}; under both: {', '.join(both) or 'none'}."
    )


def write_predictor(root: Path = results.RESULTS) -> Path:
    """Write ``PREDICTOR`` (under ``root``) from the stored study."""
    path = Path(root) / PREDICTOR.relative_to(results.RESULTS)
    path.parent.mkdir(parents=True, exist_ok=True)
    outputs.write_json(path, predictor_record(results.load(STUDY, root), root))
    return path


class Predictors(Study):
    """The stored candidates and their scoring."""

    name = STUDY
    title = "Which property of the mismatch predicts the harm? Candidate predictors, scored by a committed rule"
    question = (
        "Across every stored FP32-trainer arm with FP32 rollouts paired by seed (tiny-arith: dose-response, harm "
        "threshold, corrections, OPSM; tiny-long: transfer), which statistic of the step-0 mismatch predicts the "
        "accuracy gap to FP32 best when a format, or a whole task, is held out; or does none clearly? Rule fixed in "
        "nbkit.studies.predictors before any candidate was computed."
    )
    statistic = (
        "error = mean |predicted − observed mean gap| of a non-increasing isotonic fit of the gap on the candidate "
        "(linear between fitted points, constant beyond), each point predicted by a fit without its format (LOFO) "
        "or without its task (LOTO); 95 % percentile CIs from 4,000 bootstrap replicates of the seeds, drawn per "
        "task (seed 0); candidates measured offline on the runs' initial weights with their prompts, group size "
        "and lengths (the stored runs keep per-step aggregates only), held fixed in the bootstrap."
    )
    notebook = "06_dose_response"
    amendments = (*AMENDMENTS, BEFORE_RESULTS_AMENDMENT)  # none moved the committed verdict (``moves``)
    amendment_record = {"outcomes_read": OUTCOMES_READ}

    def moves(self, runs, meta) -> dict[str, list[str]]:
        """What each amendment moved: the constant reading none of the committed verdict; the record's 'fixed
        before the results' (``BEFORE_RESULTS_AMENDMENT``), read from the stored card: the rule's reading as first
        made (its commit before the first run) against the corrected one (``amendments.rule_fixed_before_results``
        with ``outcomes_read``)."""
        from nbkit.studies import amendments

        try:
            card = self.card()
        except FileNotFoundError:
            return {}
        first = {k: v for k, v in card.items() if k != "outcomes_read"}
        moved = []
        if amendments.rule_fixed_before_results(first) and not amendments.rule_fixed_before_results(
            {**card, "outcomes_read": OUTCOMES_READ}
        ):
            moved.append(
                "rule record: fixed before the results → fixed before its first run (the candidates' measurement), "
                "not before the results (the gaps it scores were stored and read before its commit)"
            )
        return {"constant_baseline": [], BEFORE_RESULTS_AMENDMENT["key"]: moved}

    def table(self, runs, meta) -> list[dict]:
        _, sc = scores(runs)
        rows = sc.table()
        for r in rows:
            r["candidate"] = f"{r['candidate']}: {candidates()[r['candidate']]}"
        return rows

    def figure(self, runs, meta):
        """Each candidate's LOFO and LOTO error with its CI against the constant's
        (``nbkit.plots.predictors.error_figure``)."""
        from nbkit.plots.predictors import error_figure

        return error_figure(predictor_record(runs))

    def page_tables(self, runs, meta, rows) -> list[tuple[str, list[dict]]]:
        pts, sc = scores(runs)
        read = predictive.against_constant(sc)
        versus = predictive.against_constant_table(read)
        const = "; ".join(
            f"{s.upper()} {read['constant'][s]['error']:.3g} (95 % CI {read['constant'][s]['ci'][0]:.3g}–"
            f"{read['constant'][s]['ci'][1]:.3g})"
            for s in predictive.SCHEMES
        )
        caption = (
            f"Amended reading (added after the results, on the card): each candidate against a constant prediction "
            f"(error {const}); {read['how']}"
        )
        y = pts.mean_gaps()
        points = []
        for i, (t, f) in enumerate(zip(pts.tasks, pts.formats, strict=True)):
            row = {"task": t, "format": f, "seeds": len(pts.gaps[i]), "mean gap": float(y[i])}
            row.update({c: float(v[i]) for c, v in pts.values.items()})
            points.append(row)
        return [(caption, versus), ("The points: mean paired gap and each candidate's value", points)]

    def findings(self, runs, meta, rows) -> list[str]:
        pts, sc = scores(runs)
        v = sc.verdict
        tasks = ", ".join(f"{t} ({m})" for t, m in models_of(runs).items())
        reason = v["reason"][0].upper() + v["reason"][1:]
        head = (f"Verdict: {v['winner']} predicts the gap best. " if v["winner"] else "Verdict: no clear winner. ") + (
            f"{reason}."
        )
        lead = "; ".join(
            f"{s.upper()} lowest error: {c} ({sc.errors[s][c]:.3g}, CI {sc.ci(s, c)[0]:.3g}–{sc.ci(s, c)[1]:.3g})"
            for s, c in v["leaders"].items()
        )
        ranked = "; ".join(
            f"by {s.upper()} error: "
            + ", ".join(f"{c} {sc.errors[s][c]:.3g}" for c in sorted(sc.errors[s], key=sc.errors[s].get))
            for s in predictive.SCHEMES
        )
        return [
            head,
            lead + ".",
            f"Ranked {ranked}.",
            constant_finding(predictive.against_constant(sc)),
            f"{len(pts.tasks)} points ({', '.join(f'{pts.tasks.count(t)} on {t}' for t in dict.fromkeys(pts.tasks))}) "
            f"measured on {tasks}: the evidence is from these small models and tasks only.",
        ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["measure"]:
        measure()
    elif args[:1] == ["store"]:
        print(store())
    elif args[:1] == ["predictor"]:
        print(write_predictor())
    else:
        print("usage: python -m nbkit.studies.predictors measure | store | predictor", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
