"""The PostgreSQL store's HNSW index: built with the store's graph parameters, and an index an
older version built with pgvector's defaults rebuilt with them by a migration, swapped in whole
(the same answers, readers never left without an index)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import psycopg
import pytest

from indexer.config import EmbeddingConfig
from indexer.store import SearchScope
from indexer.store.postgres import PostgresStore
from indexer.store.postgres import schema as pg_schema
from indexer.store.postgres import tsvector as pg_tsvector
from indexer.store.postgres import vectors as pg_vectors
from tests.test_store import DIMS, fill


def _index_options(store: PostgresStore) -> list[str] | None:
    row = store.conn.execute(
        "SELECT reloptions FROM pg_class WHERE oid = to_regclass('idx_chunk_vectors_hnsw')"
    ).fetchone()
    return None if row is None else sorted(row[0] or [])


def _filled(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> PostgresStore:
    monkeypatch.setattr(pg_vectors, "HNSW_MIN_VECTORS", 100)
    store = PostgresStore.open(pg_url)
    store.reset_vectors(
        DIMS, EmbeddingConfig(provider="ollama", model="t:1", endpoint="http://x", dims=DIMS).identity()
    )
    store.ensure_source("s", "workspace")
    fill(store, {"big": 300, "small": 30}, np.random.default_rng(5))  # type: ignore[arg-type]
    return store


def _as_the_earlier_version_left_it(store: PostgresStore, old_path_index: bool = False) -> None:
    """The HNSW index as the previous schema built it (pgvector's defaults; with
    `old_path_index`, the path index it had too) and the schema version before the rebuild."""
    with store.transaction():
        store.conn.execute("DROP INDEX idx_chunk_vectors_hnsw")
        store.conn.execute(
            "CREATE INDEX idx_chunk_vectors_hnsw ON chunk_vectors USING hnsw (embedding vector_cosine_ops)"
        )
        if old_path_index:
            store.conn.execute("DROP INDEX idx_chunks_path_ids")
            store.conn.execute("CREATE INDEX idx_chunks_path ON chunks(path)")
        steps = [step.name for step in pg_schema.PG_MIGRATIONS]
        store.conn.execute(
            "UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(steps.index("hnsw_ef_construction_128")),)
        )


def _migrating(pg_url: str) -> tuple[threading.Thread, list[Exception | None]]:
    """Open (and so migrate) the index on a thread of its own; the list gets None when that
    worked, else what it raised."""
    opened: list[Exception | None] = []

    def migrate() -> None:
        try:
            PostgresStore.open(pg_url).close()
            opened.append(None)
        except Exception as exc:  # noqa: BLE001 - reported by the caller's assertion
            opened.append(exc)

    migration = threading.Thread(target=migrate)
    migration.start()
    return migration, opened


def _unscoped_ids(store: PostgresStore, queries: np.ndarray) -> list[list[int]]:
    return [[hit.chunk_id for hit in store.vec_search(q, 10, SearchScope())] for q in queries]


def test_a_new_hnsw_index_is_built_with_the_graph_parameters_of_its_size(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _filled(pg_url, monkeypatch)  # 330 vectors: a small index
    try:
        assert _index_options(store) == ["ef_construction=64", "m=16"]
    finally:
        store.close()


def test_a_large_new_hnsw_index_gets_the_wide_graph(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_vectors, "HNSW_WIDE_FROM", 300)  # 330 vectors make a large index
    store = _filled(pg_url, monkeypatch)
    try:
        assert _index_options(store) == ["ef_construction=128", "m=16"]
    finally:
        store.close()


def test_a_small_index_that_has_grown_is_built_again_with_the_wide_graph_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _filled(pg_url, monkeypatch)
    queries = np.random.default_rng(6).normal(size=(5, DIMS)).astype(np.float32)
    node = store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone()
    store.close()
    monkeypatch.setattr(pg_vectors, "HNSW_WIDE_FROM", 300)  # the 330 vectors are past it now
    reader = PostgresStore.open(pg_url)  # searching never rebuilds
    try:
        reader.vec_search(queries[0], 10, SearchScope())
        assert reader.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone() == node
    finally:
        reader.close()
    store = PostgresStore.open(pg_url)  # the next sync's first vectors
    try:
        vectors = fill(store, {"more": 20}, np.random.default_rng(8))  # type: ignore[arg-type]
        assert _index_options(store) == ["ef_construction=128", "m=16"]
        hnsw = "SELECT count(*) FROM pg_indexes WHERE tablename = 'chunk_vectors' AND indexdef LIKE '%hnsw%'"
        assert store._one(hnsw) == 1
        widened = store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone()
        assert widened != node
        stored = {
            int(cid): np.asarray(json.loads(text), dtype=np.float32)
            for cid, text in store.conn.execute("SELECT id, embedding::text FROM chunk_vectors")
        }
        assert len(stored) == 350 and set(vectors) <= set(stored)
        for query, ids in zip(queries, _unscoped_ids(store, queries), strict=True):
            unit = query / np.linalg.norm(query)
            cosine = {cid: float(v @ unit) / float(np.linalg.norm(v)) for cid, v in stored.items()}
            assert ids == sorted(cosine, key=lambda cid: (-cosine[cid], cid))[:10]  # still the exact top 10
        fill(store, {"again": 5}, np.random.default_rng(9))  # type: ignore[arg-type]
        assert store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone() == widened
    finally:
        store.close()


def test_an_index_built_with_pgvector_defaults_is_rebuilt_on_migration(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _filled(pg_url, monkeypatch)
    queries = np.random.default_rng(6).normal(size=(5, DIMS)).astype(np.float32)
    _as_the_earlier_version_left_it(store)
    before = _unscoped_ids(store, queries)
    assert _index_options(store) == []
    store.close()
    monkeypatch.setattr(pg_vectors, "HNSW_WIDE_FROM", 300)  # 330 vectors: a large index, the wide graph

    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        assert _index_options(store) == ["ef_construction=128", "m=16"]
        # one index, swapped in under the old name, nothing left over
        hnsw = "SELECT count(*) FROM pg_indexes WHERE tablename = 'chunk_vectors' AND indexdef LIKE '%hnsw%'"
        assert store._one(hnsw) == 1
        store.conn.execute("SET enable_seqscan = off")  # a planner that would take any index it may
        plan = "\n".join(
            str(row[0])
            for row in store.conn.execute(
                f"EXPLAIN SELECT id FROM chunk_vectors ORDER BY {pg_vectors.hnsw_key(DIMS)} <=> %s::halfvec LIMIT 10",
                (queries[0],),
            )
        )
        assert "idx_chunk_vectors_hnsw" in plan, plan
        assert _unscoped_ids(store, queries) == before  # 330 vectors: both graphs find the exact top 10
    finally:
        store.close()


def test_a_graph_of_the_float_vectors_is_rebuilt_over_their_half_precision_copies(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index as the schema before `hnsw_half_precision` left it (the graph's parameters
    current, its vectors the floats) is built again over halfvec copies: one index, the same
    answers, the distances still the floats'."""
    store = _filled(pg_url, monkeypatch)
    queries = np.random.default_rng(6).normal(size=(5, DIMS)).astype(np.float32)
    options = _index_options(store)
    with store.transaction():
        store.conn.execute("DROP INDEX idx_chunk_vectors_hnsw")
        store.conn.execute(
            "CREATE INDEX idx_chunk_vectors_hnsw ON chunk_vectors USING hnsw (embedding vector_cosine_ops)"
            f" WITH ({', '.join(pg_vectors.hnsw_options(330))})"
        )
        steps = [step.name for step in pg_schema.PG_MIGRATIONS]
        store.conn.execute(
            "UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(steps.index("hnsw_half_precision")),)
        )
    exact = {
        int(cid): float(distance)
        for cid, distance in store.conn.execute("SELECT id, embedding <=> %s FROM chunk_vectors", (queries[0],))
    }
    store.close()
    store = PostgresStore.open(pg_url)
    try:
        definition = store._one("SELECT pg_get_indexdef('idx_chunk_vectors_hnsw'::regclass)")
        assert "halfvec_cosine_ops" in definition and _index_options(store) == options
        hnsw = "SELECT count(*) FROM pg_indexes WHERE tablename = 'chunk_vectors' AND indexdef LIKE '%hnsw%'"
        assert store._one(hnsw) == 1
        hits = store.vec_search(queries[0], 10, SearchScope())
        assert [hit.chunk_id for hit in hits] == sorted(exact, key=lambda cid: (exact[cid], cid))[:10]
        assert [hit.score for hit in hits] == [exact[hit.chunk_id] for hit in hits]
    finally:
        store.close()


def test_the_rebuild_leaves_an_index_without_vectors_or_with_current_parameters_alone(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore.open(pg_url)
    with store.transaction():  # no vector table yet: nothing to rebuild, none built
        pg_vectors.rebuild_vector_index(store)
    assert _index_options(store) is None
    store.close()

    store = _filled(pg_url, monkeypatch)
    try:
        node = store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone()
        with store.transaction():
            pg_vectors.rebuild_vector_index(store)
        assert store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone() == node
    finally:
        store.close()


def test_a_scoped_search_reads_the_scope_s_vectors_by_their_sorted_ids_exactly(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_vectors, "HNSW_MIN_VECTORS", 100)
    store = PostgresStore.open(pg_url)
    try:
        store.reset_vectors(
            DIMS, EmbeddingConfig(provider="ollama", model="t:1", endpoint="http://x", dims=DIMS).identity()
        )
        store.ensure_source("s", "workspace")
        vectors = fill(store, {"big": 300, "small": 30}, np.random.default_rng(5))  # type: ignore[arg-type]
        in_scope = {cid for cid, row in store.chunk_rows(vectors).items() if row.path.startswith("small/")}
        store.conn.execute("ANALYZE")
        sent: list[tuple[str, Any]] = []
        execute = store.conn.execute

        def recording(sql: Any, params: Any = None, **kwargs: Any) -> Any:
            sent.append((str(sql), params))
            return execute(sql, params, **kwargs)

        for query in np.random.default_rng(6).normal(size=(5, DIMS)).astype(np.float32):
            monkeypatch.setattr(store.conn, "execute", recording)
            hits = store.vec_search(query, 10, SearchScope(path="small"))
            monkeypatch.setattr(store.conn, "execute", execute)
            unit = query / np.linalg.norm(query)
            expected = sorted(in_scope, key=lambda cid: (-float(vectors[cid] @ unit), cid))[:10]
            assert [hit.chunk_id for hit in hits] == expected
        assert store.vec_search(query, 10, SearchScope(path="nowhere")) == []
        sql, params = next((sql, params) for sql, params in sent if "<=>" in sql)
        store.conn.execute("SET enable_seqscan = off")  # a planner that would take any index it may
        plan = "\n".join(str(row[0]) for row in store.conn.execute(f"EXPLAIN {sql}", params, prepare=False))
        assert "chunk_vectors_pkey" in plan and "ANY" in plan, plan
        assert "hnsw" not in plan, plan
    finally:
        store.close()


def test_a_scope_s_chunk_ids_come_from_the_path_index_alone(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _filled(pg_url, monkeypatch)
    try:
        indexes = {str(r[0]) for r in store.conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'chunks'")}
        assert "idx_chunks_path_ids" in indexes and "idx_chunks_path" not in indexes
        store.conn.execute("VACUUM ANALYZE chunks")  # the visibility map an index-only scan reads
        for setting in ("enable_seqscan", "enable_bitmapscan"):  # a planner that would take any index it may
            store.conn.execute(f"SET {setting} = off")
        where, params = pg_tsvector.scope_condition(SearchScope(path="small"), "c")
        plan = "\n".join(
            str(row[0]) for row in store.conn.execute(f"EXPLAIN SELECT c.id FROM chunks c WHERE {where}", params)
        )
        assert "Index Only Scan using idx_chunks_path_ids" in plan, plan
    finally:
        store.close()


def _a_large_index_as_the_earlier_version_left_it(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """330 vectors counted as a large index, with the earlier version's HNSW and path indexes:
    the next writer to open it rebuilds the graph and swaps both."""
    monkeypatch.setattr(pg_vectors, "HNSW_WIDE_FROM", 300)
    store = _filled(pg_url, monkeypatch)
    _as_the_earlier_version_left_it(store, old_path_index=True)
    store.close()


def test_the_rebuild_does_not_deadlock_with_a_writer_of_the_earlier_version(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync of the earlier version (no migration to wait for) writes chunks and then their
    vectors in one transaction. The migration that rebuilt the vector index (holding the vector
    table) and then built the path index (waiting for the chunks that writer holds) made a lock
    cycle: PostgreSQL aborted one of them, the migration after its whole rebuild."""
    _a_large_index_as_the_earlier_version_left_it(pg_url, monkeypatch)
    writer = psycopg.connect(pg_url, autocommit=True)
    watcher = psycopg.connect(pg_url, autocommit=True)
    try:
        writer.execute("BEGIN")
        writer.execute("DELETE FROM chunks WHERE id = -1")  # the earlier version's file rewrite
        migration, opened = _migrating(pg_url)
        waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'chunks'::regclass"
        while migration.is_alive() and not watcher.execute(waiting).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.01)
        writer.execute("DELETE FROM chunk_vectors WHERE id = -1")  # then the vectors of its chunks
        writer.execute("COMMIT")
        migration.join()
        assert opened == [None]
    finally:
        writer.close()
        watcher.close()
    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        assert _index_options(store) == ["ef_construction=128", "m=16"]
    finally:
        store.close()


def test_the_index_swap_does_not_deadlock_with_a_reader_of_the_earlier_version(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search of the earlier version reads the chunks, then their vectors, in one snapshot.
    The swap held the vector table whole (dropping the old index) and then asked for the chunks
    whole (dropping the old path index) while that reader held them: a lock cycle that aborted
    the migration after its whole rebuild."""
    _a_large_index_as_the_earlier_version_left_it(pg_url, monkeypatch)
    reader = psycopg.connect(pg_url, autocommit=True)
    watcher = psycopg.connect(pg_url, autocommit=True)
    try:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        reader.execute("SELECT count(*) FROM chunks")
        migration, opened = _migrating(pg_url)
        # the migration holds the vector table whole, or is trying to take both tables whole
        swapping = """SELECT (SELECT count(*) FROM pg_locks WHERE relation = 'chunk_vectors'::regclass
                                AND mode = 'AccessExclusiveLock' AND granted)
                             + (SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%vector_index_swap%%'
                                AND pid <> pg_backend_pid())"""
        while migration.is_alive() and not watcher.execute(swapping).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.01)
        reader.execute("SELECT count(*) FROM chunk_vectors")
        reader.execute("COMMIT")
        migration.join()
        assert opened == [None]
    finally:
        reader.close()
        watcher.close()


def test_a_small_index_built_with_pgvector_defaults_keeps_its_graph_on_migration(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pgvector's defaults are the small graph: below HNSW_WIDE_FROM the index is built again
    only for its half-precision copies, with the same graph."""
    store = _filled(pg_url, monkeypatch)
    _as_the_earlier_version_left_it(store)
    node = store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone()
    store.close()
    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        assert store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')::oid").fetchone() != node
        assert "halfvec_cosine_ops" in store._one("SELECT pg_get_indexdef('idx_chunk_vectors_hnsw'::regclass)")
        assert _index_options(store) == ["ef_construction=64", "m=16"]
    finally:
        store.close()
