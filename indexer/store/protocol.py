"""The surface of the index that the rest of notes-search may use, written down so that a second
backend can implement it.

`IndexReader` is what the read paths use (search engine, resident vectors, status, show/grep/toc,
collections and routing); `IndexWriter` adds what the sync orchestrator needs. `Store` (the
SQLite backend) satisfies both structurally; nothing here names SQLite, except where noted.

Optional capabilities are declared here, never discovered by a caller testing a backend's class:
`sibling()` and `server_memory()` answer None where a backend has none, `bulk_load()` is a
block that changes nothing where there is no index upkeep to hold back (SQLite). The shared
defaults are in `indexer.store.core`.

Contracts every backend keeps, because callers rely on them:
- Reads outside `snapshot()` each see the latest committed state; inside it, one state.
- Every write method runs in `transaction()`: those documented "inside a transaction" must be
  called within the caller's `with store.transaction():`, the others open their own (so they
  must NOT be called inside one: transactions do not nest). A transaction that raises leaves
  nothing behind; a full disk or unwritable index surfaces as `indexer.errors.StoreError`.
- Chunk ids are positive, grow with every chunk written and are never reused while the index
  exists: `pending_chunks`, `vectors_by_language` and the language backfill page by id.
- Vectors are float32, in one embedding space per index (`reset_vectors` switches spaces);
  `vectors_generation()` changes whenever a commit added or removed vectors. A chunk has one
  vector per window the model read (`indexer.windows`: a chunk longer than the model's window
  is embedded as overlapping windows), usually one. Wherever vectors go in or come out with
  chunk ids (`store_vectors`, `vectors_by_language`, `rewrite_vectors`, `all_vectors`), a
  chunk's windows are consecutive rows under its repeated id, first window first; a page never
  splits a chunk. The first window's vector is the chunk's vector (language statistics, counts);
  a vector search ranks a chunk by its nearest window. Vector bytes carried by content hash
  (`write_files`) are a chunk's windows' float32 vectors concatenated, first window first.
- Lists are ordered as each method says; ties break by chunk id.
- Every read that takes a `SearchScope` (fts_search, vec_search, count_pending, scope_stats,
  language_counts) restricts to the same chunks: all of its fields at once, as the
  `SearchScope` docstring defines them. Tags compare by `rows.tag_key` (NFC, case-folded, no
  leading `#`), every tag of the scope required; `updated_since <= files.updated_at <
  updated_before` (Unix seconds). The top-k inside any scope is exact: a filter never turns a
  search approximate, however few files it keeps.

`fts_search` takes a typed `indexer.keywords.KeywordQuery` (phrases joined by OR, the last word
of a phrase maybe a prefix) and renders it in its own dialect, folding the words as its index
folded the documents. Its scores need only be ordered like FTS5's bm25, since fusion uses
ranks, but `--explain` shows them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from indexer.keywords import KeywordQuery
from indexer.model import FileVersion, KnownFile, ParsedDocument
from indexer.store.rows import (
    ChunkRow,
    ChunkText,
    CollectionRow,
    FileProblem,
    FileRow,
    LanguageBackfill,
    NearestWindow,
    PendingChunk,
    RankedChunk,
    ScopeCounts,
    SearchScope,
    ServerMemory,
    SourceState,
    SourceStats,
    VectorMatrix,
    VectorPage,
)

if TYPE_CHECKING:
    import numpy as np


class IndexReader(Protocol):
    """Read access to one index. Not thread-safe: one reader per thread (they are cheap)."""

    def close(self) -> None: ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Every read inside sees one committed state (a search's halves and its rows agree)."""
        ...

    def sibling(self) -> Callable[[], AbstractContextManager[IndexReader]] | None:
        """Inside `snapshot()`: how to open a second reader of the same committed state, which
        another thread may use while this one reads (a search's vector half beside its keyword
        half, its exact identifier search beside the prefix search). Each opened reader holds a connection of its own until its block ends, which must
        be before the snapshot's. None when the backend cannot share a snapshot between
        connections (SQLite: a WAL read snapshot belongs to its connection) or outside one."""
        ...

    # ---- index-wide state --------------------------------------------------------------------

    def check_integrity(self, *, full: bool = False) -> None:
        """StoreError when the index is damaged (a file changed since its last good check; all
        of it with `full`)."""
        ...

    def meta(self) -> dict[str, str]:
        """The key-value settings of the index: embedding identity (`embedding_model`, ...),
        `schema_version`, chunker versions per source, language statistics."""
        ...

    def has_vector_table(self) -> bool:
        """Whether an embedding space was set up (`reset_vectors`); before that no vectors exist."""
        ...

    def vectors_generation(self) -> str:
        """Changes whenever a committed transaction added or removed vectors ('' before any)."""
        ...

    def counts(self) -> dict[str, int]:
        """Diagnostic totals for benchmarks and tests: files, chunks, chunks_fts (rows of the
        lexical index), pending, vectors."""
        ...

    def server_memory(self) -> ServerMemory | None:
        """A database server's buffer pool beside what searches read; None for an index the
        process reads itself (SQLite: the operating system's page cache is its pool)."""
        ...

    # ---- sources and files -----------------------------------------------------------------

    def source_stats(self) -> list[SourceStats]:
        """Every source with its sync state and counts, by source id."""
        ...

    def source_state(self, source_id: str) -> SourceState:
        """A source's indexed revision and last whole sync (both None if unknown)."""
        ...

    def scope_stats(self, scope: SearchScope) -> dict[str, ScopeCounts]:
        """Counts inside `scope` (every field, filters included), per source that has any
        file or chunk in it."""
        ...

    def language_counts(self, scope: SearchScope | None = None) -> dict[str, dict[str, int]]:
        """{source: {language: chunks}} (inside `scope`), languages by count, largest first,
        then by name."""
        ...

    def known_files(self, source_id: str, under: str | None = None) -> dict[str, KnownFile]:
        """path -> what the index holds of each file of a source (or of the file or folder
        `under`): the drivers diff a source against this."""
        ...

    def file_rows(self, source_id: str | None = None) -> list[FileRow]:
        """Indexed files (of one source), by source id then path."""
        ...

    def front_matter_problems(self, source_id: str) -> list[FileProblem]:
        """The files of a source whose front matter could not be taken as written, by path."""
        ...

    def collections(self) -> list[CollectionRow]:
        """Every source's collections with their indexed file counts, by name then source id."""
        ...

    def sources_with_file(self, path: str) -> list[str]:
        """Ids of the sources that index the file `path` (exact, NFC), by id."""
        ...

    def sources_with_path(self, path: str) -> list[str]:
        """Ids of the sources that index `path` as a file or hold files below it as a folder."""
        ...

    # ---- search ----------------------------------------------------------------------------

    def fts_search(self, match: KeywordQuery, limit: int, scope: SearchScope) -> list[RankedChunk]:
        """Up to `limit` chunks matching any phrase of `match` inside `scope`, best first by
        bm25 over (breadcrumb weight 2, text weight 1); score = bm25, lower is better."""
        ...

    def vec_search(self, vector: np.ndarray, k: int, scope: SearchScope) -> list[RankedChunk]:
        """The exact `k` nearest chunks inside `scope` by cosine distance, nearest first (score =
        distance; a chunk's is its nearest window's). A zero vector, stored or asked, is never a hit; [] before any
        embedding space exists. Only an unrestricted scope may be answered by an approximate
        index (PostgreSQL's HNSW); inside any scope or filter the top-k is exact."""
        ...

    def nearest_windows(self, vector: np.ndarray, ids: Iterable[int]) -> dict[int, NearestWindow]:
        """Which window of each chunk of `ids` is nearest `vector` (0: the first), for the chunks
        with more than one window, and where its own text begins when that is stored: a hit
        found by meaning points at that window's lines."""
        ...

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        """The chunks among `ids` that still exist, with their file and source fields."""
        ...

    def chunk_languages(self, ids: Iterable[int] | None = None) -> dict[int, str]:
        """Chunk id -> language code ('unknown' when undetected), for `ids` or every chunk."""
        ...

    def count_pending(self, scope: SearchScope) -> int:
        """Chunks inside `scope` still waiting for a vector."""
        ...

    def all_vectors(self) -> VectorMatrix:
        """Every stored vector, by chunk id ascending (a chunk's windows under its repeated id):
        the resident copy that unscoped searches scan."""
        ...


class IndexWriter(IndexReader, Protocol):
    """What the sync orchestrator needs on top of reading. One writer at a time per index
    (the sync lock guarantees it); readers may run meanwhile."""

    def transaction(self) -> AbstractContextManager[None]:
        """All writes inside commit together or not at all; not re-entrant."""
        ...

    def on_first_write(self, mark: Callable[[], None]) -> None:
        """`mark` runs once, just before the next transaction begins: a run that writes nothing
        never runs it (a sync marks the SQLite file it changes, not one it only looks at)."""
        ...

    def bulk_load(self, *, whole_space: bool = False) -> AbstractContextManager[None]:
        """The block stores many vectors: a backend that keeps an approximate index up vector by
        vector (PostgreSQL's HNSW) may hold that upkeep back and build the index once after it;
        on SQLite nothing changes. `whole_space`: the block fills a space anew (a copy), so an
        index already there may be dropped first. Called outside a transaction."""
        ...

    def set_meta(self, values: dict[str, str]) -> None:
        """Insert or replace settings (own transaction)."""
        ...

    def write_meta(self, values: dict[str, str]) -> None:
        """`set_meta` inside a transaction."""
        ...

    def delete_meta(self, keys: Iterable[str]) -> None:
        """Remove settings, so a marker that has done its job leaves no trace (own transaction)."""
        ...

    def reset_vectors(self, dims: int, identity: dict[str, str]) -> None:
        """Start an empty embedding space of `dims` dimensions: drop every vector, mark every
        chunk pending, record `identity` in meta (own transaction)."""
        ...

    # ---- sources ---------------------------------------------------------------------------

    def ensure_source(self, source_id: str, kind: str) -> None:
        """Register a source; one registered with another kind loses all its rows first."""
        ...

    def source_ids(self) -> list[str]:
        """Registered source ids, sorted."""
        ...

    def mark_synced(self, source_id: str, *, indexed_rev: str | None = None, error: str | None = None) -> None:
        """A whole sync of the source finished now (moving `indexed_rev` when given)."""
        ...

    def errored_sources(self) -> dict[str, str]:
        """Sources whose last sync recorded an error, with it."""
        ...

    def set_source_error(self, source_id: str, error: str | None) -> None:
        """Record or clear (None) a source's last error."""
        ...

    def remove_source(self, source_id: str) -> None:
        """Delete a source with its files, chunks, vectors and collections."""
        ...

    # ---- files (inside a transaction) ------------------------------------------------------

    def write_file(
        self, source_id: str, file: FileVersion, doc: ParsedDocument, language_of: Callable[[str], str] | None = None
    ) -> int:
        """Replace a file and its chunks, reusing the stored vector (and detected language) of
        any chunk whose embedded text is already indexed; returns the chunks left pending.
        The file's `doc.tags` and `file.updated_at` are what a scope's tag and time filters see.
        Inside a transaction. Write a renamed file's new path before deleting the old one."""
        ...

    def write_files(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        language_of: Callable[[str], str] | None = None,
        vectors: Mapping[str, bytes] | None = None,
    ) -> int:
        """`write_file` for each (file, document) in order, as one batch (a server store writes
        it in a few round trips); returns the chunks left pending. With `vectors` (a chunk's
        windows' float32 vectors, concatenated, by the content hash of its embedded text: a
        copy's stored vectors) those
        are the chunks' vectors, stored with them, and no stored vector is reused: a chunk
        whose hash is missing stays pending. Without them, stored vectors are looked up for the
        whole batch before any of its files is replaced: text moved between two files of one
        batch keeps its vector whichever comes first. Inside a transaction."""
        ...

    def delete_file(self, source_id: str, path: str) -> None:
        """Remove a file with its chunks and their vectors. Inside a transaction."""
        ...

    def touch_file(self, source_id: str, path: str, size: int, mtime: float) -> None:
        """Same content, new stat: update size and mtime only. Inside a transaction."""
        ...

    # ---- collections (inside a transaction) ------------------------------------------------

    def collection_rows(self, source_id: str) -> list[CollectionRow]:
        """A source's declared collections (files=0), sorted by name, folder, description, tags."""
        ...

    def replace_collections(self, source_id: str, collections: Iterable[CollectionRow]) -> None:
        """Replace a source's collections (the rows' source_id and files are ignored).
        Inside a transaction."""
        ...

    def set_file_collection(self, source_id: str, path: str, collection: str | None) -> None:
        """Set the collection a file belongs to. Inside a transaction."""
        ...

    # ---- vectors ---------------------------------------------------------------------------

    def count_pending_all(self) -> int:
        """Chunks of the whole index waiting for a vector."""
        ...

    def pending_chunks(
        self, limit: int, after_id: int = 0, *, min_chars: int = 0, max_chars: int | None = None
    ) -> list[PendingChunk]:
        """Up to `limit` chunks waiting for a vector with id > `after_id`, by id, whose text is
        `min_chars` to `max_chars` characters long."""
        ...

    def store_window_lines(self, lines: Mapping[str, Sequence[int]]) -> None:
        """Where each window of a text longer than the model reads begins (per content hash, a
        line of the chunk's text per window), so a search need not cut it again (own transaction)."""
        ...

    def window_lines(self) -> dict[str, list[int]]:
        """Every stored text's window lines, by content hash (what a copy of the index carries)."""
        ...

    def prune_window_lines(self) -> int:
        """Forget the window lines of texts no chunk holds any more; returns how many."""
        ...

    def store_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> int:
        """Attach vectors to those chunks that still exist and still wait; returns how many
        chunks (own transaction: a chunk deleted meanwhile is skipped, not an error). A chunk's
        windows are consecutive rows under its repeated id, first window first."""
        ...

    def unembed(self, ids: Sequence[int]) -> None:
        """Drop the vectors of these chunks and make them pending again (own transaction)."""
        ...

    def vectors_by_language(self, after_id: int, limit: int) -> VectorPage:
        """The stored vectors of up to `limit` chunks with id > `after_id`, by id (a chunk's
        windows under its repeated id, first window first), with their languages."""
        ...

    def vector_language_counts(self) -> dict[str, int]:
        """Chunks that have a vector, per language."""
        ...

    def rewrite_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Replace stored vectors in place (a new language-neutral space): rows as
        `vectors_by_language` gives them, every window of each chunk named. Inside a transaction."""
        ...

    # ---- languages of chunks indexed before languages were detected ------------------------

    def language_backfill(self) -> LanguageBackfill | None:
        """How far the detection of old chunks' languages got; None when nothing waits."""
        ...

    def chunks_for_language_backfill(self, after_id: int, upto_id: int, limit: int) -> list[ChunkText]:
        """Up to `limit` chunks with `after_id` < id <= `upto_id`, by id."""
        ...

    def store_backfilled_languages(self, languages: Sequence[tuple[int, str]], upto_id: int, done_upto: int) -> None:
        """Set (chunk id, language) pairs and record progress up to `done_upto`; the backfill
        ends once it reaches `upto_id` (own transaction, so an interrupted run resumes)."""
        ...
