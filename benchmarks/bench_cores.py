"""Both cores busy? One RL run and one offline grid cell at 1 and 2 threads, and two of them at once
(``nbkit.runtime.pool``).

For each workload it prints wall time, CPU % (the children's user + system seconds over wall seconds; 200 % = both
cores of a 2-core machine busy the whole time) and throughput against one job on one thread, measured in one run:

- ``rl``: a tiny-arith GRPO run as notebook 03 trains it (16 × 8, vLLM rollouts in BF16, ``--steps`` steps),
  start-up included, plus its median step time after the first step;
- ``grid``: one cell of notebook 02's SmolLM2 grid (vLLM engine in BF16 on ``--prompts`` × 2 answers of ≤ 96 tokens,
  then π in FP32/BF16/FP16), engine start-up included.

Each layout is one ``nbkit.runtime.pool.run`` (a fresh process per job, pinned to its cores): ``1 job × 1 thread``,
``1 job × 2 threads`` and ``2 jobs × 1 thread`` at once. Run it with the machine otherwise idle; the first line
names the CPU and its load.

    .venv/bin/python benchmarks/bench_cores.py                  # both workloads
    .venv/bin/python benchmarks/bench_cores.py --only rl --steps 6
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

LAYOUTS = (("1 job x 1 thread", 1, 1), ("1 job x 2 threads", 1, 2), ("2 jobs x 1 thread", 2, 1))
"""(name, jobs at once, threads per job)."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["rl", "grid"], nargs="+", default=["rl", "grid"])
    p.add_argument("--steps", type=int, default=10, help="RL steps per run")
    p.add_argument("--prompts", type=int, default=8, help="SmolLM2 prompts of the grid cell (2 answers each)")
    return p.parse_args(argv)


def rl_jobs(n: int, steps: int, tmp: Path) -> dict:
    from nbkit.rl import config_from
    from nbkit.runtime import pool

    return {
        f"rl{i}": pool.Job(
            "nbkit.rl.run:train",
            {
                "cfg": config_from(
                    {
                        "max_steps": steps,
                        "seed": i,
                        "train_dtype": "bf16",
                        "rollout_engine": "vllm",
                        "checkpoint_every": 0,
                        "gradient_checkpointing": False,
                        "output_dir": str(tmp / f"rl{i}"),
                    }
                ),
                "progress": False,
            },
        )
        for i in range(n)
    }


def grid_jobs(n: int, prompts: int) -> dict:
    from nbkit.offline import analysis
    from nbkit.runtime import pool

    cfg = analysis.GridConfig(
        model="smollm2-135m",
        engine="vllm",
        engine_dtypes=("bf16",),
        n_prompts=prompts,
        samples_per_prompt=2,
        max_tokens=96,
        n_boot=0,
    )
    return {f"grid{i}": pool.Job("nbkit.offline.analysis:run_grid", {"cfg": cfg, "progress": False}) for i in range(n)}


def measure(jobs: dict, threads: int, workers: int) -> tuple[float, float, dict]:
    """(wall seconds, CPU % of the children, label → value) of one ``pool.run``."""
    from nbkit.runtime import pool

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    values = pool.run(jobs, threads=threads, workers=workers, progress=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, 100 * cpu / wall, values


def median_step(result) -> float:
    from nbkit.records import schema

    return statistics.median(schema.series(result.rows, schema.TIME_STEP)[1:])


def main(argv=None) -> None:
    from nbkit.models import models
    from nbkit.results import cpu_header
    from nbkit.runtime import pool
    from nbkit.studies.base import markdown_table

    args = parse_args(argv)
    print(cpu_header() + f"; free cores {pool.free_cores()}", flush=True)
    if "grid" in args.only:
        models.resolve("smollm2-135m")  # converted once before timing (a first run converts the GGUF)
    for workload in args.only:
        rows, base = [], None
        for name, jobs_at_once, threads in LAYOUTS:
            tmp = Path(tempfile.mkdtemp(prefix="bench-cores-"))
            jobs = rl_jobs(jobs_at_once, args.steps, tmp) if workload == "rl" else grid_jobs(jobs_at_once, args.prompts)
            wall, cpu, values = measure(jobs, threads, jobs_at_once)
            shutil.rmtree(tmp, ignore_errors=True)
            per_job = wall / jobs_at_once
            base = base or per_job
            row = {
                "layout": name,
                "wall s": round(wall, 1),
                "CPU %": round(cpu),
                "jobs / minute": round(60 / per_job, 2),
                "throughput vs 1 x 1": round(base / per_job, 2),
            }
            if workload == "rl":
                row["median step s (each run)"] = ", ".join(f"{median_step(v):.2f}" for v in values.values())
            rows.append(row)
            print(f"[{workload}] {row}", flush=True)
        print(
            f"\n{workload}: "
            + (
                "tiny-arith GRPO, 16 x 8, vLLM BF16 rollouts, " + f"{args.steps} steps per run"
                if workload == "rl"
                else f"SmolLM2 grid cell, vLLM BF16, {args.prompts} x 2 answers"
            )
        )
        print(markdown_table(rows) + "\n", flush=True)


if __name__ == "__main__":
    main()
