"""The MCP server's in-memory vector copy: same answers as vec0, and never stale after a sync."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from indexer.config import Config
from indexer.store import SearchScope, Store
from indexer.sync import SyncReport
from search.engine import search
from search.resident import ResidentVectors
from tests.conftest import write
from tests.fakes import FakeEmbedder


def knn_both(store: Store, resident: ResidentVectors, vector: np.ndarray, k: int) -> tuple[list, list]:
    with store.snapshot():
        return resident.knn(store, vector, k), store.vec_search(vector, k, SearchScope())


def assert_same_neighbours(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """Same distances in order; among equally distant chunks the order (and, at the k-th place,
    the choice) is arbitrary in vec0, so ids are compared per distance, boundary excluded."""
    assert [d for _, d in got] == pytest.approx([d for _, d in want], abs=1e-5)
    boundary = round(want[-1][1], 4)
    by_distance = lambda hits: {  # noqa: E731
        d: {cid for cid, dist in hits if round(dist, 4) == d} for d in {round(dist, 4) for _, dist in hits}
    }
    got_groups, want_groups = by_distance(got), by_distance(want)
    for distance, ids in want_groups.items():
        if distance != boundary:
            assert got_groups.get(distance) == ids


def test_matches_vec0_ids_and_distances(
    config: Config, embedder: FakeEmbedder, do_sync: Callable[..., SyncReport], notes: Path
) -> None:
    write(notes, {f"extra/note-{i}.md": f"# Note {i}\n\nword{i} shared text {i * 7}\n" for i in range(30)})
    do_sync()
    resident = ResidentVectors()
    store = Store.open(config.db, readonly=True)
    try:
        for text in ["záloha databáze", "word3 shared", "Поезд", "sourdough starter"]:
            vector = embedder.embed_query(text)
            for k in (1, 5, 50):
                assert_same_neighbours(*knn_both(store, resident, vector, k))
        # a vector that is not of unit length gets the same cosine distances
        assert_same_neighbours(*knn_both(store, resident, 3.5 * embedder.embed_query("PostgreSQL port"), 10))
    finally:
        store.close()


def test_reloads_only_when_vectors_change(
    config: Config, embedder: FakeEmbedder, do_sync: Callable[..., SyncReport], notes: Path
) -> None:
    do_sync()
    resident = ResidentVectors()
    query = embedder.embed_query("kvasnicový kvásek")

    def top_paths() -> tuple[str, list[str]]:
        store = Store.open(config.db, readonly=True)
        try:
            with store.snapshot():
                hits = resident.knn(store, query, 50)
                rows = store.chunk_rows(cid for cid, _ in hits)
                return store.vectors_generation(), [rows[cid].path for cid, _ in hits]
        finally:
            store.close()

    generation, paths = top_paths()
    assert "new/kvasek.md" not in paths
    do_sync()  # nothing changed: the generation stays, the copy is reused
    assert top_paths() == (generation, paths)

    write(notes, {"new/kvasek.md": "# Kvásek\n\nkvasnicový kvásek krmit dvakrát denně\n"})
    do_sync()
    generation_after_add, paths = top_paths()
    assert generation_after_add != generation
    assert paths[0] == "new/kvasek.md"  # the copy was reloaded: the new note is the nearest

    (notes / "new" / "kvasek.md").unlink()
    (notes / "cooking" / "sourdough.md").unlink()
    do_sync()
    generation_after_delete, paths = top_paths()
    assert generation_after_delete != generation_after_add
    assert "new/kvasek.md" not in paths and "cooking/sourdough.md" not in paths


def test_rolled_back_transaction_keeps_the_generation(config: Config, do_sync: Callable[..., SyncReport]) -> None:
    do_sync()
    store = Store.open(config.db)
    try:
        before = store.vectors_generation()
        with pytest.raises(RuntimeError), store.transaction():
            store.conn.execute("DELETE FROM chunks")
            store._delete_vectors("SELECT id FROM chunks", ())
            raise RuntimeError("crash")
        assert store.vectors_generation() == before
        assert store.counts()["vectors"] > 0
    finally:
        store.close()


def test_engine_uses_it_unscoped_only(config: Config, embedder: FakeEmbedder, do_sync: Callable[..., SyncReport]) -> None:
    do_sync()
    calls: list[int] = []

    class Counting(ResidentVectors):
        def knn(self, store: Store, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
            calls.append(k)
            return super().knn(store, vector, k)

    resident = Counting()
    store = Store.open(config.db, readonly=True)
    try:
        for scope in (SearchScope(), SearchScope(path="devops")):
            with_copy = search(store, config, "záloha", mode="vec", scope=scope,
                               embedder_factory=lambda: embedder, resident=resident)
            without = search(store, config, "záloha", mode="vec", scope=scope, embedder_factory=lambda: embedder)
            assert [h.score for h in with_copy.results] == [h.score for h in without.results]
            assert [h.explain["distance"] for h in with_copy.results] == [h.explain["distance"] for h in without.results]
            assert with_copy.results
    finally:
        store.close()
    assert len(calls) == 1  # the scoped search went through the path index, not the copy
