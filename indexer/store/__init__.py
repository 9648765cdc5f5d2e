"""The index store: all SQL of notes-search lives in this package.

`Store` (sqlite.py) is the SQLite + FTS5 + sqlite-vec backend, `PostgresStore` (postgres.py)
the PostgreSQL + pgvector one; `IndexReader` and `IndexWriter` (protocol.py) are the surface the
rest of the code may use; rows.py holds the typed values that cross it and schema.py the named
migration steps. `open_store` picks the backend from where the config puts the index. Import
from here: `from indexer.store import open_store, SearchScope`.
"""

from pathlib import Path
from typing import TYPE_CHECKING

from indexer.redaction import is_postgres_url
from indexer.store.core import content_hash, utc_now
from indexer.store.protocol import IndexReader, IndexWriter
from indexer.store.rows import (
    ChunkRow,
    ChunkText,
    CollectionRow,
    FileProblem,
    FileRow,
    LanguageBackfill,
    PendingChunk,
    RankedChunk,
    ScopeCounts,
    SearchScope,
    ServerMemory,
    SourceState,
    SourceStats,
    VectorMatrix,
    VectorPage,
    chunk_windows,
    split_windows,
    tag_key,
)
from indexer.store.schema import (
    COPY_UNFINISHED_KEY,
    LANGUAGE_BACKFILL_KEY,
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    is_unfinished_copy,
)
from indexer.store.sqlite import Store, vec_extension_path

if TYPE_CHECKING:  # mypy proves both stores implement both protocols, signatures included
    from indexer.store.postgres import PostgresStore

    def _store_is_a_writer(store: Store) -> IndexWriter:
        return store

    def _postgres_store_is_a_writer(store: PostgresStore) -> IndexWriter:
        return store


def is_postgres(location: Path | str) -> bool:
    """Whether the index lives on a PostgreSQL server (`indexer.redaction.is_postgres_url`)."""
    return is_postgres_url(location)


def open_store(location: Path | str, *, readonly: bool = False) -> IndexWriter:
    """The index at `location` (`Config.index_location`): a PostgreSQL URL or a SQLite file.
    psycopg is imported only for the former, so SQLite commands stay light."""
    if is_postgres(location):
        from indexer.store.postgres import PostgresStore

        return PostgresStore.open(str(location), readonly=readonly)
    return Store.open(Path(location), readonly=readonly)


def index_exists(location: Path | str) -> bool:
    """Whether a sync created the index yet (a server that cannot be reached raises StoreError)."""
    if is_postgres(location):
        from indexer.store.postgres import PostgresStore

        return PostgresStore.exists(str(location))
    return Path(location).exists()


def describe_location(location: Path | str) -> str:
    """The index's location for people: a URL without its password, or the file's path."""
    if is_postgres(location):
        from indexer.store.postgres import describe

        return describe(str(location))
    return str(location)


__all__ = [
    "COPY_UNFINISHED_KEY",
    "LANGUAGE_BACKFILL_KEY",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ChunkRow",
    "ChunkText",
    "CollectionRow",
    "FileProblem",
    "FileRow",
    "IndexReader",
    "IndexWriter",
    "LanguageBackfill",
    "Migration",
    "PendingChunk",
    "RankedChunk",
    "ScopeCounts",
    "SearchScope",
    "ServerMemory",
    "SourceState",
    "SourceStats",
    "Store",
    "VectorMatrix",
    "VectorPage",
    "chunk_windows",
    "content_hash",
    "describe_location",
    "index_exists",
    "is_postgres",
    "is_unfinished_copy",
    "open_store",
    "split_windows",
    "tag_key",
    "utc_now",
    "vec_extension_path",
]
