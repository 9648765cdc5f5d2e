"""Every vector of the index held in memory, for a process that answers many queries.

vec0 answers an unscoped KNN by scanning every stored vector (about 75 ms at 100,000 chunks of
384 d on the reference machine); a matrix product over the same vectors kept in one numpy array
takes about 8 ms. Loading the array costs a few hundred milliseconds at that size, so only the
long-lived MCP server keeps one; a one-shot CLI query uses vec0 directly. The copy is reloaded
when the index's vector generation moves (any committed change to the vectors).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from indexer.store import Store


class ResidentVectors:
    """Exact cosine KNN over an in-memory copy of the index's vectors; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation: str | None = None
        self._ids = np.empty(0, dtype=np.int64)
        self._unit = np.empty((0, 0), dtype=np.float32)

    def knn(self, store: Store, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(chunk id, cosine distance) nearest first, as `Store.vec_search` returns for the whole
        index. Call inside the store's snapshot so the generation and the vectors agree."""
        ids, unit = self._current(store)
        if k <= 0 or not len(ids):
            return []
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        similarity = unit @ (query / norm if norm else query)
        k = min(k, len(ids))
        top = np.argpartition(-similarity, k - 1)[:k]
        top = top[np.lexsort((ids[top], -similarity[top]))]  # nearest first, ties by id
        return [(int(ids[i]), float(1.0 - similarity[i])) for i in top]

    def _current(self, store: Store) -> tuple[np.ndarray, np.ndarray]:
        generation = store.vectors_generation()
        with self._lock:
            if generation != self._generation:
                ids, matrix = store.all_vectors()
                if matrix.size:
                    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                    matrix /= np.where(norms == 0, 1, norms)  # in place: one copy of the vectors
                self._ids, self._unit, self._generation = ids, matrix, generation
            return self._ids, self._unit
