"""``nbkit results-md`` (also ``python -m nbkit.studies.results_md``): write RESULTS.md from the stored studies, or
check it (``nbkit.studies.results_md``).

``--out`` writes only a new file, the project's RESULTS.md (under git), or a page this command wrote that nobody
edited since (its last line, the seal, holds the sha256 of everything above it: ``nbkit.runtime.outputs.unedited``):
any other existing file (a user's notes, the README, a page with a line added) is refused, as is a folder, a symlink to nothing and a file in a folder that does not exist, each in one line naming it. A stored
study whose files fail their check (changed after they were stored, a card disagreeing with its runs) or whose table
cannot be made is named with what to do, shown without numbers, and makes the exit status 1: the rest of the page is
written all the same.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nbkit.cli.commands import Parser
from nbkit.runtime import outputs
from nbkit.studies import results_md


def target(out: Path, check: bool) -> Path:
    """The file ``--out`` names, a symlink followed; ``OSError`` in one line (naming it and what to do) for a folder,
    a symlink to nothing, a missing folder and (unless ``check``: reading only) an existing file this command did not
    write. Reads only."""
    if out.is_symlink() and not out.exists():
        raise FileNotFoundError(
            f"--out {str(out)!r} is a symlink to {str(out.readlink())!r}, which does not exist: name a file, or "
            f"point the link at one"
        )
    path = outputs.resolve_link(out)
    if path.is_dir():
        raise IsADirectoryError(f"--out {str(out)!r} is a folder: name a file, e.g. {str(out / 'RESULTS.md')!r}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"--out {str(out)!r}: folder {str(path.parent)!r} does not exist: create it first")
    if check or not path.exists() or path.resolve() == results_md.PATH.resolve():
        return path
    if not path.is_file() or not outputs.unedited(path):
        raise FileExistsError(
            f"--out {str(out)!r} exists and is not a page this command wrote, or was edited since (its text is "
            f"not what its last line's sha256 seals): nothing was written; name a new file, or move that one away"
        )
    return path


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="nbkit results-md", description=results_md.__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when RESULTS.md is out of date")
    p.add_argument(
        "--out",
        type=Path,
        default=results_md.PATH,
        help="the file to write (default: the project's RESULTS.md); an existing file is replaced only when this "
        "command wrote it",
    )
    a = p.parse_args(argv)
    out = target(a.out, a.check)  # before any study is read
    text, troubles = results_md.page()
    for line in troubles:
        print(f"nbkit results-md: {line}", file=sys.stderr, flush=True)
    if a.check:
        same = out.is_file() and out.read_text(encoding="utf-8") == text
        if same:
            print(
                f"{a.out}: up to date"
                + (", but the studies above are not shown until they are put right" if troubles else "")
            )
        elif troubles:
            print(f"{a.out}: OUT OF DATE, and the stored data above fail their check: put them right first")
        else:
            print(f"{a.out}: OUT OF DATE (the stored data pass their checks): regenerate it with `nbkit results-md`")
        return 0 if same and not troubles else 1
    outputs.write_text(out, text)
    print(
        f"wrote {a.out} ({len(text.splitlines())} lines)"
        + (f"; {len(troubles)} study(ies) not shown" if troubles else "")
    )
    return 1 if troubles else 0
