"""Store-level guarantees: exact scoped KNN, FTS trigger consistency, vector reuse, migrations,
and that the SQLite store implements the IndexReader/IndexWriter protocols."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator
from pathlib import Path

import apsw
import numpy as np
import pytest

from indexer.config import EmbeddingConfig
from indexer.errors import StoreError
from indexer.model import Chunk, FileVersion, ParsedDocument
from indexer.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    IndexReader,
    IndexWriter,
    SearchScope,
    Store,
    open_store,
    vec_extension_path,
)
from tests.conftest import keywords
from tests.pg import BACKENDS
from tests.store_checks import embedded_without_vector, fts_integrity_check, orphan_vectors

DIMS = 16


def doc(path: str, texts: list[str]) -> tuple[FileVersion, ParsedDocument]:
    chunks = [Chunk(i, f"{path} > part {i}", text, i + 1, i + 1) for i, text in enumerate(texts)]
    return (
        FileVersion(path=path, text="\n".join(texts), sha256=path, size=1, mtime=1.0, updated_at=1.0),
        ParsedDocument(title=path, chunks=chunks),
    )


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each contract test runs on both backends."""
    location = request.getfixturevalue("pg_url") if request.param == "postgres" else tmp_path / "index.sqlite"
    store = typing.cast(Store, open_store(location))
    store.reset_vectors(
        DIMS, EmbeddingConfig(provider="ollama", model="t:1", endpoint="http://x", dims=DIMS).identity()
    )
    store.ensure_source("s", "workspace")
    yield store
    store.close()


def fill(store: Store, folders: dict[str, int], rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Write files with one chunk each and random unit vectors; returns id -> vector."""
    with store.transaction():  # in one batch: thousands of round trips would cost PostgreSQL seconds
        store.write_files(
            "s", [doc(f"{f}/n{i}.md", [f"note {f} {i}"]) for f, count in folders.items() for i in range(count)]
        )
    vectors: dict[int, np.ndarray] = {}
    rows = store.pending_chunks(100_000)
    matrix = rng.normal(size=(len(rows), DIMS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    store.store_vectors([r[0] for r in rows], matrix)
    for (chunk_id, _, _), vector in zip(rows, matrix, strict=True):
        vectors[chunk_id] = vector
    return vectors


def test_scoped_knn_is_the_exact_top_k_of_a_one_percent_scope(store: Store) -> None:
    rng = np.random.default_rng(7)
    vectors = fill(store, {"big": 2970, "small": 30}, rng)
    in_scope = {cid for cid, row in store.chunk_rows(vectors).items() if row.path.startswith("small/")}
    assert len(in_scope) == 30
    for _ in range(5):
        query = rng.normal(size=DIMS).astype(np.float32)
        query /= np.linalg.norm(query)
        hits = store.vec_search(query, 10, SearchScope(path="small"))
        expected = sorted(in_scope, key=lambda cid: -float(vectors[cid] @ query))[:10]
        assert [cid for cid, _ in hits] == expected
        # and a scope smaller than k returns all of it
        assert len(store.vec_search(query, 50, SearchScope(path="small"))) == 30


def test_path_scope_is_a_folder_prefix_not_a_string_prefix(store: Store) -> None:
    fill(store, {"small": 3, "smaller": 4}, np.random.default_rng(1))
    query = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
    paths = {store.chunk_rows([cid])[cid].path for cid, _ in store.vec_search(query, 50, SearchScope(path="small"))}
    assert paths == {f"small/n{i}.md" for i in range(3)}
    assert len(store.fts_search(keywords("note"), 50, SearchScope(path="small/n1.md"))) == 1


def test_rewrite_reuses_vectors_of_unchanged_text_and_keeps_fts_in_step(store: Store) -> None:
    fill(store, {"a": 1}, np.random.default_rng(2))
    with store.transaction():
        pending = store.write_file("s", *doc("a/n0.md", ["note a 0", "brand new text"]))
    assert pending == 1  # the unchanged chunk got its old vector back
    counts = store.counts()
    assert counts["chunks"] == counts["chunks_fts"] == 2 and counts["vectors"] == 1
    fts_integrity_check(store)
    assert store.fts_search(keywords("brand"), 5, SearchScope()) and not orphan_vectors(store)


def test_rollback_leaves_nothing_behind(store: Store) -> None:
    fill(store, {"a": 2}, np.random.default_rng(3))
    before = store.counts()
    with pytest.raises(RuntimeError), store.transaction():
        store.delete_file("s", "a/n0.md")
        raise RuntimeError("killed")
    assert store.counts() == before


def test_reset_vectors_switches_spaces_atomically(store: Store) -> None:
    fill(store, {"a": 5}, np.random.default_rng(4))
    store.reset_vectors(8, {"embedding_model": "other:1", "embedding_dims": "8"})
    counts = store.counts()
    assert counts["vectors"] == 0 and counts["pending"] == counts["chunks"] == 5
    assert store.meta()["embedding_dims"] == "8"


@pytest.mark.sqlite_only("the SQLite file's own open (PostgreSQL's: test_postgres)")
def test_readonly_open_needs_an_index(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="run `notes-search sync` first"):
        Store.open(tmp_path / "missing.sqlite", readonly=True)
    Store.open(tmp_path / "fresh.sqlite").close()
    ro = Store.open(tmp_path / "fresh.sqlite", readonly=True)
    try:
        assert ro.meta()["schema_version"] == str(SCHEMA_VERSION)
    finally:
        ro.close()


# ---- migrations ------------------------------------------------------------------------------


def _schema(store: Store) -> set[tuple[str, str, str]]:
    """Every table, index, trigger and virtual table, whitespace-normalised."""
    rows = store.conn.execute("SELECT type, name, COALESCE(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    return {(kind, name, " ".join(sql.split())) for kind, name, sql in rows}


def _stopped_after(path: Path, steps: int) -> None:
    """An index as a version that knew only the first `steps` migrations left it, with one source,
    one file and two chunks (one of them with a vector, once the version had vectors)."""
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(vec_extension_path())
    for number, step in enumerate(MIGRATIONS[:steps]):
        with conn:
            conn.execute(step.sql)
            if step.data is not None:
                step.data(conn)
            conn.execute(f"PRAGMA user_version = {number + 1}")
    # vec0 stands apart from the schema steps: the first sync creates it (Store.reset_vectors)
    conn.execute(f"CREATE VIRTUAL TABLE vec_chunks USING vec0(embedding float[{DIMS}] distance_metric=cosine)")
    if steps:
        conn.execute("INSERT INTO sources(source_id, kind) VALUES ('s', 'workspace')")
        conn.execute(
            "INSERT INTO files(source_id, path, sha256, size, updated_at, indexed_at)"
            " VALUES ('s', 'a.md', 'x', 1, 1.0, '2024-01-01T00:00:00Z')"
        )
        for idx, embedded in ((0, "2024-01-01T00:00:00Z"), (1, None)):
            conn.execute(
                "INSERT INTO chunks(source_id, path, chunk_idx, breadcrumb, text, start_line, end_line,"
                " content_hash, embedded_at) VALUES ('s', 'a.md', ?, 'a', 'Dobrý den, jak se máte?', 1, 1, ?, ?)",
                (idx, f"h{idx}", embedded),
            )
        conn.execute("INSERT INTO vec_chunks(rowid, embedding) VALUES (1, ?)", (np.ones(DIMS, np.float32).tobytes(),))
        if steps > 2:  # chunk_vectors exists: the version kept both copies
            conn.execute(
                "INSERT INTO chunk_vectors(id, embedding) VALUES (1, ?)", (np.ones(DIMS, np.float32).tobytes(),)
            )
    conn.close()


@pytest.mark.sqlite_only("the SQLite schema's named migrations")
@pytest.mark.parametrize("steps", range(len(MIGRATIONS)))
def test_an_index_stopped_after_any_step_migrates_to_the_fresh_schema(tmp_path: Path, steps: int) -> None:
    fresh = Store.open(tmp_path / "fresh.sqlite")
    fresh.conn.execute(f"CREATE VIRTUAL TABLE vec_chunks USING vec0(embedding float[{DIMS}] distance_metric=cosine)")
    _stopped_after(tmp_path / "old.sqlite", steps)
    old = Store.open(tmp_path / "old.sqlite")
    try:
        assert _schema(old) == _schema(fresh)
        assert old.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert old.meta()["schema_version"] == str(SCHEMA_VERSION)
        if steps:
            # the data halves ran: the vector kept only in vec0 got its second copy, and the chunks
            # written before languages were detected wait for the backfill
            assert old.conn.execute("SELECT id FROM chunk_vectors").fetchall() == [(1,)]
            assert not embedded_without_vector(old)
            languages_at = next(i for i, step in enumerate(MIGRATIONS) if step.name == "chunk_language")
            assert old.language_backfill() == ((2, 0) if steps <= languages_at else None)
            assert set(old.chunk_languages().values()) == {"unknown"}
            fts_integrity_check(old)
            assert [hit.chunk_id for hit in old.fts_search(keywords("dobry"), 5, SearchScope())] == [1, 2]
    finally:
        old.close()
        fresh.close()


def test_migration_steps_are_named_once_and_counted_by_user_version() -> None:
    names = [step.name for step in MIGRATIONS]
    assert len(set(names)) == len(names) and all(names)
    assert len(MIGRATIONS) == SCHEMA_VERSION


@pytest.mark.sqlite_only("the SQLite file's user_version")
def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    Store.open(tmp_path / "index.sqlite").close()
    conn = apsw.Connection(str(tmp_path / "index.sqlite"))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer notes-search"):
        Store.open(tmp_path / "index.sqlite")


# ---- the protocols ---------------------------------------------------------------------------


def _protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    """The methods a Protocol declares, with those of the protocols it extends."""
    found: dict[str, inspect.Signature] = {}
    for cls in reversed(protocol.__mro__):
        if cls is object or cls is typing.Protocol or typing.Generic in (cls,):
            continue
        for name, value in vars(cls).items():
            if callable(value) and not name.startswith("_"):
                found[name] = inspect.signature(value)
    return found


@pytest.mark.parametrize("protocol", [IndexReader, IndexWriter])
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_store_has_every_protocol_method_with_its_parameters(protocol: type, backend: str) -> None:
    from indexer.store.postgres import PostgresStore

    implementation = Store if backend == "sqlite" else PostgresStore
    declared = _protocol_methods(protocol)
    assert declared, "no methods found: the protocol lookup is broken"
    for name, signature in declared.items():
        assert hasattr(implementation, name), f"{implementation.__name__} lacks {protocol.__name__}.{name}"
        implemented = inspect.signature(getattr(implementation, name))
        assert [(p.name, p.kind, p.default) for p in implemented.parameters.values()] == [
            (p.name, p.kind, p.default) for p in signature.parameters.values()
        ], f"Store.{name}{implemented} differs from {protocol.__name__}.{name}{signature}"


def test_the_reader_protocol_has_no_write_method() -> None:
    writes = {"transaction", "write_file", "delete_file", "store_vectors", "reset_vectors", "set_meta", "remove_source"}
    assert not writes & set(_protocol_methods(IndexReader))
    assert writes <= set(_protocol_methods(IndexWriter))
