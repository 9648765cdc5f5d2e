"""What the PostgreSQL store promises beyond the shared contract tests: FTS5's exact bm25 ranking
(also when impact tiers cut the unscoped search short), exact scoped KNN (no HNSW shortcut), many readers beside one writer, one-line errors for a
server, a login or a database that is not there, and the commands end to end on a server."""

from __future__ import annotations

import itertools
import json
import random
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner

from indexer.config import ConfigError, parse_config
from indexer.errors import StoreError
from indexer.keywords import KeywordQuery, Phrase
from indexer.store import SearchScope, Store
from indexer.store.postgres import PostgresStore, describe
from indexer.store.postgres import connection as pg_connection
from indexer.store.postgres import keyword as pg_keyword
from indexer.store.postgres import schema as pg_schema
from indexer.store.postgres import store as pg_store
from indexer.store.postgres import tsquery as pg_tsquery
from indexer.store.postgres import tsvector as pg_tsvector
from indexer.store.postgres import vectors as pg_vectors
from search import cli as cli_module
from tests.conftest import assert_one_line_error, keywords, make_config
from tests.fakes import FakeEmbedder
from tests.store_checks import decode_tsvector, fts_integrity_check
from tests.test_store import DIMS, doc, fill

TEXTS = {
    "devops/zalohovani.md": ["Zálohování serveru každou noc", "Obnova ze zálohy trvá 20 minut; záloha db-01.lan"],
    "devops/postgres.md": ["PostgreSQL server on port 5432", "ERR_CONN_RESET means restart the pooler pooler"],
    "travel/kazan.md": ["Поездка в Казань: Кремль открыт", "Поезд из Москвы идёт около 12 часов, поезда"],
    "cooking/sourdough.md": [
        "Sourdough starter",
        "Feed the starter twice a day with flour and water; backups of starter",
    ],
    "misc/mixed.md": ["backup backup backup server", "a very long note " + "filler words " * 60 + "server backup"],
}
QUERIES = [
    keywords("zaloha*"),
    keywords("zalohovani"),
    keywords("server*", "backu*"),
    keywords("db 01 lan*"),
    keywords("restart the pooler"),
    keywords("поезд*", "кремль"),
    keywords("starter", "flour", "water", "nothing"),
    keywords("no such words here"),
]


@pytest.fixture
def stores(tmp_path: Path, pg_url: str) -> Iterator[tuple[Store, PostgresStore]]:
    """The same files written into a SQLite and a PostgreSQL store."""
    pair = (Store.open(tmp_path / "index.sqlite"), PostgresStore.open(pg_url))
    for store in pair:
        store.ensure_source("s", "workspace")
        with store.transaction():
            for path, texts in TEXTS.items():
                store.write_file("s", *doc(path, texts))
    yield pair
    for store in pair:
        store.close()


@pytest.mark.parametrize("scope", [SearchScope(), SearchScope(path="devops"), SearchScope(source_ids=("s",))])
def test_lexical_ranking_is_fts5_bm25(stores: tuple[Store, PostgresStore], scope: SearchScope) -> None:
    sqlite, postgres = stores
    for match in QUERIES:
        expected = sqlite.fts_search(match, 20, scope)
        found = postgres.fts_search(match, 20, scope)
        assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected], match
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], rel=1e-5), match
    assert any(sqlite.fts_search(match, 20, scope) for match in QUERIES)


def test_scoped_ranking_follows_writes_that_keep_the_totals(stores: tuple[Store, PostgresStore]) -> None:
    """Scoped searches reuse the phrases' document frequencies until the lexical rows change: a
    rewrite with the same chunk and token counts but other words must not keep the old ones."""
    sqlite, postgres = stores
    scope = SearchScope(path="devops")
    match = keywords("server*", "backu*")
    for store in stores:
        store.fts_search(match, 20, SearchScope())  # counts remembered
    for store in stores:
        with store.transaction():  # the same counts of chunks and tokens, "server" gone
            store.write_file("s", *doc("misc/mixed.md", ["backup backup backup client", TEXTS["misc/mixed.md"][1]]))
    for _ in range(2):  # the second answer comes from the remembered counts
        expected = sqlite.fts_search(match, 20, scope)
        found = postgres.fts_search(match, 20, scope)
        assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected]
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], rel=1e-5)


WORDS = ["backup", "backups", "server", "restore", "kernel", "replica", "query", "index", "záloha", "поезд"]
COMMON_QUERIES = [
    keywords("backu*"),
    keywords("server"),
    keywords("server*", "restor*"),
    keywords("kernel", "replica", "query"),
    keywords("zaloha*", "поезд*", "index", "backup", "restore"),
    keywords("server restore"),
    keywords("backup server*", "kernel"),
]


@pytest.fixture
def word_stores(tmp_path: Path, pg_url: str) -> Iterator[tuple[Store, PostgresStore]]:
    """400 chunks of a ten-word vocabulary, words repeated 1-9 times and chunks of varied
    lengths: every query word matches a large share of the index, as on the benchmark."""
    rng = random.Random(7)
    files = []
    for n in range(80):
        texts = []
        for _ in range(5):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 60))]
            words += [rng.choice(WORDS)] * rng.randint(0, 8)
            rng.shuffle(words)
            texts.append(" ".join(words))
        files.append(doc(f"notes/{'ab'[n % 2]}/n{n}.md", texts))
    pair = (Store.open(tmp_path / "index.sqlite"), PostgresStore.open(pg_url))
    for store in pair:
        store.ensure_source("s", "workspace")
        with store.transaction():
            for file in files:
                store.write_file("s", *file)
    pair[1].conn.execute("ANALYZE chunks_fts")  # the planner's statistics, as autovacuum keeps them
    yield pair
    for store in pair:
        store.close()


def test_impact_tiers_settle_the_unscoped_top_as_fts5_does(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large index's unscoped search scores the top impact tiers first; with exact document
    frequencies (every phrase counted) its top is the one scoring every match gives, ids and
    scores (FTS5's scores; FTS5 may order two chunks whose scores differ in the last bit the
    other way), and most queries never score every match."""
    sqlite, postgres = word_stores
    expected = {(m, k): postgres.fts_search(m, k, SearchScope()) for m in COMMON_QUERIES for k in (5, 20)}
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    monkeypatch.setattr(pg_keyword, "SAMPLE_MIN_HITS", 10**9)  # no estimates: each phrase counted
    monkeypatch.setattr(pg_keyword, "LEXEME_STATISTICS", False)
    sent = _statements(postgres, monkeypatch)
    settled = 0
    for (match, limit), scanned in expected.items():
        sent.clear()
        found = postgres.fts_search(match, limit, SearchScope())
        assert found == scanned, (match, limit)
        fts5 = sqlite.fts_search(match, limit, SearchScope())
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in fts5], rel=1e-9)
        tiered = any("impacts @@" in str(sql) for sql, _ in sent)
        full = any("OVER ()" in str(sql) for sql, _ in sent)
        settled += tiered and not full
    assert settled >= len(expected) // 2


@pytest.mark.parametrize("folder", ["notes/a", "notes"])
def test_impact_tiers_settle_a_large_folders_top_for_one_phrase_as_fts5_does(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    """A folder with many matches of one phrase on a large index is searched as the whole index
    is: its top impact tiers first, through the folder's lexeme. The top is the one scoring
    every match of the folder gives (ids and scores, as FTS5 ranks the folder), and most such
    queries are settled by the tiers; a query of several phrases scores the folder's matches."""
    sqlite, postgres = word_stores
    scope = SearchScope(path=folder)
    one_phrase = [
        keywords("backu*"),
        keywords("server"),
        keywords("server restore"),
        keywords("kernel*"),
        keywords("replica"),
        keywords("zaloha*"),
        keywords("поезд*"),
    ]
    queries = one_phrase + [m for m in COMMON_QUERIES if m not in one_phrase]
    expected = {(m, k): postgres.fts_search(m, k, scope) for m in queries for k in (5, 20)}
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    monkeypatch.setattr(pg_keyword, "SAMPLE_MIN_HITS", 10**9)  # no estimates: each phrase counted
    monkeypatch.setattr(pg_keyword, "LEXEME_STATISTICS", False)
    sent = _statements(postgres, monkeypatch)
    settled = 0
    for (match, limit), scored in expected.items():
        sent.clear()
        found = postgres.fts_search(match, limit, scope)
        assert found == scored, (match, limit, postgres.keyword_trace)
        fts5 = sqlite.fts_search(match, limit, scope)
        assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in fts5]
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in fts5], rel=1e-9)
        tiered = any("impacts @@" in str(sql) and "scope @@" in str(sql) for sql, _ in sent)
        assert tiered == (match in one_phrase), match
        settled += tiered and "scope: every match in the folder scored" not in postgres.keyword_trace
    assert settled >= len(one_phrase)  # of 2 * len(one_phrase) searches


def test_a_scope_is_read_row_by_row_or_through_its_matches_by_their_counts(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scoped search that is not a plain folder (here a folder and a time window) reads the
    scope's rows when its phrases match many chunks, the matches first when they are few against
    the scope, and a scope over SCOPE_IDS_MAX chunks through the planner's join: every way ranks
    the scope's matches as FTS5 does."""
    sqlite, postgres = word_stores
    for store in word_stores:
        with store.transaction():
            store.write_file("s", *doc("rare/r.md", ["kernel quorum server", "quorum backup"]))
            store.write_file("s", *doc("notes/quorum.md", ["quorum replica", "index quorum quorum"]))
    narrow, wide = SearchScope(path="rare", updated_since=0.0), SearchScope(path="notes", updated_since=0.0)
    cases = [
        (narrow, keywords("kernel", "server*"), "each tested"),
        (wide, keywords("quorum"), "the matches first"),
        (wide, keywords("quorum", "kernel"), "each tested"),  # "kernel" alone is in a large share of the chunks
        (wide, keywords("quorum replica"), "each tested"),  # a phrase of several words: its reads are not its matches
        (wide, keywords("backu*"), "each tested"),
    ]
    seen = set()
    for ids_max in (pg_keyword.SCOPE_IDS_MAX, 10):
        monkeypatch.setattr(pg_keyword, "SCOPE_IDS_MAX", ids_max)
        for scope, match, way in cases:
            expected = sqlite.fts_search(match, 20, scope)
            found = postgres.fts_search(match, 20, scope)
            assert expected, match
            assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected], (match, scope)
            assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], rel=1e-5)
            trace = " ".join(postgres.keyword_trace)
            if ids_max == 10 and scope is wide and way == "each tested":
                way = "the planner's join"
            assert way in trace, (match, scope, trace)
            seen.add(way)
    assert len(seen) == 3


def test_a_small_folder_tests_a_common_match_on_its_own_rows(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder far smaller than its phrases' matches over the whole index reads its own rows,
    each testing the match, instead of the document index's postings of every match; a phrase
    about as rare as the folder is small is read through the index. Both rank as FTS5 does."""
    sqlite, postgres = word_stores
    for store in word_stores:
        with store.transaction():
            store.write_file("s", *doc("rare/r.md", ["kernel quorum server", "quorum backup", "server server"]))
    _analyzed(postgres)
    monkeypatch.setattr(pg_keyword, "FOLDER_LEAD_MIN_ROWS", 1)  # the rule, on an index this small
    sent = _statements(postgres, monkeypatch)
    folder = SearchScope(path="rare")
    for match, rows_lead in (
        (keywords("server"), True),
        (keywords("server*", "kernel"), True),
        (keywords("quorum"), False),
    ):
        sent.clear()
        expected = sqlite.fts_search(match, 5, folder)
        found = postgres.fts_search(match, 5, folder)
        assert expected and [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected], match
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], rel=1e-5)
        assert ("rows test the match" in " ".join(postgres.keyword_trace)) == rows_lead, postgres.keyword_trace
        scored = [str(sql) for sql, _ in sent if str(sql).lstrip().startswith("WITH m AS")]
        assert len(scored) == 1 and ("@@ %(all)s::tsquery) IS TRUE" in scored[0]) == rows_lead, match


FOLDERS = ["notes", "notes/deep", "it's \\odd", "zálohy a obnova", "notes0", "note"]


def test_a_folder_scope_is_one_more_condition_of_the_document_index_scan(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder or file scope (within some sources or not) is read through its lexeme in the
    lexical rows' scope column, in the same index scan as the match, and ranks the scope's
    matches as FTS5 does; neighbours that share a prefix of the name ("notes0", "note") stay
    out, odd names (quotes, backslashes, spaces, accents) work, and a path too long for a
    lexeme is read as before (its folder, short enough, by its lexeme)."""
    long_folder = "x" * (pg_tsvector.MAX_LEXEME_BYTES - 3)
    rng = random.Random(3)
    files = {}
    for folder in [*FOLDERS, long_folder]:
        for n in range(4):
            files[(rng.choice(["s", "t"]), f"{folder}/n{n}.md")] = [
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) for _ in range(2)
            ]
    pair = (Store.open(tmp_path / "index.sqlite"), PostgresStore.open(pg_url))
    try:
        for store in pair:
            for source in ("s", "t"):
                store.ensure_source(source, "workspace")
            with store.transaction():
                for (source, path), texts in files.items():
                    store.write_file(source, *doc(path, texts))
        sqlite, postgres = pair
        fts_integrity_check(postgres)  # each row's scope lexemes are its file's folders and path
        monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)  # the large index's ways of counting
        scopes = [SearchScope(path=folder) for folder in FOLDERS]
        scopes += [SearchScope(path="notes/", source_ids=("t",)), SearchScope(path="notes/deep/n1.md")]
        scopes += [SearchScope(path="nowhere"), SearchScope(path=long_folder), SearchScope(path=f"{long_folder}/n1.md")]
        answered = 0
        for scope in scopes:
            for match in COMMON_QUERIES:
                expected = sqlite.fts_search(match, 5, scope)
                found = postgres.fts_search(match, 5, scope)
                assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected], (match, scope)
                assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], rel=1e-5)
                by_lexeme = "the folder's lexeme" in " ".join(postgres.keyword_trace)
                too_long = scope.path == f"{long_folder}/n1.md"  # the folder fits a lexeme, its files do not
                assert by_lexeme != too_long, (match, scope.path, postgres.keyword_trace)
                answered += bool(expected)
        assert answered > len(scopes) * len(COMMON_QUERIES) // 2
        with postgres.transaction():  # a table this small is scanned whole; the plan of a large one
            postgres.conn.execute("SET LOCAL enable_seqscan = off")
            plan = [
                str(line[0])
                for line in postgres.conn.execute(
                    "EXPLAIN SELECT id FROM chunks_fts f WHERE f.document @@ %s::tsquery AND f.scope @@ %s::tsquery",
                    ("'server'", "'notes'"),
                )
            ]
        scans = [n for n, line in enumerate(plan) if "Index Scan" in line]
        assert len(scans) == 1 and "idx_chunks_fts_document" in plan[scans[0]], plan
        condition = plan[scans[0] + 1]
        assert "Index Cond" in condition and "document @@" in condition and "scope @@" in condition, plan
    finally:
        for store in pair:
            store.close()


def test_a_prefix_matching_several_words_of_a_chunk_is_bounded_by_their_sum(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefix query counts every word it matches: a chunk of sixteen words of one stem, each
    once (each word in a low tier), outranks chunks repeating one word six times (top tier),
    and the bounded search still puts it first."""
    store = PostgresStore.open(pg_url)
    try:
        store.ensure_source("s", "workspace")
        files = [doc("stems.md", [" ".join("backup" + chr(97 + j) for j in range(16))])]
        files += [doc(f"repeated{i}.md", [" ".join(["backup"] * 6)]) for i in range(3)]
        files += [doc(f"long{i}.md", [" ".join(["backup", *(f"word{j}" for j in range(100))])]) for i in range(40)]
        with store.transaction():
            store.write_files("s", files)
        queries = (keywords("backu*"), keywords("backup*"), keywords("backu*", "word1"))
        exact = {match: store.fts_search(match, 3, SearchScope()) for match in queries}
        assert store.chunk_rows([exact[keywords("backu*")][0].chunk_id]).popitem()[1].path == "stems.md"
        monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
        monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
        sent = _statements(store, monkeypatch)
        for match in queries:
            sent.clear()
            assert store.fts_search(match, 3, SearchScope()) == exact[match], match
            assert any("impacts @@" in str(sql) for sql, _ in sent)  # the bounded path answered
    finally:
        store.close()


def _sent_params(sent: list[tuple[Any, Any]], *, estimates: bool) -> str:
    """The parameters of every statement sent that asks the planner's estimates (`estimates`)
    or that reads rows (not)."""
    return " ".join(str(params) for sql, params in sent if str(sql).lstrip().startswith("EXPLAIN") == estimates)


def test_a_prefix_that_begins_one_lexeme_is_looked_up_as_that_lexeme(
    zipf_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIN reads a prefix by collecting every matching entry's rows into a bitmap, an exact
    lexeme by walking its postings: a prefix that begins one lexeme of the index ("alpha30",
    "prod" of a host name) reaches the index as that lexeme, in the documents and the impact
    tiers, and ranks as FTS5 ranks the prefix; one that begins several ("sigma5": sigma5,
    sigma53, sigma59) stays a prefix. The planner's estimates, which choose the passes, see
    the prefixes."""
    sqlite, postgres = zipf_stores
    matches = (keywords("alpha30*", "bravo31", "delta8"), keywords("alpha24", "sigma5*", "web 03 prod*"))
    scopes = (SearchScope(), SearchScope(path="notes"), SearchScope(source_ids=("s",)))
    cases = list(itertools.product(matches, (2, 5, 13, 34), scopes))
    scanned = {case: postgres.fts_search(case[0], case[1], case[2]) for case in cases}  # and each phrase counted
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    monkeypatch.setattr(pg_keyword, "SAMPLE_MIN_HITS", 10**9)  # no estimates: the counts kept
    monkeypatch.setattr(pg_keyword, "LEXEME_STATISTICS", False)
    monkeypatch.setattr(pg_keyword, "EVERY_PHRASE_MAX", 1)  # tier passes that settling passes follow
    sent = _statements(postgres, monkeypatch)
    exact = re.compile(r"'(alpha30|a\|alpha30|prod)'(?!:\*)")
    executed = estimated = ""
    for (match, limit, scope), expected in scanned.items():
        sent.clear()
        found = postgres.fts_search(match, limit, scope)
        assert found == expected, (match, limit, scope, postgres.keyword_trace)
        fts5 = sqlite.fts_search(match, limit, scope)
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in fts5], rel=1e-9)
        trace = " ".join(postgres.keyword_trace)
        assert ("alpha30* = alpha30" in trace) == (
            Phrase(("alpha30",), prefix=True) in match.phrases
        ) and "sigma5* =" not in trace
        executed += _sent_params(sent, estimates=False)
        estimated += _sent_params(sent, estimates=True)
    assert "alpha30':*" not in executed and "'prod':*" not in executed and "'sigma5':*" in executed
    assert {found.group(1) for found in exact.finditer(executed)} == {"alpha30", "a|alpha30", "prod"}
    assert "'alpha30':*" in estimated and not exact.search(estimated)


def test_a_prefix_stands_for_one_lexeme_only_while_no_row_holds_another(pg_url: str) -> None:
    """The lexicon grows with every write, a rolled-back one too, and never shrinks: once a
    second word begins with the prefix it stays a prefix, after that word's file is deleted too
    (the lookup is as it was, and so are the hits). A reader whose snapshot does not hold the
    new row yet may already see its word: a prefix then, the same hits."""
    store = PostgresStore.open(pg_url)
    reader = PostgresStore.open(pg_url, readonly=True)
    try:
        store.ensure_source("s", "workspace")
        with store.transaction():
            store.write_files("s", [doc("k1.md", ["Kubernetes cluster", "kubernetes upgrade"])])

        def kuber(on: PostgresStore) -> tuple[int, bool]:
            with on.snapshot():
                hits = on.fts_search(keywords("kuber*"), 10, SearchScope())
            return len(hits), "kuber* = kubernetes" in " ".join(on.keyword_trace)

        assert kuber(store) == (2, True)
        with store.transaction():
            store.write_files("s", [doc("k2.md", ["kubernetize everything"])])
            assert kuber(reader) == (2, False)  # the word is committed before its row
        assert kuber(reader) == (3, False)
        with store.transaction():
            store.delete_file("s", "k2.md")
        assert kuber(reader) == (2, False)
        with pytest.raises(RuntimeError), store.transaction():
            store.write_files("s", [doc("k3.md", ["kubernetesque"])])
            raise RuntimeError("rolled back")
        assert store._one("SELECT count(*) FROM lexemes WHERE lexeme >= 'kuber' AND lexeme < 'kubes'") == 3
        fts_integrity_check(store)
    finally:
        reader.close()
        store.close()


def test_two_first_syncs_adding_the_same_new_words_never_deadlock(pg_url: str) -> None:
    """Two writers of different sources, each in its own transaction, write new words the other
    writes next (in the other order): were the words written in those transactions, the second
    writer would wait for the first one's uncommitted words (here: at the barrier, for good), or
    each for the other's. They are committed apart, so both transactions go on and commit."""
    import threading

    first = [f"novel{n}" for n in range(40)]
    second = [f"other{n}" for n in range(40)]
    plans = {"a": (first, second), "b": (second, first)}
    both_wrote_once = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    def write(source: str) -> None:
        store = PostgresStore.open(pg_url)
        try:
            store.ensure_source(source, "workspace")
            with store.transaction():
                for n, words in enumerate(plans[source]):
                    store.write_files(source, [doc(f"{source}{n}.md", [" ".join(words)])])
                    if n == 0:
                        both_wrote_once.wait()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            both_wrote_once.abort()
        finally:
            store.close()

    PostgresStore.open(pg_url).close()  # the schema, before two writers race for it
    threads = [threading.Thread(target=write, args=(source,)) for source in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    store = PostgresStore.open(pg_url, readonly=True)
    try:
        assert store.counts()["files"] == 4
        fts_integrity_check(store)
    finally:
        store.close()


def test_the_server_writes_a_piece_while_the_next_one_is_folded(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of several pieces sends each piece's statement whole before it folds the next, so
    the server writes one piece while the next is folded. (psycopg writes a statement only as
    far as the socket takes it and keeps the rest until the next one is queued; a piece here is
    about 2 MB.) The chunk ids the first piece draws from their sequence, which a second
    connection sees before anything commits, show that the server ran its statement."""
    import time

    monkeypatch.setattr(pg_store, "PIECE_CHUNKS", 4)
    text = " ".join(f"word{n}" for n in range(40_000))
    files = [doc(f"n{n}.md", [text]) for n in range(8)]
    store = PostgresStore.open(pg_url)
    store.ensure_source("s", "workspace")
    watcher = psycopg.connect(pg_url, autocommit=True)
    ids_drawn: list[int] = []
    folded = pg_store._folded

    def folding(piece: Any, lexemes: set[str]) -> Any:
        if piece[0][0].path == "n4.md":  # the second piece: the first one was sent
            deadline = time.monotonic() + 10
            while not ids_drawn and time.monotonic() < deadline:
                last = watcher.execute(
                    "SELECT pg_sequence_last_value(pg_get_serial_sequence('chunks', 'id')::regclass)"
                ).fetchone()
                if last is not None and last[0] is not None:
                    ids_drawn.append(last[0])
                time.sleep(0.01)
        return folded(piece, lexemes)

    monkeypatch.setattr(pg_store, "_folded", folding)
    try:
        assert store.write_files("s", files) == 8
        assert ids_drawn, "the server had not begun the first piece's statement when the second was folded"
        assert store.counts()["chunks"] == 8
        fts_integrity_check(store)
    finally:
        watcher.close()
        store.close()


def test_the_rows_written_before_the_lexicon_fill_it_on_migration(pg_url: str) -> None:
    store = _holding_the_texts(pg_url)
    with store.transaction():  # the index as the previous schema left it
        store.conn.execute("DROP TABLE lexemes")
        store.conn.execute("ALTER TABLE chunks_fts DROP COLUMN words_listed")
        steps = [step.name for step in pg_schema.PG_MIGRATIONS]
        store.conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(steps.index("lexemes")),))
    store.close()
    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        fts_integrity_check(store)  # every lexeme of every row
        assert store.fts_search(keywords("restar*"), 10, SearchScope())
        assert "restar* = restart" in " ".join(store.keyword_trace)
        with pytest.raises(psycopg.errors.NotNullViolation):  # a writer that lists no words is refused
            store.conn.execute(
                """INSERT INTO chunks_fts(id, source_id, document, length, impacts, scope)
                   VALUES (-1, 's', '', 0, '', '')"""
            )
    finally:
        store.close()


def test_a_keyword_query_folds_as_the_documents_do() -> None:
    """Each phrase's words folded as unicode61 folds the documents, its prefix flag kept; a
    phrase with no token, or with one longer than any lexeme, matches nothing and is left out."""
    query = keywords("Záloha*", "db 01 LAN", "_", "x" * 3000, "Поезд идёт*")
    assert pg_tsquery.folded_phrases(query) == [
        (["zaloha"], True),
        (["db", "01", "lan"], False),
        (["поезд", "идёт"], True),
    ]


def test_a_prefix_is_bounded_above_by_the_least_string_past_its_words() -> None:
    phrases = [(["ab"], True), (["x", "a\ud7ff"], True), (["z\U0010ffff"], True), (["no"], False), (["ab"], True)]
    phrases += [(["it's"], True), (["ba\\"], True)]  # spelled with escapes in a tsquery: not looked up
    assert pg_tsquery.prefix_ranges(phrases) == [("ab", "ac"), ("a\ud7ff", "a\ue000")]


# words of falling frequency (the n-th about 1/n as common as the first), so phrases weigh
# differently and a many-word query's best chunks hold only some of its words
ZIPF_WORDS = [f"{stem}{n}" for n, stem in enumerate(["alpha", "bravo", "delta", "gamma", "kappa", "sigma"] * 40)]
SUBSET_QUERIES = [
    keywords("alpha30*", "bravo31", "delta8"),
    keywords("gamma9", "kappa10", "sigma11", "alpha12"),
    keywords("bravo13", "delta14", "gamma15", "kappa16", "sigma17", "alpha18"),
    keywords("alpha24", "sigma5*", "web 03 prod*"),
    keywords("web 03 prod*"),
]


@pytest.fixture
def zipf_stores(tmp_path: Path, pg_url: str) -> Iterator[tuple[Store, PostgresStore]]:
    """900 chunks drawn from a Zipf-like vocabulary, some holding a host name once or a few times."""
    rng = random.Random(11)
    weights = [1 / (n + 1) for n in range(len(ZIPF_WORDS))]
    files = []
    for n in range(150):
        texts = []
        for _ in range(6):
            words = rng.choices(ZIPF_WORDS, weights, k=rng.randint(5, 90))
            words += ["web-03.prod"] * rng.choice([0] * 9 + [1, 1, 2])
            rng.shuffle(words)
            texts.append(" ".join(words))
        files.append(doc(f"notes/z{n}.md", texts))
    pair = (Store.open(tmp_path / "index.sqlite"), PostgresStore.open(pg_url))
    for store in pair:
        store.ensure_source("s", "workspace")
        with store.transaction():
            store.write_files("s", files)
    pair[1].conn.execute("ANALYZE chunks_fts")  # the planner's statistics, as autovacuum keeps them
    yield pair
    for store in pair:
        store.close()


def test_a_top_the_tiers_leave_open_is_settled_by_phrase_sets_as_fts5_ranks_it(
    zipf_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the limit-th score of a tier pass misses its bound, one more pass (a tier's chunks
    plus those holding enough of the phrases to reach that score) gives the top that scoring
    every match gives; a floor set too high (a broken bound) is caught by the same comparison."""
    sqlite, postgres = zipf_stores
    expected = {
        (m, k): postgres.fts_search(m, k, SearchScope()) for m in SUBSET_QUERIES for k in (2, 3, 5, 8, 13, 21, 34)
    }
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    monkeypatch.setattr(pg_keyword, "SAMPLE_MIN_HITS", 10**9)  # no estimates: each phrase counted
    monkeypatch.setattr(pg_keyword, "LEXEME_STATISTICS", False)
    monkeypatch.setattr(pg_keyword, "EVERY_PHRASE_MAX", 1)  # the first pass takes the top tier alone
    sent = _statements(postgres, monkeypatch)
    bounded = by_sets = 0
    for (match, limit), scanned in expected.items():
        sent.clear()
        found = postgres.fts_search(match, limit, SearchScope())
        assert found == scanned, (match, limit, postgres.keyword_trace)
        fts5 = sqlite.fts_search(match, limit, SearchScope())
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in fts5], rel=1e-9)
        if not any("OVER ()" in str(sql) for sql, _ in sent):
            bounded += 1
            by_sets += any(step.startswith("settle at tier") for step in postgres.keyword_trace)
    assert bounded >= len(expected) // 2
    assert by_sets >= len(expected) // 4
    reaching = pg_keyword._phrase_sets_reaching
    monkeypatch.setattr(pg_keyword, "_phrase_sets_reaching", lambda parts, floor: reaching(parts, floor * 1.5))
    assert any(postgres.fts_search(m, k, SearchScope()) != hits for (m, k), hits in expected.items())


def _settles_under(
    postgres: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    misjudging: Callable[
        [Callable[[PostgresStore, str, dict[str, object]], float], PostgresStore, str, dict[str, object]], float
    ],
    settle: str,
) -> int:
    """How many of the subset queries a settling pass (a trace step starting with `settle`)
    answers, without the scan of every match, while the planner's row estimates are
    `misjudging(estimated, store, where, params)`; each top stays the scan's."""
    expected = {(m, k): postgres.fts_search(m, k, SearchScope()) for m in SUBSET_QUERIES for k in (2, 5, 13, 34)}
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    monkeypatch.setattr(pg_keyword, "SAMPLE_MIN_HITS", 10**9)  # no estimates: each phrase counted
    monkeypatch.setattr(pg_keyword, "EVERY_PHRASE_MAX", 1)  # the first pass takes the top tier alone
    estimated = pg_keyword.KeywordSearch._estimated_rows
    monkeypatch.setattr(
        pg_keyword.KeywordSearch,
        "_estimated_rows",
        lambda store, where, params: misjudging(estimated, store, where, params),
    )
    sent = _statements(postgres, monkeypatch)
    settled = 0
    for (match, limit), scanned in expected.items():
        sent.clear()
        found = postgres.fts_search(match, limit, SearchScope())
        assert found == scanned, (match, limit, postgres.keyword_trace)
        if any(step.startswith(settle) for step in postgres.keyword_trace):
            assert not any("OVER ()" in str(sql) for sql, _ in sent)
            settled += 1
    return settled


@pytest.mark.parametrize("misjudged", ["every match few", "every candidate set many"])
def test_a_settling_pass_answers_when_the_planner_misjudges_the_rows(
    zipf_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch, misjudged: str
) -> None:
    """The planner's estimate of a prefix or phrase tsquery's matches can fall far short of
    them, and its estimate of a tier's candidates far above: the scan a settling pass is
    weighed against reads at least the largest phrase's document frequency, and a tier pass
    whose bound the floor meets (a subset of the matches) answers rather than the scan,
    whatever the planner expects of either. The top stays the scan's."""

    def misjudging(estimated: Any, store: PostgresStore, where: str, params: dict[str, object]) -> float:
        if misjudged == "every match few":
            return 1.0 if "%(all)s" in where else estimated(store, where, params)
        return 1.0 if "%(all)s" in where else 1e9

    settled = _settles_under(zipf_stores[1], monkeypatch, misjudging, "settle at")
    assert settled >= 3  # the scan of every match answered each of them before


def test_a_tiers_candidates_are_counted_not_taken_from_the_planner(
    zipf_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner expects an impact tsquery's prefix words to hold 20-350x the chunks they do:
    were its estimate trusted, every settling pass would look dearer than the scan of every
    match. Counted, the small candidate sets are scored, and the top stays the scan's. A set
    it expects past COUNTED_MAX_ESTIMATE is not counted (the count would cost more than the
    scan: a deep tier of common prefixes) and leaves the top to the scan."""

    def misjudging(estimated: Any, store: PostgresStore, where: str, params: dict[str, object]) -> float:
        return pg_keyword.COUNTED_MAX_ESTIMATE if "f.impacts" in where else estimated(store, where, params)

    assert _settles_under(zipf_stores[1], monkeypatch, misjudging, "settle at tier") >= 3

    def beyond(estimated: Any, store: PostgresStore, where: str, params: dict[str, object]) -> float:
        return pg_keyword.COUNTED_MAX_ESTIMATE + 1 if "f.impacts" in where else estimated(store, where, params)

    assert _settles_under(zipf_stores[1], monkeypatch, beyond, "settle at tier") == 0


def test_estimated_frequencies_keep_a_query_stable_and_count_rare_phrases(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above TIERED_MIN_ROWS a common phrase's document frequency is estimated from a fixed
    sample (the same answer every time while the index is unchanged); a phrase the sample
    barely holds is counted, so a query of rare phrases scores exactly as FTS5."""
    sqlite, postgres = word_stores
    with postgres.transaction():
        postgres.write_file("s", *doc("rare/r.md", ["a quokka met a numbat", "quokka quokka backup"]))
    with sqlite.transaction():
        sqlite.write_file("s", *doc("rare/r.md", ["a quokka met a numbat", "quokka quokka backup"]))
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    monkeypatch.setattr(pg_keyword, "SAMPLED_ROWS", 100)
    monkeypatch.setattr(pg_keyword, "SAMPLE_MIN_HITS", 5)
    for match in COMMON_QUERIES:
        first = postgres.fts_search(match, 10, SearchScope())
        postgres.keyword._phrase_hits.clear()  # estimated again, from the same sample
        postgres.keyword._phrase_samples.clear()
        assert postgres.fts_search(match, 10, SearchScope()) == first
        expected = {hit.chunk_id for hit in sqlite.fts_search(match, 10, SearchScope())}
        assert len(expected & {hit.chunk_id for hit in first}) >= 5, match
    for match in (keywords("quokka"), keywords("numbat", "quokka*")):
        expected = sqlite.fts_search(match, 10, SearchScope())
        found = postgres.fts_search(match, 10, SearchScope())
        assert [hit.chunk_id for hit in found] == [hit.chunk_id for hit in expected]
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], rel=1e-5)
    # scoped, a lone phrase keeps the sample's estimate (its idf scales every score alike): the
    # order is FTS5's, even for a phrase the sample never met
    postgres.keyword._phrase_hits.clear()
    postgres.keyword._phrase_samples.clear()
    for match in (keywords("quokka"), keywords("backup"), keywords("server restore")):
        for scope in (SearchScope(path="rare"), SearchScope(path="notes")):
            expected = sqlite.fts_search(match, 10, scope)
            assert [hit.chunk_id for hit in postgres.fts_search(match, 10, scope)] == [
                hit.chunk_id for hit in expected
            ], (match, scope)


def _analyzed(store: PostgresStore) -> None:
    """Fresh planner statistics of the lexical rows, with every write before counted (a
    backend reports its writes to the cumulative statistics a moment after committing them)."""
    store.conn.execute("SELECT pg_stat_force_next_flush()")
    store.conn.execute("SELECT 1")
    store.conn.execute("ANALYZE chunks_fts")


def _exact_hits(store: PostgresStore, phrase: str) -> int:
    return int(store._one("SELECT count(*) FROM chunks_fts WHERE document @@ %s::tsquery", (phrase,)))


def test_one_word_phrases_take_their_frequency_from_the_statistics_without_a_sample(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above TIERED_MIN_ROWS a phrase of one listed lexeme takes its document frequency from
    ANALYZE's most common elements (all 400 rows sampled here: the exact count), a prefix the
    union of its listed lexemes (between the most common one's count and the sum of theirs),
    and a query of such phrases sends no sample (a short one samples fewer rows for the chunks
    holding all its phrases); a phrase of several words is still sampled. Whether the
    statistics are fresh comes with the index's totals, in the search's first statement."""
    _, postgres = word_stores
    _analyzed(postgres)
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    monkeypatch.setattr(pg_keyword, "SAMPLED_ROWS", 200)
    monkeypatch.setattr(pg_keyword, "CONJUNCTION_SAMPLED_ROWS", 100)
    sent = _statements(postgres, monkeypatch)
    postgres.fts_search(keywords("server", "kernel", "backu*", "index", "query"), 10, SearchScope())
    assert not any("TABLESAMPLE" in str(sql) for sql, _ in sent)
    # whether the statistics are fresh came with the totals, in the search's first statement
    assert [n for n, (sql, _) in enumerate(sent) if "pg_stat_user_tables" in str(sql)] == [0]
    sent.clear()
    postgres.fts_search(keywords("replica", "restore"), 10, SearchScope())
    samples = [params for sql, params in sent if "TABLESAMPLE" in str(sql)]
    assert len(samples) == 1 and samples[0]["percent"] == 100.0 * 100 / int(
        postgres._one("SELECT sum(rows) FROM fts_stats")
    )
    assert "'replica'" in postgres.keyword._phrase_hits and "'restore'" in postgres.keyword._phrase_hits
    for word in ("server", "kernel", "záloha"):
        phrase = pg_tsquery.phrase_tsquery([pg_tsvector.fold_tokens(word)[0]], False)
        if phrase in postgres.keyword._phrase_hits:
            assert postgres.keyword._phrase_hits[phrase] == _exact_hits(postgres, phrase), word
    assert postgres.keyword._phrase_hits["'server'"] == _exact_hits(postgres, "'server'")
    each = [_exact_hits(postgres, f"'{word}'") for word in ("backup", "backups")]
    assert max(each) <= postgres.keyword._phrase_hits["'backu':*"] <= sum(each)
    assert abs(postgres.keyword._phrase_hits["'backu':*"] - _exact_hits(postgres, "'backu':*")) <= 0.1 * sum(each)
    sent.clear()
    postgres.fts_search(keywords("server restore", "kernel"), 10, SearchScope())
    samples = [params for sql, params in sent if "TABLESAMPLE" in str(sql)]
    assert len(samples) == 1 and samples[0]["percent"] == 100.0 * 200 / int(
        postgres._one("SELECT sum(rows) FROM fts_stats")
    )


def test_a_fresh_store_ranks_as_a_warm_one_with_frequencies_from_the_statistics(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The document frequencies a query meets for the first time (statistics, sample, counts)
    are those it keeps: forgotten and taken again, every query answers the same chunks and
    scores, and with a new connection (the statistics read again) too; where the statistics
    hold the exact counts (every row analyzed) the answer is the one of counting every phrase."""
    _, postgres = word_stores
    _analyzed(postgres)
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    first = {m: postgres.fts_search(m, 10, SearchScope()) for m in COMMON_QUERIES}
    pg_keyword.forget_phrase_counts()
    assert {m: postgres.fts_search(m, 10, SearchScope()) for m in COMMON_QUERIES} == first
    for m in COMMON_QUERIES:  # warm
        assert postgres.fts_search(m, 10, SearchScope()) == first[m]
    pg_connection.discard_pool()
    again = PostgresStore.open(postgres.url, readonly=True)
    try:
        assert {m: again.fts_search(m, 10, SearchScope()) for m in COMMON_QUERIES} == first
    finally:
        again.close()
    monkeypatch.setattr(pg_keyword, "LEXEME_STATISTICS", False)
    monkeypatch.setattr(pg_keyword, "SAMPLE_MIN_HITS", 10**9)  # every phrase counted
    pg_keyword.forget_phrase_counts()
    exact = postgres.fts_search(keywords("server", "kernel"), 10, SearchScope())
    pg_keyword.forget_phrase_counts()
    monkeypatch.setattr(pg_keyword, "LEXEME_STATISTICS", True)
    assert postgres.fts_search(keywords("server", "kernel"), 10, SearchScope()) == exact


def test_rows_written_since_the_statistics_send_a_phrase_back_to_the_sample(
    word_stores: tuple[Store, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A phrase whose estimate the rows written since ANALYZE could move by more than
    STATS_DRIFT_SHARE is sampled, as without the statistics; analyzed again, it is not."""
    _, postgres = word_stores
    _analyzed(postgres)
    monkeypatch.setattr(pg_keyword, "TIERED_MIN_ROWS", 1)
    monkeypatch.setattr(pg_keyword, "FULL_SCAN_MAX_MATCHES", 0)
    kernel = _exact_hits(postgres, "'kernel'")
    with postgres.transaction():
        postgres.write_files("s", [doc(f"more/m{n}.md", ["kernel " * 3]) for n in range(kernel // 2)])
    postgres.conn.execute("SELECT pg_stat_force_next_flush()")
    postgres.conn.execute("SELECT 1")
    sent = _statements(postgres, monkeypatch)
    postgres.fts_search(keywords("kernel"), 10, SearchScope())
    assert any("TABLESAMPLE" in str(sql) for sql, _ in sent)
    _analyzed(postgres)
    sent.clear()
    pg_keyword.forget_phrase_counts()
    postgres.fts_search(keywords("kernel"), 10, SearchScope())
    assert not any("TABLESAMPLE" in str(sql) for sql, _ in sent)
    assert postgres.keyword._phrase_hits["'kernel'"] == _exact_hits(postgres, "'kernel'") > kernel


def test_the_lexical_rows_are_analyzed_after_a_percent_of_them_changed(pg_url: str) -> None:
    """The statistics the keyword search reads follow the index: autovacuum analyzes the
    lexical rows after LEXICAL_ANALYZE_SHARE of them changed, on an index made by the previous
    schema too (migrated)."""
    store = PostgresStore.open(pg_url)
    option = f"autovacuum_analyze_scale_factor={pg_schema.LEXICAL_ANALYZE_SHARE}"
    reloptions = "SELECT reloptions FROM pg_class WHERE oid = 'chunks_fts'::regclass"
    try:
        assert option in (store._one(reloptions) or [])
        with store.transaction():  # the index as the previous schema left it
            store.conn.execute("ALTER TABLE chunks_fts RESET (autovacuum_analyze_scale_factor)")
            steps = [step.name for step in pg_schema.PG_MIGRATIONS]
            store.conn.execute(
                "UPDATE meta SET value = %s WHERE key = 'schema_version'",
                (str(steps.index("lexical_statistics_follow_writes")),),
            )
    finally:
        store.close()
    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        assert option in (store._one(reloptions) or [])
    finally:
        store.close()


def _holding_the_texts(pg_url: str) -> PostgresStore:
    """A store of the index at `pg_url` with every file of TEXTS written into source "s"."""
    store = PostgresStore.open(pg_url)
    store.ensure_source("s", "workspace")
    with store.transaction():
        for path, texts in TEXTS.items():
            store.write_file("s", *doc(path, texts))
    return store


def test_lexical_rows_written_before_impact_tiers_get_them_on_migration(pg_url: str) -> None:
    store = _holding_the_texts(pg_url)
    with store.transaction():  # the index as the previous schema left it
        store.conn.execute("DROP INDEX idx_chunks_fts_impacts")
        store.conn.execute("ALTER TABLE chunks_fts DROP COLUMN impacts")
        store.conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    store.close()
    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        fts_integrity_check(store)  # every row's impacts as written today
        assert store._one("SELECT count(*) FROM chunks_fts WHERE impacts <> ''::tsvector") > 0
        with pytest.raises(psycopg.errors.NotNullViolation):  # no default: refused, not hidden
            store.conn.execute("INSERT INTO chunks_fts(id, source_id, document, length) VALUES (-1, 's', '', 0)")
    finally:
        store.close()


@pytest.mark.parametrize(
    "path", ["a.md", "a/b/c.md", "it's/\\x y/é.md", "a//b.md", "x" * 2040 + "/y" * 10 + ".md", "a/" + "é" * 1100]
)
def test_the_written_scope_lexemes_are_those_the_migration_computes(pg_url: str, path: str) -> None:
    store = PostgresStore.open(pg_url)
    try:
        python, sql, first = store.conn.execute(
            "SELECT %s::tsvector::text, path_scopes(%s)::text, %s::tsvector @@ %s::tsquery",
            (
                pg_tsvector.scope_tsvector(path),
                path,
                pg_tsvector.scope_tsvector(path),
                pg_tsvector.quoted_lexeme(path.split("/")[0]),
            ),
        ).fetchone()
        assert python == sql and first  # the top folder (or the file) is always a lexeme
    finally:
        store.close()


def test_lexical_rows_written_before_scope_lexemes_get_them_on_migration(pg_url: str) -> None:
    """An index of the previous schema (no scope column, the document index over `document`
    alone) gets every row's folders and the two-column index; its folder scopes then answer as
    before the migration did, through the lexemes."""
    store = _holding_the_texts(pg_url)
    scope = SearchScope(path="devops")
    before = store.fts_search(keywords("server*", "zaloha*"), 10, scope)
    assert before
    with store.transaction():  # the index as the previous schema left it
        store.conn.execute("DROP INDEX idx_chunks_fts_document")
        store.conn.execute("ALTER TABLE chunks_fts DROP COLUMN scope")
        store.conn.execute("DROP FUNCTION path_scopes(text)")
        store.conn.execute("CREATE INDEX idx_chunks_fts_document ON chunks_fts USING gin(document)")
        steps = [step.name for step in pg_schema.PG_MIGRATIONS]
        store.conn.execute(
            "UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(steps.index("lexical_scopes")),)
        )
    store.close()
    store = PostgresStore.open(pg_url)
    try:
        assert store.meta()["schema_version"] == str(pg_schema.PG_SCHEMA_VERSION)
        fts_integrity_check(store)  # every row's folders
        columns = store._one(
            """SELECT array_agg(a.attname::text ORDER BY k.n) FROM pg_index i
               CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n)
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
               WHERE i.indexrelid = 'idx_chunks_fts_document'::regclass"""
        )
        assert columns == ["document", "scope"]
        assert store.fts_search(keywords("server*", "zaloha*"), 10, scope) == before
        assert "the folder's lexeme" in " ".join(store.keyword_trace)
        with pytest.raises(psycopg.errors.NotNullViolation):  # a row without its folders is refused
            store.conn.execute(
                "INSERT INTO chunks_fts(id, source_id, document, length, impacts) VALUES (-1, 's', '', 0, '')"
            )
    finally:
        store.close()


def _impact_words_by_definition(document: bytes, length: int) -> set[str]:
    """The impact words of a chunk from its tsvector, written plainly from the
    definition: a lexeme's tf is its kept positions plus its breadcrumb ones (A) again; a
    prefix of at least SHARED_PREFIX_MIN characters held by several lexemes sums theirs; each
    takes the label of the highest tier its saturation reaches."""
    norm = pg_tsvector.BM25_K1 * (
        1 - pg_tsvector.BM25_B + pg_tsvector.BM25_B * length / pg_tsvector.IMPACT_REFERENCE_LENGTH
    )
    longest = pg_tsvector.MAX_LEXEME_BYTES // 4 - 2

    def label(tf: int) -> str | None:
        saturation = tf * (pg_tsvector.BM25_K1 + 1) / (tf + norm)
        reached = [n for n, floor in enumerate(pg_tsvector.IMPACT_TIERS) if saturation >= floor]
        return pg_tsvector.IMPACT_LABELS[reached[0]] if reached else None

    frequencies = {
        token: len(kept) + sum(weight == pg_tsvector.WEIGHT_A for _, weight in kept)
        for token, kept in decode_tsvector(document).items()
    }
    words = {f"{label(tf)}|{token}" for token, tf in frequencies.items() if label(tf) and len(token) <= longest}
    prefixes: dict[str, list[str]] = {}
    for token in frequencies:
        for n in range(pg_tsvector.SHARED_PREFIX_MIN, min(len(token), longest) + 1):
            prefixes.setdefault(token[:n], []).append(token)
    for prefix, holders in prefixes.items():
        tf = sum(frequencies[token] for token in holders)
        if len(holders) > 1 and label(tf):
            words.add(f"{label(tf)}>{prefix}")
    return words


def test_impact_tiers_are_their_definition_on_random_texts() -> None:
    rng = random.Random(14)
    vocabulary = ["backup", "backups", "backuped", "bac", "ba", "x", "o'neil", "č", "žluťoučký", "ab12", "123"]
    vocabulary += ["é" * 520, "q" * 2100]  # a lexeme too long for impact words, a token too long to index
    for _ in range(300):
        breadcrumb = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 6)))
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.choice([1, 5, 40, 400])))
        document, length, impacts = pg_tsvector.lexical_row(breadcrumb, text)
        assert all(not positions for positions in decode_tsvector(impacts).values())
        assert set(decode_tsvector(impacts)) == _impact_words_by_definition(document, length), (breadcrumb, text)


def _text_literal(breadcrumb: str, text: str) -> str:
    """A chunk's tsvector in the text form, from its tokens by the definition: breadcrumb
    positions from 1 weighted A, text positions after one empty one, each lexeme's first
    MAX_POSITIONS_PER_LEXEME; the server's text input caps and merges positions itself."""
    head, body = pg_tsvector.fold_tokens(breadcrumb), pg_tsvector.fold_tokens(text)
    places: dict[str, list[str]] = {}
    for position, token in enumerate(head, 1):
        places.setdefault(token, []).append(f"{min(position, pg_tsvector.MAX_POSITION)}A")
    for position, token in enumerate(body, len(head) + 2):
        places.setdefault(token, []).append(str(min(position, pg_tsvector.MAX_POSITION)))
    return " ".join(
        "'"
        + token.replace("\\", "\\\\").replace("'", "''")
        + "':"
        + ",".join(kept[: pg_tsvector.MAX_POSITIONS_PER_LEXEME])
        for token, kept in places.items()
        if len(token.encode()) <= pg_tsvector.MAX_LEXEME_BYTES
    )


def test_a_written_tsvector_is_the_one_the_server_makes_of_its_text(pg_url: str) -> None:
    """The binary tsvector a write sends holds what the server's own parsing of the text form
    gives: escapes, lexemes too long to index, more positions than a lexeme keeps, positions
    past the last one (collapsed into it), a breadcrumb."""
    rng = random.Random(15)
    vocabulary = ["backup", "o'neil", "a\\b", "č", "žluťoučký", "ab12", "é" * 520, "q" * 2100, "日本"]
    cases = [("", ""), ("x", ""), ("", "backup " * 300), ("Notes > o'neil", "x " * 16500 + "backup tail tail")]
    cases += [("head " * 40, "y " * 16380 + "head " * 10)]
    for _ in range(40):
        breadcrumb = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 4)))
        cases.append((breadcrumb, " ".join(rng.choice(vocabulary) for _ in range(rng.choice([1, 30, 600])))))
    store = PostgresStore.open(pg_url)
    try:
        for breadcrumb, text in cases:
            document, _, _ = pg_tsvector.lexical_row(breadcrumb, text)
            sent, parsed = store.conn.execute(
                "SELECT %s::text, %s::tsvector::text", (document, _text_literal(breadcrumb, text))
            ).fetchone()
            assert sent == parsed, (breadcrumb[:80], text[:80])
    finally:
        store.close()


def _statements(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every (sql, params) the store sends from now on."""
    sent: list[tuple[Any, Any]] = []
    execute = store.conn.execute

    def recording(sql: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((sql, params))
        return execute(sql, params, **kwargs)

    monkeypatch.setattr(store.conn, "execute", recording)
    return sent


def _vector_space(pg_url: str, monkeypatch: pytest.MonkeyPatch, dims: int, hnsw_from: int) -> PostgresStore:
    """A store with an embedding space of `dims` and source "s", its HNSW index built once
    `hnsw_from` vectors are stored."""
    from indexer.config import EmbeddingConfig

    monkeypatch.setattr(pg_vectors, "HNSW_MIN_VECTORS", hnsw_from)
    store = PostgresStore.open(pg_url)
    store.reset_vectors(
        dims, EmbeddingConfig(provider="ollama", model="t:1", endpoint="http://x", dims=dims).identity()
    )
    store.ensure_source("s", "workspace")
    return store


def test_scoped_vector_search_is_exact_and_unscoped_uses_hnsw(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _vector_space(pg_url, monkeypatch, DIMS, hnsw_from=100)
    try:
        fill(store, {"big": 300, "small": 30}, np.random.default_rng(5))  # type: ignore[arg-type]
        assert store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')").fetchone()[0]
        store.conn.execute("ANALYZE")
        store.conn.execute("SET enable_seqscan = off")  # a planner that would take any index it may
        sent = _statements(store, monkeypatch)
        query = np.random.default_rng(6).normal(size=DIMS).astype(np.float32)
        for scope in (SearchScope(path="small"), SearchScope()):
            sent.clear()
            assert store.vec_search(query, 10, scope)
            sql, params = next((sql, params) for sql, params in sent if "<=>" in str(sql))
            plan = "\n".join(row[0] for row in store.conn.execute(f"EXPLAIN {sql}", params))
            if scope.is_all:
                assert "idx_chunk_vectors_hnsw" in plan, plan
            else:
                assert "hnsw" not in plan, plan
    finally:
        store.close()


@pytest.mark.parametrize("dims", [2048, 4001])
def test_vectors_wider_than_an_hnsw_index_of_vectors_takes_are_searched(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, dims: int
) -> None:
    """pgvector indexes at most 2,000 dimensions of `vector` (text-embedding-3-large has 3,072):
    up to 4,000 the graph holds them as half-precision, with the distances shown still exact;
    wider, an exact scan answers. Either way the first sync past HNSW_MIN_VECTORS stores them."""
    store = _vector_space(pg_url, monkeypatch, dims, hnsw_from=50)
    try:
        with store.transaction():
            store.write_files("s", [doc(f"n/{i}.md", [f"note {i}"]) for i in range(80)])
        rng = np.random.default_rng(9)
        ids = [row[0] for row in store.pending_chunks(1000)]
        matrix = rng.normal(size=(len(ids), dims)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        store.store_vectors(ids, matrix)
        indexed = store.conn.execute("SELECT to_regclass('idx_chunk_vectors_hnsw')").fetchone()[0] is not None
        assert indexed == (dims <= 4000)
        store.conn.execute("ANALYZE")
        store.conn.execute("SET enable_seqscan = off")
        sent = _statements(store, monkeypatch)
        query = rng.normal(size=dims).astype(np.float32)
        hits = store.vec_search(query, 10, SearchScope())
        distances = 1 - (matrix @ query) / np.linalg.norm(query)
        order = np.argsort(distances, kind="stable")[:10]
        assert [hit.chunk_id for hit in hits] == [ids[i] for i in order]  # 80 vectors: the graph finds all
        assert [hit.score for hit in hits] == pytest.approx([float(distances[i]) for i in order], abs=1e-6)
        sql, params = next((sql, params) for sql, params in sent if "<=>" in str(sql))
        plan = "\n".join(row[0] for row in store.conn.execute(f"EXPLAIN {sql}", params))
        assert ("idx_chunk_vectors_hnsw" in plan) == indexed, plan
    finally:
        store.close()


def test_readers_see_committed_state_and_never_wait_for_a_writer(pg_url: str) -> None:
    writer = PostgresStore.open(pg_url)
    writer.ensure_source("s", "workspace")
    reader = PostgresStore.open(pg_url, readonly=True)
    # a reader that waited on the writer's locks would fail here instead of hanging the suite
    reader.conn.execute("SET lock_timeout = '10s'")
    try:
        with writer.transaction():
            writer.write_file("s", *doc("a.md", ["first"]))
            assert reader.counts()["files"] == 0  # uncommitted: invisible, and no wait
        assert reader.counts()["files"] == 1
        with reader.snapshot():
            before = reader.counts()
            with writer.transaction():
                writer.write_file("s", *doc("b.md", ["second"]))
            assert reader.counts() == before  # one state inside a snapshot
        assert reader.counts()["files"] == 2
        with pytest.raises(StoreError, match="read-only"):
            reader.set_meta({"x": "y"})
    finally:
        reader.close()
        writer.close()


def test_the_vectors_generation_moves_for_every_connection(pg_url: str) -> None:
    writer = PostgresStore.open(pg_url)
    other = PostgresStore.open(pg_url, readonly=True)
    try:
        writer.reset_vectors(4, {"embedding_model": "m"})
        writer.ensure_source("s", "workspace")
        with writer.transaction():
            writer.write_file("s", *doc("a.md", ["one", "two"]))
        seen = other.vectors_generation()
        pending = writer.pending_chunks(10)
        assert writer.store_vectors([p.id for p in pending], np.eye(4, dtype=np.float32)[:2]) == 2
        moved = other.vectors_generation()
        assert moved and moved != seen
        with writer.transaction():
            writer.touch_file("s", "a.md", 2, 2.0)  # no vector changed: the generation stays
        assert other.vectors_generation() == moved
        ids, matrix = other.all_vectors()
        assert ids.tolist() == [p.id for p in pending] and matrix.tolist() == np.eye(4)[:2].tolist()
    finally:
        other.close()
        writer.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_a_database_or_an_index_that_is_not_there_is_one_line(pg_url: str) -> None:
    with pytest.raises(StoreError, match="cannot reach the PostgreSQL server") as down:
        PostgresStore.open(f"postgresql://someone:secret@127.0.0.1:{_closed_port()}/notes")
    assert "\n" not in str(down.value) and "secret" not in str(down.value)
    missing = pg_url.replace("/notes_search_tests?", "/no_such_database?")
    with pytest.raises(StoreError, match="database 'no_such_database' does not exist") as absent:
        PostgresStore.open(missing)
    assert "\n" not in str(absent.value)
    with pytest.raises(StoreError, match="run `notes-search sync` first"):
        PostgresStore.open(pg_url, readonly=True)
    assert not PostgresStore.exists(pg_url)
    PostgresStore.open(pg_url).close()
    assert PostgresStore.exists(pg_url)
    assert describe("postgresql://me:pw@db.lan:5433/notes") == "postgresql://me@db.lan:5433/notes"


def test_a_password_in_the_url_query_is_redacted_too() -> None:
    """libpq takes `?password=` as well as `user:password@`; neither may reach a message."""
    assert describe("postgresql://me@db.lan/notes?sslmode=require&password=pw") == (
        "postgresql://me@db.lan/notes?sslmode=require"
    )
    assert describe("postgresql://me:pw@/notes?host=/run/pg&password=pw2") == "postgresql://me@/notes?host=/run/pg"
    assert describe("postgresql://db.lan/notes?password=") == "postgresql://db.lan/notes"
    assert describe("postgresql://me@db.lan/notes?sslmode=require") == "postgresql://me@db.lan/notes?sslmode=require"


@pytest.mark.parametrize(
    "command", [("status", "--offline"), ("query", "x"), ("sync",), ("toc",), ("status", "--json")]
)
def test_a_password_in_the_url_query_never_reaches_an_error_line(
    tmp_path: Path, notes: Path, command: tuple[str, ...]
) -> None:
    url = f"postgresql://me@127.0.0.1:{_closed_port()}/notes?password=hunter2-secret&connect_timeout=2"
    result = CliRunner().invoke(cli_module.cli, ["--config", str(make_config(tmp_path, notes, db=url)), *command])
    assert_one_line_error(result, "127.0.0.1")
    assert "hunter2-secret" not in result.output


@pytest.mark.parametrize(
    ("db", "problem"),
    [
        ("postgresql://me@db.lan", "must name the database"),
        ("postgresql://me@db.lan:99999/notes", "not a valid PostgreSQL URL"),
        ("postgresql://me@db.lan/a/b", "not a database name"),
    ],
)
def test_a_bad_postgres_url_is_a_config_error(db: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_config(f"db: {db}\n", "cfg.yaml")


def test_a_postgres_config_keeps_local_state_in_the_default_folder(tmp_path: Path) -> None:
    config = parse_config("db: postgresql://me@db.lan/notes\n", "cfg.yaml", base=tmp_path)
    assert config.index_location == "postgresql://me@db.lan/notes"
    assert config.db == tmp_path / "db" / "notes-index.sqlite"  # its folder: lock, toc, outage memory


def test_sync_show_toc_status_and_reindex_on_postgres(tmp_path: Path, notes: Path, pg_url: str) -> None:
    config_path = make_config(tmp_path, notes, db=pg_url)
    runner = CliRunner()
    embedders: list[FakeEmbedder] = []

    def run(*args: str) -> Any:
        return runner.invoke(cli_module.cli, ["--config", str(config_path), *args], catch_exceptions=False)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli_module, "make_embedder", lambda cfg: embedders.append(FakeEmbedder(cfg)) or embedders[-1])
        assert run("sync").exit_code == 0
        shown = run("show", "notes:devops/postgres.md")
        assert shown.exit_code == 0 and "5432" in shown.output
        toc = run("toc")
        assert toc.exit_code == 0 and "devops/zalohovani.md" in toc.output
        status = json.loads(run("status", "--json").output)
        assert status["db"] == describe(pg_url) and not (tmp_path / "db" / "notes-index.sqlite").exists()
        # the pool and the searched tables as the server sizes them, asked another way
        store = PostgresStore.open(pg_url)
        try:
            pool, tables = store.conn.execute(
                """SELECT pg_size_bytes(current_setting('shared_buffers')),
                          sum(pg_table_size(t) + pg_indexes_size(t))
                   FROM unnest(ARRAY['chunks_fts', 'chunk_vectors', 'chunks', 'files', 'file_tags', 'lexemes']::regclass[]) t"""
            ).fetchone()
        finally:
            store.close()
        memory = status["server_memory"]
        assert memory == {"searched_bytes": tables, "buffer_pool_bytes": pool, "fits": tables <= pool}
        assert tables > 0 and f"shared_buffers holds {pool // 2**20} MB" in run("status").output
        (notes / "devops" / "postgres.md").write_text("# PostgreSQL\n\nNow on port 6432.\n", encoding="utf-8")
        assert run("reindex", "notes:devops").exit_code == 0
        found = json.loads(run("query", "6432", "--mode", "lex", "--json").output)
        assert [hit["path"] for hit in found["results"]] == ["devops/postgres.md"]


def test_a_pooled_connection_the_server_dropped_is_replaced(pg_url: str, pg_server: Any) -> None:
    store = PostgresStore.open(pg_url)
    pid = store.conn.info.backend_pid
    store.close()  # back to the pool
    pg_server.admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    again = PostgresStore.open(pg_url)  # a server restart looks the same to the pool
    try:
        assert again.conn.info.backend_pid != pid and again.counts()["files"] == 0
    finally:
        again.close()


def _recorded_phrase_counts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every exact count of phrases the stores make from now on, each call's phrases in a list."""
    counted: list[list[str]] = []
    count = pg_keyword.KeywordSearch._count_phrase_hits

    def counting(store: PostgresStore, phrases: Any) -> None:
        counted.append(list(phrases))
        count(store, phrases)

    monkeypatch.setattr(pg_keyword.KeywordSearch, "_count_phrase_hits", counting)
    return counted


def test_a_server_opening_a_store_per_call_keeps_the_phrase_counts_until_the_rows_change(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived server reads through a new store each call (its connection from the pool):
    the document frequencies a scoped query counted are kept for the next call while the
    lexical rows are unchanged, counted again after a write, and forgotten with a new
    connection (the server may have restarted and lost its last commits)."""
    writer = _holding_the_texts(pg_url)
    counted = _recorded_phrase_counts(monkeypatch)
    scope = SearchScope(path="devops")

    def one_call(match: KeywordQuery) -> list[Any]:
        reader = PostgresStore.open(pg_url, readonly=True)
        try:
            return reader.fts_search(match, 10, scope)
        finally:
            reader.close()

    first = one_call(keywords("server*", "backup"))
    assert first and len(counted) == 1
    assert one_call(keywords("server*", "backup")) == first and len(counted) == 1
    with writer.transaction():
        writer.write_file("s", *doc("devops/more.md", ["backup backup of the server"]))
    changed = one_call(keywords("server*", "backup"))
    assert len(counted) == 2
    pg_connection.discard_pool()
    assert one_call(keywords("server*", "backup")) == changed and len(counted) == 3
    writer.close()


def test_forgotten_phrase_counts_are_counted_again_with_the_same_answer(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Benchmarks forget the kept document frequencies to time a query met for the first time:
    an open store then counts again (the dicts it shares are emptied) and answers alike."""
    store = _holding_the_texts(pg_url)
    counted = _recorded_phrase_counts(monkeypatch)
    scope = SearchScope(path="devops")
    try:
        first = store.fts_search(keywords("server*", "backup"), 10, scope)
        assert first and store.fts_search(keywords("server*", "backup"), 10, scope) == first and len(counted) == 1
        pg_keyword.forget_phrase_counts()
        assert store.fts_search(keywords("server*", "backup"), 10, scope) == first and len(counted) == 2
    finally:
        store.close()


def _pending_lexical_pages(store: PostgresStore) -> int:
    """The pages of the lexical indexes' pending lists (merged by the call that counts them)."""
    merges = " + ".join(f"gin_clean_pending_list('{name}'::regclass)" for name in pg_schema.LEXICAL_GIN_INDEXES)
    return int(store.conn.execute(f"SELECT {merges}").fetchone()[0])


def test_a_sync_leaves_no_pending_lexical_index_entries_for_searches_to_read(pg_url: str) -> None:
    store = PostgresStore.open(pg_url)
    try:
        store.ensure_source("s", "workspace")
        with store.transaction():
            store.write_file("s", *doc("devops/a.md", TEXTS["devops/postgres.md"]))
        assert _pending_lexical_pages(store) > 0  # written rows wait in the pending lists
        with store.transaction():
            for path, texts in TEXTS.items():
                store.write_file("s", *doc(path, texts))
        store.mark_synced("s", indexed_rev="abc")
        assert _pending_lexical_pages(store) == 0
        assert store.source_state("s").indexed_rev == "abc"
        assert store.fts_search(keywords("pooler"), 5, SearchScope())
    finally:
        store.close()


def test_a_sync_user_who_does_not_own_the_indexes_still_marks_the_source_synced(pg_url: str, pg_server: Any) -> None:
    owner = PostgresStore.open(pg_url)
    owner.ensure_source("s", "workspace")
    owner.close()
    schema = pg_url.rsplit("search_path%3D", 1)[1].split("%2C", 1)[0]
    role = f"{schema}_writer"
    pg_server.admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        pg_server.admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        pg_server.admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}")
        pg_server.admin.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
        writer = PostgresStore.open(pg_url.replace("postgresql://postgres@", f"postgresql://{role}@"))
        try:
            with writer.transaction():
                writer.write_file("s", *doc("devops/a.md", TEXTS["devops/postgres.md"]))
            writer.mark_synced("s", indexed_rev="abc")  # the merge is refused: autovacuum's then
            assert writer.source_state("s").indexed_rev == "abc"
            assert writer.fts_search(keywords("pooler"), 5, SearchScope())
        finally:
            writer.close()
    finally:
        pg_connection.discard_pool()
        pg_server.admin.execute(f"DROP OWNED BY {role}")
        pg_server.admin.execute(f"DROP ROLE {role}")


def test_a_sync_whose_lexical_merge_times_out_is_still_marked_synced(pg_url: str) -> None:
    """The merge is an optimisation after the source's state is committed: a lock it cannot get
    in time (a REINDEX or a migration elsewhere, a role's lock_timeout) leaves it to autovacuum,
    and neither fails the sync nor reaches the user as a driver traceback."""
    store = PostgresStore.open(pg_url)
    blocker = psycopg.connect(pg_url, autocommit=True)
    try:
        store.ensure_source("s", "workspace")
        with store.transaction():
            store.write_file("s", *doc("devops/a.md", TEXTS["devops/postgres.md"]))
        blocker.execute("BEGIN")
        blocker.execute("DROP INDEX idx_chunks_fts_impacts")  # holds the index until rolled back
        store.conn.execute("SET lock_timeout = '100ms'")
        store.mark_synced("s", indexed_rev="abc")
        blocker.execute("ROLLBACK")
        store.conn.execute("RESET lock_timeout")
        assert store.source_state("s").indexed_rev == "abc"
        assert store.fts_search(keywords("pooler"), 5, SearchScope())
    finally:
        blocker.close()
        store.close()
