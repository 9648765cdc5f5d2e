"""`migrate`: an index copied into another store answers like the original, vectors included and
nothing embedded again; counts are verified; a non-empty target is refused unless forced."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from indexer.config import Config
from indexer.errors import StoreError
from indexer.lock import SyncLock
from indexer.migrate import TargetNotEmpty, migrate
from indexer.model import Chunk, FileVersion, ParsedDocument
from indexer.store import IndexWriter, SearchScope, Store, open_store
from indexer.sync import SyncReport
from search import cli as cli_module
from tests.conftest import assert_one_line_error, make_config, write
from tests.fakes import FakeEmbedder

Sync = Callable[..., SyncReport]


@pytest.fixture
def backend() -> str:
    """The source of a migration is a SQLite index by definition (`migrate` refuses a config
    whose index is already on a server, see the test below), so the config here is SQLite's
    whatever NOTES_SEARCH_TEST_BACKEND says; the targets cover both stores."""
    return "sqlite"


@pytest.fixture(params=["sqlite", "postgres"])
def target_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[IndexWriter]:
    """An empty target of either backend (the source is always the config's SQLite file)."""
    if request.param == "postgres":
        store = open_store(str(request.getfixturevalue("pg_url")))
    else:
        store = open_store(tmp_path / "target" / "index.sqlite")
    yield store
    store.close()


def content(store: IndexWriter) -> tuple[object, ...]:
    """Everything a search can see, keyed by place instead of chunk id."""
    ids = sorted(store.chunk_languages())
    rows = store.chunk_rows(ids)
    languages = store.chunk_languages(ids)
    vectors = store.all_vectors()
    by_id: dict[int, bytes] = {}  # a chunk's windows, first window first
    for k, i in enumerate(vectors.ids):
        by_id[int(i)] = by_id.get(int(i), b"") + vectors.matrix[k].tobytes()
    chunks = sorted(
        (r.source_id, r.path, r.chunk_idx, r.breadcrumb, r.text, r.start_line, r.end_line, languages[i], by_id.get(i))
        for i, r in rows.items()
    )
    files = [
        (f.source_id, f.path, f.title, f.tags, f.headings, f.collection, f.sha256, f.size, f.front_matter_problem)
        for f in store.file_rows()
    ]
    sources = [
        (s.source_id, s.kind, s.indexed_rev, s.last_error, s.files, s.chunks, s.pending) for s in store.source_stats()
    ]
    return chunks, files, sources, store.collections(), store.known_files("notes")


def test_copy_answers_like_the_original(
    do_sync: Sync, config: Config, target_store: IndexWriter, embedder: FakeEmbedder
) -> None:
    write(config.sources["notes"].root, {"devops/_meta.yaml": "name: ops\ndescription: servers\ntags: [corp]\n"})  # type: ignore[union-attr]
    do_sync()
    source = Store.open(config.db)
    try:
        calls = embedder.calls
        seen: list[str] = []
        report = migrate(source, target_store, progress=lambda stage, done, total: seen.append(stage))
        assert embedder.calls == calls  # nothing embedded again
        assert [c.name for c in target_store.collections()] == ["ops"]
        assert report.files == source.counts()["files"] and report.vectors == source.counts()["vectors"] > 0
        assert "files" in seen  # the vectors travel with their files
        assert content(target_store) == content(source)
        for key in ("embedding_model", "embedding_dims", "vector_space", "chunker_version:notes"):
            assert target_store.meta().get(key) == source.meta().get(key), key
        query = embedder.embed_query("backup server")
        ours = [source.chunk_rows([h.chunk_id])[h.chunk_id].path for h in source.vec_search(query, 5, SearchScope())]
        theirs = [
            target_store.chunk_rows([h.chunk_id])[h.chunk_id].path
            for h in target_store.vec_search(query, 5, SearchScope())
        ]
        assert theirs == ours
    finally:
        source.close()


def test_pending_chunks_stay_pending(config: Config, do_sync: Sync, target_store: IndexWriter) -> None:
    do_sync(embedder_factory=None)  # text only: every chunk waits for a vector
    source = Store.open(config.db)
    try:
        assert source.counts()["pending"] > 0
        report = migrate(source, target_store)
        assert report.pending == source.counts()["pending"] and report.vectors == 0
        assert content(target_store) == content(source)
    finally:
        source.close()


def test_a_pending_chunk_whose_text_has_a_vector_elsewhere_stays_pending(
    config: Config, do_sync: Sync, target_store: IndexWriter
) -> None:
    """An embedding pass cut short (a catch-up's deadline, between two batches) can leave one
    copy of a text embedded and another pending: the copy keeps each chunk as it is."""
    import numpy as np

    do_sync()
    source = Store.open(config.db)
    try:
        with source.transaction():
            for path in ("dup/a.md", "dup/b.md"):
                source.write_file("notes", *_one_chunk(path, "a text both notes hold"))
        waiting = source.pending_chunks(10)
        assert len(waiting) == 2
        vector = np.zeros((1, int(source.meta()["embedding_dims"])), dtype=np.float32)
        vector[0, 0] = 1.0
        source.store_vectors([waiting[0].id], vector)
        report = migrate(source, target_store)
        assert report.pending == source.counts()["pending"] == 1
        assert content(target_store) == content(source)
    finally:
        source.close()


def _one_chunk(path: str, text: str) -> tuple[FileVersion, ParsedDocument]:
    return (
        FileVersion(path=path, text=text, sha256=path, size=len(text), mtime=1.0, updated_at=1.0),
        ParsedDocument(title=path, chunks=[Chunk(0, "Shared", text, 1, 1)]),
    )


def test_non_empty_target_is_refused_unless_forced(config: Config, do_sync: Sync, target_store: IndexWriter) -> None:
    do_sync()
    source = Store.open(config.db)
    try:
        migrate(source, target_store)
        before = target_store.counts()
        with pytest.raises(TargetNotEmpty, match="pass --force"):
            migrate(source, target_store)
        assert target_store.counts() == before  # nothing touched
        migrate(source, target_store, force=True)
        assert content(target_store) == content(source)
    finally:
        source.close()


def test_a_missing_vector_is_named(config: Config, do_sync: Sync, target_store: IndexWriter) -> None:
    """Verification is real: a target that lost a vector during the copy fails it."""
    do_sync()
    source = Store.open(config.db)
    try:
        real_write = target_store.write_files
        lost: list[str] = []

        def lose_one(
            source_id: str,
            files: Sequence[tuple[FileVersion, ParsedDocument]],
            language_of: Callable[[str], str] | None = None,
            vectors: Mapping[str, bytes] | None = None,
        ) -> int:
            if vectors and not lost:
                lost.append(next(iter(vectors)))
                vectors = {digest: vector for digest, vector in vectors.items() if digest != lost[0]}
            return real_write(source_id, files, language_of, vectors)

        target_store.write_files = lose_one  # type: ignore[method-assign]
        with pytest.raises(StoreError, match="copy differs: vectors"):
            migrate(source, target_store)
    finally:
        source.close()


# ---------------------------------------------------------------------------------------- CLI


def run_cli(config_path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli_module.cli, ["-c", str(config_path), *args], catch_exceptions=False)


def test_cli_copies_and_verifies(config_path: Path, config: Config, do_sync: Sync, tmp_path: Path) -> None:
    do_sync()
    copy = tmp_path / "copy" / "index.sqlite"
    result = run_cli(config_path, "migrate", "--to", str(copy))
    assert result.exit_code == 0, result.output
    assert "counts verified" in result.output
    target, source = Store.open(copy), Store.open(config.db)
    try:
        assert content(target) == content(source)
    finally:
        target.close()
        source.close()
    again = run_cli(config_path, "migrate", "--to", str(copy))
    assert_one_line_error(again, "already holds an index", "--force")
    assert run_cli(config_path, "migrate", "--to", str(copy), "--force").exit_code == 0


def test_cli_errors_are_one_line(config_path: Path, config: Config, do_sync: Sync, tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli(config_path, "migrate", "--to", str(tmp_path / "x.sqlite")), "run `notes-search sync` first"
    )
    do_sync()
    unreachable = run_cli(config_path, "migrate", "--to", "postgresql://someone:secret@127.0.0.1:1/notes")
    line = assert_one_line_error(unreachable, "cannot reach the PostgreSQL server", "someone@127.0.0.1:1")
    assert "secret" not in line
    with SyncLock(config.lock_path) as lock:
        assert lock.acquire()
        assert_one_line_error(run_cli(config_path, "migrate", "--to", str(tmp_path / "y.sqlite")), "a sync is running")
    assert_one_line_error(run_cli(config_path, "migrate", "--to", str(config.db)), "the index itself")


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("mysql://me@db.lan/notes", "got a mysql:// URL"),
        ("postgresq://me@db.lan/notes", "got a postgresq:// URL"),
        ("postgresql://me@db.lan", "must name the database"),
        ("postgresql://me@db.lan:99999/notes", "not a valid PostgreSQL URL"),
    ],
)
def test_a_target_that_is_no_index_location_is_a_usage_error(
    config_path: Path, do_sync: Sync, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, problem: str
) -> None:
    """Checked like `db:` before anything is opened: a foreign or typo'd URL read as a file
    path would be "copied" into a SQLite file below a folder named after its scheme."""
    do_sync()
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    result = run_cli(config_path, "migrate", "--to", target)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--to'" in result.stderr and problem in result.stderr, result.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_cli_copies_into_postgres(
    config_path: Path, config: Config, do_sync: Sync, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from indexer.store.postgres import vectors as pg_vectors

    monkeypatch.setattr(pg_vectors, "HNSW_MIN_VECTORS", 1)  # as a large index: built after the copy
    do_sync()
    result = run_cli(config_path, "migrate", "--to", pg_url)
    assert result.exit_code == 0, result.output
    target, source = open_store(pg_url), Store.open(config.db)
    try:
        assert content(target) == content(source)
        hnsw = "SELECT 1 FROM pg_indexes WHERE indexname = 'idx_chunk_vectors_hnsw'"
        assert target.conn.execute(hnsw).fetchone() is not None  # type: ignore[attr-defined]  # built after the copy
        analyzed = target.conn.execute(  # type: ignore[attr-defined]
            "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL AND schemaname = current_schema()"
        ).fetchall()
        assert {"chunks", "chunks_fts", "chunk_vectors"} <= {name for (name,) in analyzed}  # the planner knows the copy
    finally:
        target.close()
        source.close()
    assert_one_line_error(run_cli(config_path, "migrate", "--to", pg_url), "already holds an index")


def test_a_config_whose_index_is_on_a_server_is_refused_in_one_line(tmp_path: Path, notes: Path, pg_url: str) -> None:
    config_path = make_config(tmp_path, notes, db=pg_url)
    result = run_cli(config_path, "migrate", "--to", str(tmp_path / "copy.sqlite"))
    assert_one_line_error(result, "already on a server", "migrate copies a SQLite index")
    assert not (tmp_path / "copy.sqlite").exists()


def test_cli_shows_progress_on_a_terminal(
    config_path: Path, do_sync: Sync, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    do_sync()
    monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: True)
    result = run_cli(config_path, "migrate", "--to", str(tmp_path / "copy.sqlite"))
    assert result.exit_code == 0, result.output
    assert "files" in result.stderr


# a `notes-search migrate` that SIGKILLs itself once two one-file batches are committed
KILLED_MIGRATE = """
import os, signal, sys
import indexer.migrate as migrate_module
migrate_module.FILES_PER_TRANSACTION = 1
copy_files = migrate_module._copy_files
def copy_then_die(source, target, stats, report):
    def dying(stage, done, total):
        report(stage, done, total)
        if stage == "files" and done >= 2:
            os.kill(os.getpid(), signal.SIGKILL)
    return copy_files(source, target, stats, dying)
migrate_module._copy_files = copy_then_die
from search.cli import cli
cli(sys.argv[1:])
"""


@pytest.mark.parametrize("to", ["sqlite", "postgres"])
def test_a_killed_migrate_says_so_and_a_rerun_replaces_its_partial_copy(
    config_path: Path,
    config: Config,
    notes: Path,
    do_sync: Sync,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    to: str,
) -> None:
    """A migrate killed halfway leaves a target its status calls unfinished, and the re-run
    replaces it without --force (which a finished copy, another index, still needs)."""
    import json
    import signal
    import subprocess
    import sys

    write(notes, {f"more/note-{i}.md": f"# Note {i}\n\nbody of note {i}\n" for i in range(4)})
    do_sync()
    url = str(request.getfixturevalue("pg_url")) if to == "postgres" else str(tmp_path / "copy" / "index.sqlite")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MIGRATE, "-c", str(config_path), "migrate", "--to", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    source = Store.open(config.db)
    partial = open_store(url)
    try:
        assert 0 < partial.counts()["files"] < source.counts()["files"]
    finally:
        partial.close()
    copy_root = tmp_path / "as-copy"
    copy_root.mkdir()
    copy_config = make_config(copy_root, notes, db=url)
    shown = run_cli(copy_config, "status", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["unfinished_copy"] is True
    text = run_cli(copy_config, "status")
    assert "unfinished copy" in text.stdout and "no --force needed" in text.stdout
    assert "incomplete: the first sync" not in text.stdout  # the copy, not a sync, is what stopped

    rerun = run_cli(config_path, "migrate", "--to", url)
    assert rerun.exit_code == 0, rerun.output
    assert "replaced the unfinished copy" in rerun.output and "counts verified" in rerun.output
    target = open_store(url)
    try:
        assert content(target) == content(source)
        assert "copy_unfinished" not in target.meta()  # a finished copy carries no trace of the marker
    finally:
        target.close()
        source.close()
    assert json.loads(run_cli(copy_config, "status", "--json").stdout)["unfinished_copy"] is False
    assert_one_line_error(run_cli(config_path, "migrate", "--to", url), "already holds an index", "--force")
