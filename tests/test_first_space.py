"""A first sync holds its vectors until the language statistics are estimated from all of them,
then stores each vector once, already neutralised: the same index, bit for bit, as storing them
raw and rewriting them at the end of the run (the path any other sync takes), and a kill at each
new step converges to it."""

from __future__ import annotations

import dataclasses
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer import neutral, sync, vectors
from indexer.config import Config, load_config
from indexer.errors import EmbedderUnavailable
from indexer.store import Store
from indexer.sync import run_sync
from tests.conftest import make_config, write_tree
from tests.test_crash_safety import (
    MODEL,
    CachingOllamaServer,
    assert_consistent,
    check_after_kill,
    index_state,
    index_vectors,
    kill_at,
    rerun_and_compare,
    sync_in_process,
    vectors_by_text,
    write_config,
)
from tests.test_neutral import CZECH, ENGLISH, LanguageBiasedEmbedder, bilingual_notes

NOTES_PER_LANGUAGE = neutral.MIN_CHUNKS + 7


@pytest.fixture
def config(tmp_path: Path, notes: Path) -> Config:
    """A SQLite index (the file is read directly); tests/test_neutral.py covers both backends."""
    return load_config(make_config(tmp_path, notes))


def index_summary(db: Path) -> tuple[str, str, dict[Any, bytes], dict[str, Any]]:
    with closing(Store.open(db, readonly=True)) as store:
        meta = store.meta()
    return meta[neutral.STATS_KEY], meta[neutral.SUMMARY_KEY], index_vectors(db), index_state(db)


class CountingRewrites:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        rewrite = Store.rewrite_vectors

        def counted(store: Store, ids: Any, vectors: Any) -> None:
            self.calls += 1
            rewrite(store, ids, vectors)

        monkeypatch.setattr(Store, "rewrite_vectors", counted)


def test_held_first_sync_equals_storing_raw_then_rewriting(
    tmp_path: Path, config: Config, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bilingual_notes(notes, NOTES_PER_LANGUAGE)
    monkeypatch.setattr(vectors, "VECTOR_PAGE", 7)  # several pages of sums and of vectors
    rewrites = CountingRewrites(monkeypatch)
    held = run_sync(config, embedder_factory=lambda: LanguageBiasedEmbedder(config.embedding))
    assert held.neutral is not None and "cs:index/" in held.neutral and "en:index/" in held.neutral
    assert rewrites.calls == 0  # each vector stored once, in the estimated space
    first = index_summary(config.db)
    (tmp_path / "second").mkdir()
    second = load_config(make_config(tmp_path / "second", notes))
    monkeypatch.setattr(vectors, "HOLD_BYTES", 0)  # nothing may be held: stored raw, rewritten at the end
    stored_then_rewritten = run_sync(second, embedder_factory=lambda: LanguageBiasedEmbedder(second.embedding))
    assert rewrites.calls > 0
    assert stored_then_rewritten.neutral == held.neutral
    again = index_summary(second.db)
    assert again[0] == first[0]  # the statistics, to the last digit
    assert again[1] == first[1]
    assert again[2] == first[2]  # every vector's bytes
    assert again[3] == first[3]


def test_a_later_sync_and_an_index_with_vectors_never_hold(
    config: Config, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = LanguageBiasedEmbedder(config.embedding)
    bilingual_notes(notes, NOTES_PER_LANGUAGE)
    run_sync(config, embedder_factory=lambda: embedder)
    held: list[object] = []
    hold = sync.Syncer._hold_for_first_space

    def recorded(self: sync.Syncer, *args: Any) -> object:
        held.append(hold(self, *args))
        return held[-1]

    monkeypatch.setattr(sync.Syncer, "_hold_for_first_space", recorded)
    bilingual_notes(notes, 2 * NOTES_PER_LANGUAGE, start=NOTES_PER_LANGUAGE)  # more than doubled
    report = run_sync(config, embedder_factory=lambda: embedder)
    assert held == [None] and report.neutral is not None  # re-estimated by the rewrite, as before
    with closing(Store.open(config.db, readonly=True)) as store:
        assert store.counts()["pending"] == 0


def test_an_embedder_failure_stores_what_was_held_and_the_next_run_completes(
    tmp_path: Path, config: Config, notes: Path
) -> None:
    bilingual_notes(notes, NOTES_PER_LANGUAGE)

    class FailingLater(LanguageBiasedEmbedder):
        fail_after = 4  # one page: 4 model batches of 8

        def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
            if self.calls >= self.fail_after:
                raise EmbedderUnavailable("fake embedding server went away")
            return super().embed_batch(texts, is_query=is_query)

    config = dataclasses.replace(config, embedding=dataclasses.replace(config.embedding, batch=8))
    failing = FailingLater(config.embedding)
    report = run_sync(config, embedder_factory=lambda: failing)
    assert report.embed_notice is not None and report.embedded == 32  # the held page was stored
    with closing(Store.open(config.db, readonly=True)) as store:
        assert store.counts()["pending"] > 0
    assert_neutralised_with_the_index_statistics(config)
    failing.fail_after = 10**6  # mended: a retry now (a plain run waits out the outage's back-off)
    report = run_sync(config, embedder_factory=lambda: failing, retry_embedder=True)
    assert report.pending == 0
    assert_neutralised_with_the_index_statistics(config)


def assert_neutralised_with_the_index_statistics(config: Config) -> None:
    with closing(Store.open(config.db, readonly=True)) as store:
        space = neutral.NeutralSpace.from_json(store.meta()[neutral.STATS_KEY])
        ids, languages, vectors = store.vectors_by_language(0, 100_000)
        rows = store.chunk_rows(ids)
    raw = LanguageBiasedEmbedder(config.embedding).embed_passages(
        [f"{rows[i].breadcrumb}\n\n{rows[i].text}" for i in ids]
    )
    assert np.allclose(vectors, space.neutralise(raw, languages), atol=1e-5)


# ---- real kills (a SIGKILLed `notes-search sync`, as tests/test_crash_safety.py) -------------------


@pytest.fixture(scope="module")
def server() -> Any:
    with CachingOllamaServer({MODEL: 64}) as srv:
        yield srv


def bilingual_corpus(root: Path) -> None:
    files = {}
    for i in range(NOTES_PER_LANGUAGE):
        files[f"en/note-{i}.md"] = f"# English note {i}\n\n{ENGLISH[i % 4].format(i=i)}\n"
        files[f"cs/poznamka-{i}.md"] = f"# Česká poznámka {i}\n\n{CZECH[i % 4].format(i=i)}\n"
    write_tree(root, files)  # type: ignore[arg-type]


HELD_POINTS = [
    "call@indexer.sync:Syncer._store_held@1",  # every vector embedded, none stored
    "call@indexer.store:Store.store_vectors@1",  # the statistics committed, no vector yet
    "sql@INSERT INTO vec_chunks@20",  # inside the transaction of the held vectors
]


@pytest.mark.parametrize("kill_point", HELD_POINTS)
def test_a_kill_at_each_held_step_converges(kill_point: str, tmp_path: Path, server: CachingOllamaServer) -> None:
    notes = tmp_path / "notes"
    bilingual_corpus(notes)
    clean = write_config(tmp_path / "clean", server.url, notes=notes)
    sync_in_process(clean)
    reference_db = load_config(clean).db
    stats, summary, _, _ = index_summary(reference_db)
    assert "cs:index/" in summary and "en:index/" in summary  # the statistics move vectors
    config_path = write_config(tmp_path / "home", server.url, notes=notes)
    kill_at(config_path, kill_point)
    db = load_config(config_path).db
    counts = assert_consistent(db)
    if kill_point.startswith("call@indexer.store"):
        with closing(Store.open(db, readonly=True)) as store:
            assert store.meta()[neutral.STATS_KEY] == stats and counts["vectors"] == 0
    check_after_kill(config_path, {MODEL: dict(vectors_by_text(reference_db))})
    rerun_and_compare(config_path, reference_db)
    assert index_summary(db)[0] == stats


def test_the_estimate_reads_the_held_vectors_without_a_second_copy_of_them() -> None:
    """The held vectors are bounded by HOLD_BYTES; estimating from them must not concatenate
    them all (twice the bound at once), yet cut the same pages a stored index reads."""
    import tracemalloc

    rng = np.random.default_rng(7)
    held = vectors.HeldVectors()
    for start in range(1, 9_001, 900):  # embedding pages that do not line up with VECTOR_PAGE
        ids = list(range(start, start + 900))
        held.add(ids, [("en", "cs", "unknown")[i % 3] for i in ids], rng.standard_normal((900, 96)).astype(np.float32))
    ids = [i for batch in held.batches for i in batch.ids]
    languages = [lang for batch in held.batches for lang in batch.languages]
    matrix = np.concatenate([batch.matrix for batch in held.batches])
    expected = [
        (
            ids[at : at + vectors.VECTOR_PAGE],
            languages[at : at + vectors.VECTOR_PAGE],
            matrix[at : at + vectors.VECTOR_PAGE],
        )
        for at in range(0, len(ids), vectors.VECTOR_PAGE)
    ]
    pages = [(page.ids, page.languages, page.matrix) for page in held.pages()]
    assert [p[:2] for p in pages] == [e[:2] for e in expected]
    assert all(np.array_equal(p[2], e[2]) for p, e in zip(pages, expected, strict=True))
    reference = vectors.estimate_space([vectors.VectorPage(*e) for e in expected], MODEL).to_json()
    del pages, matrix, expected

    tracemalloc.start()
    try:
        assert vectors.estimate_space(held.pages(), MODEL).to_json() == reference
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < held.nbytes / 2
