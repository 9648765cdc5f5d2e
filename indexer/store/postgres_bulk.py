"""Bulk loading into an index on PostgreSQL: the HNSW index is built once after the vectors are
in, instead of being kept up vector by vector (an HNSW insert costs a graph search each; a
build links them all in one pass, several times faster for a whole index).

PostgresStore builds the index itself once a space holds HNSW_MIN_VECTORS and keeps it up
from then on; during a bulk load that build is held back (its "index is there" flag is set)
and an index already present is dropped, then the store's own build runs once at the end, with
memory for the whole graph. `migrate` defers it (dropping an index there); a sync's embedding
pass holds it back only while no index exists yet (a first sync, a new embedding space) and at
least HNSW_MIN_VECTORS chunks wait. Meanwhile unscoped vector searches scan every vector (exact,
slower), and a run killed meanwhile leaves the space without the index until the next sync's
embedding pass (which builds it, even with nothing to embed), or a copy's rerun with `--force`
starts the space again.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def vector_index_deferred(store: Any) -> Iterator[None]:
    """Hold back a PostgresStore's HNSW upkeep for the duration, then build the index once;
    any other store passes through untouched."""
    postgres = sys.modules.get("indexer.store.postgres")
    if postgres is None or not isinstance(store, postgres.PostgresStore):
        yield
        return
    with store.vector_index_deferred():
        yield


@contextmanager
def vector_index_held_back(store: Any) -> Iterator[None]:
    """A first sync's embedding pass into a PostgresStore: the HNSW index is built once after it
    (when at least HNSW_MIN_VECTORS chunks wait and no index exists yet) instead of at the
    threshold and then kept up vector by vector; any other store passes through untouched."""
    postgres = sys.modules.get("indexer.store.postgres")
    if postgres is None or not isinstance(store, postgres.PostgresStore):
        yield
        return
    with store.vector_index_held_back():
        yield
