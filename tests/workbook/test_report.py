"""The findings page and clean reports: what a notebook publishes, what the index shows, what the HTML keeps,
and where library chatter goes."""

import json
import os
import sys
import warnings

import nbformat
import plotly.graph_objects as go
import pytest

from nbkit.records import runlog
from nbkit.runtime import logs
from nbkit.workbook import report, runner


@pytest.fixture
def as_runner(tmp_path, monkeypatch):
    """The environment the runner gives a notebook's kernel: report folder and notebook stem."""
    monkeypatch.setenv(report.REPORT_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(report.NOTEBOOK_ENV, "07_demo")
    return tmp_path


def test_publish_outside_the_runner_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(report.REPORT_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert report.publish({"x": 1}) is None
    assert list(tmp_path.iterdir()) == []


def test_publish_writes_the_summary_and_figure_beside_the_report(as_runner):
    fig = go.Figure(go.Scatter(x=[0, 1], y=[2, 3]))
    path = report.publish({"ratio": 8.2, "runs": [{"run": "grpo-fp16", "steps": 59}]}, figure=fig)
    assert path == as_runner / "07_demo.summary.json"
    summary = json.loads(path.read_text())
    assert summary["headline"] == {"ratio": 8.2, "runs": [{"run": "grpo-fp16", "steps": 59}]}
    assert json.loads((as_runner / summary["figure"]).read_text())["data"][0]["y"] == [2, 3]


def test_publish_rejects_a_headline_the_page_cannot_show(as_runner):
    with pytest.raises(TypeError, match="'curve'.*ndarray|'curve'.*list"):
        report.publish({"curve": [1.0, 2.0]})
    with pytest.raises(TypeError, match="non-empty dict"):
        report.publish({})
    assert not (as_runner / "07_demo.summary.json").exists()


def test_index_shows_headlines_figures_provenance_and_failures(as_runner):
    report.publish({"BF16/FP16 token |Δlog p|": "8.0× (95% CI 7.3–9.0)"}, figure=go.Figure(go.Bar(y=[8])))
    results = [
        runner.NotebookResult("07_demo", True, 12.0, {"n": 1}),
        runner.NotebookResult("08_broken", False, 3.0, {}, "ValueError: boom"),
    ]
    prov = {"profile": "smoke", "commit": "abc123", "machine": "test box", "date": "today"}
    page = report.write_index(as_runner, "smoke", results, prov).read_text()
    assert "8.0× (95% CI 7.3–9.0)" in page and 'id="figure-07_demo"' in page
    assert "href='07_demo.html'" not in page  # no report file, no dead link
    assert "FAILED" in page and "ValueError: boom" in page
    for fact in ("abc123", "test box", "today", "15 s in total"):
        assert fact in page
    assert (as_runner / "plotly.min.js").stat().st_size > 1_000_000
    assert json.loads((as_runner / "run.json").read_text())["provenance"]["commit"] == "abc123"


def test_provenance_names_commit_machine_and_date():
    prov = report.provenance("cpu")
    assert prov["profile"] == "cpu" and prov["commit"] and prov["date"]
    assert f"{os.cpu_count()} CPUs" in prov["machine"]


def test_the_runner_hands_the_kernel_its_report_folder_and_clears_stale_findings(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "from nbkit.workbook import report\nreport.publish({'answer': 42})\nraise ValueError('boom')"
            )
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "src" / "07_demo.ipynb"
    source.parent.mkdir()
    nbformat.write(nb, source)
    out = tmp_path / "out"
    out.mkdir()
    (out / "07_demo.figure.json").write_text("{}")  # left by an earlier run
    (out / "07_demo.log").write_text("old")
    result = runner.execute(source, out, {}, progress=False)
    assert not result.ok and "boom" in result.error
    assert json.loads((out / "07_demo.summary.json").read_text())["headline"] == {"answer": 42}
    assert not (out / "07_demo.figure.json").exists() and not (out / "07_demo.log").exists()


def _notebook_with(outputs) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=outputs)])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def test_report_html_keeps_one_line_per_progress_bar_and_widget_fallbacks(tmp_path):
    bar = nbformat.v4.new_output("stream", name="stderr", text="\rsampling:   0%\rsampling:  50%\rsampling: 100%\n")
    widget = nbformat.v4.new_output(
        "display_data",
        data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0},
            "text/html": "<p>Live widget: run <code>make lab</code></p>",
            "text/plain": "widget",
        },
    )
    path = tmp_path / "x.ipynb"
    nbformat.write(_notebook_with([bar, widget]), path)
    page = report.export_html(path).read_text()
    assert "sampling: 100%" in page and "sampling:  50%" not in page
    assert "Live widget: run <code>make lab</code>" in page
    assert "widget-view+json" not in page and "unpkg.com" not in page
    assert '<script src="http' not in page  # no CDN script to load: the report works offline


def test_widget_fallback_says_how_to_go_live_and_draws_the_default_figure(as_runner):
    from nbkit.workbook.widgets import LossScaleExplorer

    bundle = LossScaleExplorer()._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    html = bundle["text/html"]
    assert "make lab" in html and "notebooks/07_demo.ipynb" in html
    assert "Plotly.newPlot" in html and "log2 scale" in html and "16" in html


def test_quiet_sends_chatter_to_the_log_and_prints_one_line(tmp_path, capfd):
    log = tmp_path / "x.log"
    with pytest.warns(RuntimeWarning, match="overflow"):
        with logs.quiet("demo engine (bf16)", path=log):
            os.write(2, b"NUMA node chatter from a subprocess\n")
            print("INFO python-level chatter")
            warnings.warn_explicit("old API", DeprecationWarning, "/site-packages/lib/x.py", 1)
            warnings.warn_explicit("overflow in cast", RuntimeWarning, "/site-packages/lib/x.py", 2)
    out, err = capfd.readouterr()
    text = log.read_text()
    assert "NUMA node chatter" in text and "python-level chatter" in text and "old API" in text
    assert "chatter" not in out + err and "old API" not in out + err
    assert "demo engine (bf16) started in" in out and "x.log" in out


def test_quiet_shows_the_end_of_the_output_when_the_step_fails(tmp_path, capfd):
    with pytest.raises(RuntimeError, match="engine died"):
        with logs.quiet("demo engine", path=tmp_path / "x.log"):
            print("ERROR not enough memory for the KV cache", file=sys.stderr)
            raise RuntimeError("engine died")
    _, err = capfd.readouterr()
    assert "demo engine failed" in err and "not enough memory for the KV cache" in err


def _rows(dtype, accs, matmul=None, scaler=True):
    return [
        {
            "step": i + 1,
            "accuracy": a,
            "mismatch/token_abs_logp_diff/mean": 1e-4,
            "audit/matmul_dtypes": {matmul or dtype: 12},
            "audit/requested": dtype,
            "audit/scaler_enabled": scaler,
        }
        for i, a in enumerate(accs)
    ]


def test_training_headline_gives_the_sanity_outcome_and_the_audit_verdict():
    runs = {"grpo-fp16": _rows("fp16", [0.5] * 5 + [1.0] * 6), "grpo-bf16": _rows("bf16", [0.5] * 11, scaler=False)}
    meta = {k: runlog.coords({"algorithm": "grpo", "train_dtype": k.split("-")[1], "seed": 0}) for k in runs}
    head = runlog.headline(runs, meta, target=0.95)
    assert head["sanity test (training accuracy ≥ 95%)"] == "grpo-fp16: passed at step 10; grpo-bf16: not reached"
    assert [r["run"] for r in head["runs"]] == ["grpo-fp16", "grpo-bf16"]
    assert head["precision audit"].startswith("passed: in all 22 audited steps")
    runs["grpo-bf16"][3]["audit/matmul_dtypes"] = {"fp32": 12}
    assert runlog.audit_verdict(runs).startswith("MISMATCH in 1 of 22 steps: grpo-bf16 step 4")


def test_a_kernel_run_by_the_runner_draws_text_progress_bars(tmp_path):
    """Widget bars cannot render in a static report; text bars keep their last state as one line there."""
    import subprocess

    code = "import nbkit, tqdm.auto; print(tqdm.auto.tqdm.__module__)"
    env = {**os.environ, report.REPORT_DIR_ENV: str(tmp_path), report.NOTEBOOK_ENV: "07_demo"}
    assert (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
        == "tqdm.std"
    )


def test_a_nested_quiet_block_still_announces_in_the_notebook(tmp_path, capfd):
    with logs.quiet("trainer", path=tmp_path / "x.log"):
        print("trainer chatter")
        with logs.quiet("vLLM engine (fp16)", path=tmp_path / "x.log"):
            print("engine chatter")
    out, _ = capfd.readouterr()
    assert "vLLM engine (fp16) started in" in out and "trainer started in" in out and "chatter" not in out


def test_a_logger_made_inside_quiet_can_still_log_while_the_process_exits(tmp_path):
    """vLLM's logger is set up inside the engine's quiet block and logs its shutdown from a finaliser at exit:
    that line goes to the log, not a "Logging error" traceback on the terminal; a line logged after the log is
    closed (vLLM's daemon threads can) goes nowhere, quietly."""
    import subprocess

    log = tmp_path / "x.log"
    code = (
        "import atexit, logging, sys, weakref\n"
        "atexit.register(lambda: logging.getLogger('engine').warning('a daemon thread, after every finaliser'))\n"
        "weakref.finalize(logging, print)  # an earlier finaliser, as importing vLLM makes\n"
        "from nbkit.runtime import logs\n"
        f"with logs.quiet('engine', path={str(log)!r}):\n"
        "    logging.getLogger('engine').addHandler(logging.StreamHandler(sys.stderr))\n"
        "    engine = logging.getLogger('engine')\n"
        "    weakref.finalize(engine, engine.warning, 'shutting the engine down')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Logging error" not in done.stderr and "closed file" not in done.stderr
    assert "shutting the engine down" in log.read_text() and "daemon thread" not in done.stderr


def test_every_notebook_says_where_its_live_numbers_ran():
    """Right after the parameters, each notebook shows the CPU, its half flags and the GEMM policy of this run."""
    import nbformat

    from nbkit.runtime.paths import ROOT
    from nbkit.workbook import report

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        at = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
        assert "computed_here()" in cells[at + 1].source, path.name
    note = report.computed_here().data
    assert "half flags" in note and "gemm=" in note and "CPUs" in note
