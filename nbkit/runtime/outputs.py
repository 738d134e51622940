"""Output folders the workbook may write into, and writes that a kill cannot leave half done.

The rule, the same for every entry point that writes (train, run/report, doctor, dataset build, study store): the
workbook writes only into a folder that is new, empty, or its own, and a folder is its own **only by its marker**
(the file ``MARKER``, written when the workbook created it, naming the kind of output). No file name makes a
folder the workbook's: a folder holding a ``config.json`` or an ``index.html`` of the user's is the user's.
Anything else, e.g. ``out_dir="."`` (the project root) or a folder of the user's files, is refused with
``OutputFolderError`` by ``check_folder`` before any work starts, and nothing is deleted; ``overwrite`` (of a run)
or a rebuild replaces only a marked folder of the same kind.

The marker lists the files the workbook wrote (``files``: top-level names). A whole-folder replace (a dataset
rebuilt, a study stored again, ``replace_folder``) removes only those: anything else in a marked folder (a user's
NOTES.md, a run trained into a subfolder) is refused by ``check_replace`` before any work, naming it. A marker
written before the list existed counts only the names its caller passes as ``legacy`` (the kind's own files).
A symlink given as the output is followed (its target is the folder), never replaced by a folder. ``check_folder``
also refuses, before any work, a folder that cannot be written (``check_writable``).

Files are written atomically: to a temporary file in the same folder, then renamed over the target
(``os.replace``), so a reader sees the old file or the new one, never a prefix. Files and folders follow the
user's umask (as ``open`` and ``mkdir`` would), not the 0600/0700 of ``tempfile``. A folder built beside its
target (``temp_folder_beside``) carries its builder's pid in its name; one whose builder is dead (a killed build)
is removed by the next build there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

from nbkit.runtime.locks import LOCK, pid_alive
from nbkit.runtime.paths import ROOT

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
    of a workbook process, ``nbkit.runtime.locks.LOCK``, aside). Reads only: nothing is created or deleted here.
    """
    folder = Path(folder).expanduser().resolve()
    if not folder.exists():
        check_writable(folder, what)
        return "new"
    if not folder.is_dir():
        raise OutputFolderError(f"{what} {str(folder)!r} is a file, not a folder")
    if folder == ROOT.resolve() or folder in ROOT.resolve().parents or folder == Path.home().resolve():
        raise OutputFolderError(
            f"{what} {str(folder)!r} is the project root, one of its parents or the home "
            f"folder: choose a dedicated folder"
        )
    check_writable(folder, what)
    entries = sorted(p.name for p in folder.iterdir() if not p.name.startswith(LOCK))
    if not entries:
        return "empty"
    mark = read_marker(folder)
    if mark is not None and mark.get("kind") == kind:
        return "own"
    if mark is not None:
        found = f"a workbook {mark.get('kind')!r} output"
    else:
        found = (
            f"files the workbook did not write ({', '.join(entries[:5] + (['...'] if len(entries) > 5 else []))}; "
            f"no {MARKER} marker)"
        )
    raise OutputFolderError(
        f"{what} {str(folder)!r} holds {found}; the workbook writes a {kind} only into a new "
        f"or empty folder or one of its own {kind} folders: choose another folder"
    )


def check_writable(folder: str | Path, what: str = "output folder") -> None:
    """``OutputFolderError`` unless the workbook can create files in ``folder`` (or, for a folder still to be made,
    in its nearest existing parent): tried with a temporary file that is removed at once, so a read-only file
    system or a parent that is a file is refused before any work, as root too."""
    folder = Path(folder).expanduser().absolute()
    probe = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if probe is None or not probe.is_dir():
        raise OutputFolderError(f"{what} {str(folder)!r} cannot be created: {str(probe)!r} is not a folder")
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".nbkit-probe.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputFolderError(
            f"{what} {str(folder)!r} is not writable ({exc.strerror or exc} in {str(probe)!r}): "
            f"choose a folder you can write"
        ) from None


TEMP_NAME_EXTRA = len(".") + len(".") + 10 + len("-") + 12 + len(".tmp")
"""Characters ``temp_folder_beside`` / ``replace_folder`` add to a folder's name (pid and random part at most)."""


def check_name(out: str | Path, what: str = "output folder") -> None:
    """``OutputFolderError`` when ``out``'s name, or the hidden temporary folder built beside it, is longer than the
    file system allows (``Errno 36`` late, on a hidden path, otherwise)."""
    out = Path(out).expanduser().absolute()
    parent = next((p for p in out.parents if p.exists()), Path("/"))
    try:
        limit = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(out.name.encode()) + TEMP_NAME_EXTRA > limit:
        raise OutputFolderError(
            f"{what} name {out.name[:40]!r}... is {len(out.name.encode())} bytes long: the "
            f"workbook builds it beside as '.<name>.<pid>-<random>.tmp' ({TEMP_NAME_EXTRA} bytes "
            f"more), and names here hold at most {limit}: choose a name of at most "
            f"{limit - TEMP_NAME_EXTRA} bytes"
        )


def owned_names(folder: Path, legacy: tuple[str, ...] = ()) -> set[str]:
    """The top-level names of ``folder`` the workbook wrote: its marker's ``files`` list (``legacy`` for a marker
    written before the list existed), the marker and lock files."""
    mark = read_marker(folder) or {}
    files = mark.get("files")
    return {MARKER, *(files if isinstance(files, list) else legacy)}


def foreign_entries(folder: str | Path, legacy: tuple[str, ...] = ()) -> list[str]:
    """The top-level names in the marked ``folder`` that its marker does not list (the lock file aside)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    owned = owned_names(folder, legacy)
    return sorted(p.name for p in folder.iterdir() if p.name not in owned and not p.name.startswith(LOCK))


def check_replace(folder: str | Path, kind: str, what: str = "output folder", legacy: tuple[str, ...] = ()) -> Path:
    """Before work that will replace ``folder`` as a whole (``replace_folder``): ``check_folder``, the name's length
    (``check_name``), and nothing in it but what its marker lists. Returns the folder to write, a symlink followed
    to its target. Reads only."""
    out = resolve_link(folder)
    check_folder(out, kind, what)
    check_name(out, what)
    extra = foreign_entries(out, legacy)
    if extra:
        shown = ", ".join(extra[:5] + (["..."] if len(extra) > 5 else []))
        raise OutputFolderError(
            f"{what} {str(out)!r} is a workbook {kind} output, but it also holds {shown}, "
            f"which the workbook did not write (its {MARKER} does not list them); rebuilding "
            f"would replace the whole folder: move them out of it, or choose another folder"
        )
    return out


def check_listed(folder: str | Path, kind: str, what: str = "output folder", files_only: bool = False) -> str:
    """``check_folder``, and for a folder whose marker lists its files (``files``), nothing else in it: the rule of a
    writer that adds files to its folder (a report, the doctor) rather than replacing it. ``files_only``: folders in
    it are let be (the writer never deletes a folder: a report folder holds the doctor's and the runs' folders).
    Reads only."""
    status = check_folder(folder, kind, what)
    folder = Path(folder).expanduser()
    if status == "own" and isinstance((read_marker(folder) or {}).get("files"), list):
        extra = [n for n in foreign_entries(folder) if not (files_only and (folder / n).is_dir())]
        if extra:
            raise OutputFolderError(
                f"{what} {str(folder)!r} is a workbook {kind} output, but it also holds "
                f"{', '.join(extra[:5] + (['...'] if len(extra) > 5 else []))}, which the "
                f"workbook did not write (its {MARKER} does not list them): move them out of it, "
                f"or choose another folder"
            )
    return status


def resolve_link(path: str | Path) -> Path:
    """``path`` with a symlink (at any level) followed: the folder a write really goes to."""
    path = Path(path).expanduser()
    return path.resolve() if any(p.is_symlink() for p in [path, *path.parents]) else path


def write_marker(folder: Path, kind: str, **info) -> dict:
    """Mark ``folder`` (created if needed) as a workbook ``kind`` output; returns the marker. ``files=[...]``:
    the top-level names the workbook wrote there (``files=True``: every name in the folder now)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if info.get("files") is True:
        info["files"] = sorted(p.name for p in folder.iterdir() if p.name != MARKER and not p.name.startswith(LOCK))
    mark = {"kind": kind, "id": info.pop("id", None) or uuid.uuid4().hex[:12], **info}
    write_json(folder / MARKER, mark)
    return mark


def record_files(folder: Path, names: list[str]) -> dict | None:
    """Add ``names`` to the ``files`` list of ``folder``'s marker (what the workbook wrote there since)."""
    mark = read_marker(folder)
    if mark is None:
        return None
    files = sorted(set(mark.get("files") or []) | set(names))
    if files != mark.get("files"):
        mark["files"] = files
        write_json(Path(folder) / MARKER, mark)
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


SEAL = "<!-- written by nbkit; sha256 of the text above: {} (edited above this line, it is never replaced) -->\n"
"""The last line of a page the workbook generates into a file it later overwrites (``sealed``, ``unedited``)."""


def sealed(text: str) -> str:
    """``text`` (ending in a newline) and its ``SEAL`` line: what a generated page is written as."""
    return text + SEAL.format(hashlib.sha256(text.encode("utf-8")).hexdigest())


def unedited(path: str | Path) -> bool:
    """Whether the file ``path`` is a ``sealed`` page exactly as the workbook wrote it: its last line is the seal of
    everything above it. A user's file, a page edited since (a line appended, one changed) or a page that lost its
    seal is not, whatever its first lines say."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    body = text.removesuffix("\n").rpartition("\n")[0]
    return bool(body) and text == sealed(body + "\n")


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


def replace_folder(new: Path, out: Path, kind: str, legacy: tuple[str, ...] = (), keep_old: Path | None = None) -> Path:
    """Put the finished folder ``new`` at ``out``: ``out`` must pass ``check_replace`` (an older output of the
    workbook there, holding only what its marker lists, is swapped out by renames, then removed, or moved to
    ``keep_old`` when given). A kill leaves either the old or the new folder at ``out``. A symlink ``out`` is
    followed: its target is replaced, the link stays."""
    out = check_replace(out, kind, legacy=legacy)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.old")
        out.rename(old)
    new.rename(out)
    if old is not None:
        if keep_old is not None:
            old.rename(keep_old)
        else:
            shutil.rmtree(old)
    return out
