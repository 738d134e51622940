"""What half precision costs on this machine, per GEMM policy (``nbkit.precision.gemm``), as ratios to FP32 from one
run.

Three tables, each timed after a warm-up, the best of ``--repeats``:

1. single GEMMs of the models' shapes: torch fp32, torch's native fp16 / bf16 kernels, and the ``fp32-accumulate``
   recipe (half operands → fp32 GEMM → one rounding to half);
2. training: a tiny-arith forward + backward + AdamW step under autocast (FP16 with a live GradScaler) on
   128 × 70 tokens, and the update part of real RL steps (``nbkit.rl.train``, HF engine, 16 × 8, ``time/update``);
3. the teacher-forced π pass of notebook 02 (``nbkit.mismatch.mismatch.teacher_forced_logprobs``, pure cast) on
   SmolLM2-135M over 16 sequences of chat-formatted MATH prompts + 128 response tokens.

Targets (issue "FP16 and BF16 at FP32 speed on CPU"): training step ≤ 1.3× FP32 and π pass ≤ 1.5× FP32 in half.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_gemm.py            # all three (~3 min here)
    .venv/bin/python benchmarks/bench_gemm.py --skip rl pi                 # GEMMs and the micro step only
    .venv/bin/python benchmarks/bench_gemm.py --isa avx2                   # as on an AVX2-only CPU (see below)

``--isa avx2`` re-runs the benchmark under ``benchmarks/avx2.py``, the benchmarks' AVX2 emulation (torch's, oneDNN's
and MKL's kernels capped at AVX2): what a CPU without AVX512-FP16/BF16 runs.
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time

import avx2  # benchmarks/avx2.py: the AVX2 emulation (this folder is on sys.path when this file runs)
import torch

from nbkit.precision import gemm
from nbkit.results import cpu_header

POLICIES = ("native", "fp32-accumulate")
CELLS = [("fp32", "native")] + [(h, p) for h in ("fp16", "bf16") for p in POLICIES]


def best_of(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def table(title: str, rows: dict[str, dict[tuple, float]]) -> None:
    print(f"\n{title}")
    print(f"{'':34}" + "".join(f"{d + '/' + p:>22}" for d, p in CELLS))
    for name, cells in rows.items():
        base = cells[("fp32", "native")]
        line = "".join(f"{cells[c] * 1e3:>11.1f} ms {cells[c] / base:>5.2f}x" for c in CELLS)
        print(f"{name:34}{line}", flush=True)


def bench_gemms(repeats: int) -> None:
    rows = {}
    for m, k, n in [(8960, 128, 128), (8960, 128, 512), (2048, 576, 1536), (2048, 1536, 576)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        cells = {}
        for dt, pol in CELLS:
            x, y = a.to(getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[dt])), b
            y = b.to(x.dtype)

            def run(x=x, y=y, pol=pol):
                with gemm.policy(pol):
                    x @ y

            cells[(dt, pol)] = best_of(run, repeats)
        rows[f"GEMM {m}x{k}x{n}"] = cells
    table("1. single GEMMs (time, ratio to fp32)", rows)


def bench_micro_step(repeats: int) -> None:
    from nbkit.models import models

    model, _ = models.load("tiny-arith", "fp32")
    ids = torch.randint(3, 30, (128, 70))
    cells = {}
    for dt, pol in CELLS:
        net = copy.deepcopy(model).train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(dt)
        scaler = torch.amp.GradScaler("cpu", enabled=dt == "fp16")

        def step(net=net, opt=opt, half=half, scaler=scaler, pol=pol):
            opt.zero_grad()
            with gemm.policy(pol), torch.autocast("cpu", dtype=half or torch.float32, enabled=half is not None):
                loss = net(input_ids=ids, labels=ids).loss
            with gemm.policy(pol):
                scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        cells[(dt, pol)] = best_of(step, repeats)
    table("2a. tiny-arith forward+backward+AdamW, 128x70 tokens, autocast", {"train step": cells})


def bench_rl(steps: int) -> None:
    from nbkit.rl import RLConfig, train

    cells = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dt, pol in CELLS:
            cfg = RLConfig(
                train_dtype=dt,
                gemm=pol,
                rollout_engine="hf",
                max_steps=steps,
                prompts_per_step=16,
                num_generations=8,
                output_dir=f"{tmp}/{dt}-{pol}",
            )
            rows = train(cfg, progress=False).rows[1:]  # the first step warms up
            cells[(dt, pol)] = sum(r["time/update"] for r in rows) / len(rows)
            assert all(r["audit/gemm"] == pol for r in rows)
    table(f"2b. RL update (time/update, mean of steps 2..{steps}, HF engine, 16x8)", {"RL update": cells})


def bench_pi(repeats: int) -> None:
    from nbkit.engines import Rollout, encode_prompt
    from nbkit.mismatch.mismatch import teacher_forced_logprobs
    from nbkit.models import models
    from nbkit.offline import analysis

    model, tok = models.load("smollm2-135m", "fp32")
    prompts = analysis.load_prompts(
        "eval/math", 16, tok, seed=0, shortest=True, chat_template=True, instruction=analysis.SHORT_ANSWER
    )
    g = torch.Generator().manual_seed(0)
    rollouts = [
        Rollout(
            i,
            p,
            encode_prompt(tok, p),
            torch.randint(100, 20000, (128,), generator=g).tolist(),
            "",
            [0.0] * 128,
            "length",
        )
        for i, p in enumerate(prompts)
    ]
    cells = {}
    for dt, pol in CELLS:
        net = model if dt == "fp32" else copy.deepcopy(model).to(models.torch_dtype(dt))
        cells[(dt, pol)] = best_of(
            lambda net=net, dt=dt, pol=pol: teacher_forced_logprobs(
                net, rollouts, dtype=dt, batch_size=8, gemm=pol, progress=False
            ),
            repeats,
        )
    table("3. teacher-forced π pass, SmolLM2-135M, 16 x (prompt + 128 tokens), pure cast", {"π pass": cells})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rl-steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    p.add_argument("--skip", nargs="*", default=[], choices=["gemm", "micro", "rl", "pi"])
    p.add_argument(
        "--policies",
        nargs="+",
        choices=POLICIES,
        default=list(POLICIES),
        help="half-precision policies to time (fp32 is always timed as the reference)",
    )
    p.add_argument(
        "--isa",
        choices=["native", "avx2"],
        default="native",
        help="avx2: cap torch/oneDNN/MKL kernels at AVX2 (emulates a CPU without native half)",
    )
    args = p.parse_args()
    if args.isa == "avx2" and os.environ.get("BENCH_EMULATE_AVX2") != "1":
        sys.exit(subprocess.call([sys.executable, *sys.argv], env=avx2.environment()))
    if args.threads:
        torch.set_num_threads(args.threads)
    CELLS[:] = [c for c in CELLS if c[0] == "fp32" or c[1] in args.policies]
    print(cpu_header())
    print(
        f"auto policy on this machine: {gemm.resolve('auto')} "
        f"(CPU capability {torch.backends.cpu.get_cpu_capability()}, native FP16+BF16: {gemm.cpu_has_native_half()})"
    )
    if "gemm" not in args.skip:
        bench_gemms(args.repeats)
    if "micro" not in args.skip:
        bench_micro_step(args.repeats)
    if "rl" not in args.skip:
        bench_rl(args.rl_steps)
    if "pi" not in args.skip:
        bench_pi(args.repeats)


if __name__ == "__main__":
    main()
