"""A set of runs that differ only in algorithm, precision and seed, trained: the paper's sanity test and precision
ablation.

``train_grid`` trains every (algorithm, dtype, seed) of a base config into
``<output_dir>/<algorithm>-<dtype>[-s<seed>]`` (labels of ``nbkit.records.runlog.run_label``), ``grid_configs`` names
those
runs' configs and ``train_all`` trains any ``label → RLConfig`` through ``nbkit.runtime.pool``. ``nbkit.records.runlog``
reads the
run folders back (``load_runs``, ``load_meta``) and condenses them into tables.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import nbkit.rl.runfolder as runfolder
from nbkit.records.runlog import pair_tag, run_label
from nbkit.rl.config import RLConfig
from nbkit.rl.run import RunResult, train
from nbkit.runtime import pool


def train_grid(
    base: RLConfig,
    algorithms: list[str],
    dtypes: list[str],
    progress: bool = True,
    seeds: list[int] | None = None,
    pairs: list[tuple[str, str]] | None = None,
    threads: int = 1,
    workers: int | None = None,
    beside: dict[str, pool.Job] | None = None,
) -> dict[str, RunResult]:
    """Train each (algorithm, dtype[, seed]); every config is validated before the first run starts.

    ``seeds=None`` trains ``base.seed`` only, into folders without a seed suffix. ``pairs=[(train, rollout), ...]``
    replaces ``dtypes`` (pass ``[]``) with the paper's ablation grid: labels such as ``grpo-bf16-fp32r-s0``, and a
    pair whose two sides agree keeps the plain label (``grpo-bf16-s0``).

    Runs are independent: ``nbkit.runtime.pool`` trains as many at once as the free cores hold (``workers``, else
    ``NBKIT_WORKERS``), each in its own process on ``threads`` cores, so a run's rows do not depend on how many
    ran beside it; ``workers=0`` trains them one after another in this process. ``beside``: other jobs in the same
    pool (``train_all``), e.g. another study's runs (``GridStudy.jobs``); their values come back too."""
    configs = planned(grid_configs(base, algorithms, dtypes, seeds, pairs))
    return train_all(configs, progress=progress, threads=threads, workers=workers, beside=beside)


def grid_jobs(
    base: RLConfig,
    algorithms: list[str],
    dtypes: list[str],
    seeds: list[int] | None = None,
    pairs: list[tuple[str, str]] | None = None,
) -> dict[str, pool.Job]:
    """``label → pool.Job`` of ``train_grid``'s runs (arguments as there; every config and run folder checked here),
    for ``pool.start``: a notebook that starts its later sections' jobs with them awaits each run's
    ``RunResult``."""
    return train_jobs(planned(grid_configs(base, algorithms, dtypes, seeds, pairs)))


def planned(configs: dict[str, RLConfig]) -> dict[str, RLConfig]:
    """``configs``, each run folder checked (``runfolder.plan_run``): a refusal comes before the first run starts."""
    for cfg in configs.values():
        runfolder.plan_run(cfg)
    return configs


def grid_configs(
    base: RLConfig,
    algorithms: list[str],
    dtypes: list[str],
    seeds: list[int] | None = None,
    pairs: list[tuple[str, str]] | None = None,
) -> dict[str, RLConfig]:
    """``label → RLConfig`` of ``train_grid``'s runs (arguments as there), each in ``<base.output_dir>/<label>``."""
    if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
        raise ValueError(f"seeds must be a non-empty list of distinct integers, got {seeds!r}")
    if pairs is not None and (
        dtypes or not pairs or len(set(map(tuple, pairs))) != len(pairs) or any(len(p) != 2 for p in pairs)
    ):
        raise ValueError(
            f"pairs must be a non-empty list of distinct (train_dtype, rollout_dtype) with dtypes=[], "
            f"got pairs={pairs!r}, dtypes={dtypes!r}"
        )
    grid = [(d, base.rollout_dtype) for d in dtypes] if pairs is None else [tuple(p) for p in pairs]
    tag = (lambda d, r: d) if pairs is None else pair_tag  # without pairs: the labels runs had before pairs
    return {
        run_label(a, tag(d, r), s): replace(
            base,
            algorithm=a,
            train_dtype=d,
            rollout_dtype=r,
            seed=base.seed if s is None else s,
            output_dir=str(base.out / run_label(a, tag(d, r), s)),
        )
        for a in algorithms
        for d, r in grid
        for s in (seeds or [None])
    }


def train_all(
    configs: dict[str, RLConfig],
    progress: bool = True,
    threads: int = 1,
    workers: int | None = None,
    beside: dict[str, pool.Job] | None = None,
) -> dict[str, object]:
    """Train every run of ``label → RLConfig`` through ``nbkit.runtime.pool`` (see ``train_grid``); ``label →
    RunResult``.
    With a GPU the runs train one after another in this process unless ``workers`` says otherwise
    (``nbkit.runtime.pool.place``): two runs on one GPU would share the memory ``nbkit.rl.memory`` gives to one.
    ``beside``: other independent jobs (``label → pool.Job``, e.g. a notebook's offline analysis) scheduled first,
    in the same pool as the runs, their values returned under their labels too (in this process: before the runs)."""
    beside = dict(beside or {})
    pool.joined(beside, dict.fromkeys(configs))  # a beside job named like a run is refused before anything runs
    for cfg in configs.values():  # a run folder another process trains now: refused here, not as a failed job
        runfolder.hold(cfg.out).release()
    placement = pool.place(len(configs) + len(beside), threads, workers)
    if placement.workers == 0:  # in this process: each run shows its own progress bar
        results = {label: pool.call(job.target, job.kwargs) for label, job in beside.items()}
        for label, cfg in configs.items():
            _announce(label, cfg)
            results[label] = train(cfg, progress=progress)
            _finished(label, results[label])
        return results
    if progress:
        print(
            f"[nbkit] {len(configs)} run(s)"
            + (f" and {len(beside)} other job(s)" if beside else "")
            + f": {placement.describe()}",
            flush=True,
        )
    return pool.run(
        {**beside, **train_jobs(configs)},
        threads,
        workers,
        progress=progress,
        desc="runs",
        on_done=lambda label, value: isinstance(value, RunResult) and _finished(label, value),
    )


def train_jobs(configs: dict[str, RLConfig]) -> dict[str, pool.Job]:
    """``label → pool.Job`` training each run of ``label → RLConfig`` (its progress: the rows its log holds)."""
    return {
        label: pool.Job(
            "nbkit.rl.run:train",
            {"cfg": cfg, "progress": False},
            units=cfg.max_steps,
            poll=_rows_logged(cfg.out / "metrics.jsonl"),
        )
        for label, cfg in configs.items()
    }


def _announce(label: str, cfg: RLConfig) -> None:
    print(
        f"[nbkit] run {label}: {cfg.max_steps} steps, {cfg.prompts_per_step}x{cfg.num_generations} per step, "
        f"rollout {cfg.rollout_engine}/{cfg.rollout}",
        flush=True,
    )


def _finished(label: str, result: RunResult) -> None:
    print(f"[nbkit] run {label}: final accuracy {result.final_accuracy:.3f} in {result.seconds:.0f} s", flush=True)


def _rows_logged(path: Path):
    """A poll for ``pool.Job``: metric rows written so far (a resumed run's earlier rows count as done)."""

    def poll() -> int:
        if not path.is_file():
            return 0
        with open(path, "rb") as f:
            return sum(1 for _ in f)

    return poll
