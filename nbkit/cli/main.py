"""The ``nbkit`` command (and ``python -m nbkit``): the one entry point of every command line.

It puts the caches inside the project (``nbkit.runtime.paths.setup_environment``; a user's own setting wins), runs the
subcommand (``run`` and ``list`` here, the others from ``nbkit.cli.commands.COMMANDS``, each ``nbkit/cli/<command>.py``)
and reports a refusal as one line with exit status 2 (``--debug``: the traceback too).
"""

from __future__ import annotations

import sys
from pathlib import Path

from nbkit import __version__
from nbkit.cli.commands import COMMANDS, Parser, dispatch, guarded
from nbkit.runtime import paths
from nbkit.runtime.paths import REPORTS
from nbkit.workbook import runner
from nbkit.workbook.profiles import PROFILES


def main(argv: list[str] | None = None) -> int:
    """The ``nbkit`` command (and ``python -m nbkit``): a refusal is one line and exit status 2 (``--debug``: the
    traceback too)."""
    return guarded(_main, argv)


def check_text_encoding() -> None:
    """``ValueError`` in one line when Python reads files as ASCII (``PYTHONUTF8=0`` under ``LANG=C``): the libraries'
    own templates are UTF-8, and reading one would fail 40 lines deep."""
    import locale

    encoding = locale.getpreferredencoding(False)
    if not sys.flags.utf8_mode and encoding.lower().replace("-", "").replace("_", "") != "utf8":
        raise ValueError(
            f"Python reads text files as {encoding} here (the locale's encoding, UTF-8 mode off): the workbook's and "
            f"its libraries' files are UTF-8; set PYTHONUTF8=1 (or LANG=C.UTF-8) and run again"
        )


def _main(argv: list[str]) -> int:
    check_text_encoding()
    paths.setup_environment()  # an entry point: caches inside the project, hub offline (a user's own setting wins)

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:  # train, doctor, plan: their own modules and parsers
        return dispatch(argv[0], argv[1:])
    parser = Parser(prog="nbkit", description=runner.__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    p_run = sub.add_parser("run", help="execute notebooks into a report folder")
    p_run.add_argument("--profile", default="cpu", help=f"one of {tuple(PROFILES)}")
    p_run.add_argument("--out", default=str(REPORTS), help="report folder")
    p_run.add_argument("--only", nargs="+", help="notebook stems (or prefixes) to run")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a refusal (anywhere on the line)")
    parser.add_argument("--version", action="version", version=f"nbkit {__version__}")
    sub.add_parser("list", help="notebooks and their parameters per profile")
    if not argv:  # no command: what there is to do, not argparse's "arguments are required: cmd"
        print(
            parser.format_help().rstrip() + "\n\nStart with `nbkit run --profile smoke` (every notebook, small "
            "parameters) or `nbkit list`; `nbkit COMMAND --help` describes a command."
        )
        return 0
    args = parser.parse_args(argv)
    if args.cmd == "list":
        for path in runner.notebooks():
            print(path.stem, {name: prof.get(path.stem, {}) for name, prof in PROFILES.items()})
        return 0
    results = runner.run(args.profile, args.out, args.only)
    print(f"[nbkit] report: {Path(args.out) / 'index.html'}")
    failed = [r.stem for r in results if not r.ok]
    if failed:
        print(f"[nbkit] failed notebooks: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
