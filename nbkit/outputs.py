"""Output folders the workbook may write into, and writes that a kill cannot leave half done.

The rule, the same for every entry point that writes (train, run/report, doctor, dataset build, study store): the
workbook writes only into a folder that is new, empty, or its own, and a folder is its own **only by its marker**
(the file ``MARKER``, written when the workbook created it, naming the kind of output). No file name makes a
folder the workbook's: a folder holding a ``config.json`` or an ``index.html`` of the user's is the user's.
Anything else, e.g. ``out_dir="."`` (the project root) or a folder of the user's files, is refused with
``OutputFolderError`` by ``check_folder`` before any work starts, and nothing is deleted; ``overwrite`` (of a run)
or a rebuild replaces only a marked folder of the same kind.

Files are written atomically: to a temporary file in the same folder, then renamed over the target
(``os.replace``), so a reader sees the old file or the new one, never a prefix. Files and folders follow the
user's umask (as ``open`` and ``mkdir`` would), not the 0600/0700 of ``tempfile``. A folder built beside its
target (``temp_folder_beside``) carries its builder's pid in its name; one whose builder is dead (a killed build)
is removed by the next build there.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

from nbkit.locks import LOCK, pid_alive

MARKER = ".nbkit-output.json"
"""The file that marks a folder as written by the workbook: ``{"kind": ..., "id": ...}``."""


class OutputFolderError(FileExistsError):
    """The output folder holds something the workbook did not write; nothing was changed."""


def read_marker(folder: Path) -> dict | None:
    """The marker of ``folder`` (None when it has none or it cannot be read)."""
    try:
        mark = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


def check_folder(folder: str | Path, kind: str, what: str = "output folder") -> str:
    """Whether the workbook may write a ``kind`` output into ``folder``: ``"new"``, ``"empty"`` or ``"own"``.

    ``own`` means: the folder's marker names this ``kind``. Raises ``OutputFolderError`` (naming the folder, what
    is in it and what to do, never "overwrite") for a file, the project root or one of its parents, the home
    folder, a folder marked as another kind, or any folder without a marker that holds anything (the lock file
    of a workbook process, ``nbkit.locks.LOCK``, aside). Reads only: nothing is created or deleted here.
    """
    from nbkit.paths import ROOT

    folder = Path(folder).expanduser().resolve()
    if not folder.exists():
        return "new"
    if not folder.is_dir():
        raise OutputFolderError(f"{what} {str(folder)!r} is a file, not a folder")
    if folder == ROOT.resolve() or folder in ROOT.resolve().parents or folder == Path.home().resolve():
        raise OutputFolderError(f"{what} {str(folder)!r} is the project root, one of its parents or the home "
                                f"folder: choose a dedicated folder")
    entries = sorted(p.name for p in folder.iterdir() if not p.name.startswith(LOCK))
    if not entries:
        return "empty"
    mark = read_marker(folder)
    if mark is not None and mark.get("kind") == kind:
        return "own"
    if mark is not None:
        found = f"a workbook {mark.get('kind')!r} output"
    else:
        found = (f"files the workbook did not write ({', '.join(entries[:5] + (['...'] if len(entries) > 5 else []))}; "
                 f"no {MARKER} marker)")
    raise OutputFolderError(f"{what} {str(folder)!r} holds {found}; the workbook writes a {kind} only into a new "
                            f"or empty folder or one of its own {kind} folders: choose another folder")


def write_marker(folder: Path, kind: str, **info) -> dict:
    """Mark ``folder`` (created if needed) as a workbook ``kind`` output; returns the marker."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mark = {"kind": kind, "id": info.pop("id", None) or uuid.uuid4().hex[:12], **info}
    write_json(folder / MARKER, mark)
    return mark


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, flushed, then renamed over it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~umask())  # as open() would create it, not tempfile's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj, **dumps) -> Path:
    """``write_text`` of ``json.dumps(obj, indent=2)`` plus a newline."""
    return write_text(path, json.dumps(obj, **{"indent": 2, **dumps}) + "\n")


def umask() -> int:
    """The process's umask (read without changing it where /proc tells it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _leftover(out: Path) -> re.Pattern:
    """Names of the folders ``temp_folder_beside`` and ``replace_folder`` leave beside ``out`` when killed."""
    return re.compile(rf"^\.{re.escape(out.name)}\.(\d+)-[A-Za-z0-9_]+\.(tmp|old)$")


def clean_leftovers(out: Path) -> list[Path]:
    """Remove the half-built or swapped-out folders beside ``out`` whose process is dead (a killed build or
    store); returns them. A folder of a live process, or any other name, is left alone."""
    out, removed = Path(out), []
    if not out.parent.is_dir():
        return removed
    pattern = _leftover(out)
    for p in out.parent.iterdir():
        m = pattern.match(p.name)
        if m and p.is_dir() and not p.is_symlink() and not pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def temp_folder_beside(out: Path) -> Path:
    """A fresh hidden folder next to ``out`` (same file system, so it can be renamed into place), named after this
    process; leftovers of killed earlier builds are removed first (``clean_leftovers``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.{os.getpid()}-", suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~umask())  # as mkdir would create it, not tempfile's 0700
    return tmp


def replace_folder(new: Path, out: Path, kind: str) -> Path:
    """Put the finished folder ``new`` at ``out``: ``out`` must pass ``check_folder`` (an older output of the
    workbook there is swapped out by renames, then removed). A kill leaves either the old or the new folder
    at ``out``."""
    check_folder(out, kind)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.old")
        out.rename(old)
    new.rename(out)
    if old is not None:
        shutil.rmtree(old)
    return out
