"""``nbkit study``: one command for every study.

    nbkit study                                   # the studies, with what each asks
    nbkit study NAME show                         # the stored study's provenance, table and findings
    nbkit study NAME run [--shard i/n] [--set steps=4 --set 'seeds=[0,1]']   # train the unfinished runs
    nbkit study NAME store [--wall-seconds S] [--set ...]                    # finished runs -> data/results/NAME
    nbkit study NAME run --keep-stored && nbkit study NAME store --keep-stored   # only what the card lists missing

``--set key=value`` passes an option of the study's grid (a JSON value, or a plain string; an unknown key is refused
naming the grid's options); ``run`` and ``store`` must get the same options. ``run`` never replaces a run of another
setting without ``--overwrite``; ``store`` never replaces a stored study of other runs or another grid without
``--replace`` (the old one is then kept beside as ``data/results/NAME.replaced-<date>``). A finished run is never
re-run, so ``run`` resumes a study cut off half-way, and two shards (``--shard 0/2``, ``--shard 1/2``)
split it between two processes.
"""

from __future__ import annotations

import json
import shlex
import sys

from nbkit import results
from nbkit.cli.commands import Parser
from nbkit.studies import GridStudy, markdown_table
from nbkit.studies.catalog import STUDIES
from nbkit.studies.results_md import checked, section


def parse_options(pairs: list[str]) -> dict:
    """``["steps=4", "seeds=[0,1]", "engine=hf"]`` → ``{"steps": 4, "seeds": [0, 1], "engine": "hf"}``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {pair!r}: expected key=value (a JSON value or a plain string)")
        try:
            out[key.strip().replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip().replace("-", "_")] = value
    return out


def check_options(study, options: dict) -> None:
    """Every ``--set`` key names an option of ``study.grid`` (ValueError listing them otherwise)."""
    import difflib
    import inspect

    params = inspect.signature(study.grid).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = sorted(name for name, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL)
    for key, value in options.items():  # a list option given one value (--set seeds=5): say how to write the list
        listed = key in params and (isinstance(params[key].default, (list, tuple)) or key.endswith("seeds"))
        if listed and not isinstance(value, (list, tuple, type(None))):
            raise ValueError(f"--set {key}={value!r}: {study.name}'s {key} is a list; write {key}=[{value!r}]")
    for key in options:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=3)
            raise ValueError(
                f"--set {key}=...: {study.name} has no grid option {key!r}"
                + (f" (did you mean {' or '.join(close)}?)" if close else "")
                + f"; its options: {', '.join(valid)}"
            )


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="nbkit study", description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?", help=f"one of {sorted(STUDIES)}")
    p.add_argument("action", nargs="?", choices=("show", "run", "store"), default="show")
    p.add_argument("--shard", default="0/1", help="run: i/n, this process's share of the grid (default 0/1)")
    p.add_argument(
        "--set",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the study's grid (repeatable)",
    )
    p.add_argument(
        "--keep-stored",
        action="store_true",
        help="run: skip the runs the stored study already holds with the same config; store: add the grid's "
        "runs the stored study lacks, keeping every stored run as it is (a study continued in a later sitting; "
        "a stored study of another grid is refused)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="run: replace a run folder that holds a run of another setting (keeps nothing of it)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="store: replace a stored study of other runs or another grid (the old one is kept beside "
        "as data/results/NAME.replaced-<date>)",
    )
    p.add_argument(
        "--wall-seconds",
        type=float,
        default=None,
        help="store: the study's wall time in seconds, to record on its card (default: none recorded, and the card "
        "says so: storing takes no time of the study's)",
    )
    a = p.parse_args(argv)
    if a.name is None:
        print(
            markdown_table(
                [
                    {"study": s.name, "grid of runs": isinstance(s, GridStudy), "asks": s.question}
                    for s in STUDIES.values()
                ]
            )
        )
        return 0
    if a.name not in STUDIES:
        p.error(f"unknown study {a.name!r}; choose one of {sorted(STUDIES)}")
    study = STUDIES[a.name]
    if a.action == "show":
        stored = (results.RESULTS / study.name).is_dir()
        text, trouble = checked(study, results.RESULTS) if stored else (section(study), "")
        print(text)
        if trouble:  # the stored data fail their check or make no table: named, with what to do
            print(f"nbkit study: {trouble}", file=sys.stderr, flush=True)
        return 1 if trouble else 0
    if not isinstance(study, GridStudy):
        p.error(f"{a.name} is not a grid of RL runs: reproduce it with `{study.reproduce(study.card())}`")
    options = parse_options(a.options)
    check_options(study, options)
    if a.action == "run":
        try:
            i, n = (int(x) for x in a.shard.split("/"))
        except ValueError:
            p.error(f"--shard {a.shard!r}: expected i/n, e.g. 0/2")
        runs = study.run((i, n), keep_stored=a.keep_stored, overwrite=a.overwrite, **options)
        print(f"{a.name} shard {i}/{n}: {len(runs)} finished runs under {study.folder(options)}")
        return 0
    if a.wall_seconds is not None and not 0 <= a.wall_seconds < float("inf"):
        p.error(f"--wall-seconds {a.wall_seconds}: expected the study's wall time, a number of seconds >= 0")
    wall = a.wall_seconds  # None: not measured here (this command only stores), never this command's ~0 s
    command = "nbkit study " + a.name + " run" + "".join(f" --set {shlex.quote(o)}" for o in a.options)
    path = study.store(wall_seconds=wall, command=command, keep_stored=a.keep_stored, replace=a.replace, **options)
    print(f"stored {path}")
    return 0
