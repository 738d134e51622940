"""``nbkit gpu-budget``: the memory estimate of every RL run the gpu profile's notebooks start, as docs/gpu.md's table
(``nbkit.workbook.gpu_budget``)."""

from __future__ import annotations

from nbkit.cli.commands import Parser
from nbkit.workbook import gpu_budget


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="nbkit gpu-budget", description=gpu_budget.__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="gpu", help="the profile whose notebooks' runs are sized (default gpu)")
    a = p.parse_args(argv)
    print(gpu_budget.table(gpu_budget.budget(a.profile)))
    return 0
