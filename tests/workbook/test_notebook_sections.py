"""A notebook reads top to bottom: each section computes its own results in its own cells. No cell starts a later
section's work beside its own (``beside=`` jobs in one pool) for a later section to read back, so a student never
meets a result before the section that explains it."""

import re

import nbformat
import pytest

from nbkit.workbook import runner

NOTEBOOKS = runner.notebooks()


def sections(path) -> list[tuple[str, str]]:
    """``(section heading, the code of its cells)`` in order; the cells before the first ``## `` heading are ``""``."""
    out = [("", "")]
    for cell in nbformat.read(path, as_version=4).cells:
        heading = re.search(r"^## (.+)$", cell.source, re.M) if cell.cell_type == "markdown" else None
        if heading:
            out.append((heading.group(1), ""))
        elif cell.cell_type == "code":
            out[-1] = (out[-1][0], out[-1][1] + cell.source + "\n")
    return out


NOT_YET: dict[str, str] = {}
"""Notebooks known to break the rule, each with why: a strict xfail, so fixing one fails here until it is removed."""


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=NOT_YET[p.stem], strict=True)) if p.stem in NOT_YET else p
        for p in NOTEBOOKS
    ],
    ids=lambda p: p.stem,
)
def test_no_section_starts_a_later_sections_work(path):
    for heading, code in sections(path):
        assert "beside=" not in code, f"{path.name}, section {heading!r}: jobs of a later section started here"
        assert not re.search(r"computed in section \d+'s cell|trained in section \d+'s cell", code), (
            f"{path.name}, section {heading!r} reads a result an earlier section computed for it"
        )


def test_the_sections_of_notebook_02_compute_their_own_live_parts():
    (path,) = [p for p in NOTEBOOKS if p.stem.startswith("02_")]
    by_number = {h.split(".")[0]: code for h, code in sections(path) if h[:1].isdigit()}
    assert "run_grids(" in by_number["1"]
    assert "lengthlaw_measure:measure" in by_number["7"]
    assert "moe_analysis:run" in by_number["8"]
    assert "anatomy:run" in by_number["9"]


def test_the_sections_of_notebook_06_compute_their_own_live_parts():
    """Section 1 computes the offline ladder alone; the live slice is started in the background before section 1
    (``start_live``) and section 4, which shows it, awaits it: no section before 4 reads it."""
    (path,) = [p for p in NOTEBOOKS if p.stem.startswith("06_")]
    preamble = sections(path)[0][1]
    by_number = {h.split(".")[0]: code for h, code in sections(path) if h[:1].isdigit()}
    assert "study.start_live(" in preamble and "study.live(" not in preamble
    assert "run_ladder(" in by_number["1"]
    assert all("live_slice" not in code and "study.live(" not in code for n, code in by_number.items() if n < "4")
    assert "live_slice.result()" in by_number["4"]
