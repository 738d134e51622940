"""What the garbage collector costs a run, with and without ``nbkit.runtime.gcfreeze`` (``NBKIT_GC_FREEZE``), in one
run.

Prints, each measured in a fresh process on one thread:

- ``collect``: one full ``gc.collect()`` after TRL's trainer stack has loaded (median of 5), outside and inside
  ``gcfreeze.walk_only_new()``, and how many objects it walks;
- ``import``: loading TRL's trainer stack in a fresh process (median of 3), with automatic collections on
  (``NBKIT_GC_FREEZE=0``) and off during the import (``gcfreeze.importing``, the default);
- ``toy grid``: a study's smallest grid (``--study``, trained in-process one run after another as the test suite
  trains it), wall and CPU seconds with ``NBKIT_GC_FREEZE=0`` and ``1``, their ratio, the share of CPU spent in
  collections (``gc.callbacks``) and whether the two give the same metrics rows (timing columns aside);
- ``vLLM runs``: two one-step tiny-arith runs with vLLM rollouts in one process, as a notebook trains them (vLLM's
  engine unfreezes the whole process when it shuts down; ``gcfreeze.refreeze`` puts the run's freeze back), the same
  figures (skipped where vLLM is not installed).

Run it with the machine otherwise idle; the first line names the CPU.

    .venv/bin/python benchmarks/bench_gc.py
    .venv/bin/python benchmarks/bench_gc.py --study harm_threshold_tiny_arith
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COLLECT = """
import gc, json, statistics, time
from nbkit.runtime import gcfreeze, logs
with logs.quiet():
    import nbkit.rl.trainer  # noqa: F401 - TRL's trainer stack, vLLM included where installed
def median_collect():
    times = []
    for _ in range(5):
        t = time.perf_counter(); gc.collect(); times.append(time.perf_counter() - t)
    return statistics.median(times)
before, walked_before = median_collect(), len(gc.get_objects())
with gcfreeze.walk_only_new():
    inside, walked_inside, frozen = median_collect(), len(gc.get_objects()), gc.get_freeze_count()
print(json.dumps({"before": before, "after": inside, "walked_before": walked_before,
                  "walked_after": walked_inside, "frozen": frozen}))
"""

IMPORT = """
import json, resource, time
from nbkit.runtime import gcfreeze, logs
start = time.perf_counter()
with gcfreeze.importing(), logs.quiet():
    import nbkit.rl.trainer  # noqa: F401
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime}))
"""

WATCH = """
import gc, json, resource, sys, time
from nbkit.records import schema
spent = {"gc": 0.0, "t": 0.0}
def watch(phase, info):
    if phase == "start":
        spent["t"] = time.process_time()
    else:
        spent["gc"] += time.process_time() - spent["t"]
gc.callbacks.append(watch)
"""
"""The start of a timed workload: CPU seconds spent in collections add up in ``spent["gc"]``."""

GRID = (
    WATCH
    + """from nbkit.studies.catalog import STUDIES
study = STUDIES[sys.argv[1]]
start = time.perf_counter()
runs = study.run(progress=False, **{**study.toy, "output_dir": sys.argv[2]})
usage = resource.getrusage(resource.RUSAGE_SELF)
rows = {label: schema.without_timing(rs) for label, rs in runs.items()}
print(json.dumps({"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime, "gc": spent["gc"],
                  "runs": len(runs), "rows": json.dumps(rows, sort_keys=True, default=str)}))
"""
)

VLLM_RUNS = (
    WATCH
    + """from nbkit.rl import RLConfig, train
from nbkit.records.runlog import MetricsLog
start, rows = time.perf_counter(), []
for i in range(2):
    cfg = RLConfig(model="tiny-arith", max_steps=1, prompts_per_step=2, num_generations=2, max_completion_length=8,
                   rollout_engine="vllm", output_dir=f"{sys.argv[1]}/run{i}", seed=i)
    train(cfg, progress=False)
    rows.append(schema.without_timing(MetricsLog.read(f"{sys.argv[1]}/run{i}/metrics.jsonl")))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime, "gc": spent["gc"],
                  "runs": 2, "rows": json.dumps(rows, sort_keys=True, default=str)}))
"""
)


def fresh(code: str, *args: str, freeze: str) -> dict:
    env = {**os.environ, "NBKIT_GC_FREEZE": freeze, "NBKIT_WORKERS": "0", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default="harm_transfer_tiny_long", help="a grid study whose toy grid is trained")
    args = p.parse_args(argv)
    from nbkit.results import cpu_header
    from nbkit.studies.catalog import STUDIES

    if args.study not in STUDIES or not getattr(STUDIES[args.study], "toy", None):
        raise SystemExit(f"--study {args.study!r}: expected a grid study with a toy grid: {sorted(STUDIES)}")
    print(cpu_header(), flush=True)

    c = fresh(COLLECT, freeze="1")
    print(
        f"collect: {c['before'] * 1e3:.0f} ms walking {c['walked_before']:,} objects outside the scope, "
        f"{c['after'] * 1e3:.1f} ms walking {c['walked_after']:,} inside ({c['frozen']:,} frozen): "
        f"ratio {c['after'] / c['before']:.2g}"
    )
    imports = {
        freeze: statistics.median(fresh(IMPORT, freeze=freeze)["cpu"] for _ in range(3)) for freeze in ("0", "1")
    }
    print(
        f"import of the trainer stack, CPU s (process start included): collector on {imports['0']:.2f}, "
        f"off while importing {imports['1']:.2f}: ratio {imports['1'] / imports['0']:.2f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        off = fresh(GRID, args.study, str(Path(tmp) / "off"), freeze="0")
        on = fresh(GRID, args.study, str(Path(tmp) / "on"), freeze="1")
    compare(f"toy grid {args.study} ({on['runs']} runs)", off, on)
    if importlib.util.find_spec("vllm") is None:
        print("vLLM runs: skipped (vLLM is not installed)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        off = fresh(VLLM_RUNS, str(Path(tmp) / "off"), freeze="0")
        on = fresh(VLLM_RUNS, str(Path(tmp) / "on"), freeze="1")
    compare("vLLM runs (2 one-step tiny-arith runs in one process)", off, on)
    return 0


def compare(what: str, off: dict, on: dict) -> None:
    """Print one workload's figures with the collector unchanged and with gcfreeze, and their ratios."""
    for name, r in (("NBKIT_GC_FREEZE=0", off), ("NBKIT_GC_FREEZE=1", on)):
        print(
            f"{what}, {name}: {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
            f"{r['gc']:.1f} s of it in gc ({r['gc'] / r['cpu']:.0%})"
        )
    print(
        f"{what}: ratio freeze/no freeze: wall {on['wall'] / off['wall']:.2f}, CPU {on['cpu'] / off['cpu']:.2f}; "
        f"same metrics rows (timing aside): {'yes' if on['rows'] == off['rows'] else 'NO'}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
