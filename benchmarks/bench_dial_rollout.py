"""What the dial's rounded K/V reuse buys: one rollout batch per format at tiny-long's mid regime, with
``formats.RoundedPrefix`` (each decoding step rounds only the cache's new position) and without it (the whole cache
rounded every step), as ratios to FP32 measured in this run, and whether both give the same tokens and μ.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_dial_rollout.py            # 16 prompts x 8, ~180 tokens
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_dial_rollout.py --formats e8m2 --prompts 4
"""

from __future__ import annotations

import argparse
import time
from unittest import mock


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--formats", nargs="+", default=["e8m2", "dial-e8m1-c8of16"])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--regime", default="mid")
    args = p.parse_args()

    import torch

    from nbkit import tasks
    from nbkit.engines.base import SamplingConfig
    from nbkit.engines.hf import HFEngine
    from nbkit.precision import formats
    from nbkit.results import cpu_header
    from nbkit.studies import tiny_long_regimes as TL

    torch.set_num_threads(1)
    print(cpu_header())
    task = tasks.make_task(source=f"data/{TL.set_name(args.regime)}", grader="arith", template="raw")
    prompts = [task.prompt(q) for q in task.problems[: args.prompts]]
    sampling = SamplingConfig(max_tokens=TL.max_tokens(args.regime), n=args.samples, seed=0)

    def timed(engine):
        start = time.perf_counter()
        out = engine.generate(prompts, sampling)
        return time.perf_counter() - start, out

    fp32 = HFEngine(TL.MODEL, format="fp32", progress=False)
    fp32.generate(prompts[:1], SamplingConfig(max_tokens=4))  # warm-up
    base, out = timed(fp32)
    tokens = sum(len(r.token_ids) for r in out) / len(out)
    print(f"{len(out)} responses, {tokens:.0f} tokens each on average; fp32 {base:.1f} s")
    print(f"{'format':20} {'reuse':>8} {'whole':>8} {'reuse/fp32':>11} {'whole/fp32':>11} {'whole/reuse':>12} same")
    for name in args.formats:
        engine = HFEngine(TL.MODEL, format=name, progress=False)
        reuse, a = timed(engine)
        with mock.patch.object(formats.RoundedPrefix, "__call__", lambda self, n, rnd, x: rnd(x)):
            whole, b = timed(engine)
        same = [(r.token_ids, r.logprobs) for r in a] == [(r.token_ids, r.logprobs) for r in b]
        print(
            f"{name:20} {reuse:7.1f}s {whole:7.1f}s {reuse / base:10.2f}× {whole / base:10.2f}× "
            f"{whole / reuse:11.2f}× {same}"
        )


if __name__ == "__main__":
    main()
