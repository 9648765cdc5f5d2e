"""Reading files of the sources: `show` (whole files or a line range, every source that has the
path), `get` (a window of lines for an agent, with a pointer to the rest), and `read_many`
(several refs and globs at once, under one size cap: CLI `show` and MCP `get` alike)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
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
    truncated: bool = False  # cut short by the size cap of several files at once

    @property
    def next_line(self) -> int | None:
        """Where the rest of a file that the cap cut short starts; None: nothing was cut."""
        return self.range.end + 1 if self.truncated and self.range is not None else None

    def to_json(self) -> dict[str, object]:
        """The JSON shape of `show`."""
        return {
            "source": self.source_id,
            "path": self.path,
            "rev": self.rev,
            "start_line": self.range.start if self.range else 1,
            "end_line": self.range.end if self.range else self.total_lines,
            "truncated": self.truncated,
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
    from search.service.locating import ref_of_file

    config = service.config
    parsed = parse_ref(ref_of_file(config, ref), config.sources)
    with service.reading_if_indexed() as store:
        source_ids = [parsed.source_id] if parsed.source_id else sources_having(config, store, parsed.path)
        if not source_ids:
            raise missing_file(config, store, parsed.path)
        return [_view(config, store, source_id, parsed) for source_id in source_ids]


def _view(config: Config, store: IndexReader | None, source_id: str, ref: Ref) -> FileView:
    """One file (its text exactly as read), or the requested line range of it."""
    from search.refs import Ref, confine, indexed_rev, read_text

    text = read_text(config, store, source_id, ref.path)
    source = config.source(source_id)
    rel = confine(config, source_id, ref.path)
    rev = indexed_rev(store, source) if isinstance(source, GitSource) else None
    if ref.line is None:
        return FileView(source_id, rel, rev, None, text, len(text_lines(text)))
    lines = line_range(text, ref.line, ref.count)
    if ref.line > lines.total:
        raise SourceError(f"{Ref(source_id, rel)} has {lines.total} lines; line {ref.line} is past the end")
    return FileView(source_id, rel, rev, lines, lines.text, lines.total)


def get(service: NotesService, path: str, from_line: int | None, max_lines: int, max_bytes: int) -> LineWindow:
    from search.refs import Ref, confine, indexed_rev, parse_ref, read_text, single_source
    from search.service.locating import ref_of_file

    config = service.config
    with service.reading_if_indexed() as store:
        ref = parse_ref(ref_of_file(config, path.strip()), config.sources)
        source_id = single_source(config, store, ref)
        rel = confine(config, source_id, ref.path)
        text = read_text(config, store, source_id, rel)
        source = config.sources[source_id]
        rev = indexed_rev(store, source) if isinstance(source, GitSource) else None
    start = from_line or ref.line or 1
    if ref.count is not None and from_line is None:
        max_lines = min(max_lines, ref.count)
    window = line_range(text, start, max_lines)
    if window.total and start > window.total:
        raise NotesSearchError(f"{Ref(source_id, rel)}: from_line {start} is past the end ({window.total} lines)")
    window, clipped = _fitted(window, max_bytes)
    truncated = window.end < window.total
    view = FileView(source_id, rel, rev, window, "\n".join(window.lines), window.total)
    notices = [f"line {start} is cut at {max_bytes} bytes (grep finds a word in it)"] if clipped else []
    if truncated:
        notices.append(
            f"showing lines {start}-{window.end} of {window.total}; call get with from_line={window.end + 1} for more"
        )
    return LineWindow(
        view,
        truncated=truncated,
        next_from_line=window.end + 1 if truncated else None,
        notice="; ".join(notices) or None,
    )


def _fitted(lines: LineRange, max_bytes: int) -> tuple[LineRange, bool]:
    """The first of `lines` that fit in `max_bytes` of UTF-8, at least one; a first line longer
    than that alone is cut to fit (True: it was), since a pasted log or an inline image can be
    one line of megabytes, which no paging by lines would ever make smaller."""
    kept: list[str] = []
    size = 0
    for line in lines.lines:
        size += len((line + lines.line_ending).encode("utf-8", errors="replace"))
        if kept and size > max_bytes:
            break
        kept.append(line)
    clipped = False
    if kept and len(first := kept[0].encode("utf-8", errors="replace")) > max_bytes:
        head = first[:max_bytes].decode("utf-8", errors="ignore")  # a character cut in two is left out
        kept[0] = f"{head}… [cut: the line has {len(first):,} bytes]"
        clipped = True
    if len(kept) == len(lines.lines) and not clipped:
        return lines, False
    end = lines.start + len(kept) - 1
    return LineRange(lines.start, end, lines.total, tuple(kept), lines.line_ending), clipped


# ---- several files at once ----------------------------------------------------------------------

MANY_MAX_LINES = 2000  # in all, over every file of one call
MANY_MAX_BYTES = 64 * 1024  # UTF-8 bytes of text in all: an agent pays for each one
GLOB_CHARS = frozenset("*?")


@dataclass(frozen=True)
class Unread:
    """A ref or glob of a multi-read that could not be read, with its one-line reason."""

    ref: str
    error: str

    def to_json(self) -> dict[str, object]:
        return {"ref": self.ref, "error": self.error}


@dataclass(frozen=True)
class CutShort:
    """A file of several that the cap cut short: its lines up to `end` of `total` were read."""

    ref: Ref  # source:path
    end: int
    total: int

    @property
    def rest(self) -> Ref:
        """Where the rest starts (source:path:line)."""
        return replace(self.ref, line=self.end + 1)


@dataclass(frozen=True)
class ManyViews:
    """What `read_many` read (in the order asked, each file once), what the cap left out (the
    files after the one that reached it, not read), and what could not be read."""

    views: list[FileView]
    omitted: list[str]  # source:path of each file left out
    failed: list[Unread]
    max_lines: int
    max_bytes: int
    lines: int = 0  # lines and bytes of the views, in all
    bytes: int = 0

    @property
    def cut_short(self) -> list[CutShort]:
        """The files the cap cut short (a first file alone larger than the cap), each with where
        its rest starts: what a front end tells the reader to ask for next."""
        from search.refs import Ref

        return [
            CutShort(Ref(view.source_id, view.path), view.range.end, view.range.total)
            for view in self.views
            if view.truncated and view.range is not None
        ]

    @property
    def nothing_read(self) -> bool:
        """Every ref failed: their reasons are the whole answer."""
        return not self.views and bool(self.failed)

    def to_json(self) -> dict[str, object]:
        """`show --json`: the files, and (empty lists when none) what was left out or failed."""
        return {
            "results": [view.to_json() for view in self.views],
            "omitted": self.omitted,
            "errors": [item.to_json() for item in self.failed],
        }


def is_glob(ref: str) -> bool:
    """`*`, `?` or `**` in a ref make it a pattern over the files of its source(s)."""
    return any(char in GLOB_CHARS for char in ref)


def asks_for_several(refs: Sequence[str]) -> bool:
    """Several refs or any glob: the size cap applies and a bad ref does not stop the others.
    One plain ref keeps the single-file behaviour (no cap; its error is the command's error)."""
    return len(refs) != 1 or is_glob(refs[0])


def read_many(
    service: NotesService, refs: Sequence[str], *, max_lines: int = MANY_MAX_LINES, max_bytes: int = MANY_MAX_BYTES
) -> ManyViews:
    """Every file the refs and globs name, in order, until the next would pass the cap (a first
    file alone larger than the cap is cut to it). A ref that cannot be read is listed in
    `failed` with its reason and the others are still read."""
    from search.refs import Ref, parse_ref
    from search.service.locating import ref_of_file

    config = service.config
    failed: list[tuple[int, Unread]] = []  # with the position of the ref that named it
    # each file with the position of its ref, and whether a glob found it (so it exists)
    wanted: dict[tuple[str, str, int | None, int | None], tuple[int, Ref, bool]] = {}
    with service.reading_if_indexed() as store:
        for position, text in enumerate(refs):
            try:
                parsed = parse_ref(ref_of_file(config, text.strip()), config.sources)
                for source_id, ref in _expand(config, store, parsed, text):
                    key = (source_id, ref.path, ref.line, ref.count)
                    wanted.setdefault(key, (position, ref, is_glob(parsed.path)))
            except NotesSearchError as exc:
                failed.append((position, Unread(text, str(exc))))
        views: list[FileView] = []
        omitted: list[str] = []
        capped = False
        used_lines = used_bytes = 0
        for (source_id, _, _, _), (position, ref, globbed) in wanted.items():
            try:
                if capped and globbed:  # what follows the cap is named, not read
                    omitted.append(str(Ref(source_id, ref.path)))
                    continue
                # a ref typed by hand is read even past the cap: one that names no file is an
                # error to report, not a file left out
                view = _with_range(_view(config, store, source_id, ref))
            except NotesSearchError as exc:
                failed.append((position, Unread(str(Ref(source_id, ref.path)), str(exc))))
                continue
            if capped:
                omitted.append(str(Ref(source_id, ref.path)))
                continue
            lines, size = _size(view)
            if used_lines + lines <= max_lines and used_bytes + size <= max_bytes:
                views.append(view)
                used_lines, used_bytes = used_lines + lines, used_bytes + size
            else:
                capped = True
                if views:
                    omitted.append(str(Ref(view.source_id, view.path)))
                else:  # one file alone is larger than the cap: its head, and where the rest starts
                    views.append(_cut(view, max_lines, max_bytes))
                    used_lines, used_bytes = _size(views[0])
    in_order = [item for _, item in sorted(failed, key=lambda pair: pair[0])]  # as the refs were given
    return ManyViews(views, omitted, in_order, max_lines, max_bytes, used_lines, used_bytes)


def _expand(config: Config, store: IndexReader | None, ref: Ref, text: str) -> Iterator[tuple[str, Ref]]:
    """The files one ref names: a plain path in its source (bare: every source that has it, as
    `show` reads it), a glob every matching file, sorted by path, per source in config order."""
    from search.refs import confine, missing_file, sources_having

    if not is_glob(ref.path):
        source_ids = [ref.source_id] if ref.source_id else sources_having(config, store, ref.path)
        if not source_ids:
            raise missing_file(config, store, ref.path)
        for source_id in source_ids:
            yield source_id, replace(ref, source_id=source_id)
        return
    # a file whose name holds `*` or `?` is read by its own name, as a plain ref would read it:
    # the exact name before the pattern (which would match it and its neighbours)
    literal = _sources_with_literal_file(config, store, ref)
    if literal:
        for source_id in literal:
            yield source_id, replace(ref, source_id=source_id)
        return
    matched = 0
    for source_id in [ref.source_id] if ref.source_id else list(config.sources):
        pattern = confine(config, source_id, ref.path)  # '..' above the root is refused here
        for path in _glob(config, store, source_id, pattern):
            matched += 1
            yield source_id, replace(ref, source_id=source_id, path=path)
    if not matched:
        where = ref.source_id or ", ".join(config.sources) or "no sources"
        raise SourceError(f"{text!r}: no file matches in {where}")


def _sources_with_literal_file(config: Config, store: IndexReader | None, ref: Ref) -> list[str]:
    """The sources (of the ref, or all for a bare one) holding a file named exactly `ref.path`."""
    from search.refs import sources_having

    try:
        found = sources_having(config, store, ref.path)
    except NotesSearchError:  # refused as a name (outside a root): the pattern says why
        return []
    return [source_id for source_id in found if ref.source_id in (None, source_id)]


def _glob(config: Config, store: IndexReader | None, source_id: str, pattern: str) -> list[str]:
    """Files of the source matching `pattern` (`**` spans folders, `*` and `?` stay inside
    one): a workspace's files on disk (what `show` reads), a git source's indexed files."""
    from indexer.globs import literal_folder, match
    from search.refs import indexed_rev

    source = config.source(source_id)
    if isinstance(source, GitSource):
        indexed_rev(store, source)  # never synced: its one-line error
        assert store is not None
        paths = list(store.known_files(source_id))
    else:
        from indexer.sources.workspace import list_files

        folder = literal_folder(pattern)
        walked = replace(source, selection=source.selection.within(folder)) if folder else source
        paths = [listed.rel for listed in list_files(walked)]
    # the whole path must match, as a shell reads it: `*.md` is the files at the top only
    # (a config pattern without '/' would match file names at any depth)
    return sorted(path for path in paths if match(f"./{pattern}", f"./{path}"))


def _with_range(view: FileView) -> FileView:
    """A whole file's view with its lines (the MCP answer lists them; `text` stays exact)."""
    if view.range is not None:
        return view
    return replace(view, range=line_range(view.text))


def _size(view: FileView) -> tuple[int, int]:
    assert view.range is not None
    return len(view.range.lines), len(view.text.encode("utf-8", errors="replace"))


def _cut(view: FileView, max_lines: int, max_bytes: int) -> FileView:
    """The first lines of `view` that fit the cap (at least one, itself cut to fit): the rest
    starts after them."""
    assert view.range is not None
    head = view.range.lines[:max_lines]
    cut, _ = _fitted(replace(view.range, end=view.range.start + len(head) - 1, lines=head), max_bytes)
    return replace(view, range=cut, text=cut.text, truncated=True)
