"""Tag and time filters in the store: every scoped read keeps exactly the chunks of the files
that pass, and the top-k inside a filter that keeps 1 % of a large index is the exact top-k
(lexical and vector, on both vector paths), computed here independently from what was written."""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw
import numpy as np
import pytest

import indexer.store.sqlite_vectors as sqlite_vectors
from indexer.config import EmbeddingConfig
from indexer.model import Chunk, FileVersion, ParsedDocument
from indexer.store import MIGRATIONS, SearchScope, Store, open_store, tag_key, vec_extension_path
from tests.conftest import keywords
from tests.pg import BACKENDS, both_backends

DIMS = 16
FILES = 3000
BASE = 1_750_000_000.0  # a file's updated_at: BASE + its number of minutes
WORDS = ["alpha", "beta", "gamma", "delta", "server", "backup", "disk", "deploy"]


@dataclass(frozen=True)
class Written:
    """What the test wrote, per chunk id: the independent truth the store is checked against."""

    path: str
    tags: frozenset[str]
    updated_at: float
    collection: str | None
    vector: np.ndarray


def tags_of(i: int) -> list[str]:
    if i % 100 == 7:  # 1 % of the files, written in three spellings of one tag
        return [("#Réunion", "RÉUNION", "re\u0301union")[i % 3], "common"]
    return ["common", f"t{i % 7}"]


@pytest.fixture(scope="module", params=BACKENDS)
def index(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Store, dict[int, Written]]]:
    """3,000 files of one chunk with random unit vectors, distinct update times and tags (on each backend)."""
    if request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        url = server.create_index()
        request.addfinalizer(lambda: server.drop_index(url))  # noqa: PT021 - only one parameter has it
        store = typing.cast(Store, open_store(url))
    else:
        store = Store.open(tmp_path_factory.mktemp("filters") / "index.sqlite")
    store.reset_vectors(
        DIMS, EmbeddingConfig(provider="ollama", model="t:1", endpoint="http://x", dims=DIMS).identity()
    )
    store.ensure_source("s", "workspace")
    rng = np.random.default_rng(13)
    meta: dict[str, tuple[list[str], float, str | None]] = {}
    with store.transaction():
        for i in range(FILES):
            path = f"f{i % 20}/n{i}.md"
            collection = "ops" if i % 20 == 3 else None
            text = " ".join(rng.choice(WORDS, 10))
            updated = BASE + 60.0 * i
            meta[path] = (tags_of(i), updated, collection)
            store.write_file(
                "s",
                FileVersion(path, text, str(i), 1, updated, updated, collection),
                ParsedDocument(title=path, tags=tags_of(i), chunks=[Chunk(0, path, text, 1, 1)]),
            )
    rows = store.pending_chunks(100_000)
    matrix = rng.normal(size=(len(rows), DIMS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    store.store_vectors([r.id for r in rows], matrix)
    paths = {cid: row.path for cid, row in store.chunk_rows([r.id for r in rows]).items()}
    written = {}
    for row, vector in zip(rows, matrix, strict=True):
        tags, updated, collection = meta[paths[row.id]]
        written[row.id] = Written(paths[row.id], frozenset(tag_key(t) for t in tags), updated, collection, vector)
    yield store, written
    store.close()


# each filter keeps about 1 % of the files, alone or combined with a place
FILTERS: dict[str, tuple[SearchScope, Callable[[Written], bool]]] = {
    "tag": (SearchScope(tags=("réunion",)), lambda w: "réunion" in w.tags),
    "tag written otherwise": (SearchScope(tags=("#RE\u0301UNION",)), lambda w: "réunion" in w.tags),
    "two tags (all of them)": (
        SearchScope(tags=("t3", "common", "T3")),
        lambda w: "t3" in w.tags,  # 14 %: below 1 % only with a place
    ),
    "since": (SearchScope(updated_since=BASE + 60 * 2970), lambda w: w.updated_at >= BASE + 60 * 2970),
    "before": (SearchScope(updated_before=BASE + 60 * 30), lambda w: w.updated_at < BASE + 60 * 30),
    "since and before": (
        SearchScope(updated_since=BASE + 60 * 1000, updated_before=BASE + 60 * 1030),
        lambda w: BASE + 60 * 1000 <= w.updated_at < BASE + 60 * 1030,
    ),
    "tag and path": (
        SearchScope(tags=("t3",), path="f3"),
        lambda w: "t3" in w.tags and w.path.startswith("f3/"),
    ),
    "tag and collection": (
        SearchScope(tags=("t3",), collection="ops"),
        lambda w: "t3" in w.tags and w.collection == "ops",
    ),
    "source, time and tag": (
        SearchScope(source_ids=("s",), tags=("common",), updated_since=BASE + 60 * 2960),
        lambda w: w.updated_at >= BASE + 60 * 2960,
    ),
    "nothing passes": (SearchScope(tags=("réunion", "t3")), lambda w: False),
    # the store reads the kept files from the narrowest filter: each way round
    "broad tag, narrow tag": (SearchScope(tags=("common", "réunion")), lambda w: "réunion" in w.tags),
    "narrow tag, broad time": (
        SearchScope(tags=("réunion",), updated_since=BASE + 60 * 100),
        lambda w: "réunion" in w.tags and w.updated_at >= BASE + 60 * 100,
    ),
    "broad tags, narrow time": (
        SearchScope(tags=("common", "t2"), updated_before=BASE + 60 * 200),
        lambda w: "t2" in w.tags and w.updated_at < BASE + 60 * 200,
    ),
}


def nearest(written: dict[int, Written], keep: Callable[[Written], bool], query: np.ndarray, k: int) -> list[int]:
    """Brute force: the k nearest chunks that pass, by cosine (unit vectors: dot product)."""
    ids = [cid for cid, w in written.items() if keep(w)]
    return sorted(ids, key=lambda cid: (-float(written[cid].vector @ query), cid))[:k]


@pytest.mark.parametrize("name", FILTERS)
def test_each_filter_keeps_exactly_its_files_in_every_scoped_read(
    index: tuple[Store, dict[int, Written]], name: str
) -> None:
    store, written = index
    scope, keep = FILTERS[name]
    expected = {cid for cid, w in written.items() if keep(w)}
    assert len(expected) <= 0.02 * FILES or name == "two tags (all of them)"
    assert not scope.is_all and scope.has_filters
    assert {cid for cid, _ in store.fts_search(keywords("note", "alpha", "beta", "gamma"), 10_000, scope)} <= expected
    counts = store.scope_stats(scope)
    files = {w.path for cid, w in written.items() if cid in expected}
    assert sum(c.files for c in counts.values()) == len(files)
    assert sum(c.chunks for c in counts.values()) == len(expected)
    assert sum(c.pending for c in counts.values()) == store.count_pending(scope) == 0
    assert sum(n for per in store.language_counts(scope).values() for n in per.values()) == len(expected)


@pytest.mark.parametrize("name", FILTERS)
@pytest.mark.parametrize("exact_max", [sqlite_vectors.SCOPED_EXACT_MAX, 0])
def test_vector_top_k_inside_a_filter_is_the_brute_force_top_k(
    index: tuple[Store, dict[int, Written]], name: str, exact_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways vec_search answers a scope (exact distances over the scope's vectors; vec0's
    KNN restricted to the scope's ids, taken for a large scope) give the true top-k."""
    monkeypatch.setattr(sqlite_vectors, "SCOPED_EXACT_MAX", exact_max)
    store, written = index
    scope, keep = FILTERS[name]
    rng = np.random.default_rng(len(name))
    for _ in range(3):
        query = rng.normal(size=DIMS).astype(np.float32)
        query /= np.linalg.norm(query)
        for k in (1, 10, 50):
            assert [cid for cid, _ in store.vec_search(query, k, scope)] == nearest(written, keep, query, k)


@pytest.mark.parametrize("name", FILTERS)
def test_lexical_top_k_inside_a_filter_is_the_whole_ranking_filtered(
    index: tuple[Store, dict[int, Written]], name: str
) -> None:
    """bm25 does not depend on the scope, so the filtered top-k is the unscoped ranking with
    the chunks that fail the filter struck out."""
    store, written = index
    scope, keep = FILTERS[name]
    for match in (keywords("server"), keywords("backup", "disk"), keywords("delta", "alpha", "deploy")):
        ranking = [cid for cid, _ in store.fts_search(match, 100_000, SearchScope())]
        for k in (1, 10, 50):
            want = [cid for cid in ranking if keep(written[cid])][:k]
            assert [cid for cid, _ in store.fts_search(match, k, scope)] == want


@both_backends
def test_tags_follow_a_rewrite_and_leave_with_the_file(tmp_path: Path, backend: str, db_url: str | None) -> None:
    store = typing.cast(Store, open_store(db_url or tmp_path / "index.sqlite"))
    store.ensure_source("s", "workspace")

    def put(tags: list[str]) -> None:
        with store.transaction():
            store.write_file(
                "s",
                FileVersion("a.md", "x", "1", 1, 1.0, 1.0),
                ParsedDocument(title="a", tags=tags, chunks=[Chunk(0, "a", "word", 1, 1)]),
            )

    def tagged(tag: str) -> int:
        return sum(c.chunks for c in store.scope_stats(SearchScope(tags=(tag,))).values())

    put(["Ops", "#ops", "", "#"])  # one key; nothing is stored for tags that are only '#'
    assert tagged("OPS") == 1 and store.conn.execute("SELECT COUNT(*) FROM file_tags").fetchone()[0] == 1
    put(["dev"])
    assert tagged("ops") == 0 and tagged("dev") == 1
    with store.transaction():
        store.delete_file("s", "a.md")
    assert store.conn.execute("SELECT COUNT(*) FROM file_tags").fetchone()[0] == 0
    put(["dev"])
    store.remove_source("s")
    assert store.conn.execute("SELECT COUNT(*) FROM file_tags").fetchone()[0] == 0
    store.close()


def test_the_migration_indexes_the_tags_of_files_written_before_it(tmp_path: Path) -> None:
    """An index at the step before file_tags, with tags in files.tags only (and one malformed
    value, which reads as no tags, as everywhere else)."""
    path = tmp_path / "old.sqlite"
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(vec_extension_path())
    before = next(i for i, step in enumerate(MIGRATIONS) if step.name == "file_tags_and_recency")
    for number, step in enumerate(MIGRATIONS[:before]):
        with conn:
            conn.execute(step.sql)
            if step.data is not None:
                step.data(conn)
            conn.execute(f"PRAGMA user_version = {number + 1}")
    conn.execute("INSERT INTO sources(source_id, kind) VALUES ('s', 'workspace')")
    for name, tags in (("a.md", json.dumps(["#DevOps", "Linux", "devops"])), ("b.md", "not json"), ("c.md", None)):
        conn.execute(
            "INSERT INTO files(source_id, path, tags, sha256, size, updated_at, indexed_at)"
            " VALUES ('s', ?, ?, 'x', 1, 1.0, '2024-01-01T00:00:00Z')",
            (name, tags),
        )
    conn.close()
    store = Store.open(path)
    try:
        rows = store.conn.execute("SELECT tag, path FROM file_tags ORDER BY tag").fetchall()
        assert rows == [("devops", "a.md"), ("linux", "a.md")]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("written", "key"),
    [
        ("#DevOps", "devops"),
        ("  ##Réunion ", "réunion"),
        ("# #a b", "a b"),
        ("re\u0301union", "réunion"),
        ("STRASSE", "strasse"),
        ("c#", "c#"),
    ],
)
def test_tag_key_folds_case_and_unicode_form_and_drops_the_hash(written: str, key: str) -> None:
    assert tag_key(written) == key
    assert tag_key(key) == key  # the store may fold a key again
    assert tag_key("Straße") == tag_key("STRASSE")
