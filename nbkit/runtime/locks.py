"""One process at a time in a folder: an OS-level lock held for the life of a run.

``FolderLock(folder).acquire()`` takes ``filelock``'s exclusive lock on ``folder/.nbkit-lock`` without waiting
(``flock`` on POSIX, ``msvcrt`` on Windows) and writes the holder's pid, host and start time into it. A second
process, a fresh run or a resume alike, is refused with ``FolderLockedError`` naming that holder. The operating
system drops the lock when its process dies, however it dies (kill -9 included), so a lock file left by a dead
process is simply taken over: no stale lock ever needs a hand. ``release`` removes the lock file, and the folder
itself (and any parent the lock created) when nothing else was written into it, so a refused call leaves nothing
behind.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from pathlib import Path

import filelock

LOCK = ".nbkit-lock"
"""The lock file's name (a workbook file: ``nbkit.runtime.outputs.check_folder`` does not count it as the user's)."""


class FolderLockedError(RuntimeError):
    """Another live process holds the folder's lock; nothing was changed."""


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (True where that cannot be told: never wrongly dead)."""
    if pid <= 0:
        return False
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(path: Path) -> dict:
    """What the lock file says about its holder ({} when unreadable or not yet written)."""
    try:
        info = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _write_holder(fd: int) -> None:
    """``filelock``'s ``on_acquired``: this process's pid, host and start time into the file it just locked."""
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)


class FolderLock:
    """The exclusive lock of one process on ``folder`` (``name``: the lock file, one per process rank)."""

    def __init__(self, folder: str | Path, what: str = "run folder", name: str = LOCK):
        self.folder = Path(folder)
        self.what = what
        self.path = self.folder / name
        self._lock = filelock.FileLock(self.path, thread_local=False, on_acquired=_write_holder)
        self._created: list[Path] = []

    def acquire(self) -> FolderLock:
        """Take the lock (creating the folder if needed) or raise ``FolderLockedError`` naming the holder."""
        self._created = [p for p in [self.folder, *self.folder.parents] if not p.exists()]  # innermost first
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(blocking=False)
        except filelock.Timeout:
            self._remove_created()
            info = holder(self.path)
            who = (
                f"process {info.get('pid', '?')} on {info.get('host', '?')} (since {info.get('started', '?')})"
                if info
                else "another process"
            )
            raise FolderLockedError(
                f"{self.what} {str(self.folder)!r} is in use by {who}: one process at a "
                f"time; wait for it to finish (or stop it), then run again"
            ) from None
        return self

    def release(self) -> None:
        """Drop the lock and its file; remove the folders ``acquire`` created if nothing else was put there."""
        if not self._lock.is_locked:
            return
        self.path.unlink(missing_ok=True)  # while still held: a process that opens the name next gets a new file
        self._lock.release()
        self._remove_created()

    def _remove_created(self) -> None:
        for folder in self._created:
            try:
                folder.rmdir()  # only an empty folder goes
            except OSError:
                break

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
