"""What each rollout format (``nbkit.precision.formats``) costs on this CPU, as a ratio to its base dtype's rollout, in
one run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_formats.py                 # the ladder and the dial, tiny-arith
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_formats.py --formats bf16 fp8-e4m3 nvfp4 --rounds 5

HF engine, one model loaded once, the same prompts and sampling seed in every format. Formats are timed round-robin
(``--rounds`` rounds, after one warm-up call each), so load from other processes falls on all of them alike; the
median seconds per generated token of each format is divided by that of its base dtype (``bf16`` for FP8/FP4 and
e8m1-7, ``fp32`` for e8m8-10) and by FP32's. The quantized formats are simulated (quantize, FP32 GEMM, rescale): their
cost here measures the emulation, not what FP8/FP4 hardware would save. It first names the CPU's half-precision
flags, the GEMM policy ``gemm="auto"`` resolves to, the torch threads and the load average.
"""

from __future__ import annotations

import argparse
import statistics
import time

DEFAULT = (
    "fp32",
    "fp16",
    "bf16",
    "fp8-e4m3",
    "fp8-e4m3-channel",
    "fp8-e5m2",
    "mxfp4",
    "nvfp4",
    "e8m3",
    "e8m7",
    "e8m10",
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-arith")
    parser.add_argument("--formats", nargs="+", default=list(DEFAULT))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gemm", default="auto")
    args = parser.parse_args(argv)

    from nbkit.runtime import paths

    paths.setup_environment()
    from nbkit.engines import SamplingConfig, make_engine
    from nbkit.models import models
    from nbkit.offline.analysis import load_prompts
    from nbkit.precision import formats, gemm
    from nbkit.results import cpu_header

    for name in args.formats:
        formats.validate(name)
    wanted = list(dict.fromkeys([*args.formats, *(formats.get(f).base for f in args.formats), "fp32"]))
    print(
        f"{cpu_header()} (other processes share these cores); gemm={args.gemm!r} resolves to "
        f"{gemm.resolve(args.gemm, 'cpu')!r}"
    )
    net, tok = models.load(args.model, "fp32")
    prompts = load_prompts("arith" if args.model.startswith("tiny") else "eval/math", args.prompts, tok, seed=0)
    sampling = SamplingConfig(max_tokens=args.max_tokens, n=args.samples, seed=0)
    engines = {f: make_engine("hf", net, tokenizer=tok, format=f, gemm=args.gemm, progress=False) for f in wanted}
    for eng in engines.values():
        eng.generate(prompts[:2], SamplingConfig(max_tokens=8, seed=0))  # warm-up
    per_token: dict[str, list[float]] = {f: [] for f in wanted}
    for _ in range(args.rounds):
        for f, eng in engines.items():
            start = time.perf_counter()
            rollouts = eng.generate(prompts, sampling)
            per_token[f].append((time.perf_counter() - start) / max(1, sum(len(r.token_ids) for r in rollouts)))
            if formats.get(f).quantized:
                formats.audit(f, eng.take_format_gemms())  # the timed rollout really ran in the format
    cost = {f: statistics.median(v) for f, v in per_token.items()}
    print(
        f"{args.model}, HF engine, {args.prompts} prompts × {args.samples} samples × ≤ {args.max_tokens} tokens, "
        f"median of {args.rounds} round-robin rounds"
    )
    print(f"{'format':<18}{'base':<6}{'ms/token':>10}{'× base':>9}{'× fp32':>9}")
    for f in args.formats:
        base = formats.get(f).base
        print(f"{f:<18}{base:<6}{1e3 * cost[f]:>10.3f}{cost[f] / cost[base]:>9.2f}{cost[f] / cost['fp32']:>9.2f}")


if __name__ == "__main__":
    main()
