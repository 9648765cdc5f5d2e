"""The index store: all SQL of notes-search lives in this package.

`Store` (sqlite.py) is the SQLite + FTS5 + sqlite-vec backend; `IndexReader` and `IndexWriter`
(protocol.py) are the surface the rest of the code may use; rows.py holds the typed values that
cross it and schema.py the named migration steps. Import from here: `from indexer.store import
Store, SearchScope`.
"""

from typing import TYPE_CHECKING

from indexer.store.protocol import IndexReader, IndexWriter
from indexer.store.rows import (
    ChunkRow,
    ChunkText,
    CollectionRow,
    FileRow,
    LanguageBackfill,
    PendingChunk,
    RankedChunk,
    ScopeCounts,
    SearchScope,
    SourceState,
    SourceStats,
    VectorMatrix,
    VectorPage,
    tag_key,
)
from indexer.store.schema import (
    LANGUAGE_BACKFILL_KEY,
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
)
from indexer.store.sqlite import Store, content_hash, utc_now, vec_extension_path

if TYPE_CHECKING:  # mypy proves the SQLite store implements both protocols, signatures included

    def _store_is_a_writer(store: Store) -> IndexWriter:
        return store


__all__ = [
    "LANGUAGE_BACKFILL_KEY",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ChunkRow",
    "ChunkText",
    "CollectionRow",
    "FileRow",
    "IndexReader",
    "IndexWriter",
    "LanguageBackfill",
    "Migration",
    "PendingChunk",
    "RankedChunk",
    "ScopeCounts",
    "SearchScope",
    "SourceState",
    "SourceStats",
    "Store",
    "VectorMatrix",
    "VectorPage",
    "content_hash",
    "tag_key",
    "utc_now",
    "vec_extension_path",
]
