"""Query building and fusion as pure functions; FTS5 must accept whatever a user types."""

from __future__ import annotations

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.keywords import KeywordQuery, Phrase
from indexer.store.fts5 import match_expression
from search.fusion import rrf
from search.querybuild import ECHO_BYTES, MAX_TERMS, code_like, echoed_query, keyword_query


def build_fts_query(text: str) -> str | None:
    """The FTS5 expression SQLite's store sends for free text (None: nothing searchable)."""
    query = keyword_query(text)
    return match_expression(query) if query is not None else None


@pytest.fixture(scope="module")
def fts() -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61 remove_diacritics 2')")
    for body in [
        "záloha databáze",
        "zálohování serveru",
        "zálohy na disk",
        "db-01.lan port 5432",
        "Поезд из Москвы",
        "NEAR the end",
        "plain english words",
    ]:
        conn.execute("INSERT INTO t(body) VALUES (?)", (body,))
    return conn


def matches(conn: apsw.Connection, text: str) -> list[str]:
    expr = build_fts_query(text)
    if expr is None:
        return []
    return [r[0] for r in conn.execute("SELECT body FROM t WHERE t MATCH ? ORDER BY rank", (expr,))]


def test_prefix_wildcard_covers_czech_inflection(fts: apsw.Connection) -> None:
    assert set(matches(fts, "záloh")) == {"záloha databáze", "zálohování serveru", "zálohy na disk"}


def test_diacritics_are_folded(fts: apsw.Connection) -> None:
    assert "záloha databáze" in matches(fts, "zaloha")


def test_short_terms_get_no_wildcard() -> None:
    assert build_fts_query("db") == '"db"'
    assert build_fts_query("port") == '"port"*'


def test_punctuated_tokens_become_phrases(fts: apsw.Connection) -> None:
    assert build_fts_query("db-01.lan") == '"db 01 lan"*'
    assert matches(fts, "db-01.lan") == ["db-01.lan port 5432"]


def test_quoted_phrase_is_kept(fts: apsw.Connection) -> None:
    assert build_fts_query('"zálohování serveru"') == '"zálohování serveru"'
    assert matches(fts, '"serveru zálohování"') == []


def test_operators_are_plain_words(fts: apsw.Connection) -> None:
    assert matches(fts, "NEAR") == ["NEAR the end"]
    for text in ["AND", "a OR b", "NOT x", "-x", "col:value", "x*", "(", ")", '"', "^", "NEAR(a b)"]:
        matches(fts, text)  # must not raise


def test_word_endings_are_trimmed_to_a_stem(fts: apsw.Connection) -> None:
    assert build_fts_query("zálohování") == '"zálohová"*'
    assert build_fts_query("backup") == '"backu"*'  # 6 letters: one off, the stem keeps 5
    assert build_fts_query("запись") == '"запис"*'
    assert build_fts_query("záloha") == '"záloh"*'
    assert build_fts_query("disk") == '"disk"*'  # short words keep every letter
    assert build_fts_query("x86_64") == '"x86 64"'  # not a plain word: untouched
    assert build_fts_query("nginx2") == '"nginx2"*'
    assert build_fts_query("数据库备份恢复") == '"数据库备份恢复"*'  # not an inflected script: whole
    assert build_fts_query("Ελλάδα") == '"Ελλάδ"*'
    assert build_fts_query('"zálohování serveru"') == '"zálohování serveru"'  # a phrase stays exact
    # another case of the word finds every form: "zálohou" (instrumental) -> "záloh*"
    assert set(matches(fts, "zálohou")) == {"záloha databáze", "zálohování serveru", "zálohy na disk"}
    assert matches(fts, "Москвой") == ["Поезд из Москвы"]


def test_stopwords_dropped_only_when_other_terms_exist() -> None:
    assert build_fts_query("how to restore the backup") == '"resto"* OR "backu"*'
    assert build_fts_query("how to") == '"how"* OR "to"'


def test_russian_query(fts: apsw.Connection) -> None:
    assert matches(fts, "поезд москва") == ["Поезд из Москвы"]


def test_nothing_searchable() -> None:
    assert build_fts_query("") is None
    assert build_fts_query("   ") is None
    assert build_fts_query("🙂 ?! …") is None


def test_long_input_is_capped(fts: apsw.Connection) -> None:
    text = " ".join(f"word{i}" for i in range(5000))
    expr = build_fts_query(text)
    assert expr is not None and expr.count(" OR ") == MAX_TERMS - 1
    matches(fts, text)


_PROPERTY_DB = apsw.Connection(":memory:")
_PROPERTY_DB.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61 remove_diacritics 2')")
_PROPERTY_DB.execute("INSERT INTO t(body) VALUES ('anything at all')")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_unicode_is_valid_fts(text: str) -> None:
    expr = build_fts_query(text)
    if expr is not None:
        _PROPERTY_DB.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = rrf({"bm25": [1, 2, 3], "vec": [3, 1]}, k=60)
    scores = {f.chunk_id: f.score for f in fused}
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[2] == pytest.approx(1 / 62)
    assert [f.chunk_id for f in fused] == [1, 3, 2]
    assert fused[0].ranks == {"bm25": 1, "vec": 2}


def test_rrf_ties_go_to_the_most_recent() -> None:
    fused = rrf({"bm25": [10, 20], "vec": [20, 10]}, recency={10: 100.0, 20: 200.0})
    assert [f.chunk_id for f in fused] == [20, 10]
    fused = rrf({"bm25": [10, 20], "vec": [20, 10]}, recency={10: 300.0, 20: 200.0})
    assert [f.chunk_id for f in fused] == [10, 20]


def test_rrf_single_list_keeps_order_and_duplicates_count_once() -> None:
    fused = rrf({"bm25": [5, 6, 5], "vec": []})
    assert [f.chunk_id for f in fused] == [5, 6]
    assert fused[0].score == pytest.approx(1 / 61)


def test_rrf_empty() -> None:
    assert rrf({"bm25": [], "vec": []}) == []


def test_stress_marks_do_not_split_words(fts: apsw.Connection) -> None:
    assert build_fts_query("пое́зд") == '"поезд"*'
    assert matches(fts, "Москвы́") == ["Поезд из Москвы"]


# ---- SQLite's rendering of the typed query ------------------------------------------------


def test_the_fts5_expression_quotes_every_phrase_and_marks_prefixes() -> None:
    query = KeywordQuery((Phrase(("db", "01", "lan"), prefix=True), Phrase(("kernel",)), Phrase(("backu",), True)))
    assert match_expression(query) == '"db 01 lan"* OR "kernel" OR "backu"*'


def test_words_that_spell_fts5_syntax_stay_words(fts: apsw.Connection) -> None:
    """A word holding a quote, or spelling an operator or a column filter, is matched as text."""
    hostile = [("NEAR",), ("AND",), ('say "hi',), ("body:x",), ("-", "x"), ("*",), ("end", "NEAR")]
    expression = match_expression(KeywordQuery(tuple(Phrase(words) for words in hostile)))
    assert expression == '"NEAR" OR "AND" OR "say ""hi" OR "body:x" OR "- x" OR "*" OR "end NEAR"'
    found = [r[0] for r in fts.execute("SELECT body FROM t WHERE t MATCH ?", (expression,))]
    assert found == ["NEAR the end"]


def test_a_query_and_its_phrases_need_words() -> None:
    for bad in ((), ("",), ("ok", "")):
        with pytest.raises(ValueError, match="needs words"):
            Phrase(bad)
    with pytest.raises(ValueError, match="needs a phrase"):
        KeywordQuery(())


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("pytest -Werror --pdb -x", True),
        ("journalctl --vacuum-size=50M", True),
        ("cat /etc/fstab", True),
        ("každý den v 9.50?", True),
        ("C++ templates", True),
        ("převod do šestnáctkové soustavy", False),
        ("How do I restore a backup?", False),
        ('"quoted phrase" (in brackets), „české uvozovky“…', False),
        ("", False),
    ],
)
def test_a_query_is_code_like_when_a_typed_word_is_more_than_letters(text: str, code: bool) -> None:
    assert code_like(text) is code


def test_a_long_query_is_echoed_cut_at_a_character_with_a_marker() -> None:
    assert echoed_query("záloha") == "záloha"
    exact = "ž" * (ECHO_BYTES // 2)  # exactly the limit: whole
    assert echoed_query(exact) == exact
    cut = echoed_query("a" + "ž" * 1500)  # the 2,000th byte is half a character
    assert cut == "a" + "ž" * 999 + "… [cut: the query has 3,001 bytes]"
