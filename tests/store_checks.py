"""Consistency checks on an index that only tests need: they read the backend's own tables
(vec0, chunk_vectors, the FTS5 index; on PostgreSQL chunks_fts and fts_stats), so they live
here, not in the store's surface."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from indexer.store import Store, is_postgres, open_store


def _is_postgres(store: Any) -> bool:
    return type(store).__name__ == "PostgresStore"


def orphan_vectors(store: Any) -> list[int]:
    """Vectors without a chunk: must always be empty."""
    if not store.has_vector_table():
        return []
    if _is_postgres(store):
        sql = "SELECT id FROM chunk_vectors WHERE id NOT IN (SELECT id FROM chunks)"
    else:
        sql = "SELECT rowid FROM vec_chunks WHERE rowid NOT IN (SELECT id FROM chunks)"
    return [r[0] for r in store.conn.execute(sql)]


def embedded_without_vector(store: Any) -> list[int]:
    """Chunks marked embedded that lack a vector (in either copy, on SQLite)."""
    if not store.has_vector_table():
        return [r[0] for r in store.conn.execute("SELECT id FROM chunks WHERE embedded_at IS NOT NULL")]
    if _is_postgres(store):
        sql = "SELECT id FROM chunks WHERE embedded_at IS NOT NULL AND id NOT IN (SELECT id FROM chunk_vectors)"
    else:
        sql = """SELECT id FROM chunks WHERE embedded_at IS NOT NULL
                 AND (id NOT IN (SELECT rowid FROM vec_chunks) OR id NOT IN (SELECT id FROM chunk_vectors))"""
    return [r[0] for r in store.conn.execute(sql)]


def decode_tsvector(data: bytes) -> dict[str, list[tuple[int, int]]]:
    """A binary tsvector (PostgreSQL's send/receive form) as lexeme -> [(position, weight)]."""
    (count,) = struct.unpack_from(">i", data)
    offset, entries = 4, {}
    for _ in range(count):
        end = data.index(b"\0", offset)
        lexeme = data[offset:end].decode()
        (npos,) = struct.unpack_from(">H", data, end + 1)
        packed = struct.unpack_from(f">{npos}H", data, end + 3)
        entries[lexeme] = [(p & 0x3FFF, p >> 14) for p in packed]
        offset = end + 3 + 2 * npos
    assert offset == len(data), "bytes after the last lexeme"
    return entries


def fts_integrity_check(store: Any) -> None:
    """Raises if the lexical index disagrees with `chunks` (apsw.Error on SQLite)."""
    if not _is_postgres(store):
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
        return
    from indexer.store.postgres import MAX_LEXEME_BYTES, lexical_row

    rows = store.conn.execute(
        """SELECT c.id, c.breadcrumb, c.text, f.document::text, f.length, f.impacts::text, f.source_id = c.source_id,
                  c.path, f.scope::text
           FROM chunks c FULL JOIN chunks_fts f ON f.id = c.id"""
    ).fetchall()
    for chunk_id, breadcrumb, text, document, length, impacts, same_source, path, scope in rows:
        assert breadcrumb is not None and document is not None and same_source, f"chunk {chunk_id}: FTS row out of step"
        literal, tokens, tiers = lexical_row(breadcrumb, text)
        expected = store.conn.execute("SELECT %s::tsvector::text, %s::tsvector::text", (literal, tiers)).fetchone()
        assert (document, length, impacts) == (expected[0], tokens, expected[1]), f"chunk {chunk_id}: stale lexical row"
        parts = path.split("/")  # the file's folders and its own path, each short enough for a lexeme
        folders = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        folders = [f for f in folders if f and len(f.encode()) <= MAX_LEXEME_BYTES]
        assert scope == store.conn.execute("SELECT array_to_tsvector(%s::text[])::text", (folders,)).fetchone()[0], (
            f"chunk {chunk_id}: scope lexemes {scope} are not the folders of {path}"
        )
    totals = dict(store.conn.execute("SELECT source_id, count(*) || ':' || sum(length) FROM chunks_fts GROUP BY 1"))
    stats = {
        s: f"{n}:{t}" for s, n, t in store.conn.execute("SELECT source_id, rows, tokens FROM fts_stats WHERE rows > 0")
    }
    assert totals == stats, f"fts_stats {stats} != {totals}"
    missing = store.conn.execute(
        """SELECT DISTINCT w FROM chunks_fts, unnest(tsvector_to_array(document)) w
           WHERE NOT EXISTS (SELECT 1 FROM lexemes l WHERE l.lexeme = w) LIMIT 5"""
    ).fetchall()
    assert not missing, f"lexemes of lexical rows missing from `lexemes`: {missing}"


def chunk_fingerprint(store: Store | Any) -> list[tuple[object, ...]]:
    """Everything that defines the index content, id-independent: for equality tests."""
    return [
        tuple(row)
        for row in store.conn.execute(
            """SELECT source_id, path, chunk_idx, breadcrumb, text, start_line, end_line, content_hash,
                      embedded_at IS NOT NULL, language FROM chunks ORDER BY source_id, path, chunk_idx"""
        ).fetchall()
    ]


def write_mark(location: Path | str) -> object:
    """Something any committed write to the index changes: the SQLite file's and its WAL's mtime
    and size, or on PostgreSQL each table's row count and newest row version (xmin: an insert or
    update sets it, a delete lowers the count). Equal marks before and after: nothing written."""
    if not is_postgres(location):
        db = Path(location)
        files = [db, db.with_name(db.name + "-wal")]
        return [(p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.exists()]
    store: Any = open_store(location, readonly=True)
    try:
        tables = [
            str(name)
            for (name,) in store.conn.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'"
                " ORDER BY relname"
            )
        ]
        return [
            (table, *store.conn.execute(f"SELECT count(*), max(xmin::text::bigint) FROM {table}").fetchone())
            for table in tables
        ]
    finally:
        store.close()
