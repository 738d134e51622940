"""A notebook checks its papermill parameters in the cell after its parameters cell, by the typed checks ``nbkit run``
uses (``nbkit.workbook.parameters``): a bad value is one line naming the notebook, the parameter and the value,
before any work (issue 55 item 9)."""

from __future__ import annotations

import json

import pytest

from nbkit.workbook import parameters, runner
from nbkit.workbook.profiles import PROFILES

BAD = [
    ("03_rl_training", {"seeds": 0}, "parameter seeds = 0: seeds must be a list, got 0 (int)"),
    ("03_rl_training", {"target_accuracy": "high"}, "target_accuracy must be a finite number, got 'high'"),
    ("03_rl_training", {"target_accuracy": 5}, "target_accuracy must be in (0, 1], got 5"),
    ("03_rl_training", {"seeds": [0, 1.5]}, "seeds[1] must be an integer, got 1.5"),
    ("03_rl_training", {"train_dtypes": ["fp8"]}, "unknown dtype 'fp8'; choose one of ['bf16', 'fp16', 'fp32']"),
    ("03_rl_training", {"algorithms": ["ppo_magic"]}, "unknown algorithm 'ppo_magic'; choose one of"),
    ("03_rl_training", {"config_overrides": {"stepz": 3}}, "['stepz'] is not an RLConfig field"),
    ("03_rl_training", {"ppo_rollout_engine": "sglang"}, "unknown engine 'sglang'"),
    ("01_build_dataset", {"lo": 0.9, "hi": 0.1}, "lo = 0.9 is above hi = 0.1"),
    ("01_build_dataset", {"resume": "false"}, "resume must be True or False (a bool), got 'false'"),
    ("01_build_dataset", {"dtype": "float16"}, "unknown dtype 'float16'"),
    ("02_mismatch_analysis", {"n_prompts": 0}, "n_prompts must be >= 1, got 0"),
    ("02_mismatch_analysis", {"gemm": "fast"}, "unknown gemm policy 'fast'"),
    ("02_mismatch_analysis", {"models": "tiny-arith"}, "models must be a list, got 'tiny-arith'"),
    ("04_where_bf16_breaks", {"live_seeds": [-1]}, "live_seeds[0] must be in [0, 4294967295], got -1"),
    ("04_where_bf16_breaks", {"live_lengths": ["huge"]}, "unknown tiny-long regime 'huge'"),
    ("05_precision_ablation", {"live_pairs": [["bf16"]]}, "expects a [train, rollout] pair of dtypes"),
    ("06_dose_response", {"ladder_formats": ["fp7"]}, "unknown rollout format 'fp7'"),
    ("00_precision_primer", {"n_random": 2.5}, "n_random must be an integer, got 2.5"),
    ("00_precision_primer", {"loss_scale": -1.0}, "loss_scale must be > 0, got -1.0"),
]


@pytest.mark.parametrize("stem,values,said", BAD, ids=[f"{s[:2]}-{next(iter(v))}" for s, v, _ in BAD])
def test_a_bad_parameter_is_one_line_naming_notebook_parameter_and_value(stem, values, said):
    with pytest.raises(parameters.ParameterError) as err:
        parameters.check_values(stem, values)
    text = str(err.value)
    assert said in text and text.startswith(f"notebook {stem}: ") and "\n" not in text
    with pytest.raises(parameters.ParameterError, match="notebook"):  # nbkit run refuses it the same way
        runner.check_parameters(runner.NOTEBOOKS / f"{stem}.ipynb", values)


def test_every_profile_and_every_notebooks_own_defaults_pass():
    for path in runner.notebooks():
        parameters.check_values(path.stem, runner.notebook_defaults(path))
        for profile in PROFILES:
            parameters.check_values(path.stem, runner.parameters_for(profile, path.stem))


def test_the_cell_after_each_parameters_cell_checks_them_and_carries_no_output():
    for path in runner.notebooks():
        cells = json.loads(path.read_text())["cells"]
        at = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
        check = cells[at + 1]
        assert check["cell_type"] == "code" and not check["outputs"] and check["execution_count"] is None
        assert f'check_notebook_parameters("{path.stem}", globals())' in "".join(check["source"]), path.name


def test_the_check_reads_the_notebooks_namespace_and_ignores_other_names():
    defaults = runner.notebook_defaults(runner.NOTEBOOKS / "03_rl_training.ipynb")
    parameters.check_notebook_parameters("03_rl_training", {**defaults, "pd": object(), "seeds": [4]})
    with pytest.raises(parameters.ParameterError, match="seeds = 0"):
        parameters.check_notebook_parameters("03_rl_training", {**defaults, "seeds": 0})
    with pytest.raises(parameters.ParameterError, match="no notebook '99_none'"):
        parameters.check_notebook_parameters("99_none", {})


def test_a_name_papermill_injected_that_the_notebook_does_not_have_is_refused():
    """Issue 73, 5: ``-p nosuchparam 3`` is read from papermill's injected cell in the kernel's history (``In``)."""
    defaults = runner.notebook_defaults(runner.NOTEBOOKS / "03_rl_training.ipynb")
    history = ["", "seeds = [0]\n", "# Parameters\nnosuchparam = 3\nseeds = [1]\n", "check(...)"]
    with pytest.raises(
        parameters.ParameterError, match=r"notebook 03_rl_training has no parameter\(s\) \['nosuchparam'\]"
    ):
        parameters.check_notebook_parameters("03_rl_training", {**defaults, "In": history, "nosuchparam": 3})
    history[2] = "# Parameters\nseeds = [1]\n"
    parameters.check_notebook_parameters("03_rl_training", {**defaults, "In": history, "helper": 3})


def test_in_ipython_the_refusal_shows_as_its_one_line():
    assert parameters.ParameterError("notebook 03: x")._render_traceback_() == ["ParameterError: notebook 03: x"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,value,said",
    [
        ("seeds", 0, "parameter seeds = 0"),
        ("target_accuracy", 5, "parameter target_accuracy = 5"),  # ("high": the table above)
        ("nosuchparam", 3, "has no parameter(s) ['nosuchparam']"),
    ],
)
def test_papermill_run_directly_stops_at_the_check_cell_before_any_work(tmp_path, name, value, said):
    """``papermill notebooks/03_rl_training.ipynb out.ipynb -p seeds 0``: the check cell fails (the cell after
    papermill's injected one), no later cell runs, and the error is the one line."""
    import papermill

    out = tmp_path / "out.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(
            str(runner.NOTEBOOKS / "03_rl_training.ipynb"),
            str(out),
            parameters={name: value},
            kernel_name=runner.kernel_name(),
            cwd=str(runner.ROOT),
            progress_bar=False,
        )
    assert "ParameterError: notebook 03_rl_training" in str(err.value) and said in str(err.value)
    assert "fieldcheck.py" not in str(err.value) and "parameters.py" not in str(err.value)  # no traceback
    cells = json.loads(out.read_text())["cells"]
    ran = [c for c in cells if c["cell_type"] == "code" and c.get("execution_count")]
    assert "check_notebook_parameters" in "".join(ran[-1]["source"])  # the last cell that ran: the check
    assert len(ran) == 3  # the parameters, papermill's injected ones, the check: nothing after it
