"""The runner: profiles are validated before anything runs, and the index links every executed notebook."""

import pytest

from nbkit.workbook import report, runner


def test_unknown_profile_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match=r"unknown profile 'fast'.*smoke.*cpu.*gpu"):
        runner.parameters_for("fast", "00_precision_primer")


def test_unknown_notebook_filter_names_the_notebooks():
    with pytest.raises(ValueError, match="no notebook matches"):
        runner.notebooks(["99_nothing"])


def test_index_links_each_result_with_status(tmp_path):
    results = [
        runner.NotebookResult("00_a", True, 1.5, {"x": 1}),
        runner.NotebookResult("01_b", False, 2.0, {}, "ValueError: boom"),
    ]
    for r in results:
        (tmp_path / f"{r.stem}.html").write_text("<html></html>")
    page = report.write_index(tmp_path, "smoke", results).read_text()
    assert "href='00_a.html'" in page and "href='01_b.html'" in page
    assert "FAILED" in page and "ValueError: boom" in page
    assert (tmp_path / "run.json").exists()


def test_every_profile_entry_names_an_existing_notebook():
    stems = {p.stem for p in runner.notebooks()}
    for profile, entries in runner.PROFILES.items():
        assert set(entries) <= stems, f"profile {profile} names missing notebooks {set(entries) - stems}"


def test_every_profile_parameter_exists_in_its_notebook():
    for _profile, entries in runner.PROFILES.items():
        for stem, parameters in entries.items():
            runner.check_parameters(runner.NOTEBOOKS / f"{stem}.ipynb", parameters)


def test_a_parameter_the_notebook_does_not_have_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match=r"no parameter\(s\) \['stepz'\].*'seeds'"):
        runner.check_parameters(runner.NOTEBOOKS / "03_rl_training.ipynb", {"stepz": 3})


def test_a_profile_holds_only_what_differs_from_the_notebooks_defaults():
    """profiles.py says each setting once: a value equal to the notebook's own default is a restatement."""
    for profile, entries in runner.PROFILES.items():
        for stem, parameters in entries.items():
            defaults = runner.notebook_defaults(runner.NOTEBOOKS / f"{stem}.ipynb")
            same = {k: v for k, v in parameters.items() if k in defaults and defaults[k] == v}
            assert not same, f"profile {profile}, {stem} restates the notebook's defaults {same}"


def test_notebook_03s_config_overrides_hold_only_what_differs_from_the_sanity_run():
    from nbkit.rl.config import config_from

    base = config_from({})
    for profile, entries in runner.PROFILES.items():
        overrides = entries.get("03_rl_training", {}).get("config_overrides", {})
        same = {k: v for k, v in overrides.items() if getattr(base, k) == v}
        assert not same, f"profile {profile} restates nbkit.rl.SANITY_RUN / RLConfig defaults {same}"


def test_a_notebooks_defaults_are_read_as_values_and_a_non_literal_is_named(tmp_path):
    import nbformat

    defaults = runner.notebook_defaults(runner.NOTEBOOKS / "03_rl_training.ipynb")
    assert defaults["train_dtypes"] == ["fp16", "bf16"] and defaults["config_overrides"] == {}
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("steps = 2 ** 4  # =", metadata={"tags": ["parameters"]})]
    )
    nbformat.write(nb, tmp_path / "x.ipynb")
    assert runner.notebook_parameters(tmp_path / "x.ipynb") == {"steps"}  # names still read for the refusal check
    with pytest.raises(ValueError, match=r"parameter steps = 2 \*\* 4 is not a literal"):
        runner.notebook_defaults(tmp_path / "x.ipynb")


def test_the_makefile_exports_exactly_the_cache_environment_of_nbkit_paths():
    """One list of cache variables (``paths.cache_env``): every command the Makefile runs gets it."""
    import os
    import subprocess

    from nbkit.paths import ROOT, cache_env

    env = {k: v for k, v in os.environ.items() if k not in cache_env()}
    out = subprocess.run(
        ["make", "-s", "--eval", "envdump: ; @env", "envdump"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert {k: seen.get(k) for k in cache_env()} == cache_env()
