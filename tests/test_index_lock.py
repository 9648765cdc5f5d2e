"""The sync lock of an index on PostgreSQL: advisory locks per source on a real server, held by
real processes. Two workers never sync the same source; a whole-index operation waits for the
sole run; a killed worker (kill -9) leaves no lock; readers never wait; status sees a running
sync on any host. The SQLite file lock keeps its own tests (test_sync)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.config import Config, load_config
from indexer.lock import FileIndexLock, open_index_lock, running_sync
from indexer.store import SearchScope, open_store
from indexer.store.postgres_lock import AdvisoryIndexLock, lock_key, sync_holder
from indexer.sync import SyncReport, run_sync
from search.service.indexing import sync_report_json
from tests.conftest import make_config, wait_for
from tests.fakes import FakeEmbedder
from tests.pg import DATABASE

REPO = Path(__file__).parent.parent


@pytest.fixture
def pg_config(tmp_path: Path, notes: Path, pg_url: str) -> Config:
    return load_config(make_config(tmp_path, notes, db=pg_url))


class Holder:
    """A separate process holding advisory locks of the index until it is killed."""

    def __init__(self, url: str, *claims: str) -> None:
        script = (
            "import sys, time\n"
            "from indexer.store.postgres_lock import AdvisoryIndexLock\n"
            "lock = AdvisoryIndexLock(sys.argv[1])\n"
            "assert lock.acquire()\n"
            "for claim in sys.argv[2:]:\n"
            "    kind, _, name = claim.partition(':')\n"
            "    ok = lock.claim_index() if kind == 'index' else lock.claim_embedding() if kind == 'embedding'"
            " else lock.claim_source(name)\n"
            "    assert ok, claim\n"
            "print('held', flush=True)\n"
            "time.sleep(120)\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, url, *claims], stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "held"

    def kill9(self) -> None:
        self.process.kill()  # SIGKILL: no cleanup of any kind runs
        self.process.wait()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.kill9()


def test_keys_are_stable_and_distinct() -> None:
    assert lock_key("source", "notes") == lock_key("source", "notes")
    keys = {lock_key("index"), lock_key("embedding"), lock_key("source", "notes"), lock_key("source", "index")}
    assert len(keys) == 4
    assert all(-(2**63) <= key < 2**63 for key in keys)
    # a subprocess derives the same key: nothing salted per process
    out = subprocess.run(
        [sys.executable, "-c", "from indexer.store.postgres_lock import lock_key; print(lock_key('source', 'notes'))"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert int(out.stdout) == lock_key("source", "notes")


def test_the_config_chooses_the_lock(tmp_path: Path, notes: Path, pg_config: Config) -> None:
    (tmp_path / "sqlite").mkdir()
    sqlite_config = load_config(make_config(tmp_path / "sqlite", notes))
    assert isinstance(open_index_lock(sqlite_config), FileIndexLock)
    assert isinstance(open_index_lock(pg_config), AdvisoryIndexLock)


def test_one_source_one_worker_and_whole_index_needs_the_sole_run(pg_url: str, holders: list[Holder]) -> None:
    holders.append(Holder(pg_url, "source:notes"))
    lock = AdvisoryIndexLock(pg_url)
    assert lock.acquire()  # runs share the index
    try:
        assert not lock.claim_source("notes")
        assert lock.claim_source("other")
        assert not lock.claim_index()  # another run is going on
        holders[0].kill9()
        assert wait_for(lambda: lock.claim_source("notes", timeout=0.2), "the killed worker's source lock to go")
        assert lock.claim_index()  # sole run now
        second = AdvisoryIndexLock(pg_url)
        assert not second.acquire()  # a new run waits while the index is held whole
        lock.release_index()
        assert second.acquire()
        second.release()
    finally:
        lock.release()


def test_sync_skips_the_source_another_worker_holds(
    tmp_path: Path, notes: Path, pg_url: str, holders: list[Holder]
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.md").write_text("# Other\n\nA second source.\n", encoding="utf-8")
    config = load_config(
        make_config(tmp_path, notes, db=pg_url, extra_sources=f"    other:\n      root: {other}\n      paths: ['**']\n")
    )
    embedder = FakeEmbedder(config.embedding)
    first = run_sync(config, embedder_factory=lambda: embedder)  # creates the space while alone
    assert not first.locked
    holders.append(Holder(pg_url, "source:notes"))
    report = run_sync(config, source_ids=["notes", "other"], full=True, embedder_factory=lambda: embedder)
    assert not report.locked and report.busy == ["notes"]
    assert sync_report_json(report)["busy"] == ["notes"]  # what `sync --json` prints
    assert [s.source_id for s in report.sources] == ["other"]
    alone = run_sync(config, source_ids=["notes"], embedder_factory=lambda: embedder)
    assert alone.locked and alone.busy == ["notes"]
    holders[0].kill9()
    after = wait_for(lambda: _unlocked(config, embedder), "the killed worker's lock to go")
    assert [s.source_id for s in after.sources] == ["notes"]


def _unlocked(config: Config, embedder: FakeEmbedder) -> SyncReport | None:
    report = run_sync(config, source_ids=["notes"], embedder_factory=lambda: embedder)
    return None if report.locked else report


def test_a_rebuild_waits_for_the_sole_run(tmp_path: Path, notes: Path, pg_url: str, holders: list[Holder]) -> None:
    config = load_config(make_config(tmp_path, notes, db=pg_url))
    embedder = FakeEmbedder(config.embedding)
    holders.append(Holder(pg_url, "source:elsewhere"))  # another worker runs
    report = run_sync(config, embedder_factory=lambda: embedder)  # a new index needs a new space
    assert report.locked and not report.sources
    store = open_store(pg_url)
    try:
        assert store.counts()["files"] == 0
    finally:
        store.close()
    holders[0].kill9()
    assert wait_for(lambda: _unlocked_full(config, embedder), "the rebuild once the other run is gone")


def _unlocked_full(config: Config, embedder: FakeEmbedder) -> bool:
    return not run_sync(config, embedder_factory=lambda: embedder).locked


def test_readers_never_wait_and_status_sees_the_run(pg_config: Config, pg_url: str, holders: list[Holder]) -> None:
    embedder = FakeEmbedder(pg_config.embedding)
    assert not run_sync(pg_config, embedder_factory=lambda: embedder).locked
    assert running_sync(pg_config) is None
    holders.append(Holder(pg_url, "index", "embedding", "source:notes"))  # everything, exclusively
    assert running_sync(pg_config) == holders[0].process.pid
    assert sync_holder(pg_url) == holders[0].process.pid
    store = open_store(pg_url, readonly=True)
    try:
        hits = store.vec_search(embedder.embed_query("backup server"), 3, SearchScope())
        assert hits  # a reader answers while a sync holds the whole index
    finally:
        store.close()
    holders[0].kill9()
    assert wait_for(lambda: running_sync(pg_config) is None, "status to see no sync")


def test_indexes_in_two_schemas_of_one_database_do_not_share_locks(pg_url: str, pg_server: Any) -> None:
    other = pg_server.create_index()
    try:
        first, second = AdvisoryIndexLock(pg_url), AdvisoryIndexLock(other)
        assert first.acquire() and first.claim_index() and first.claim_source("notes")
        assert second.acquire() and second.claim_index() and second.claim_source("notes")
        assert sync_holder(pg_url) == sync_holder(other) == os.getpid()
        first.release()
        assert sync_holder(pg_url) is None and sync_holder(other) == os.getpid()
        second.release()
    finally:
        pg_server.drop_index(other)


def test_a_released_run_lets_the_next_claim_its_sources_at_once(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server frees a session's locks when its backend exits, some time after the client
    closes the socket: release() frees them itself. Here the close is held back altogether."""
    import psycopg

    first = AdvisoryIndexLock(pg_url)
    assert first.acquire() and first.claim_source("notes") and first.claim_embedding()
    session = first._conn
    assert session is not None
    monkeypatch.setattr(psycopg.Connection, "close", lambda self: None)  # the backend lingers
    first.release()
    monkeypatch.undo()
    second = AdvisoryIndexLock(pg_url)
    try:
        assert second.acquire()
        assert second.claim_source("notes") and second.claim_embedding() and second.claim_index()
    finally:
        second.release()
        session.close()


class SilentPath:
    """127.0.0.1 TCP in front of the test server's socket that can stop passing bytes on, closing
    nothing: a server or network that stopped answering."""

    def __init__(self, socket_dir: str) -> None:
        [self.target] = (path for path in Path(socket_dir).glob(".s.PGSQL.*") if path.suffix != ".lock")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.silent = threading.Event()
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                server = socket.socket(socket.AF_UNIX)
                server.connect(str(self.target))
                self.sockets += [client, server]
                for source, sink in ((client, server), (server, client)):
                    threading.Thread(target=self._pass, args=(source, sink), daemon=True).start()

    def _pass(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                while self.silent.is_set():
                    time.sleep(0.05)
                sink.sendall(data)

    def close(self) -> None:
        """Ends both sides: the server's end of a session closes, so it lets its locks go."""
        self.silent.clear()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it; close alone does not
            sock.close()


def test_releasing_over_a_silent_connection_does_not_wait_for_tcp_to_give_up(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """release() runs in `finally` blocks, where a dead server is likeliest: it asks the server to
    free the locks, waits a little for the answer, and closes the connection anyway."""
    import indexer.store.postgres_lock as postgres_lock

    path = SilentPath(pg_server.socket_dir)
    monkeypatch.setattr(postgres_lock, "UNLOCK_WAIT_SECONDS", 0.3)
    lock = AdvisoryIndexLock(f"postgresql://postgres@127.0.0.1:{path.port}/{DATABASE}")
    try:
        assert lock.acquire() and lock.claim_source("notes")
        path.silent.set()
        releasing = threading.Thread(target=lock.release, daemon=True)
        releasing.start()
        releasing.join(timeout=30)  # unbounded, it waits for TCP's retransmissions (~15 minutes)
        assert not releasing.is_alive()
    finally:
        path.close()
    other = AdvisoryIndexLock(pg_server.url())  # the server let the closed session's locks go
    try:
        assert other.acquire()
        assert wait_for(lambda: other.claim_source("notes", timeout=0.2), "the silent session's source lock to go")
    finally:
        other.release()
