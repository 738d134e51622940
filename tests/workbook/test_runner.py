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

    from nbkit.runtime.paths import ROOT, cache_env

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


# -- issue 55 items 13-15: a report folder's name, its one process, and papermill failing itself --------------------


def test_a_report_folder_name_that_is_not_utf8_is_refused_before_anything_is_made(tmp_path):
    import os

    out = tmp_path / os.fsdecode(b"report-\xff\xfe")
    with pytest.raises(ValueError, match=r"report folder name '.*report-\\xff\\xfe' is not UTF-8.*choose a UTF-8 name"):
        runner.run("smoke", out, only=["00"])
    assert list(tmp_path.iterdir()) == []


def test_a_report_folder_that_is_a_symlink_to_nowhere_is_refused_naming_the_target(tmp_path):
    link = tmp_path / "reports"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=r"'.*reports' is a symlink to '.*gone', which does not exist: create"):
        runner.run("smoke", link, only=["00"])
    assert [p.name for p in tmp_path.iterdir()] == ["reports"] and link.is_symlink()


def test_when_papermill_itself_fails_no_notebook_is_left_under_its_final_name(tmp_path, monkeypatch):
    """papermill writes the output notebook before executing it: a failure of its own (not a cell's) must not leave
    that unexecuted notebook where a finished one belongs."""
    import papermill

    def fails_after_writing(src, dst, **kwargs):
        (tmp_path / "00_precision_primer.ipynb").write_text('{"cells": []}')
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(papermill, "execute_notebook", fails_after_writing)
    monkeypatch.setattr(report, "export_html", lambda path: pytest.fail(f"exported {path}"))
    result = runner.execute(runner.NOTEBOOKS / "00_precision_primer.ipynb", tmp_path, {}, progress=False)
    assert not result.ok and "surrogates not allowed" in result.error and "00_precision_primer.partial" in result.error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00_precision_primer.partial.ipynb"]


def test_a_report_folder_is_one_processs_at_a_time_and_the_second_is_refused_naming_the_holder(tmp_path):
    import hashlib
    import os
    import signal
    import subprocess
    import sys

    from nbkit.runtime import locks, outputs

    out = tmp_path / "report"
    out.mkdir()
    outputs.write_marker(out, "report", profile="smoke", files=["index.html"])
    (out / "index.html").write_text("the first run's findings")
    holder = subprocess.Popen(  # another `nbkit run` into the same folder, mid-run
        [
            sys.executable,
            "-c",
            "import sys, time; from nbkit.runtime.locks import FolderLock; held = FolderLock(sys.argv[1], 'report folder').acquire();"
            " print('held', flush=True); time.sleep(120)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
        with pytest.raises(
            locks.FolderLockedError, match=rf"report folder '.*report' is in use by process {holder.pid} "
        ):
            runner.run("smoke", out, only=["00"])
        after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
        assert after == before  # nothing of the holder's was touched
    finally:
        os.kill(holder.pid, signal.SIGTERM)
        holder.wait(timeout=30)


def test_the_last_run_on_this_machine_is_one_line_and_another_machine_s_is_none(tmp_path):
    prov = {"profile": "cpu", "commit": "abc", "machine": "box", "date": "yesterday"}
    report.write_index(tmp_path, "cpu", [runner.NotebookResult("00_a", True, 5.4, {})], prov)
    line = report.last_times(tmp_path, "box")
    assert line == "last time on this machine (cpu profile, yesterday): 00_a 5 s"
    assert report.last_times(tmp_path, "another box") is None and report.last_times(tmp_path / "none", "box") is None
    assert line in report.write_index(tmp_path, "cpu", [], prov, line).read_text()


@pytest.mark.slow
def test_a_report_folder_of_a_run_killed_mid_notebook_is_its_own_on_the_rerun(tmp_path):
    """``kill -9`` of ``nbkit run`` while a notebook runs (an out-of-memory kill, a closed terminal): the files it
    wrote are listed in its marker before they were written, so the rerun into the same folder is not refused."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from nbkit.runtime import outputs
    from nbkit.runtime.paths import ROOT

    out = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "nbkit", "run", "--profile", "smoke", "--only", "00", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / "00_precision_primer.ipynb").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before the notebook's first file was written"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the kernel the killed runner left behind
        except ProcessLookupError:
            pass
    written = sorted(p.name for p in out.iterdir() if not p.name.startswith((outputs.MARKER, ".nbkit-lock")))
    assert "00_precision_primer.ipynb" in written
    assert runner.check_out_dir(out) == out  # the rerun takes the folder: every file in it is the run's own
    assert set(written) <= set(outputs.read_marker(out)["files"])
