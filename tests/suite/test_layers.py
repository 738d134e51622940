"""The library's layers hold by themselves: pyproject's import-linter contract (``[tool.importlinter]``) passes, an
upward import planted anywhere (at a module's top or inside a function) breaks it, no import cycle joins two modules,
and reading stored results needs no torch."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from nbkit.runtime.paths import ROOT

LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
)
"""import-linter on the ``pyproject.toml`` of the current folder, the ``nbkit`` found first on ``sys.path``."""


def lint(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter with ``root``'s contract on ``root``'s copy of ``nbkit`` (``root`` first on the path)."""
    return subprocess.run(
        [sys.executable, "-c", LINT],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def layers() -> list[str]:
    (contract,) = [
        c
        for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
        if c["id"] == "layers"
    ]
    return contract["layers"]


def test_the_layers_contract_holds():
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "KEPT" in out.stdout and "BROKEN" not in out.stdout


def test_the_contract_lists_the_layers_top_down_from_the_app_to_the_core():
    names = [layer.replace("|", ":").split(":") for layer in layers()]
    order = {name.strip(): i for i, group in enumerate(names) for name in group}
    assert order["cli"] < order["workbook"] < order["studies"] < order["rl"] == order["plots"] < order["offline"]
    assert order["offline"] < order["mismatch"] == order["results"] < order["tasks"] < order["engines"]
    assert (
        order["engines"] < order["models"] < order["precision"] < order["records"] < order["stats"] == order["runtime"]
    )


def test_siblings_of_a_layer_are_independent_so_no_two_packages_share_a_level_to_import_each_other():
    """``|`` in the contract: siblings never import each other (``:`` would let them, which hid tasks -> engines ->
    models -> tasks and precision -> models inside one level until issue 53)."""
    assert all(":" not in layer for layer in layers())


@pytest.mark.parametrize("where", ["top", "function"])
def test_an_upward_import_planted_in_a_copy_breaks_the_contract(tmp_path, where):
    """A core module (``nbkit.runtime.paths``) importing the command line, at its top or deferred inside a function."""
    shutil.copytree(ROOT / "nbkit", tmp_path / "nbkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "nbkit" / "runtime" / "paths.py"
    planted = (
        "\nimport nbkit.cli.main\n"
        if where == "top"
        else "\n\ndef _planted():\n    from nbkit.cli import main\n\n    return main\n"
    )
    target.write_text(target.read_text() + planted)
    out = lint(tmp_path)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert (
        "BROKEN" in out.stdout
        and "nbkit.runtime is not allowed to import nbkit.cli" in out.stdout
        and "- nbkit.runtime.paths -> nbkit.cli" in out.stdout
    )


@pytest.mark.parametrize(
    ("module", "line", "importer", "imported"),
    [
        ("precision/gemm.py", "from nbkit.models.models import DTYPES", "nbkit.precision", "nbkit.models"),
        ("models/toymodels/tiny_arith.py", "from nbkit.tasks import sources", "nbkit.models", "nbkit.tasks"),
        ("engines/base.py", "from nbkit.tasks import dataset", "nbkit.engines", "nbkit.tasks"),
    ],
)
def test_the_arrows_issue_53_removed_cannot_come_back(tmp_path, module, line, importer, imported):
    """The gemm policy and the LM head once read the dtype table from the model loader, and the toy models read their
    problems from the tasks package, which samples through the engines, which load the toy models: each arrow, planted
    again inside a function, breaks the contract."""
    shutil.copytree(ROOT / "nbkit", tmp_path / "nbkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "nbkit" / module
    target.write_text(target.read_text() + f"\n\ndef _planted():\n    {line}\n")
    out = lint(tmp_path)
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert f"{importer} is not allowed to import {imported}" in out.stdout


def test_the_unchanged_copy_passes_so_the_planted_line_is_what_breaks_it(tmp_path):
    shutil.copytree(ROOT / "nbkit", tmp_path / "nbkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    out = lint(tmp_path)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_no_import_cycle_joins_two_modules_deferred_imports_included():
    graph = grimp.build_graph("nbkit", cache_dir=None)
    deferred = graph.get_import_details(importer="nbkit.results", imported="nbkit.precision.gemm")
    assert deferred and deferred[0]["line_contents"].startswith(
        "from nbkit.precision import gemm"
    )  # inside results.machine
    cycles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                cycles.append((importer, *back))
    assert cycles == []


def test_reading_stored_results_and_the_command_line_import_no_torch():
    """RESULTS.md, ``nbkit study NAME show``, ``nbkit --help`` / ``list`` and a run's metric rows read without torch
    (seconds saved on every command line); training, engines and figures import it when they run."""
    code = (
        "import sys\nimport nbkit.studies.catalog, nbkit.studies.results_md, nbkit.results, nbkit.records.runlog, "
        "nbkit.cli.main, nbkit.cli.commands, nbkit.cli.study, nbkit.cli.results_md, nbkit.workbook.runner, "
        "nbkit.precision.dtypes, nbkit.runtime.paths\nprint(sorted(m for m in ('torch', 'transformers', 'trl', 'vllm') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_paths_runs_with_the_standard_library_alone():
    """The Makefile runs ``python3 nbkit/runtime/paths.py`` with the system python before any venv exists: without site
    packages (``-S``) and isolated from the environment (``-I``) it still prints the cache variables."""
    out = subprocess.run(
        [sys.executable, "-I", "-S", "nbkit/runtime/paths.py"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HF_HOME=" in out.stdout
