"""The SQLite backend of the index: every SQL statement the store runs (the schema and its
migrations are in `indexer.store.schema`, the vector tables' statements in
`indexer.store.sqlite_vectors`).

The tables: `files`/`chunks` (canonical), `chunks_fts` (FTS5 external content, kept in step by
triggers) and the vectors (sqlite_vectors.py).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import importlib.util
import json
import logging
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import apsw

from indexer.errors import StoreError
from indexer.keywords import KeywordQuery
from indexer.model import FileVersion, ParsedDocument
from indexer.store import integrity
from indexer.store.core import SQLITE, content_hash, place_conditions, time_conditions, utc_now
from indexer.store.errormap import wrap_public_methods
from indexer.store.fts5 import match_expression
from indexer.store.rows import (
    ChunkRow,
    RankedChunk,
    SearchScope,
    split_windows,
    tag_key,
)
from indexer.store.schema import LANGUAGE_BACKFILL_KEY, MIGRATIONS, SCHEMA_VERSION, file_tag_keys
from indexer.store.sqlite_vectors import SqliteVectors

if TYPE_CHECKING:  # numpy is imported where vectors are touched, keeping lexical queries light
    pass

log = logging.getLogger("notes_search.store")

BUSY_TIMEOUT_MS = 30_000
# bm25 weights: a hit in the breadcrumb (title, headings) counts double. Called explicitly, not as
# FTS5's `rank`: ORDER BY rank scores every match inside FTS5 before a scope filter drops most of
# them; bm25() in the select list scores only the rows that pass (measured at 100k chunks, p50:
# 19 -> 4 ms for a 1 % scope, and 18 -> 11 ms unscoped).
BM25 = "bm25(chunks_fts, 2.0, 1.0)"


def vec_extension_path() -> str:
    """sqlite-vec's loadable library, found without importing the package (it pulls in numpy)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("sqlite-vec is not installed: run ./install.sh")
    return os.path.join(next(iter(spec.submodule_search_locations)), "vec0")


# What the file system, the file itself or another program holding it can do to a read or a
# write; anything else is a bug to see whole.
STORAGE_ERRORS = (
    apsw.FullError,
    apsw.ReadOnlyError,
    apsw.IOError,
    apsw.CorruptError,
    apsw.NotADBError,
    apsw.CantOpenError,
    apsw.PermissionsError,
    apsw.BusyError,
)


def storage_error(path: Path, exc: apsw.Error, reading: bool = False) -> StoreError:
    """One line naming the index file and what went wrong with it."""
    if reading and isinstance(exc, (apsw.ReadOnlyError, apsw.CantOpenError)):
        # a WAL database is read through its -shm/-wal files, created next to it on first use
        problem = (
            f"cannot be read by this user ({exc}): SQLite keeps {path.name}-shm and -wal next "
            "to the index, so its folder must be writable for this user"
        )
    elif isinstance(exc, apsw.FullError):
        problem = "the disk is full (free some space, then run `notes-search sync` again)"
    elif isinstance(exc, apsw.ReadOnlyError):
        problem = "it is read-only for this user (a sync needs write access to it and to its folder)"
    elif isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return integrity.damaged(path, str(exc))
    elif isinstance(exc, apsw.BusyError):
        problem = (
            f"it is locked by another process ({exc}): a program holding a write lock on it (an open "
            "`sqlite3` shell or DB browser, say) must close it first"
        )
    else:
        problem = str(exc)
    return StoreError(f"index {path}: {problem}")


def scope_condition(scope: SearchScope, alias: str = "c", lead: str = "tag") -> tuple[str, dict[str, object]]:
    """SQL condition over `chunks` (or `files`: both have source_id and path) under `alias`, and
    its bindings. `lead`: which filter the list of files that pass is read from, when both tags
    and times are set ("tag": the first tag; "time": the time range); see `Store._planned`."""
    clauses: list[str] = []
    params: dict[str, object] = {}
    if scope.source_ids:
        names = []
        for i, source_id in enumerate(scope.source_ids):
            params[f"scope_src{i}"] = source_id
            names.append(f":scope_src{i}")
        clauses.append(f"{alias}.source_id IN ({', '.join(names)})")
    clauses.extend(place_conditions(scope, alias, SQLITE, params))
    clauses.extend(_filter_clauses(scope, alias, params, lead))
    return (" AND ".join(clauses) or "1"), params


def _filter_clauses(scope: SearchScope, alias: str, params: dict[str, object], lead: str) -> list[str]:
    """The tag and time filters as one `(source_id, path) IN (SELECT the files that pass)`.
    That list is computed from the files alone: one index range (file_tags by a tag, or
    idx_files_updated by time) with the other filters as lookups by file, so a filter that keeps
    1 % of the files reads about 1 % of the chunks. Not one IN per filter: SQLite then starts
    from whichever list it likes (without statistics, the last one), and a broad tag after a
    narrow one made a search walk most of the index's chunks."""
    tags = list(dict.fromkeys(tag_key(tag) for tag in scope.tags))
    times = time_conditions(scope, SQLITE, params)
    if not tags and not times:
        return []
    for i, tag in enumerate(tags):
        params[f"scope_tag{i}"] = tag

    def has_tags(first: int, row: str) -> str:
        """The file `row` holds every tag from the `first`-th on: one lookup of its tags, not
        one EXISTS per tag (SQLite's planner took seconds over 32 of them, 12 s over 64)."""
        wanted = [f":scope_tag{i}" for i in range(first, len(tags))]
        return (
            f"(SELECT COUNT(*) FROM file_tags x WHERE x.source_id = {row}.source_id AND x.path = {row}.path"
            f" AND x.tag IN ({', '.join(wanted)})) = {len(wanted)}"
        )

    in_time = " AND ".join(times)
    if not tags or (times and lead == "time"):
        conditions = [in_time, *([has_tags(0, "u")] if tags else [])]
        kept = f"SELECT u.source_id, u.path FROM files u WHERE {' AND '.join(conditions)}"
    else:
        conditions = ["t0.tag = :scope_tag0", *([has_tags(1, "t0")] if len(tags) > 1 else [])]
        if times:
            conditions.append(
                f"EXISTS (SELECT 1 FROM files u WHERE u.source_id = t0.source_id AND u.path = t0.path AND {in_time})"
            )
        kept = f"SELECT t0.source_id, t0.path FROM file_tags t0 WHERE {' AND '.join(conditions)}"
    return [f"({alias}.source_id, {alias}.path) IN ({kept})"]


def not_a_folder(folder: Path) -> Path | None:
    """The nearest of `folder` and its parents that exists but is no folder (a file where a
    folder of the index's path should be), or None."""
    for candidate in (folder, *folder.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


def _database_damaged(conn: apsw.Connection) -> bool:
    """Whether SQLite finds the file damaged: a damaged page can surface as a plain SQL error
    ("SQL logic error"), which is otherwise a bug in our SQL."""
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except apsw.Error:
        return True
    return rows != [("ok",)]


StoreT = TypeVar("StoreT", bound="type[Store]")
MethodT = TypeVar("MethodT", bound=Callable[..., Any])


def _map_storage_errors(method: MethodT) -> MethodT:
    """Run a Store method so that what the file does to it (damage, a lock held by another
    program, a full disk, lost permissions) reaches the caller as one StoreError naming the
    file, at whatever query it shows up first."""

    @functools.wraps(method)
    def run(self: Store, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except STORAGE_ERRORS as exc:
            raise storage_error(self.path, exc, reading=self.reading) from None
        except apsw.SQLError as exc:
            if not _database_damaged(self.conn):
                raise
            raise storage_error(self.path, apsw.CorruptError(str(exc)), reading=self.reading) from None

    return run  # type: ignore[return-value]


def _storage_errors_mapped(cls: StoreT) -> StoreT:
    """Apply `_map_storage_errors` to every public method of `cls` but the context managers."""
    return wrap_public_methods(cls, _map_storage_errors, skip={"transaction", "snapshot", "close"})


@_storage_errors_mapped
class Store(SqliteVectors):
    """A connection to the index file with the schema applied and sqlite-vec loaded."""

    dialect = SQLITE
    conn: apsw.Connection

    reading = False  # opened read-only: a permission error then names the folder's -shm/-wal

    def __init__(self, conn: apsw.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._vectors_changed = False  # renew meta.vectors_generation when this transaction commits

    # ---- opening and schema -------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, readonly: bool = False) -> Store:
        path = Path(path)
        if readonly and (not path.exists() or (path.is_file() and path.stat().st_size == 0)):
            # an empty file is no index either (a read never makes one: SQLite would call it schema 0)
            raise StoreError(f"no index at {path}: run `notes-search sync` first")
        if path.is_dir():
            raise StoreError(f"cannot open index {path}: it is a folder (`db:` must name a file)")
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.ENOTDIR:
                raise StoreError(f"cannot open index {path}: {exc.strerror or exc}") from None
        else:
            if not stat.S_ISREG(mode):
                # SQLite would wait for ever on a FIFO's other end, or read a device as a database
                raise StoreError(f"index {path}: not a regular file (`db:` must name a file)")
        blocker = not_a_folder(path.parent)
        if blocker is not None:
            raise StoreError(f"cannot open index {path}: {blocker} is not a folder")
        try:
            if not readonly:
                path.parent.mkdir(parents=True, exist_ok=True)
            flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
            conn = apsw.Connection(str(path), flags=flags)
        except OSError as exc:
            raise StoreError(f"cannot open index {path}: {exc.strerror or exc} ({exc.filename or path})") from None
        except apsw.Error as exc:
            raise StoreError(f"cannot open index {path}: {exc}") from None
        try:
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            conn.enable_load_extension(True)
            conn.load_extension(vec_extension_path())
            conn.enable_load_extension(False)
            conn.execute("PRAGMA foreign_keys = ON")
            if not readonly:
                if conn.readonly("main"):
                    # SQLite falls back to read-only without a word; the first write would fail
                    raise StoreError(
                        f"index {path} is read-only for this user: a sync needs write access to it and to its folder"
                    )
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            store = cls(conn, path)
            store.reading = readonly
            integrity.check_on_open(conn, path, readonly=readonly)
            store._refuse_foreign_database()
            if not readonly:
                store._migrate()
            elif store._user_version() != SCHEMA_VERSION:
                raise StoreError(
                    f"index {path} has schema {store._user_version()}, expected {SCHEMA_VERSION}: run `notes-search sync`"
                )
        except StoreError:
            conn.close()
            raise
        except apsw.Error as exc:
            conn.close()
            raise storage_error(path, exc, reading=readonly) from None
        return store

    def close(self) -> None:
        self.conn.close()

    def check_integrity(self, *, full: bool = False) -> None:
        """Check the whole file if it changed since its last good check (`status`), or now and
        thoroughly (`full`: `status --check`): StoreError if damaged."""
        if full:
            integrity.verify(self.conn, self.path, full=True)
        else:
            integrity.check_if_changed(self.conn, self.path)

    def _one(self, sql: str, params: Sequence[object] | dict[str, object] = ()) -> Any:
        """The first column of the first row of `sql` (a query that always returns a row)."""
        row = self.conn.execute(sql, params).fetchone()
        if row is None:
            raise StoreError(f"index {self.path}: no row from {sql.split()[0]} query")
        return row[0]

    def _user_version(self) -> int:
        return int(self._one("PRAGMA user_version"))

    def _refuse_foreign_database(self) -> None:
        """A file with tables but no schema version of ours belongs to another program: neither
        `sync` (whose first migration would meet its tables) nor a read can make it an index.
        The first migration is one transaction, so at version 0 only the vector table (made
        apart from the migrations) can be ours."""
        if self._user_version() != 0:
            return
        tables = [
            str(row[0])
            for row in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite%'"
                " AND name NOT LIKE 'vec\\_chunks%' ESCAPE '\\' ORDER BY name LIMIT 4"
            )
        ]
        if tables:
            raise StoreError(
                f"index {self.path}: not a notes-search index (it holds other tables: "
                f"{', '.join(tables)}); move it away or change `db:` in the config"
            )

    def _migrate(self) -> None:
        version = self._user_version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"index {self.path} was written by a newer notes-search (schema {version})")
        for number, step in enumerate(MIGRATIONS[version:], version):
            with self.transaction():
                self.conn.execute(step.sql)
                if step.data is not None:
                    step.data(self.conn)
                self.conn.execute(f"PRAGMA user_version = {number + 1}")
                self._set_meta({"schema_version": str(number + 1)})
            if version:  # a fresh index runs every step: only an upgrade is worth a line
                log.info("index %s: migrated to schema %d (%s)", self.path, number + 1, step.name)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT; any exception rolls back. Not re-entrant on purpose.
        A full disk, a file made read-only, an I/O error or corruption met while writing
        becomes one StoreError naming the file."""
        try:
            self._writing()
            self.conn.execute("BEGIN IMMEDIATE")
            self._vectors_changed = False
            try:
                yield
                if self._vectors_changed:
                    # random, not a counter: a rebuilt index must not reach a value an old copy has
                    self.conn.execute(
                        "INSERT INTO meta(key, value) VALUES ('vectors_generation', lower(hex(randomblob(8))))"
                        " ON CONFLICT(key) DO UPDATE SET value = excluded.value"
                    )
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self._vectors_changed = False
        except STORAGE_ERRORS as exc:
            raise storage_error(self.path, exc) from None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every query inside sees the same committed state (WAL snapshot)."""
        _map_storage_errors(Store._execute)(self, "BEGIN")
        try:
            yield
        finally:
            _map_storage_errors(Store._execute)(self, "COMMIT")

    def _execute(self, sql: str) -> None:
        self.conn.execute(sql)

    # ---- sources ---------------------------------------------------------------------------

    def _delete_source_rows(self, source_id: str) -> None:
        self._delete_vectors("SELECT id FROM chunks WHERE source_id = ?", (source_id,))
        self.conn.execute("DELETE FROM files WHERE source_id = ?", (source_id,))
        self.conn.execute("DELETE FROM sources WHERE source_id = ?", (source_id,))

    # ---- files and chunks (writes) ---------------------------------------------------------

    def write_files(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        language_of: Callable[[str], str] | None = None,
        vectors: Mapping[str, bytes] | None = None,
    ) -> int:
        """`write_file` for each file in order (an embedded database pays no round trips). The
        stored vectors and languages of every text in the batch are read before any file is
        replaced: a chunk moved from one of these files to another keeps its vector whatever the
        files' order (as on PostgreSQL), instead of being deleted with its old file first."""
        hashes = [[content_hash(chunk.embed_text) for chunk in doc.chunks] for _, doc in files]
        every_hash = {digest for file_hashes in hashes for digest in file_hashes}
        carried = dict(vectors) if vectors is not None else self._vectors_by_hash(every_hash)
        dims = self._vector_dims() if carried else 0
        known_languages = self._languages_by_hash(every_hash) if language_of is not None else {}
        return sum(
            self._write_one(source_id, file, doc, file_hashes, language_of, carried, known_languages, dims)
            for (file, doc), file_hashes in zip(files, hashes, strict=True)
        )

    def delete_file(self, source_id: str, path: str) -> None:
        """Remove a file, its chunks (cascade + FTS triggers) and, explicitly, its vectors."""
        self._delete_vectors("SELECT id FROM chunks WHERE source_id = ? AND path = ?", (source_id, path))
        self.conn.execute("DELETE FROM files WHERE source_id = ? AND path = ?", (source_id, path))

    def _write_one(
        self,
        source_id: str,
        file: FileVersion,
        doc: ParsedDocument,
        hashes: Sequence[str],
        language_of: Callable[[str], str] | None,
        reusable: Mapping[str, bytes],
        known_languages: dict[str, str],
        dims: int,
    ) -> int:
        """`write_file` with the batch's vectors (`dims` wide, a chunk's windows concatenated)
        and languages by content hash already read (`known_languages` gains each language
        detected here, for the batch's later files)."""
        self.delete_file(source_id, file.path)
        self.conn.execute(
            """INSERT INTO files(source_id, path, title, tags, headings, collection, sha256, size, mtime,
                                 updated_at, indexed_at, front_matter_problem)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                source_id,
                file.path,
                doc.title,
                json.dumps(doc.tags, ensure_ascii=False),
                json.dumps(doc.headings, ensure_ascii=False),
                file.collection,
                file.sha256,
                file.size,
                file.mtime,
                file.updated_at,
                utc_now(),
                doc.front_matter_problem,
            ),
        )
        self.conn.executemany(
            "INSERT INTO file_tags(tag, source_id, path) VALUES (?, ?, ?)",
            [(key, source_id, file.path) for key in file_tag_keys(doc.tags)],
        )
        now = utc_now()
        pending = 0
        for chunk, digest in zip(doc.chunks, hashes, strict=True):
            vector = reusable.get(digest)
            chunk_language = known_languages.get(digest) or (language_of(chunk.text) if language_of else "unknown")
            known_languages[digest] = chunk_language
            self.conn.execute(
                """INSERT INTO chunks(source_id, path, chunk_idx, breadcrumb, text, start_line, end_line,
                                      content_hash, embedded_at, language)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    source_id,
                    file.path,
                    chunk.idx,
                    chunk.breadcrumb,
                    chunk.text,
                    chunk.start_line,
                    chunk.end_line,
                    digest,
                    now if vector is not None else None,
                    chunk_language,
                ),
            )
            if vector is not None:
                chunk_id = self.conn.last_insert_rowid()
                self._insert_windows(chunk_id, split_windows(vector, dims))
            else:
                pending += 1
        return pending

    def _languages_by_hash(self, hashes: set[str]) -> dict[str, str]:
        """Languages already detected for these texts ('unknown' is not reused: it may be a chunk
        written before languages were detected)."""
        found: dict[str, str] = {}
        ordered = sorted(hashes)
        for start in range(0, len(ordered), 500):
            part = ordered[start : start + 500]
            marks = ",".join("?" * len(part))
            for digest, language in self.conn.execute(
                f"""SELECT content_hash, MIN(language) FROM chunks
                    WHERE content_hash IN ({marks}) AND language != 'unknown' GROUP BY content_hash""",
                part,
            ):
                found[str(digest)] = str(language)
        return found

    # ---- search (reads) --------------------------------------------------------------------

    def _scope_condition(self, scope: SearchScope, alias: str) -> tuple[str, dict[str, object]]:
        """`scope_condition` with its filters in the cheapest order (`_planned`)."""
        planned, lead = self._planned(scope)
        return scope_condition(planned, alias, lead)

    def _planned(self, scope: SearchScope) -> tuple[SearchScope, str]:
        """The scope with its tags narrowest first, and the filter to read the kept files from
        (the one that keeps fewest files): SQLite has no statistics to choose by, and reading
        a tag that 90 % of the files have, to keep the 1 % changed this week, walks them all.
        Counting is an index range per filter, over files, not chunks."""
        if not scope.has_filters:
            return scope, "tag"
        sizes = {
            tag: int(self._one("SELECT COUNT(*) FROM file_tags WHERE tag = ?", (tag,)))
            for tag in dict.fromkeys(tag_key(tag) for tag in scope.tags)
        }
        tags = tuple(sorted(sizes, key=lambda tag: sizes[tag]))
        lead = "tag"
        if scope.updated_since is not None or scope.updated_before is not None:
            since = scope.updated_since if scope.updated_since is not None else float("-inf")
            before = scope.updated_before if scope.updated_before is not None else float("inf")
            in_time = int(
                self._one("SELECT COUNT(*) FROM files WHERE updated_at >= ? AND updated_at < ?", (since, before))
            )
            if not tags or in_time < sizes[tags[0]]:
                lead = "time"
        return dataclasses.replace(scope, tags=tags), lead

    def fts_search(self, match: KeywordQuery, limit: int, scope: SearchScope) -> list[RankedChunk]:
        """Chunks matching `match` (as its FTS5 expression), best bm25 (lowest) first."""
        if scope.is_all:
            sql = f"SELECT rowid, {BM25} AS score FROM chunks_fts WHERE chunks_fts MATCH :match ORDER BY score, rowid LIMIT :limit"
            params: dict[str, object] = {}
        else:
            where, params = self._scope_condition(scope, "c")
            # `+rowid`: filter the MATCH's hits by the scope; a bare `rowid IN` makes FTS5 run the
            # MATCH once per id in scope (seconds at 100k chunks)
            sql = f"""SELECT rowid, {BM25} AS score FROM chunks_fts
                      WHERE chunks_fts MATCH :match AND +rowid IN (SELECT c.id FROM chunks c WHERE {where})
                      ORDER BY score, rowid LIMIT :limit"""
        params.update(match=match_expression(match), limit=limit)
        return [RankedChunk(int(r[0]), float(r[1])) for r in self.conn.execute(sql, params)]

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        """The chunks among `ids` that exist, by id."""
        wanted = list(ids)
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        rows = self.conn.execute(
            f"""SELECT c.id, c.source_id, c.path, c.chunk_idx, c.breadcrumb, c.text, c.start_line, c.end_line,
                       f.updated_at, s.indexed_rev, s.kind
                FROM chunks c JOIN files f ON f.source_id = c.source_id AND f.path = c.path
                JOIN sources s ON s.source_id = c.source_id
                WHERE c.id IN ({marks})""",
            wanted,
        )
        return {r[0]: ChunkRow(*r) for r in rows}

    # ---- languages ---------------------------------------------------------------------------

    def store_backfilled_languages(self, languages: Sequence[tuple[int, str]], upto_id: int, done_upto: int) -> None:
        """Set detected languages of old chunks and record the progress (`done_upto` = last id
        looked at); once it reaches `upto_id` the backfill is over. One transaction, so an
        interrupted backfill resumes where it stopped."""
        with self.transaction():
            self.conn.executemany(
                "UPDATE chunks SET language = ? WHERE id = ? AND language IS NOT ?",
                [(language, chunk_id, language) for chunk_id, language in languages],
            )
            if done_upto >= upto_id:
                self.conn.execute("DELETE FROM meta WHERE key = ?", (LANGUAGE_BACKFILL_KEY,))
            else:
                self._set_meta({LANGUAGE_BACKFILL_KEY: f"{upto_id}:{done_upto}"})

    def chunk_languages(self, ids: Iterable[int] | None = None) -> dict[int, str]:
        """Chunk id -> language, for `ids` or for every chunk."""
        if ids is None:
            return {
                int(chunk_id): str(language)
                for chunk_id, language in self.conn.execute("SELECT id, language FROM chunks")
            }
        ordered = list(ids)
        found: dict[int, str] = {}
        for start in range(0, len(ordered), 500):
            part = ordered[start : start + 500]
            marks = ",".join("?" * len(part))
            for chunk_id, language in self.conn.execute(f"SELECT id, language FROM chunks WHERE id IN ({marks})", part):
                found[int(chunk_id)] = str(language)
        return found
