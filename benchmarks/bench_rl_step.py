"""Where an RL step's time goes, and what mismatch logging costs (target: <= 10% of a step).

Runs a few steps of each requested (algorithm, dtype, engine) on tiny-arith and prints, from the same run, the
mean seconds per step split into rollout / weight sync / scoring / mismatch / update, and the mismatch
share of the step. The first step (engine warm-up) is left out of the means.

    .venv/bin/python benchmarks/bench_rl_step.py                       # grpo + pg_seq_is, fp16 + bf16, vllm
    .venv/bin/python benchmarks/bench_rl_step.py --engines hf --steps 4 --dtypes fp32
    .venv/bin/python benchmarks/bench_rl_step.py --algorithms grpo --dtypes fp32 fp16 bf16 --checkpointing on off
"""

from __future__ import annotations

import argparse
import tempfile


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algorithms", nargs="+", default=["grpo", "pg_seq_is"])
    p.add_argument("--dtypes", nargs="+", default=["fp16", "bf16"])
    p.add_argument("--engines", nargs="+", default=["vllm"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    p.add_argument(
        "--checkpointing",
        nargs="+",
        choices=("on", "off"),
        default=["on"],
        help="gradient checkpointing of the update (RLConfig.gradient_checkpointing; TRL's default: on)",
    )
    args = p.parse_args()

    import torch

    from nbkit.engines import vllm_available
    from nbkit.results import cpu_header
    from nbkit.rl import RLConfig, train

    if args.threads:
        torch.set_num_threads(args.threads)
    engines = [e for e in args.engines if e != "vllm" or vllm_available()]
    parts = ("rollout", "sync", "score", "mismatch", "update")
    print(cpu_header())
    print(f"{'run':40} {'step s':>7} " + " ".join(f"{x:>9}" for x in parts) + f" {'mismatch %':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in engines:
            for algo in args.algorithms:
                for ckpt in args.checkpointing:
                    for dtype in args.dtypes:
                        cfg = RLConfig(
                            algorithm=algo,
                            train_dtype=dtype,
                            rollout_engine=engine,
                            max_steps=args.steps,
                            prompts_per_step=args.prompts,
                            num_generations=args.samples,
                            gradient_checkpointing=ckpt == "on",
                            output_dir=f"{tmp}/{engine}-{algo}-{ckpt}-{dtype}",
                        )
                        rows = train(cfg, progress=False).rows[1:]
                        mean = {x: sum(r[f"time/{x}"] for r in rows) / len(rows) for x in parts}
                        step = sum(r["time/step"] for r in rows) / len(rows)
                        name = f"{engine}/{algo}/ckpt-{ckpt}/{dtype}"
                        print(
                            f"{name:40} {step:7.2f} "
                            + " ".join(f"{mean[x]:9.3f}" for x in parts)
                            + f" {100 * mean['mismatch'] / step:9.2f}%",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
