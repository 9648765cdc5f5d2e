"""Reading files of the sources: `show` (whole files or a line range, every source that has the
path) and `get` (a window of lines for an agent, with a pointer to the rest)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.config import GitSource
from indexer.errors import NotesSearchError, SourceError
from indexer.filetext import line_break, text_lines

if TYPE_CHECKING:
    from indexer.config import Config
    from indexer.store import IndexReader
    from search.refs import Ref
    from search.service import NotesService


@dataclass(frozen=True)
class LineRange:
    """Lines `start`..`end` (1-based, inclusive) of a file of `total` lines, numbered as the
    chunker and grep number them. `lines` hold the content without its line break (CRLF's
    "\\r" included); `line_ending` is how the file ends its lines: "\\r\\n" when every one
    of them ends in CRLF, else "\\n" (an old-Mac file's lone "\\r" would be escaped on a terminal)."""

    start: int
    end: int
    total: int
    lines: tuple[str, ...]
    line_ending: str = "\n"

    @property
    def text(self) -> str:
        """The lines as the file writes them, each with its line ending (what `show` prints)."""
        return "".join(line + self.line_ending for line in self.lines)


def line_range(text: str, start: int = 1, count: int | None = None) -> LineRange:
    """Up to `count` lines of `text` from line `start` (to the end when `count` is None). A
    `start` past the last line gives no lines (`end` < `start`): the caller says so in its words."""
    raw = text_lines(text)
    total = len(raw)
    end = total if count is None else min(total, start + count - 1)
    crlf = line_break(text) == "\n" and "\r\n" in text and text.count("\n") == text.count("\r\n")
    lines = tuple(line.removesuffix("\r") for line in raw[start - 1 : end])
    return LineRange(start, end, total, lines, "\r\n" if crlf else "\n")


@dataclass(frozen=True)
class FileView:
    """One file of one source (git: at the indexed rev), whole or a line range of it."""

    source_id: str
    path: str
    rev: str | None
    range: LineRange | None  # None: the whole file
    text: str
    total_lines: int

    def to_json(self) -> dict[str, object]:
        """The JSON shape of `show`."""
        return {
            "source": self.source_id,
            "path": self.path,
            "rev": self.rev,
            "start_line": self.range.start if self.range else 1,
            "end_line": self.range.end if self.range else self.total_lines,
            "text": self.text,
        }


@dataclass(frozen=True)
class LineWindow:
    """What `get` returns: a window of a file, and where the rest starts when there is more."""

    view: FileView
    truncated: bool
    next_from_line: int | None
    notice: str | None


def show(service: NotesService, ref: str) -> list[FileView]:
    """A bare PATH is read from every source that has it."""
    from search.refs import missing_file, parse_ref, sources_having

    config = service.config
    parsed = parse_ref(ref, config.sources)
    with service.reading_if_indexed() as store:
        source_ids = [parsed.source_id] if parsed.source_id else sources_having(config, store, parsed.path)
        if not source_ids:
            raise missing_file(config, store, parsed.path)
        return [_view(config, store, source_id, parsed) for source_id in source_ids]


def _view(config: Config, store: IndexReader | None, source_id: str, ref: Ref) -> FileView:
    """One file (its text exactly as read), or the requested line range of it."""
    from search.refs import confine, indexed_rev, read_text

    text = read_text(config, store, source_id, ref.path)
    source = config.source(source_id)
    rel = confine(config, source_id, ref.path)
    rev = indexed_rev(store, source) if isinstance(source, GitSource) else None
    if ref.line is None:
        return FileView(source_id, rel, rev, None, text, len(text_lines(text)))
    lines = line_range(text, ref.line, ref.count)
    if ref.line > lines.total:
        raise SourceError(f"{source_id}:{rel} has {lines.total} lines; line {ref.line} is past the end")
    return FileView(source_id, rel, rev, lines, lines.text, lines.total)


def get(service: NotesService, path: str, from_line: int | None, max_lines: int) -> LineWindow:
    from search.refs import confine, indexed_rev, missing_file, parse_ref, read_text, sources_having

    config = service.config
    with service.reading_if_indexed() as store:
        ref = parse_ref(path.strip(), config.sources)
        if ref.source_id is not None:
            source_id = ref.source_id
        else:
            having = sources_having(config, store, ref.path)
            if not having:
                raise missing_file(config, store, ref.path)
            if len(having) > 1:
                choices = ", ".join(f"{sid}:{ref.path}" for sid in having)
                raise NotesSearchError(f"{ref.path!r} exists in several sources; name one: {choices}")
            source_id = having[0]
        rel = confine(config, source_id, ref.path)
        text = read_text(config, store, source_id, rel)
        source = config.sources[source_id]
        rev = indexed_rev(store, source) if isinstance(source, GitSource) else None
    start = from_line or ref.line or 1
    if ref.count is not None and from_line is None:
        max_lines = min(max_lines, ref.count)
    window = line_range(text, start, max_lines)
    if window.total and start > window.total:
        raise NotesSearchError(f"{source_id}:{rel}: from_line {start} is past the end ({window.total} lines)")
    truncated = window.end < window.total
    view = FileView(source_id, rel, rev, window, "\n".join(window.lines), window.total)
    return LineWindow(
        view,
        truncated=truncated,
        next_from_line=window.end + 1 if truncated else None,
        notice=f"showing lines {start}-{window.end} of {window.total}; call get with from_line={window.end + 1} for more"
        if truncated
        else None,
    )
