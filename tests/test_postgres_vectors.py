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
from indexer.model import Chunk, FileVersion, ParsedDocument
from indexer.store import SearchScope
from indexer.store.core import content_hash
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


def _schema_before(store: PostgresStore, step: str) -> None:
    """The schema version recorded as it was before the migration step `step` (in a transaction)."""
    names = [migration.name for migration in pg_schema.PG_MIGRATIONS]
    store.conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(names.index(step)),))


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
        _schema_before(store, "hnsw_ef_construction_128")


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
        _schema_before(store, "hnsw_half_precision")
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


# ---- a vector per window --------------------------------------------------------------------

WINDOWS = 3  # the long chunk's windows


def _note(path: str, texts: list[str], breadcrumb: str = "notes") -> tuple[FileVersion, ParsedDocument]:
    """A file whose chunks share one breadcrumb: the same text in two files is the same embedded
    text (one content hash)."""
    chunks = [Chunk(i, breadcrumb, text, i + 1, i + 1) for i, text in enumerate(texts)]
    return (
        FileVersion(path=path, text="\n".join(texts), sha256=path, size=1, mtime=1.0, updated_at=1.0),
        ParsedDocument(title=path, chunks=chunks),
    )


def _units(rng: np.random.Generator, rows: int) -> np.ndarray:
    matrix = rng.normal(size=(rows, DIMS)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _windowed(store: PostgresStore, rng: np.random.Generator) -> tuple[int, dict[int, np.ndarray]]:
    """Files "w/long.md" (one chunk of WINDOWS windows) and "w/short.md" (two chunks of one),
    embedded in one `store_vectors` call; returns the long chunk's id and id -> its windows."""
    with store.transaction():
        store.write_files("s", [_note("w/long.md", ["a long chunk"]), _note("w/short.md", ["one", "two"])])
    ids = [row.id for row in store.pending_chunks(100)]
    long_id = ids[0]
    rows = [long_id] * WINDOWS + ids[1:]
    matrix = _units(rng, len(rows))
    assert store.store_vectors(rows, matrix) == len(ids)  # chunks, not windows
    windows: dict[int, np.ndarray] = {}
    for chunk_id, vector in zip(rows, matrix, strict=True):
        windows[chunk_id] = np.vstack([windows[chunk_id], vector]) if chunk_id in windows else vector[None, :]
    return long_id, windows


def _nearest_chunks(
    windows: dict[int, np.ndarray], query: np.ndarray, k: int, ids: set[int] | None = None
) -> list[int]:
    """The exact top k by each chunk's nearest window (cosine)."""
    unit = query / np.linalg.norm(query)
    nearest = {cid: float((w @ unit).max()) for cid, w in windows.items() if ids is None or cid in ids}
    return sorted(nearest, key=lambda cid: (-nearest[cid], cid))[:k]


def _rows(store: PostgresStore) -> list[tuple[int, int, list[float]]]:
    return [
        (int(cid), int(window), json.loads(text))
        for cid, window, text in store.conn.execute(
            "SELECT id, window_idx, embedding::text FROM chunk_vectors ORDER BY id, window_idx"
        )
    ]


def _stored_singles(store: PostgresStore) -> dict[int, np.ndarray]:
    """The stored vectors of a space whose chunks have one window each."""
    return {cid: np.asarray(vector, dtype=np.float32) for cid, _, vector in _rows(store)}


def test_a_chunk_is_ranked_by_its_nearest_window_once_by_the_index_and_inside_a_scope(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _filled(pg_url, monkeypatch)  # 330 one-window chunks: an HNSW index
    try:
        windows = {cid: vector[None, :] for cid, vector in _stored_singles(store).items()}
        long_id, added = _windowed(store, np.random.default_rng(11))
        windows.update(added)
        assert store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')").fetchone()[0] is not None  # type: ignore[index]
        in_w = {cid for cid, row in store.chunk_rows(windows).items() if row.path.startswith("w/")}
        for scope in (SearchScope(), SearchScope(path="w")):
            hits = store.vec_search(added[long_id][2], 10, scope)
            assert hits[0].chunk_id == long_id and hits[0].score == pytest.approx(0.0, abs=1e-6)
            assert len({hit.chunk_id for hit in hits}) == len(hits)
        assert [hit.chunk_id for hit in store.vec_search(added[long_id][1], 10, SearchScope(path="w"))] == (
            _nearest_chunks(windows, added[long_id][1], 10, in_w)
        )
        for query in _units(np.random.default_rng(12), 5):
            hits = store.vec_search(query, 10, SearchScope())
            assert [hit.chunk_id for hit in hits] == _nearest_chunks(windows, query, 10)
            assert [hit.score for hit in hits] == sorted(hit.score for hit in hits)
    finally:
        store.close()


def test_the_windows_of_one_chunk_crowding_the_nearest_rows_leave_k_chunks(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose many windows are all nearer the query than any other chunk: the search
    reads on until it holds k chunks, with and without the HNSW index."""
    store = _filled(pg_url, monkeypatch)
    try:
        windows = {cid: vector[None, :] for cid, vector in _stored_singles(store).items()}
        query = _units(np.random.default_rng(13), 1)[0]
        with store.transaction():
            store.write_files("s", [_note("crowd.md", ["many windows"])])
        (crowd,) = [row.id for row in store.pending_chunks(10)]
        near = query + 0.01 * _units(np.random.default_rng(14), 40)
        near /= np.linalg.norm(near, axis=1, keepdims=True)
        assert store.store_vectors([crowd] * len(near), near) == 1
        windows[crowd] = near
        expected = _nearest_chunks(windows, query, 10)
        assert expected[0] == crowd
        assert [hit.chunk_id for hit in store.vec_search(query, 10, SearchScope())] == expected
        with store.transaction():
            store.conn.execute("DROP INDEX idx_chunk_vectors_hnsw")  # the exact scan of a small space
        assert [hit.chunk_id for hit in store.vec_search(query, 10, SearchScope())] == expected
        assert [hit.chunk_id for hit in store.vec_search(query, 10, SearchScope(source_ids=("s",)))] == expected
    finally:
        store.close()


def _space(pg_url: str) -> PostgresStore:
    store = PostgresStore.open(pg_url)
    store.reset_vectors(
        DIMS, EmbeddingConfig(provider="ollama", model="t:1", endpoint="http://x", dims=DIMS).identity()
    )
    store.ensure_source("s", "workspace")
    return store


def test_pages_of_vectors_count_chunks_and_never_split_one(pg_url: str) -> None:
    store = _space(pg_url)
    try:
        long_id, windows = _windowed(store, np.random.default_rng(21))
        assert store.counts()["vectors"] == 3 and store.counts()["pending"] == 0
        assert sum(store.vector_language_counts().values()) == 3
        rows = _rows(store)
        assert [(cid, window) for cid, window, _ in rows][:WINDOWS] == [(long_id, n) for n in range(WINDOWS)]
        pages, after = [], 0
        while (page := store.vectors_by_language(after, 1)).ids:
            assert len(set(page.ids)) == 1  # one chunk a page, whole
            pages.append(page)
            after = page.ids[-1]
        assert [page.ids for page in pages] == [[long_id] * WINDOWS] + [[cid] for cid in sorted(windows)[1:]]
        assert pages[0].first_windows().tolist() == [True] + [False] * (WINDOWS - 1)
        whole = store.vectors_by_language(0, 2)
        assert whole.ids == [long_id] * WINDOWS + [sorted(windows)[1]]
        assert np.allclose(whole.matrix[:WINDOWS], windows[long_id])
        everything = store.all_vectors()
        assert everything.ids.tolist() == [cid for cid, _, _ in rows]
        assert np.allclose(everything.matrix, np.asarray([vector for _, _, vector in rows], dtype=np.float32))
    finally:
        store.close()


def test_rewritten_vectors_land_on_their_own_windows(pg_url: str) -> None:
    store = _space(pg_url)
    try:
        long_id, _ = _windowed(store, np.random.default_rng(22))
        page = store.vectors_by_language(0, 10)
        rewritten = page.matrix[::-1].copy()  # every row gets another row's vector
        with store.transaction():
            store.rewrite_vectors(page.ids, rewritten)
        again = store.vectors_by_language(0, 10)
        assert again.ids == page.ids
        assert np.allclose(again.matrix, rewritten)
        assert [window for cid, window, _ in _rows(store) if cid == long_id] == list(range(WINDOWS))
    finally:
        store.close()


def test_a_chunk_s_text_indexed_again_reuses_all_its_windows(pg_url: str) -> None:
    store = _space(pg_url)
    try:
        long_id, windows = _windowed(store, np.random.default_rng(23))
        with store.transaction():
            pending = store.write_files("s", [_note("copy/long.md", ["a long chunk", "new text"])])
        assert pending == 1  # the new text only
        (copy_id,) = [
            cid
            for cid, row in store.chunk_rows(range(1, 100)).items()
            if row.path == "copy/long.md" and row.chunk_idx == 0
        ]
        copied = [vector for cid, _, vector in _rows(store) if cid == copy_id]
        assert np.allclose(np.asarray(copied, dtype=np.float32), windows[long_id])
        assert [window for cid, window, _ in _rows(store) if cid == copy_id] == list(range(WINDOWS))
        assert store.counts()["vectors"] == 4
    finally:
        store.close()


def test_vectors_given_by_content_hash_are_a_chunk_s_windows_concatenated(pg_url: str) -> None:
    store = _space(pg_url)
    try:
        windows = _units(np.random.default_rng(24), WINDOWS)
        long_note, short_note = _note("a.md", ["long"]), _note("b.md", ["short", "missing"])
        given = {
            content_hash(long_note[1].chunks[0].embed_text): windows.tobytes(),
            content_hash(short_note[1].chunks[0].embed_text): windows[0].tobytes(),
        }
        with store.transaction():
            assert store.write_files("s", [long_note, short_note], vectors=given) == 1
        rows = _rows(store)
        assert [window for _, window, _ in rows] == [0, 1, 2, 0]
        assert np.allclose(
            np.asarray([vector for _, _, vector in rows], dtype=np.float32), np.vstack([windows, windows[:1]])
        )
        assert store.counts()["vectors"] == 2 and store.count_pending_all() == 1
    finally:
        store.close()


def test_unembedding_or_deleting_a_chunk_leaves_none_of_its_windows(pg_url: str) -> None:
    store = _space(pg_url)
    try:
        long_id, windows = _windowed(store, np.random.default_rng(25))
        store.unembed([long_id])
        assert long_id not in {cid for cid, _, _ in _rows(store)}
        assert [row.id for row in store.pending_chunks(10)] == [long_id]
        assert store.store_vectors([long_id] * WINDOWS, windows[long_id]) == 1
        assert store.store_vectors([long_id] * WINDOWS, windows[long_id]) == 0  # no longer waiting
        assert [window for cid, window, _ in _rows(store) if cid == long_id] == list(range(WINDOWS))
        with store.transaction():
            store.delete_file("s", "w/long.md")
        assert long_id not in {cid for cid, _, _ in _rows(store)}
        store.remove_source("s")
        assert _rows(store) == [] and store.counts()["vectors"] == 0
    finally:
        store.close()


def test_the_vector_table_of_an_earlier_version_gets_its_windows_on_migration(pg_url: str) -> None:
    """One row per chunk keyed by its id, as every index before windows has it: each row is its
    chunk's first window, searched and paged as before."""
    store = _space(pg_url)
    vectors = fill(store, {"old": 5}, np.random.default_rng(26))  # type: ignore[arg-type]
    with store.transaction():
        store.conn.execute("CREATE TEMPORARY TABLE kept ON COMMIT DROP AS SELECT id, embedding FROM chunk_vectors")
        store.conn.execute("DROP TABLE chunk_vectors")
        store.conn.execute(
            f"""CREATE TABLE chunk_vectors (id BIGINT PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
                                           embedding vector({DIMS}) NOT NULL)"""
        )
        store.conn.execute("INSERT INTO chunk_vectors SELECT id, embedding FROM kept")
        _schema_before(store, "vectors_by_window")
    store.close()
    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        assert [(cid, window) for cid, window, _ in _rows(store)] == [(cid, 0) for cid in sorted(vectors)]
        query = next(iter(vectors.values()))
        assert store.vec_search(query, 1, SearchScope())[0].chunk_id == next(iter(vectors))
        with store.transaction():
            store.write_files("s", [_note("new.md", ["windows"])])
        (new_id,) = [row.id for row in store.pending_chunks(10)]
        assert store.store_vectors([new_id] * 2, _units(np.random.default_rng(27), 2)) == 1
        assert store.counts()["vectors"] == 6
    finally:
        store.close()
