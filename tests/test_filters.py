"""--tag / --since / --until end to end: the moments a value names (pure functions), the label
and errors of a filtered target, the CLI on a workspace (front-matter tags, file mtimes) and on
a git source (commit times), and exact top-k inside a 1 % filter of a large index in every mode.
The MCP tool's arguments are tested through the real client in test_mcp.py's way."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mcp import ClientSession

from indexer.config import Config, load_config
from indexer.errors import NotesSearchError
from indexer.store import SearchScope, tag_key
from indexer.sync import SyncReport, run_sync
from search import cli as cli_module
from search.service.dates import BadMoment, parse_moment
from search.service.scope import MAX_TAGS, Filters, Target, with_filters
from tests.conftest import FAKE_EMBEDDING, assert_one_line_error, make_config, open_index, write
from tests.fakes import FakeEmbedder
from tests.gitutil import commit, init_upstream
from tests.test_mcp import call, make_workspace, ollama, over_stdio, refused  # noqa: F401 - ollama: a fixture

PRAGUE = ZoneInfo("Europe/Prague")


@pytest.fixture
def prague(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is Europe/Prague (CET/CEST) for the test: dates without an offset are local."""
    monkeypatch.setenv("TZ", "Europe/Prague")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def local(*parts: int) -> float:
    return datetime(*parts, tzinfo=PRAGUE).timestamp()  # type: ignore[misc]


# ---- what a value names (pure) -----------------------------------------------------------------

NOW = local(2026, 11, 24, 15, 45, 30)


@pytest.mark.parametrize(
    ("text", "since", "until"),
    [
        ("2026-11-24", local(2026, 11, 24), local(2026, 11, 25)),
        ("2026-11", local(2026, 11, 1), local(2026, 12, 1)),
        ("2026-12", local(2026, 12, 1), local(2027, 1, 1)),
        ("2026-11-24T09:30", local(2026, 11, 24, 9, 30), local(2026, 11, 24, 9, 31)),
        ("2026-11-24 09:30:15", local(2026, 11, 24, 9, 30, 15), local(2026, 11, 24, 9, 30, 16)),
        ("2026-11-24T09", local(2026, 11, 24, 9), local(2026, 11, 24, 10)),
        ("2026-11-24T09:30Z", datetime(2026, 11, 24, 9, 30, tzinfo=UTC).timestamp(), None),
        ("2026-11-24T09:30:00+05:00", datetime(2026, 11, 24, 4, 30, tzinfo=UTC).timestamp(), None),
        ("today", local(2026, 11, 24), local(2026, 11, 25)),
        ("Yesterday", local(2026, 11, 23), local(2026, 11, 24)),
        ("36h", NOW - 36 * 3600, NOW - 36 * 3600),
        ("7d", NOW - 7 * 86400, NOW - 7 * 86400),
        ("7 days ago", NOW - 7 * 86400, NOW - 7 * 86400),
        ("2W", NOW - 14 * 86400, NOW - 14 * 86400),
        ("3m", local(2026, 8, 24, 15, 45, 30), local(2026, 8, 24, 15, 45, 30)),  # calendar months, CEST then
        ("1y", local(2025, 11, 24, 15, 45, 30), None),
        ("0d", NOW, NOW),
    ],
)
def test_each_form_names_its_moment(prague: None, text: str, since: float, until: float | None) -> None:
    assert parse_moment(text, until=False, now=NOW) == pytest.approx(since)
    if until is not None:
        assert parse_moment(text, until=True, now=NOW) == pytest.approx(until)


def test_a_month_back_from_a_long_month_lands_on_the_last_day_of_a_short_one(prague: None) -> None:
    assert parse_moment("3m", until=False, now=local(2026, 5, 31, 12)) == local(2026, 2, 28, 12)
    assert parse_moment("1y", until=False, now=local(2028, 2, 29, 12)) == local(2027, 2, 28, 12)


def test_a_day_is_local_even_when_it_is_23_hours_long(prague: None) -> None:
    since = parse_moment("2026-03-29", until=False, now=NOW)  # clocks go forward that night
    assert parse_moment("2026-03-29", until=True, now=NOW) - since == 23 * 3600


@pytest.mark.parametrize(
    "text", ["", "   ", "7x", "soon", "-7d", "1234567d", "2026-13-01", "2026-02-30", "2026-00", "24.11.2026", "999999y"]
)
def test_bad_values_are_refused_with_the_reason(text: str) -> None:
    for until in (False, True):
        with pytest.raises(BadMoment) as caught:
            parse_moment(text, until=until, now=NOW)
        assert str(caught.value) and "\n" not in str(caught.value)


NEAR_MOMENTS = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"\A\s?[0-9]{1,8}\s?(h|d|w|m|y|mo|days?|weeks?|years?|x)?(\s+ago)?\Z"),
    st.from_regex(
        r"\A[0-9]{4}-[0-9]{1,2}(-[0-9]{1,2})?([T ][0-9]{1,2}(:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?)?(Z|[+-][0-9]{2}:?[0-9]{2})?\Z"
    ),
)


def moment_or_none(text: str, until: bool) -> float | None:
    try:
        return parse_moment(text, until=until, now=NOW)
    except BadMoment as exc:
        assert str(exc) and "\n" not in str(exc)
        return None


@given(text=NEAR_MOMENTS)
@example(text="9999-12-31")
@example(text="0001-01-01")
@example(text="0001-01-01T00:00")
@example(text="9999-12")
@settings(max_examples=300, deadline=None, database=None, derandomize=True)
def test_any_text_is_a_moment_or_a_bad_moment(text: str) -> None:
    """Never another exception (the calendar's OverflowError or ValueError at year 1 or 9999),
    and the `until` reading of a value never ends before its `since` reading starts."""
    since, until = moment_or_none(text, until=False), moment_or_none(text, until=True)
    if since is not None and until is not None:
        assert math.isfinite(since) and math.isfinite(until) and until >= since


@given(tag=st.text(max_size=12))
@settings(max_examples=300, deadline=None, database=None, derandomize=True)
def test_a_tag_key_is_its_own_key(tag: str) -> None:
    key = tag_key(tag)
    assert tag_key(key) == key and not key.startswith("#") and key == key.strip()


# ---- a filtered target -------------------------------------------------------------------------


def test_the_label_says_what_was_filtered_and_tags_are_keys(prague: None) -> None:
    base = Target(SearchScope(source_ids=("notes",)), "source notes")
    target = with_filters(base, Filters(("#DevOps", "devops", "Linux"), "2026-11-01", "7d"), now=NOW)
    assert target.scope.tags == ("devops", "linux") and target.scope.source_ids == ("notes",)
    assert (target.scope.updated_since, target.scope.updated_before) == (local(2026, 11, 1), NOW - 7 * 86400)
    assert target.label == "source notes (tag devops, tag linux, since 2026-11-01, until 7d (2026-11-17 15:45))"
    assert with_filters(base, Filters(), now=NOW) is base


@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        (Filters(tags=("#",)), "tag '#' is empty"),
        (Filters(since="whenever"), "since 'whenever': not a date"),
        (Filters(until="2026-02-30"), "until '2026-02-30': not a calendar date"),
        (Filters(since="2026-11-24", until="2026-11-23"), "is not before until"),
    ],
)
def test_bad_filters_are_one_line_errors_naming_the_argument(filters: Filters, needle: str) -> None:
    with pytest.raises(NotesSearchError, match=needle):
        with_filters(Target(SearchScope(), "all sources", is_all=True), filters, now=NOW)


# ---- the CLI on a workspace --------------------------------------------------------------------


def tagged(title: str, tags: str, body: str) -> str:
    return f"---\ntags: {tags}\n---\n# {title}\n\n{body}\n"


NOTES = {
    "ops/_meta.yaml": "name: ops\ndescription: servers\n",
    "ops/backup.md": tagged("Backup", "[DevOps, linux]", "restic backup of the home server every night"),
    "ops/dns.md": tagged("DNS", "devops", "unbound resolver on the home server"),
    "ops/old.md": tagged("Old", "[devops, linux]", "an old server backup plan"),
    "home/garden.md": tagged("Garden", "[garden, '#Linux']", "the server in the shed waters the garden"),
    "home/reunion.md": tagged("Reunion", "[Re\u0301union]", "family server reunion plans"),  # decomposed é
    "home/plain.md": "# Plain\n\nno tags, a server all the same\n",
}
# local times of the files' last change
MTIMES = {
    "ops/backup.md": (2026, 11, 24, 23, 59),
    "ops/dns.md": (2026, 11, 25, 0, 0),
    "ops/old.md": (2025, 1, 10, 12, 0),
    "home/garden.md": (2026, 11, 24, 0, 0),
    "home/reunion.md": (2026, 11, 20, 8, 0),
    "home/plain.md": (2026, 11, 24, 12, 0),
}


@pytest.fixture
def cli(tmp_path: Path, prague: None, monkeypatch: pytest.MonkeyPatch, db_url: str | None) -> Callable[..., Result]:
    root = tmp_path / "notes"
    write(root, NOTES)
    for name, parts in MTIMES.items():
        os.utime(root / name, (local(*parts), local(*parts)))
    config = make_config(tmp_path, root, db=db_url)
    monkeypatch.setattr(cli_module, "make_embedder", lambda cfg: FakeEmbedder(cfg))

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli_module.cli, ["--config", str(config), *args])

    assert invoke("sync").exit_code == 0
    return invoke


def found(result: Result) -> list[str]:
    hits = json.loads(result.stdout)["results"]
    assert result.exit_code == (0 if hits else 1), result.output  # as grep: 1 when nothing matched
    return sorted({hit["path"] for hit in hits})


@pytest.mark.parametrize("mode", ["lex", "vec", "hybrid"])
def test_tags_narrow_each_mode(cli: Callable[..., Result], mode: str) -> None:
    def query(*flags: str) -> list[str]:
        return found(cli("query", "server", "--mode", mode, "--json", "-k", "20", *flags))

    assert query("--tag", "devops") == ["ops/backup.md", "ops/dns.md", "ops/old.md"]
    assert query("--tag", "#DEVOPS", "--tag", "linux") == ["ops/backup.md", "ops/old.md"]  # all of them
    assert query("--tag", "linux") == ["home/garden.md", "ops/backup.md", "ops/old.md"]  # '#Linux' in front matter
    assert query("--tag", "RÉUNION") == ["home/reunion.md"]  # composed é finds the decomposed tag
    assert query("--tag", "linux", "--path", "home") == ["home/garden.md"]
    assert query("--tag", "linux", "--collection", "ops", "--source", "notes") == ["ops/backup.md", "ops/old.md"]


def test_until_a_date_includes_that_whole_day_in_local_time(cli: Callable[..., Result]) -> None:
    def query(*flags: str) -> list[str]:
        return found(cli("query", "server", "--mode", "lex", "--json", "-k", "20", *flags))

    day = ["home/garden.md", "home/plain.md", "ops/backup.md"]  # 00:00, 12:00 and 23:59 on the 24th
    assert query("--since", "2026-11-24", "--until", "2026-11-24") == day
    assert query("--since", "2026-11-24") == [*day[:2], "ops/backup.md", "ops/dns.md"]
    assert query("--until", "2026-11-23") == ["home/reunion.md", "ops/old.md"]
    assert query("--since", "2026-11-24T12:00", "--until", "2026-11-24T23:59") == ["home/plain.md", "ops/backup.md"]
    assert query("--since", "2026-11-01", "--tag", "devops", "--path", "ops") == ["ops/backup.md", "ops/dns.md"]
    assert query("--since", "2020-01-01T00:00Z", "--until", "2025-12") == ["ops/old.md"]


def test_bad_flags_are_usage_errors_and_an_unknown_tag_says_so(cli: Callable[..., Result]) -> None:
    for flag, value in (("--since", "last week"), ("--until", "2026-02-30")):
        result = cli("query", "server", flag, value)
        assert result.exit_code == 2 and f"Invalid value for '{flag}'" in result.output, result.output
    assert_one_line_error(cli("query", "server", "--since", "2026-11-25", "--until", "2026-11-24"), "not before")
    for value in ("nan", "-nan", "NaN"):  # passes every range check (each comparison is false)
        result = cli("query", "server", "--min-similarity", value)
        assert result.exit_code == 2 and "Invalid value for '--min-similarity'" in result.output, result.output
    for value in ("##", "", " "):  # a tag that folds to nothing names the flag, as a bad date does
        result = cli("query", "server", "--tag", value)
        assert result.exit_code == 2 and "Invalid value for '--tag'" in result.output, result.output
    result = cli("query", "server", "--tag", "devops", "--tag", "nosuchtag", "--json")
    assert json.loads(result.stdout)["results"] == []
    assert "no indexed file has the tag 'nosuchtag'" in json.loads(result.stdout)["notice"]
    # filters that leave no file say so, in every mode: the words were never the problem
    for mode in ("lex", "hybrid"):
        empty = json.loads(cli("query", "server", "--until", "2000-01-01", "--mode", mode, "--json").stdout)
        assert empty["results"] == [] and "no indexed file passes the filters: all sources (until" in empty["notice"]
    words = json.loads(cli("query", "xyzzynotfound", "--tag", "devops", "--mode", "lex", "--json").stdout)
    assert words["results"] == [] and words["notice"] is None  # files pass; the words matched none


def test_more_tags_than_a_note_carries_are_one_line_not_a_traceback(cli: Callable[..., Result]) -> None:
    """500 --tag flags became 500 SQL conditions, which SQLite refused with a traceback
    ("Expression tree is too large"); now one line. Up to MAX_TAGS still search, and a tag
    repeated counts once."""
    many = [arg for i in range(500) for arg in ("--tag", f"t{i}")]
    for mode in ("lex", "hybrid"):
        assert_one_line_error(cli("query", "server", "--mode", mode, *many), f"500 tags given: at most {MAX_TAGS}")
    most = [arg for i in range(MAX_TAGS - 1) for arg in ("--tag", f"t{i}")]
    result = cli("query", "server", "--tag", "devops", *most, "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["results"] == [], result.output
    notice = json.loads(result.stdout)["notice"]
    assert notice.count("no indexed file has the tags 't0', 't1', ") == 1 and f"'t{MAX_TAGS - 2}'" in notice
    repeated = ["--tag", "devops"] * 500
    assert found(cli("query", "server", "--mode", "lex", "--json", *repeated)) == [
        "ops/backup.md",
        "ops/dns.md",
        "ops/old.md",
    ]


def test_a_recent_relative_filter_keeps_what_was_just_written(cli: Callable[..., Result], tmp_path: Path) -> None:
    note = tmp_path / "notes" / "home" / "fresh.md"
    note.write_text("# Fresh\n\nthe server got a new disk\n", encoding="utf-8")
    assert cli("sync").exit_code == 0
    assert found(cli("query", "server", "--mode", "lex", "--json", "--since", "1h")) == ["home/fresh.md"]
    assert "home/fresh.md" not in found(cli("query", "server", "--mode", "lex", "--json", "-k", "20", "--until", "1h"))


def test_a_touch_that_keeps_the_text_is_no_change(cli: Callable[..., Result], tmp_path: Path) -> None:
    note = tmp_path / "notes" / "home" / "kept.md"
    note.write_text("# Kept\n\nthe zorbserver got a new disk\n", encoding="utf-8")
    old = local(2020, 5, 1, 12)
    os.utime(note, (old, old))
    assert cli("sync").exit_code == 0
    os.utime(note, None)  # now, the same text: as a backup restore or an editor's save without edits
    assert cli("sync").exit_code == 0

    def query(*flags: str) -> list[str]:
        return found(cli("query", "zorbserver", "--mode", "lex", "--json", *flags))

    assert query("--since", "1h") == [] and query("--until", "2020-05-01") == ["home/kept.md"]
    note.write_text("# Kept\n\nthe zorbserver got a second disk\n", encoding="utf-8")
    assert cli("sync").exit_code == 0
    assert query("--since", "1h") == ["home/kept.md"]


# ---- a git source: the commit time of each file's last change ---------------------------------

T1 = int(local(2026, 10, 1, 10))
T2 = int(local(2026, 11, 20, 10))
T3 = int(local(2026, 11, 24, 10))


def test_git_files_carry_the_time_of_the_commit_that_last_changed_them(
    tmp_path: Path, prague: None, monkeypatch: pytest.MonkeyPatch, db_url: str | None
) -> None:
    upstream = init_upstream(tmp_path / "upstream")
    commit(
        upstream, {"a.md": "# A\n\nserver one\n", "b.md": "# B\n\nserver two\n", "c.md": "# C\n\nserver 3\n"}, time=T1
    )
    commit(upstream, {"b.md": "# B\n\nserver two, changed\n"}, time=T2)
    commit(upstream, {"c.md": "# C\n\nserver three\n", "d.md": "# D\n\nserver four\n"}, time=T3)
    commit(upstream, {"c.md": "# C\n\nserver 3\n"}, time=T3 + 3600)  # back to the content of T1
    config = tmp_path / "notes-search.yaml"
    sources = {"git": {"repo": {"url": str(upstream.workdir).rstrip("/")}}}
    raw = {"root": str(tmp_path), "sources": sources} | ({"db": db_url} if db_url else {})
    config.write_text(yaml.safe_dump(raw) + FAKE_EMBEDDING, encoding="utf-8")
    monkeypatch.setattr(cli_module, "make_embedder", lambda cfg: FakeEmbedder(cfg))

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli_module.cli, ["--config", str(config), *args])

    assert invoke("sync").exit_code == 0
    with closing(open_index(load_config(config), readonly=True)) as store:
        times = {row.path: row.updated_at for row in store.file_rows()}
    # the commit that gave each file its indexed content: c.md's last commit restored old text
    assert times == {"a.md": T1, "b.md": T2, "c.md": T3 + 3600, "d.md": T3}

    def query(*flags: str) -> list[str]:
        return found(invoke("query", "server", "--mode", "lex", "--json", "-k", "20", *flags))

    assert query("--since", "2026-11-24") == ["c.md", "d.md"]
    assert query("--since", "2026-11-01", "--until", "2026-11-23") == ["b.md"]
    assert query("--until", "2026-10-01") == ["a.md"]
    assert query("--since", "2026-11-24T10:30", "--source", "repo") == ["c.md"]


# ---- exact top-k inside a 1 % filter of a large index -----------------------------------------

FILES = 2000
RARE = range(0, FILES, 100)  # 20 files: 1 %
LARGE_BASE = local(2026, 1, 1, 12)


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory, module_db_url: str | None) -> tuple[Config, FakeEmbedder]:
    """2,000 notes; the 1 % in folder rare/ are the only ones tagged `rare` and the only ones
    changed in July, so a tag or time filter must answer exactly as the folder scope does."""
    tmp_path = tmp_path_factory.mktemp("large")
    root = tmp_path / "notes"
    words = ["server", "backup", "disk", "garden", "recipe", "network", "travel", "python", "camera", "train"]
    rng = np.random.default_rng(5)
    files: dict[str, str] = {}
    for i in range(FILES):
        folder = "rare" if i in RARE else f"f{i % 10}"
        tags = "[rare, common]" if i in RARE else "[common]"
        files[f"{folder}/n{i}.md"] = tagged(f"Note {i}", tags, " ".join(rng.choice(words, 12)))
    write(root, files)
    for name in files:
        moment = local(2026, 7, 15, 12) if name.startswith("rare/") else LARGE_BASE  # noon: the same day in any zone
        os.utime(root / name, (moment, moment))
    config = load_config(make_config(tmp_path, root, db=module_db_url))
    embedder = FakeEmbedder(config.embedding)
    report: SyncReport = run_sync(config, embedder_factory=lambda: embedder)
    assert report.pending == 0
    return config, embedder


def brute_force_similarity(config: Config, embedder: FakeEmbedder, query: str) -> dict[tuple[str, int], float]:
    """Each chunk of rare/ (path, line) with its cosine similarity to the query, from every
    stored vector, computed here."""
    with closing(open_index(config, readonly=True)) as store:
        vectors = store.all_vectors()
        rows = store.chunk_rows(vectors.ids.tolist())
    similarity = vectors.matrix @ embedder.embed_query(query)
    return {
        (row.path, row.start_line): float(value)
        for chunk_id, value in zip(vectors.ids, similarity, strict=True)
        if (row := rows[int(chunk_id)]).path.startswith("rare/")
    }


@pytest.mark.parametrize("mode", ["lex", "vec", "hybrid"])
@pytest.mark.parametrize("resident", [False, True])
def test_a_one_percent_filter_answers_exactly_as_its_folder_scope(
    large: tuple[Config, FakeEmbedder], mode: str, resident: bool
) -> None:
    """The same top-k as the (exact) folder scope, by tag and by time, whether or not the
    resident vectors are on (they answer unscoped searches only); the vector half also equals a
    brute-force top-k over every stored vector."""
    from search.service import NotesService

    config, embedder = large
    service = NotesService(config, embedder_factory=lambda _: embedder)
    if resident and service.keeps_vectors_in_memory:  # loaded now, so that the searches below could use it
        service.warm_up()
        assert service.resident_vectors().wait(30)
    folder = service.scope_from_options((), None, "rare")
    for query in ("server backup disk", "garden recipe", "python network camera train"):

        def hits(target: Target, k: int = 10, query: str = query) -> list[tuple[str, int, float]]:
            outcome = service.search(query, target=target, k=k, mode=mode, resident=resident)
            return [(hit.path, hit.line, hit.score) for hit in outcome.response.results]

        expected = hits(folder)
        assert len(expected) == 10 and all(path.startswith("rare/") for path, _, _ in expected)
        by_tag = service.scope_from_options((), None, None, filters=Filters(tags=("RARE",)))
        by_time = service.scope_from_options((), None, None, filters=Filters(since="2026-07-15", until="2026-07-15"))
        both = service.scope_from_options(("notes",), None, None, filters=Filters(("common", "rare"), "2026-06"))
        for target in (by_tag, by_time, both):
            assert hits(target) == expected, target.label
        if mode == "vec":
            # the exact top 15: rank by rank the similarities of the brute-force top 15 (notes
            # equally near, to rounding, may come in either order: numpy and PostgreSQL round apart)
            similarity = brute_force_similarity(config, embedder, query)
            best = sorted(similarity.values(), reverse=True)[:15]
            got = [similarity[(path, line)] for path, line, _ in hits(by_tag, 15)]
            assert got == pytest.approx(best, abs=1e-6)


# ---- MCP: the search tool's arguments through the real client ---------------------------------


def test_mcp_search_takes_tags_since_and_until(tmp_path: Path, ollama: Any, db_url: str | None) -> None:
    config = make_workspace(tmp_path, ollama, db_url)

    async def body(session: ClientSession) -> None:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        properties = listed["search"].input_schema["properties"]
        assert {"tags", "since", "until"} <= set(properties)
        assert "all these tags" in properties["tags"]["description"] and "7d" in properties["since"]["description"]

        vpn = await call(session, "search", query="server network tunnel", tags=["#VPN"], k=5)
        assert vpn["scope"] == "all sources (tag vpn)"
        assert {hit["path"] for hit in vpn["results"]} == {"devops/wireguard.md"}
        scoped = await call(session, "search", query="server", path="devops", tags=["wireguard"], since="2000-01-01")
        assert scoped["scope"] == "collection devops (tag wireguard, since 2000-01-01)" and scoped["results"]
        old = await call(session, "search", query="server", until="2000-01-01", mode="lex")
        assert (
            old["results"] == []
            and "no indexed file passes the filters: all sources (until 2000-01-01)" in old["notice"]
        )
        one = await call(session, "search", query="server network tunnel", tags="vpn", k=5)  # a bare string
        assert one["scope"] == "all sources (tag vpn)" and one["results"] == vpn["results"]
        assert "since 'sometime'" in await refused(session, "search", query="x", since="sometime")
        assert (
            "no indexed file has the tag 'nosuch'"
            in (await call(session, "search", query="x", tags=["nosuch"]))["notice"]
        )

    over_stdio(config, body, tmp_path / "server.log")


def test_a_nested_tag_is_found_by_the_tags_it_is_nested_in(cli: Callable[..., Result], tmp_path: Path) -> None:
    """Obsidian's `#project/alpha` is also `#project` there: `--tag project` finds it; a part
    of a name is no tag (`proj`), nor is the nested part alone (`alpha`)."""
    note = tmp_path / "notes" / "work" / "alpha.md"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("---\ntags: [Project/Alpha/Backend]\n---\n# Alpha\n\nthe server of alpha\n", encoding="utf-8")
    assert cli("sync").exit_code == 0
    for tag in ("project", "#Project", "project/alpha", "project/alpha/backend"):
        assert found(cli("query", "server", "--mode", "lex", "--json", "--tag", tag)) == ["work/alpha.md"], tag
    for tag in ("proj", "alpha", "project/backend"):
        result = cli("query", "server", "--mode", "lex", "--json", "--tag", tag)
        assert result.exit_code == 1 and json.loads(result.stdout)["results"] == [], tag


def test_an_older_index_finds_nested_tags_after_the_chunker_upgrade(
    cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its `file_tags` lack the tags a nested one is nested in; the upgrade re-indexes every note."""
    import indexer.chunker
    import indexer.store.sqlite
    from indexer.store.postgres import tsvector

    note = tmp_path / "notes" / "work" / "alpha.md"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("---\ntags: [project/alpha]\n---\n# Alpha\n\nthe server of alpha\n", encoding="utf-8")
    with monkeypatch.context() as older:
        older.setattr(indexer.chunker, "CHUNKER_VERSION", "3")
        own_only = lambda tags: [tag_key(str(tag)) for tag in tags]  # noqa: E731
        older.setattr(indexer.store.sqlite, "file_tag_keys", own_only)
        older.setattr(tsvector, "file_tag_keys", own_only)
        assert cli("sync").exit_code == 0
        assert cli("query", "server", "--mode", "lex", "--json", "--tag", "project").exit_code == 1
    assert cli("sync").exit_code == 0
    assert found(cli("query", "server", "--mode", "lex", "--json", "--tag", "project")) == ["work/alpha.md"]


def test_a_deep_or_long_nested_tag_adds_few_rows() -> None:
    """A tag of 5,000 levels (10 KB of front matter) stored 5,000 ancestors of up to 10 KB each."""
    from indexer.store.schema import NESTED_TAG_CHARS, NESTED_TAG_LEVELS, file_tag_keys

    deep = "a/" * 20 + "x"
    assert file_tag_keys([deep]) == ["/".join(["a"] * n) for n in range(1, NESTED_TAG_LEVELS)] + [deep]
    huge = "a/" * 5000 + "x"
    assert file_tag_keys([huge]) == [huge] and len(huge) > NESTED_TAG_CHARS
    assert file_tag_keys(["Project / Alpha"]) == ["project", "project / alpha"]  # no blank kept at the end
