"""How a study's page is written: markdown tables, and sentences filled from templates over named fields.

A study computes its numbers into rows with named fields (``gap``, ``ci_low``, ...); its page shows them under
display headers (``columns``: field → header, ``display``) and writes its sentences by filling templates with the
same named fields (``str.format``), so no sentence reads a display header and a header can change without touching
prose.
"""

from __future__ import annotations

from nbkit import results


def seeds(n: int) -> str:
    """``"1 seed"``, ``"5 seeds"`` (``nbkit.results.count``)."""
    return results.count(n, "seed")


def mean3(xs: list[float]) -> float | None:
    """The mean of ``xs`` to 3 significant figures (None for no value)."""
    return float(f"{sum(xs) / len(xs):.3g}") if xs else None


def arm(fmt: str, correction: str | None = None, train: str = "fp32") -> str:
    """An arm's name on a page: ``format``, ``format + correction``, or ``train/format`` when the trainer is not
    FP32."""
    return (fmt if train == "fp32" else f"{train}/{fmt}") + ("" if correction in (None, "none") else f" + {correction}")


def display(rows: list[dict], columns: dict[str, str]) -> list[dict]:
    """``rows`` with each named field under its display header (``columns``: field → header; a field not named
    keeps its name), in the rows' own order."""
    return [{columns.get(k, k): v for k, v in r.items()} for r in rows]


def named(rows: list[dict], columns: dict[str, str]) -> list[dict]:
    """``display``'s inverse: rows under display headers back to their named fields."""
    back = {v: k for k, v in columns.items()}
    return [{back.get(k, k): v for k, v in r.items()} for r in rows]


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
