"""Before the harm-transfer rule was committed: the lr pilot, the grid's budget, tiny-long's offline ladder and its
judge set (what ``python -m nbkit.studies.harm_transfer`` runs: the commands its module docstring lists).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from nbkit import results
from nbkit.records import schema
from nbkit.records.runlog import MetricsLog
from nbkit.runtime import outputs
from nbkit.studies import harm_threshold_rule as HR
from nbkit.studies import tiny_long_regimes as TL
from nbkit.studies.base import GridStudy
from nbkit.studies.harm_transfer_rule import (
    DATASET,
    EXTRA_SEEDS,
    EXTRAS,
    JUDGE_POOL,
    JUDGE_SEED,
    JUDGE_SET,
    LADDER_FILE,
    PILOT_LRS,
    PILOT_RISE,
    POINTS,
    REGIME,
    SEEDS,
    STEPS,
    STUDY,
    TARGETS,
    base_config,
)


def pilot(
    lrs=PILOT_LRS,
    steps: int = STEPS,
    seed: int = 0,
    output_dir: str = f"runs/{STUDY}_pilot",
    rise: float = PILOT_RISE,
    store: Path | None = None,
    **overrides,
) -> dict:
    """Train FP32/FP32 at each lr for ``steps`` steps (the study's run otherwise) and report per lr the judge
    accuracy at step 0 and at the last step, the rise, whether it learns (rise > ``rise``), the seconds per step and
    per judgment; ``"lr"`` = the smallest lr that learns (None if none does). Written to ``output_dir/pilot.json``;
    finished runs are read back, not re-trained; ``store`` (e.g. ``PILOT_FILE``): a copy of the record there too."""
    from nbkit import rl

    bad = [x for x in lrs if not (isinstance(x, int | float) and x > 0)]
    if bad or not lrs:
        raise ValueError(f"lrs must be positive numbers, got {list(lrs)}")
    out: dict = {"steps": steps, "seed": seed, "rise": rise, "runs": {}}
    for lr in lrs:
        cfg = base_config(
            learning_rate=lr,
            max_steps=steps,
            seed=seed,
            rollout_format="fp32",
            output_dir=f"{output_dir}/lr{lr:g}",
            **overrides,
        )
        done = GridStudy.finished(cfg)
        rows = (
            MetricsLog.read(Path(cfg.output_dir) / "metrics.jsonl")
            if done
            else rl.train(replace(cfg, overwrite=True)).rows
        )
        judged = [(r[schema.STEP], r[schema.JUDGE_ACCURACY]) for r in rows if schema.JUDGE_ACCURACY in r]
        first, last = (judged[0][1], judged[-1][1]) if len(judged) >= 2 else (None, None)
        step_s = [r[schema.TIME_STEP] for r in rows if schema.TIME_STEP in r]
        judge_s = [r[schema.TIME_JUDGE] for r in rows if r.get(schema.TIME_JUDGE) and r.get(schema.STEP, 0) > 0]
        out["runs"][f"{lr:g}"] = {
            "lr": lr,
            "judge": judged,
            "rise": None if first is None else last - first,
            "learns": first is not None and last - first > rise,
            "train_accuracy_last": next((r["accuracy"] for r in reversed(rows) if "accuracy" in r), None),
            "seconds_per_step": statistics.fmean(step_s) if step_s else None,
            "seconds_per_judgment": statistics.fmean(judge_s) if judge_s else None,
        }
    learning = sorted(v["lr"] for v in out["runs"].values() if v["learns"])
    out["lr"] = learning[0] if learning else None
    out["machine"] = results.machine()
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    outputs.write_json(Path(output_dir) / "pilot.json", out)
    if store is not None:
        outputs.write_json(Path(store), out)
    return out


def budget(
    seconds_per_step: dict[str, float], seconds_per_judgment: float, jobs: int = 2, seconds_startup: float = 30.0
) -> dict:
    """The grid's wall time from measured costs: ``seconds_per_step`` maps ``"fp32"`` and ``"dial"`` (every dosed
    format and extra: each rounds in software on the HF engine) to seconds per optimiser step; each run has ``STEPS``
    steps, ``STEPS // 10 + 1`` judgments and a start-up; ``jobs`` runs at once (each at the measured speed)."""
    judgments = STEPS // 10 + 1
    per_run = {k: STEPS * v + judgments * seconds_per_judgment + seconds_startup for k, v in seconds_per_step.items()}
    n_ref, n_dose = len(SEEDS), len(SEEDS) * len(POINTS) + len(EXTRA_SEEDS) * len(EXTRAS)
    total = n_ref * per_run["fp32"] + n_dose * per_run["dial"]
    return {
        "runs": n_ref + n_dose,
        "seconds_per_run": per_run,
        "cpu_hours": total / 3600,
        "wall_hours": total / 3600 / jobs,
        "jobs": jobs,
    }


def measure_ladder(path: Path = LADDER_FILE) -> dict:
    """tiny-long's offline ladder at ``REGIME`` (``harm_threshold_rule.measure_ladder``: its prompts from
    ``DATASET``, its response budget), written to ``path``."""
    return HR.measure_ladder(path, model=TL.MODEL, prompt_source=DATASET, max_tokens=TL.max_tokens(REGIME))


def points_from_ladder(ladder: dict[str, float]) -> list[str]:
    """The rule's doses from a ladder: e8m3 and ``pick_points(ladder, TARGETS)``, in ascending ladder dose."""
    return sorted(["e8m3", *HR.pick_points(ladder, TARGETS)], key=lambda k: ladder[k])


def judge_task(pool_size: int = JUDGE_POOL, seed: int = JUDGE_SEED, train: str = DATASET):
    """The held-out pool as a task: ``pool_size`` problems of the regime drawn with ``seed`` (as
    ``tiny_long_regimes.build_set`` draws the training pool with seed 0), those of the training set ``train``
    removed (the judge refuses a shared problem: ``nbkit.rl.judge.load_set``)."""
    from nbkit import tasks
    from nbkit.models.toymodels.long_arith import LongArithConfig

    trained = {p["problem"] for p in tasks.make_task(source=train, grader="arith").problems}
    task = tasks.make_task(
        source="long_arith", pool_size=pool_size, seed=seed, long_arith=LongArithConfig.regime(REGIME)
    )
    return replace(task, problems=[p for p in task.problems if p["problem"] not in trained])


def build_judge_set(pool_size: int = JUDGE_POOL, seed: int = JUDGE_SEED, n_samples: int = 16):
    """``JUDGE_SET``: notebook 01's recipe (keep the problems tiny-long in FP32 solves in [0.2, 0.8] of
    ``n_samples`` samples) on ``judge_task``, as tiny-arith's held-out set was made (``data/tiny_arith_heldout``: the
    training set's recipe on a pool drawn with seed 1: ``tiny_long_regimes.build_set`` on that pool)."""
    task = judge_task(pool_size, seed)
    return TL.build_set(REGIME, n_samples=n_samples, batch_prompts=16, seed=seed, task=task, name=Path(JUDGE_SET).name)
