"""Step-0 dose of every dial point (``nbkit.precision.dial``) on the offline ladder: per-token |Δ log p| against an FP32
trainer.

Prints, per point of the block rule (``dial-e8m1-<n>of<2L>``) and of the channel rule (``dial-e8m1-c<k>of<K>``), the
ladder's headline mismatch with its bootstrap CI over sequences and the sequence KL (``nbkit.offline.ladder``, its
default 32 prompts × 4 samples, ≤ 48 tokens, seed 0), so the dose–response study can pick points spread over its range.

    .venv/bin/python benchmarks/bench_dial_ladder.py                        # tiny-arith, both rules, K = 8
    .venv/bin/python benchmarks/bench_dial_ladder.py --rules channel --steps 16
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-arith")
    p.add_argument("--layers", type=int, default=4, help="the model's decoder layers (block rule: 2 blocks each)")
    p.add_argument("--steps", type=int, default=8, help="channel rule: K")
    p.add_argument("--rules", nargs="+", choices=("block", "channel"), default=["block", "channel"])
    args = p.parse_args()

    import torch

    from nbkit.offline.ladder import LadderConfig, run_ladder
    from nbkit.precision import dial
    from nbkit.records import schema
    from nbkit.results import cpu_header

    torch.set_num_threads(1)
    print(cpu_header())
    names = (dial.names(args.layers) if "block" in args.rules else ()) + (
        dial.channel_names(args.steps) if "channel" in args.rules else ()
    )
    start = time.time()
    res = run_ladder(LadderConfig(model=args.model, formats=names))
    print(f"{'point':22} {'|Δlog p|':>9} {'95% CI':>17} {'seq KL':>8}")
    for name in names:
        m, ci = res.metrics[name], res.cis[name][schema.METRIC_TOKEN_ABS_LOGP_DIFF]
        print(
            f"{name:22} {m[schema.METRIC_TOKEN_ABS_LOGP_DIFF]:9.4f} {ci['low']:8.4f}–{ci['high']:<8.4f} "
            f"{m['seq_kl']:8.3f}"
        )
    print(f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
