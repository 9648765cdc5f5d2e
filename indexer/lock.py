"""The sync lock: who may write the index, chosen by where the index lives.

`IndexLock` is the one interface the sync orchestrator uses; two implementations:
- SQLite (`FileIndexLock`): one exclusive flock on a file next to the index, for the whole run.
  One writer per index at a time; readers never take it. Every claim below is already covered.
- PostgreSQL (`indexer.store.postgres_lock.AdvisoryIndexLock`): session advisory locks on one
  connection held for the run, so workers on several hosts share one index.

The rule for PostgreSQL (the index-wide key is taken in two modes):
- A run holds the index-wide key SHARED from start to end: any number of workers run at once.
- Work on one source (its files, chunks, collections, revision, chunker version, its removal)
  needs that source's key EXCLUSIVE: no source is ever indexed by two workers at once. A worker
  skips the sources another one holds.
- Attaching vectors to pending chunks needs the embedding key EXCLUSIVE (pending chunks belong
  to no one source; one embedder pass at a time, the next picks up what the last left).
- Whole-index operations need the index-wide key EXCLUSIVE, which only a worker that is the
  sole runner gets: starting a new embedding space (`reset_vectors` on an identity change),
  rewriting every vector into new language statistics, and the language backfill of an old
  index. A rebuild that cannot get it does nothing this run (the run reports the lock busy);
  the statistics rewrite and the backfill are skipped and left to a later run. Two workers
  that both find a rebuild due at the same instant both give way; the next run of either one
  makes it. `migrate` holds a target's index-wide key exclusively for the whole copy.
Readers take none of these keys: a search never waits for a sync. A lock dies with its
connection, so a killed worker leaves none behind.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from indexer.errors import StoreError

if TYPE_CHECKING:
    from indexer.config import Config


class IndexLock(Protocol):
    """What a sync run holds while it writes (see the module docstring for the rule)."""

    def acquire(self, timeout: float = 0.0) -> bool:
        """Start the run, waiting up to `timeout` seconds; False when it may not run now."""
        ...

    def release(self) -> None:
        """End the run: every claim it made is given up."""
        ...

    def claim_source(self, source_id: str, timeout: float = 0.0) -> bool:
        """Become the only writer of one source until the run ends; False if another holds it."""
        ...

    def claim_embedding(self, timeout: float = 0.0) -> bool:
        """Become the only worker attaching vectors until the run ends."""
        ...

    def claim_index(self, timeout: float = 0.0) -> bool:
        """Become the only worker of the whole index, until `release_index` or the run's end."""
        ...

    def release_index(self) -> None:
        """Give up `claim_index` (the run continues, sharing the index again)."""
        ...


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


class _WholeIndexClaims:
    """The claims of a lock that holds the whole index once acquired: every one is granted."""

    def claim_source(self, source_id: str, timeout: float = 0.0) -> bool:
        return True

    def claim_embedding(self, timeout: float = 0.0) -> bool:
        return True

    def claim_index(self, timeout: float = 0.0) -> bool:
        return True

    def release_index(self) -> None:
        pass


class FileIndexLock(_WholeIndexClaims):
    """The SQLite index's lock: the run holds the whole index, so every claim is granted."""

    def __init__(self, path: Path) -> None:
        self._lock = SyncLock(path)

    def acquire(self, timeout: float = 0.0) -> bool:
        return self._lock.acquire(timeout)

    def release(self) -> None:
        self._lock.release()


class HeldIndexLock(_WholeIndexClaims):
    """A run whose caller already excludes every other writer (tests, in-process tools)."""

    def acquire(self, timeout: float = 0.0) -> bool:
        return True

    def release(self) -> None:
        pass


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


def postgres_dsn(config: Config) -> str | None:
    """The PostgreSQL connection string of an index on a server, None for a SQLite file."""
    return config.db_url


def open_index_lock(config: Config) -> IndexLock:
    """The lock that fits where the index lives (not yet acquired)."""
    dsn = postgres_dsn(config)
    if dsn is None:
        return FileIndexLock(config.lock_path)
    from indexer.store.postgres_lock import AdvisoryIndexLock  # psycopg loads only for a server index

    return AdvisoryIndexLock(dsn)


def running_sync(config: Config) -> int | None:
    """The pid of a sync holding the index now (0 if unknown, on a server index possibly another
    host's), or None when none runs. Never takes the lock itself on a server index."""
    dsn = postgres_dsn(config)
    if dsn is None:
        return holder(config.lock_path)
    from indexer.store.postgres_lock import sync_holder

    return sync_holder(dsn)
