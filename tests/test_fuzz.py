"""Fuzzing with hypothesis, on a bounded budget (the whole file runs in well under 30 s).

* chunker: `parse_markdown` over markdown-hostile text (syntax characters, CR, NUL, BOM, deep
  nesting, long lines) keeps its invariants: exact line spans, consecutive idx, every non-blank
  line covered, one-line breadcrumbs / titles / headings / tags, bounded time;
* front matter: generated YAML data dumped as front matter (and then mangled) gives the fields
  the policy promises, or is read line by line when broken; never raises;
* query builder: `build_fts_query` over FTS5-hostile input is always accepted by FTS5, and the
  real engine against a real store answers every mode without an exception;
* references: `parse_ref` either parses or raises a one-line NotesSearchError; a parsed ref
  round-trips; `read_text` with generated paths never returns a byte from outside the source.

Examples are derandomized (the same each CI run); FUZZ_EXAMPLES=2000 FUZZ_RANDOM=1 explores more.

Rerun: .venv/bin/pytest tests/test_fuzz.py
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from indexer.chunker import parse_markdown
from indexer.config import Config, load_config
from indexer.errors import NotesSearchError
from indexer.model import ParsedDocument
from indexer.store import SearchScope, Store
from indexer.sync import run_sync
from search.engine import search
from tests.conftest import NOTES, make_config, open_index, write
from tests.fakes import FakeEmbedder
from tests.test_chunker import source_lines
from tests.test_crash_safety import TreeGuard
from tests.test_query_build import build_fts_query

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "120"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SECRET = "FUZZSECRET-51c2"

# ------------------------------------------------------------------------------------ chunker

MD_PIECES = [
    "#",
    "##",
    "###",
    "####",
    "# ",
    "## ",
    "### ",
    "- ",
    "* ",
    "+ ",
    "1. ",
    "> ",
    "```",
    "~~~",
    "    ",
    "\t",
    "|",
    "| a | b |",
    "|---|---|",
    "---",
    "===",
    "***",
    "___",
    "<div>",
    "</div>",
    "<!--",
    "-->",
    "[",
    "]",
    "(",
    ")",
    "!",
    "`",
    "\\",
    "\n",
    "\n\n",
    "\r\n",
    "\r",
    " ",
    "\x00",
    "\ufeff",
    "\u2028",
    "\u200b",
    "é",
    "ž",
    "я",
    "漢",
    "\U0001f600",
    "word",
    "záloha",
    "- [ ] task",
    "[link](http://x)",
    "&amp;",
    "&#0;",
    "\x0b",
    "\x0c",
]
markdownish = st.lists(st.one_of(st.sampled_from(MD_PIECES), st.text(max_size=8)), max_size=120).map("".join)
nested = st.builds(
    lambda marker, depth, tail: marker * depth + tail,
    st.sampled_from(["- ", "> ", "* ", "1. ", "  ", "[", "#", "`"]),
    st.integers(0, 3000),
    st.text(max_size=10),
)


def assert_chunk_invariants(doc: ParsedDocument, text: str, check_coverage: bool) -> None:
    lines = source_lines(text)
    assert [c.idx for c in doc.chunks] == list(range(len(doc.chunks)))
    covered: set[int] = set()
    previous = (0, 0)
    for chunk in doc.chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines), (chunk.start_line, chunk.end_line, len(lines))
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        assert (chunk.start_line, chunk.end_line) >= previous, "chunks go forward through the file"
        previous = (chunk.start_line, chunk.end_line)
        assert "\n" not in chunk.breadcrumb and chunk.breadcrumb.strip() == chunk.breadcrumb and chunk.breadcrumb
        assert chunk.embed_text.startswith(chunk.breadcrumb)
        covered.update(range(chunk.start_line - 1, chunk.end_line))
    if check_coverage:
        for number, line in enumerate(lines):
            if line.strip():
                assert number in covered, f"line {number + 1} {line!r} is in no chunk"
    assert isinstance(doc.title, str) and doc.title and "\n" not in doc.title
    assert all(isinstance(h, str) and h and "\n" not in h for h in doc.headings)
    assert all(isinstance(t, str) and t and "\n" not in t for t in doc.tags) and len(set(doc.tags)) == len(doc.tags)


def timed_parse(text: str, path: str = "fuzz/note.md") -> ParsedDocument:
    started = time.monotonic()
    doc = parse_markdown(text, path)
    assert time.monotonic() - started < 5, f"parse took {time.monotonic() - started:.1f} s for {len(text)} chars"
    return doc


@FUZZ
@given(text=st.one_of(markdownish, nested, st.text(max_size=400)))
def test_chunker_invariants_on_hostile_markdown(text: str) -> None:
    doc = timed_parse(text)
    assert_chunk_invariants(doc, text, check_coverage=not text.lstrip("\ufeff").startswith("---"))


@FUZZ
@given(blocks=st.lists(markdownish, min_size=1, max_size=6), big=st.integers(0, 20_000))
def test_chunker_invariants_with_oversized_sections(blocks: list[str], big: int) -> None:
    """Sections above the split limit exercise splitting and overlap on hostile content."""
    text = "\n\n".join(blocks) + "\n\n" + ("filler words here " * (big // 18)) + "\n" + "\n\n".join(blocks)
    doc = timed_parse(text)
    assert_chunk_invariants(doc, text, check_coverage=not text.lstrip("\ufeff").startswith("---"))


# ------------------------------------------------------------------------------- front matter

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.dates(),
    st.sampled_from(["", " ", "yes", "no", "~", "null", "2024-13-45", "0x1F", "1e3"]),
)
yaml_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
front_matter_data = st.fixed_dictionaries(
    {},
    optional={"title": yaml_values, "tags": yaml_values, "id": yaml_values, "updated": yaml_values},
).flatmap(lambda d: st.dictionaries(st.text(max_size=8), yaml_values, max_size=3).map(lambda extra: {**extra, **d}))


def expected_one_line(value: object) -> str | None:
    """The chunker's promise for title/id/updated: scalars as one line of text, else nothing."""
    if hasattr(value, "isoformat"):
        value = value.isoformat()  # type: ignore[union-attr] - dates are kept as written
    if isinstance(value, float) and not math.isfinite(value):
        return None  # yaml writes .nan/.inf; what str() of the loaded float gives is not asserted
    if isinstance(value, (str, int, float)):
        return " ".join(str(value).split()) or None
    return None


@FUZZ
@given(data=front_matter_data, body=markdownish)
def test_generated_front_matter_gives_the_promised_fields(data: dict[str, Any], body: str) -> None:
    dumped = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    assume("\n---" not in "\n" + dumped and "\n..." not in "\n" + dumped)  # a line that would close the block early
    text = f"---\n{dumped}---\n# Fallback heading\n\nbody marker\n{body}"
    doc = timed_parse(text, "fm/note-file.md")
    lines = source_lines(text)
    front_lines = dumped.count("\n") + 2
    assert all(chunk.start_line > front_lines for chunk in doc.chunks), "front matter lines are metadata, not text"
    assert any("body marker" in chunk.text for chunk in doc.chunks)
    assert_chunk_invariants(doc, text, check_coverage=False)
    title = expected_one_line(data.get("title"))
    if title is not None:
        assert doc.title == title
    elif not (isinstance(data.get("title"), float) and not math.isfinite(data["title"])):
        assert doc.title == "Fallback heading"
    if isinstance(data.get("id"), str) and data["id"].strip():
        assert doc.doc_id == " ".join(data["id"].split())
    tags = data.get("tags")
    if isinstance(tags, list) and all(isinstance(t, str) and t.strip() for t in tags):
        assert doc.tags == list(dict.fromkeys(" ".join(t.split()) for t in tags))
    assert len(lines) >= front_lines


@FUZZ
@given(
    data=front_matter_data,
    cut=st.integers(0, 400),
    junk=st.sampled_from(["", ":", "- [", "{", "\t", "&a", "*b", "!!", "'", '"', "\x00", "%YAML 9"]),
)
def test_mangled_front_matter_never_raises_and_never_loses_text(data: dict[str, Any], cut: int, junk: str) -> None:
    dumped = yaml.safe_dump(data, allow_unicode=True)
    mangled = dumped[:cut] + junk + dumped[cut:]
    text = f"---\n{mangled}\n---\n# Heading\n\nbody marker\n"
    doc = timed_parse(text)
    assert any("body marker" in chunk.text for chunk in doc.chunks)
    assert_chunk_invariants(doc, text, check_coverage=False)


# ------------------------------------------------------------------------------- query building

FTS_PIECES = [
    '"',
    "'",
    "*",
    "^",
    ":",
    "(",
    ")",
    "-",
    "+",
    "NEAR",
    "NEAR(",
    "AND",
    "OR",
    "NOT",
    "breadcrumb:",
    "text:",
    "{",
    "}",
    ",",
    ".",
    "?",
    "!",
    "\\",
    "\x00",
    " ",
    "\t",
    "\n",
    "záloha",
    "db-01.lan",
    "10.0.0.1",
    "C++",
    "e-mail",
    "ERR_CONN_RESET",
    "ä",
    "ß",
    "İ",
    "ﬁ",
    "\u0301",
    "\u200d",
    "\U0001f4a9",
    "漢字",
    "5432",
]
fts_hostile = st.lists(st.one_of(st.sampled_from(FTS_PIECES), st.text(max_size=6)), max_size=40).map("".join)

_FTS = apsw.Connection(":memory:")
_FTS.execute("CREATE VIRTUAL TABLE t USING fts5(breadcrumb, text, tokenize='unicode61 remove_diacritics 2')")
_FTS.execute("INSERT INTO t VALUES ('Zálohování', 'záloha db-01.lan 10.0.0.1 ERR_CONN_RESET 5432 e-mail')")


@FUZZ
@given(text=st.one_of(fts_hostile, st.text(max_size=200)))
def test_built_query_is_always_valid_fts5(text: str) -> None:
    expr = build_fts_query(text)
    if expr is None:
        return  # nothing searchable (only punctuation, symbols, stopword-free emptiness)
    assert expr.count('"') % 2 == 0, "every term is quoted"
    _FTS.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank", (expr,)).fetchall()


@pytest.fixture(scope="module")
def real_store(
    tmp_path_factory: pytest.TempPathFactory, module_db_url: str | None
) -> Iterator[tuple[Config, Store, FakeEmbedder]]:
    base = tmp_path_factory.mktemp("fuzzstore")
    notes = base / "notes"
    write(notes, NOTES)
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"# Secret\n\n{SECRET}\n")
    os.symlink(outside / "secret.md", notes / "leak.md")
    os.symlink(outside, notes / "leakdir")
    guard = TreeGuard(notes, outside)
    config = load_config(make_config(base, notes, db=module_db_url))
    embedder = FakeEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config, readonly=True)
    yield config, store, embedder
    store.close()
    guard.check()


@FUZZ
@given(
    text=st.one_of(fts_hostile, st.text(max_size=120)),
    mode=st.sampled_from(["hybrid", "lex", "vec"]),
    k=st.integers(1, 60),
    path=st.sampled_from([None, "devops", "devops/postgres.md", "travel/", "nothing/here"]),
)
def test_engine_answers_any_query(
    real_store: tuple[Config, Store, FakeEmbedder], text: str, mode: str, k: int, path: str | None
) -> None:
    config, store, embedder = real_store
    response = search(
        store, config, text, k=k, mode=mode, scope=SearchScope(path=path), embedder_factory=lambda: embedder
    )
    assert len(response.results) <= k
    for hit in response.results:
        assert hit.source == "notes" and 1 <= hit.line <= hit.end_line
        assert SECRET not in hit.text
        if path:
            assert hit.path == path.strip("/") or hit.path.startswith(path.strip("/") + "/")


# ---------------------------------------------------------------------------------- references

REF_PIECES = [
    "notes",
    "other",
    ":",
    "/",
    "..",
    ".",
    "devops",
    "postgres.md",
    "zalohovani.md",
    "leak.md",
    "leakdir",
    "secret.md",
    "\\",
    "\x00",
    "C:",
    "~",
    "%2e%2e",
    "0",
    "1",
    "12",
    "-3",
    "99999999999999999999",
    " ",
    "\n",
    "é",
    "e\u0301",
    "*",
    "?",
]
ref_text = st.lists(st.one_of(st.sampled_from(REF_PIECES), st.text(max_size=4)), max_size=14).map("".join)


@FUZZ
@given(text=st.one_of(ref_text, st.text(max_size=60)))
def test_parse_ref_parses_or_says_why_in_one_line(text: str) -> None:
    from search.refs import Ref, parse_ref

    sources = {"notes", "other"}
    try:
        ref = parse_ref(text, sources)
    except NotesSearchError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert isinstance(ref, Ref)
    # a backslash inside a name is an ordinary POSIX character; a leading one would be Windows
    assert "\x00" not in ref.path and not ref.path.startswith(("/", "\\"))
    assert ref.source_id is None or ref.source_id in sources
    assert ref.line is None or ref.line >= 1
    assert ref.count is None or (ref.count >= 1 and ref.line is not None)
    spelled = (f"{ref.source_id}:" if ref.source_id else "") + ref.path
    spelled += f":{ref.line}" if ref.line is not None else ""
    spelled += f":{ref.count}" if ref.count is not None else ""
    assert parse_ref(spelled, sources) == ref, "a parsed reference spells back to itself"


path_text = st.lists(
    st.sampled_from(
        [
            "..",
            ".",
            "",
            "devops",
            "postgres.md",
            "leak.md",
            "leakdir",
            "secret.md",
            "outside",
            "notes",
            "\\",
            "%2e",
            "/",
            "travel",
            "kazan.md",
            "x",
        ]
    ),
    max_size=8,
).map("/".join)


@FUZZ
@given(path=st.one_of(path_text, ref_text))
def test_read_text_never_leaves_the_source(real_store: tuple[Config, Store, FakeEmbedder], path: str) -> None:
    from search.refs import confine, read_text

    config, store, _ = real_store
    root = os.path.realpath(config.sources["notes"].root)  # type: ignore[union-attr]
    try:
        rel = confine(config, "notes", path)
    except NotesSearchError:
        rel = None
    if rel is not None:
        assert ".." not in rel.split("/") and not rel.startswith("/")
        real = os.path.realpath(os.path.join(root, rel))
        assert real == root or real.startswith(root + os.sep)
    try:
        text = read_text(config, store, "notes", path)
    except NotesSearchError:
        return
    assert SECRET not in text
    assert rel, "only a file inside the source can be read"
    assert Path(root, rel).is_file()
