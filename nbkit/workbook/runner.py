"""Execute the workbook: every notebook through papermill with a profile's parameters, into a report folder.

    nbkit run --profile cpu --out reports        # the README's main job (``make report``)
    nbkit run --profile smoke --only 00          # one notebook, small parameters
    nbkit list                                   # notebooks and the parameters each profile gives them

Each notebook becomes ``<out>/<stem>.ipynb`` (executed) and ``<out>/<stem>.html``, with ``<stem>.log`` (engine
start-up output) and ``<stem>.summary.json`` (what it published); ``<out>/index.html`` is the findings page built
from those by ``nbkit.workbook.report``. A failing notebook does not stop the others; the command then exits 1.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from nbkit.runtime import locks, outputs
from nbkit.runtime.paths import REPORTS, ROOT, environment
from nbkit.workbook import report
from nbkit.workbook.parameters import (  # noqa: F401 - notebook_parameters: also read as runner.notebook_parameters
    check_names,
    check_values,
    notebook_defaults,
    notebook_parameters,
)
from nbkit.workbook.profiles import PROFILES

NOTEBOOKS = ROOT / "notebooks"
KERNEL = "nbkit"
"""The Jupyter kernel registered inside the project venv (``make venv``); ``python3`` where it is absent."""


@dataclass
class NotebookResult:
    """What happened to one notebook of a run."""

    stem: str
    """Notebook file name without ``.ipynb``."""
    ok: bool
    """True when every cell ran without an error."""
    seconds: float
    """Wall time of the execution."""
    parameters: dict
    """Parameters papermill injected."""
    error: str = ""
    """The last line of the error, for the index."""
    defaults: dict = field(default_factory=dict)
    """The notebook's own values of the parameters papermill did not inject: with ``parameters``, everything it ran
    with (``effective_parameters``), so a later change of a notebook's default is told from the record."""


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The notebooks in run order (by file name), optionally those whose stem starts with one of ``only``."""
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if only is not None and not [o for o in only if o.strip()]:
        raise ValueError(f"only={only!r} names no notebook; notebooks: {[p.stem for p in paths]}")
    if only:
        paths = [p for p in paths if any(p.stem.startswith(o) for o in only)]
        if not paths:
            raise ValueError(
                f"no notebook matches {only!r}; notebooks: {[p.stem for p in sorted(NOTEBOOKS.glob('*.ipynb'))]}"
            )
    return paths


def parameters_for(profile: str, stem: str) -> dict:
    """The parameters ``profile`` gives notebook ``stem`` ({} = the notebook's own defaults)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {tuple(PROFILES)}")
    return dict(PROFILES[profile].get(stem, {}))


def kernel_name() -> str:
    """``nbkit`` where that kernel is registered, else ipykernel's own ``python3`` (same interpreter)."""
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL if KERNEL in KernelSpecManager().find_kernel_specs() else "python3"


def execute(path: Path, out_dir: Path, parameters: dict, progress: bool = True) -> NotebookResult:
    """Run one notebook with papermill and export its HTML; never raises for a notebook's own error (a parameter
    the notebook does not have is the caller's: ValueError before anything runs).

    The kernel inherits ``NBKIT_REPORT_DIR`` / ``NBKIT_NOTEBOOK`` (see ``nbkit.workbook.report``), so the notebook's
    ``publish`` call and engine logs land in ``out_dir``; files of an earlier run of this notebook are removed first.
    """
    import papermill

    check_parameters(path, parameters)
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*report.stale_files(out_dir, path.stem), *partial_files(out_dir, path.stem)]:
        stale.unlink(missing_ok=True)
    target = out_dir / path.name
    start = time.time()
    error = ""
    try:
        with environment({report.REPORT_DIR_ENV: str(out_dir), report.NOTEBOOK_ENV: path.stem}):
            papermill.execute_notebook(
                str(path),
                str(target),
                parameters=parameters,
                kernel_name=kernel_name(),
                cwd=str(ROOT),
                progress_bar=progress,
                report_mode=False,
            )
    except KeyboardInterrupt:  # Ctrl-C: what ran is kept, named partial (never taken for a finished notebook)
        mark_partial(target)
        raise
    except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
        error = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        if not isinstance(exc, papermill.PapermillExecutionError):  # papermill itself failed: what it wrote is
            traceback.print_exc()  # no executed notebook, so it never stands under the final name
            partial = mark_partial(target)
            error += f" (partial notebook: {partial.name})" if partial else ""
    seconds = time.time() - start
    if target.exists():
        report.export_html(target)
    defaults = {k: v for k, v in notebook_defaults(path).items() if k not in parameters}
    return NotebookResult(path.stem, not error, seconds, parameters, error, defaults)


INDEX_FILES = ("index.html", "run.json", "plotly.min.js")
"""What ``report.write_index`` writes into the report folder."""


def own_files(stem: str) -> list[str]:
    """Every file a run of notebook ``stem`` may write into the report folder (the executed notebook, its HTML, log,
    summary, figure and partial files) and the index's: recorded in the folder's marker before the notebook starts,
    so a run killed mid-notebook (``kill -9``, out of memory) leaves files the rerun knows as its own."""
    names = [f"{stem}.ipynb", f"{stem}.html", *(p.name for p in report.stale_files(Path(), stem))]
    return [*names, *(p.name for p in partial_files(Path(), stem)), *INDEX_FILES]


PARTIAL = ".partial"
"""Inserted before ``.ipynb`` / ``.html`` in the name of a notebook cut off by Ctrl-C (``mark_partial``)."""


def partial_files(out_dir: Path, stem: str) -> list[Path]:
    """The files ``mark_partial`` leaves for notebook ``stem`` (removed when it runs again)."""
    return [out_dir / f"{stem}{PARTIAL}{suffix}" for suffix in (".ipynb", ".html")]


def mark_partial(target: Path) -> Path | None:
    """Rename an executed notebook cut off mid-run to ``<stem>.partial.ipynb`` (its HTML too, when exported), so
    nothing takes it for a finished one; returns the new path (None when papermill wrote nothing)."""
    if not target.exists():
        return None
    partial = partial_files(target.parent, target.stem)
    target.rename(partial[0])
    html_file = target.with_suffix(".html")
    if html_file.exists():
        html_file.rename(partial[1])
    return partial[0]


def effective_parameters(path: Path, parameters: dict) -> dict:
    """What notebook ``path`` runs with when papermill injects ``parameters``: its defaults, overridden."""
    return {**notebook_defaults(path), **parameters}


def check_parameters(path: Path, parameters: dict) -> None:
    """Every parameter names a variable of the notebook's ``parameters`` cell (papermill would only warn and
    run the notebook with its own value, marked ok) and passes the typed checks the notebook itself runs in the cell
    after its parameters (``nbkit.workbook.parameters``: type of its default, range, choices; ``config_overrides``
    keys are ``RLConfig`` fields)."""
    known = notebook_defaults(path)
    check_names(path.stem, parameters, known)
    check_values(path.stem, parameters, known)


def check_out_name(out_dir, what: str = "report folder") -> Path:
    """``out_dir`` if its name can hold a report: named (not ""), UTF-8 (a notebook, its HTML and the index record
    the folder's path as UTF-8 text; a name of other bytes cannot be written there) and not a symlink to nowhere
    (nothing can be created through it). Reads only."""
    text = str(out_dir)
    if not text.strip():
        raise ValueError(f"the {what} must be named, got {text!r}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        raise ValueError(
            f"{what} name '{shown}' is not UTF-8 (its bytes are of another encoding): the reports record their "
            f"folder as UTF-8 text; choose a UTF-8 name"
        ) from None
    path = Path(out_dir).expanduser()
    if path.is_symlink() and not path.exists():
        raise ValueError(
            f"{what} {text!r} is a symlink to {os.readlink(path)!r}, which does not exist: create that folder "
            f"first, or give another {what}"
        )
    return path


def check_out_dir(out_dir) -> Path:
    """The report folder: a name that can hold it (``check_out_name``), and new, empty or an earlier report
    (``nbkit.runtime.outputs``)."""
    check_out_name(out_dir)
    outputs.check_listed(out_dir, "report", "report folder", files_only=True)
    return Path(out_dir)


def run(profile: str = "cpu", out_dir: str | Path = REPORTS, only: list[str] | None = None) -> list[NotebookResult]:
    """Execute the notebooks of a profile in order and write the index; returns every result."""
    paths = notebooks(only)
    params = {p.stem: parameters_for(profile, p.stem) for p in paths}  # validate before running anything
    for path in paths:
        check_parameters(path, params[path.stem])
    check_out_name(out_dir)
    outputs.check_folder(out_dir, "report", "report folder")  # a file, read-only or a user's folder: before the lock
    with locks.FolderLock(out_dir, "report folder"):  # one run per report folder: a second is refused, naming this pid
        out_dir = check_out_dir(out_dir)  # its files, checked by the one process that may now add to them
        return _run(profile, Path(out_dir), paths, params)


def _run(profile: str, out_dir: Path, paths: list[Path], params: dict[str, dict]) -> list[NotebookResult]:
    """``run``'s work, inside the report folder's lock."""
    outputs.write_marker(out_dir, "report", profile=profile, files=True)  # what is there passed check_out_dir
    prov = report.provenance(profile)
    last = report.last_times(out_dir, prov["machine"])  # before this run's run.json replaces the previous one's
    if last:
        print(f"[nbkit] {last}", flush=True)
    results = []
    for path in paths:
        outputs.record_files(out_dir, own_files(path.stem))  # before any is written: a killed run's files stay its own
        print(f"[nbkit] {path.stem} ({profile}) ...", flush=True)
        start = time.time()
        try:
            results.append(execute(path, Path(out_dir), params[path.stem]))
        except KeyboardInterrupt:  # the findings page says which notebook was cut off, and where its part is
            partial = partial_files(Path(out_dir), path.stem)[0]
            results.append(
                NotebookResult(
                    path.stem,
                    False,
                    time.time() - start,
                    params[path.stem],
                    f"interrupted (Ctrl-C) after {time.time() - start:.0f} s: partial notebook "
                    + (partial.name if partial.exists() else "not written"),
                )
            )
            report.write_index(Path(out_dir), profile, results, prov, last)
            raise
        r = results[-1]
        print(f"[nbkit] {r.stem}: {'ok' if r.ok else 'FAILED: ' + r.error} in {r.seconds:.0f} s", flush=True)
        report.write_index(Path(out_dir), profile, results, prov, last)  # finished work is never lost
        outputs.record_files(
            Path(out_dir),
            [
                p.name
                for p in Path(out_dir).iterdir()
                if p.name != outputs.MARKER and not p.name.startswith(".nbkit-lock")
            ],
        )
    return results
