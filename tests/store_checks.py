"""Consistency checks on a SQLite index that only tests need: they read the backend's own
tables (vec0, chunk_vectors, the FTS5 index), so they live here, not in the store's surface."""

from __future__ import annotations

from indexer.store import Store


def orphan_vectors(store: Store) -> list[int]:
    """vec_chunks rowids without a chunk: must always be empty."""
    if not store.has_vector_table():
        return []
    return [r[0] for r in store.conn.execute("SELECT rowid FROM vec_chunks WHERE rowid NOT IN (SELECT id FROM chunks)")]


def embedded_without_vector(store: Store) -> list[int]:
    """Chunks marked embedded that lack a vector in either copy (vec0 or chunk_vectors)."""
    if not store.has_vector_table():
        return [r[0] for r in store.conn.execute("SELECT id FROM chunks WHERE embedded_at IS NOT NULL")]
    return [
        r[0]
        for r in store.conn.execute(
            """SELECT id FROM chunks WHERE embedded_at IS NOT NULL
               AND (id NOT IN (SELECT rowid FROM vec_chunks) OR id NOT IN (SELECT id FROM chunk_vectors))"""
        )
    ]


def fts_integrity_check(store: Store) -> None:
    """Raises apsw.Error if the FTS index disagrees with `chunks`."""
    store.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


def chunk_fingerprint(store: Store) -> list[tuple[object, ...]]:
    """Everything that defines the index content, id-independent: for equality tests."""
    return store.conn.execute(
        """SELECT source_id, path, chunk_idx, breadcrumb, text, start_line, end_line, content_hash,
                  embedded_at IS NOT NULL, language FROM chunks ORDER BY source_id, path, chunk_idx"""
    ).fetchall()
