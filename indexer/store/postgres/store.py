"""`PostgresStore`: opening and migrating an index, transactions and shared snapshots, writing
files with their chunks and lexical rows in a few round trips; the bookkeeping both backends
share is `indexer.store.core`, vectors are `vectors.PgVectors`, keyword search `keyword`."""

from __future__ import annotations

import functools
import json
import logging
import selectors
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql
from psycopg.pq import TransactionStatus

from indexer.errors import StoreError
from indexer.keywords import KeywordQuery
from indexer.model import FileVersion, ParsedDocument
from indexer.store.core import POSTGRES, content_hash, utc_now
from indexer.store.postgres import connection
from indexer.store.postgres.connection import (
    ASYNC_COMMIT,
    STORAGE_ERRORS,
    describe,
    first_lines,
    give_back,
    storage_error,
    storage_errors_mapped,
)
from indexer.store.postgres.keyword import KeywordSearch
from indexer.store.postgres.schema import LEXICAL_GIN_INDEXES, MIGRATION_LOCK, PG_MIGRATIONS, PG_SCHEMA_VERSION
from indexer.store.postgres.tsvector import (
    Tsvector,
    lexical_parts,
    scope_condition,
    scope_tsvector,
    stored_opt_text,
    stored_tag_keys,
    stored_text,
)
from indexer.store.postgres.vectors import PgVectors, vector_bytes
from indexer.store.rows import (
    ChunkRow,
    RankedChunk,
    SearchScope,
    ServerMemory,
)
from indexer.store.schema import LANGUAGE_BACKFILL_KEY

log = logging.getLogger("notes_search.store")


# what searches read, with their indexes and TOAST: the lexical rows, the vectors and their
# HNSW graph, the chunks shown, the files and tags that scopes and filters test, the words
# prefixes begin
SEARCHED_TABLES = ("chunks_fts", "chunk_vectors", "chunks", "files", "file_tags", "lexemes")


@storage_errors_mapped
class PostgresStore(PgVectors):
    """A connection to the index database with the schema applied."""

    dialect = POSTGRES
    conn: psycopg.Connection[Any]

    def __init__(self, conn: psycopg.Connection[Any], url: str, readonly: bool) -> None:
        self.conn = conn
        self.url = url
        self.reading = readonly
        self._vectors_changed = False
        self._vector_oid: int | None = None
        self._has_vectors = False
        self._hnsw_ready = False
        self._in_snapshot = False
        self._lexicon_conn: psycopg.Connection[Any] | None = None  # see _add_lexemes
        self.keyword = KeywordSearch(conn, url)

    @property
    def keyword_trace(self) -> list[str]:
        """How the last keyword search went, pass by pass (for benchmarks and tests)."""
        return self.keyword.trace

    @classmethod
    def open(cls, url: str, *, readonly: bool = False) -> PostgresStore:
        """Open the index at `url` (sync migrates it; a reader needs it migrated)."""
        conn = connection.live_connection(url, readonly)
        store = cls(conn, url, readonly)
        try:
            version = store._schema_version()
            if readonly:
                if version is None:
                    raise StoreError(f"no index at {describe(url)}: run `notes-search sync` first")
                if version != PG_SCHEMA_VERSION:
                    raise StoreError(
                        f"index {describe(url)} has schema {version}, expected {PG_SCHEMA_VERSION}: run `notes-search sync`"
                    )
            else:
                store._migrate(version)
            store._register_vector_type()
        except StoreError:
            conn.close()
            raise
        except STORAGE_ERRORS as exc:
            conn.close()
            raise storage_error(url, exc) from None
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"index {describe(url)}: {first_lines(exc, url)}") from None
        return store

    @classmethod
    def exists(cls, url: str) -> bool:
        """Whether `url` holds an index (a sync ran); a server that cannot be reached raises."""
        conn = connection.live_connection(url, True)
        try:
            exists = PostgresStore(conn, url, True)._schema_version() is not None
        except psycopg.Error as exc:
            conn.close()
            raise storage_error(url, exc) from None
        give_back(url, True, conn)
        return exists

    def close(self) -> None:
        if self.conn.info.transaction_status != TransactionStatus.IDLE and not self.conn.closed:
            try:
                self.conn.execute("ROLLBACK")
            except psycopg.Error:
                self.conn.close()
        give_back(self.url, self.reading, self.conn)
        if self._lexicon_conn is not None:
            give_back(self.url, False, self._lexicon_conn)
            self._lexicon_conn = None

    def _one(self, sql: str, params: Sequence[object] | dict[str, object] | None = None) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        if row is None:
            raise StoreError(f"index {describe(self.url)}: no row from {sql.split()[0]} query")
        return row[0]

    def _schema_version(self) -> int | None:
        """meta.schema_version, None for a database without our tables; a database holding
        other tables but no index is refused (sync's first step would meet them)."""
        if self._one("SELECT to_regclass('meta') IS NOT NULL"):
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None:
                return int(row[0])
        tables = [
            str(r[0])
            for r in self.conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename LIMIT 4"
            )
        ]
        if tables:
            raise StoreError(
                f"index {describe(self.url)}: not a notes-search index (its schema holds other tables: "
                f"{', '.join(tables)}); use another database or change `db:` in the config"
            )
        return None

    def _migrate(self, version: int | None) -> None:
        if version == PG_SCHEMA_VERSION:
            return
        if version is not None and version > PG_SCHEMA_VERSION:
            raise StoreError(f"index {describe(self.url)} was written by a newer notes-search (schema {version})")
        with self.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            # another worker may have migrated while this one waited for the lock
            current = 0
            if self._one("SELECT to_regclass('meta') IS NOT NULL"):
                row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                current = int(row[0]) if row else 0
            for number, step in enumerate(PG_MIGRATIONS[current:], current):
                self.conn.execute(step.sql.encode())
                if step.data is not None:
                    step.data(self)
                self._set_meta({"schema_version": str(number + 1)})
                if current:
                    log.info("index %s: migrated to schema %d (%s)", describe(self.url), number + 1, step.name)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN ... COMMIT; any exception rolls back. Not re-entrant on purpose."""
        if self.conn.info.transaction_status != TransactionStatus.IDLE:
            raise RuntimeError("transactions do not nest")
        self._writing()
        try:
            self.conn.execute("BEGIN")
            self._vectors_changed = False
            try:
                yield
                if self._vectors_changed:
                    # random, not a counter: a rebuilt index must not reach a value an old copy has
                    self.conn.execute(
                        "INSERT INTO meta(key, value) VALUES ('vectors_generation', md5(random()::text))"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                    )
                self.conn.execute("COMMIT")
            except BaseException:
                if not self.conn.closed and self.conn.info.transaction_status != TransactionStatus.IDLE:
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self._vectors_changed = False
        except STORAGE_ERRORS as exc:
            raise storage_error(self.url, exc) from None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read-only REPEATABLE READ transaction: every query inside sees one committed state."""
        try:
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        except STORAGE_ERRORS as exc:
            raise storage_error(self.url, exc) from None
        self._in_snapshot = True
        try:
            yield
        finally:
            self._in_snapshot = False
            try:
                if not self.conn.closed:
                    self.conn.execute("COMMIT")
            except STORAGE_ERRORS as exc:
                raise storage_error(self.url, exc) from None

    def sibling(self) -> Callable[[], AbstractContextManager[PostgresStore]] | None:
        """Inside `snapshot()`: an opener of readers on other pooled connections that import
        this transaction's snapshot (`pg_export_snapshot()` here, `SET TRANSACTION SNAPSHOT`
        there), so their reads run beside this connection's and see exactly its state. The
        export lasts as long as this transaction: every sibling must close before it ends."""
        if not self._in_snapshot:
            return None
        token = str(self._one("SELECT pg_export_snapshot()"))
        return functools.partial(self._sibling_reader, token)

    @contextmanager
    def _sibling_reader(self, token: str) -> Iterator[PostgresStore]:
        conn = connection.live_connection(self.url, True)
        try:
            # one round trip: the import must be the transaction's first statement
            conn.execute(
                pg_sql.SQL("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}").format(
                    pg_sql.Literal(token)
                )
            )
        except psycopg.Error as exc:
            conn.close()
            raise storage_error(self.url, exc) from None
        reader = PostgresStore(conn, self.url, True)
        reader._in_snapshot = True
        reader._has_vectors = self._has_vectors
        reader._hnsw_ready = self._hnsw_ready
        if self._vector_oid is not None:  # the same database: no lookup
            reader._use_vector_oid(self._vector_oid)
        try:
            yield reader
        finally:
            reader._in_snapshot = False
            try:  # every read has answered: a failed COMMIT of a read-only transaction changes nothing
                conn.execute("COMMIT")
            except psycopg.Error:
                conn.close()
            give_back(self.url, True, conn)

    def _scope_condition(self, scope: SearchScope, alias: str) -> tuple[str, dict[str, object]]:
        return scope_condition(scope, alias)

    def _after_sync(self) -> None:
        self._merge_pending_lexical_entries()

    def _merge_pending_lexical_entries(self) -> None:
        """Move the lexical indexes' pending entries into their main structure (see
        LEXICAL_GIN_INDEXES); a user who does not own the indexes, or a merge that cannot get
        its lock or finish within the role's timeouts (a REINDEX or a migration elsewhere), leaves
        it to autovacuum: the source's state is committed already and the sync succeeded."""
        merges = ", ".join(f"gin_clean_pending_list('{name}'::regclass)" for name in LEXICAL_GIN_INDEXES)
        try:
            self.conn.execute(f"SELECT {merges}")
        except (pg_errors.InsufficientPrivilege, pg_errors.LockNotAvailable, pg_errors.QueryCanceled) as exc:
            log.debug("pending lexical index entries left to autovacuum: %s", first_lines(exc, self.url))

    def _delete_source_rows(self, source_id: str) -> None:
        # the lexical rows first, in one statement: the cascade would delete them one by one
        self.conn.execute("DELETE FROM chunks_fts WHERE source_id = %s", (source_id,))
        if (
            self.has_vector_table()
            and self.conn.execute(
                "DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM chunks WHERE source_id = %s)", (source_id,)
            ).rowcount
        ):
            self._vectors_changed = True
        self.conn.execute("DELETE FROM files WHERE source_id = %s", (source_id,))
        self.conn.execute("DELETE FROM sources WHERE source_id = %s", (source_id,))

    def delete_file(self, source_id: str, path: str) -> None:
        """Remove a file with its chunks, their lexical rows and vectors. Inside a transaction."""
        self._delete_files_read(self._delete_files_sent(source_id, [path]))

    def _delete_files_sent(self, source_id: str, paths: Sequence[str]) -> psycopg.Cursor[Any]:
        """Delete files in one statement: the lexical rows and vectors go by id first (the cascade
        from `files` would delete them one statement per chunk); `_delete_files_read` takes the
        answer (apart, so a pipeline can send more meanwhile)."""
        vectors = (
            ", v AS (DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM gone) RETURNING 1)"
            if self.has_vector_table()
            else ", v AS (SELECT 1 WHERE FALSE)"
        )
        return self.conn.execute(
            f"""WITH gone AS (SELECT id FROM chunks WHERE source_id = %(source)s AND path = ANY(%(paths)s)),
                     fts AS (DELETE FROM chunks_fts WHERE id IN (SELECT id FROM gone) RETURNING 1){vectors},
                     f AS (DELETE FROM files WHERE source_id = %(source)s AND path = ANY(%(paths)s) RETURNING 1)
                SELECT (SELECT count(*) FROM v), (SELECT count(*) FROM fts), (SELECT count(*) FROM f)""",
            {"source": source_id, "paths": [stored_text(path) for path in paths]},
        )

    def _delete_files_read(self, sent: psycopg.Cursor[Any]) -> None:
        row = sent.fetchone()
        if row is not None and row[0]:
            self._vectors_changed = True

    def write_files(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        language_of: Callable[[str], str] | None = None,
        vectors: Mapping[str, bytes] | None = None,
    ) -> int:
        """`write_file` for many files in three round trips whatever their number: the reads and
        the delete, one statement writing every file, chunk and lexical row, one COPY of the
        vectors (reused, or given: see the protocol). A path given twice is written in order
        (its later version wins)."""
        if self.conn.info.transaction_status == TransactionStatus.IDLE:
            with self.transaction():  # the lexemes must commit before the rows can (`_add_lexemes`)
                return self.write_files(source_id, files, language_of, vectors)
        pending = 0
        for run in _distinct_path_runs(files):
            pending += self._write_run(source_id, run, language_of, vectors)
        return pending

    def _write_run(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        language_of: Callable[[str], str] | None,
        vectors: Mapping[str, bytes] | None,
    ) -> int:
        if not files:
            return 0
        hashes = [content_hash(chunk.embed_text) for _, doc in files for chunk in doc.chunks]
        pieces = _pieces(files)
        self.has_vector_table()  # known before the pipeline: the statements below depend on it
        # one pipeline: the reads and the delete (after them: a reusable vector may be one of these
        # files' old chunks), then one statement per piece, each sent as soon as its tsvectors
        # are folded, so the server writes one piece while the next is folded here
        with self.conn.pipeline():
            self.conn.execute(ASYNC_COMMIT)
            vectors_read = self._vectors_by_hash_sent(set(hashes)) if vectors is None else None
            languages_read = self._languages_by_hash_sent(set(hashes)) if language_of is not None else None
            deleted = self._delete_files_sent(source_id, [file.path for file, _ in files])
            lexemes: set[str] = set()
            first = _folded(pieces[0], lexemes)
            carried = self._vectors_by_hash_read(vectors_read) if vectors is None else vectors
            known_languages = self._languages_by_hash_read(languages_read)
            self._delete_files_read(deleted)
            now = utc_now()
            written = []
            done = 0
            for number, piece in enumerate(pieces):
                documents = first if number == 0 else _folded(piece, lexemes)
                chunk_count = sum(len(doc.chunks) for _, doc in piece)
                piece_hashes = hashes[done : done + chunk_count]
                done += chunk_count
                written.append(
                    self._write_piece_sent(
                        source_id, piece, piece_hashes, documents, language_of, known_languages, carried, now
                    )
                )
                _send_whole(self.conn)
        rows = [row for sent in written for row in sent.fetchall()]
        self._add_lexemes(lexemes)
        attached = [(int(chunk_id), carried[digest]) for chunk_id, digest in rows if digest in carried]
        if attached:
            self._insert_carried(attached)
        return len(hashes) - len(attached)

    def _add_lexemes(self, lexemes: set[str]) -> None:
        """Commit `lexemes` to the lexicon on a connection of its own, before the transaction
        writing rows that hold them can commit: a reader's snapshot that holds a row then holds
        its lexemes. Inside that transaction two first syncs would wait for each other's
        uncommitted new words (or deadlock). One statement in code point order (the
        key's byte order) waits on another's keys in one order only."""
        if not lexemes:
            return
        conn = self._lexicon_conn
        if conn is None or conn.closed:
            conn = self._lexicon_conn = connection.live_connection(self.url, False)
        conn.execute("INSERT INTO lexemes(lexeme) SELECT unnest(%b::text[]) ON CONFLICT DO NOTHING", (sorted(lexemes),))

    def _write_piece_sent(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        hashes: Sequence[str],
        documents: Sequence[tuple[Tsvector, int, Tsvector]],
        language_of: Callable[[str], str] | None,
        known_languages: dict[str, str],
        carried: Mapping[str, bytes],
        now: str,
    ) -> psycopg.Cursor[Any]:
        """Send the statement writing these files, their chunks and lexical rows; the cursor
        answers (chunk id, content hash) per chunk once the pipeline has run it."""
        chunks = [(file.path, chunk) for file, doc in files for chunk in doc.chunks]
        languages = []
        for (_, chunk), digest in zip(chunks, hashes, strict=True):
            chunk_language = known_languages.get(digest) or (language_of(chunk.text) if language_of else "unknown")
            known_languages[digest] = chunk_language
            languages.append(chunk_language)
        scopes = {file.path: scope_tsvector(stored_text(file.path)) for file, _ in files}
        # PostgreSQL text holds no NUL (front matter can spell one): keys as stored, distinct again
        tag_rows = [(key, file.path) for file, doc in files for key in stored_tag_keys(doc.tags)]
        # the files, their chunks and lexical rows in one statement (foreign keys are checked at
        # its end, when all exist); chunk ids ascend in the order given. The arrays go binary
        # (%b): a third of the text format's cost to dump, and the tsvectors need no parsing
        return self.conn.execute(
            """WITH f AS (
                   INSERT INTO files(source_id, path, title, tags, headings, collection, sha256, size, mtime,
                                     updated_at, indexed_at, front_matter_problem)
                   SELECT %(source)s, path, title, tags, headings, collection, sha256, size, mtime, updated_at,
                          %(now)s, problem
                   FROM unnest(%(path)b::text[], %(title)b::text[], %(tags)b::text[], %(headings)b::text[],
                               %(collection)b::text[], %(sha256)b::text[], %(size)b::bigint[],
                               %(mtime)b::float8[], %(updated_at)b::float8[], %(problem)b::text[])
                       AS f(path, title, tags, headings, collection, sha256, size, mtime, updated_at, problem)),
               tags AS (
                   INSERT INTO file_tags(tag, source_id, path)
                   SELECT tag, %(source)s, path FROM unnest(%(tag_key)b::text[], %(tag_path)b::text[]) AS t(tag, path)),
               u AS (
                   SELECT * FROM unnest(%(chunk_path)b::text[], %(idx)b::int[], %(breadcrumb)b::text[],
                                        %(text)b::text[], %(start)b::int[], %(end)b::int[], %(hash)b::text[],
                                        %(embedded)b::text[], %(language)b::text[], %(document)b::tsvector[],
                                        %(length)b::int[], %(impacts)b::tsvector[], %(scope)b::tsvector[]) WITH ORDINALITY
                       AS u(path, idx, breadcrumb, text, start_line, end_line, hash, embedded_at, language, document,
                            length, impacts, scope, ord)),
               c AS (
                   INSERT INTO chunks(source_id, path, chunk_idx, breadcrumb, text, start_line, end_line,
                                      content_hash, embedded_at, language)
                   SELECT %(source)s, path, idx, breadcrumb, text, start_line, end_line, hash, embedded_at,
                          language FROM u ORDER BY ord
                   RETURNING id, path, chunk_idx, content_hash),
               fts AS (
                   INSERT INTO chunks_fts(id, source_id, document, length, impacts, scope, words_listed)
                   SELECT c.id, %(source)s, u.document, u.length, u.impacts, u.scope, TRUE
                   FROM c JOIN u ON u.path COLLATE "C" = c.path AND u.idx = c.chunk_idx)
               SELECT id, content_hash FROM c""",
            {
                "source": source_id,
                "now": now,
                "path": [stored_text(file.path) for file, _ in files],
                "title": [stored_opt_text(doc.title) for _, doc in files],
                "tags": [json.dumps(doc.tags, ensure_ascii=False) for _, doc in files],
                "headings": [json.dumps(doc.headings, ensure_ascii=False) for _, doc in files],
                "collection": [stored_opt_text(file.collection) for file, _ in files],
                "sha256": [file.sha256 for file, _ in files],
                "size": [int(file.size) for file, _ in files],
                "mtime": [None if file.mtime is None else float(file.mtime) for file, _ in files],
                "updated_at": [float(file.updated_at) for file, _ in files],
                "problem": [stored_opt_text(doc.front_matter_problem) for _, doc in files],
                "tag_key": [key for key, _ in tag_rows],
                "tag_path": [stored_text(path) for _, path in tag_rows],
                "chunk_path": [stored_text(path) for path, _ in chunks],
                "idx": [chunk.idx for _, chunk in chunks],
                "breadcrumb": [stored_text(chunk.breadcrumb) for _, chunk in chunks],
                "text": [stored_text(chunk.text) for _, chunk in chunks],
                "start": [chunk.start_line for _, chunk in chunks],
                "end": [chunk.end_line for _, chunk in chunks],
                "hash": hashes,
                "embedded": [now if digest in carried else None for digest in hashes],
                "language": languages,
                "document": [d for d, _, _ in documents],
                "length": [n for _, n, _ in documents],
                "impacts": [i for _, _, i in documents],
                "scope": [scopes[path] for path, _ in chunks],
            },
        )

    def _vectors_by_hash_sent(self, hashes: set[str]) -> psycopg.Cursor[Any] | None:
        """Ask for the vectors (every window, in order) of the oldest embedded chunk with each
        content hash; `_vectors_by_hash_read` takes the answer (apart, so a pipeline can send
        more meanwhile)."""
        if not hashes or not self.has_vector_table():
            return None
        return self.conn.execute(
            """SELECT h.content_hash, vector_send(v.embedding)
               FROM (SELECT DISTINCT ON (c.content_hash) c.content_hash, c.id
                     FROM chunks c JOIN chunk_vectors f ON f.id = c.id AND f.window_idx = 0
                     WHERE c.content_hash = ANY(%s) AND c.embedded_at IS NOT NULL
                     ORDER BY c.content_hash, c.id) h
               JOIN chunk_vectors v ON v.id = h.id ORDER BY h.content_hash, v.window_idx""",
            (sorted(hashes),),
            binary=True,
        )

    @staticmethod
    def _vectors_by_hash_read(sent: psycopg.Cursor[Any] | None) -> dict[str, bytes]:
        """Each hash's windows' float32 vectors, concatenated in order."""
        if sent is None:
            return {}
        carried: dict[str, bytes] = {}
        for digest, vector in sent.fetchall():
            carried[str(digest)] = carried.get(str(digest), b"") + vector_bytes(bytes(vector))
        return carried

    def _languages_by_hash_sent(self, hashes: set[str]) -> psycopg.Cursor[Any] | None:
        """Ask for the languages already detected for these texts ('unknown' is not reused)."""
        if not hashes:
            return None
        return self.conn.execute(
            """SELECT content_hash, MIN(language) FROM chunks
               WHERE content_hash = ANY(%s) AND language <> 'unknown' GROUP BY content_hash""",
            (sorted(hashes),),
        )

    @staticmethod
    def _languages_by_hash_read(sent: psycopg.Cursor[Any] | None) -> dict[str, str]:
        if sent is None:
            return {}
        return {str(digest): str(language) for digest, language in sent.fetchall()}

    def check_integrity(self, *, full: bool = False) -> None:
        """Nothing to do from here: the server keeps its own pages whole (WAL, checksums)."""

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        wanted = [int(i) for i in ids]
        if not wanted:
            return {}
        rows = self.conn.execute(
            """SELECT c.id, c.source_id, c.path, c.chunk_idx, c.breadcrumb, c.text, c.start_line, c.end_line,
                      f.updated_at, s.indexed_rev, s.kind
               FROM chunks c JOIN files f ON f.source_id = c.source_id AND f.path = c.path
               JOIN sources s ON s.source_id = c.source_id
               WHERE c.id = ANY(%s)""",
            (wanted,),
        )
        return {int(r[0]): ChunkRow(int(r[0]), *r[1:]) for r in rows}

    def store_backfilled_languages(self, languages: Sequence[tuple[int, str]], upto_id: int, done_upto: int) -> None:
        with self.transaction():
            if languages:
                self.conn.execute(
                    """UPDATE chunks c SET language = u.language
                       FROM unnest(%s::bigint[], %s::text[]) AS u(id, language)
                       WHERE c.id = u.id AND c.language IS DISTINCT FROM u.language""",
                    ([chunk_id for chunk_id, _ in languages], [language for _, language in languages]),
                )
            if done_upto >= upto_id:
                self.conn.execute("DELETE FROM meta WHERE key = %s", (LANGUAGE_BACKFILL_KEY,))
            else:
                self._set_meta({LANGUAGE_BACKFILL_KEY: f"{upto_id}:{done_upto}"})

    def chunk_languages(self, ids: Iterable[int] | None = None) -> dict[int, str]:
        if ids is None:
            rows = self.conn.execute("SELECT id, language FROM chunks")
        else:
            rows = self.conn.execute("SELECT id, language FROM chunks WHERE id = ANY(%s)", ([int(i) for i in ids],))
        return {int(chunk_id): str(language) for chunk_id, language in rows}

    def fts_search(self, match: KeywordQuery, limit: int, scope: SearchScope) -> list[RankedChunk]:
        """Chunks matching `match`, best bm25 (lowest) first (see
        `keyword.KeywordSearch.search`)."""
        return self.keyword.search(match, limit, scope)

    def server_memory(self) -> ServerMemory:
        row = self.conn.execute(
            """SELECT (SELECT COALESCE(sum(pg_total_relation_size(to_regclass(name))), 0)
                       FROM unnest(%s::text[]) AS name),
                      (SELECT setting::bigint * current_setting('block_size')::bigint
                       FROM pg_settings WHERE name = 'shared_buffers')""",
            (list(SEARCHED_TABLES),),
        ).fetchone()
        assert row is not None  # a query of constants always answers
        return ServerMemory(int(row[0]), int(row[1]))


# chunks per statement of a batch: the server writes one piece while the next is folded
PIECE_CHUNKS = 256


def _send_whole(conn: psycopg.Connection[Any]) -> None:
    """Send the rest of the pipeline's queued statements now. psycopg writes a statement only as
    far as the socket takes it and leaves the rest in libpq's buffer until the next statement is
    queued: a piece's statement (hundreds of kB) would wait there, unexecuted, while the next
    piece is folded, and folding and writing would take turns instead of overlapping. Results
    that arrive meanwhile are read into libpq's buffer (the server must never block on them)."""
    pgconn = conn.pgconn
    if pgconn.flush() == 0:
        return
    with selectors.DefaultSelector() as waiting:
        waiting.register(pgconn.socket, selectors.EVENT_READ | selectors.EVENT_WRITE)
        while True:
            for _, events in waiting.select():
                if events & selectors.EVENT_READ:
                    pgconn.consume_input()
            if pgconn.flush() == 0:
                return


def _pieces(files: Sequence[tuple[FileVersion, ParsedDocument]]) -> list[list[tuple[FileVersion, ParsedDocument]]]:
    """Consecutive runs of whole files of about PIECE_CHUNKS chunks each (at least one file)."""
    pieces: list[list[tuple[FileVersion, ParsedDocument]]] = [[]]
    size = 0
    for item in files:
        if size >= PIECE_CHUNKS:
            pieces.append([])
            size = 0
        pieces[-1].append(item)
        size += len(item[1].chunks)
    return pieces


def _folded(
    files: Sequence[tuple[FileVersion, ParsedDocument]], lexemes: set[str]
) -> list[tuple[Tsvector, int, Tsvector]]:
    """Each chunk's lexical row; their lexemes are added to `lexemes`."""
    rows = []
    for _, doc in files:
        for chunk in doc.chunks:
            document, length, impacts, words = lexical_parts(chunk.breadcrumb, chunk.text)
            lexemes.update(words)
            rows.append((document, length, impacts))
    return rows


def _distinct_path_runs(
    files: Sequence[tuple[FileVersion, ParsedDocument]],
) -> Iterator[Sequence[tuple[FileVersion, ParsedDocument]]]:
    """Consecutive runs of `files` in which no path repeats (one statement writes a run)."""
    start = 0
    seen: set[str] = set()
    for n, (file, _) in enumerate(files):
        if file.path in seen:
            yield files[start:n]
            start, seen = n, set()
        seen.add(file.path)
    if start < len(files):
        yield files[start:]
