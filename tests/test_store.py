"""Store-level guarantees: exact scoped KNN, FTS trigger consistency, vector reuse, migrations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from indexer.config import EmbeddingConfig
from indexer.errors import StoreError
from indexer.model import Chunk, FileVersion, ParsedDocument
from indexer.store import SCHEMA_VERSION, SearchScope, Store
from tests.store_checks import fts_integrity_check, orphan_vectors

DIMS = 16


def doc(path: str, texts: list[str]) -> tuple[FileVersion, ParsedDocument]:
    chunks = [Chunk(i, f"{path} > part {i}", text, i + 1, i + 1) for i, text in enumerate(texts)]
    return (
        FileVersion(path=path, text="\n".join(texts), sha256=path, size=1, mtime=1.0, updated_at=1.0),
        ParsedDocument(title=path, chunks=chunks),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(tmp_path / "index.sqlite")
    store.reset_vectors(DIMS, EmbeddingConfig(provider="ollama", model="t:1", endpoint="http://x", dims=DIMS).identity())
    store.ensure_source("s", "workspace")
    yield store
    store.close()


def fill(store: Store, folders: dict[str, int], rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Write files with one chunk each and random unit vectors; returns id -> vector."""
    with store.transaction():
        for folder, count in folders.items():
            for i in range(count):
                store.write_file("s", *doc(f"{folder}/n{i}.md", [f"note {folder} {i}"]))
    vectors: dict[int, np.ndarray] = {}
    rows = store.pending_chunks(100_000)
    matrix = rng.normal(size=(len(rows), DIMS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    store.store_vectors([r[0] for r in rows], matrix)
    for (chunk_id, _, _), vector in zip(rows, matrix):
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
    assert len(store.fts_search('"note"', 50, SearchScope(path="small/n1.md"))) == 1


def test_rewrite_reuses_vectors_of_unchanged_text_and_keeps_fts_in_step(store: Store) -> None:
    fill(store, {"a": 1}, np.random.default_rng(2))
    with store.transaction():
        pending = store.write_file("s", *doc("a/n0.md", ["note a 0", "brand new text"]))
    assert pending == 1  # the unchanged chunk got its old vector back
    counts = store.counts()
    assert counts["chunks"] == counts["chunks_fts"] == 2 and counts["vectors"] == 1
    fts_integrity_check(store)
    assert store.fts_search('"brand"', 5, SearchScope()) and not orphan_vectors(store)


def test_rollback_leaves_nothing_behind(store: Store) -> None:
    fill(store, {"a": 2}, np.random.default_rng(3))
    before = store.counts()
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.delete_file("s", "a/n0.md")
            raise RuntimeError("killed")
    assert store.counts() == before


def test_reset_vectors_switches_spaces_atomically(store: Store) -> None:
    fill(store, {"a": 5}, np.random.default_rng(4))
    store.reset_vectors(8, {"embedding_model": "other:1", "embedding_dims": "8"})
    counts = store.counts()
    assert counts["vectors"] == 0 and counts["pending"] == counts["chunks"] == 5
    assert store.meta()["embedding_dims"] == "8"


def test_readonly_open_needs_an_index(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="run `notes-search sync` first"):
        Store.open(tmp_path / "missing.sqlite", readonly=True)
    Store.open(tmp_path / "fresh.sqlite").close()
    ro = Store.open(tmp_path / "fresh.sqlite", readonly=True)
    try:
        assert ro.meta()["schema_version"] == str(SCHEMA_VERSION)
    finally:
        ro.close()
