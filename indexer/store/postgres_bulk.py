"""Bulk loading into an index on PostgreSQL: the HNSW index is built once after the vectors are
in, instead of being kept up vector by vector (an HNSW insert costs a graph search each; a
build links them all in one pass, several times faster for a whole index).

PostgresStore builds the index itself once a space holds HNSW_MIN_VECTORS and keeps it up
from then on; during a bulk load that build is held back (its "index is there" flag is set)
and an index already present is dropped, then the store's own build runs once at the end, with
more memory. Used by `migrate` only: meanwhile unscoped vector searches scan every vector
(exact, slower), and a copy killed meanwhile leaves a target without the index until its next
vectors are stored (the store then builds it) or the rerun's `--force` starts the space again.
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
    """Hold back a PostgresStore's HNSW upkeep for the duration, then build the index once;
    any other store passes through untouched."""
    postgres = sys.modules.get("indexer.store.postgres")
    if postgres is None or not isinstance(store, postgres.PostgresStore):
        yield
        return
    with store.transaction():
        store.conn.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")
    store._hnsw_ready = True  # the store's own flag: "built", so no store_vectors builds it midway
    try:
        yield
    finally:
        store._hnsw_ready = False
    store.conn.execute(f"SET maintenance_work_mem = '{BUILD_MEMORY}'")
    try:
        store._index_vectors_once_many()  # the store's build, at its threshold
    finally:
        store.conn.execute("RESET maintenance_work_mem")
