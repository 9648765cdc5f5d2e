"""Markdown note -> ParsedDocument: heading-section chunks with exact source line spans
(every hit points at lines the user can open).

Pure (no I/O). Policy, in the order it is applied:

1. Lines are split on "\\n" (as grep -n and editors count them); a BOM and the "\\r" of CRLF
   are dropped, so line numbers always match the file. A file with no "\\n" at all but a "\\r"
   has old Mac line endings and is split on "\\r" (as editors show it; see `line_break`).
2. Front matter (`indexer.frontmatter`): a first line `---` up to the next `---`/`...` line.
   Its fields are metadata and its lines are not chunk content, also when its YAML is broken
   (then it is read line by line and the document names the problem). If it loads to something
   else (a string, a list), it was never front matter: plain markdown.
3. Sections start at top-level H1-H3 headings (ATX and setext); H4+ and headings inside
   lists/blockquotes stay inside their section. Text before the first heading is a section too.
4. Merge: a group of adjacent sections below MIN_CHUNK_TOKENS absorbs the next section while
   that section lies under the parent of the group's first section and the result stays within
   MAX_CHUNK_TOKENS, or the next section is oversized anyway and nested under the group's last
   section (the group is its lead-in, so a heading-only H1 does not become a chunk of its own).
   A small group left over is appended to the previous group under the same conditions (without
   the lead-in case). Spans stay contiguous.
5. Split: a group above MAX_CHUNK_TOKENS is packed greedily from whole blocks (top-level blocks,
   top-level list items, and the children of a list item or blockquote that is itself too big).
   Fenced/indented code, tables, HTML blocks and paragraphs are never cut; one block over the
   limit becomes its own oversized chunk (with its section's heading line, if that directly
   precedes it: a piece never ends on a bare heading). The next piece repeats whole trailing
   blocks of the previous one (same section only, at most MAX_OVERLAP_TOKENS) as overlap.
6. Breadcrumb: "Title > H1 > H2 > H3" of the headings common to all sections whose new lines
   the chunk holds: one section -> its path; a parent with its children -> the parent's path;
   merged siblings -> their parent's path. An H1 equal to the title is not repeated.
   Titles and heading names are cut to TITLE_MAX_CHARS, a breadcrumb to BREADCRUMB_MAX_CHARS
   (the longest names give way first), each cut ending in "…".

If markdown-it ever hits Python's recursion limit, a plain line scan (ATX headings outside
fences, cuts at fences and paragraph starts) builds the outline instead; the policy is the same.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import accumulate
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from indexer.filetext import line_break
from indexer.frontmatter import read_front_matter
from indexer.model import BREADCRUMB_MAX_CHARS, BREADCRUMB_SEPARATOR, Chunk, ParsedDocument

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

# 2: files with only "\r" line endings are split into lines; 3: broken front matter is read
# line by line and kept out of chunks, titles and breadcrumbs are capped; 4: a note that is
# front matter alone is chunked from its fields; 5: so is one with headings only, and a nested
# tag is stored with the tags it is nested in (a note's tags are written when it is re-read)
CHUNKER_VERSION = "5"

CHARS_PER_TOKEN = 4
MIN_CHUNK_TOKENS = 200
MAX_CHUNK_TOKENS = 800
MAX_OVERLAP_TOKENS = 120  # ~15 % of MAX_CHUNK_TOKENS; whole blocks only, so usually less
# a name is for reading in a hit's header: a 1 MB front-matter title must not print 1 MB per hit
TITLE_MAX_CHARS = 300

SECTION_LEVELS = {"h1": 1, "h2": 2, "h3": 3}
LIST_TYPES = frozenset({"bullet_list_open", "ordered_list_open"})
OPENABLE_CONTAINER_TYPES = frozenset({"list_item_open", "blockquote_open"})


# Block structure and heading texts are all we need: skipping inline parsing is much faster.
@cache
def _parser() -> MarkdownIt:
    """Built on first use: a no-op sync reads CHUNKER_VERSION but never parses markdown."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").disable("inline")


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ATX_SECTION_HEADING = re.compile(r" {0,3}(#{1,3})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_ATX_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")  # any level: a line that is a heading, not `#tag`


@dataclass(frozen=True)
class _Heading:
    line: int  # 0-based; also makes equal-text headings distinct in paths
    level: int
    text: str


@dataclass(frozen=True)
class _Outline:
    headings: list[_Heading]  # top-level H1-H3: section starts
    cuts: list[int]  # 0-based lines where a chunk may start without breaking a block


@dataclass(frozen=True)
class _Section:
    start: int  # 0-based, inclusive
    end: int  # 0-based, exclusive
    path: tuple[_Heading, ...]  # enclosing headings, outermost first; () before the first heading


@dataclass(frozen=True)
class _Piece:
    start: int
    end: int
    path: tuple[_Heading, ...]


class _TokenEstimate:
    """Tokens (~chars/4) of any line range in O(1), from prefix sums of line lengths."""

    def __init__(self, lines: Sequence[str]) -> None:
        self._offsets = list(accumulate((len(line) + 1 for line in lines), initial=0))

    def __call__(self, start: int, end: int) -> float:
        return (self._offsets[end] - self._offsets[start]) / CHARS_PER_TOKEN


def parse_markdown(text: str, path: str) -> ParsedDocument:
    """Parse one note: front matter fields, H1-H3 outline, and chunks with exact line spans."""
    lines = _source_lines(text)
    front_matter = read_front_matter(lines)
    tokens = _TokenEstimate(lines)
    outline = _outline(lines, front_matter.end, tokens)
    fields = front_matter.fields
    title = (
        _name(fields.get("title"))
        or next((h.text for h in outline.headings if h.level == 1 and h.text), None)
        or PurePosixPath(path).stem
    )
    sections = _sections(lines, outline.headings, front_matter.end if front_matter.is_metadata else 0)
    cuts = sorted(set(outline.cuts).union(section.start for section in sections))
    chunks: list[Chunk] = []
    for group in _group_sections(sections, tokens):
        for piece in _split_group(group, cuts, tokens):
            first, last = _trim_blank_edges(lines, piece.start, piece.end)
            if first < last:
                chunks.append(
                    Chunk(
                        idx=len(chunks),
                        breadcrumb=_breadcrumb(title, piece.path),
                        text="\n".join(lines[first:last]),
                        start_line=first + 1,
                        end_line=last,
                    )
                )
    if front_matter.is_metadata and all(_headings_only(chunk.text) for chunk in chunks):
        properties = _front_matter_chunk(lines, front_matter.end, title)
        chunks = [replace(chunk, idx=n) for n, chunk in enumerate([*properties, *chunks])]
    return ParsedDocument(
        title=title,
        tags=_tags(fields.get("tags")),
        headings=[heading.text for heading in outline.headings if heading.text],
        doc_id=_one_line_text(fields.get("id")),
        updated=_one_line_text(fields.get("updated")),
        chunks=chunks,
        front_matter_problem=front_matter.problem,
    )


def _headings_only(text: str) -> bool:
    """A chunk with no line but headings (a template's `# {{title}}`): no text to find a note by."""
    return all(_ATX_HEADING.match(line) or not line.strip() for line in text.split("\n"))


def _front_matter_chunk(lines: Sequence[str], end: int, title: str) -> list[Chunk]:
    """A note that is front matter alone, or with headings only (a person, a book, a map of
    other notes: properties only, maybe under a template's H1) is found by them: its fields,
    between the delimiters, are a chunk."""
    first, last = _trim_blank_edges(lines, 1, end - 1)
    if first >= last:
        return []
    return [
        Chunk(
            idx=0,
            breadcrumb=_breadcrumb(title, ()),
            text="\n".join(lines[first:last]),
            start_line=first + 1,
            end_line=last,
        )
    ]


def _source_lines(text: str) -> list[str]:
    """Lines as grep -n numbers them (see `line_break`), without BOM and CRLF's "\\r"."""
    text = text.removeprefix("\ufeff")
    lines = text.split(line_break(text))
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _one_line_text(value: object) -> str | None:
    """A scalar as single-line text; nested structures are not titles, ids or dates."""
    if isinstance(value, (str, int, float)):
        return " ".join(str(value).split()) or None
    return None


def _name(value: object) -> str | None:
    """A title or heading name: one line of at most TITLE_MAX_CHARS."""
    text = _one_line_text(value)
    return None if text is None else _cut(text, TITLE_MAX_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _tags(value: object) -> list[str]:
    """`tags` as a list, or as a comma/space separated string; duplicates dropped, order kept."""
    if isinstance(value, str):
        candidates = re.split(r"[,\s]+", value)
    elif isinstance(value, list):
        candidates = [_one_line_text(item) or "" for item in value]
    else:
        candidates = [_one_line_text(value) or ""]
    return list(dict.fromkeys(tag for tag in candidates if tag))


def _outline(lines: Sequence[str], body_start: int, tokens: _TokenEstimate) -> _Outline:
    # Lone "\r" would be a line break to markdown-it and shift every map after it.
    body = "\n".join(lines[body_start:]).replace("\r", " ")
    try:
        parsed = _parser().parse(body)
    except RecursionError:
        return _line_scan_outline(lines, body_start)
    return _token_outline(parsed, body_start, tokens)


def _token_outline(parsed: Sequence[Token], offset: int, tokens: _TokenEstimate) -> _Outline:
    """Section headings and cut lines from markdown-it's block tokens (one linear pass).

    Blocks at top level are cut points; so are the children of an open container whose
    children may be separated: every list (items), and a list item or blockquote too big to
    stay whole. Everything else (paragraphs, code, tables, HTML) keeps its inside uncut.
    """
    headings: list[_Heading] = []
    cuts: list[int] = []
    children_cuttable: list[bool] = []  # one entry per open container token
    for position, token in enumerate(parsed):
        if token.nesting == -1:
            children_cuttable.pop()
            continue
        at_top_level = not children_cuttable
        cuttable_here = at_top_level or children_cuttable[-1]
        if cuttable_here and token.map is not None:
            start = offset + token.map[0]
            cuts.append(start)
            if at_top_level and token.type == "heading_open" and token.tag in SECTION_LEVELS:
                text = _name(parsed[position + 1].content) or ""
                headings.append(_Heading(start, SECTION_LEVELS[token.tag], text))
        if token.nesting == 1:
            children_cuttable.append(cuttable_here and _opens_up(token, offset, tokens))
    return _Outline(headings, cuts)


def _opens_up(token: Token, offset: int, tokens: _TokenEstimate) -> bool:
    if token.type in LIST_TYPES:
        return True
    if token.type in OPENABLE_CONTAINER_TYPES and token.map is not None:
        return tokens(offset + token.map[0], offset + token.map[1]) > MAX_CHUNK_TOKENS
    return False


def _line_scan_outline(lines: Sequence[str], body_start: int) -> _Outline:
    """Fallback outline without markdown-it: ATX H1-H3 outside fences; cuts at fences,
    headings and paragraph starts, never inside a fence."""
    headings: list[_Heading] = []
    cuts: list[int] = []
    open_fence: str | None = None
    after_break = True
    for number in range(body_start, len(lines)):
        line = lines[number]
        fence = _FENCE.match(line)
        if open_fence is not None:
            if fence and fence.group(1).startswith(open_fence) and not line[fence.end() :].strip():
                open_fence = None
                after_break = True
            continue
        heading = _ATX_SECTION_HEADING.match(line)
        if fence:
            open_fence = fence.group(1)
            cuts.append(number)
        elif heading:
            headings.append(_Heading(number, len(heading.group(1)), _name(heading.group(2)) or ""))
            cuts.append(number)
            after_break = True
        elif not line.strip():
            after_break = True
        elif after_break:
            cuts.append(number)
            after_break = False
    return _Outline(headings, cuts)


def _sections(lines: Sequence[str], headings: Sequence[_Heading], content_start: int) -> list[_Section]:
    """Sections covering every line from content_start to the end (a blank lead-in is dropped)."""
    sections: list[_Section] = []
    first_heading = headings[0].line if headings else len(lines)
    if any(line.strip() for line in lines[content_start:first_heading]):
        sections.append(_Section(content_start, first_heading, ()))
    path: list[_Heading] = []
    ends = [heading.line for heading in headings[1:]] + [len(lines)]
    for heading, end in zip(headings, ends, strict=False):  # no headings: ends still holds the end of file
        while path and path[-1].level >= heading.level:
            path.pop()
        path.append(heading)
        sections.append(_Section(heading.line, end, tuple(path)))
    return sections


def _group_sections(sections: Sequence[_Section], tokens: _TokenEstimate) -> list[list[_Section]]:
    """Merge small adjacent sections under the same parent (rule 4 of the module docstring)."""
    forward: list[list[_Section]] = []
    for section in sections:
        if forward and _absorbs(forward[-1], section, tokens):
            forward[-1].append(section)
        else:
            forward.append([section])
    groups: list[list[_Section]] = []
    for group in forward:
        if (
            groups
            and _is_small(group, tokens)
            and _under_parent_of_first(groups[-1], group)
            and tokens(groups[-1][0].start, group[-1].end) <= MAX_CHUNK_TOKENS
        ):
            groups[-1].extend(group)
        else:
            groups.append(group)
    return groups


def _absorbs(group: Sequence[_Section], section: _Section, tokens: _TokenEstimate) -> bool:
    return (
        _is_small(group, tokens)
        and _under_parent_of_first(group, [section])
        and (
            tokens(group[0].start, section.end) <= MAX_CHUNK_TOKENS
            or (_is_lead_in(group, section) and tokens(section.start, section.end) > MAX_CHUNK_TOKENS)
        )
    )


def _is_lead_in(group: Sequence[_Section], section: _Section) -> bool:
    """The group ends with an ancestor of section (e.g. a bare H1 before its first H2)."""
    last_path = group[-1].path
    return section.path[: len(last_path)] == last_path


def _is_small(group: Sequence[_Section], tokens: _TokenEstimate) -> bool:
    return tokens(group[0].start, group[-1].end) < MIN_CHUNK_TOKENS


def _under_parent_of_first(group: Sequence[_Section], sections: Sequence[_Section]) -> bool:
    parent = group[0].path[:-1]
    return all(section.path[: len(parent)] == parent for section in sections)


def _split_group(group: Sequence[_Section], cuts: Sequence[int], tokens: _TokenEstimate) -> list[_Piece]:
    """One piece if the group fits, else whole blocks packed greedily (rule 5)."""
    group_start, group_end = group[0].start, group[-1].end
    if tokens(group_start, group_end) <= MAX_CHUNK_TOKENS:
        return [_Piece(group_start, group_end, _common_path(group))]
    # Block k spans bounds[k]..bounds[k+1]; section starts are cuts, so bounds[0] == group_start.
    bounds = [*cuts[bisect_left(cuts, group_start) : bisect_left(cuts, group_end)], group_end]
    owners = _owning_sections(bounds[:-1], group)
    block_count = len(owners)

    def starts_section(block: int) -> bool:
        return bounds[block] == owners[block].start

    pieces: list[_Piece] = []
    first = fresh = 0  # first block of the piece (overlap included) / first block not yet emitted
    while fresh < block_count:
        if tokens(bounds[first], bounds[fresh + 1]) > MAX_CHUNK_TOKENS:
            first = fresh  # an oversized block stands alone, without overlap
        stop = fresh + 1
        while stop < block_count and tokens(bounds[first], bounds[stop + 1]) <= MAX_CHUNK_TOKENS:
            stop += 1
        if stop < block_count and starts_section(stop - 1):
            # Keep a heading with its body, even when that body is one oversized block.
            if stop - 1 == fresh:
                stop += 1
            else:
                stop -= 1
        pieces.append(_Piece(bounds[first], bounds[stop], _common_path(owners[fresh:stop])))
        first = stop
        if stop < block_count and not starts_section(stop):
            while (
                first - 1 > fresh
                and owners[first - 1] is owners[stop]
                and tokens(bounds[first - 1], bounds[stop]) <= MAX_OVERLAP_TOKENS
            ):
                first -= 1
        fresh = stop
    return pieces


def _owning_sections(block_starts: Sequence[int], group: Sequence[_Section]) -> list[_Section]:
    owners: list[_Section] = []
    index = 0
    for start in block_starts:
        while group[index].end <= start:
            index += 1
        owners.append(group[index])
    return owners


def _common_path(sections: Sequence[_Section]) -> tuple[_Heading, ...]:
    common = sections[0].path
    for section in sections[1:]:
        length = 0
        while length < min(len(common), len(section.path)) and common[length] == section.path[length]:
            length += 1
        common = common[:length]
    return common


def _breadcrumb(title: str, path: Sequence[_Heading]) -> str:
    names = [title] + [
        heading.text for heading in path if not (heading.level == 1 and heading.text.casefold() == title.casefold())
    ]
    names = [name for name in names if name]
    budget = BREADCRUMB_MAX_CHARS - len(BREADCRUMB_SEPARATOR) * (len(names) - 1)
    if sum(map(len, names)) > budget:
        # the longest names give way first: each is cut to the largest length that fits
        longest = max(map(len, names))
        while longest > 1 and sum(min(len(name), longest) for name in names) > budget:
            longest -= 1
        names = [_cut(name, longest) for name in names]
    return BREADCRUMB_SEPARATOR.join(names)


def _trim_blank_edges(lines: Sequence[str], start: int, end: int) -> tuple[int, int]:
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return start, end
