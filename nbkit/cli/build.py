"""``nbkit build``: regenerate what the workbook ships that it made itself (deterministic, seeded).

nbkit build tiny-arith                     # data/models/tiny-arith (~2 minutes on 2 CPU cores)
nbkit build tiny-moe                       # data/models/tiny-moe-arith (~5 minutes)
nbkit build tiny-long --max-seconds 800    # the tiny-long SFT in pieces: repeat until it prints the checkpoint
nbkit build heldout                        # data/tiny_arith_heldout, the judge's held-out set (~2-4 minutes)
"""

from __future__ import annotations

from nbkit.cli.commands import Parser
from nbkit.models.toymodels import tiny_arith, tiny_long, tiny_moe
from nbkit.tasks import heldout

WHAT = ("tiny-arith", "tiny-moe", "tiny-long", "heldout")
"""What ``nbkit build`` makes."""


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="nbkit build", description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=WHAT)
    p.add_argument(
        "--max-seconds",
        type=float,
        default=float("inf"),
        help="tiny-long: stop this piece after this many seconds of SFT (the state is kept; run again)",
    )
    p.add_argument(
        "--steps", type=int, default=tiny_long.TinyLongConfig.steps, help="tiny-long: SFT steps of the recipe"
    )
    p.add_argument("--fresh", action="store_true", help="tiny-long: delete the saved SFT state first")
    p.add_argument(
        "--threads", type=int, default=1, help="tiny-long: torch threads for SFT (results do not depend on it)"
    )
    a = p.parse_args(argv)
    if a.what == "tiny-arith":
        print(tiny_arith.build())
    elif a.what == "tiny-moe":
        print(tiny_moe.build())
    elif a.what == "heldout":
        result = heldout.build_tiny_arith()
        print(f"{result.path}: kept {len(result.kept)} of {len(result.records)} unseen problems")
    else:
        if a.fresh:
            (tiny_long.STATE / "state.pt").unlink(missing_ok=True)
        done = tiny_long.build(
            cfg=tiny_long.TinyLongConfig(steps=a.steps), max_seconds=a.max_seconds, threads=a.threads
        )
        print(done if done else f"unfinished: state kept in {tiny_long.STATE}; run again to continue")
    return 0
