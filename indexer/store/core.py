"""What every backend of the index does alike, written once: the bookkeeping of meta, sources,
files, collections, languages and counts, whose SQL differs between SQLite and PostgreSQL only
in how parameters are spelled and how text is stored.

`StoreCore` holds those methods; each backend subclasses it with its `Dialect` and keeps only
what differs (opening, transactions, writing chunks, vectors, keyword search). Shared statements
are written in SQLite's parameter style (`?` and `:name`) and handed to the driver through
`Dialect.sql`, so the SQL text is built apart from running it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from indexer.model import FileVersion, KnownFile, ParsedDocument
from indexer.store.rows import (
    FILE_ROW_COLUMNS,
    FRONT_MATTER_PROBLEMS_SQL,
    ChunkText,
    CollectionRow,
    FileProblem,
    FileRow,
    LanguageBackfill,
    NearestWindow,
    PendingChunk,
    ScopeCounts,
    SearchScope,
    ServerMemory,
    SourceState,
    SourceStats,
    decode_window_lines,
    encode_window_lines,
    file_row,
    nearest_window_of,
)
from indexer.store.schema import LANGUAGE_BACKFILL_KEY


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def content_hash(embed_text: str) -> str:
    """The key a chunk's vector is reused by: the SHA-256 of the text that was embedded."""
    return hashlib.sha256(embed_text.encode("utf-8")).hexdigest()


def as_is(value: str) -> str:
    return value


_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=256)
def _pyformat(statement: str) -> str:
    """`?` and `:name` parameters as psycopg's `%s` and `%(name)s` (`::` casts are left alone)."""
    return _NAMED.sub(r"%(\1)s", statement.replace("?", "%s"))


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one backend spells what the shared statements need."""

    name: str
    pyformat: bool  # parameters as %s / %(name)s (psycopg), else as written (? / :name)
    embed_text_sql: str  # the text a chunk was embedded from, over `chunks c`
    vector_table: str  # the table holding one row per stored vector
    text: Callable[[str], str] = as_is  # a string as the backend stores it

    def sql(self, statement: str) -> str:
        return _pyformat(statement) if self.pyformat else statement

    def opt_text(self, value: str | None) -> str | None:
        return None if value is None else self.text(value)


def no_nul(value: str) -> str:
    """PostgreSQL text holds no NUL character (SQLite's does): it is stored as U+FFFD."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


SQLITE = Dialect("sqlite", False, "c.breadcrumb || char(10) || char(10) || c.text", "vec_chunks")
POSTGRES = Dialect("postgres", True, "c.breadcrumb || chr(10) || chr(10) || c.text", "chunk_vectors", no_nul)


def place_conditions(scope: SearchScope, alias: str, dialect: Dialect, params: dict[str, object]) -> list[str]:
    """The conditions of the scope's folder (or file) and collection over `alias` (`chunks` or
    `files`: both have source_id and path), their bindings added to `params`."""
    clauses = []
    if scope.path:
        folder = scope.path.strip("/")
        params.update(scope_path=folder, scope_lo=folder + "/", scope_hi=folder + "0")
        # '0' sorts right after '/' (in SQLite and in PostgreSQL's C collation): one index range
        # [folder, folder + '0') holds the file itself and everything below it (plus siblings
        # like "folder.md", which the second test drops)
        clauses.append(
            dialect.sql(
                f"{alias}.path >= :scope_path AND {alias}.path < :scope_hi"
                f" AND ({alias}.path = :scope_path OR {alias}.path >= :scope_lo)"
            )
        )
    if scope.collection is not None:
        params["scope_collection"] = dialect.text(scope.collection)  # as `files` holds it
        clauses.append(
            dialect.sql(
                f"EXISTS (SELECT 1 FROM files f WHERE f.source_id = {alias}.source_id"
                f" AND f.path = {alias}.path AND f.collection = :scope_collection)"
            )
        )
    return clauses


def time_conditions(scope: SearchScope, dialect: Dialect, params: dict[str, object]) -> list[str]:
    """The scope's time window over `files u` (`updated_since <= updated_at < updated_before`),
    its bindings added to `params`; none without one."""
    times = []
    if scope.updated_since is not None:
        params["scope_since"] = float(scope.updated_since)
        times.append(dialect.sql("u.updated_at >= :scope_since"))
    if scope.updated_before is not None:
        params["scope_before"] = float(scope.updated_before)
        times.append(dialect.sql("u.updated_at < :scope_before"))
    return times


class StoreCore:
    """The methods both stores share. A backend sets `dialect` and provides `conn` (whose
    `execute(sql, params)` returns rows), `transaction()`, `_one`, `has_vector_table`,
    `_scope_condition` and `_delete_source_rows`."""

    dialect: Dialect
    conn: Any
    _first_write: Callable[[], None] | None = None

    def transaction(self) -> Any:
        raise NotImplementedError

    def on_first_write(self, mark: Callable[[], None]) -> None:
        self._first_write = mark

    def _writing(self) -> None:
        """A backend's `transaction()` calls this before it begins: the first one runs the mark."""
        mark, self._first_write = self._first_write, None
        if mark is not None:
            mark()

    def has_vector_table(self) -> bool:
        raise NotImplementedError

    def _one(self, sql: str, params: Any = None) -> Any:
        raise NotImplementedError

    def _scope_condition(self, scope: SearchScope, alias: str) -> tuple[str, dict[str, object]]:
        raise NotImplementedError

    def _delete_source_rows(self, source_id: str) -> None:
        raise NotImplementedError

    # ---- optional capabilities: what a backend without them answers --------------------------

    def sibling(self) -> Callable[[], AbstractContextManager[Any]] | None:
        """None: no second connection can share this reader's snapshot (SQLite's WAL read
        snapshot belongs to its connection, which runs one statement at a time: a search's
        halves share this reader, one after the other)."""
        return None

    def server_memory(self) -> ServerMemory | None:
        """None: this process reads the index itself (the operating system's page cache is its
        buffer pool)."""
        return None

    def bulk_load(self, *, whole_space: bool = False) -> AbstractContextManager[None]:
        """Nothing to hold back: every vector is indexed as it is stored."""
        return nullcontext()

    def _run(self, sql: str, params: Sequence[object] | dict[str, object] = ()) -> Any:
        """A shared statement (SQLite's parameter style) run in the backend's."""
        return self.conn.execute(self.dialect.sql(sql), params)

    def _count(self, sql: str, params: Sequence[object] | dict[str, object] = ()) -> int:
        return int(self._one(self.dialect.sql(sql), params))

    # ---- meta ------------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        return {str(key): str(value) for key, value in self._run("SELECT key, value FROM meta")}

    def _set_meta(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            self._run(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def write_meta(self, values: dict[str, str]) -> None:
        """`set_meta` for a caller already inside `transaction()`."""
        self._set_meta(values)

    def set_meta(self, values: dict[str, str]) -> None:
        with self.transaction():
            self._set_meta(values)

    def delete_meta(self, keys: Iterable[str]) -> None:
        with self.transaction():
            for key in keys:
                self._run("DELETE FROM meta WHERE key = ?", (key,))

    def vectors_generation(self) -> str:
        """Changes whenever a committed transaction added or removed vectors: a copy of them
        (search.resident) is current while this value is unchanged."""
        row = self._run("SELECT value FROM meta WHERE key = 'vectors_generation'").fetchone()
        return str(row[0]) if row else ""

    # ---- sources ---------------------------------------------------------------------------

    def ensure_source(self, source_id: str, kind: str) -> None:
        row = self._run("SELECT kind FROM sources WHERE source_id = ?", (source_id,)).fetchone()
        if row is None:
            with self.transaction():
                # another sync worker may have registered it meanwhile
                self._run(
                    "INSERT INTO sources(source_id, kind) VALUES (?, ?) ON CONFLICT DO NOTHING", (source_id, kind)
                )
        elif row[0] != kind:
            # same id, other kind: the old rows describe something else entirely
            with self.transaction():
                self._delete_source_rows(source_id)
                self._run("INSERT INTO sources(source_id, kind) VALUES (?, ?)", (source_id, kind))

    def source_ids(self) -> list[str]:
        return [r[0] for r in self._run("SELECT source_id FROM sources ORDER BY source_id")]

    def source_state(self, source_id: str) -> SourceState:
        row = self._run("SELECT indexed_rev, last_sync_at FROM sources WHERE source_id = ?", (source_id,)).fetchone()
        return SourceState(row[0], row[1]) if row else SourceState(None, None)

    def mark_synced(self, source_id: str, *, indexed_rev: str | None = None, error: str | None = None) -> None:
        with self.transaction():
            if indexed_rev is None:
                self._run(
                    "UPDATE sources SET last_sync_at = ?, last_error = ? WHERE source_id = ?",
                    (utc_now(), error, source_id),
                )
            else:
                self._run(
                    "UPDATE sources SET indexed_rev = ?, last_sync_at = ?, last_error = ? WHERE source_id = ?",
                    (indexed_rev, utc_now(), error, source_id),
                )
        self._after_sync()

    def _after_sync(self) -> None:
        """What a backend tidies once a source's sync is committed (nothing by default)."""

    def errored_sources(self) -> dict[str, str]:
        return dict(self._run("SELECT source_id, last_error FROM sources WHERE last_error IS NOT NULL"))

    def set_source_error(self, source_id: str, error: str | None) -> None:
        """Record (or clear) a source's last error; writes only when it differs."""
        with self.transaction():
            self._run(
                "UPDATE sources SET last_error = ? WHERE source_id = ? AND last_error IS DISTINCT FROM ?",
                (error, source_id, error),
            )

    def remove_source(self, source_id: str) -> None:
        with self.transaction():
            self._delete_source_rows(source_id)

    # ---- files -----------------------------------------------------------------------------

    def known_files(self, source_id: str, under: str | None = None) -> dict[str, KnownFile]:
        """What the index holds of a source, or only of one file or folder (`under`)."""
        sql = self.dialect.sql("SELECT path, sha256, size, mtime FROM files WHERE source_id = :source_id")
        params: dict[str, object] = {"source_id": source_id}
        if under:
            where, scope_params = self._scope_condition(SearchScope(path=under), "files")
            sql += f" AND {where}"
            params.update(scope_params)
        rows = self.conn.execute(sql, params)
        return {path: KnownFile(sha256=sha, size=int(size), mtime=mtime) for path, sha, size, mtime in rows}

    def write_file(
        self, source_id: str, file: FileVersion, doc: ParsedDocument, language_of: Callable[[str], str] | None = None
    ) -> int:
        """Replace a file's chunks; reuse stored vectors for unchanged text. Returns chunks left pending.

        Call inside `transaction()`. Vectors are looked up by content hash across the whole index
        before anything is deleted, so for a rename callers write the new path first and delete
        the old one after: moved text is never embedded again. `language_of(chunk text)` names a
        chunk's language; a language already detected for the same text is reused instead
        (without it every chunk is 'unknown').
        """
        return self.write_files(source_id, [(file, doc)], language_of)

    def write_files(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        language_of: Callable[[str], str] | None = None,
        vectors: Mapping[str, bytes] | None = None,
    ) -> int:
        raise NotImplementedError

    def touch_file(self, source_id: str, path: str, size: int, mtime: float) -> None:
        self._run(
            "UPDATE files SET size = ?, mtime = ? WHERE source_id = ? AND path = ?", (size, mtime, source_id, path)
        )

    def file_rows(self, source_id: str | None = None) -> list[FileRow]:
        """The indexed files (of one source), by source and path."""
        sql = f"SELECT {FILE_ROW_COLUMNS} FROM files"
        params: tuple[object, ...] = ()
        if source_id is not None:
            sql += " WHERE source_id = ?"
            params = (source_id,)
        sql += " ORDER BY source_id, path"
        return [file_row(values) for values in self._run(sql, params)]

    def front_matter_problems(self, source_id: str) -> list[FileProblem]:
        """The files of a source whose front matter could not be taken as written, by path."""
        return [FileProblem(*row) for row in self._run(FRONT_MATTER_PROBLEMS_SQL, (source_id,))]

    def sources_with_file(self, path: str) -> list[str]:
        """Ids of the sources whose index holds `path` (a bare PATH names every one of them)."""
        return [r[0] for r in self._run("SELECT source_id FROM files WHERE path = ? ORDER BY source_id", (path,))]

    def sources_with_path(self, path: str) -> list[str]:
        """Ids of the sources whose index holds `path` as a file or as a folder with files below it."""
        folder = path.strip("/")
        rows = self._run(
            """SELECT DISTINCT source_id FROM files
               WHERE path = :path OR (path >= :lo AND path < :hi) ORDER BY source_id""",
            {"path": folder, "lo": folder + "/", "hi": folder + "0"},  # '0' sorts right after '/'
        )
        return [r[0] for r in rows]

    # ---- collections -----------------------------------------------------------------------

    def replace_collections(self, source_id: str, collections: Iterable[CollectionRow]) -> None:
        """Store a source's collections (their `source_id` and `files` are not read: the rows
        belong to `source_id`, and files are counted when read). The first of two rows with one
        name wins. Call inside `transaction()`."""
        text = self.dialect.text
        self._run("DELETE FROM collections WHERE source_id = ?", (source_id,))
        for row in collections:
            self._run(
                """INSERT INTO collections(source_id, name, folder, description, tags) VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT DO NOTHING""",
                (
                    source_id,
                    text(row.name),
                    text(row.folder),
                    text(row.description),
                    json.dumps(list(row.tags), ensure_ascii=False),
                ),
            )

    def collection_rows(self, source_id: str) -> list[CollectionRow]:
        """A source's collections as declared (files=0), by name, folder, description and tags:
        what the sync compares against the `_meta.yaml` files it finds."""
        rows = self._run("SELECT name, folder, description, tags FROM collections WHERE source_id = ?", (source_id,))
        found = sorted((name, folder, desc, tuple(json.loads(tags))) for name, folder, desc, tags in rows)
        return [CollectionRow(source_id, name, folder, desc, tags) for name, folder, desc, tags in found]

    def set_file_collection(self, source_id: str, path: str, collection: str | None) -> None:
        collection = self.dialect.opt_text(collection)
        self._run(
            "UPDATE files SET collection = ? WHERE source_id = ? AND path = ? AND collection IS DISTINCT FROM ?",
            (collection, source_id, self.dialect.text(path), collection),
        )

    def collections(self) -> list[CollectionRow]:
        """Every collection of every source with its indexed file count, by name, then source."""
        rows = self._run(
            """SELECT k.source_id, k.name, k.folder, k.description, k.tags,
                      (SELECT COUNT(*) FROM files f WHERE f.source_id = k.source_id AND f.collection = k.name)
               FROM collections k ORDER BY k.name, k.source_id"""
        )
        return [
            CollectionRow(source_id, name, folder, description, tuple(json.loads(tags)), int(files))
            for source_id, name, folder, description, tags, files in rows
        ]

    # ---- chunks waiting for a vector -------------------------------------------------------

    def pending_chunks(
        self, limit: int, after_id: int = 0, *, min_chars: int = 0, max_chars: int | None = None
    ) -> list[PendingChunk]:
        """Chunks waiting for a vector after `after_id`, oldest first, whose text is `min_chars`
        to `max_chars` characters long."""
        size = " AND length(c.text) >= ?" if min_chars else ""
        params: tuple[int, ...] = (after_id, min_chars) if min_chars else (after_id,)
        if max_chars is not None:
            size += " AND length(c.text) <= ?"
            params += (max_chars,)
        rows = self._run(
            f"""SELECT c.id, c.content_hash, {self.dialect.embed_text_sql} FROM chunks c
                WHERE c.embedded_at IS NULL AND c.id > ?{size} ORDER BY c.id LIMIT ?""",
            (*params, limit),
        )
        return [PendingChunk(int(chunk_id), digest, text) for chunk_id, digest, text in rows]

    def count_pending_all(self) -> int:
        """Chunks of the whole index waiting for a vector."""
        return self._count("SELECT COUNT(*) FROM chunks WHERE embedded_at IS NULL")

    def count_pending(self, scope: SearchScope) -> int:
        """Chunks inside `scope` waiting for a vector (a search says what it could not rank)."""
        where, params = self._scope_condition(scope, "c")
        return int(self._one(f"SELECT COUNT(*) FROM chunks c WHERE c.embedded_at IS NULL AND {where}", params))

    def store_window_lines(self, lines: Mapping[str, Sequence[int]]) -> None:
        """Where each window of a text longer than the model reads begins (lines of the chunk's
        text, one per window, the first 0), by the text's content hash (own transaction)."""
        rows = [(digest, encode_window_lines(starts)) for digest, starts in sorted(lines.items()) if len(starts) > 1]
        if not rows:
            return
        upsert = "ON CONFLICT (content_hash) DO UPDATE SET lines = excluded.lines"
        with self.transaction():
            if self.dialect.pyformat:  # one statement (a round trip per text would add up)
                hashes, encoded = zip(*rows, strict=True)
                self._run(
                    f"INSERT INTO window_lines(content_hash, lines) SELECT * FROM unnest(?::text[], ?::text[]) {upsert}",
                    (list(hashes), list(encoded)),
                )
            else:
                for row in rows:
                    self._run(f"INSERT INTO window_lines(content_hash, lines) VALUES (?, ?) {upsert}", row)

    def window_lines(self) -> dict[str, list[int]]:
        """Every stored text's window lines (`store_window_lines`), by content hash."""
        rows = self._run("SELECT content_hash, lines FROM window_lines")
        return {str(digest): decode_window_lines(str(lines)) for digest, lines in rows}

    def prune_window_lines(self) -> int:
        """Forget where the windows of texts no chunk holds any more begin; returns how many."""
        with self.transaction():
            gone = self._run(
                """DELETE FROM window_lines WHERE NOT EXISTS
                       (SELECT 1 FROM chunks c WHERE c.content_hash = window_lines.content_hash)
                   RETURNING 1"""
            ).fetchall()
        return len(gone)

    def _nearest_window_with_lines(self, distances: Sequence[Sequence[Any]]) -> dict[int, NearestWindow]:
        """`nearest_window_of` (chunk id, window index, distance) rows, with the stored lines of
        the chunks that have a window past the first."""
        long_ones = sorted({int(row[0]) for row in distances if row[1] > 0})
        return nearest_window_of(distances, self._window_lines_of(long_ones))

    def _window_lines_of(self, ids: Sequence[int]) -> dict[int, str]:
        """The stored window lines of these chunks' texts, by chunk id (those that have some)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._run(
            f"""SELECT c.id, w.lines FROM chunks c JOIN window_lines w ON w.content_hash = c.content_hash
                WHERE c.id IN ({marks})""",
            list(ids),
        )
        return {int(chunk_id): str(lines) for chunk_id, lines in rows}

    def vector_language_counts(self) -> dict[str, int]:
        """Chunks that have a vector, per chunk language ("unknown" when undetected)."""
        rows = self._run(
            "SELECT COALESCE(language, 'unknown'), COUNT(*) FROM chunks WHERE embedded_at IS NOT NULL GROUP BY 1"
        )
        return {str(lang): int(count) for lang, count in rows}

    # ---- languages ---------------------------------------------------------------------------

    def language_backfill(self) -> LanguageBackfill | None:
        """How far the detection of old chunks' languages got, or None when every chunk's
        language was detected when it was written."""
        row = self._run("SELECT value FROM meta WHERE key = ?", (LANGUAGE_BACKFILL_KEY,)).fetchone()
        if row is None:
            return None
        upto, _, after = str(row[0]).partition(":")
        return LanguageBackfill(int(upto), int(after or 0))

    def chunks_for_language_backfill(self, after_id: int, upto_id: int, limit: int) -> list[ChunkText]:
        """Chunks older than the language column, after `after_id`, by id."""
        rows = self._run(
            "SELECT id, text FROM chunks WHERE id > ? AND id <= ? ORDER BY id LIMIT ?", (after_id, upto_id, limit)
        )
        return [ChunkText(int(chunk_id), str(text)) for chunk_id, text in rows]

    def language_counts(self, scope: SearchScope | None = None) -> dict[str, dict[str, int]]:
        """Chunks per language for each source (inside `scope`, if given): {source: {language: n}},
        languages by count, largest first."""
        where, params = self._scope_condition(scope or SearchScope(), "c")
        rows = self.conn.execute(
            f"""SELECT c.source_id, c.language, COUNT(*) AS n FROM chunks c WHERE {where}
                GROUP BY c.source_id, c.language ORDER BY c.source_id, n DESC, c.language""",
            params,
        )
        out: dict[str, dict[str, int]] = {}
        for source_id, language, count in rows:
            out.setdefault(str(source_id), {})[str(language)] = int(count)
        return out

    # ---- status ------------------------------------------------------------------------------

    def source_stats(self) -> list[SourceStats]:
        """Every source with its counts, by id."""
        rows = self._run(
            """SELECT s.source_id, s.kind, s.indexed_rev, s.last_sync_at, s.last_error,
                      (SELECT COUNT(*) FROM files f WHERE f.source_id = s.source_id),
                      (SELECT COUNT(*) FROM chunks c WHERE c.source_id = s.source_id),
                      (SELECT COUNT(*) FROM chunks c WHERE c.source_id = s.source_id AND c.embedded_at IS NULL)
               FROM sources s ORDER BY s.source_id"""
        )
        return [SourceStats(r[0], r[1], r[2], r[3], r[4], int(r[5]), int(r[6]), int(r[7])) for r in rows]

    def counts(self) -> dict[str, int]:
        """Diagnostic row counts (files, chunks, chunks_fts, pending, vectors): what benchmarks
        report and idempotence tests compare. Keys, not a row type: a backend reports what it has."""
        vectors = f"SELECT COUNT(*) FROM {self.dialect.vector_table}"
        return {
            "files": self._count("SELECT COUNT(*) FROM files"),
            "chunks": self._count("SELECT COUNT(*) FROM chunks"),
            "chunks_fts": self._count("SELECT COUNT(*) FROM chunks_fts"),
            "pending": self._count("SELECT COUNT(*) FROM chunks WHERE embedded_at IS NULL"),
            "vectors": self._count(vectors) if self.has_vector_table() else 0,
        }

    def scope_stats(self, scope: SearchScope) -> dict[str, ScopeCounts]:
        """Files, chunks and chunks waiting for a vector inside `scope`, per source with any
        (status of a path), in source order of the files, then of the chunks."""
        where, params = self._scope_condition(scope, "x")
        files: dict[str, int] = {}
        for source_id, count in self.conn.execute(
            f"SELECT x.source_id, COUNT(*) FROM files x WHERE {where} GROUP BY x.source_id", params
        ):
            files[source_id] = int(count)
        chunks: dict[str, tuple[int, int]] = {}
        for source_id, count, pending in self.conn.execute(
            f"""SELECT x.source_id, COUNT(*), COUNT(*) FILTER (WHERE x.embedded_at IS NULL) FROM chunks x
                WHERE {where} GROUP BY x.source_id""",
            params,
        ):
            chunks[source_id] = (int(count), int(pending or 0))
        return {
            source_id: ScopeCounts(files.get(source_id, 0), *chunks.get(source_id, (0, 0)))
            for source_id in {**files, **chunks}
        }
