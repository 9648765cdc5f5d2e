"""Moving an index to another store: `notes-search migrate --to postgresql://...`.

The copy itself is indexer.migrate; here are the rules around it: the source is this config's
SQLite index, held under its sync lock for the whole copy (no sync writes meanwhile), and the
target is held whole, so no sync worker of a server index runs while it is filled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from indexer.config import Config
from indexer.errors import NotesSearchError
from indexer.lock import FileIndexLock, IndexLock, postgres_dsn
from indexer.migrate import MigrationReport, Progress, migrate
from indexer.store import IndexWriter, Store, is_postgres, open_store


def migrate_index(config: Config, target: str, *, force: bool, progress: Progress | None = None) -> MigrationReport:
    """Copy the configured index into `target` (a PostgreSQL URL, or a SQLite file path)."""
    if postgres_dsn(config) is not None:
        raise NotesSearchError("the configured index is already on a server; migrate copies a SQLite index")
    if not config.db.is_file():
        raise NotesSearchError(f"no index at {config.db}: run `notes-search sync` first")
    if not is_postgres(target) and Path(target).resolve() == config.db.resolve():
        raise NotesSearchError("the target is the index itself")
    source_lock = FileIndexLock(config.lock_path)
    if not source_lock.acquire():
        raise NotesSearchError("a sync is running on the index; migrate again when it has finished")
    try:
        target_lock, open_target = _target(target)
        if not target_lock.acquire() or not target_lock.claim_index():
            target_lock.release()
            raise NotesSearchError("sync workers are writing the target index; stop them and migrate again")
        try:
            source = Store.open(config.db)
            try:
                destination = open_target()
                try:
                    return migrate(source, destination, force=force, progress=progress)
                finally:
                    destination.close()
            finally:
                source.close()
        finally:
            target_lock.release()
    finally:
        source_lock.release()


def _target(target: str) -> tuple[IndexLock, Callable[[], IndexWriter]]:
    """The target's lock and how to open it."""
    if is_postgres(target):
        from indexer.store.postgres_lock import AdvisoryIndexLock

        return AdvisoryIndexLock(target), lambda: open_store(target)
    path = Path(target).expanduser()
    return FileIndexLock(path.parent / ".notes-sync.lock"), lambda: Store.open(path)
