"""Library chatter out of the notebooks: engine start-up output goes to a log file, one line stays in the notebook.

``quiet("vLLM engine (bf16)")`` wraps a noisy step (vLLM's import and start-up: Triton notices, NUMA and
deprecation warnings, engine-core logs). While it runs, everything written to the process's stdout and stderr
(file descriptors 1 and 2, so subprocesses started inside it too, e.g. vLLM's engine core for its whole life),
to Python's ``sys.stdout``/``sys.stderr``, by existing logging stream handlers and by third-party warnings goes to
the log file; afterwards the notebook gets one line: what started, in how many seconds, where its output went.

The log file is ``<report folder>/<stem>.log`` when the runner executes the notebook (``nbkit.workbook.report``, linked
from the findings page), else ``.cache/logs/session.log``. Warnings that matter to the reader stay visible: those raised
from nbkit's own code and every ``RuntimeWarning`` (overflow, invalid values). If the step fails, the tail of its
output is printed with the error.

``static_progress_bars()`` makes ``tqdm.auto`` draw text bars (the runner's kernels call it through ``nbkit``'s
import): a widget bar cannot render in a static report, a text bar's last state is one line there.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import sys
import time
import warnings
import weakref
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

from nbkit.runtime.paths import CACHE, ROOT, report_target

_files: dict[Path, object] = {}
_visible: list = []
"""The notebook's stdout while ``quiet`` blocks are open (a nested block announces there, not in the log)."""


def log_path() -> Path:
    """Where chatter goes: the report folder's ``<stem>.log`` under the runner, else ``.cache/logs/session.log``."""
    where = report_target()
    return where[0] / f"{where[1]}.log" if where else CACHE / "logs" / "session.log"


class LogFileError(OSError):
    """Writing a log file failed (a file-size limit, a full disk): the message names the file and what to do,
    where the raw ``OSError`` says only "[Errno 27] File too large"."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


ADVICE = {
    errno.EFBIG: "a file-size limit stopped it (`ulimit -f`): raise the limit (`ulimit -f unlimited`) and run again",
    errno.ENOSPC: "the disk is full: free space and run again",
    errno.EDQUOT: "the disk quota is used up: free space and run again",
}
"""What to do about a log file that cannot be written, by errno."""


def log_error(path: Path, exc: OSError) -> LogFileError:
    """``exc`` (raised writing the log file ``path``) as one line naming the file and what to do."""
    advice = ADVICE.get(exc.errno, "check that its folder is writable and has space, then run again")
    size = path.stat().st_size if path.exists() else 0
    return LogFileError(
        exc.errno, f"cannot write the log file {str(path)!r} ({size:,} bytes; {exc.strerror or exc}): {advice}"
    )


class _LogStream:
    """The log file's handle as ``quiet`` writes through it: a failed write or flush is a ``LogFileError`` naming the
    file (every other attribute is the handle's)."""

    def __init__(self, handle, path: Path):
        self.handle, self.path = handle, path

    def write(self, text: str) -> int:
        try:
            return self.handle.write(text)
        except OSError as exc:
            raise log_error(self.path, exc) from None

    def flush(self) -> None:
        try:
            self.handle.flush()
        except OSError as exc:
            raise log_error(self.path, exc) from None

    def __getattr__(self, name):
        return getattr(self.handle, name)


def _open(path: Path):
    """One append handle per log file for the life of the process. Handlers made inside ``quiet`` keep it, and
    vLLM's log through it while the interpreter exits (its engine shuts down from a ``weakref.finalize``). At exit
    finalisers run newest first, so closing the handle from one made now lets every engine started later log first."""
    if path not in _files or _files[path].closed:
        path.parent.mkdir(parents=True, exist_ok=True)
        _files[path] = handle = open(path, "a", buffering=1, encoding="utf-8")
        weakref.finalize(handle, _close, handle)
    return _files[path]


def _close(handle) -> None:
    """Close a log handle at exit; handlers still holding it (a daemon thread may log after this) write nowhere."""
    for h in _handlers():
        if getattr(getattr(h, "stream", None), "handle", getattr(h, "stream", None)) is handle:
            h.setStream(io.StringIO())
    try:
        handle.close()
    except OSError:  # what a full log could not take is lost with it (quiet already said which file and why)
        pass


def matters(w: warnings.WarningMessage) -> bool:
    """A warning the reader should see: raised from nbkit's code, or a ``RuntimeWarning`` (numerics)."""
    try:
        own = Path(w.filename).resolve().is_relative_to(ROOT / "nbkit")
    except (OSError, ValueError):
        own = False
    return own or issubclass(w.category, RuntimeWarning)


def _handlers() -> set[logging.Handler]:
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    return {h for lg in loggers for h in lg.handlers}


def _stream_handlers() -> list[logging.StreamHandler]:
    return [
        h
        for h in _handlers()
        if type(h) is logging.StreamHandler and h.stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    ]


@contextmanager
def quiet(what: str | None = None, path: Path | None = None):
    """Send the block's output to the log file (see the module docstring); with ``what``, print one line saying
    what started and how long it took. Yields the log file's path."""
    path = Path(path) if path else log_path()
    log = _LogStream(_open(path), path)
    log.write(f"\n===== {time.strftime('%H:%M:%S')} {what or 'library output'}\n")  # a full log: named, before all
    log.flush()
    begin = path.stat().st_size
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    _visible.append(_visible[-1] if _visible else sys.stdout)
    saved_fds = {fd: os.dup(fd) for fd in (1, 2)}
    handlers = [(h, h.stream) for h in _stream_handlers()]
    start, failed = time.time(), None
    try:
        with warnings.catch_warnings(record=True) as caught, redirect_stdout(log), redirect_stderr(log):
            for fd in saved_fds:
                os.dup2(log.fileno(), fd)
            for h, _ in handlers:
                h.setStream(log)
            try:
                yield path
            except BaseException as exc:
                failed = exc
                raise
            finally:
                try:
                    log.flush()
                finally:  # the process's own output back, even when the log could not take the last of it
                    for fd, saved in saved_fds.items():
                        os.dup2(saved, fd)
                        os.close(saved)
                    for h, stream in handlers:
                        h.setStream(stream)
    finally:
        visible = _visible.pop()
        seconds = time.time() - start
        for w in caught:
            if matters(w):
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        try:
            for w in caught:
                log.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
            log.flush()
        except LogFileError:
            if not failed:  # else the block's own error (often this very one) is what propagates
                raise
        lines = _read_from(path, begin).count("\n")
        if isinstance(failed, LogFileError):  # the error names the log; its tail would be the noise that filled it
            pass
        elif failed:
            tail = "".join(_read_from(path, begin).splitlines(keepends=True)[-30:])
            print(
                f"{what or 'the step'} failed after {seconds:.0f} s; the end of its output ({path}):\n{tail}",
                file=sys.stderr if visible is sys.stdout else visible,
                flush=True,
            )
        elif what:
            noun = "line" if lines == 1 else "lines"
            print(
                f"{what} started in {seconds:.1f} s ({lines} {noun} of start-up output in {path.name})",
                file=visible,
                flush=True,
            )


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def static_progress_bars() -> None:
    """Make ``tqdm.auto`` (used by nbkit, vLLM, datasets) give text bars instead of notebook widgets."""
    import tqdm.auto
    import tqdm.autonotebook
    from tqdm.std import tqdm as text_tqdm

    tqdm.auto.tqdm = tqdm.autonotebook.tqdm = text_tqdm
