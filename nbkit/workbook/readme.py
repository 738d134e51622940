"""The reference page's lists of extension points (``docs/reference.md``, linked from the README), generated from
their registries between markers.

    python -m nbkit.workbook.readme          # rewrite the generated blocks of docs/reference.md
    python -m nbkit.workbook.readme --check  # exit 1 when docs/reference.md differs from what the registries give

Each block sits between ``<!-- registry:NAME -->`` and ``<!-- /registry:NAME -->`` and is rendered from one
registry: ``presets`` (``nbkit.rl.algorithms.ALGORITHMS`` and ``CORRECTIONS``), ``formats``
(``nbkit.precision.formats.FORMATS`` by ``SCHEMES``), ``metrics`` (``nbkit.records.metrics.MISMATCH``) and ``studies``
(``nbkit.studies.catalog.STUDIES``). Everything outside the markers is the page's own prose.
``tests/workbook/test_readme_registries.py`` fails when the file is out of date, as
``tests/studies/test_results_md.py`` does for RESULTS.md.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections.abc import Callable
from pathlib import Path

from nbkit.precision import formats as F
from nbkit.records import metrics as M
from nbkit.rl import algorithms as A
from nbkit.runtime.paths import ROOT
from nbkit.studies.base import markdown_table
from nbkit.studies.catalog import STUDIES

PATH = ROOT / "docs" / "reference.md"
"""The file whose blocks are generated (the README links to it)."""


def _code(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def presets() -> str:
    """The RL presets (loss, corrections, trainer) and the corrections ``correction=`` can put into any of them."""
    rows = [
        {
            "preset": f"`{a.name}`",
            "loss": f"`{a.loss}`",
            "corrections": _code(a.corrections),
            "trainer": f"`{A.TRAINERS[a.trainer].path.split(':')[1]}`",
            "what it does": a.summary,
        }
        for a in A.ALGORITHMS.values()
    ]
    fixes = [{"correction": f"`{c.name}`", "what it does": c.summary} for c in A.CORRECTIONS.values()]
    return markdown_table(rows) + "\n\n" + markdown_table(fixes)


def formats() -> str:
    """The rollout formats, one row per quantization scheme."""
    rows = []
    for scheme, fmts in itertools.groupby(F.FORMATS.values(), key=lambda f: f.scheme):
        fmts = list(fmts)
        names = [f.name for f in fmts]
        listed = f"`{names[0]}` … `{names[-1]}`" if len(names) >= 4 else _code(names)
        rows.append(
            {
                "formats": listed,
                "base dtype": " / ".join(dict.fromkeys(f.base for f in fmts)),
                "GEMMs": F.SCHEMES[scheme].summary,
                "vLLM runs it": _code(f.name for f in fmts if f.vllm_quantization) or "—",
            }
        )
    return markdown_table(rows)


def metrics() -> str:
    """The mismatch metrics: key, what a run logs per step, other libraries' names, meaning."""
    rows = [
        {
            "metric": f"`{m.key}`",
            "per RL step as": _code(f"mismatch/{n}" for n in m.logged) or "—",
            "also logged by Oat/verl/TRL as": _code(m.aliases) or "—",
            "headline": "yes" if m.headline else ("CI" if m.ci else ""),
            "meaning": m.meaning,
        }
        for m in M.MISMATCH.values()
    ]
    return f"Metrics version {M.VERSION} (on every stored study's card).\n\n" + markdown_table(rows)


def studies() -> str:
    """The stored studies (RESULTS.md's sections), with the notebook that draws each."""
    rows = [
        {"study": f"`{s.name}`", "title": s.title, "notebook": f"`{s.notebook}`" if s.notebook else "—"}
        for s in STUDIES.values()
    ]
    return markdown_table(rows)


BLOCKS: dict[str, Callable[[], str]] = {"presets": presets, "formats": formats, "metrics": metrics, "studies": studies}
"""Block name → its renderer."""


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- registry:{name} -->\n)(.*?)(<!-- /registry:{name} -->)", re.S)


def render(text: str) -> str:
    """``text`` (the reference page) with every block regenerated; a block whose markers are missing is a ValueError."""
    for name, block in BLOCKS.items():
        pattern = _pattern(name)
        if not pattern.search(text):
            raise ValueError(
                f"{PATH.name} has no block {name!r} (<!-- registry:{name} --> … <!-- /registry:{name} -->)"
            )
        text = pattern.sub(lambda m, b=block: m.group(1) + b() + "\n" + m.group(3), text, count=1)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nbkit.workbook.readme", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help=f"only compare; exit 1 when {PATH.name} is out of date")
    p.add_argument("--out", type=Path, default=PATH)
    a = p.parse_args(argv)
    old = a.out.read_text(encoding="utf-8")
    text = render(old)
    if a.check:
        same = old == text
        print(f"{a.out}: {'up to date' if same else 'OUT OF DATE: run python -m nbkit.workbook.readme'}")
        return 0 if same else 1
    a.out.write_text(text, encoding="utf-8")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
