"""``make`` checks an existing venv before it installs into it or runs it (``nbkit/runtime/venvcheck.py``): one line
naming what is wrong and ``make clean-venv``, a non-zero exit, nothing installed. The venvs here are stand-ins (a
``bin/python`` that prints an old version, a link to nowhere, a stamped venv on the bare interpreter): no venv is
built and nothing is installed; ``PIP=false`` makes sure of it should a check ever let one through."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbkit.runtime import venvcheck
from nbkit.runtime.paths import ROOT


def make(target: str, venv: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", target, f"VENV={venv}", "PIP=false", f"PYTHON={sys.executable}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def refused(result: subprocess.CompletedProcess, venv: Path) -> str:
    """The one line the check printed; the venv's folder is as it was and no install began."""
    assert result.returncode != 0, result.stdout + result.stderr
    said = [line for line in result.stderr.splitlines() if line.startswith("[make] ")]
    assert len(said) == 1 and "setting up" not in result.stdout, result.stdout + result.stderr
    assert f"make clean-venv VENV={venv}" in said[0]
    assert not Path(f"{venv}-install.log").exists()
    return said[0]


def test_make_test_with_a_venv_of_python_3_10_names_it_and_installs_nothing(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\necho 3.10\necho\n")  # answers the check as a 3.10 would
    (venv / "bin" / "python").chmod(0o755)
    before = sorted(p.name for p in venv.rglob("*"))
    line = refused(make("test", venv), venv)
    assert "was made by Python 3.10, and the project needs Python >= 3.11" in line
    assert sorted(p.name for p in venv.rglob("*")) == before


def test_a_venv_whose_python_is_a_link_to_nowhere_is_named_broken(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(tmp_path / "gone" / "python3")
    line = refused(make("test", venv), venv)
    assert f"is a link to {tmp_path / 'gone' / 'python3'}, which does not exist" in line


def test_a_stamped_venv_without_its_packages_names_what_it_lacks(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys._base_executable))
    (venv / "pyvenv.cfg").write_text(
        f"home = {Path(sys._base_executable).parent}\ninclude-system-site-packages = false\n"
    )
    (venv / venvcheck.STAMP).touch()
    line = refused(make("test", venv), venv)
    assert "is marked installed but lacks torch, transformers, trl, papermill, pytest" in line


def test_the_project_venv_passes_and_a_missing_one_is_left_to_make(tmp_path):
    assert venvcheck.problem(ROOT / ".venv") is None
    assert venvcheck.problem(tmp_path / "not-yet") is None


@pytest.mark.parametrize("text", ['requires-python = "~=3.11"', "name = 'x'"])
def test_a_pyproject_without_a_lower_bound_is_named(tmp_path, text):
    (tmp_path / "pyproject.toml").write_text(text + "\n")
    with pytest.raises(ValueError, match="has no requires-python"):
        venvcheck.required_python(tmp_path / "pyproject.toml")
