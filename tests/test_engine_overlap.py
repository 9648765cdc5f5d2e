"""The two halves of a hybrid search at the same time: the query is embedded while the keyword
half runs, and on PostgreSQL the vector half searches through a sibling connection that imports
the search's snapshot. Whatever runs where, every result comes from one committed state, errors
surface as they would one after the other, and the workers stay few."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.config import Config
from indexer.errors import StoreError
from indexer.keywords import KeywordQuery
from indexer.store import IndexReader, SearchScope, Store, open_store
from indexer.store.fts5 import match_expression
from indexer.store.postgres import PostgresStore
from indexer.store.postgres import connection as pg_connection
from indexer.sync import SyncReport, run_sync
from search import overlap
from search.engine import search
from tests.conftest import write
from tests.fakes import FakeEmbedder
from tests.pg import both_backends
from tests.test_store import doc

QUERY = "sourdough starter flour"


class CommittingEmbedder(FakeEmbedder):
    """Embeds a query only after `before_answer` ran (once): a commit lands mid-search."""

    def __init__(self, config: Config, before_answer: Callable[[], None]) -> None:
        super().__init__(config.embedding)
        self.before_answer: Callable[[], None] | None = before_answer
        self.threads: list[str] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        hook, self.before_answer = self.before_answer, None
        if hook is not None:
            hook()
        return super().embed_query(text)


@pytest.fixture
def reader(config: Config, do_sync: Callable[..., SyncReport]) -> Iterator[IndexReader]:
    do_sync()
    store = open_store(config.index_location, readonly=True)
    yield store
    store.close()


@both_backends
def test_a_commit_during_the_search_changes_none_of_its_results(
    config: Config, notes: Path, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync deletes the matching note and adds another with its words while the query is
    being embedded (after the search's snapshot began): both halves and the rows still answer
    from the state before it. On PostgreSQL the vector half reads through the sibling (opened
    after the commit), so only the imported snapshot keeps the deleted note's vector in view."""

    def sync_meanwhile() -> None:
        (notes / "cooking/sourdough.md").unlink()
        write(notes, {"cooking/bread.md": "# Bread\n\nSourdough starter with flour and water, fed twice a day.\n"})
        report = run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
        assert report.embedded > 0

    searched_on: list[Any] = []
    if isinstance(reader, PostgresStore):
        original = PostgresStore.vec_search

        def recording(self: PostgresStore, vector: np.ndarray, k: int, scope: SearchScope) -> Any:
            searched_on.append(self.conn)
            return original(self, vector, k, scope)

        monkeypatch.setattr(PostgresStore, "vec_search", recording)
    embedder = CommittingEmbedder(config, sync_meanwhile)
    response = search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: embedder)

    assert embedder.threads and embedder.threads[0].startswith("search-half")  # embedded beside the keyword half
    paths = [hit.path for hit in response.results]
    assert "cooking/bread.md" not in paths
    assert paths[0] == "cooking/sourdough.md"
    first = response.results[0]
    assert first.matched == "both", first.explain  # its vector was found: the deleted note's
    if isinstance(reader, PostgresStore):
        assert searched_on and all(conn is not reader.conn for conn in searched_on)
    # the next search sees the sync
    after = search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: FakeEmbedder(config.embedding))
    after_paths = [hit.path for hit in after.results]
    assert after_paths[0] == "cooking/bread.md"
    assert "cooking/sourdough.md" not in after_paths


def test_a_sibling_reads_the_snapshot_it_was_opened_in(pg_url: str) -> None:
    writer = PostgresStore.open(pg_url)
    writer.ensure_source("s", "workspace")
    with writer.transaction():
        writer.write_file("s", *doc("a.md", ["first"]))
    reader = PostgresStore.open(pg_url, readonly=True)
    try:
        assert reader.sibling() is None  # outside a snapshot there is nothing to share
        with reader.snapshot():
            before = reader.counts()
            opener = reader.sibling()
            assert opener is not None
            with writer.transaction():
                writer.write_file("s", *doc("b.md", ["second"]))
            seen: dict[str, Any] = {}

            def read() -> None:
                with opener() as other:
                    seen["counts"] = other.counts()
                    seen["pid"] = other.conn.info.backend_pid  # type: ignore[attr-defined]

            thread = threading.Thread(target=read)
            thread.start()
            thread.join()
            assert seen["counts"] == before
            assert seen["pid"] != reader.conn.info.backend_pid
        assert reader.counts()["files"] == 2
        pooled = pg_connection._pool.get((pg_url, True), [])
        assert all(conn.info.transaction_status == pg_connection.TransactionStatus.IDLE for conn in pooled)
    finally:
        reader.close()
        writer.close()


def test_sqlite_offers_no_sibling(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "index.sqlite")
    try:
        with store.snapshot():
            assert store.sibling() is None
    finally:
        store.close()


@pytest.mark.sqlite_only("one apsw connection, no sibling: the SQLite store's own threading")
def test_without_a_sibling_only_the_embedding_leaves_the_searching_thread(
    config: Config, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One apsw connection runs one statement at a time: every read of a SQLite store stays on
    the thread that searches, only the query's embedding runs on a worker."""
    assert isinstance(reader, Store)
    threads: dict[str, set[str]] = {}
    for name in ("fts_search", "vec_search", "count_pending", "chunk_rows", "chunk_languages", "meta"):
        original = getattr(Store, name)

        def recording(self: Store, *args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            threads.setdefault(_name, set()).add(threading.current_thread().name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Store, name, recording)
    embedder = CommittingEmbedder(config, lambda: None)
    response = search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: embedder)
    assert response.results and response.results[0].matched == "both"
    assert embedder.threads[0].startswith("search-half")
    assert {"fts_search", "vec_search", "count_pending", "chunk_rows"} <= threads.keys()
    assert set().union(*threads.values()) == {threading.current_thread().name}


@both_backends
def test_overlapped_searches_match_searches_one_after_the_other(
    config: Config, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many searches at once (more than the workers) return what each returns alone; the
    workers stay WORKERS and the pooled connections within the pool's bound."""
    queries = ["sourdough starter", "záloha serveru", "Казань поезд", "restart pooleru 5432", "flour water"]
    embedder = FakeEmbedder(config.embedding)

    def run(query: str, store: IndexReader) -> list[tuple[str, int, str]]:
        found = search(store, config, query, k=5, mode="hybrid", embedder_factory=lambda: embedder)
        return [(hit.path, hit.line, hit.matched) for hit in found.results]

    expected = {}
    with monkeypatch.context() as sequential:
        sequential.setattr(overlap, "apart", lambda work: None)  # every worker busy: one after the other
        for query in queries:
            expected[query] = run(query, reader)
    assert all(expected.values())

    errors: list[BaseException] = []
    got: dict[tuple[int, str], list[tuple[str, int, str]]] = {}

    def client(n: int) -> None:
        store = open_store(config.index_location, readonly=True)
        try:
            for query in queries:
                got[(n, query)] = run(query, store)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert all(got[(n, query)] == expected[query] for n in range(8) for query in queries)
    halves = [t for t in threading.enumerate() if t.name.startswith("search-half")]
    assert 0 < len(halves) <= overlap.WORKERS
    if isinstance(reader, PostgresStore):
        assert len(pg_connection._pool.get((reader.url, True), [])) <= pg_connection.POOL_SIZE


def test_a_busy_pool_starts_nothing() -> None:
    release = threading.Event()
    started = [overlap.apart(release.wait) for _ in range(overlap.WORKERS)]
    try:
        assert all(future is not None for future in started)
        assert overlap.busy()
        assert overlap.apart(lambda: 1) is None
    finally:
        release.set()
    for future in started:
        assert future is not None and future.result(timeout=10)
    later = None
    for _ in range(100):  # a worker's slot is free again once its done-callback ran
        later = overlap.apart(lambda: 2)
        if later is not None:
            break
        threading.Event().wait(0.01)
    assert later is not None and later.result(timeout=10) == 2
    assert not overlap.busy()


def _failing(message: str) -> Callable[..., Any]:
    def fail(*args: object, **kwargs: object) -> Any:
        raise StoreError(message)

    return fail


@both_backends
def test_a_failing_vector_search_surfaces_as_a_store_error(
    config: Config, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(type(reader), "vec_search", _failing("index x: lost the connection (vectors)"))
    with pytest.raises(StoreError, match=r"\(vectors\)"):
        search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: FakeEmbedder(config.embedding))
    # the snapshot and any sibling were closed: the reader answers the next search
    monkeypatch.undo()
    assert search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: FakeEmbedder(config.embedding)).results


@both_backends
def test_when_both_halves_fail_the_earlier_failure_surfaces(
    config: Config, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One after the other, the query's embedding ran before the keyword half, and the keyword
    half before the vector search: the first failure in that order is the one raised."""
    monkeypatch.setattr(type(reader), "fts_search", _failing("index x: lost the connection (keywords)"))
    monkeypatch.setattr(type(reader), "vec_search", _failing("index x: lost the connection (vectors)"))
    with pytest.raises(StoreError, match=r"\(keywords\)"):
        search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: FakeEmbedder(config.embedding))

    class Broken(FakeEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            raise RuntimeError("the embedder broke")

    with pytest.raises(RuntimeError, match="embedder broke"):
        search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: Broken(config.embedding))


@both_backends
def test_an_embedder_that_is_down_still_degrades_to_keywords(config: Config, reader: IndexReader) -> None:
    down = FakeEmbedder(config.embedding)
    down.down = True
    response = search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: down)
    assert response.degraded and response.notice is not None
    assert response.notice.startswith("vector search unavailable")
    assert response.results and all(hit.matched == "keyword" for hit in response.results)


@pytest.mark.sqlite_only("the resident vectors are loaded from the SQLite file")
def test_the_resident_copy_answers_on_the_worker_for_the_searching_threads_generation(
    config: Config, reader: IndexReader, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite the resident vectors (the MCP server's) answer the vector half on the worker,
    for the generation the search read in its snapshot: a sync committed while the query is
    embedded leaves the copy stale for this search's state, which then asks vec0 instead, on
    its own thread, and answers from the state before the sync."""
    from search.resident import ResidentVectors

    resident = ResidentVectors(config.db, min_interval=0)
    resident.reload_in_background()
    assert resident.wait(30)
    asked: list[str] = []
    original = ResidentVectors.knn_at

    def recording(self: ResidentVectors, generation: str, vector: np.ndarray, k: int) -> Any:
        asked.append(threading.current_thread().name)
        return original(self, generation, vector, k)

    monkeypatch.setattr(ResidentVectors, "knn_at", recording)
    embedder = FakeEmbedder(config.embedding)
    plain = search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: embedder)
    with_copy = search(reader, config, QUERY, mode="hybrid", embedder_factory=lambda: embedder, resident=resident)
    assert asked and asked[0].startswith("search-half")
    assert [(h.path, h.line, h.matched) for h in with_copy.results] == [
        (h.path, h.line, h.matched) for h in plain.results
    ]

    moved: list[bool] = []

    def sync_meanwhile() -> None:
        (notes / "cooking/sourdough.md").unlink()
        run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
        resident.reload_in_background()  # the copy moves on to the new generation meanwhile
        resident.wait(30)
        latest = Store.open(config.db, readonly=True)
        try:
            moved.append(resident.knn(latest, np.ones(config.embedding.dims, np.float32), 1) is not None)
        finally:
            latest.close()

    during = search(
        reader,
        config,
        QUERY,
        mode="hybrid",
        embedder_factory=lambda: CommittingEmbedder(config, sync_meanwhile),
        resident=resident,
    )
    assert moved == [True]
    assert during.results[0].path == "cooking/sourdough.md"
    assert during.results[0].matched == "both"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_sibling_reads_the_rows_of_the_hits_it_found(
    config: Config, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sibling that found the vector half's hits also reads their rows and languages while
    the keyword half runs; the search's own connection then reads only the keyword half's other
    candidates. The answer is the one of the halves one after the other."""
    embedder = FakeEmbedder(config.embedding)

    def run() -> list[tuple[str, int, str, str]]:
        found = search(reader, config, QUERY, k=8, mode="hybrid", embedder_factory=lambda: embedder)
        return [(hit.path, hit.line, hit.matched, str(hit.explain)) for hit in found.results]

    with monkeypatch.context() as sequential:
        sequential.setattr(overlap, "apart", lambda work: None)
        expected = run()
    assert any(matched == "meaning" for _, _, matched, _ in expected)
    read: dict[str, set[int]] = {"own": set(), "sibling": set()}
    found_apart: set[int] = set()
    for method in ("chunk_rows", "chunk_languages"):
        original = getattr(PostgresStore, method)

        def recording(self: PostgresStore, ids: Any, original: Any = original) -> Any:
            wanted = set(ids)
            read["own" if self is reader else "sibling"] |= wanted
            return original(self, wanted)

        monkeypatch.setattr(PostgresStore, method, recording)
    vec_search = PostgresStore.vec_search

    def searching(self: PostgresStore, vector: np.ndarray, k: int, scope: SearchScope) -> Any:
        hits = vec_search(self, vector, k, scope)
        if self is not reader:
            found_apart.update(hit.chunk_id for hit in hits)
        return hits

    monkeypatch.setattr(PostgresStore, "vec_search", searching)
    assert run() == expected
    assert found_apart and read["sibling"] == found_apart
    assert not read["own"] & found_apart  # (the keyword half may have found nothing else)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_sibling_the_server_refuses_leaves_the_vector_half_to_the_store(
    config: Config, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sibling is a second connection only for speed: a server at its connection limit
    refuses it, and the search answers through its own connection as one after the other."""
    embedder = FakeEmbedder(config.embedding)

    def run() -> list[tuple[str, int, str]]:
        found = search(reader, config, QUERY, k=5, mode="hybrid", embedder_factory=lambda: embedder)
        return [(hit.path, hit.line, hit.matched) for hit in found.results]

    with monkeypatch.context() as sequential:
        sequential.setattr(overlap, "apart", lambda work: None)
        expected = run()
    assert any(matched == "meaning" for _, _, matched in expected)
    refused: list[str] = []

    def refuse(url: str, readonly: bool) -> Any:
        refused.append(threading.current_thread().name)
        raise StoreError("index x: cannot connect: sorry, too many clients already")

    monkeypatch.setattr(pg_connection, "live_connection", refuse)
    assert run() == expected
    assert refused and all(name.startswith("search-half") for name in refused)
    assert reader.conn.info.transaction_status == pg_connection.TransactionStatus.IDLE  # type: ignore[attr-defined]


def test_a_search_after_the_interpreter_began_to_exit_runs_its_halves_in_turn(tmp_path: Path) -> None:
    """Once Python begins to exit (the main thread returned), a thread pool takes no new work:
    a search still running on another thread then runs its halves one after the other
    instead of failing."""
    import subprocess
    import sys

    script = tmp_path / "late.py"
    script.write_text(
        "import threading, time\n"
        "from search import overlap\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    print('started' if overlap.apart(lambda: 1) is not None else 'in turn', overlap.busy())\n"
        "threading.Thread(target=late).start()\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["in", "turn", "False"]


# An identifier whose prefix matches crowd its one exact mention out of the prefix search's list
# (each crowding note says the longer word three times): only the exact search finds it.
CROWDED_IDENTIFIER = "gw-07.lan"
EXACT_NOTE = "ops/gateway.md"


@pytest.fixture
def crowded(config: Config, notes: Path, do_sync: Callable[..., SyncReport]) -> Iterator[IndexReader]:
    write(
        notes,
        {
            **{f"lanes/lane-{n:02d}.md": f"# Lane {n}\n\ngw-07.lanes gw-07.lanes gw-07.lanes\n" for n in range(60)},
            EXACT_NOTE: "# Gateway\n\nThe office gateway is gw-07.lan; it also forwards ports for the printers,"
            " the cameras and the guest network on the second floor.\n",
        },
    )
    do_sync()
    store = open_store(config.index_location, readonly=True)
    yield store
    store.close()


def _paths(reader: IndexReader, config: Config, query: str, mode: str = "lex") -> list[str]:
    found = search(reader, config, query, k=5, mode=mode, embedder_factory=lambda: FakeEmbedder(config.embedding))
    return [hit.path for hit in found.results]


@both_backends
def test_the_exact_search_finds_an_identifier_its_prefix_matches_crowd_out(
    config: Config, crowded: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the exact search runs on a sibling while the prefix search runs (it is
    needed because the prefix list comes back full); the answer is the one of the two searches
    one after the other, with the exact mention first."""
    calls: list[tuple[str, bool, str]] = []
    original = type(crowded).fts_search

    def recording(self: Any, match: KeywordQuery, limit: int, scope: SearchScope) -> Any:
        calls.append((match_expression(match), self is crowded, threading.current_thread().name))
        return original(self, match, limit, scope)

    monkeypatch.setattr(type(crowded), "fts_search", recording)
    with monkeypatch.context() as sequential:
        sequential.setattr(overlap, "apart", lambda work: None)
        expected = _paths(crowded, config, CROWDED_IDENTIFIER)
    assert [own for _, own, _ in calls] == [True, True]  # prefix, then exact: the prefix list was full
    assert expected[0] == EXACT_NOTE
    for mode in ("lex", "hybrid"):
        calls.clear()
        assert _paths(crowded, config, CROWDED_IDENTIFIER, mode)[0] == EXACT_NOTE
        exact = [(own, thread) for match, own, thread in calls if "*" not in match]
        assert len(exact) == 1
        if isinstance(crowded, PostgresStore):
            assert not exact[0][0] and exact[0][1].startswith("search-half")
        else:
            assert exact[0] == (True, threading.current_thread().name)
    calls.clear()
    assert _paths(crowded, config, CROWDED_IDENTIFIER) == expected


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_an_exact_search_beside_a_short_prefix_list_is_dropped_with_what_it_raised(
    config: Config, reader: IndexReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefix list shorter than the depth holds every exact match: the exact search that ran
    beside it is waited for and dropped, so even its failure changes nothing (one after the
    other it would never have run), and its sibling is back in the pool, idle."""
    query = "db-01.lan backup"
    with monkeypatch.context() as sequential:
        sequential.setattr(overlap, "apart", lambda work: None)
        expected = _paths(reader, config, query)
    original = PostgresStore.fts_search
    failed: list[str] = []

    def failing_apart(self: PostgresStore, match: KeywordQuery, limit: int, scope: SearchScope) -> Any:
        if self is not reader:
            failed.append(match_expression(match))
            raise StoreError("index x: lost the connection (exact)")
        return original(self, match, limit, scope)

    monkeypatch.setattr(PostgresStore, "fts_search", failing_apart)
    assert _paths(reader, config, query) == expected
    assert failed == ['"db 01 lan"']
    pooled = pg_connection._pool.get((reader.url, True), [])
    assert pooled and all(conn.info.transaction_status == pg_connection.TransactionStatus.IDLE for conn in pooled)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_needed_exact_search_that_failed_beside_surfaces_its_error(
    crowded: IndexReader, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = PostgresStore.fts_search

    def failing_apart(self: PostgresStore, match: KeywordQuery, limit: int, scope: SearchScope) -> Any:
        if self is not crowded:
            raise StoreError("index x: lost the connection (exact)")
        return original(self, match, limit, scope)

    monkeypatch.setattr(PostgresStore, "fts_search", failing_apart)
    with pytest.raises(StoreError, match=r"\(exact\)"):
        _paths(crowded, config, CROWDED_IDENTIFIER)
    monkeypatch.undo()
    assert _paths(crowded, config, CROWDED_IDENTIFIER)[0] == EXACT_NOTE  # the snapshot and siblings closed


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_sibling_the_server_refuses_leaves_the_exact_search_to_the_store(
    crowded: IndexReader, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused: list[str] = []

    def refuse(url: str, readonly: bool) -> Any:
        refused.append(threading.current_thread().name)
        raise StoreError("index x: cannot connect: sorry, too many clients already")

    monkeypatch.setattr(pg_connection, "live_connection", refuse)
    assert _paths(crowded, config, CROWDED_IDENTIFIER)[0] == EXACT_NOTE
    assert refused and all(name.startswith("search-half") for name in refused)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_when_the_prefix_search_fails_its_error_surfaces_not_the_exact_searchs(
    crowded: IndexReader, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One after the other the prefix search runs first: its failure is the one raised, and the
    exact search beside it has ended (its sibling back in the pool) before the search returns."""

    def failing(self: PostgresStore, match: KeywordQuery, limit: int, scope: SearchScope) -> Any:
        raise StoreError(f"index x: lost the connection ({'prefix' if self is crowded else 'exact'})")

    monkeypatch.setattr(PostgresStore, "fts_search", failing)
    with pytest.raises(StoreError, match=r"\(prefix\)"):
        _paths(crowded, config, CROWDED_IDENTIFIER)
    assert isinstance(crowded, PostgresStore)
    pooled = pg_connection._pool.get((crowded.url, True), [])
    assert pooled and all(conn.info.transaction_status == pg_connection.TransactionStatus.IDLE for conn in pooled)
