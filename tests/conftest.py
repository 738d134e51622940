"""Suite-wide checks and shared fixtures.

``NBKIT_REQUIRE_VLLM=1`` (set by ``make test`` whenever the Makefile's ``VLLM_SPEC`` names a vLLM build) makes a
vLLM that does not import a failure of the whole run instead of a row of skipped tests: the venv was meant to
have it, so its absence is a broken install, not an optional feature.

``smoke_report``: one smoke-profile run of the whole workbook per test session. ``tests/test_notebooks.py``
checks that every notebook of that run succeeded and ``tests/test_browser.py`` opens its reports in Chromium, so
each notebook executes once per session however many tests read its report.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from nbkit import runner


def vllm_import_error() -> str | None:
    """Why ``import vllm`` fails here (None when it imports)."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import is the finding
        return f"{type(exc).__name__}: {exc}"
    return None


def pytest_configure(config):
    if os.environ.get("NBKIT_REQUIRE_VLLM") == "1":
        error = vllm_import_error()
        if error is not None:
            raise pytest.UsageError(f"NBKIT_REQUIRE_VLLM=1 (make test with VLLM_SPEC set) but vLLM does not "
                                    f"import: {error}. Reinstall with `make clean-venv venv`, or run "
                                    f"`make test VLLM_SPEC=` on a machine without vLLM.")


@pytest.fixture(scope="session")
def smoke_report(tmp_path_factory) -> tuple[Path, dict[str, runner.NotebookResult]]:
    """``(report folder, stem -> result)`` of ``nbkit run --profile smoke`` into a temporary folder."""
    out = tmp_path_factory.mktemp("smoke_report")
    results = runner.run("smoke", out)
    return out, {r.stem: r for r in results}
