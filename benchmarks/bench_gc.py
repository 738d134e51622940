"""What the garbage collector costs a run, with and without ``nbkit.gcfreeze`` (``NBKIT_GC_FREEZE``), in one run.

Prints, each measured in a fresh process on one thread:

- ``collect``: one full ``gc.collect()`` after TRL's trainer stack has loaded (median of 5), outside and inside
  ``gcfreeze.walk_only_new()``, and how many objects it walks;
- ``import``: loading TRL's trainer stack in a fresh process (median of 3), with automatic collections on
  (``NBKIT_GC_FREEZE=0``) and off during the import (``gcfreeze.importing``, the default);
- ``toy grid``: a study's smallest grid (``--study``, trained in-process one run after another as the test suite
  trains it), wall and CPU seconds with ``NBKIT_GC_FREEZE=0`` and ``1``, their ratio, the share of CPU spent in
  collections (``gc.callbacks``) and whether the two give the same metrics rows (timing columns aside).

Run it with the machine otherwise idle; the first line names the CPU.

    .venv/bin/python benchmarks/bench_gc.py
    .venv/bin/python benchmarks/bench_gc.py --study harm_threshold_tiny_arith
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COLLECT = """
import gc, json, statistics, time
from nbkit import gcfreeze, logs
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
from nbkit import gcfreeze, logs
start = time.perf_counter()
with gcfreeze.importing(), logs.quiet():
    import nbkit.rl.trainer  # noqa: F401
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime}))
"""

GRID = """
import gc, json, resource, sys, time
from nbkit import schema
from nbkit.studies.catalog import STUDIES
spent = {"gc": 0.0, "t": 0.0}
def watch(phase, info):
    if phase == "start":
        spent["t"] = time.process_time()
    else:
        spent["gc"] += time.process_time() - spent["t"]
gc.callbacks.append(watch)
study = STUDIES[sys.argv[1]]
start = time.perf_counter()
runs = study.run(progress=False, **{**study.toy, "output_dir": sys.argv[2]})
usage = resource.getrusage(resource.RUSAGE_SELF)
rows = {label: schema.without_timing(rs) for label, rs in runs.items()}
print(json.dumps({"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime, "gc": spent["gc"],
                  "runs": len(runs), "rows": json.dumps(rows, sort_keys=True, default=str)}))
"""


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
    from nbkit.studies.catalog import STUDIES
    from nbkit.workbook import jobtime

    if args.study not in STUDIES or not getattr(STUDIES[args.study], "toy", None):
        raise SystemExit(f"--study {args.study!r}: expected a grid study with a toy grid: {sorted(STUDIES)}")
    print(jobtime.cpu_header(), flush=True)

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
    for name, r in (("NBKIT_GC_FREEZE=0", off), ("NBKIT_GC_FREEZE=1", on)):
        print(
            f"toy grid {args.study} ({r['runs']} runs), {name}: {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
            f"{r['gc']:.1f} s of it in gc ({r['gc'] / r['cpu']:.0%})"
        )
    print(
        f"ratio freeze/no freeze: wall {on['wall'] / off['wall']:.2f}, CPU {on['cpu'] / off['cpu']:.2f}; "
        f"same metrics rows (timing aside): {'yes' if on['rows'] == off['rows'] else 'NO'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
