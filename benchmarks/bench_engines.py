"""Rollout throughput of HFEngine vs VLLMEngine, and the cost of the mismatch pass.

For one model and dtype, both engines sample the same prompts at batch 1, 8 and 64 (one response per prompt,
temperature 1) after a warm-up; the script prints generated tokens per second for each engine and the vLLM/HF
ratio, then times the teacher-forced forward that computes π for the batch-64 rollouts
(``nbkit.mismatch.mismatch.teacher_forced_logprobs``, the extra pass a mismatch-aware trainer pays) as a fraction of
each
engine's rollout time. vLLM start-up time is printed separately (it is paid once per run, not per batch).

    .venv/bin/python benchmarks/bench_engines.py                       # tiny-arith fp32, + a short smollm2 row
    .venv/bin/python benchmarks/bench_engines.py --model smollm2-135m --dtype bf16 --max-tokens 64 --no-extra
"""

from __future__ import annotations

import argparse
import os
import time


def parse_args(argv=None):
    from nbkit.models.models import DTYPES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-arith", help="model ref (nbkit.models.models.load)")
    p.add_argument("--dtype", default="fp32", choices=tuple(DTYPES), help="engine and forward dtype")
    p.add_argument("--max-tokens", type=int, default=40, help="longest response")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64], help="prompts per generate call")
    p.add_argument("--extra", default="smollm2-135m", help="second model for a short extra row ('' = none)")
    p.add_argument("--no-extra", dest="extra", action="store_const", const="", help="skip the extra row")
    p.add_argument("--extra-max-tokens", type=int, default=32, help="longest response of the extra row")
    p.add_argument("--extra-batches", type=int, nargs="+", default=[1, 8, 64], help="batches of the extra row")
    p.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS", "1")),
        help="torch/OMP threads (set before vLLM starts; vLLM makes set_num_threads a no-op)",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def prompts_for(model: str, n: int, tokenizer, seed: int) -> list[str]:
    """tiny-arith problems, or the shortest MATH-500 problems in the model's chat template."""
    from nbkit.offline.analysis import load_prompts

    return load_prompts("arith" if model == "tiny-arith" else "eval/math", n, tokenizer, seed=seed)


def timed_rollouts(engine, prompts, batches, max_tokens, seed) -> dict[int, tuple[float, int, list]]:
    """batch → (seconds, generated tokens, rollouts), after one warm-up call."""
    from nbkit.engines import SamplingConfig

    engine.generate(prompts[:2], SamplingConfig(max_tokens=8, seed=seed))  # warm-up
    out = {}
    for b in batches:
        cfg = SamplingConfig(max_tokens=max_tokens, seed=seed)
        start = time.perf_counter()
        rollouts = engine.generate(prompts[:b], cfg)
        out[b] = (time.perf_counter() - start, sum(len(r) for r in rollouts), rollouts)
    return out


def bench(model: str, dtype: str, max_tokens: int, batches: list[int], seed: int) -> None:
    """Run and print one model's rows."""
    from nbkit.engines import HFEngine, VLLMEngine, vllm_available
    from nbkit.mismatch.mismatch import teacher_forced_logprobs
    from nbkit.models import models

    net, tok = models.load(model, dtype)
    prompts = prompts_for(model, max(batches), tok, seed)
    hf = timed_rollouts(
        HFEngine(net, dtype, tokenizer=tok, batch_size=max(batches), progress=False), prompts, batches, max_tokens, seed
    )
    vl, startup = {}, float("nan")
    if vllm_available():
        start = time.perf_counter()
        engine = VLLMEngine(model, dtype, seed=seed)
        startup = time.perf_counter() - start
        try:
            vl = timed_rollouts(engine, prompts, batches, max_tokens, seed)
        finally:
            engine.close()
    print(
        f"\n== {model} {dtype}, ≤{max_tokens} tokens, {os.environ.get('OMP_NUM_THREADS')} thread(s); "
        f"vLLM start-up {startup:.1f} s (eager)"
    )
    print(f"{'batch':>5} {'HF tok/s':>10} {'vLLM tok/s':>11} {'vLLM/HF':>8} {'HF tokens':>10} {'vLLM tokens':>12}")
    for b in batches:
        h = hf[b][1] / hf[b][0]
        v = vl[b][1] / vl[b][0] if b in vl else float("nan")
        print(f"{b:>5} {h:>10.1f} {v:>11.1f} {v / h:>8.2f} {hf[b][1]:>10} {vl.get(b, (0, 0))[1]:>12}")
    big = max(batches)
    for name, runs in (("HF", hf), ("vLLM", vl)):
        if big not in runs:
            continue
        seconds, _, rollouts = runs[big]
        teacher_forced_logprobs(net, rollouts[:2], dtype=dtype)  # warm-up
        start = time.perf_counter()
        teacher_forced_logprobs(net, rollouts, dtype=dtype, batch_size=16)
        fwd = time.perf_counter() - start
        print(
            f"mismatch pass (teacher-forced π, {dtype}) on the {name} batch-{big} rollouts: {fwd:.2f} s = "
            f"{fwd / seconds:.1%} of that {name} rollout ({seconds:.2f} s)"
        )


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    import nbkit  # noqa: F401  (cache environment)

    torch.set_num_threads(args.threads)
    from nbkit.results import cpu_header

    print(cpu_header())
    bench(args.model, args.dtype, args.max_tokens, args.batches, args.seed)
    if args.extra and args.extra != args.model:
        bench(args.extra, args.dtype, args.extra_max_tokens, args.extra_batches, args.seed)


if __name__ == "__main__":
    main()
