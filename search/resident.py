"""Every vector of the index held in memory, for a process that answers many queries.

vec0 answers an unscoped KNN by scanning every stored vector (about 75 ms at 100,000 chunks of
384 d on the reference machine); a matrix product over the same vectors kept in one numpy array
takes about 9 ms. Loading the array costs ~0.7 s at that size, so only the long-lived MCP server
keeps one, and it never makes a query wait for it: while the copy is missing or older than the
index (the index's vector generation moved: a sync changed vectors), `knn` returns None, the
caller uses vec0 for that query, and a background thread loads the current vectors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from indexer.store.rows import RankedChunk

if TYPE_CHECKING:
    from indexer.store import IndexReader

log = logging.getLogger("notes_search.resident")
RELOAD_INTERVAL_S = 5.0  # at most one load per interval: a watcher can commit every second


@dataclass(frozen=True)
class _Copy:
    generation: str
    ids: np.ndarray  # chunk ids, ascending, one per chunk
    unit: np.ndarray  # unit-length float32 rows, a chunk's windows consecutive
    starts: np.ndarray | None  # each chunk's first row in `unit`; None: one row per chunk

    @classmethod
    def of(cls, generation: str, ids: np.ndarray, unit: np.ndarray) -> _Copy:
        """`ids` one per row of `unit`, a chunk's windows under its repeated id."""
        if len(ids) < 2 or bool(np.all(ids[1:] != ids[:-1])):
            return cls(generation, ids, unit, None)
        starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
        return cls(generation, ids[starts], unit, starts)


class ResidentVectors:
    """Exact cosine KNN over an in-memory copy of the vectors of the index at `db`; thread-safe.
    `open_reader` opens a reader of that index for a load (default: the SQLite store at `db`,
    read-only); another backend passes its own."""

    def __init__(
        self, db: Path, *, min_interval: float = RELOAD_INTERVAL_S, open_reader: Callable[[], IndexReader] | None = None
    ) -> None:
        self.db = Path(db)
        self.min_interval = min_interval
        self._open_reader = open_reader or self._open_sqlite
        self._copy: _Copy | None = None
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self._not_before = 0.0  # time.monotonic() before which no new load starts

    def knn(self, store: IndexReader, vector: np.ndarray, k: int) -> list[RankedChunk] | None:
        """Chunks by cosine distance, nearest first, as `IndexReader.vec_search` returns for the whole
        index; None when the copy is not current (a reload is started). Call inside the store's
        snapshot, so the generation read here is the one the rest of the search sees."""
        return self.knn_at(store.vectors_generation(), vector, k)

    def knn_at(self, generation: str, vector: np.ndarray, k: int) -> list[RankedChunk] | None:
        """`knn` for the state whose vectors generation the caller read in its snapshot: no
        store is read here, so another thread may answer while the caller's connection is busy."""
        copy = self._copy
        if copy is None or copy.generation != generation:
            self.reload_in_background()
            return None
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if k <= 0 or not len(copy.ids) or not norm:  # a zero vector has no cosine distance (as vec_search)
            return []
        similarity = copy.unit @ (query / norm)
        if copy.starts is not None:  # a chunk is as near as its nearest window
            similarity = np.maximum.reduceat(similarity, copy.starts)
        k = min(k, len(copy.ids))
        top = np.argpartition(-similarity, k - 1)[:k]
        top = top[np.lexsort((copy.ids[top], -similarity[top]))]  # nearest first, ties by id
        return [RankedChunk(int(copy.ids[i]), float(1.0 - similarity[i])) for i in top]

    def reload_in_background(self) -> None:
        """Start loading the current vectors, unless a load is running or started too recently."""
        with self._lock:
            if (self._loader is not None and self._loader.is_alive()) or time.monotonic() < self._not_before:
                return
            self._not_before = time.monotonic() + self.min_interval
            # not a daemon: exiting mid-load would kill the thread inside SQLite; a load is < 1 s
            self._loader = threading.Thread(target=self._load, name="resident-vectors")
            self._loader.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a running load finishes; True when the copy is then loaded."""
        loader = self._loader
        if loader is not None:
            loader.join(timeout)
        return self._copy is not None

    @property
    def nbytes(self) -> int:
        copy = self._copy
        return 0 if copy is None else copy.unit.nbytes + copy.ids.nbytes

    def _open_sqlite(self) -> IndexReader:
        from indexer.store import Store

        return Store.open(self.db, readonly=True)

    def _load(self) -> None:
        try:
            store = self._open_reader()
            try:
                with store.snapshot():  # the generation and the vectors of one committed state
                    generation = store.vectors_generation()
                    if self._copy is not None and self._copy.generation == generation:
                        return  # asked by a query whose snapshot was older than the copy
                    ids, matrix = store.all_vectors()
            finally:
                store.close()
        except Exception as exc:  # noqa: BLE001 - the next query retries; vec0 answers meanwhile
            log.warning("cannot load the vectors into memory: %s", exc)
            return
        if matrix.size:
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix /= np.where(norms == 0, 1, norms)  # in place: one copy of the vectors
            if not norms.all():  # zero vectors are never hits (as in vec_search)
                keep = norms[:, 0] != 0
                ids, matrix = ids[keep], matrix[keep]
        self._copy = _Copy.of(generation, ids, matrix)
        log.info("loaded %d vectors into memory (generation %s)", len(matrix), generation)
