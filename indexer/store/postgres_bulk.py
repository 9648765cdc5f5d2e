"""Bulk loading into an index on PostgreSQL: the HNSW index is built once after the vectors are
in, instead of being updated vector by vector (an HNSW insert costs a graph search each; a
build sorts and links them all in one pass, several times faster for a whole index).

Used by `migrate` only: while the index is away, unscoped vector searches scan every vector
(exact, slower), and a copy killed meanwhile leaves a target without it, which the rerun's
`--force` replaces (reset_vectors creates the table with its index again).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HNSW_INDEX = "idx_chunk_vectors_hnsw"
BUILD_MEMORY = "1GB"  # maintenance_work_mem for the build: a graph that fits is built much faster


@contextmanager
def vector_index_deferred(store: Any) -> Iterator[None]:
    """Drop the HNSW index of a PostgresStore for the duration, then build it again exactly as it
    was defined; anything else passes through untouched."""
    postgres = sys.modules.get("indexer.store.postgres")
    if postgres is None or not isinstance(store, postgres.PostgresStore):
        yield
        return
    row = store.conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (HNSW_INDEX,)).fetchone()
    if row is None:
        yield
        return
    with store.transaction():
        store.conn.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")
    yield
    with store.transaction():
        store.conn.execute(f"SET LOCAL maintenance_work_mem = '{BUILD_MEMORY}'")
        store.conn.execute(row[0])
