"""``nbkit results-md`` (also ``python -m nbkit.studies.results_md``): write RESULTS.md from the stored studies, or
check it (``nbkit.studies.results_md``)."""

from __future__ import annotations

from pathlib import Path

from nbkit.cli.commands import Parser
from nbkit.studies import results_md


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="nbkit results-md", description=results_md.__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when RESULTS.md is out of date")
    p.add_argument("--out", type=Path, default=results_md.PATH)
    a = p.parse_args(argv)
    text = results_md.render()
    if a.check:
        same = a.out.is_file() and a.out.read_text(encoding="utf-8") == text
        print(f"{a.out}: {'up to date' if same else 'OUT OF DATE: run python -m nbkit.studies.results_md'}")
        return 0 if same else 1
    a.out.write_text(text, encoding="utf-8")
    print(f"wrote {a.out} ({len(text.splitlines())} lines)")
    return 0
