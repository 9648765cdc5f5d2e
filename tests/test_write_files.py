"""The store's batch write (`write_files`) on both backends, and PostgreSQL's HNSW build held back
during a first sync's embedding pass."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from indexer.model import FileVersion, ParsedDocument
from indexer.store import CollectionRow, SearchScope, Store, content_hash
from tests.conftest import keywords
from tests.store_checks import embedded_without_vector, fts_integrity_check, orphan_vectors
from tests.test_store import DIMS, doc, store  # noqa: F401 - `store` is the two-backend fixture


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    matrix = rng.normal(size=(n, DIMS)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_a_batch_writes_every_file_in_order_and_a_repeated_path_keeps_its_last_version(store: Store) -> None:
    files = [doc(f"d/n{i}.md", [f"alpha {i}", f"beta {i}"]) for i in range(5)]
    files.append(doc("d/n1.md", ["gamma replaced"]))  # the same path again: this version wins
    with store.transaction():
        pending = store.write_files("s", files)
    assert pending == 11  # what write_file returns for each, summed (n1.md's first version included)
    rows = store.chunk_rows([p.id for p in store.pending_chunks(100)])
    by_id = sorted((chunk_id, row.path, row.chunk_idx, row.text) for chunk_id, row in rows.items())
    assert [(path, idx, text) for _, path, idx, text in by_id] == [  # ids ascend in the order written
        *[(f"d/n{i}.md", k, f"{word} {i}") for i in (0, 2, 3, 4) for k, word in enumerate(("alpha", "beta"))],
        ("d/n1.md", 0, "gamma replaced"),
    ]
    assert sorted(r.path for r in store.file_rows("s")) == [f"d/n{i}.md" for i in range(5)]
    assert {h.chunk_id for h in store.fts_search(keywords("gamma"), 10, SearchScope())} == {
        i for i, row in rows.items() if row.text == "gamma replaced"
    }
    assert not {h.chunk_id for h in store.fts_search(keywords("beta"), 10, SearchScope())} & {
        i for i, row in rows.items() if row.path == "d/n1.md"
    }
    fts_integrity_check(store)
    counts = store.counts()
    assert counts["chunks"] == counts["chunks_fts"] == counts["pending"] == 9


def test_given_vectors_go_with_their_chunks_and_no_stored_vector_is_reused(store: Store) -> None:
    rng = np.random.default_rng(3)
    with store.transaction():
        store.write_files("s", [doc("a.md", ["kept text"])])
    first = store.pending_chunks(10)
    store.store_vectors([first[0].id], _unit(rng, 1))
    # a.md again: its first chunk unchanged (a vector stored for it), a new one whose vector is given
    again = doc("a.md", ["kept text", "new text"])
    given = _unit(rng, 1)[0]
    new_hash = content_hash(again[1].chunks[1].embed_text)
    with store.transaction():
        pending = store.write_files("s", [again], vectors={new_hash: given.tobytes()})
    assert pending == 1  # the unchanged chunk was not given: it waits, although its text had a vector
    waiting = store.pending_chunks(10)
    assert [store.chunk_rows([p.id])[p.id].text for p in waiting] == ["kept text"]
    everything = store.all_vectors()
    assert len(everything.ids) == 1
    assert store.chunk_rows(everything.ids.tolist())[int(everything.ids[0])].text == "new text"
    assert np.allclose(everything.matrix[0], given)
    assert orphan_vectors(store) == [] and embedded_without_vector(store) == []
    # without `vectors` the stored ones are reused as before
    with store.transaction():
        assert store.write_files("s", [again]) == 1
    assert store.counts()["vectors"] == 1


@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_a_first_embedding_pass_builds_the_hnsw_index_once_after_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from indexer.store.postgres import vectors as pg_vectors

    monkeypatch.setattr(pg_vectors, "HNSW_MIN_VECTORS", 20)
    index = "SELECT to_regclass('idx_chunk_vectors_hnsw') IS NOT NULL"
    conn = store.conn  # type: ignore[attr-defined]
    with store.transaction():
        store.write_files("s", [doc(f"n{i}.md", [f"note {i}", f"more {i}"]) for i in range(30)])
    rng = np.random.default_rng(4)
    with store.bulk_load():
        after = 0
        while pending := store.pending_chunks(10, after):
            after = pending[-1].id
            store.store_vectors([p.id for p in pending], _unit(rng, len(pending)))
            assert not conn.execute(index).fetchone()[0]  # not midway, although 20 are in
    assert conn.execute(index).fetchone()[0]
    assert store.counts()["vectors"] == 60
    analyzed = conn.execute(
        "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL AND schemaname = current_schema()"
    ).fetchall()
    assert {"chunks", "chunks_fts", "chunk_vectors"} <= {name for (name,) in analyzed}  # planned as loaded
    # with the index there, a later pass keeps it and keeps it up
    with store.transaction():
        store.write_files("s", [doc(f"m{i}.md", [f"later {i}"]) for i in range(25)])
    with store.bulk_load():
        pending = store.pending_chunks(100)
        store.store_vectors([p.id for p in pending], _unit(rng, len(pending)))
        assert conn.execute(index).fetchone()[0]
    hits = store.vec_search(_unit(rng, 1)[0], 5, SearchScope())
    assert len(hits) == 5


@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_a_first_embedding_pass_cut_short_gets_its_hnsw_index_from_the_next_pass(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first sync killed after its last vectors were stored but before the held-back build
    leaves no chunk pending: the next sync's pass, with nothing to embed, builds the index."""
    from indexer.store.postgres import vectors as pg_vectors

    monkeypatch.setattr(pg_vectors, "HNSW_MIN_VECTORS", 20)
    index = "SELECT to_regclass('idx_chunk_vectors_hnsw') IS NOT NULL"
    conn = store.conn  # type: ignore[attr-defined]
    with store.transaction():
        store.write_files("s", [doc(f"n{i}.md", [f"note {i}"]) for i in range(30)])
    rng = np.random.default_rng(5)
    with pytest.raises(KeyboardInterrupt), store.bulk_load():
        pending = store.pending_chunks(100)
        store.store_vectors([p.id for p in pending], _unit(rng, len(pending)))
        raise KeyboardInterrupt  # the run stops before the build
    assert not conn.execute(index).fetchone()[0]
    assert store.pending_chunks(100) == []
    with store.bulk_load():
        pass  # nothing to embed
    assert conn.execute(index).fetchone()[0]


def test_a_tag_holding_a_nul_character_is_written_and_found(store: Store) -> None:
    """Front matter can spell a NUL (`tags: ["a\\0b"]`); PostgreSQL text holds none, so it is
    stored as U+FFFD there, and a filter on that tag still finds the note."""
    file, parsed = doc("tagged.md", ["tagged text"])
    parsed = dataclasses.replace(parsed, tags=["a\x00b", "plain"])
    with store.transaction():
        store.write_files("s", [(file, parsed), doc("other.md", ["other text"])])
    for tag in ("a\x00b", "plain"):
        found = store.fts_search(keywords("text"), 10, SearchScope(tags=(tag,)))
        assert [store.chunk_rows([h.chunk_id])[h.chunk_id].path for h in found] == ["tagged.md"], tag


def test_a_collection_name_holding_a_nul_character_is_written_and_found(store: Store) -> None:
    """An index written before collection names were cleaned at their source (or any caller) can
    hold a NUL; PostgreSQL stores it as U+FFFD, in the file rows and the collections alike, so the
    collection still counts its file and a filter on the name still finds it."""
    name = "team\x00notes"
    file, parsed = doc("team/a.md", ["collected text"])
    with store.transaction():
        store.write_files("s", [(dataclasses.replace(file, collection=name), parsed), doc("b.md", ["other text"])])
        store.replace_collections("s", [CollectionRow("s", name, "team", "desc\x00ription", ("t\x00ag",))])
        store.set_file_collection("s", "b.md", name)
        store.set_file_collection("s", "b.md", None)
    [row] = store.collections()
    assert (row.folder, row.files) == ("team", 1)
    on_postgres = type(store).__name__ == "PostgresStore"
    kept = "\ufffd" if on_postgres else "\x00"
    # the tags go as JSON, whose escape keeps the NUL on both
    assert (row.name, row.description, row.tags) == (f"team{kept}notes", f"desc{kept}ription", ("t\x00ag",))
    found = store.fts_search(keywords("text"), 10, SearchScope(collection=name))
    assert [store.chunk_rows([h.chunk_id])[h.chunk_id].path for h in found] == ["team/a.md"]
    assert store.collection_rows("s") == [dataclasses.replace(row, files=0)]


@pytest.mark.parametrize("moved_into_first", [False, True])
def test_a_chunk_moved_between_two_files_of_one_batch_keeps_its_vector(store: Store, moved_into_first: bool) -> None:
    """Its vector is looked up before either file is replaced, so the file it left may come first
    in the batch (and delete it with its old chunks) without the text being embedded again."""

    def titled(path: str, texts: list[str]) -> tuple[FileVersion, ParsedDocument]:
        # one breadcrumb in both files: the moved chunk's embedded text (breadcrumb and body) is the same
        file, parsed = doc(path, texts)
        return file, dataclasses.replace(
            parsed, chunks=[dataclasses.replace(c, breadcrumb="Notes") for c in parsed.chunks]
        )

    rng = np.random.default_rng(6)
    with store.transaction():
        store.write_files("s", [titled("from.md", ["stays here", "moving text"]), titled("to.md", ["stays there"])])
    first = store.pending_chunks(10)
    store.store_vectors([p.id for p in first], _unit(rng, len(first)))
    stored = store.all_vectors()
    texts = store.chunk_rows([int(i) for i in stored.ids])
    before = {texts[int(i)].text: vector for i, vector in zip(stored.ids, stored.matrix, strict=True)}
    left = titled("from.md", ["stays here"])
    into = titled("to.md", ["stays there", "moving text"])
    with store.transaction():
        assert store.write_files("s", [into, left] if moved_into_first else [left, into]) == 0
    after = store.all_vectors()
    rows = store.chunk_rows([int(i) for i in after.ids])
    assert sorted((rows[int(i)].path, rows[int(i)].text) for i in after.ids) == [
        ("from.md", "stays here"),
        ("to.md", "moving text"),
        ("to.md", "stays there"),
    ]
    for chunk_id, vector in zip(after.ids, after.matrix, strict=True):
        assert np.array_equal(vector, before[rows[int(chunk_id)].text])
    assert orphan_vectors(store) == [] and embedded_without_vector(store) == []
