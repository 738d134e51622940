"""``nbkit lengthlaw`` (also ``python -m nbkit.offline.lengthlaw``, the spelling its stored card names): measure the
length law's long version and store it under ``data/results`` (``nbkit.offline.lengthlaw``)."""

from __future__ import annotations

import json
import sys
import time

from nbkit import results
from nbkit.cli.commands import Parser
from nbkit.offline import lengthlaw, lengthlaw_measure


def main(argv: list[str] | None = None) -> int:
    """Measure the long version and store it under ``data/results``."""
    p = Parser(prog="nbkit lengthlaw", description=lengthlaw.__doc__)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtypes", nargs="+", default=["bf16", "fp16", "fp32"])
    p.add_argument("--n-prompts", type=int, default=12)
    p.add_argument("--samples-per-prompt", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--engine", default="auto")
    p.add_argument("--engine-kwargs", type=json.loads, default={})
    p.add_argument("--study", default=lengthlaw.STUDY)
    a = p.parse_args(argv)
    start = time.time()
    runs = lengthlaw_measure.measure(
        a.model,
        tuple(a.dtypes),
        a.n_prompts,
        a.samples_per_prompt,
        a.max_tokens,
        engine=a.engine,
        engine_kwargs=a.engine_kwargs,
    )
    for row in lengthlaw.table(lengthlaw.laws(runs)):
        print(row, flush=True)
    command = "python -m nbkit.offline.lengthlaw " + " ".join(sys.argv[1:] if argv is None else argv)
    results.store(a.study, runs, command=command, wall_seconds=time.time() - start, configs=vars(a))
    return 0
