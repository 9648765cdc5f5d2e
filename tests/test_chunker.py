"""Chunker policy: spans, breadcrumbs, merge/split rules, and robustness on odd input."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from indexer import chunker
from indexer.chunker import CHUNKER_VERSION, parse_markdown
from indexer.model import Chunk, ParsedDocument

ATOMIC_TOKEN_TYPES = {"fence", "code_block", "html_block", "table_open"}
DEFAULT_LIMITS = {
    "MIN_CHUNK_TOKENS": chunker.MIN_CHUNK_TOKENS,
    "MAX_CHUNK_TOKENS": chunker.MAX_CHUNK_TOKENS,
    "MAX_OVERLAP_TOKENS": chunker.MAX_OVERLAP_TOKENS,
}
TINY_LIMITS = {"MIN_CHUNK_TOKENS": 6, "MAX_CHUNK_TOKENS": 30, "MAX_OVERLAP_TOKENS": 8}

_reference_parser = MarkdownIt("commonmark").enable("table")


def source_lines(text: str) -> list[str]:
    """The line numbering the chunker promises: "\\n"-separated, BOM and CRLF's "\\r" dropped;
    "\\r"-separated in a file without any "\\n" (old Mac endings)."""
    text = text.removeprefix("\ufeff")
    lines = text.split("\n" if "\n" in text or "\r" not in text else "\r")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def paragraph(tokens: int, word: str = "lorem") -> str:
    """One paragraph line of roughly `tokens` tokens (4 chars each)."""
    return " ".join([word] * max(1, tokens * 4 // (len(word) + 1)))


def span_tokens(lines: list[str], chunk: Chunk) -> float:
    return sum(len(line) + 1 for line in lines[chunk.start_line - 1 : chunk.end_line]) / 4


def atomic_ranges(lines: list[str], body_start: int) -> list[range]:
    """0-based line ranges of fences, indented code, HTML blocks and tables, at any depth."""
    body = "\n".join(lines[body_start:]).replace("\r", " ")
    return [
        range(body_start + token.map[0], body_start + token.map[1])
        for token in _reference_parser.parse(body)
        if token.type in ATOMIC_TOKEN_TYPES and token.map is not None
    ]


def assert_invariants(doc: ParsedDocument, text: str, excluded: range = range(0)) -> None:
    """Spans valid and exact, idx consecutive, every non-blank line outside `excluded` covered."""
    lines = source_lines(text)
    assert [chunk.idx for chunk in doc.chunks] == list(range(len(doc.chunks)))
    covered: set[int] = set()
    for chunk in doc.chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        span = lines[chunk.start_line - 1 : chunk.end_line]
        assert chunk.text.replace("\r", "") == "\n".join(span).replace("\r", "")
        assert span[0].strip() and span[-1].strip(), "blank edges are trimmed"
        covered.update(range(chunk.start_line - 1, chunk.end_line))
    # a note of properties only (its body blank or headings only): its fields are a chunk
    fields_alone = bool(excluded) and all(
        not line.strip() or line.lstrip().startswith("#") for n, line in enumerate(lines) if n not in excluded
    )
    for number, line in enumerate(lines):
        if number in excluded:
            if fields_alone and number not in (excluded.start, excluded.stop - 1):
                continue
            assert number not in covered, f"front matter line {number + 1} leaked into a chunk"
        elif line.strip():
            assert number in covered, f"line {number + 1} {line!r} is in no chunk"


def assert_blocks_whole(doc: ParsedDocument, text: str, body_start: int = 0) -> None:
    """Every chunk holds all or none of the non-blank lines of each code block/table/HTML block."""
    lines = source_lines(text)
    for block in atomic_ranges(lines, body_start):
        content = {number for number in block if number < len(lines) and lines[number].strip()}
        for chunk in doc.chunks:
            inside = content & set(range(chunk.start_line - 1, chunk.end_line))
            assert inside in (set(), content), f"chunk {chunk.idx} cuts block at lines {block}"


@contextmanager
def limits(values: dict[str, int]) -> Iterator[None]:
    with patch.multiple(chunker, **values):
        yield


def breadcrumbs(doc: ParsedDocument) -> list[str]:
    return [chunk.breadcrumb for chunk in doc.chunks]


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line equal to `needle`."""
    return source_lines(text).index(needle) + 1


# --- front matter and title -------------------------------------------------------------


def test_front_matter_fields_are_metadata_and_lines_are_not_content() -> None:
    text = (
        "---\ntitle: Deploy notes\ntags: [ops, k8s, ops]\nid: 42\nupdated: 2024-01-05\n---\n"
        "\nIntro line.\n\n## Steps\n\nRun it.\n"
    )
    doc = parse_markdown(text, "ops/deploy.md")
    assert (doc.title, doc.tags, doc.doc_id, doc.updated) == ("Deploy notes", ["ops", "k8s"], "42", "2024-01-05")
    assert doc.headings == ["Steps"]
    assert [(c.start_line, c.end_line) for c in doc.chunks] == [(8, 12)]
    assert doc.chunks[0].text.startswith("Intro line.")
    assert doc.chunks[0].embed_text.startswith("Deploy notes\n\nIntro line.")
    assert_invariants(doc, text, excluded=range(0, 6))


def test_a_note_that_is_front_matter_alone_is_chunked_from_its_fields() -> None:
    """A person, a book, a map of other notes: properties only. It had no chunk, so nothing
    found it, not even its title or tags."""
    text = "---\ntitle: Jana Nováková\nrole: DBA at Acme\ntags: [people]\n---\n\n"
    doc = parse_markdown(text, "people/jana.md")
    assert (doc.title, doc.tags) == ("Jana Nováková", ["people"])
    assert [(c.start_line, c.end_line, c.breadcrumb) for c in doc.chunks] == [(2, 4, "Jana Nováková")]
    assert doc.chunks[0].text == "title: Jana Nováková\nrole: DBA at Acme\ntags: [people]"
    assert parse_markdown("---\n---\n", "empty.md").chunks == []  # nothing to find
    templated = parse_markdown(text.rstrip("\n") + "\n# Jana Nováková\n", "people/jana.md")  # a template's H1
    assert [(c.idx, c.start_line, c.end_line) for c in templated.chunks] == [(0, 2, 4), (1, 6, 6)]
    with_body = parse_markdown("---\ntitle: T\n---\nbody\n", "b.md")
    assert [c.text for c in with_body.chunks] == ["body"]  # fields stay metadata beside a body


@pytest.mark.parametrize(
    ("tags_yaml", "expected"),
    [
        ("tags: a, b c", ["a", "b", "c"]),
        ("tags: '  solo '", ["solo"]),
        ("tags: [x, 7, [nested], '']", ["x", "7"]),
        ("tags: 2024", ["2024"]),
        ("tags:", []),
    ],
)
def test_tags_accept_list_or_separated_string(tags_yaml: str, expected: list[str]) -> None:
    assert parse_markdown(f"---\n{tags_yaml}\n---\nbody\n", "n.md").tags == expected


def test_updated_timestamp_is_kept_as_written() -> None:
    doc = parse_markdown("---\nupdated: 2024-01-05T10:00:00Z\n...\nbody\n", "n.md")
    assert doc.updated == "2024-01-05T10:00:00Z"


def test_title_falls_back_to_first_h1_then_file_stem() -> None:
    assert parse_markdown("intro\n\n# First\n\n# Second\n", "a/b.md").title == "First"
    assert parse_markdown("## Only h2\n", "notes/sub/my-note.md").title == "my-note"
    assert parse_markdown("---\ntitle: [not, scalar]\n---\n# Heading\n", "x.md").title == "Heading"


def test_malformed_front_matter_is_read_line_by_line_and_kept_out_of_chunks() -> None:
    text = "---\ntitle: [unclosed\ntags: a\n---\n# Real title\n\nBody.\n"
    doc = parse_markdown(text, "broken.md")
    assert (doc.title, doc.tags, doc.doc_id) == ("Real title", ["a"], None)
    assert doc.headings == ["Real title"], "YAML lines must not turn into a setext heading"
    assert doc.chunks[0].start_line == 5
    assert doc.front_matter_problem is not None
    assert doc.front_matter_problem.startswith("invalid YAML (line 3, column 5): ")
    assert_invariants(doc, text, excluded=range(0, 4))


def test_front_matter_that_is_not_a_mapping_is_plain_markdown() -> None:
    text = "---\nJust a paragraph\n---\n\nBody.\n"
    doc = parse_markdown(text, "hr.md")
    assert doc.headings == ["Just a paragraph"]  # thematic break, then a setext H2
    assert_invariants(doc, text)


@pytest.mark.parametrize("bad", ["id: !!int not-a-number", "a: " + "[" * 5000, "x: !!python/object:os.system {}"])
def test_hostile_yaml_is_broken_front_matter(bad: str) -> None:
    text = f"---\n{bad}\n---\nbody\n"
    doc = parse_markdown(text, "n.md")
    assert (doc.doc_id, doc.chunks[0].start_line) == (None, 4)
    assert doc.front_matter_problem is not None and doc.front_matter_problem.startswith("invalid YAML")
    assert_invariants(doc, text, excluded=range(0, 3))


def test_invalid_yaml_front_matter_keeps_its_tags_and_dates_read_line_by_line() -> None:
    # the colon in the title makes the block invalid YAML; Obsidian still reads each property
    text = (
        "---\ntitle: Monitoring: Prometheus a alerty\ntags: [devops, monitoring]\nupdated: 2024-03-01\n"
        "aliases:\n  - prom\nid: 'mon-1'\n---\n# Monitoring\n\nAlertmanager routes.\n"
    )
    doc = parse_markdown(text, "devops/monitoring.md")
    assert (doc.title, doc.tags, doc.updated, doc.doc_id) == (
        "Monitoring: Prometheus a alerty",
        ["devops", "monitoring"],
        "2024-03-01",
        "mon-1",
    )
    problem = doc.front_matter_problem or ""
    # libyaml says "in this context", PyYAML's own parser "here"
    assert problem.startswith("invalid YAML (line 2, column 18): mapping values are not allowed ")
    assert problem.endswith("; read as `key: value` lines")
    assert [c.start_line for c in doc.chunks] == [9]
    assert all("tags:" not in c.text and "title:" not in c.text for c in doc.chunks)
    assert_invariants(doc, text, excluded=range(0, 8))


def test_tags_as_dash_lines_are_read_from_broken_front_matter() -> None:
    text = "---\ntitle: A: B\ntags:\n- one\n  - 'two'\n-   \nnote: x\n---\nbody\n"
    doc = parse_markdown(text, "n.md")
    assert (doc.title, doc.tags) == ("A: B", ["one", "two"])


def test_a_key_written_twice_is_a_problem_and_the_first_value_wins() -> None:
    doc = parse_markdown("---\ntitle: First\ntags: [a]\ntitle: Second\n---\nbody\n", "n.md")
    assert (doc.title, doc.tags) == ("First", ["a"])
    assert doc.front_matter_problem == "duplicate key 'title' (lines 2 and 4): the first value is used"
    broken = parse_markdown("---\ntitle: x: y\ntags: [a]\ntags: [b]\n---\nbody\n", "n.md")
    assert broken.tags == ["a"]
    assert broken.front_matter_problem is not None
    assert broken.front_matter_problem.endswith("; duplicate key 'tags' (lines 3 and 4): the first value is used")


def test_many_repeated_keys_make_one_short_problem_line() -> None:
    keys = "".join(f"k{i}: 1\nk{i}: 2\n" for i in range(500)) + "x" * 10_000 + ": 1\n" + "x" * 10_000 + ": 2\n"
    doc = parse_markdown(f"---\n{keys}---\nbody\n", "n.md")
    assert doc.front_matter_problem is not None and len(doc.front_matter_problem) < 300
    assert "498 more" in doc.front_matter_problem


def test_valid_front_matter_has_no_problem() -> None:
    assert parse_markdown("---\ntitle: 'A: B'\ntags: [a]\n---\nbody\n", "n.md").front_matter_problem is None
    assert parse_markdown("# No front matter\n", "n.md").front_matter_problem is None


def test_a_long_line_in_broken_front_matter_is_read_in_linear_time() -> None:
    # overlapping patterns would take minutes on these (no timing asserted: a hang fails the run)
    spaces = " " * 200_000
    text = f"---\ntitle: x: y\nkey{spaces}x\n- a{spaces}b\ntags:\n - a{spaces}b\n---\nbody\n"
    doc = parse_markdown(text, "n.md")
    assert doc.tags == ["a b"]


def test_titles_and_breadcrumbs_are_capped() -> None:
    text = "---\ntitle: " + "T" * 1_000_000 + "\n---\n# " + "H" * 5_000 + "\n\n## Setup\n\nbody\n"
    doc = parse_markdown(text, "n.md")
    assert len(doc.title) == chunker.TITLE_MAX_CHARS and doc.title.endswith("T…")
    assert all(len(heading) <= chunker.TITLE_MAX_CHARS for heading in doc.headings)
    assert all(len(c.breadcrumb) <= chunker.BREADCRUMB_MAX_CHARS for c in doc.chunks)
    # the longest names give way first, so the short section name survives whole
    assert doc.chunks[-1].breadcrumb.endswith("H… > Setup")


def test_a_breadcrumb_within_the_cap_is_untouched() -> None:
    name = "N" * 200
    doc = parse_markdown(f"# {name}\n\nbody\n", "n.md")
    assert doc.title == name and doc.chunks[0].breadcrumb == name


def test_unclosed_front_matter_is_content() -> None:
    text = "---\ntitle: x\n\n# Heading\n"
    doc = parse_markdown(text, "n.md")
    assert (doc.title, doc.chunks[0].start_line) == ("Heading", 1)
    assert_invariants(doc, text)


@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n\n", "\ufeff", "---\n---\n\n"])
def test_blank_document_has_no_chunks(text: str) -> None:
    doc = parse_markdown(text, "dir/empty.md")
    assert doc.chunks == []
    assert doc.title == "empty"


# --- sections and breadcrumbs ------------------------------------------------------------


def test_breadcrumbs_follow_h1_h2_h3_and_heading_starts_its_chunk() -> None:
    body = paragraph(300)
    text = f"# Guide\n\n{body}\n\n## Install\n\n{body}\n\n### Linux\n\n{body}\n\n## Usage\n\n{body}\n"
    doc = parse_markdown(text, "guide.md")
    assert doc.title == "Guide"
    assert doc.headings == ["Guide", "Install", "Linux", "Usage"]
    assert breadcrumbs(doc) == ["Guide", "Guide > Install", "Guide > Install > Linux", "Guide > Usage"]
    assert [c.start_line for c in doc.chunks] == [
        line_of(text, h) for h in ("# Guide", "## Install", "### Linux", "## Usage")
    ]
    assert doc.chunks[2].embed_text.startswith("Guide > Install > Linux\n\n### Linux")
    assert_invariants(doc, text)


def test_h1_different_from_title_is_part_of_the_breadcrumb() -> None:
    body = paragraph(300)
    text = f"---\ntitle: Handbook\n---\n# Guide\n\n{body}\n\n## Install\n\n{body}\n"
    assert breadcrumbs(parse_markdown(text, "h.md")) == ["Handbook > Guide", "Handbook > Guide > Install"]


def test_setext_headings_are_sections() -> None:
    body = paragraph(300)
    text = f"Guide\n=====\n\n{body}\n\nInstall\n-------\n\n{body}\n"
    doc = parse_markdown(text, "s.md")
    assert doc.headings == ["Guide", "Install"]
    assert breadcrumbs(doc) == ["Guide", "Guide > Install"]
    assert [c.start_line for c in doc.chunks] == [1, line_of(text, "Install")]


def test_h4_and_nested_headings_stay_inside_their_section() -> None:
    text = "## A\n\n#### Deep\n\n> # Quoted\n\n- # In a list\n"
    doc = parse_markdown(text, "n.md")
    assert doc.headings == ["A"]
    assert len(doc.chunks) == 1


def test_czech_and_russian_text() -> None:
    body_cs = paragraph(300, "příliš žluťoučký kůň")
    body_ru = paragraph(300, "съешь же ещё этих мягких")
    text = f"# Poznámky k nasazení\n\n{body_cs}\n\n## Конфигурация сервера\n\n{body_ru}\n"
    doc = parse_markdown(text, "poznámky/nasazení.md")
    assert doc.title == "Poznámky k nasazení"
    assert breadcrumbs(doc) == ["Poznámky k nasazení", "Poznámky k nasazení > Конфигурация сервера"]
    assert_invariants(doc, text)


# --- merging -------------------------------------------------------------------------------


def test_tiny_sections_merge_into_one_chunk_under_the_title() -> None:
    text = "# Note\n\nintro\n\n## A\n\na\n\n## B\n\nb\n\n### B1\n\nb1\n"
    doc = parse_markdown(text, "n.md")
    assert [(c.start_line, c.end_line, c.breadcrumb) for c in doc.chunks] == [(1, 15, "Note")]


def test_parent_merged_with_its_children_keeps_the_parent_breadcrumb() -> None:
    text = f"# Note\n\n{paragraph(798)}\n\n## A\n\nshort a\n\n### A1\n\nshort a1\n\n## B\n\n{paragraph(900)}\n"
    doc = parse_markdown(text, "n.md")
    a_chunk = doc.chunks[1]
    assert (a_chunk.breadcrumb, a_chunk.start_line) == ("Note > A", line_of(text, "## A"))
    assert "### A1" in a_chunk.text and "## B" not in a_chunk.text


def test_merged_siblings_get_their_parent_breadcrumb() -> None:
    text = f"# Note\n\n{paragraph(798)}\n\n## A\n\nshort a\n\n## B\n\nshort b\n\n# Next part\n\n{paragraph(790)}\n"
    doc = parse_markdown(text, "n.md")
    assert [c.breadcrumb for c in doc.chunks] == ["Note", "Note", "Note > Next part"]
    assert doc.chunks[1].text.startswith("## A") and doc.chunks[1].text.endswith("short b")


def test_small_section_does_not_merge_across_a_different_parent() -> None:
    text = f"# One\n\n{paragraph(300)}\n\n## Tail\n\ntiny\n\n# Two\n\n{paragraph(300)}\n"
    doc = parse_markdown(text, "n.md")
    assert "# Two" not in doc.chunks[0].text  # "Tail" (under One) must not absorb "Two"
    assert doc.chunks[-1].text.startswith("# Two")


def test_heading_only_h1_leads_into_an_oversized_child_section() -> None:
    text = "# Title\n\n## Big\n\n" + "\n\n".join(paragraph(100, f"w{i}") for i in range(20)) + "\n"
    doc = parse_markdown(text, "n.md")
    assert doc.chunks[0].start_line == 1 and "## Big" in doc.chunks[0].text
    assert all(c.breadcrumb == "Title > Big" for c in doc.chunks[1:])


# --- splitting -----------------------------------------------------------------------------


def test_huge_section_splits_at_paragraphs_with_overlap() -> None:
    paragraphs = [paragraph(100, f"p{i:02d}") for i in range(40)]
    text = "## Big\n\n" + "\n\n".join(paragraphs) + "\n"
    lines = source_lines(text)
    doc = parse_markdown(text, "big.md")
    assert len(doc.chunks) >= 5
    assert {c.breadcrumb for c in doc.chunks} == {"big > Big"}
    for previous, current in zip(doc.chunks, doc.chunks[1:], strict=False):  # neighbours
        assert span_tokens(lines, previous) <= chunker.MAX_CHUNK_TOKENS
        assert lines[current.start_line - 1] in paragraphs, "pieces start at a paragraph"
        overlap = previous.end_line - current.start_line + 1
        assert overlap >= 1, "consecutive pieces of one section overlap"
        shared = "\n".join(lines[current.start_line - 1 : previous.end_line])
        assert previous.text.endswith(shared) and current.text.startswith(shared)
        assert len(shared) / 4 <= chunker.MAX_OVERLAP_TOKENS
    assert_invariants(doc, text)


def test_overlap_never_reaches_back_into_a_previous_section() -> None:
    # Tiny limits (max 30, overlap 8): the first piece ends after "b1" because P does not fit;
    # the next piece repeats B's heading and "b1", but not A's "a1".
    text = f"## A\n\na1\n\n### B\n\nb1\n\n{paragraph(25, 'one')}\n\n{paragraph(25, 'two')}\n"
    with limits(TINY_LIMITS):
        doc = parse_markdown(text, "n.md")
    assert [c.start_line for c in doc.chunks] == [1, line_of(text, "### B"), line_of(text, paragraph(25, "two"))]
    assert [c.breadcrumb for c in doc.chunks] == ["n > A", "n > A > B", "n > A > B"]


def test_oversized_block_is_its_own_chunk_with_its_heading() -> None:
    huge = paragraph(2000, "huge")
    text = f"## Big\n\n{huge}\n\n{paragraph(300)}\n\n{paragraph(300)}\n"
    doc = parse_markdown(text, "n.md")
    assert doc.chunks[0].text == f"## Big\n\n{huge}"
    assert huge not in doc.chunks[1].text
    assert_invariants(doc, text)


def test_code_block_with_hash_lines_is_not_a_heading_and_never_split() -> None:
    code_lines = [f"# comment {i}\nvalue_{i} = compute({i})  # trailing" for i in range(150)]
    fence = "```python\n" + "\n".join(code_lines) + "\n```"
    text = f"# Script\n\n{paragraph(500)}\n\n{fence}\n\n{paragraph(500)}\n"
    doc = parse_markdown(text, "script.md")
    assert doc.headings == ["Script"]
    holders = [c for c in doc.chunks if "# comment 0" in c.text]
    assert len(holders) == 1 and fence in holders[0].text
    assert_invariants(doc, text)
    assert_blocks_whole(doc, text)


def test_table_stays_whole_inside_a_split_section() -> None:
    table = "| key | value |\n|---|---|\n" + "\n".join(f"| k{i} | {paragraph(10)} |" for i in range(40))
    text = f"## Data\n\n{paragraph(600)}\n\n{table}\n\n{paragraph(600)}\n"
    doc = parse_markdown(text, "t.md")
    assert len(doc.chunks) > 1
    assert sum(table in c.text for c in doc.chunks) >= 1
    assert_blocks_whole(doc, text)
    assert_invariants(doc, text)


def test_checklist_splits_at_top_level_items() -> None:
    items = [f"- [ ] task {i}: {paragraph(12, 'check')}\n  - detail {i}" for i in range(300)]
    text = "# Checklist\n\n" + "\n".join(items) + "\n"
    lines = source_lines(text)
    doc = parse_markdown(text, "todo.md")
    assert len(doc.chunks) > 3
    for chunk in doc.chunks[1:]:
        assert lines[chunk.start_line - 1].startswith("- [ ] task ")
    assert all(span_tokens(lines, c) <= chunker.MAX_CHUNK_TOKENS for c in doc.chunks)
    assert_invariants(doc, text)


def test_one_huge_list_item_opens_up_at_its_nested_items() -> None:
    text = "- outline\n" + "\n".join(f"  - point {i} {paragraph(15)}" for i in range(200)) + "\n"
    doc = parse_markdown(text, "outline.md")
    assert len(doc.chunks) > 3
    assert_invariants(doc, text)


# --- encodings and hostile input ----------------------------------------------------------


def test_crlf_gives_the_same_spans_as_lf() -> None:
    text = f"---\ntitle: T\n---\n# T\n\n{paragraph(500)}\n\n## S\n\n```\n# x\n```\n\n{paragraph(700)}\n"
    lf = parse_markdown(text, "n.md")
    crlf = parse_markdown(text.replace("\n", "\r\n"), "n.md")
    assert crlf == lf
    assert all("\r" not in c.text for c in crlf.chunks)


def test_bom_is_stripped_and_line_numbers_hold() -> None:
    text = "\ufeff---\ntitle: Bommed\n---\n# Head\nbody\n"
    doc = parse_markdown(text, "n.md")
    assert doc.title == "Bommed"
    assert [(c.start_line, c.text) for c in doc.chunks] == [(4, "# Head\nbody")]


def test_lone_carriage_return_does_not_shift_lines() -> None:
    text = "first\rstill first\n# Head\nbody\n"
    doc = parse_markdown(text, "n.md")
    assert doc.headings == ["Head"]
    assert_invariants(doc, text)


def test_nul_bytes_and_a_very_long_line() -> None:
    long_line = "x" * 400_000
    text = f"# A\x00B\n\x00\n\n{long_line}\n"
    doc = parse_markdown(text, "n.md")
    assert doc.chunks[-1].text.endswith(long_line)
    assert_invariants(doc, text)


@pytest.mark.parametrize(
    "text",
    [
        ">" * 10_000 + " deep quote\n",
        "- " * 10_000 + "deep list\n",
        "1. " * 10_000 + "deep ordered\n",
        "\n".join(">" * depth + " line" for depth in range(1, 2_000)) + "\n",
        "\n".join("  " * depth + "- item" for depth in range(1_000)) + "\n",
        "[" * 50_000 + "\n" + "*" * 50_000 + "\n",
    ],
    ids=["quote-10k", "list-10k", "ordered-10k", "quote-lines", "indented-list", "brackets"],
)
def test_deep_nesting_does_not_crash(text: str) -> None:
    doc = parse_markdown(text, "deep.md")
    assert doc.chunks
    assert_invariants(doc, text)


def test_recursion_error_falls_back_to_a_line_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    def give_up(_text: str) -> list[object]:
        raise RecursionError

    monkeypatch.setattr(chunker._parser(), "parse", give_up)
    fence = "```sh\n# not a heading\n\necho hi\n```"
    text = f"---\ntitle: T\n---\nintro\n\n# One\n\n{paragraph(40)}\n\n{fence}\n\n## Two ##\n\n{paragraph(40)}\n"
    doc = parse_markdown(text, "n.md")
    assert doc.headings == ["One", "Two"]
    with limits(TINY_LIMITS):
        split = parse_markdown(text, "n.md")
    assert len(split.chunks) > len(doc.chunks)
    fence_start = line_of(text, "```sh")
    fence_lines = set(range(fence_start, fence_start + 5))
    for result in (doc, split):
        assert_invariants(result, text, excluded=range(0, 3))
        for chunk in result.chunks:
            inside = fence_lines & set(range(chunk.start_line, chunk.end_line + 1))
            assert inside in (set(), fence_lines)


def test_version_is_recorded_as_text() -> None:
    assert isinstance(CHUNKER_VERSION, str) and CHUNKER_VERSION


# --- properties over generated documents -------------------------------------------------

any_line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=40)
word = st.text(st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=12)
prose = st.lists(word, min_size=1, max_size=30).map(" ".join)

markdown_block = st.one_of(
    st.builds(lambda level, title: "#" * level + " " + title, st.integers(1, 6), prose),
    st.builds(lambda title, rule: f"{title}\n{rule}", prose, st.sampled_from(["===", "---"])),
    st.lists(prose, min_size=1, max_size=4).map("\n".join),
    st.builds(lambda n, w: paragraph(n, w), st.integers(20, 400), word),
    st.builds(
        lambda marker, body: f"{marker}\n" + "\n".join(body) + f"\n{marker}",
        st.sampled_from(["```", "~~~", "````"]),
        st.lists(st.one_of(any_line, st.just("# comment"), st.just("## not a heading"), st.just("")), max_size=12),
    ),
    st.lists(prose, min_size=1, max_size=3).map(lambda rows: "\n".join("    " + r for r in rows)),
    st.lists(st.tuples(st.sampled_from(["- ", "- [ ] ", "1. ", "  - ", "* "]), prose), min_size=1, max_size=25).map(
        lambda items: "\n".join(marker + text for marker, text in items)
    ),
    st.lists(st.tuples(word, prose), min_size=1, max_size=8).map(
        lambda rows: "| a | b |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    ),
    prose.map(lambda text: f"<div>\n{text}\n</div>"),
    st.lists(prose, min_size=1, max_size=3).map(lambda rows: "\n".join("> " + r for r in rows)),
    st.just(""),
    any_line,
)

front_matters = st.sampled_from(
    [
        ("", 0),
        ("---\ntitle: Generated\ntags: [a, b]\n---\n", 4),
        ("---\n---\n", 2),
        ("---\ntitle: [unclosed\n---\n", 3),
    ]
)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, range, int]:
    """(text, front matter lines that are metadata, line where markdown parsing starts)."""
    front_matter, metadata_lines = draw(front_matters)
    blocks = draw(st.lists(markdown_block, max_size=40))
    separators = draw(st.lists(st.sampled_from(["\n", "\n\n", "\n\n\n"]), min_size=len(blocks), max_size=len(blocks)))
    body = "".join(block + separator for block, separator in zip(blocks, separators, strict=True))
    if not front_matter and body.split("\n", 1)[0].rstrip() == "---":
        body = "start\n" + body
    text = front_matter + body
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = "\ufeff" + text
    return text, range(0, metadata_lines), front_matter.count("\n")


@pytest.mark.parametrize("policy", [DEFAULT_LIMITS, TINY_LIMITS], ids=["default-limits", "tiny-limits"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=documents())
def test_generated_documents_keep_the_invariants(policy: dict[str, int], document: tuple[str, range, int]) -> None:
    text, metadata_lines, body_start = document
    with limits(policy):
        doc = parse_markdown(text, "gen/doc.md")
    assert_invariants(doc, text, excluded=metadata_lines)
    assert_blocks_whole(doc, text, body_start)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_arbitrary_unicode_never_raises(text: str) -> None:
    assume(not text.lstrip("\ufeff").startswith("---"))  # front matter has its own tests
    assert_invariants(parse_markdown(text, "x.md"), text)


@settings(max_examples=200, deadline=None)
@given(
    yaml_body=st.lists(
        st.sampled_from([*"ab:-[]{}!&*?|>'\"#%@`,. \n\t01~\x00", "!!binary ", "!!int ", "!!float ", "2024-13-45"]),
        max_size=40,
    ).map("".join)
)
def test_arbitrary_front_matter_never_raises(yaml_body: str) -> None:
    text = f"---\n{yaml_body}\n---\n# Heading\n"
    doc = parse_markdown(text, "x.md")
    assert doc.chunks and doc.chunks[-1].text.endswith("# Heading")
