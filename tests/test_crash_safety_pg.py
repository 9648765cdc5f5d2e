"""The kill -9 suite on PostgreSQL: a real `notes-search sync` subprocess against a real
pgserver database is SIGKILLed at random and at precise points; the next run must converge.

The corpus, the embedder server, the kill driver and the clean SQLite reference indexes are
test_crash_safety's (imported with its fixtures); the PostgreSQL index after the rerun must
equal the clean SQLite index of the same content (files, chunks, collections, sources, meta,
the vector bytes of every chunk). After each kill and before any repair: no advisory lock is
left (a new run gets the whole index at once), a read-only query answers, the index is
consistent (lexical rows in step, no vector without a chunk, no embedded chunk without one)
and every stored vector is its own chunk's vector in the space meta names.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from indexer.config import load_config
from indexer.migrate import migrate
from indexer.store import IndexReader, Store, chunk_windows, content_hash, open_store
from indexer.store.postgres_lock import AdvisoryIndexLock
from search.engine import search
from tests.embed_servers import OllamaServer
from tests.store_checks import chunk_fingerprint, embedded_without_vector, fts_integrity_check, orphan_vectors
from tests.test_crash_safety import (  # noqa: F401 - fixtures: corpus, server, references, user_data_untouched
    MODEL,
    MODEL_2,
    NEUTRAL_KEYS,
    SEED,
    apply_edits,
    corpus,
    kill_after,
    kill_at,
    references,
    server,
    subprocess_env,
    sync_command,
    sync_in_process,
    user_data_untouched,
    write_config,
)

RANDOM_KILLS_PG = 6
LOCAL_META = ("vectors_generation", "sqlite_vec_version", "pgvector_version", "schema_version", *NEUTRAL_KEYS)


def pg_config(home: Path, endpoint: str, url: str, **kwargs: Any) -> Path:
    """test_crash_safety's config, with the index on the PostgreSQL database `url`."""
    path = write_config(home, endpoint, **kwargs)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["db"] = url
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def state(store: IndexReader) -> dict[str, Any]:
    """Everything an index holds, id-, timestamp- and backend-independent."""
    from indexer.neutral import STATS_KEY, NeutralSpace

    meta = store.meta()
    return {
        "files": [{k: v for k, v in dataclasses.asdict(row).items() if k != "updated_at"} for row in store.file_rows()],
        "chunks": chunk_fingerprint(store),
        "collections": [(c.source_id, c.name, c.folder, c.description, c.tags, c.files) for c in store.collections()],
        "sources": [(s.source_id, s.kind, s.indexed_rev, s.files, s.chunks, s.pending) for s in store.source_stats()],
        "meta": {k: v for k, v in meta.items() if k not in LOCAL_META},
        "languages_moved": sorted(NeutralSpace.from_json(meta.get(STATS_KEY)).offsets()),
    }


def vectors_by_place(store: IndexReader) -> dict[tuple[str, str, int], bytes]:
    """Each chunk's windows' vectors, concatenated, by its place."""
    everything = store.all_vectors()
    rows = store.chunk_rows(int(i) for i in everything.ids)
    return {
        (rows[i].source_id, rows[i].path, rows[i].chunk_idx): windows.tobytes()
        for i, windows in chunk_windows(everything.ids, everything.matrix)
    }


def vectors_by_text(store: IndexReader) -> list[tuple[str, bytes]]:
    """(content hash of the embedded text, its first window's vector: the chunk's own) of every
    chunk that has a vector, as test_crash_safety's references hold them."""
    everything = store.all_vectors()
    rows = store.chunk_rows(int(i) for i in everything.ids)
    return [
        (content_hash(f"{rows[i].breadcrumb}\n\n{rows[i].text}"), windows[0].tobytes())
        for i, windows in chunk_windows(everything.ids, everything.matrix)
    ]


def sqlite_reference(db: Path) -> tuple[dict[str, Any], dict[tuple[str, str, int], bytes]]:
    store = Store.open(db, readonly=True)
    try:
        return state(store), vectors_by_place(store)
    finally:
        store.close()


def check_after_kill(url: str, config_path: Path, vector_refs: dict[str, dict[str, bytes]]) -> None:
    lock = AdvisoryIndexLock(url)
    assert lock.acquire(timeout=2.0) and lock.claim_index(timeout=2.0), "the killed sync left an advisory lock behind"
    lock.release()
    from indexer.store.postgres import PostgresStore

    config = load_config(config_path)
    if not PostgresStore.exists(url):
        return  # killed before the schema's first step committed: nothing was written
    store = open_store(url, readonly=True)
    try:
        if not store.meta().get("schema_version"):
            return
        response = search(store, config, "backup server", mode="lex", embedder_factory=lambda: None)  # type: ignore[arg-type,return-value]
        assert response.mode == "lex"
        assert orphan_vectors(store) == [], "vectors without a chunk"
        assert embedded_without_vector(store) == [], "chunks marked embedded without a vector"
        fts_integrity_check(store)
        counts = store.counts()
        assert counts["chunks"] == counts["chunks_fts"]
        assert counts["vectors"] == counts["chunks"] - counts["pending"]
        model = store.meta().get("embedding_model")
        if model is not None:
            reference = vector_refs[model]
            for digest, blob in vectors_by_text(store):
                assert reference.get(digest) == blob, f"a chunk's vector is not the {model} vector of its text"
    finally:
        store.close()


def rerun_and_compare(url: str, config_path: Path, reference_db: Path) -> None:
    report = sync_in_process(config_path)
    assert not report.locked, "an advisory lock was still held after the kill"
    assert not report.failed and report.pending == 0, report
    want_state, want_vectors = sqlite_reference(reference_db)
    store = open_store(url, readonly=True)
    try:
        got = state(store)
        for key in want_state:
            assert got[key] == want_state[key], f"{key} differs from a clean full index"
        assert vectors_by_place(store) == want_vectors, "vectors differ from a clean full index"
    finally:
        store.close()


@pytest.fixture(scope="module")
def pg_duration(tmp_path_factory: pytest.TempPathFactory, corpus: Path, server: OllamaServer, pg_server: Any) -> float:
    """How long a full first index into PostgreSQL takes as a subprocess (the random kills' span)."""
    import time

    url = pg_server.create_index()
    try:
        config_path = pg_config(tmp_path_factory.mktemp("pg-timed"), server.url, url, notes=corpus)
        started = time.monotonic()
        proc = subprocess.run(
            sync_command(config_path), env=subprocess_env(), capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        return time.monotonic() - started
    finally:
        pg_server.drop_index(url)


def _fractions(count: int) -> list[float]:
    rnd = random.Random(SEED + 7)
    return [rnd.random() for _ in range(count)]


@pytest.mark.parametrize("fraction", _fractions(RANDOM_KILLS_PG), ids=lambda f: f"at{f:.3f}T")
def test_random_kill_during_first_index_converges(
    fraction: float,
    tmp_path: Path,
    corpus: Path,
    server: OllamaServer,
    references: dict[str, Any],
    pg_duration: float,
    pg_url: str,
) -> None:
    config_path = pg_config(tmp_path / "home", server.url, pg_url, notes=corpus)
    kill_after(config_path, 0.05 + fraction * (pg_duration - 0.05))
    check_after_kill(pg_url, config_path, references["vectors"])
    rerun_and_compare(pg_url, config_path, references["db"]["a"])


FIRST_INDEX_POINTS = [
    "call@indexer.language:chunk_languages@1",  # inside the first batch transaction (its write_files)
    "call@indexer.sync:Syncer._write_batch@2",  # first batch committed, second not started
    "call@indexer.store.postgres:PostgresStore.store_vectors@3",  # vectors partly attached
    "call@indexer.store.postgres:PostgresStore.set_meta@1",  # before chunker_version is recorded
    "call@indexer.store.postgres_lock:AdvisoryIndexLock.release@1",  # done, locks still held when killed
]


@pytest.mark.parametrize("kill_point", FIRST_INDEX_POINTS)
def test_precise_kill_during_first_index_converges(
    kill_point: str,
    tmp_path: Path,
    corpus: Path,
    server: OllamaServer,
    references: dict[str, Any],
    pg_url: str,
) -> None:
    config_path = pg_config(tmp_path / "home", server.url, pg_url, notes=corpus)
    kill_at(config_path, kill_point)
    check_after_kill(pg_url, config_path, references["vectors"])
    rerun_and_compare(pg_url, config_path, references["db"]["a"])


def _migrated(pg_url: str, reference_db: Path) -> None:
    """The PostgreSQL database starts as a copy of a clean SQLite reference (migrate)."""
    source, target = Store.open(reference_db, readonly=True), open_store(pg_url)
    try:
        migrate(source, target)
    finally:
        source.close()
        target.close()


@pytest.mark.parametrize(
    "kill_point",
    ["call@indexer.store.postgres:PostgresStore.delete_file@5", "call@indexer.sync:find_collections@1"],
    ids=["inside-a-batch-with-deletions", "after-files-before-collections"],
)
def test_precise_kill_during_incremental_sync_converges(
    kill_point: str,
    tmp_path: Path,
    corpus: Path,
    server: OllamaServer,
    references: dict[str, Any],
    pg_url: str,
) -> None:
    notes = tmp_path / "notes"
    shutil.copytree(corpus, notes, copy_function=shutil.copy2)  # mtimes kept: the copied index is current
    _migrated(pg_url, references["db"]["a"])
    config_path = pg_config(tmp_path / "home", server.url, pg_url, notes=notes)
    assert not sync_in_process(config_path).changed
    apply_edits(notes)
    kill_at(config_path, kill_point)
    check_after_kill(pg_url, config_path, references["vectors"])
    rerun_and_compare(pg_url, config_path, references["db"]["b"])


def test_precise_kill_during_model_change_never_mixes_spaces(
    tmp_path: Path,
    corpus: Path,
    server: OllamaServer,
    references: dict[str, Any],
    pg_url: str,
) -> None:
    _migrated(pg_url, references["db"]["a"])
    config_path = pg_config(tmp_path / "home", server.url, pg_url, notes=corpus, model=MODEL_2, passage_prefix="doc: ")
    kill_at(config_path, "call@indexer.store.postgres:PostgresStore.store_vectors@3")  # new space partly filled
    check_after_kill(pg_url, config_path, references["vectors"])
    store = open_store(pg_url, readonly=True)
    try:
        assert store.meta()["embedding_model"] == MODEL_2 != MODEL
    finally:
        store.close()
    rerun_and_compare(pg_url, config_path, references["db"]["c"])
