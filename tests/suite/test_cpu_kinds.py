"""The suite on every CPU kind the project meets (issue 55 item 17: a test expecting a rounding mode where half GEMMs
are native failed on an AVX512-FP16 Xeon only, and CI ran on an EPYC).

A test whose result depends on the CPU's half-precision kernels says so with ``@pytest.mark.cpu_kernels("which")``
and either takes the ``cpu_kind`` fixture (``tests/conftest.py``: it runs once per kind, ``gemm="auto"`` resolving
as on a Xeon with AVX512-FP16, an EPYC with AVX512-BF16 only and an AVX2-only EPYC) or reads the policy that ran from
``gemm.resolve("auto")``. Here: no such test goes unmarked, and the marked fast tests pass with the whole session
resolving as the Xeon (``NBKIT_TEST_CPU_KIND``) and under ``benchmarks/avx2.py``'s process-level AVX2 emulation."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL_READS = ('resolve("auto")', "resolve('auto')", "default_policy(", "cpu_has_native_half(")
"""Source fragments of a test that reads which half kernels this CPU runs."""
RESOLUTION_TESTS = {"tests/precision/test_gemm.py"}
"""Tests of the resolution itself: they set the CPU flags they test (``monkeypatch``), whatever the machine."""


def kernel_dependent_tests() -> dict[str, bool]:
    """``file::test`` → whether it is marked ``cpu_kernels``, for every test that reads the auto policy or takes
    the ``cpu_kind`` fixture."""
    found = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in RESOLUTION_TESTS or path == Path(__file__).resolve():
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
                continue
            body = ast.get_source_segment(source, node) or ""
            if any(r in body for r in KERNEL_READS) or "cpu_kind" in [a.arg for a in node.args.args]:
                marks = [ast.unparse(d) for d in node.decorator_list]
                found[f"{rel}::{node.name}"] = any("mark.cpu_kernels(" in m for m in marks)
    return found


def test_every_test_that_depends_on_the_cpus_half_kernels_says_which():
    found = kernel_dependent_tests()
    assert (
        "tests/precision/test_formats_dial.py::test_linear_operands_alone_cost_less_mismatch_than_the_full_dial_on_a_fixed_batch"
        in found
    )
    unmarked = sorted(name for name, marked in found.items() if not marked)
    assert not unmarked, f"mark these @pytest.mark.cpu_kernels('which kernels') and run them on every kind: {unmarked}"


def test_the_cpu_kind_fixture_resolves_auto_as_each_kind(cpu_kind):
    from conftest import CPU_KINDS

    from nbkit.precision import gemm

    assert gemm.resolve("auto", "cpu") == CPU_KINDS[cpu_kind][2]
    assert (gemm.resolve("auto", "cpu") == "native") == (cpu_kind == "xeon-avx512fp16")


def run_marked(*prefix: str, **env: str) -> subprocess.CompletedProcess:
    """The fast ``cpu_kernels`` tests in a fresh pytest, after ``prefix`` (e.g. the AVX2 emulation), with ``env``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import avx2

    base = {k: v for k, v in avx2.environment(isa="native").items() if k not in ("NBKIT_TEST_CPU_KIND",)}
    command = [*prefix, sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"]
    command += ["-m", "cpu_kernels and not slow and not vllm", "tests"]
    return subprocess.run(command, cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["xeon-avx512fp16", "avx2-emulation"])
def test_the_kernel_dependent_tests_pass_as_on_a_xeon_and_under_the_avx2_emulation(kind):
    """On this machine's real kernels the marked tests run in the suite itself; here the whole session resolves
    ``auto`` as a Xeon with native half GEMMs would, and the same tests run under ``benchmarks/avx2.py``."""
    if kind == "avx2-emulation":
        out = run_marked(sys.executable, str(ROOT / "benchmarks" / "avx2.py"))
    else:
        out = run_marked(NBKIT_TEST_CPU_KIND=kind)
    tail = "\n".join(out.stdout.strip().splitlines()[-15:])
    assert out.returncode == 0, tail + out.stderr[-2000:]
    assert " passed" in tail and "failed" not in tail and "error" not in tail.lower(), tail
    assert os.environ.get("NBKIT_TEST_CPU_KIND") is None or kind != "avx2-emulation"
