"""A chunk longer than the model reads has a vector per window, and a vector search ranks it by its
nearest window: on both stores, through every path that writes, moves, copies or drops vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from indexer import neutral
from indexer.config import Config, load_config
from indexer.migrate import migrate
from indexer.store import SearchScope, Store, content_hash, open_store, sqlite_vectors
from indexer.store.rows import NearestWindow
from indexer.sync import run_sync
from indexer.windows import windows
from search.engine import search
from search.resident import ResidentVectors
from tests.conftest import make_config, open_index, write
from tests.fakes import FakeEmbedder, hash_vector
from tests.pg import both_backends
from tests.store_checks import embedded_without_vector, orphan_vectors
from tests.test_store import DIMS, doc, store  # noqa: F401 - `store` is the two-backend fixture


def unit(*rows: list[float]) -> np.ndarray:
    matrix = np.zeros((len(rows), DIMS), dtype=np.float32)
    for i, row in enumerate(rows):
        matrix[i, : len(row)] = row
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def ids_of(hits: list) -> list[int]:
    return [hit.chunk_id for hit in hits]


def test_a_chunk_is_as_near_as_its_nearest_window_even_behind_many_windows_of_another(store: Store) -> None:
    with store.transaction():
        store.write_files("s", [doc(f"d/n{i}.md", [f"text {i}"]) for i in range(6)])
    a, b, c, d, e, f = (p.id for p in store.pending_chunks(10))
    query = unit([1.0])[0]
    # a: 40 windows all near the query (more than a first read of further windows holds);
    # b: its own vector a little farther; c: a far first window, a further one nearer than b's
    crowd = unit(*[[1.0, 0.1 + i / 400] for i in range(40)])
    rows = np.concatenate([crowd, unit([1.0, 0.9]), unit([0.0, 1.0], [1.0, 0.5]), unit([0.0, 0.0, 1.0])])
    ids = [a] * 40 + [b] + [c, c] + [d]
    assert store.store_vectors(ids, rows) == 4  # chunks, not windows
    assert store.counts()["vectors"] == 4
    for scope in (SearchScope(), SearchScope(path="d")):  # unscoped, and scored directly in a scope
        hits = store.vec_search(query, 3, scope)
        assert ids_of(hits) == [a, c, b]
        assert hits[1].score == pytest.approx(1 - float(unit([1.0, 0.5])[0] @ query), abs=1e-5)
        assert ids_of(store.vec_search(query, 10, scope)) == [a, c, b, d]  # each once; e, f wait
    [hit] = store.vec_search(query, 5, SearchScope(path="d/n2.md"))  # c inside its own file's scope
    assert hit.chunk_id == c and hit.score == pytest.approx(hits[1].score, abs=1e-6)
    assert {e, f}.isdisjoint(ids_of(store.vec_search(query, 10, SearchScope())))


def test_a_large_scope_reads_further_windows_through_the_knn_scan(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not isinstance(store, Store):
        pytest.skip("SQLite's path for a scope too large to score directly")
    monkeypatch.setattr(sqlite_vectors, "SCOPED_EXACT_MAX", 0)
    with store.transaction():
        store.write_files("s", [doc("in/a.md", ["a"]), doc("in/b.md", ["b"]), doc("out/c.md", ["c"])])
    a, b, c = (p.id for p in store.pending_chunks(10))
    store.store_vectors([a, a, b, c], unit([0.0, 1.0], [1.0, 0.2], [1.0, 0.4], [1.0]))
    query = unit([1.0])[0]
    assert ids_of(store.vec_search(query, 2, SearchScope(path="in"))) == [a, b]
    assert ids_of(store.vec_search(query, 3, SearchScope())) == [c, a, b]


def test_each_long_chunks_nearest_window_is_named(store: Store) -> None:
    with store.transaction():
        store.write_files("s", [doc(f"d/n{i}.md", [f"text {i}"]) for i in range(3)])
    (a, a_hash, _), (b, _, _), (c, c_hash, _) = store.pending_chunks(10)
    # a: three windows, its second nearest; b: one window; c: two, its first nearest
    rows = np.concatenate([unit([0.0, 1.0], [1.0, 0.1], [1.0, 0.5]), unit([1.0]), unit([1.0, 0.2], [0.0, 0.0, 1.0])])
    store.store_vectors([a, a, a, b, c, c], rows)
    query = unit([1.0])[0]
    assert store.nearest_windows(query, [a, b, c, 10_000]) == {
        a: NearestWindow(1, 3, None),  # where its windows begin is not known
        c: NearestWindow(0, 2, None),
    }
    assert store.nearest_windows(query, [b]) == {} and store.nearest_windows(query, []) == {}
    # where they begin, by text; lines of another cut (four windows for c's three) are not taken
    store.store_window_lines({a_hash: [0, 7, 15], c_hash: [0, 4, 9, 12]})
    assert store.nearest_windows(query, [a, c]) == {a: NearestWindow(1, 3, 7), c: NearestWindow(0, 2, None)}
    # kept while a chunk holds the text, forgotten after
    assert store.prune_window_lines() == 0
    with store.transaction():
        store.delete_file("s", "d/n0.md")
    assert store.prune_window_lines() == 1
    store.store_window_lines({c_hash: [0, 5]})
    assert store.nearest_windows(query, [c]) == {c: NearestWindow(0, 2, 0)}


def test_windows_page_whole_rewrite_in_place_and_go_with_their_chunk(store: Store) -> None:
    with store.transaction():
        store.write_files("s", [doc("long.md", ["long text"]), doc("short.md", ["short text"])])
    long_id, short_id = (p.id for p in store.pending_chunks(10))
    rows = unit([1.0], [0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0])
    store.store_vectors([long_id, long_id, long_id, short_id], rows)
    # a page holds every window of its chunks, first window first; a limit counts chunks
    page = store.vectors_by_language(0, 1)
    assert page.ids == [long_id] * 3 and np.allclose(page.matrix, rows[:3])
    assert page.first_windows().tolist() == [True, False, False]
    assert store.vectors_by_language(long_id, 5).ids == [short_id]
    everything = store.all_vectors()
    assert everything.ids.tolist() == [long_id] * 3 + [short_id] and np.allclose(everything.matrix, rows)
    moved = rows[[1, 2, 0, 3]]
    with store.transaction():
        store.rewrite_vectors([long_id] * 3 + [short_id], moved)
    assert np.allclose(store.all_vectors().matrix, moved)
    assert ids_of(store.vec_search(unit([0.0, 0.0, 1.0])[0], 1, SearchScope())) == [long_id]  # by its 2nd window now
    # the file written again: its unchanged text takes every window along (by content hash)
    with store.transaction():
        assert store.write_files("s", [doc("long.md", ["long text", "new text"])]) == 1
    copy_id = min(i for i in store.chunk_languages() if i > short_id)
    assert store.vectors_by_language(short_id, 5).ids == [copy_id] * 3
    assert np.allclose(store.vectors_by_language(short_id, 5).matrix, moved[:3])
    # made pending again, or deleted: no window is left behind
    store.unembed([copy_id])
    assert store.all_vectors().ids.tolist() == [short_id]
    store.store_vectors([copy_id, copy_id], rows[:2])
    with store.transaction():
        store.delete_file("s", "long.md")
    assert store.all_vectors().ids.tolist() == [short_id]
    assert store.vec_search(unit([0.0, 1.0])[0], 5, SearchScope())[0].chunk_id == short_id
    assert orphan_vectors(store) == [] and embedded_without_vector(store) == []
    if isinstance(store, Store):  # the vec0 copy holds no window without its row
        window_rows = store.conn.execute("SELECT COUNT(*) FROM window_vectors").fetchone()[0]
        assert window_rows == store.conn.execute("SELECT COUNT(*) FROM vec_windows").fetchone()[0] == 0


def test_given_vectors_carry_every_window_of_a_chunk(store: Store) -> None:
    rows = unit([1.0], [0.0, 1.0])
    given = doc("a.md", ["copied text"])
    with store.transaction():
        pending = store.write_files("s", [given], vectors={content_hash(given[1].chunks[0].embed_text): rows.tobytes()})
    assert pending == 0
    everything = store.all_vectors()
    assert len(set(everything.ids.tolist())) == 1 and np.allclose(everything.matrix, rows)


# ---- through a sync ---------------------------------------------------------------------------

LONG_CS = "\n".join(f"Krok {i}: záloha svazku data{i} se kopíruje na pásku v knihovně." for i in range(30))
LONG_EN = "\n".join(f"Step {i}: the volume data{i} is copied to the tape library." for i in range(30))


def windowed(tmp_path: Path, notes: Path, db_url: str | None, neutral_space: bool) -> Config:
    path = make_config(tmp_path, notes, db=db_url)
    text = path.read_text(encoding="utf-8").replace(
        "  dims: 64\n", f"  dims: 64\n  max_tokens: 64\n  language_neutral: {str(neutral_space).lower()}\n"
    )
    path.write_text(text, encoding="utf-8")
    return load_config(path)


def expected_rows(config: Config, store: Store, embedder: FakeEmbedder) -> tuple[list[int], np.ndarray]:
    """Every chunk's windows as the test embedder gives them, in the stored space."""
    space = neutral.NeutralSpace.from_json(store.meta().get(neutral.STATS_KEY))
    rows = store.chunk_rows(sorted(store.chunk_languages()))
    languages = store.chunk_languages()
    ids: list[int] = []
    vectors: list[np.ndarray] = []
    for chunk_id, row in sorted(rows.items()):
        pieces = windows(row.breadcrumb, row.text, embedder.token_count, config.embedding.window)
        raw = np.array([hash_vector(piece, 64) for piece in pieces], dtype=np.float32)
        moved = space.neutralise(raw, [languages[chunk_id]] * len(pieces)) if config.embedding.language_neutral else raw
        ids += [chunk_id] * len(pieces)
        vectors.append(moved)
    return ids, np.concatenate(vectors)


@both_backends
def test_every_window_is_stored_in_the_neutral_space_as_it_moves(
    tmp_path: Path, notes: Path, db_url: str | None
) -> None:
    write(notes, {f"cs/{i}.md": f"# Poznámka {i}\n\nZáloha databáze číslo {i} se dělá v noci.\n" for i in range(24)})
    write(notes, {f"en/{i}.md": f"# Note {i}\n\nThe database backup number {i} runs at night.\n" for i in range(24)})
    write(notes, {"cs/long.md": f"# Páska\n\n{LONG_CS}\n", "en/long.md": f"# Tape\n\n{LONG_EN}\n"})
    config = windowed(tmp_path, notes, db_url, neutral_space=True)
    embedder = FakeEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    try:
        ids, want = expected_rows(config, store, embedder)
        assert len(ids) > len(set(ids)) + 4  # the two long notes have several windows each
        got = store.all_vectors()
        assert got.ids.tolist() == ids and np.allclose(got.matrix, want, atol=1e-5)
        summary = store.meta()[neutral.SUMMARY_KEY]
    finally:
        store.close()
    # the English notes more than double: the statistics are estimated again and every stored
    # window moves with its chunk into the new space
    write(notes, {f"en/more-{i}.md": f"# More {i}\n\nAnother backup note {i} for the night.\n" for i in range(40)})
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    try:
        assert store.meta()[neutral.SUMMARY_KEY] != summary
        ids, want = expected_rows(config, store, embedder)
        got = store.all_vectors()
        assert got.ids.tolist() == ids and np.allclose(got.matrix, want, atol=1e-5)
    finally:
        store.close()


def test_the_resident_copy_ranks_by_the_nearest_window_as_the_store_does(tmp_path: Path, notes: Path) -> None:
    write(notes, {"cs/long.md": f"# Páska\n\n{LONG_CS}\n", "en/long.md": f"# Tape\n\n{LONG_EN}\n"})
    config = windowed(tmp_path, notes, None, neutral_space=False)
    embedder = FakeEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    resident = ResidentVectors(config.db)
    resident.reload_in_background()
    assert resident.wait(30)
    store = Store.open(config.db, readonly=True)
    try:
        everything = store.all_vectors()
        assert len(everything.ids) > len(set(everything.ids.tolist()))
        for row in everything.matrix[:: max(len(everything.ids) // 12, 1)]:  # windows, first and further
            with store.snapshot():
                from_memory = resident.knn(store, row, 5)
                from_store = store.vec_search(row, 5, SearchScope())
            assert from_memory is not None
            assert ids_of(from_memory)[0] == ids_of(from_store)[0]
            assert [hit.score for hit in from_memory] == pytest.approx([hit.score for hit in from_store], abs=1e-5)
            assert len(set(ids_of(from_memory))) == len(from_memory)
    finally:
        store.close()


@both_backends
def test_a_sync_keeps_where_long_texts_windows_begin_while_a_chunk_holds_them(
    tmp_path: Path, notes: Path, db_url: str | None
) -> None:
    write(notes, {"a/long.md": f"# Tape\n\n{LONG_EN}\n", "b/long.md": f"# Tape\n\n{LONG_EN}\n"})
    write(notes, {"c/long.md": f"# Páska\n\n{LONG_CS}\n"})
    config = windowed(tmp_path, notes, db_url, neutral_space=False)
    embedder = FakeEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)

    def stored() -> dict[str, list[int]]:
        store = open_index(config)
        try:
            rows = store.chunk_rows(sorted(store.chunk_languages()))
            texts = {content_hash(f"{row.breadcrumb}\n\n{row.text}"): row for row in rows.values()}
            lines = store.window_lines()
            for digest, starts in lines.items():  # as the embedder cuts the text
                assert starts == embedder.window_lines(texts[digest].breadcrumb, texts[digest].text)
            return {texts[digest].path: starts for digest, starts in lines.items()}
        finally:
            store.close()

    assert set(stored()) >= {"c/long.md"} and {"a/long.md", "b/long.md"} & set(stored())
    (notes / "a" / "long.md").unlink()  # b still holds the text
    run_sync(config, embedder_factory=lambda: embedder)
    assert "b/long.md" in stored() and "c/long.md" in stored()
    (notes / "c" / "long.md").unlink()
    run_sync(config, embedder_factory=lambda: embedder)
    assert "c/long.md" not in stored() and "b/long.md" in stored()


def test_a_repeated_text_shares_its_windows_and_is_embedded_once(tmp_path: Path, notes: Path) -> None:
    write(notes, {"a/long.md": f"# Tape\n\n{LONG_EN}\n", "b/long.md": f"# Tape\n\n{LONG_EN}\n"})
    config = windowed(tmp_path, notes, None, neutral_space=False)
    embedder = FakeEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    try:
        ids, want = expected_rows(config, store, embedder)
        got = store.all_vectors()
        assert got.ids.tolist() == ids and np.allclose(got.matrix, want, atol=1e-5)
        rows = store.chunk_rows(sorted(set(ids)))
        first_of_text: dict[str, int] = {}
        for chunk_id, row in sorted(rows.items()):
            first_of_text.setdefault(content_hash(f"{row.breadcrumb}\n\n{row.text}"), chunk_id)
        long_ones = [i for i, row in rows.items() if row.path == "b/long.md" and ids.count(i) > 2]
        assert long_ones  # b's long chunk has its windows, though its text was embedded for a's
        assert embedder.texts_embedded == sum(ids.count(i) for i in first_of_text.values()) < len(ids)
    finally:
        store.close()


@pytest.mark.parametrize("target_backend", ["sqlite", "postgres"])
def test_a_copy_to_another_store_carries_every_window(
    tmp_path: Path, notes: Path, target_backend: str, request: pytest.FixtureRequest
) -> None:
    write(notes, {"cs/long.md": f"# Páska\n\n{LONG_CS}\n", "en/long.md": f"# Tape\n\n{LONG_EN}\n"})
    config = windowed(tmp_path, notes, None, neutral_space=True)
    embedder = FakeEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    where = str(request.getfixturevalue("pg_url")) if target_backend == "postgres" else tmp_path / "copy.sqlite"
    source, target = Store.open(config.db), open_store(where)
    try:
        calls = embedder.calls
        migrate(source, target)
        assert embedder.calls == calls  # nothing embedded again
        theirs, ours = source.all_vectors(), target.all_vectors()
        assert len(theirs.ids) > len(set(theirs.ids.tolist()))
        assert np.array_equal(theirs.matrix, ours.matrix)
        paths = lambda store, ids: [store.chunk_rows([i])[i].path for i in ids]  # noqa: E731
        assert paths(target, ids_of(target.vec_search(theirs.matrix[-1], 3, SearchScope()))) == paths(
            source, ids_of(source.vec_search(theirs.matrix[-1], 3, SearchScope()))
        )
        # and where each long text's windows begin
        lines = source.window_lines()
        assert len(lines) >= 2 and all(len(starts) > 1 and starts[0] == 0 for starts in lines.values())
        assert target.window_lines() == lines
    finally:
        source.close()
        target.close()


QUESTION = "Kdy se vyměňuje kazeta v mechanice?"
SENSE = "every friday the cartridge in the drive is swapped"


class Translating(FakeEmbedder):
    """A multilingual model in small: the Czech question is embedded as its English sense."""

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        if is_query:
            texts = [SENSE if QUESTION in text else text for text in texts]
        return super().embed_batch(texts, is_query=is_query)


def test_a_hit_found_by_meaning_alone_points_at_its_nearest_windows_lines(tmp_path: Path, notes: Path) -> None:
    lines = LONG_EN.split("\n")
    lines[24:24] = ["Every Friday the cartridge in the drive is swapped for the next one."]
    write(notes, {"en/long.md": "# Tape\n\n" + "\n".join(lines) + "\n"})
    config = windowed(tmp_path, notes, None, neutral_space=False)
    embedder = Translating(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    cuts: list[str] = []
    cut = embedder.window_lines

    def counted_cut(breadcrumb: str, text: str) -> list[int]:
        cuts.append(text)
        return cut(breadcrumb, text)

    embedder.window_lines = counted_cut  # type: ignore[method-assign]
    try:
        response = search(store, config, QUESTION, k=3, mode="hybrid", embedder_factory=lambda: embedder)
        assert cuts == []  # the sync stored where the windows begin: no cut at query time
        [hit] = [hit for hit in response.results if hit.path == "en/long.md"]
        pieces = windows(hit.breadcrumb, hit.chunk_text, embedder.token_count, config.embedding.window)
        starts = cut(hit.breadcrumb, hit.chunk_text)
        [holding] = [i for i, piece in enumerate(pieces) if "Every Friday" in piece and i > 0][-1:]
        assert hit.matched == "meaning" and hit.explain["window"] == holding + 1 > 1
        assert hit.explain["windows"] == len(pieces)
        # the match line is where that window's own text begins, and the snippet shows it
        assert hit.match_line == hit.line + starts[holding] > hit.line
        chunk_lines = hit.chunk_text.split("\n")
        assert chunk_lines[starts[holding]] in hit.snippet.split("\n")
        # a word of the query in the chunk: its line, as always
        tape = search(store, config, "Friday cartridge", k=3, mode="hybrid", embedder_factory=lambda: embedder)
        [worded] = [hit for hit in tape.results if hit.path == "en/long.md"]
        assert chunk_lines[worded.match_line - worded.line].startswith("Every Friday")
        assert worded.explain["window"] is None
        # an index without the lines (copied by migrate): the embedder cuts the text again
        with store.transaction():
            store.conn.execute("DELETE FROM window_lines")
        again = search(store, config, QUESTION, k=3, mode="hybrid", embedder_factory=lambda: embedder)
        assert [(h.path, h.match_line, h.snippet) for h in again.results] == [
            (h.path, h.match_line, h.snippet) for h in response.results
        ]
        assert hit.chunk_text in cuts and set(cuts) <= {h.chunk_text for h in again.results}
    finally:
        store.close()
