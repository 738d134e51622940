"""What a reader sees, checked in a real browser (headless Chromium through Playwright).

* Every smoke-profile report and the findings page: each plotly figure is drawn (an SVG with data traces, not
  an empty div), the page logs no JavaScript error, and every link of the findings page resolves.
* JupyterLab with the project kernel: notebook 00 runs top to bottom and moving a widget control redraws its figure.

The browser is the OS package (Debian ``chromium``; Playwright cannot download its own here). When it is missing
the tests install it with apt-get if they run as root, and otherwise fail with a message saying how: never skip.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

from nbkit.runtime.paths import cache_env
from nbkit.workbook import runner

CHROMIUM = os.environ.get("NBKIT_CHROMIUM", "/usr/bin/chromium")
"""The browser binary (override with ``NBKIT_CHROMIUM``)."""

pytestmark = pytest.mark.slow

# Every plotly div on the page: did plotly draw it, how many traces its data has, how many it drew in the SVG
# (scatter and bar traces are g.trace groups, tables g.table, heatmaps an image in g.hm).
FIGURES_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].map(gd => ({
    id: gd.id, data: (gd.data || []).length, drawn: !!gd._fullLayout && !!gd.querySelector('svg.main-svg'),
    traces: gd.querySelectorAll('svg.main-svg g.trace, svg.main-svg g.table, svg.main-svg g.hm image').length}))"""


def ensure_chromium() -> str:
    """The Chromium binary; installed with apt-get when missing and this is root, else a failure saying how."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    how = "install it with `apt-get install -y chromium` (Debian/Ubuntu) or point NBKIT_CHROMIUM at a Chromium binary"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail(f"the browser tests need Chromium at {CHROMIUM}: {how}")
    import fcntl

    from nbkit.runtime.paths import CACHE

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "chromium-install.lock", "w") as lock:  # test workers (xdist) install it once, in turn
        fcntl.flock(lock, fcntl.LOCK_EX)
        if Path(CHROMIUM).exists():
            return CHROMIUM
        return _apt_install(how)


def _apt_install(how: str) -> str:
    for cmd in (
        ["apt-get", "install", "-y", "chromium"],
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "chromium"],
    ):
        done = subprocess.run(
            cmd, capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        )
        if cmd[1] == "install" and done.returncode == 0 and Path(CHROMIUM).exists():
            return CHROMIUM
    pytest.fail(f"installing Chromium with apt-get failed ({done.stderr.strip()[-300:]}); {how}")


@pytest.fixture(scope="session")
def browser():
    path = ensure_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page recording console errors and uncaught exceptions (``page.js_errors``) and the uncaught
    exceptions alone (``page.uncaught``)."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = context.new_page()
    pg.js_errors, pg.uncaught = [], []
    pg.on("console", lambda m: pg.js_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: (pg.js_errors.append(str(e)), pg.uncaught.append(str(e))))
    yield pg
    context.close()


def _open(page, path: Path) -> list[dict]:
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_timeout(300)  # plotly draws right after load
    return page.evaluate(FIGURES_JS)


def _assert_drawn(figures: list[dict], where: str) -> None:
    assert figures, f"{where} has no plotly figure"
    empty = [f["id"] for f in figures if not (f["drawn"] and f["data"] and f["traces"])]
    assert not empty, f"{where}: figures not drawn or without data traces: {empty} ({len(figures)} figures)"


@pytest.mark.parametrize("stem", [p.stem for p in runner.notebooks()])
def test_report_draws_every_figure_without_js_errors(stem, smoke_report, page):
    out, results = smoke_report
    assert results[stem].ok, f"{stem} failed in the smoke run: {results[stem].error}"
    figures = _open(page, out / f"{stem}.html")
    _assert_drawn(figures, f"{stem}.html")
    assert not page.js_errors, f"{stem}.html logged JavaScript errors: {page.js_errors[:5]}"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])
        if tag == "script" and attrs.get("src"):
            self.hrefs.append(attrs["src"])


def test_findings_page_shows_every_notebook_with_its_figure_and_working_links(smoke_report, page):
    out, results = smoke_report
    index = out / "index.html"
    figures = _open(page, index)
    _assert_drawn(figures, "index.html")
    assert {f["id"] for f in figures} == {f"figure-{s}" for s in results}, "one key figure per notebook"
    assert not page.js_errors, f"index.html logged JavaScript errors: {page.js_errors[:5]}"
    text = page.inner_text("body")
    for label in ("commit", "machine", "date", "wall time"):
        assert label in text
    assert "published no headline" not in text and "FAILED" not in text
    # long findings wrap and wide tables scroll inside their cell: the page itself never scrolls sideways
    width = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1], f"index.html is {width[0]} px wide in a {width[1]} px window"
    parser = _Links()
    parser.feed(index.read_text())
    local = [h for h in parser.hrefs if not urlparse(h).scheme]
    assert {f"{s}.html" for s in results} <= set(local)
    for href in local:
        target, _, anchor = href.partition("#")
        assert not target or (out / target).is_file(), f"index.html links to missing {href}"
        assert not anchor or anchor in parser.ids, f"index.html links to missing anchor {href}"


# ---------------------------------------------------------------------------------------------------------------
# JupyterLab


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 with a token, serving a copy of notebook 00 set to the project kernel."""
    nb = nbformat.read(runner.NOTEBOOKS / "00_precision_primer.ipynb", as_version=4)
    kernel = runner.kernel_name()
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    nbformat.write(nb, tmp_path / "00_precision_primer.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / "lab.log", "w")
    env = {**cache_env(), **os.environ}  # Jupyter's config, data and runtime dirs inside the project's .cache
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmp_path}",
            "--LabApp.expose_app_in_browser=True",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"JupyterLab did not start: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield base, token, kernel
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_jupyterlab_runs_the_primer_and_a_widget_control_redraws_its_figure(lab, page):
    base, token, kernel = lab
    page.set_default_timeout(120_000)
    page.goto(f"{base}/lab/tree/00_precision_primer.ipynb?token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget "
        "&& window.jupyterapp.shell.currentWidget.sessionContext?.session?.kernel"
    )
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.name") == kernel
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # the loss-scale explorer: a slider "log2 scale" above an Output widget with a plotly figure
    explorer = page.locator(".widget-vbox", has=page.locator(".widget-slider", has_text="log2 scale")).last
    figure = explorer.locator(".js-plotly-plot").first
    figure.wait_for(state="visible")
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'"
    )
    names = "gd => JSON.stringify(gd.data.map(t => t.name))"  # the scaled trace is named after its scale
    before = json.loads(figure.evaluate(names))
    assert f"with scale {2.0**16:g}" in before, before
    readout = explorer.locator(".widget-slider", has_text="log2 scale").locator(".widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("24")
    page.keyboard.press("Enter")
    target, deadline = f"with scale {2.0**24:g}", time.time() + 60
    while True:  # the Output widget may redraw more than once (and replace its plot element): poll the current one
        after = json.loads(figure.evaluate(names))
        if target in after or time.time() > deadline:
            break
        time.sleep(0.5)
    assert target in after, f"the figure did not follow the slider to 2^24 within 60 s: {after}"
    # JupyterLab's own console noise (missing optional settings, 404s of extensions) is not ours; exceptions are
    assert not page.uncaught, f"uncaught JavaScript exceptions in JupyterLab: {page.uncaught[:5]}"


PLACED_LABELS_JS = """names => [...document.querySelectorAll('g.annotation')].filter(
    a => names.includes(a.textContent.trim())).map(a => {
        const r = a.querySelector('text').getBoundingClientRect();
        return {text: a.textContent.trim(), left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    })"""


def test_the_harm_threshold_figure_is_drawn_and_its_placed_format_labels_do_not_overlap(tmp_path, page):
    """The harm-threshold study's gap-vs-dose figure on the project's stored thresholds (formats of two tasks placed
    close together on the dose axis): drawn, and no two placed-format labels overlap."""
    from nbkit.plots.doctor import gap_dose_figure
    from nbkit.studies.harm_threshold_rule import THRESHOLDS

    stored = json.loads(THRESHOLDS.read_text())
    html = tmp_path / "harm.html"
    gap_dose_figure(stored).write_html(html)
    _assert_drawn(_open(page, html), "harm.html")
    assert not page.js_errors, page.js_errors[:5]
    names = sorted({f.upper() for t in stored["tasks"].values() for f in (t.get("placed") or {})})
    labels = page.evaluate(PLACED_LABELS_JS, names)
    assert len(labels) == sum(len(t.get("placed") or {}) for t in stored["tasks"].values()) >= 4
    clashes = [
        (a["text"], b["text"])
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]
    ]
    assert not clashes, clashes
