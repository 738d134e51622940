"""``make test`` (``--dist loadgroup``) runs the tests that share one expensive fixture on one xdist worker, so the
fixture is built once per suite: the groups of ``tests/conftest.py``'s ``SHARED_FIXTURES`` name real tests that
really take that fixture, and every other test is a work unit of its own."""

import ast
from pathlib import Path

import pytest

from tests.conftest import SHARED_FIXTURES, xdist_group

ROOT = Path(__file__).resolve().parents[2]


def functions_of(path: Path) -> dict[str, set[str]]:
    """Test function name -> the names of its arguments (the fixtures it asks for), for a test module."""
    tree = ast.parse(path.read_text())
    return {
        node.name: {a.arg for a in node.args.args}
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


@pytest.mark.parametrize("prefix", sorted(SHARED_FIXTURES))
def test_every_group_names_tests_that_take_its_fixture(prefix):
    module, _, function = prefix.partition("::")
    tests = functions_of(ROOT / module)
    assert not function or function in tests, f"{prefix}: no such test"
    named = {function: tests[function]} if function else tests
    assert any(SHARED_FIXTURES[prefix] in args for args in named.values()), (prefix, SHARED_FIXTURES[prefix])


def test_a_test_of_a_group_joins_its_fixtures_unit_and_any_other_test_is_a_unit_of_its_own():
    assert xdist_group("tests/core/test_engines.py::test_vllm_fp32_engine_matches_fp32_teacher_forcing") == "vllm_runs"
    assert xdist_group("tests/workbook/test_browser.py::test_report_draws_every_figure[00_primer]") == "smoke_report"
    assert (
        xdist_group("tests/workbook/test_notebooks.py::test_notebook_executes_with_smoke_parameters[00_primer]")
        == "smoke_report"
    )
    for alone in (
        "tests/workbook/test_notebooks.py::test_the_workbook_has_notebooks",
        "tests/rl/test_rl.py::test_every_algorithm_runs_two_steps_in_real_low_precision[ppo-bf16]",
        "tests/core/test_engines_extra.py::test_x",  # a module whose name starts like a grouped one's
    ):
        assert xdist_group(alone) == alone
