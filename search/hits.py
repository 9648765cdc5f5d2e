"""A search's chosen chunks as the hits it answers with: each centred on the line where the
query matches best (a line holding its words, else where the nearest window of a chunk longer
than the model reads begins), with what --explain says of it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from indexer.model import BREADCRUMB_MAX_CHARS, BREADCRUMB_SEPARATOR
from indexer.store import ChunkRow, IndexReader, RankedChunk
from indexer.store.rows import NearestWindow
from search.fusion import Fused, Fusion
from search.refs import Ref
from search.snippets import excerpt, snippet_terms

if TYPE_CHECKING:  # numpy and the embedders stay unimported on the lexical path
    import numpy as np

    from indexer.embedders import Embedder

SNIPPET_CHARS = 1200
_SECTION_HEADING = re.compile(r" {0,3}(#{1,3})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*\Z")  # ATX H1-H3
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SETEXT_UNDERLINE = re.compile(r" {0,3}(=+|-+)[ \t]*\Z")
# a line of a note's fields (the chunk of a note of properties only): a key, a list item, a
# continuation or a comment
_YAML_KEY = re.compile(r"[A-Za-z_][\w -]*:(?:[ \t]|\Z)")
_YAML_LINE = re.compile(rf"{_YAML_KEY.pattern}|[ \t]|-[ \t]|#")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-*+][ \t]|[0-9]{1,9}[.)][ \t]|>|\||<)")  # a list item, quote, table, HTML


@dataclass
class Hit:
    source: str
    path: str
    line: int  # the chunk's span in the file: line..end_line
    end_line: int
    match_line: int  # the file line where the query matches best (search.snippets)
    breadcrumb: str
    score: float
    snippet: str  # a few lines around match_line
    text: str  # SNIPPET_CHARS of the chunk around match_line
    rev: str | None
    matched: str = "keyword"  # which half found it: keyword, meaning or both
    explain: dict[str, float | int | str | None] = field(default_factory=dict)
    chunk_text: str = field(default="", repr=False)  # the whole chunk, for `query --full`
    file: str | None = None  # the note on disk for an editor (search.service.locating); None: only in the mirror

    def to_json(self, explain: bool = False, full: bool = False) -> dict[str, object]:
        """`full`: `text` is the whole chunk (`query --full`) instead of the window around match_line."""
        data = asdict(self)
        chunk = data.pop("chunk_text")
        if full and chunk:
            data["text"] = chunk
        if not explain:
            data.pop("explain")
        data["ref"] = str(Ref(self.source, self.path, self.line))  # what `show` / MCP `get` take
        return data


def section_breadcrumb(breadcrumb: str, text: str, start_line: int, match_line: int) -> str:
    """The breadcrumb of the section that `match_line` lies in. A chunk of small sections merged
    is named by their common parent ("Server setup"), while the line a hit points at sits under
    one of them: its header says "Server setup > Monitoring". H1-H3 outside fences, ATX and
    setext (a paragraph over `===` or `---`), as the chunker's sections start. Where a line is
    in doubt the chunk's own breadcrumb stands: vague is better than wrong."""
    lines = text.split("\n")
    first = next((line for line in lines if line.strip() and not line.startswith("#")), "")
    if _YAML_KEY.match(first) and all(_YAML_LINE.match(line) for line in lines if line.strip()):
        return breadcrumb  # a note's fields (YAML): `# ...` there is a comment
    path: list[tuple[int, str]] = []  # (level, name) of the headings above match_line in the chunk
    fence: str | None = None
    paragraph: list[str] | None = []  # the open paragraph's lines; None: a block no heading ends
    for line in lines[: max(match_line - start_line + 1, 0)]:
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1).startswith(fence) and not line[opened.end() :].strip():
                fence = None
            continue
        heading = _SECTION_HEADING.match(line)
        underline = _SETEXT_UNDERLINE.match(line)
        level, name = 0, ""
        if heading:
            level, name = len(heading.group(1)), heading.group(2) or ""
        elif underline and paragraph:
            level, name = (1 if underline.group(1).startswith("=") else 2), " ".join(paragraph)
        if opened:
            fence, paragraph = opened.group(1), []
        elif level:
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, " ".join(name.split())))
            paragraph = []
        elif not line.strip() or underline:
            paragraph = []
        elif paragraph == [] and (_NOT_PARAGRAPH.match(line) or line.startswith(("    ", "\t"))):
            paragraph = None  # a list item, a quote, indented code...: `---` under it is a rule
        elif paragraph is not None:
            paragraph.append(line.strip())
    names = breadcrumb.split(BREADCRUMB_SEPARATOR) if breadcrumb else []
    named = {name.casefold() for name in names}
    below = [name for _, name in path if name and name.casefold() not in named]
    shown = BREADCRUMB_SEPARATOR.join([*names, *below])
    return shown if below and len(shown) <= BREADCRUMB_MAX_CHARS else breadcrumb


def matched_by(by_keyword: bool, by_meaning: bool) -> str:
    return "both" if by_keyword and by_meaning else "keyword" if by_keyword else "meaning"


def build_hits(
    chosen: list[Fused],
    rows: dict[int, ChunkRow],
    lexical: list[RankedChunk],
    vector: list[RankedChunk],
    languages: dict[int, str],
    fusion: Fusion,
    query: str,
    find_windows: Callable[[dict[int, ChunkRow]], dict[int, NearestWindow]],
) -> list[Hit]:
    """The chosen chunks as hits, each centred on the line where the query matches best: a line
    holding its words, else where the nearest window of a chunk longer than the model reads begins."""
    wanted = snippet_terms(query)  # also in vec mode: the words the keyword half would search for
    bm25 = dict(lexical)
    distance = dict(vector)
    found_at = {
        item.chunk_id: excerpt(
            wanted, rows[item.chunk_id].text, rows[item.chunk_id].start_line, text_chars=SNIPPET_CHARS
        )
        for item in chosen
    }
    # no line holds a word of the query: the part that meaning found is the one to show
    unmatched = {cid: rows[cid] for cid, found in found_at.items() if not found.keyword and cid in distance}
    windows = find_windows(unmatched) if unmatched else {}
    hits: list[Hit] = []
    for item in chosen:
        row = rows[item.chunk_id]
        matched = matched_by(item.chunk_id in bm25, item.chunk_id in distance)
        similarity = 1.0 - distance[item.chunk_id] if item.chunk_id in distance else None
        window = windows.get(item.chunk_id)
        found = found_at[item.chunk_id]
        if window is not None and window.line:
            found = excerpt(wanted, row.text, row.start_line, text_chars=SNIPPET_CHARS, meaning_line=window.line)
        hits.append(
            Hit(
                source=row.source_id,
                path=row.path,
                line=row.start_line,
                end_line=row.end_line,
                match_line=found.match_line,
                breadcrumb=section_breadcrumb(row.breadcrumb, row.text, row.start_line, found.match_line),
                score=round(item.place if item.place is not None else item.score, 6),
                text=found.text,
                rev=row.indexed_rev if row.kind == "git" else None,
                matched=matched,
                snippet=found.snippet,
                chunk_text=row.text,
                explain={
                    "bm25_rank": item.ranks.get("bm25"),
                    "bm25": round(bm25[item.chunk_id], 4) if item.chunk_id in bm25 else None,
                    "vec_rank": item.ranks.get("vec"),
                    "distance": round(distance[item.chunk_id], 4) if item.chunk_id in distance else None,
                    "similarity": round(similarity, 4) if similarity is not None else None,
                    "rrf": round(item.score, 6),
                    # meaning-only hits keep the meaning half's order among themselves: the score
                    # of the place this one took, where it is not its own
                    "place": round(item.place, 6) if item.place is not None else None,
                    "language": languages.get(item.chunk_id),
                    "keyword_blind": item.chunk_id in fusion.blind,
                    # another language's meaning hit at its language's level: the keyword half's
                    # best hits were ranked by meaning as if it were not ahead of them
                    "background": item.chunk_id in fusion.background,
                    # why the hit sits where it does: what each half added to `rrf`, the rank the
                    # keyword half was taken to give a note in another language or script (where
                    # it found one, only when better than its own rank), and the identifier
                    # terms held as typed (exact-first puts those ahead of prefix-only matches)
                    "bm25_part": part_of(item, "bm25"),
                    "bm25_counted_rank": item.imputed.get("bm25"),
                    "vec_part": part_of(item, "vec"),
                    "vec_counted_rank": item.counted.get("vec"),
                    "exact_terms": fusion.exact.get(item.chunk_id),
                    "verbatim": item.chunk_id in fusion.verbatim,
                    # its score equals the one fused just above it: why that one came first
                    "tie": item.tie,
                    # a chunk longer than the model reads, found by meaning alone: which of its
                    # windows was nearest (from 1) and how many it has
                    "window": window.window + 1 if window is not None else None,
                    "windows": window.windows if window is not None else None,
                },
            )
        )
    return hits


def window_finder(
    store: IndexReader, vector: np.ndarray | None, embedder_factory: Callable[[], Embedder]
) -> Callable[[dict[int, ChunkRow]], dict[int, NearestWindow]]:
    """Per chunk of those given that has several windows: its window nearest the query, and the
    line of its text where that window's own part begins. Asked only for hits no line of which
    holds a query word. Where the index holds no lines for a text (they are written when it is
    embedded, a step that can be cut short), the embedder that cut its windows cuts it again:
    it is loaded, having embedded the query."""

    def find(rows: dict[int, ChunkRow]) -> dict[int, NearestWindow]:
        if vector is None:
            return {}
        found = {}
        for chunk_id, nearest in store.nearest_windows(vector, rows).items():
            line = 0 if nearest.window == 0 else nearest.line
            if line is None:
                row = rows[chunk_id]
                starts = embedder_factory().window_lines(row.breadcrumb, row.text)
                line = starts[nearest.window] if len(starts) == nearest.windows else None
            if line is not None:  # else cut otherwise: the chunk's head stands
                found[chunk_id] = nearest._replace(line=line)
        return found

    return find


def part_of(item: Fused, name: str) -> float | None:
    return round(item.parts[name], 6) if name in item.parts else None
