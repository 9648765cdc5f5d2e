"""Ranking rules a user sees at a glance: an exact term beats its prefix matches, each hit says
how it matched, a keyword miss is said out loud, one hit per file on request, a similarity floor
for meaning-only hits, and the fusion constant from the config. Real SQLite indexes built by
run_sync with the deterministic fake embedder; the CLI through CliRunner, MCP through the SDK."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st
from mcp import ClientSession

from indexer.config import Config, load_config, parse_config
from indexer.errors import ConfigError, NotesSearchError
from indexer.keywords import KeywordQuery, Phrase
from indexer.store import Store
from indexer.store.fts5 import match_expression
from indexer.sync import run_sync
from search import cli as cli_module
from search.engine import SearchResponse, search
from search.exact import ExactRule, exact_counts, exact_first, exact_rules
from search.querybuild import QueryTerm, exact_query, query_terms
from tests.conftest import FAKE_EMBEDDING, assert_one_line_error, open_index, write_tree
from tests.fakes import FakeEmbedder

# ---- pure rules ------------------------------------------------------------------------------


def _fts5(phrase: Phrase | None) -> str | None:
    return match_expression(KeywordQuery((phrase,))) if phrase is not None else None


def build_exact_query(terms: list[QueryTerm]) -> str | None:
    """The FTS5 expression SQLite's store sends for the exact identifier search."""
    query = exact_query(terms)
    return match_expression(query) if query is not None else None


def test_identifier_terms_get_an_exact_form_and_words_of_a_language_keep_their_stems() -> None:
    terms = query_terms("token5 PROJ-123 backups db 5")
    assert [(_fts5(t.match), _fts5(t.exact)) for t in terms] == [
        ('"token5"*', '"token5"'),
        ('"PROJ 123"*', '"PROJ 123"'),
        ('"backu"*', '"backups"'),
        ('"db"', None),  # too short to widen: nothing to be exact about
        ('"5"', None),
    ]
    assert build_exact_query(terms) == '"token5" OR "PROJ 123"'
    assert [(r.widened, r.exact) for r in exact_rules(terms)] == [
        (("token5",), ("token5",)),
        (("proj", "123"), ("proj", "123")),
    ]
    assert build_exact_query(query_terms("backups of the server")) is None


def test_exact_counts_tell_prefix_from_exact_and_respect_phrases() -> None:
    rules = exact_rules(query_terms("PROJ-123"))
    assert exact_counts(rules, "ticket PROJ-123 is open") == (True, 1)
    assert exact_counts(rules, "ticket proj-1231 is open") == (True, 0)
    assert exact_counts(rules, "PROJ then 123 elsewhere") == (False, 0)  # not one phrase
    assert exact_counts(rules, "nothing here") == (False, 0)


def test_exact_first_moves_only_the_chunks_a_widened_term_matched() -> None:
    texts = {1: "token50", 2: "about meaning only", 3: "token5 here", 4: "token51", 5: "token5"}
    rules = exact_rules(query_terms("token5"))
    # 2 matched by meaning alone keeps its place; 3 and 5 take the first places of 1, 4 and 3
    assert exact_first([1, 2, 4, 3, 5], texts, rules) == [3, 2, 5, 1, 4]
    assert exact_first([1, 2, 3], texts, []) == [1, 2, 3]


@given(
    st.lists(st.sampled_from(["token5", "token50", "token512", "other", "token5 token50"]), max_size=12),
)
def test_exact_first_is_a_permutation_that_keeps_unrelated_places(words: list[str]) -> None:
    ids = list(range(1, len(words) + 1))
    texts = dict(zip(ids, words, strict=True))
    rules = [ExactRule(("token5",), ("token5",))]
    out = exact_first(ids, texts, rules)
    assert sorted(out) == ids
    for position, chunk_id in enumerate(ids):
        if texts[chunk_id] == "other":
            assert out[position] == chunk_id
    exact = [("token5" in texts[c].split()) for c in out if texts[c] != "other"]
    assert exact == sorted(exact, reverse=True)  # every exact chunk before every prefix-only one


# ---- the engine over a real index -------------------------------------------------------------


def index(tmp_path: Path, files: dict[str, str | bytes], db_url: str | None, extra: str = "") -> tuple[Store, Config]:
    notes = tmp_path / "notes"
    write_tree(notes, files)
    config_file = tmp_path / "notes-search.yaml"
    db_line = f'db: "{db_url}"\n' if db_url else ""
    config_file.write_text(
        f"root: {tmp_path}\n{db_line}{FAKE_EMBEDDING}{extra}sources:\n  workspace:\n    notes:\n"
        f"      root: {notes}\n      paths: ['**']\n",
        encoding="utf-8",
    )
    config = load_config(config_file)
    embedder = FakeEmbedder(config.embedding)
    assert run_sync(config, embedder_factory=lambda: embedder).pending == 0
    return open_index(config, readonly=True), config


def run_query(
    tmp_path: Path, files: dict[str, str | bytes], db_url: str | None, **kwargs: object
) -> Callable[..., SearchResponse]:
    store, config = index(tmp_path, files, db_url)

    def query(text: str, **more: object) -> SearchResponse:
        args = {**kwargs, **more}
        return search(store, config, text, embedder_factory=lambda: FakeEmbedder(config.embedding), **args)  # type: ignore[arg-type]

    return query


TOKENS: dict[str, str | bytes] = {f"t/n{n:03d}.md": f"# Note {n}\n\nvalue token{n}\n" for n in range(240)}
TOKENS["t/n005.md"] = "# Note 5\n\nvalue token5, written down with a few more words\n"  # longer: BM25 put it 11th


@pytest.mark.parametrize("mode", ["lex", "hybrid"])
def test_the_note_with_the_exact_token_ranks_first(tmp_path: Path, mode: str, db_url: str | None) -> None:
    """240 notes `token<N>`: BM25 scored token50..token59 like token5 and preferred them, shorter."""
    query = run_query(tmp_path, TOKENS, db_url)
    response = query("token5", mode=mode, k=12)
    assert response.results[0].path == "t/n005.md"
    assert {h.path for h in response.results[1:11]} == {f"t/n{n:03d}.md" for n in range(50, 60)} or mode == "hybrid"


LONG_TICKET = (
    "# Sprint review\n\n"
    + "\n".join(f"Line {i}: discussed the release plan and the rollout of the new importer." for i in range(38))
    + "\nThe blocker is ticket PROJ-123 about the login timeout.\n"
)
TICKETS = {"long.md": LONG_TICKET} | {f"short{n}.md": f"# T{n}\n\nPROJ-123{n}\n" for n in range(1, 13)}


@pytest.mark.parametrize("mode", ["lex", "hybrid"])
def test_a_long_note_with_the_exact_ticket_beats_short_notes_with_longer_ids(
    tmp_path: Path, mode: str, db_url: str | None
) -> None:
    """A 40-line note holding PROJ-123 against twelve short notes PROJ-1231..PROJ-12312 (it came 13th of 13)."""
    response = run_query(tmp_path, TICKETS, db_url)("PROJ-123", mode=mode, k=13)
    assert response.results[0].path == "long.md"
    assert len(response.results) == 13


def test_the_exact_note_is_found_beyond_the_candidate_depth(tmp_path: Path, db_url: str | None) -> None:
    """k=1 takes 50 candidates; 120 short notes starting with token5 outrank the long exact one by
    BM25, so only the second, star-less query brings it in."""
    files: dict[str, str | bytes] = {f"p/n{n}.md": f"# P{n}\n\ntoken5{n}\n" for n in range(120)}
    files["exact.md"] = LONG_TICKET.replace("PROJ-123", "token5")
    query = run_query(tmp_path, files, db_url)
    assert len(query("token5", mode="lex", k=60).results) == 60
    assert query("token5", mode="lex", k=1).results[0].path == "exact.md"
    assert query("token5", mode="hybrid", k=1).results[0].path == "exact.md"


NOTES = {
    "devops/backup.md": "# Backup\n\nrestic backup every night\n\n## Restore\n\nrestic restore takes 20 minutes\n\n"
    "## Check\n\nrestic check weekly\n",
    "devops/other.md": "# Other\n\nrestic is also used here\n",
    "cooking/bread.md": "# Bread\n\nsourdough starter flour water\n",
    "cooking/soup.md": "# Soup\n\nborsch with beets\n",
}


def test_each_hit_says_how_it_matched(tmp_path: Path, db_url: str | None) -> None:
    query = run_query(tmp_path, NOTES, db_url)
    assert {h.matched for h in query("restic", mode="lex").results} == {"keyword"}
    assert {h.matched for h in query("restic", mode="vec").results} == {"meaning"}
    hybrid = query("restic", mode="hybrid").results
    assert {h.matched for h in hybrid} == {"both", "meaning"}
    assert all(h.matched == "both" for h in hybrid if "restic" in h.text)
    assert hybrid[0].to_json()["matched"] == "both"


def test_a_keyword_miss_is_said_in_the_notice(tmp_path: Path, db_url: str | None) -> None:
    query = run_query(tmp_path, NOTES, db_url)
    missed = query("xyzzynotfound", mode="hybrid")
    assert missed.results and {h.matched for h in missed.results} == {"meaning"}
    assert missed.notice is not None and "no keyword match" in missed.notice and not missed.degraded
    assert query("restic", mode="hybrid").notice is None
    assert query("🙂", mode="hybrid").notice == "the query has no searchable words: every hit matches by meaning only"
    # no hits at all (the floor dropped every meaning hit): the notice speaks of none
    assert query("xyzzynotfound", mode="hybrid", min_similarity=1.0).notice == "no keyword match"
    assert query("🙂", mode="hybrid", min_similarity=1.0).notice == "the query has no searchable words"


def test_min_similarity_drops_only_weak_meaning_hits(tmp_path: Path, db_url: str | None) -> None:
    query = run_query(tmp_path, NOTES, db_url)
    loose = query("restic", mode="hybrid", k=20)
    similarities = {h.path: h.explain["similarity"] for h in loose.results if h.matched == "meaning"}
    assert similarities
    floor = max(similarities.values()) + 0.001  # above every meaning-only hit
    strict = query("restic", mode="hybrid", k=20, min_similarity=floor)
    assert {h.matched for h in strict.results} == {"both"}
    assert [h.path for h in strict.results] == [h.path for h in loose.results if h.matched == "both"]
    assert query("restic", mode="lex", min_similarity=1.0).results  # keyword hits are never dropped
    assert not query("xyzzynotfound", mode="hybrid", min_similarity=1.0).results
    with pytest.raises(NotesSearchError, match="min_similarity"):
        query("restic", min_similarity=1.5)


def test_per_file_caps_hits_per_note_and_keeps_k(tmp_path: Path, db_url: str | None) -> None:
    """60 strong parts of one note fill the 50 candidates k=4 takes: the cap must search deeper."""
    filler = "plain words about something else entirely " * 22  # ~900 characters: one chunk per part
    files: dict[str, str | bytes] = {
        "crowd.md": "".join(f"## Part {i}\n\n{'restic ' * 30}{filler}\n\n" for i in range(60))
    }
    files |= {f"single{n}.md": f"# Single {n}\n\nrestic {filler}\n" for n in range(3)}
    query = run_query(tmp_path, files, db_url)
    flat = query("restic", mode="lex", k=4)
    assert {h.path for h in flat.results} == {"crowd.md"}
    capped = query("restic", mode="lex", k=4, per_file=1)
    assert sorted(h.path for h in capped.results) == ["crowd.md", "single0.md", "single1.md", "single2.md"]
    two = query("restic", mode="hybrid", k=5, per_file=2)
    assert len(two.results) == 5 and sum(h.path == "crowd.md" for h in two.results) == 2
    with pytest.raises(NotesSearchError, match="per_file"):
        query("restic", per_file=0)


# ---- the fusion constant ------------------------------------------------------------------------


def test_rrf_k_comes_from_the_config(tmp_path: Path, db_url: str | None) -> None:
    store, config = index(tmp_path, NOTES, db_url, extra="search:\n  rrf_k: 10\n")
    assert config.search.rrf_k == 10
    response = search(store, config, "restic", mode="lex", embedder_factory=FakeEmbedder)
    assert response.results[0].score == round(1 / 11, 6)
    assert parse_config("sources: {}\n").search.rrf_k == 60


@pytest.mark.parametrize(
    ("block", "needle"),
    [
        ("search:\n  rrf_k: 0\n", "search.rrf_k: expected an integer from 1 to 100000, got 0"),
        ("search:\n  rrf_k: ten\n", "search.rrf_k: expected an integer"),
        ("search:\n  rrf_k: 1.5\n", "search.rrf_k: expected an integer"),
        ("search:\n  rrf: 60\n", "search.rrf: unknown key (allowed: rrf_k)"),
        ("search: 60\n", "search: expected a mapping"),
    ],
)
def test_bad_rrf_k_is_a_one_line_error(tmp_path: Path, block: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_config(block, file="cfg.yaml")
    config = tmp_path / "notes-search.yaml"
    config.write_text(f"root: {tmp_path}\n{block}", encoding="utf-8")
    result = CliRunner().invoke(cli_module.cli, ["--config", str(config), "query", "x"])
    assert_one_line_error(result, "search")


# ---- front ends ---------------------------------------------------------------------------------


@pytest.fixture
def cli_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str | None) -> Callable[..., Result]:
    monkeypatch.setattr(cli_module, "make_embedder", FakeEmbedder)
    files: dict[str, str | bytes] = dict(NOTES) | {
        f"many{n}.md": "".join(f"## Part {i}\n\nrestic note {n} part {i}\n\n" for i in range(10)) for n in range(3)
    }
    index(tmp_path, files, db_url)[0].close()
    config_file = tmp_path / "notes-search.yaml"

    def run(*args: str) -> Result:
        return CliRunner().invoke(cli_module.cli, ["--config", str(config_file), *args])

    return run


def test_cli_per_file_min_similarity_and_matched(cli_run: Callable[..., Result]) -> None:
    result = cli_run("query", "restic", "--mode", "lex", "-k", "5", "--per-file", "1", "--json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["results"]
    assert len(hits) == 5 and len({h["path"] for h in hits}) == 5
    assert {h["matched"] for h in hits} == {"keyword"}
    human = cli_run("query", "restic", "--mode", "lex", "-k", "2")
    assert human.exit_code == 0 and "keyword" in human.stdout
    strict = cli_run("query", "xyzzynotfound", "--min-similarity", "1", "--json")
    assert strict.exit_code == 1 and json.loads(strict.stdout)["results"] == []  # nothing matched: 1, as grep
    for bad in (["--per-file", "0"], ["--min-similarity", "2"]):
        assert cli_run("query", "restic", *bad).exit_code == 2


def test_mcp_search_takes_per_file_and_min_similarity(tmp_path: Path, db_url: str | None) -> None:
    from tests.embed_servers import OllamaServer
    from tests.test_mcp import call, make_workspace, over_stdio

    server = OllamaServer({"fake-embed:latest": 64})
    try:
        workspace = make_workspace(tmp_path, server, db_url)

        async def body(session: ClientSession) -> None:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert {"per_file", "min_similarity"} <= set(tools["search"].input_schema["properties"])
            capped = await call(session, "search", query="restic záloha", k=5, per_file=1)
            assert len(capped["results"]) == 5 and len({h["path"] for h in capped["results"]}) == 5
            assert {h["matched"] for h in capped["results"]} <= {"keyword", "meaning", "both"}
            missed = await call(session, "search", query="xyzzynotfound")
            assert "no keyword match" in missed["notice"]
            assert {h["matched"] for h in missed["results"]} == {"meaning"}
            floor = await call(session, "search", query="xyzzynotfound", min_similarity=1.0)
            assert floor["results"] == []
            bad = await session.call_tool("search", {"query": "x", "per_file": 0})  # the SDK's schema check
            assert bad.is_error and "per_file" in bad.content[0].text  # type: ignore[union-attr]

        over_stdio(workspace, body, tmp_path / "server.log")
    finally:
        server.stop()
