"""Shared fixtures: one smoke-profile run of the whole workbook per test session.

``tests/test_notebooks.py`` checks that every notebook of that run succeeded and ``tests/test_browser.py`` opens
its reports in Chromium, so each notebook executes once per session however many tests read its report.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from nbkit import runner


@pytest.fixture(scope="session")
def smoke_report(tmp_path_factory) -> tuple[Path, dict[str, runner.NotebookResult]]:
    """``(report folder, stem -> result)`` of ``nbkit run --profile smoke`` into a temporary folder."""
    out = tmp_path_factory.mktemp("smoke_report")
    results = runner.run("smoke", out)
    return out, {r.stem: r for r in results}
