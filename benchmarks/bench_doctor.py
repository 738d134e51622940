"""Wall time of ``nbkit doctor --anatomy`` on one model (the issue's budget: SmolLM2-135M in ≤ 6 minutes).

Runs the doctor's command line in this process exactly as a user would (engine ``auto``: vLLM where installed),
into a scratch report folder, and prints the wall time per stage next to the CPU's half-precision flags (they
decide the kernels: ``nbkit.precision.gemm.half_flags``) and the thread count.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_doctor.py                 # smollm2-135m, 16 × 2, 64 tokens
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_doctor.py --model tiny-arith --engine hf
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--engine", default="auto", choices=("auto", "hf", "vllm"))
    p.add_argument("--n-prompts", type=int, default=16)
    p.add_argument("--samples-per-prompt", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--budget", type=float, default=360.0, help="seconds the issue allows")
    args = p.parse_args(argv)
    from nbkit.cli import doctor
    from nbkit.results import cpu_header
    from nbkit.runtime import paths

    paths.setup_environment()
    out = Path(tempfile.mkdtemp(prefix="bench_doctor_")) / "report"
    start = time.time()
    code = doctor.main(
        [
            "--model",
            args.model,
            "--engine",
            args.engine,
            "--n-prompts",
            str(args.n_prompts),
            "--samples-per-prompt",
            str(args.samples_per_prompt),
            "--max-tokens",
            str(args.max_tokens),
            "--anatomy",
            "--out",
            str(out),
        ]
    )
    wall = time.time() - start
    saved = json.loads((out / "doctor.json").read_text())
    print(
        f"\nnbkit doctor --anatomy on {args.model} ({saved['engine']} engine, {args.n_prompts} × "
        f"{args.samples_per_prompt}, ≤ {args.max_tokens} tokens): {wall:.0f} s wall (budget {args.budget:.0f} s: "
        f"{'within' if wall <= args.budget else 'OVER'}); {cpu_header()}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    print("  stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in saved["stages"].items()))
    for d, a in saved["anatomy"].items():
        print(f"  anatomy {d}: " + ", ".join(f"{k} {v:.1f} s" for k, v in a["seconds"].items()))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
