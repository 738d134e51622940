"""vLLM-CPU engine start-up against the size of its KV cache, which vLLM-CPU allocates and touches at start-up.

For each model, three engines in fresh processes, each timed from ``VLLMEngine(...)`` to ready, then one
``generate`` of the same batch (``--prompts`` x ``--n`` samples x <= ``--max-tokens`` tokens, seed 0):

- ``fixed 2 GiB``: the cache every analysis engine had before it was sized (``kv_cache_gib=2``);
- ``sized``: the default, room for vLLM-CPU's 256 scheduler slots at the model's context length, at most 2 GiB
  (``nbkit.engines.cpu_kv_cache_bytes``);
- ``sized for the batch``: ``nbkit.engines.vllm_sized_for`` (what notebook 02's grid uses): one slot per sequence
  and a context of the longest prompt + ``max_tokens``.

It prints start-up seconds and their ratio to ``fixed 2 GiB`` (measured in this run), the cache in MiB, the
generate seconds, and whether the rollouts' tokens equal the ``fixed 2 GiB`` engine's. The CPU flags and the GEMM
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

SETTINGS = ("fixed 2 GiB", "sized", "sized for the batch")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["tiny-arith", "smollm2-135m"])
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=2, help="samples per prompt")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child(args, model: str, setting: str) -> dict:
    """One engine: start-up, cache size, one timed generate, and a digest of the sampled tokens."""
    from nbkit.engines import SamplingConfig, VLLMEngine, vllm_sized_for
    from nbkit.models import resolve
    from nbkit.offline.analysis import load_prompts
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve(model))
    prompts = load_prompts("arith" if model == "tiny-arith" else "eval/math", args.prompts, tok, seed=0)
    sampling = SamplingConfig(max_tokens=args.max_tokens, n=args.n, seed=0)
    kwargs = {"fixed 2 GiB": {"kv_cache_gib": 2}, "sized": {},
              "sized for the batch": vllm_sized_for(tok, prompts, sampling)}[setting]
    start = time.perf_counter()
    engine = VLLMEngine(model, args.dtype, progress=False, **kwargs)
    startup = time.perf_counter() - start
    try:
        start = time.perf_counter()
        rollouts = engine.generate(prompts, sampling)
        generate = time.perf_counter() - start
    finally:
        engine.close()
    digest = hashlib.sha256(json.dumps([r.token_ids for r in rollouts]).encode()).hexdigest()[:12]
    return {"model": model, "setting": setting, "startup_s": startup, "generate_s": generate,
            "kv_mib": engine.kv_cache_bytes / 2**20, "tokens": digest}


def run(args, model: str, setting: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", f"{model}|{setting}", "--dtype", args.dtype,
           "--prompts", str(args.prompts), "--n", str(args.n), "--max-tokens", str(args.max_tokens)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"model": model, "setting": setting, "error": (proc.stderr or proc.stdout)[-1500:]}
    return json.loads(lines[-1][len("RESULT "):])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        model, setting = args.child.split("|")
        print("RESULT " + json.dumps(child(args, model, setting)), flush=True)
        return
    from nbkit import gemm

    print(f"CPU flags {gemm.half_flags()}, gemm auto = {gemm.resolve('auto')}, kernel caps {gemm.kernel_caps()}; "
          f"{args.dtype}, {args.prompts} prompts x {args.n} x <= {args.max_tokens} tokens, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}", flush=True)
    print(f"{'model':14} {'setting':20} {'KV MiB':>7} {'start s':>8} {'x fixed':>8} {'generate s':>10}  same tokens")
    for model in args.models:
        rows = [run(args, model, s) for s in SETTINGS]
        base = rows[0]
        for r in rows:
            if "error" in r:
                print(f"{model:14} {r['setting']:20} ERROR {r['error'][-400:]!r}", flush=True)
                continue
            ratio = f"{r['startup_s'] / base['startup_s']:8.2f}" if "startup_s" in base else "       -"
            same = "yes" if r.get("tokens") == base.get("tokens") else "no"
            print(f"{model:14} {r['setting']:20} {r['kv_mib']:7.0f} {r['startup_s']:8.1f} {ratio} "
                  f"{r['generate_s']:10.1f}  {same}", flush=True)


if __name__ == "__main__":
    main()
