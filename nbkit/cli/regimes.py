"""``nbkit regimes``: tiny-long's perfectible set per length regime, the cost of an RL step per regime, and its
FP16/BF16 sanity test (``nbkit.studies.tiny_long_regimes``)."""

from __future__ import annotations

import json

from nbkit.cli.commands import Parser
from nbkit.models.toymodels import long_arith
from nbkit.records import schema
from nbkit.studies import tiny_long_regimes as regimes


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="nbkit regimes", description=regimes.__doc__.splitlines()[0])
    parser.add_argument("what", choices=("sets", "timing", "sanity"))
    parser.add_argument("--regimes", nargs="+", default=list(long_arith.REGIMES), choices=list(long_arith.REGIMES))
    parser.add_argument("--regime", default="short", choices=list(long_arith.REGIMES))
    parser.add_argument("--engine", default="hf", choices=("hf", "vllm"))
    parser.add_argument("--pool-size", type=int, default=100)
    parser.add_argument("--n-samples", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    if args.what == "sets":
        for regime in args.regimes:
            res = regimes.build_set(regime, args.pool_size, args.n_samples, engine=args.engine)
            h = res.card["histogram_pool"]
            print(
                regime,
                res.path,
                f"kept {len(res.kept)}/{len(res.records)}",
                f"mean pass {h['mean']:.3f}",
                f"{res.card['sampling_seconds']} s",
                flush=True,
            )
    elif args.what == "timing":
        print(json.dumps(regimes.timing(tuple(args.regimes), args.engine), indent=1))
    else:
        runs = regimes.sanity(args.regime, tuple(args.seeds), args.steps, args.engine)
        for label, rows in runs.items():
            acc = [round(r[schema.ACCURACY], 3) for r in rows if schema.ACCURACY in r]
            print(label, "first", acc[:3], "last", acc[-3:], flush=True)
    return 0
