"""The MCP server's in-memory vector copy: same answers as vec0, never stale, never waited for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from indexer.config import Config
from indexer.store import SearchScope, Store
from indexer.sync import SyncReport
from search.engine import search
from search.resident import ResidentVectors
from tests.conftest import write
from tests.fakes import FakeEmbedder

if TYPE_CHECKING:
    from search.mcp_server import NotesTools


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The copy exists for SQLite, whose vec0 scans every vector for an unscoped query; a service
    on PostgreSQL keeps none (its HNSW index answers: the last test), so these tests run on the
    SQLite file whatever NOTES_SEARCH_TEST_BACKEND says."""
    return str(getattr(request, "param", "sqlite"))


def knn_both(store: Store, resident: ResidentVectors, vector: np.ndarray, k: int) -> tuple[list, list]:
    with store.snapshot():
        from_memory = resident.knn(store, vector, k)
        assert from_memory is not None, "the copy should be current"
        return from_memory, store.vec_search(vector, k, SearchScope())


def loaded(config: Config) -> ResidentVectors:
    resident = ResidentVectors(config.db)
    resident.reload_in_background()
    assert resident.wait(30)
    return resident


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
    resident = loaded(config)
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


def test_stale_copy_is_not_used_and_reloads_in_the_background(
    config: Config, embedder: FakeEmbedder, do_sync: Callable[..., SyncReport], notes: Path
) -> None:
    do_sync()
    resident = ResidentVectors(config.db, min_interval=0)
    query = embedder.embed_query("kvasnicový kvásek")

    def nearest() -> tuple[str, list[str] | None]:
        """(generation, paths of the copy's answer, or None when it declined)."""
        store = Store.open(config.db, readonly=True)
        try:
            with store.snapshot():
                hits = resident.knn(store, query, 50)
                if hits is None:
                    return store.vectors_generation(), None
                rows = store.chunk_rows(cid for cid, _ in hits)
                return store.vectors_generation(), [rows[cid].path for cid, _ in hits]
        finally:
            store.close()

    generation, paths = nearest()
    assert paths is None  # nothing loaded yet: the caller uses vec0, a load has started
    assert resident.wait(30)
    assert nearest()[1] is not None
    do_sync()  # nothing changed: the generation stays, the copy is still used
    assert nearest()[0] == generation and nearest()[1] is not None

    write(notes, {"new/kvasek.md": "# Kvásek\n\nkvasnicový kvásek krmit dvakrát denně\n"})
    do_sync()
    generation_after_add, paths = nearest()
    assert generation_after_add != generation
    assert paths is None  # stale: declined, never an answer without the new note
    assert resident.wait(30)
    paths = nearest()[1]
    assert paths is not None and paths[0] == "new/kvasek.md"

    (notes / "new" / "kvasek.md").unlink()
    (notes / "cooking" / "sourdough.md").unlink()
    do_sync()
    assert nearest()[1] is None
    assert resident.wait(30)
    generation_after_delete, paths = nearest()
    assert generation_after_delete not in (generation, generation_after_add)
    assert paths is not None and "new/kvasek.md" not in paths and "cooking/sourdough.md" not in paths


def test_rebuilt_index_gets_a_new_generation(config: Config, do_sync: Callable[..., SyncReport]) -> None:
    """A generation is random, not a counter: an index deleted and built again by the same
    steps must not look like the one a copy was loaded from."""
    do_sync()
    first = Store.open(config.db, readonly=True)
    try:
        before = first.vectors_generation()
    finally:
        first.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.db}{suffix}").unlink(missing_ok=True)
    do_sync()
    second = Store.open(config.db, readonly=True)
    try:
        assert second.vectors_generation() not in ("", before)
    finally:
        second.close()


def test_no_index_yet_is_not_an_error(tmp_path: Path) -> None:
    resident = ResidentVectors(tmp_path / "missing.sqlite")
    resident.reload_in_background()
    assert resident.wait(30) is False
    assert resident.nbytes == 0


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


def test_engine_uses_it_unscoped_only(
    config: Config, embedder: FakeEmbedder, do_sync: Callable[..., SyncReport]
) -> None:
    do_sync()
    calls: list[int] = []

    class Counting(ResidentVectors):
        def knn(self, store: Store, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
            calls.append(k)
            return super().knn(store, vector, k)

    resident = Counting(config.db)
    resident.reload_in_background()
    assert resident.wait(30)
    store = Store.open(config.db, readonly=True)
    try:
        for scope in (SearchScope(), SearchScope(path="devops")):
            with_copy = search(
                store, config, "záloha", mode="vec", scope=scope, embedder_factory=lambda: embedder, resident=resident
            )
            without = search(store, config, "záloha", mode="vec", scope=scope, embedder_factory=lambda: embedder)
            assert [h.score for h in with_copy.results] == [h.score for h in without.results]
            assert [h.explain["distance"] for h in with_copy.results] == [
                h.explain["distance"] for h in without.results
            ]
            assert with_copy.results
    finally:
        store.close()
    assert len(calls) == 1  # the scoped search went through the path index, not the copy


def _warmed_up_tools(
    config_path: Path, embedder: FakeEmbedder, do_sync: Callable[..., SyncReport], monkeypatch: pytest.MonkeyPatch
) -> NotesTools:
    """The MCP server's tools over a synced index, warmed up as the server does at start."""
    from search import cli as cli_module
    from search.mcp_server import NotesTools
    from search.service import NotesService

    monkeypatch.setattr(cli_module, "make_embedder", lambda cfg: embedder)
    do_sync()
    tools = NotesTools(NotesService.from_config_file(str(config_path), cli_module.make_embedder))
    tools.warm_up()
    return tools


def test_mcp_tools_load_at_warm_up_and_answer_like_vec0(
    config_path: Path,
    config: Config,
    embedder: FakeEmbedder,
    do_sync: Callable[..., SyncReport],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = _warmed_up_tools(config_path, embedder, do_sync, monkeypatch)
    assert tools.resident_vectors().wait(30)
    assert tools.resident_vectors().nbytes > 0
    store = Store.open(config.db, readonly=True)
    try:
        for query in ("záloha databáze", "Поезд в Казань", "starter flour"):
            data = tools.search(query, None, 5, "vec")
            direct = search(store, config, query, k=5, mode="vec", embedder_factory=lambda: embedder)
            assert [h["score"] for h in data["results"]] == [h.score for h in direct.results]
            assert data["results"] and not data["degraded"]
    finally:
        store.close()


def test_zero_vectors_are_never_hits(
    config: Config, embedder: FakeEmbedder, do_sync: Callable[..., SyncReport]
) -> None:
    """A zero vector has no direction (sqlite-vec gives it no cosine distance): vec0, the exact
    scoped path and the copy all leave it out, and a zero query finds nothing."""
    do_sync()
    zero = np.zeros(config.embedding.dims, dtype=np.float32)
    store = Store.open(config.db)
    try:
        target = store.conn.execute("SELECT id FROM chunks WHERE path = 'devops/postgres.md'").fetchone()[0]
        with store.transaction():
            store.conn.execute("UPDATE vec_chunks SET embedding = ? WHERE rowid = ?", (zero.tobytes(), target))
            store.conn.execute("UPDATE chunk_vectors SET embedding = ? WHERE id = ?", (zero.tobytes(), target))
            store._vectors_changed = True
    finally:
        store.close()
    resident = loaded(config)
    store = Store.open(config.db, readonly=True)
    try:
        query = embedder.embed_query("PostgreSQL port 5432")
        with store.snapshot():
            for scope in (SearchScope(), SearchScope(path="devops")):
                hits = store.vec_search(query, 50, scope)
                assert hits and target not in [cid for cid, _ in hits]
            from_memory = resident.knn(store, query, 50)
            assert from_memory is not None and target not in [cid for cid, _ in from_memory]
            assert {cid for cid, _ in from_memory} == {cid for cid, _ in store.vec_search(query, 50, SearchScope())}
            assert resident.knn(store, zero, 5) == []
            assert store.vec_search(zero, 5, SearchScope()) == []
    finally:
        store.close()


def test_loads_are_spaced_and_skip_a_current_copy(config: Config, do_sync: Callable[..., SyncReport]) -> None:
    do_sync()
    resident = ResidentVectors(config.db, min_interval=3600)
    resident.reload_in_background()
    assert resident.wait(30)
    first = resident._copy
    resident.reload_in_background()  # within the interval: no new load
    assert resident._loader is not None and not resident._loader.is_alive() and resident._copy is first
    resident.min_interval = 0
    resident._not_before = 0.0
    resident.reload_in_background()  # allowed now, but the index has not changed: the copy is kept
    assert resident.wait(30) and resident._copy is first


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_service_on_postgres_keeps_no_copy_and_answers_from_the_store(
    config_path: Path,
    config: Config,
    embedder: FakeEmbedder,
    do_sync: Callable[..., SyncReport],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = _warmed_up_tools(config_path, embedder, do_sync, monkeypatch)
    assert not tools.service.keeps_vectors_in_memory
    data = tools.search("Поезд в Казань", None, 5, "vec")
    assert data["results"][0]["path"] == "travel/kazan.md" and not data["degraded"]
    assert tools.resident_vectors().nbytes == 0  # nothing was loaded, neither at warm-up nor by the search
