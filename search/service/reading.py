"""Reading files of the sources: `show` (whole files or a line range, every source that has the
path) and `get` (a window of lines for an agent, with a pointer to the rest)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.config import GitSource
from indexer.errors import NotesSearchError, SourceError

if TYPE_CHECKING:
    from indexer.config import Config
    from indexer.store import Store
    from search.refs import Ref
    from search.service import NotesService


@dataclass(frozen=True)
class LineRange:
    """Lines `start`..`end` (1-based, inclusive) of a file of `total` lines."""

    start: int
    end: int
    total: int
    lines: tuple[str, ...]
    line_ending: str = "\n"


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


def _view(config: Config, store: Store | None, source_id: str, ref: Ref) -> FileView:
    """One file, or the requested line range of it."""
    from search.refs import confine, indexed_rev, read_text, text_lines

    text = read_text(config, store, source_id, ref.path)
    source = config.source(source_id)
    rel = confine(config, source_id, ref.path)
    lines = text_lines(text)
    line_range = None
    if ref.line is not None:
        if ref.line > len(lines):
            raise SourceError(f"{source_id}:{rel} has {len(lines)} lines; line {ref.line} is past the end")
        start = ref.line
        end = len(lines) if ref.count is None else min(len(lines), ref.line + ref.count - 1)
        line_range = LineRange(start, end, len(lines), tuple(lines[start - 1 : end]))
        text = "\n".join(lines[start - 1 : end]) + "\n"
    rev = indexed_rev(store, source) if isinstance(source, GitSource) else None
    return FileView(source_id, rel, rev, line_range, text, len(lines))


def get(service: NotesService, path: str, from_line: int | None, max_lines: int) -> LineWindow:
    from search.refs import confine, indexed_rev, missing_file, parse_ref, read_text, sources_having, text_lines

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
    lines = [line.removesuffix("\r") for line in text_lines(text)]
    start = from_line or ref.line or 1
    if ref.count is not None and from_line is None:
        max_lines = min(max_lines, ref.count)
    if lines and start > len(lines):
        raise NotesSearchError(f"{source_id}:{rel}: from_line {start} is past the end ({len(lines)} lines)")
    end = min(len(lines), start + max_lines - 1)
    truncated = end < len(lines)
    window = tuple(lines[start - 1 : end])
    view = FileView(source_id, rel, rev, LineRange(start, end, len(lines), window), "\n".join(window), len(lines))
    return LineWindow(
        view,
        truncated=truncated,
        next_from_line=end + 1 if truncated else None,
        notice=f"showing lines {start}-{end} of {len(lines)}; call get with from_line={end + 1} for more"
        if truncated else None,
    )
