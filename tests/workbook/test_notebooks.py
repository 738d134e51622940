"""Every notebook in notebooks/ runs end to end under papermill with its smoke parameters.

A notebook that the main job would break on fails here; a new notebook without a smoke entry fails too.
"""

import json
from pathlib import Path

import nbformat
import pytest

from nbkit.workbook import runner
from nbkit.workbook.profiles import PROFILES

NOTEBOOKS = runner.notebooks()


def test_the_workbook_has_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_stripped_with_a_parameters_cell(path: Path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), (
        f"{path.name} has outputs: strip it (make strip)"
    )
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name} needs exactly one code cell tagged 'parameters'"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_profile_names_only_parameters_the_notebook_declares(path: Path):
    nb = nbformat.read(path, as_version=4)
    params_cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    declared = {
        line.split("=")[0].strip().split(":")[0].strip()
        for line in params_cell.source.splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    }
    for profile, entries in PROFILES.items():
        unknown = set(entries.get(path.stem, {})) - declared
        assert not unknown, f"profile {profile!r} passes {sorted(unknown)} that {path.name} does not declare"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_reads_every_parameter_with_its_help(path: Path):
    """``papermill --help-notebook`` (``inspect_notebook``) lists each parameter; a line it cannot parse (an ``=``
    inside the comment trips its regex) would be left out with only a log warning."""
    import papermill

    seen = papermill.inspect_notebook(str(path))
    assert set(seen) == runner.notebook_parameters(path)
    assert all(p["help"] for p in seen.values()), (
        f"{path.name}: parameters without a comment: {sorted(n for n, p in seen.items() if not p['help'])}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_with_smoke_parameters(path: Path, smoke_report):
    assert path.stem in PROFILES["smoke"], f"add a 'smoke' entry for {path.stem} in nbkit/workbook/profiles.py"
    out, results = smoke_report  # one run of the whole workbook per session (tests/conftest.py)
    result = results[path.stem]
    assert result.ok, f"{path.name} failed: {result.error}"
    html = (out / f"{path.stem}.html").read_text()
    assert "Traceback" not in html and len(html) > 10_000
    # what it ran with is kept for the next estimate: the notebook's own defaults of what the profile left alone
    assert not set(result.defaults) & set(result.parameters)
    assert {**result.defaults, **result.parameters} == runner.effective_parameters(path, result.parameters)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_publishes_its_headline_for_the_findings_page(path: Path, smoke_report):
    out, _ = smoke_report
    summary = out / f"{path.stem}.summary.json"
    assert summary.exists(), f"{path.name} does not call nbkit.workbook.report.publish(...)"
    data = json.loads(summary.read_text())
    assert data["notebook"] == path.stem and data["headline"]
    assert data["figure"] and (out / data["figure"]).exists(), f"{path.name} publishes no key figure"
