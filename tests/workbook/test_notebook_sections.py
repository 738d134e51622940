"""A notebook reads top to bottom: each section computes its own results in its own cells, or awaits them there when
they were started in the background before section 1 (``pool.start``, ``GridStudy.start_live``). No cell starts a
later section's work beside its own (``beside=`` jobs in one pool) for a later section to read back, so a student
never meets a result before the section that explains it."""

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


def test_the_sections_of_notebook_02_await_their_own_live_parts_started_in_one_pool_before_section_1():
    """The grid and the live parts of sections 7-9 start together before section 1 (``pool.start``: one pool, both
    cores busy to the end); section 1 awaits the grid, and each of sections 7-9 awaits its own jobs, which no section
    before it reads."""
    (path,) = [p for p in NOTEBOOKS if p.stem.startswith("02_")]
    preamble = sections(path)[0][1]
    by_number = {h.split(".")[0]: code for h, code in sections(path) if h[:1].isdigit()}
    assert "pool.start(" in preamble and "analysis.grid_jobs(configs)" in preamble
    for target in ("lengthlaw_measure:measure", "moe_analysis:run", "anatomy:run"):
        assert target in preamble
    assert "grid_results(configs, live)" in by_number["1"]
    awaited = {"7": 'live.result("lengthlaw")', "8": 'live.result(f"moe:', "9": 'live.result(f"anatomy:'}
    for number, call in awaited.items():
        assert call in by_number[number], number
        assert all(call not in code for n, code in by_number.items() if int(n) < int(number)), number
    assert all("pool.run(" not in code and "run_grids(" not in code for code in by_number.values())


def test_the_sections_of_notebook_03_await_their_own_runs_started_in_one_pool_before_section_1():
    """Section 1's GRPO runs and section 5's live PPO slice start together before section 1; section 1 awaits the
    GRPO runs, section 5 the PPO runs (then reads them back), and no section before 5 reads the slice."""
    (path,) = [p for p in NOTEBOOKS if p.stem.startswith("03_")]
    preamble = sections(path)[0][1]
    by_number = {h.split(".")[0]: code for h, code in sections(path) if h[:1].isdigit()}
    assert "pool.start(grpo_jobs, ppo_jobs" in preamble and "ppo_study.live(" not in preamble
    assert "live.result(label) for label in grpo_jobs" in by_number["1"]
    assert "for label in ppo_jobs" in by_number["5"] and "ppo_study.live(" in by_number["5"]
    assert all("ppo_jobs" not in code and "ppo_runs" not in code for n, code in by_number.items() if n < "5")
    assert all("train_grid(" not in code for code in by_number.values())


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
