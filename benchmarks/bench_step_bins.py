"""What the per-step token bins cost (``nbkit.rl.bins``; target: step time with them <= 1.03x without).

Runs the same tiny-arith RL config (same seed) with the bins on and with ``StepBins.add``/``take`` replaced by
no-ops, alternating, ``--repeats`` times, and prints the mean step time of each run (the first step, engine
warm-up, left out), the ratio on/off per repeat, and the seconds the bins themselves took per step (timed inside).

    .venv/bin/python benchmarks/bench_step_bins.py                 # 10 steps, 2 repeats, fp32 training, bf16 rollout
"""

from __future__ import annotations

import argparse
import tempfile


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--algorithm", default="dr_grpo")
    p.add_argument("--train-dtype", default="fp32")
    p.add_argument("--rollout-dtype", default="bf16")
    args = p.parse_args()

    import torch

    from nbkit.results import cpu_header
    from nbkit.rl import RLConfig, train
    from nbkit.rl.bins import StepBins

    torch.set_num_threads(1)
    real_add, real_take = StepBins.add, StepBins.take
    spent = {"s": 0.0}

    def timed_take(self, accelerator=None):
        row = real_take(self, accelerator)
        spent["s"] += self.seconds
        self.seconds = 0.0
        return row

    print(cpu_header())
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            means = {}
            for bins in ("on", "off"):
                StepBins.add = real_add if bins == "on" else (lambda self, *a, **k: None)
                StepBins.take = timed_take if bins == "on" else (lambda self, accelerator=None: {})
                spent["s"] = 0.0
                cfg = RLConfig(
                    algorithm=args.algorithm,
                    train_dtype=args.train_dtype,
                    rollout_dtype=args.rollout_dtype,
                    max_steps=args.steps,
                    seed=0,
                    output_dir=f"{tmp}/{rep}-{bins}",
                )
                rows = train(cfg, progress=False).rows[1:]
                means[bins] = sum(r["time/step"] for r in rows) / len(rows)
                own = spent["s"] / args.steps
                print(
                    f"repeat {rep + 1} bins {bins:3}: {means[bins]:.3f} s/step"
                    + (f" (bins' own time {1000 * own:.2f} ms/step)" if bins == "on" else ""),
                    flush=True,
                )
            print(f"repeat {rep + 1}: on/off = {means['on'] / means['off']:.3f}", flush=True)
    StepBins.add, StepBins.take = real_add, real_take


if __name__ == "__main__":
    main()
