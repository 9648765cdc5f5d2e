"""Vectors on PostgreSQL: pgvector's binary wire format, the HNSW index's parameters, its bulk
builds and rebuilds, and `PgVectors`, the store's vector methods."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Dumper
from psycopg.pq import Format

from indexer.store.core import StoreCore, utc_now
from indexer.store.postgres.connection import ASYNC_COMMIT, OpenIndex, describe
from indexer.store.postgres.tsvector import scope_condition
from indexer.store.rows import (
    NearestWindow,
    RankedChunk,
    SearchScope,
    VectorMatrix,
    VectorPage,
)

if TYPE_CHECKING:  # numpy is imported where vectors are touched, keeping lexical queries light
    import numpy as np


log = logging.getLogger("notes_search.store")


HNSW_BUILD_LOCK = 0x6E6F7466  # and build the vector index once
HNSW_MIN_VECTORS = 10_000  # below this an exact scan answers unscoped KNN (see _index_vectors_once_many)

# The HNSW graph: HNSW_M links per vector (pgvector's default), each linked in through a
# candidate list of ef_construction. pgvector's default 64 leaves part of a large clustered index
# unreachable however long the search's list, so from HNSW_WIDE_FROM vectors it is 128 (m = 32:
# no better, built 2x slower); below, 64 already finds every exact top 10 and builds in half
# the time (most of a first sync's store writes). An index built small is built again once it
# has grown past HNSW_WIDE_FROM. Figures: bench/RESULTS.md, the store's tuning.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128
HNSW_EF_CONSTRUCTION_SMALL = 64
HNSW_WIDE_FROM = 100_000


def hnsw_options(vectors: int) -> tuple[str, str]:
    """The graph's parameters for an index over `vectors`, as pg_class.reloptions lists them."""
    ef_construction = HNSW_EF_CONSTRUCTION if vectors >= HNSW_WIDE_FROM else HNSW_EF_CONSTRUCTION_SMALL
    return (f"m={HNSW_M}", f"ef_construction={ef_construction}")


def hnsw_graph(reloptions: Sequence[str] | None) -> tuple[str, str]:
    """An HNSW index's graph parameters from its reloptions, pgvector's defaults filled in (an
    index built without options has none listed)."""
    listed = dict(option.split("=", 1) for option in reloptions or ())
    return (f"m={listed.get('m', '16')}", f"ef_construction={listed.get('ef_construction', '64')}")


# The graph holds half-precision copies of the vectors (`halfvec`), the table the floats: the
# index is nearly half the size at the same recall, which leaves the buffer pool (the keyword and
# vector halves share it) room for both. The distances shown, and the hits' order, come from the floats.
# pgvector indexes at most 4,000 dimensions of halfvec (2,000 of vector: text-embedding-3-large
# has 3,072); a wider space is scanned exactly.
HNSW_HALFVEC_MAX_DIMS = 4_000
HNSW_OPERATORS = "halfvec_cosine_ops"


def hnsw_key(dims: int) -> str | None:
    """What the HNSW index orders by for vectors of `dims` (None: too wide for any)."""
    return f"(embedding::halfvec({int(dims)}))" if dims <= HNSW_HALFVEC_MAX_DIMS else None


def hnsw_index_sql(name: str, vectors: int, dims: int) -> str | None:
    key = hnsw_key(dims)
    if key is None:
        return None
    return (
        f"CREATE INDEX IF NOT EXISTS {name} ON chunk_vectors USING hnsw ({key} {HNSW_OPERATORS})"
        f" WITH ({', '.join(hnsw_options(vectors))})"
    )


# maintenance_work_mem for the build: a graph that fits in it is built several times faster
# (pgvector warns when it does not). Per vector the graph holds its floats and about 1 KB of
# links and header (m = 16: 32 neighbours on the ground layer); a quarter more for the rest
GRAPH_BYTES_PER_VECTOR = 1024
BUILD_MEMORY_MIN_MB = 1024
BUILD_MEMORY_MAX_MB = 8192  # a server with less to give builds on disk, slower but the same index


def build_memory(vectors: int, dims: int) -> str:
    """maintenance_work_mem for building the HNSW index over `vectors` vectors of `dims`."""
    need_mb = vectors * (dims * 4 + GRAPH_BYTES_PER_VECTOR) * 1.25 / 2**20
    return f"{int(min(max(need_mb, BUILD_MEMORY_MIN_MB), BUILD_MEMORY_MAX_MB))}MB"


# HNSW candidate list: at least this, and four times k (pgvector's cap is 1000), growing with
# the index from EF_GROWS_FROM vectors to the cap at EF_GROWS_TO. On clustered vectors a short
# list can settle in the wrong cluster entirely (recall 0 for that query); 400 costs a couple of
# milliseconds more than 64 a query
EF_SEARCH_MIN = 400
EF_SEARCH_PER_RESULT = 4
EF_SEARCH_MAX = 1000
EF_GROWS_FROM = 300_000
EF_GROWS_TO = 1_000_000


def window_numbers(ids: Sequence[int]) -> list[int]:
    """Each row's window within its chunk, for rows that repeat a chunk's id once per window,
    first window first: 0 at a chunk's first row, then 1, 2..."""
    seen: dict[int, int] = {}
    numbers = []
    for chunk_id in ids:
        number = seen.get(int(chunk_id), 0)
        numbers.append(number)
        seen[int(chunk_id)] = number + 1
    return numbers


# rows an unscoped search reads from the HNSW index per chunk it returns: a chunk's windows
# (about half of real notes' chunks have two or more) may stand side by side in the nearest rows.
# Too few distinct chunks among them reads again, twice as many.
HITS_READ_PER_CHUNK = 2


class _VectorDumper(Dumper):
    """numpy arrays as pgvector `vector` parameters (binary: uint16 dims, uint16 0, float4 BE)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        import numpy as np

        values = np.asarray(obj, dtype=">f4").ravel()
        return struct.pack(">HH", values.size, 0) + values.tobytes()


def vector_bytes(sent: bytes) -> bytes:
    """Little-endian float32 values from `vector_send` output (4 header bytes, then BE float4)."""
    import numpy as np

    return np.frombuffer(sent, dtype=">f4", offset=4).astype(np.float32).tobytes()


def rebuild_vector_index(store: OpenIndex) -> None:
    """An HNSW index built with other parameters than `hnsw_options` gives for its size
    (pgvector's defaults, or the small graph of an index that has grown since), or over the
    float vectors rather than their half-precision copies (see HNSW_OPERATORS), is built again:
    as a new index beside it, swapped in at the end, so readers keep searching the old one
    meanwhile (the build blocks writes to the chunks and vectors, not reads). It takes as long
    as the first build did (minutes at a million vectors), once."""
    row = store.conn.execute(
        "SELECT reloptions, pg_get_indexdef(oid) FROM pg_class WHERE oid = to_regclass('idx_chunk_vectors_hnsw')"
    ).fetchone()
    if row is None:
        return

    # the chunks first, as a writer takes them (a file's chunks, then their vectors), and as the
    # path index after this step needs them: holding the vectors while waiting for the chunks an
    # earlier version's sync holds, itself waiting for the vectors, is a deadlock that aborts
    # the whole rebuild (both share locks block writes only, as the build does anyway)
    store.conn.execute("LOCK TABLE chunks, chunk_vectors IN SHARE MODE")
    vectors, dims = store.conn.execute(
        "SELECT count(*), (SELECT vector_dims(embedding) FROM chunk_vectors LIMIT 1) FROM chunk_vectors"
    ).fetchone() or (0, 0)
    if hnsw_graph(row[0]) == hnsw_options(int(vectors)) and HNSW_OPERATORS in str(row[1]):
        return
    log.info("index %s: rebuilding the vector index (%d vectors, once)", describe(store.url), vectors)
    store.conn.execute(
        "SELECT set_config('maintenance_work_mem', %s, true)", (build_memory(int(vectors), int(dims or 0)),)
    )
    store.conn.execute("DROP INDEX IF EXISTS idx_chunk_vectors_hnsw_rebuilt")
    rebuilt = hnsw_index_sql("idx_chunk_vectors_hnsw_rebuilt", int(vectors), int(dims or 0))
    assert rebuilt is not None  # an index exists, so the vectors are narrow enough for one
    store.conn.execute(rebuilt)
    _take_whole(store, "chunks, chunk_vectors")
    store.conn.execute("DROP INDEX idx_chunk_vectors_hnsw")
    store.conn.execute("ALTER INDEX idx_chunk_vectors_hnsw_rebuilt RENAME TO idx_chunk_vectors_hnsw")


SWAP_LOCK_TRIES = 1200  # at SWAP_LOCK_PAUSE apart: a minute, then a plain wait
SWAP_LOCK_PAUSE = 0.05


def _take_whole(store: OpenIndex, tables: str) -> None:
    """Exclusive locks on `tables` for dropping their indexes, all at once and without waiting:
    a search of an earlier version holds one table in its snapshot and then reads the other, so
    holding one whole while waiting for the other is a deadlock that aborts the migration.
    Searches meanwhile go on; each refused try is undone to a savepoint and tried again."""
    for _ in range(SWAP_LOCK_TRIES):
        store.conn.execute("SAVEPOINT vector_index_swap")
        try:
            store.conn.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE NOWAIT")
        except pg_errors.LockNotAvailable:
            store.conn.execute("ROLLBACK TO SAVEPOINT vector_index_swap")
            time.sleep(SWAP_LOCK_PAUSE)
            continue
        store.conn.execute("RELEASE SAVEPOINT vector_index_swap")
        return
    store.conn.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")


class PgVectors(StoreCore):
    """The vector half of `PostgresStore`: pgvector's table, its HNSW index (built once a space
    holds HNSW_MIN_VECTORS, in bulk when a block of vectors is loaded) and the KNN searches."""

    conn: psycopg.Connection[Any]
    url: str
    _vectors_changed: bool
    _vector_oid: int | None
    _has_vectors: bool
    _hnsw_ready: bool

    def has_vector_table(self) -> bool:
        # once there, the table stays (reset_vectors replaces it within one transaction)
        if not self._has_vectors:
            self._has_vectors = bool(self._one("SELECT to_regclass('chunk_vectors') IS NOT NULL"))
        return self._has_vectors

    def reset_vectors(self, dims: int, identity: dict[str, str]) -> None:
        """Switch embedding spaces atomically: drop every vector, mark every chunk pending. A
        row per window the model read of a chunk (`window_idx` 0 is the first, the chunk's own
        vector), so a chunk's rows are one range of the primary key."""
        with self.transaction():
            self.conn.execute("DROP TABLE IF EXISTS chunk_vectors")
            self.conn.execute(
                f"""CREATE TABLE chunk_vectors (
                      id         BIGINT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
                      window_idx SMALLINT NOT NULL DEFAULT 0,
                      embedding  vector({int(dims)}) NOT NULL,
                      PRIMARY KEY (id, window_idx)
                    )""".encode()
            )
            self.conn.execute("UPDATE chunks SET embedded_at = NULL WHERE embedded_at IS NOT NULL")
            self.conn.execute("DELETE FROM window_lines")  # cut by another model's tokens
            self._vectors_changed = True
            self._hnsw_ready = False
            self._set_meta(identity)
            self._set_meta({"pgvector_version": self.vec_version()})

    def _vector_dims(self) -> int:
        """The width of the space's vectors: the embedding column's declared dimensions."""
        return int(
            self._one(
                """SELECT atttypmod FROM pg_attribute
                   WHERE attrelid = 'chunk_vectors'::regclass AND attname = 'embedding'"""
            )
        )

    def counts(self) -> dict[str, int]:
        """The shared diagnostic counts, "vectors" counting chunks (their first windows), not
        the rows of their windows."""
        counts = super().counts()
        if counts["vectors"]:
            counts["vectors"] = int(self._one("SELECT count(*) FROM chunk_vectors WHERE window_idx = 0"))
        return counts

    def vec_version(self) -> str:
        return str(self._one("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))

    def _register_vector_type(self) -> None:
        oid = self._one("SELECT oid FROM pg_type WHERE typname = 'vector'")
        if self._vector_oid != oid:
            self._use_vector_oid(int(oid))

    def _use_vector_oid(self, oid: int) -> None:
        self._vector_oid = oid
        dumper = type("VectorDumper", (_VectorDumper,), {"oid": oid})
        self.conn.adapters.register_dumper("numpy.ndarray", dumper)

    def _insert_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Rows (chunk id, vector) into chunk_vectors, a chunk's windows consecutive under its
        repeated id, first window first, by binary COPY (one round trip)."""
        assert self._vector_oid is not None
        with (
            self.conn.cursor() as cursor,
            cursor.copy("COPY chunk_vectors (id, window_idx, embedding) FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types([20, 21, self._vector_oid])  # int8, int2, vector
            for chunk_id, window, vector in zip(ids, window_numbers(ids), vectors, strict=True):
                copy.write_row((chunk_id, window, vector))
        self._vectors_changed = True

    def _insert_carried(self, carried: Sequence[tuple[int, bytes]]) -> None:
        """(chunk id, its windows' float32 vectors concatenated) pairs into chunk_vectors."""
        import numpy as np

        dims = self._vector_dims()
        ids: list[int] = []
        windows: list[np.ndarray] = []
        for chunk_id, blob in carried:
            matrix = np.frombuffer(blob, dtype=np.float32).reshape(-1, dims)
            ids.extend([chunk_id] * len(matrix))
            windows.extend(matrix)
        self._insert_vectors(ids, np.asarray(windows, dtype=np.float32))

    def store_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> int:
        """Attach vectors to chunks that still exist and are still pending (a chunk's windows
        consecutive under its repeated id). Returns how many chunks."""
        import numpy as np

        if not len(ids):
            return 0
        with self.transaction():
            with self.conn.pipeline():
                self.conn.execute(ASYNC_COMMIT)
                marked = self.conn.execute(
                    "UPDATE chunks SET embedded_at = %s WHERE id = ANY(%s) AND embedded_at IS NULL RETURNING id",
                    (utc_now(), sorted({int(i) for i in ids})),
                )
            waiting = {int(r[0]) for r in marked.fetchall()}
            kept = [n for n, chunk_id in enumerate(ids) if int(chunk_id) in waiting]
            if kept:
                self._insert_vectors([int(ids[n]) for n in kept], np.asarray(vectors, dtype=np.float32)[kept])
        if kept:
            self._index_vectors_once_many()
        return len(waiting)

    def unembed(self, ids: Sequence[int]) -> None:
        """Drop the vectors (every window) of these chunks and make them pending again."""
        with self.transaction():
            self.conn.execute("DELETE FROM chunk_vectors WHERE id = ANY(%s)", ([int(i) for i in ids],))
            self.conn.execute("UPDATE chunks SET embedded_at = NULL WHERE id = ANY(%s)", ([int(i) for i in ids],))
            self._vectors_changed = True

    def bulk_load(self, *, whole_space: bool = False) -> AbstractContextManager[None]:
        """The HNSW index built once after the block's vectors are in, instead of kept up vector
        by vector (an HNSW insert costs a graph search each; a build links them all in one pass,
        several times faster for a whole index), with memory for the whole graph.

        The store builds the index itself once a space holds HNSW_MIN_VECTORS and keeps it up
        from then on; during a bulk load that build is held back. `whole_space` (a copy filling
        a space anew): an index already there is dropped first. Otherwise (a sync's embedding
        pass) only a space without an index holds it back, and only while at least
        HNSW_MIN_VECTORS chunks wait. Meanwhile unscoped vector searches scan every vector
        (exact, slower); a run killed meanwhile leaves the space without the index until the
        next sync's embedding pass (which builds it, even with nothing to embed), or a copy's
        rerun with `--force` starts the space again."""
        return self._index_deferred() if whole_space else self._index_held_back()

    @contextmanager
    def _index_deferred(self) -> Iterator[None]:
        """Drop the HNSW index and build none while the block stores vectors, then build it
        once (at HNSW_MIN_VECTORS). A failed block leaves the index to the next store_vectors."""
        with self.transaction():
            self.conn.execute("DROP INDEX IF EXISTS idx_chunk_vectors_hnsw")
        with self._bulk_load():
            yield

    @contextmanager
    def _index_held_back(self) -> Iterator[None]:
        """While the block attaches vectors to at least HNSW_MIN_VECTORS pending chunks of a
        space that has no HNSW index yet (a first sync, a new embedding space), build none midway
        and keep none up: build it once after the block, as `_index_deferred` does. An index
        already there is kept and kept up. With fewer waiting, a space that holds enough vectors
        but no index (a run stopped between its last vectors and its build: nothing is pending,
        so no store_vectors would ever build it) gets it before the block."""
        if not self.has_vector_table() or not self._one("SELECT to_regclass('idx_chunk_vectors_hnsw') IS NULL"):
            yield
            return
        waiting = self._one(
            "SELECT count(*) FROM (SELECT 1 FROM chunks WHERE embedded_at IS NULL LIMIT %s) waiting",
            (HNSW_MIN_VECTORS,),
        )
        if int(waiting) < HNSW_MIN_VECTORS:
            self._build_vector_index()  # nothing below HNSW_MIN_VECTORS vectors
            yield
            return
        with self._bulk_load():
            yield

    @contextmanager
    def _bulk_load(self) -> Iterator[None]:
        """No HNSW upkeep while the block stores vectors; after it, one bulk build and fresh
        planner statistics (a failed block leaves both to later writes and autovacuum)."""
        self._hnsw_ready = True  # "built": no store_vectors builds it midway
        try:
            yield
        finally:
            self._hnsw_ready = False
        self._build_vector_index()
        self._analyze_bulk_load()

    def _analyze_bulk_load(self) -> None:
        """Refresh the planner's statistics after a bulk load. Until autovacuum gets to it, the
        planner would take the filled tables for the empty ones it last saw, and the keyword
        search's pass planning (which picks the cheapest exact candidate set by the planner's row
        estimates) would choose blindly: still exact, but slower."""
        tables = ["files", "file_tags", "chunks", "chunks_fts"] + (["chunk_vectors"] if self.has_vector_table() else [])
        self.conn.execute(f"ANALYZE {', '.join(tables)}")

    def _build_vector_index(self) -> None:
        """Build the HNSW index (at HNSW_MIN_VECTORS) with memory for the whole graph."""
        if not self.has_vector_table():
            return
        vectors, dims = self.conn.execute(
            "SELECT count(*), (SELECT vector_dims(embedding) FROM chunk_vectors LIMIT 1) FROM chunk_vectors"
        ).fetchone() or (0, 0)
        self.conn.execute(
            "SELECT set_config('maintenance_work_mem', %s, false)", (build_memory(int(vectors), int(dims or 0)),)
        )
        try:
            self._index_vectors_once_many()
        finally:
            self.conn.execute("RESET maintenance_work_mem")

    def _index_vectors_once_many(self) -> None:
        """Build the HNSW index once the space holds HNSW_MIN_VECTORS vectors. Below that an
        unscoped search scans them exactly in a few milliseconds, and writes skip the index's
        upkeep (most of the cost of storing a vector); a first sync builds it once, in bulk."""
        if self._hnsw_ready:
            return
        if not self._one("SELECT to_regclass('idx_chunk_vectors_hnsw') IS NULL"):
            self._widen_grown_vector_index()
            self._hnsw_ready = True
            return
        vectors = int(self._one("SELECT count(*) FROM chunk_vectors"))
        if vectors < HNSW_MIN_VECTORS:
            return
        index = hnsw_index_sql("idx_chunk_vectors_hnsw", vectors, self._vector_dims())
        if index is not None:
            with self.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (HNSW_BUILD_LOCK,))  # one worker builds it
                self.conn.execute(index)
        self._hnsw_ready = True

    def _widen_grown_vector_index(self) -> None:
        """An index built small (HNSW_EF_CONSTRUCTION_SMALL) that has since grown past
        HNSW_WIDE_FROM vectors is built again with the wide graph, once, by the first writer that
        sees it (the planner's row count decides cheaply; the rebuild counts exactly)."""
        row = self.conn.execute(
            """SELECT i.reloptions, v.reltuples FROM pg_class i, pg_class v
               WHERE i.oid = to_regclass('idx_chunk_vectors_hnsw') AND v.oid = 'chunk_vectors'::regclass"""
        ).fetchone()
        if row is None or float(row[1]) < HNSW_WIDE_FROM or hnsw_graph(row[0]) == hnsw_options(HNSW_WIDE_FROM):
            return
        with self.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (HNSW_BUILD_LOCK,))  # one worker rebuilds it
            rebuild_vector_index(self)

    def vec_search(self, vector: np.ndarray, k: int, scope: SearchScope) -> list[RankedChunk]:
        """Chunks by the cosine distance of their nearest window, nearest first, each once.
        Unscoped: the HNSW index (approximate, with a candidate list of at least 4k, longer in a
        larger index), or an exact scan while there are too few vectors for one
        (HNSW_MIN_VECTORS). Scoped: exact over the scope's own vectors (a materialised set, so
        no index scan can cut it short). A zero vector is never a hit."""
        import numpy as np

        if k <= 0 or not self.has_vector_table() or not np.any(vector):
            return []
        query = np.asarray(vector, dtype=np.float32)
        if scope.is_all:
            # the index's size from the planner's estimate (kept by index builds and autovacuum);
            # strict_order: k beyond ef_search still gets k
            self.conn.execute(
                """SELECT set_config('hnsw.ef_search', LEAST(%(max)s, GREATEST(%(min)s, %(per_k)s,
                              %(min)s + (%(max)s - %(min)s) * (c.reltuples - %(from)s) / %(span)s))::int::text, false),
                          set_config('hnsw.iterative_scan', 'strict_order', false)
                   FROM pg_class c WHERE c.oid = 'chunk_vectors'::regclass""",
                {
                    "max": EF_SEARCH_MAX,
                    "min": EF_SEARCH_MIN,
                    "per_k": EF_SEARCH_PER_RESULT * k,
                    "from": EF_GROWS_FROM,
                    "span": EF_GROWS_TO - EF_GROWS_FROM,
                },
            )
            rows = self._nearest_rows(query, k)
        else:
            where, params = scope_condition(scope, "c")
            params.update(q=query, k=k)
            # the scope's ids first, sorted, then their vectors in one index scan over them (leaf
            # pages read in turn, each heap page once) instead of a descent per chunk from a join
            rows = self.conn.execute(
                f"""WITH scoped AS MATERIALIZED (
                        SELECT v.id, v.embedding <=> %(q)s AS distance FROM chunk_vectors v
                        WHERE v.id = ANY(ARRAY(SELECT c.id FROM chunks c WHERE {where} ORDER BY c.id)))
                    SELECT id, min(distance) AS nearest FROM scoped WHERE distance <> 'NaN'
                    GROUP BY id ORDER BY nearest, id LIMIT %(k)s""",
                params,
                prepare=False,  # planned for this scope's size each time
            ).fetchall()
        nearest: dict[int, float] = {}
        for chunk_id, distance in rows:
            if distance == distance and distance < nearest.get(int(chunk_id), float("inf")):
                nearest[int(chunk_id)] = float(distance)
        hits = [RankedChunk(chunk_id, distance) for chunk_id, distance in nearest.items()]
        hits.sort(key=lambda hit: (hit.score, hit.chunk_id))
        return hits[:k]

    def nearest_windows(self, vector: np.ndarray, ids: Iterable[int]) -> dict[int, NearestWindow]:
        """Which window of each of these chunks is nearest `vector`, for those with more than one."""
        import numpy as np

        wanted = sorted(set(ids))
        if not wanted or not self.has_vector_table():
            return {}
        rows = self.conn.execute(
            "SELECT id, window_idx, embedding <=> %(q)s FROM chunk_vectors WHERE id = ANY(%(ids)s)",
            {"q": np.asarray(vector, dtype=np.float32), "ids": wanted},
        ).fetchall()
        return self._nearest_window_with_lines(rows)

    def _nearest_rows(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The unscoped search's nearest rows (windows) in the index's order, read until they
        hold `k` chunks or every row (HITS_READ_PER_CHUNK rows a chunk at first)."""
        dims = len(query)  # the column's width: pgvector compares no vectors of two
        key = hnsw_key(dims)
        order = "embedding <=> %(q)s" if key is None else f"{key} <=> %(q)s::halfvec({dims})"
        rows_read = HITS_READ_PER_CHUNK * k
        while True:
            rows = self.conn.execute(
                f"""SELECT id, embedding <=> %(q)s AS distance FROM chunk_vectors
                    ORDER BY {order} LIMIT %(n)s""",
                {"q": query, "n": rows_read},
                prepare=False,  # planned for this query each time
            ).fetchall()
            if len(rows) < rows_read or len({chunk_id for chunk_id, _ in rows}) >= k:
                return rows
            rows_read *= 2

    def vectors_by_language(self, after_id: int, limit: int) -> VectorPage:
        """Every window of the next `limit` chunks with vectors (their first windows name them)."""
        import numpy as np

        if not self.has_vector_table():
            return VectorPage([], [], np.empty((0, 0), np.float32))
        rows = self.conn.execute(
            """SELECT v.id, COALESCE(c.language, 'unknown'), vector_send(v.embedding) FROM chunk_vectors v
               JOIN chunks c ON c.id = v.id
               WHERE v.id > %(after)s AND v.id <= (
                   SELECT max(id) FROM (SELECT id FROM chunk_vectors WHERE id > %(after)s AND window_idx = 0
                                        ORDER BY id LIMIT %(limit)s) page)
               ORDER BY v.id, v.window_idx""",
            {"after": after_id, "limit": limit},
            binary=True,
        ).fetchall()
        if not rows:
            return VectorPage([], [], np.empty((0, 0), np.float32))
        matrix = np.frombuffer(b"".join(vector_bytes(bytes(r[2])) for r in rows), dtype=np.float32)
        return VectorPage([int(r[0]) for r in rows], [str(r[1]) for r in rows], matrix.reshape(len(rows), -1).copy())

    def rewrite_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Replace stored vectors in place, rows as `vectors_by_language` gives them (a chunk's
        windows in order under its repeated id). Inside a transaction."""
        import numpy as np

        with self.conn.cursor() as cursor:
            cursor.executemany(
                "UPDATE chunk_vectors SET embedding = %s WHERE id = %s AND window_idx = %s",
                [
                    (np.asarray(vector, dtype=np.float32), int(chunk_id), window)
                    for chunk_id, window, vector in zip(ids, window_numbers(ids), vectors, strict=True)
                ],
            )
        self._vectors_changed = True

    def all_vectors(self) -> VectorMatrix:
        import numpy as np

        ids: list[int] = []
        buffer = bytearray()
        if self.has_vector_table():
            with self.conn.cursor(binary=True) as cursor:
                for chunk_id, sent in cursor.execute(
                    "SELECT id, vector_send(embedding) FROM chunk_vectors ORDER BY id, window_idx"
                ):
                    ids.append(int(chunk_id))
                    buffer += vector_bytes(bytes(sent))
        matrix = np.frombuffer(buffer, dtype=np.float32).reshape(len(ids), -1) if ids else np.empty((0, 0), np.float32)
        return VectorMatrix(np.array(ids, dtype=np.int64), matrix)
