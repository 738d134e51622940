"""``nbkit jobtime``: the main job's time estimate for this CPU, or a finished report's times recorded
(``nbkit.workbook.jobtime``; the runner's notebooks, in its order, with its parameters)."""

from __future__ import annotations

import json
from pathlib import Path

from nbkit.cli.commands import Parser
from nbkit.workbook import jobtime, runner


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="nbkit jobtime", description=jobtime.__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    e = sub.add_parser("estimate", help="the estimate for this CPU (the default)")
    e.add_argument("--profile", default="cpu")
    r = sub.add_parser("record", help="append a finished report's times to data/timings/main_job.json")
    r.add_argument("report_dir")
    r.add_argument("--fresh-clone", action="store_true", help="the report came from a fresh clone (cold caches)")
    r.add_argument("--note", default="", help="e.g. the load the machine was under")
    a = p.parse_args(argv)
    if a.cmd == "record":
        print(json.dumps(jobtime.record(Path(a.report_dir), fresh_clone=a.fresh_clone, note=a.note), indent=1))
        return 0
    profile = getattr(a, "profile", "cpu")
    stems = [n.stem for n in runner.notebooks()]
    try:
        parameters = {s: runner.parameters_for(profile, s) for s in stems}
    except ValueError as exc:  # an unknown profile, named with the choices
        p.error(str(exc))
    effective = {n.stem: runner.effective_parameters(n, parameters[n.stem]) for n in runner.notebooks()}
    est = jobtime.estimate(
        stems, profile, jobtime.calibrate(), jobtime.cpu(), parameters=parameters, effective=effective
    )
    print(est.describe() if est else f"no stored measurement of profile {profile!r} in {jobtime.TIMINGS}: no estimate")
    return 0
