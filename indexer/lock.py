"""The sync lock: an flock on a file, so a killed process can never leave it held."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from indexer.errors import StoreError


class SyncLock:
    """Exclusive, non-reentrant lock shared by `sync`, `reindex`, the watcher and the MCP server."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, timeout: float = 0.0) -> bool:
        """Try to take the lock, waiting up to `timeout` seconds. False if another process holds it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            blocker = _not_a_folder(self.path.parent)
            if blocker is not None:  # mkdir says only "File exists" when a file sits on the path
                raise StoreError(
                    f"cannot create the sync lock {self.path} (next to the index): {blocker} is not a folder"
                ) from None
            # the lock lives next to the index: a folder we cannot write is the db's folder
            raise StoreError(
                f"cannot create the sync lock {self.path} (next to the index): {exc.strerror or exc}"
            ) from None
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the pid is for people looking at the file; the flock alone is the lock (disk full)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SyncLock:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _not_a_folder(folder: Path) -> Path | None:
    """The nearest of `folder` and its parents that exists but is no folder, or None."""
    for candidate in (folder, *folder.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


def holder(path: Path) -> int | None:
    """The pid of the process holding the lock at `path` now (0 if it has not written its pid
    yet), or None when nobody does. Never creates the file or its folder.

    A shared lock is taken for an instant to probe: a sync that tries the lock in that instant
    finds it busy and exits as if another sync ran, which the next cron tick makes good.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file: no sync ever ran here
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
