"""Which engine notebook 02's tiny-arith grid needs: the HF engine against vLLM, mismatch and wall time.

The same grid for each engine (``nbkit.offline.analysis.run_grid``: 64 tiny-arith problems x 4 samples x <= 40
tokens, engine dtypes = training dtypes = FP32, BF16, FP16, the ``cpu`` profile's setting). Per engine it prints the
grid's wall time (engine start-ups included), mean |log π − log μ| per token on each diagonal cell, and the
BF16/FP16 readings of ``analysis.ratio_table``. The question it answers: on a CPU whose ``auto`` GEMM policy is
``fp32-accumulate``, HF ``generate`` runs the trainer's own recipe, so does its μ still differ from π? The CPU flags
and the policy ``auto`` picks are printed first; run it under ``benchmarks/avx2.py`` for the AVX2 emulation.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grid_engine.py
    python3 benchmarks/avx2.py .venv/bin/python benchmarks/bench_grid_engine.py
"""

from __future__ import annotations

import argparse
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--n", type=int, default=4, help="samples per prompt")
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of the BF16/FP16 readings")
    return p.parse_args(argv)


def main(argv=None) -> None:
    from nbkit.offline import analysis
    from nbkit.results import cpu_header

    args = parse_args(argv)
    print(cpu_header())
    for engine in args.engines:
        start = time.time()
        res = analysis.run_grid(
            analysis.GridConfig(
                model="tiny-arith",
                engine=engine,
                n_prompts=args.prompts,
                samples_per_prompt=args.n,
                max_tokens=args.max_tokens,
                n_boot=0,
            ),
            progress=False,
        )
        wall = time.time() - start
        starts = sum(v for k, v in res.seconds.items() if k.startswith("start/"))
        print(f"\n{engine}: {res.setting()}\n  grid {wall:.1f} s (engine start-ups {starts:.1f} s)")
        for d in res.rollouts:
            print(f"  {d}: mean |Δlog p| {res.metrics[(d, d)]['token_abs_logp_diff/mean']:.3g}")
        for _, row in analysis.ratio_table([res], n_boot=args.n_boot).iterrows():
            print(f"  BF16/FP16 {row['metric']}: {row['finding']}")


if __name__ == "__main__":
    main()
