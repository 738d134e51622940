"""The shape every stored study shares: stored runs in, a table and computed sentences out."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from nbkit import results


@dataclass(frozen=True)
class Study:
    """One stored study under ``data/results/<name>`` and how to read it."""

    name: str
    """Folder name under ``data/results`` (``nbkit.results``)."""
    title: str
    """Heading in RESULTS.md."""
    question: str
    """What the study asks, in one or two sentences (stated before its results)."""
    statistic: str
    """The statistic the table reports: windows, seeds, intervals."""
    table: Callable[[dict[str, list[dict]]], list[dict]]
    """``label → rows`` of the stored runs → rows of the study's table."""
    findings: Callable[[dict[str, list[dict]], list[dict]], list[str]] = field(default=lambda runs, rows: [])
    """Plain sentences computed from the runs and the table (no number typed by hand)."""
    notebook: str = ""
    """The notebook that draws from this study, if any."""

    def runs(self) -> dict[str, list[dict]]:
        """``label → metric rows`` of the stored study."""
        return results.load(self.name)

    def card(self) -> dict:
        """The stored study's provenance card."""
        return results.card(self.name)


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if value != value:
            return "—"
        return f"{value:.3g}" if value and abs(value) < 1e-2 else f"{value:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A GitHub markdown table of ``rows`` (``columns`` picks and orders keys; default: the first row's keys)."""
    if not rows:
        return "_(no rows)_"
    columns = columns or list(rows[0])
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise KeyError(f"columns {missing} are not in the table; it has {list(rows[0])}")
    head = "| " + " | ".join(_cell(c) for c in columns) + " |"
    rule = "|" + "---|" * len(columns)
    body = ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])
