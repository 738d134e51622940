"""Output folders the workbook may write into, and writes that a kill cannot leave half done.

The rule: the workbook writes only into a folder that is new, empty, or recognisably its own (it holds the
marker file ``MARKER``, written when the workbook created it, or exactly the files of a workbook output of that
kind from before markers existed). Anything else, e.g. ``out_dir="."`` (the project root) or a folder of the
user's files, is refused with ``OutputFolderError`` before any work starts, and nothing is deleted.

Files are written atomically: to a temporary file in the same folder, then renamed over the target
(``os.replace``), so a reader sees the old file or the new one, never a prefix.
"""
from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

MARKER = ".nbkit-output.json"
"""The file that marks a folder as written by the workbook: ``{"kind": ..., "id": ...}``."""

KNOWN_FILES: dict[str, tuple[set[str], str]] = {
    "dataset": ({"README.md", "card.json", "dataset_dict.json", "train", "train.parquet", "pool.parquet"},
                "card.json"),
    "rl-run": ({"metrics.jsonl", "config.json", "summary.json", "README.md", "checkpoint-*"}, "config.json"),
    "report": ({"index.html", "run.json", "*.ipynb", "*.html", "runs", "datasets"}, "index.html"),
    "results": ({"runs", "provenance.json", "README.md"}, "provenance.json"),
}
"""Per kind: the entries (glob patterns) a workbook output holds and the one it must hold. A folder with only such
entries, written before markers existed, is recognised as the workbook's own."""


class OutputFolderError(FileExistsError):
    """The output folder holds something the workbook did not write; nothing was changed."""


def read_marker(folder: Path) -> dict | None:
    """The marker of ``folder`` (None when it has none or it cannot be read)."""
    try:
        return json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _legacy_own(folder: Path, kind: str) -> bool:
    """True when ``folder`` holds exactly the files of a ``kind`` output written before markers existed."""
    allowed, required = KNOWN_FILES.get(kind, (set(), ""))
    names = {p.name for p in folder.iterdir()}
    extra = {n for n in names if not any(fnmatch.fnmatchcase(n, pattern) for pattern in allowed)}
    return bool(required) and required in names and not extra


def check_folder(folder: str | Path, kind: str, what: str = "output folder") -> str:
    """Whether the workbook may write a ``kind`` output into ``folder``: ``"new"``, ``"empty"`` or ``"own"``.

    Raises ``OutputFolderError`` (naming the folder, what is in it and what to do) for a file, the project
    root or one of its parents, the home folder, or a folder holding anything the workbook did not write.
    Reads only: nothing is created or deleted here.
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
    entries = sorted(p.name for p in folder.iterdir())
    if not entries:
        return "empty"
    mark = read_marker(folder)
    if mark is not None and mark.get("kind") == kind:
        return "own"
    if mark is None and _legacy_own(folder, kind):
        return "own"
    if mark is not None:
        found = f"a workbook {mark.get('kind')!r} output"
    else:
        found = f"files the workbook did not write ({', '.join(entries[:5] + (['...'] if len(entries) > 5 else []))})"
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


def temp_folder_beside(out: Path) -> Path:
    """A fresh hidden folder next to ``out`` (same file system, so it can be renamed into place)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))


def replace_folder(new: Path, out: Path, kind: str) -> Path:
    """Put the finished folder ``new`` at ``out``: ``out`` must pass ``check_folder`` (an older output of the
    workbook there is swapped out by renames, then removed). A kill leaves either the old or the new folder
    at ``out``."""
    check_folder(out, kind)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
        out.rename(old)
    new.rename(out)
    if old is not None:
        shutil.rmtree(old)
    return out
