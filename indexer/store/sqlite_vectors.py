"""The vector half of the SQLite `Store`: vec0's KNN scans and the plain BLOB copies beside them.

Each chunk's own vector (its first window's) is in `vec_chunks` (vec0, rowid = chunks.id) and
`chunk_vectors` (BLOBs by chunk id); the further windows of chunks longer than the model reads
are in `vec_windows` (vec0, rowid = window_vectors.id) and `window_vectors` (BLOBs by chunk id
and window). The BLOB copies serve exact search inside a small scope by index lookups instead
of a scan of every vector, and cheap reuse by content hash; a foreign key keeps them in step
with `chunks`. vec0 is not a foreign-key target, so every path that removes chunks removes
their vec0 rows explicitly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import apsw

from indexer.store.core import StoreCore, utc_now
from indexer.store.rows import (
    NearestWindow,
    RankedChunk,
    SearchScope,
    VectorMatrix,
    VectorPage,
    chunk_windows,
)

if TYPE_CHECKING:  # numpy is imported where vectors are touched, keeping lexical queries light
    import numpy as np

MAX_KNN = 4096  # vec0's limit on k
# further windows read per chunk asked for, at first: a search reads more while unread windows
# could still place a chunk among the k nearest (see _nearest_windows)
WINDOWS_PER_RESULT = 4
SCOPED_EXACT_MAX = 20_000  # up to this many chunks in scope, score them directly instead of a vec0 scan


class SqliteVectors(StoreCore):
    """Vectors of the SQLite store: writing, moving and dropping them, and the KNN searches."""

    conn: apsw.Connection
    _vectors_changed: bool

    def has_vector_table(self) -> bool:
        row = self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_chunks'").fetchone()
        return row is not None

    def reset_vectors(self, dims: int, identity: dict[str, str]) -> None:
        """Switch embedding spaces atomically: drop every vector, mark every chunk pending."""
        with self.transaction():
            for table in ("vec_chunks", "vec_windows"):
                self.conn.execute(f"DROP TABLE IF EXISTS {table}")
                self.conn.execute(
                    f"CREATE VIRTUAL TABLE {table} USING vec0(embedding float[{int(dims)}] distance_metric=cosine)"
                )
            self.conn.execute("UPDATE chunks SET embedded_at = NULL WHERE embedded_at IS NOT NULL")
            self.conn.execute("DELETE FROM chunk_vectors")
            self.conn.execute("DELETE FROM window_vectors")
            self.conn.execute("DELETE FROM window_lines")  # cut by another model's tokens
            self._vectors_changed = True
            self._set_meta(identity)
            self._set_meta({"sqlite_vec_version": self.vec_version()})

    def vec_version(self) -> str:
        return str(self._one("SELECT vec_version()"))

    def _delete_vectors(self, id_query: str, params: Sequence[object]) -> None:
        """Delete by rowid one at a time: vec0 answers `rowid IN (subquery)` with a scan of every
        vector (25 ms per file at 100k chunks, even when the list is empty)."""
        if self.has_vector_table():
            ids = [(r[0],) for r in self.conn.execute(id_query, params)]
            if ids:
                self.conn.executemany("DELETE FROM vec_chunks WHERE rowid = ?", ids)
                self._vectors_changed = True
            windows = [
                (r[0],)
                for r in self.conn.execute(f"SELECT id FROM window_vectors WHERE chunk_id IN ({id_query})", params)
            ]
            if windows:  # (their window_vectors rows go with the chunks, by the foreign key)
                self.conn.executemany("DELETE FROM vec_windows WHERE rowid = ?", windows)

    def _vectors_by_hash(self, hashes: set[str]) -> dict[str, bytes]:
        if not hashes or not self.has_vector_table():
            return {}
        found: dict[str, bytes] = {}
        ordered = sorted(hashes)
        for start in range(0, len(ordered), 500):
            part = ordered[start : start + 500]
            marks = ",".join("?" * len(part))
            ids = self.conn.execute(
                f"""SELECT content_hash, MIN(id) FROM chunks
                    WHERE content_hash IN ({marks}) AND embedded_at IS NOT NULL GROUP BY content_hash""",
                part,
            ).fetchall()
            for digest, chunk_id in ids:
                row = self.conn.execute("SELECT embedding FROM chunk_vectors WHERE id = ?", (chunk_id,)).fetchone()
                if row is not None:
                    further = self.conn.execute(
                        "SELECT embedding FROM window_vectors WHERE chunk_id = ? ORDER BY window_idx", (chunk_id,)
                    )
                    found[str(digest)] = b"".join([bytes(row[0]), *(bytes(r[0]) for r in further)])
        return found

    def _vector_dims(self) -> int:
        """The width of this space's vectors (what a carried chunk's bytes are cut by)."""
        return int(self._one("SELECT value FROM meta WHERE key = 'embedding_dims'") or 0)

    def _insert_windows(self, chunk_id: int, blobs: Sequence[bytes]) -> None:
        """A chunk's vectors, one per window (float32 bytes), first window first."""
        first, *further = blobs
        self.conn.execute("INSERT INTO vec_chunks(rowid, embedding) VALUES (?, ?)", (chunk_id, first))
        self.conn.execute("INSERT INTO chunk_vectors(id, embedding) VALUES (?, ?)", (chunk_id, first))
        for window_idx, blob in enumerate(further, start=1):
            self.conn.execute(
                "INSERT INTO window_vectors(chunk_id, window_idx, embedding) VALUES (?, ?, ?)",
                (chunk_id, window_idx, blob),
            )
            self.conn.execute(
                "INSERT INTO vec_windows(rowid, embedding) VALUES (?, ?)", (self.conn.last_insert_rowid(), blob)
            )
        self._vectors_changed = True

    def store_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> int:
        """Attach vectors to chunks that still exist and are still pending. Returns how many."""
        import numpy as np

        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} chunk ids for {len(vectors)} vectors")
        now = utc_now()
        stored = 0
        with self.transaction():
            for chunk_id, windows in chunk_windows(ids, np.asarray(vectors, dtype=np.float32)):
                self.conn.execute(
                    "UPDATE chunks SET embedded_at = ? WHERE id = ? AND embedded_at IS NULL", (now, chunk_id)
                )
                if self.conn.changes() == 1:
                    self._insert_windows(chunk_id, [window.tobytes() for window in windows])
                    stored += 1
        return stored

    def unembed(self, ids: Sequence[int]) -> None:
        """Drop the vectors of these chunks and make them pending again."""
        rows = [(chunk_id,) for chunk_id in ids]
        with self.transaction():
            self.conn.executemany("DELETE FROM vec_chunks WHERE rowid = ?", rows)
            self.conn.executemany("DELETE FROM chunk_vectors WHERE id = ?", rows)
            windows = [
                (r[0],)
                for chunk_id in ids
                for r in self.conn.execute("SELECT id FROM window_vectors WHERE chunk_id = ?", (chunk_id,))
            ]
            if windows:
                self.conn.executemany("DELETE FROM vec_windows WHERE rowid = ?", windows)
                self.conn.executemany("DELETE FROM window_vectors WHERE chunk_id = ?", rows)
            self.conn.executemany("UPDATE chunks SET embedded_at = NULL WHERE id = ?", rows)
            self._vectors_changed = True

    def vec_search(self, vector: np.ndarray, k: int, scope: SearchScope) -> list[RankedChunk]:
        """Chunks by cosine distance, a chunk's being its nearest window's, nearest first: the
        exact top-k inside the scope. A zero vector (stored or asked) has no direction and no
        cosine distance: it is never a hit."""
        import numpy as np

        if k <= 0 or not self.has_vector_table() or not np.any(vector):
            return []
        params: dict[str, object] = {"q": np.asarray(vector, dtype=np.float32).tobytes()}
        chunks_in_scope = windows_in_scope = ""
        if not scope.is_all:
            where, scope_params = self._scope_condition(scope, "c")
            params.update(scope_params)
            in_scope = int(
                self._one(f"SELECT COUNT(*) FROM chunks c WHERE {where} AND c.embedded_at IS NOT NULL", scope_params)
            )
            if in_scope <= SCOPED_EXACT_MAX:
                return self._scoped_exact(params, k, where)
            # a large scope: the KNN scans with rowid IN (...) inside them (still the true top-k)
            chunks_in_scope = f"AND rowid IN (SELECT c.id FROM chunks c WHERE {where} AND c.embedded_at IS NOT NULL)"
            windows_in_scope = f"""AND rowid IN (SELECT w.id FROM window_vectors w JOIN chunks c ON c.id = w.chunk_id
                                                 WHERE {where})"""
        firsts = self.conn.execute(
            f"SELECT rowid, distance FROM vec_chunks WHERE embedding MATCH :q AND k = :k {chunks_in_scope}",
            {**params, "k": min(k, MAX_KNN)},
        )
        nearest = {int(r[0]): float(r[1]) for r in firsts if r[1] is not None}
        return self._nearest_windows(nearest, params, k, windows_in_scope)

    def _nearest_windows(
        self, nearest: dict[int, float], params: dict[str, object], k: int, in_scope: str
    ) -> list[RankedChunk]:
        """The k nearest chunks from the nearest first windows (`nearest`) and the further
        windows. Further windows are read nearest first, more of them while one not yet read
        could still be nearer than the k-th chunk found (a chunk whose first window is outside
        the k nearest first windows can only get in by a further window)."""
        fetch = min(k * WINDOWS_PER_RESULT, MAX_KNN)
        found = dict(nearest)
        more = self.conn.execute("SELECT 1 FROM window_vectors LIMIT 1").fetchone() is not None
        while more:
            rows = self.conn.execute(
                f"""SELECT w.chunk_id, v.distance FROM (
                        SELECT rowid, distance FROM vec_windows WHERE embedding MATCH :q AND k = :k {in_scope}) v
                    JOIN window_vectors w ON w.id = v.rowid ORDER BY v.distance""",
                {**params, "k": fetch},
            ).fetchall()
            found = dict(nearest)
            farthest = 0.0
            for row in rows:
                chunk_id, distance = int(row[0]), row[1]  # type: ignore[arg-type]
                if distance is not None:
                    farthest = float(distance)
                    found[chunk_id] = min(farthest, found.get(chunk_id, farthest))
            kth = sorted(found.values())[k - 1] if len(found) >= k else float("inf")
            more = len(rows) == fetch and fetch < MAX_KNN and kth > farthest
            fetch = min(fetch * 2, MAX_KNN)
        ranked = sorted(found.items(), key=lambda item: (item[1], item[0]))[:k]
        return [RankedChunk(chunk_id, distance) for chunk_id, distance in ranked]

    def nearest_windows(self, vector: np.ndarray, ids: Iterable[int]) -> dict[int, NearestWindow]:
        """Which window of each of these chunks is nearest `vector`, for those with further
        windows (window_vectors holds the second on; the first is the chunk's own vector)."""
        import numpy as np

        wanted = sorted(set(ids))
        if not wanted or not self.has_vector_table():
            return {}
        marks = ",".join("?" * len(wanted))
        query = np.asarray(vector, dtype=np.float32).tobytes()
        further = self.conn.execute(
            f"""SELECT chunk_id, window_idx, vec_distance_cosine(embedding, ?) FROM window_vectors
                WHERE chunk_id IN ({marks})""",
            (query, *wanted),
        ).fetchall()
        if not further:
            return {}
        firsts = self.conn.execute(
            f"SELECT id, 0, vec_distance_cosine(embedding, ?) FROM chunk_vectors WHERE id IN ({marks})",
            (query, *wanted),
        ).fetchall()
        return self._nearest_window_with_lines([*firsts, *further])

    def _scoped_exact(self, params: dict[str, object], k: int, where: str) -> list[RankedChunk]:
        """Exact distances over the scope's own vectors, every window, found through the path
        index: a chunk's distance is its nearest window's."""
        sql = f"""SELECT id, MIN(distance) AS nearest FROM (
                      SELECT c.id, vec_distance_cosine(v.embedding, :q) AS distance
                      FROM chunks c JOIN chunk_vectors v ON v.id = c.id WHERE {where}
                      UNION ALL
                      SELECT c.id, vec_distance_cosine(w.embedding, :q) AS distance
                      FROM chunks c JOIN window_vectors w ON w.chunk_id = c.id WHERE {where})
                  WHERE distance IS NOT NULL GROUP BY id ORDER BY nearest, id LIMIT :k"""
        return [RankedChunk(int(r[0]), float(r[1])) for r in self.conn.execute(sql, {**params, "k": k})]

    def vectors_by_language(self, after_id: int, limit: int) -> VectorPage:
        """The stored vectors of up to `limit` chunks after `after_id`, by id (a chunk's windows
        under its repeated id, first window first), with their chunks' languages."""
        import numpy as np

        rows = self.conn.execute(
            """SELECT v.id, COALESCE(c.language, 'unknown'), v.embedding FROM chunk_vectors v
               JOIN chunks c ON c.id = v.id WHERE v.id > ? ORDER BY v.id LIMIT ?""",
            (after_id, limit),
        ).fetchall()
        if not rows:
            return VectorPage([], [], np.empty((0, 0), np.float32))
        further: dict[int, list[bytes]] = {}
        for chunk_id, blob in self.conn.execute(
            """SELECT chunk_id, embedding FROM window_vectors WHERE chunk_id BETWEEN ? AND ?
               ORDER BY chunk_id, window_idx""",
            (rows[0][0], rows[-1][0]),
        ):
            further.setdefault(int(chunk_id), []).append(bytes(blob))
        ids: list[int] = []
        languages: list[str] = []
        blobs: list[bytes] = []
        for chunk_id, language, first in rows:
            windows = [bytes(first), *further.get(int(chunk_id), ())]  # type: ignore[arg-type]
            ids += [int(chunk_id)] * len(windows)  # type: ignore[arg-type]
            languages += [str(language)] * len(windows)
            blobs += windows
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), -1)
        return VectorPage(ids, languages, matrix)

    def rewrite_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Replace stored vectors in place (every copy), rows as `vectors_by_language` gives
        them. Call inside `transaction()`."""
        import numpy as np

        for chunk_id, windows in chunk_windows(ids, np.asarray(vectors, dtype=np.float32)):
            first, *further = (window.tobytes() for window in windows)
            self.conn.execute("UPDATE vec_chunks SET embedding = ? WHERE rowid = ?", (first, chunk_id))
            self.conn.execute("UPDATE chunk_vectors SET embedding = ? WHERE id = ?", (first, chunk_id))
            for window_idx, blob in enumerate(further, start=1):
                row = self.conn.execute(
                    "UPDATE window_vectors SET embedding = ? WHERE chunk_id = ? AND window_idx = ? RETURNING id",
                    (blob, chunk_id, window_idx),
                ).fetchone()
                if row is not None:
                    self.conn.execute("UPDATE vec_windows SET embedding = ? WHERE rowid = ?", (blob, row[0]))
        self._vectors_changed = True

    def all_vectors(self) -> VectorMatrix:
        """Every stored vector (what search.resident keeps in memory), a chunk's windows under
        its repeated id, first window first."""
        import numpy as np

        ids: list[int] = []
        buffer = bytearray()  # grown in place: no second copy of every vector while loading
        further = self.conn.execute("SELECT chunk_id, embedding FROM window_vectors ORDER BY chunk_id, window_idx")
        pending = next(further, None)
        for chunk_id, blob in self.conn.execute("SELECT id, embedding FROM chunk_vectors ORDER BY id"):
            ids.append(chunk_id)
            buffer += blob
            while pending is not None and pending[0] <= chunk_id:
                if pending[0] == chunk_id:
                    ids.append(chunk_id)
                    buffer += pending[1]
                pending = next(further, None)
        matrix = np.frombuffer(buffer, dtype=np.float32).reshape(len(ids), -1) if ids else np.empty((0, 0), np.float32)
        return VectorMatrix(np.array(ids, dtype=np.int64), matrix)
