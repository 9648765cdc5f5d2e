"""File references and path confinement for `show`, `grep` and the MCP server.

Every path a caller hands us is relative to one source's root, as results print it. Before
anything is read, the path is normalised and confined: no absolute or Windows paths, no NUL, no `..` above
the root and, for workspace sources, no symlink whose real target leaves the real root. Files
inside bare mirrors are read from the object database at the indexed revision, so `show`
prints exactly the version that search results point at.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from indexer.collections import is_utf8_name, nfc
from indexer.config import Config, GitSource, Source, WorkspaceSource
from indexer.errors import FileNotAtRevision, NotesSearchError, PathOutsideSources, SourceError
from indexer.filetext import looks_binary
from indexer.globs import match_any
from indexer.store import IndexReader

_LINE_TAIL = re.compile(r":(-?[0-9]+)(?::(-?[0-9]+))?\Z")  # signed, so ':-1' is a bad line, not a file name
_DRIVE = re.compile(r"[A-Za-z]:(?:[\\/]|\Z)")


@dataclass(frozen=True)
class Ref:
    """`[SOURCE:]PATH[:LINE[:COUNT]]`; LINE is 1-based, COUNT the number of lines from it."""

    source_id: str | None
    path: str
    line: int | None = None
    count: int | None = None

    def __str__(self) -> str:
        """The ref as every front end prints it and `parse_ref` reads it back: `source:path:line`
        for a hit, `source:path` for a file."""
        text = self.path if self.source_id is None else f"{self.source_id}:{self.path}"
        if self.line is not None:
            text += f":{self.line}" if self.count is None else f":{self.line}:{self.count}"
        return text


def split_source(text: str, source_ids: Collection[str]) -> tuple[str | None, str]:
    """Split a leading `SOURCE:`; the token counts only when it is a configured id, since
    paths may contain ':' themselves."""
    head, sep, rest = text.partition(":")
    if sep and head in source_ids:
        return head, rest
    return None, text


def parse_ref(text: str, source_ids: Collection[str]) -> Ref:
    """Parse a reference; trailing `:N` / `:N:M` are always a line and a count."""
    source_id, rest = split_source(text, source_ids)
    line = count = None
    tail = _LINE_TAIL.search(rest)
    if tail is not None and tail.start() > 0:
        rest = rest[: tail.start()]
        line = int(tail[1])
        count = int(tail[2]) if tail[2] is not None else None
        if line < 1:
            raise NotesSearchError(
                f"{text!r}: line {line} does not exist: lines are numbered from 1 ([SOURCE:]PATH[:LINE[:COUNT]])"
            )
        if count is not None and count < 1:
            raise NotesSearchError(
                f"{text!r}: a line count must be at least 1, not {count} ([SOURCE:]PATH[:LINE[:COUNT]])"
            )
    _check_relative(rest, text)
    if all(part in ("", ".") for part in rest.split("/")):
        raise NotesSearchError(f"{text!r}: no file path (expected [SOURCE:]PATH[:LINE[:COUNT]])")
    return Ref(source_id, rest, line, count)


def _check_relative(path: str, shown: str) -> None:
    """Reject what can never name a file inside a source, whichever source it is."""
    if "\0" in path:
        raise PathOutsideSources(f"{shown!r}: a path cannot contain a NUL byte")
    if not is_utf8_name(path):
        raise PathOutsideSources(f"{shown!r}: not valid UTF-8, so no indexed file can have this path")
    # a backslash is an ordinary character of a POSIX name (`a\b.md` can be indexed): only a
    # leading one (`\\server\share`, `\x`) or a drive prefix says "absolute" or "Windows"
    if path.startswith(("/", "\\")) or _DRIVE.match(path):
        raise PathOutsideSources(
            f"{shown!r}: paths are relative to a source root and use '/' (e.g. notes:folder/file.md); "
            "absolute and Windows paths are refused"
        )


def _normalise(source_id: str, path: str, shown: str | None = None) -> str:
    """Lexically resolve '.', '..' and empty segments; '' means the source root itself. An error
    names `shown` (default: the path in the source)."""
    shown = shown or str(Ref(source_id, path))
    _check_relative(path, shown)
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise PathOutsideSources(f"{shown}: '..' leads outside the source root")
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def disk_path(root: str, rel: str) -> str:
    """`rel` on disk. Index paths are NFC; a name stored NFD (macOS) is found by comparing each
    missing component with its folder's entries in NFC form."""
    path = os.path.join(root, rel)
    if os.path.lexists(path):
        return path
    current = root
    for part in rel.split("/"):
        candidate = os.path.join(current, part)
        if not os.path.lexists(candidate):
            try:
                match = next((e for e in os.listdir(current) if nfc(e) == part), None)
            except OSError:
                match = None
            if match is None:
                return path  # really absent: the caller reports it
            candidate = os.path.join(current, match)
        current = candidate
    return current


def deleted_from_disk(config: Config, files: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of the (source id, index path) files of workspace sources no longer exist on disk:
    deleted since the last sync, still in the index. One stat per file (a search asks for its
    hits' files only); git sources' files live in the mirror at the indexed rev, never gone,
    nor are those of a root that is away (`root_away`)."""
    gone = set()
    root_is_away: dict[str, bool] = {}
    for source_id, rel in set(files):
        source = config.sources.get(source_id)
        if isinstance(source, WorkspaceSource) and not os.path.exists(disk_path(os.fspath(source.root), rel)):
            if source_id not in root_is_away:
                root_is_away[source_id] = root_away(os.fspath(source.root))
            if not root_is_away[source_id]:
                gone.add((source_id, rel))
    return gone


def away(source: WorkspaceSource) -> str:
    """Why a source's notes cannot be read now, when `root_away` says so."""
    state = (
        "is empty"
        if os.path.isdir(source.root)
        else "is not a folder"
        if os.path.lexists(source.root)
        else "does not exist"
    )
    return f"the folder {source.root} {state} (a drive not mounted?)"


def root_away(root: str) -> bool:
    """A root that is missing or empty is a drive not mounted (the sync keeps its index), not
    every note deleted: its hits stand, from the index."""
    try:
        with os.scandir(root) as entries:
            return next(entries, None) is None
    except OSError:
        return True


def _real_inside(source: WorkspaceSource, rel: str) -> str:
    """The real on-disk path of `rel`; PathOutsideSources if a symlink leads out of the root."""
    real_root = os.path.realpath(source.root)
    target = os.path.realpath(disk_path(real_root, rel)) if rel else real_root
    if target != real_root and not target.startswith(real_root.rstrip(os.sep) + os.sep):
        raise PathOutsideSources(
            f"{Ref(source.id, rel)}: resolves outside the source root {source.root} (a symlink?); refused"
        )
    return target


def lexically_inside(path: str) -> None:
    """PathOutsideSources, naming `path` as typed, when no source could hold it (absolute, '..'
    above the root, a NUL): said before a source is tried, whose name the user never typed."""
    _normalise("", path, shown=path)


def confine(config: Config, source_id: str, path: str) -> str:
    """The normalised path of `path` inside the source ('' for its root), or PathOutsideSources."""
    source = config.source(source_id)
    rel = _normalise(source_id, path)
    if isinstance(source, WorkspaceSource):
        _real_inside(source, rel)
    return rel


def confine_in(config: Config, source_ids: Collection[str], path: str) -> str:
    """`confine` in each of the sources (the same lexical result everywhere; each workspace
    source also checks its own symlinks); '' for their roots."""
    rel = ""
    for source_id in source_ids:
        rel = confine(config, source_id, path)
    return rel


def _in_scope(source: Source, rel: str) -> bool:
    """Only files the index could hold are readable: the config's exclude rules keep secrets out."""
    if isinstance(source, WorkspaceSource) and ".git" in rel.split("/"):
        return False
    return source.selection.admits(rel)


def indexed_rev(store: IndexReader | None, source: GitSource) -> str:
    """The commit the index was built from; a git source is only readable once synced."""
    rev = store.source_state(source.id).indexed_rev if store is not None else None
    if rev is None:
        raise SourceError(f"git source {source.id!r} was never synced: run `notes-search sync --source {source.id}`")
    return rev


def _read_blob(source: GitSource, rev: str, path: str) -> bytes:
    from indexer.sources import git as git_source  # pygit2 loads only when a mirror is read

    return git_source.read_blob(source, rev, path)


def _decode(data: bytes, where: str) -> str:
    """What `show` prints: bad bytes are replaced, since the user asked for this very file (the
    indexer instead skips a file that is not UTF-8, as a wrong character would be searchable)."""
    if looks_binary(data):
        raise SourceError(f"{where}: binary file, not shown")
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def read_text(config: Config, store: IndexReader | None, source_id: str, path: str) -> str:
    """A file's text: workspace files from disk (confined), mirror files at the indexed rev."""
    source = config.source(source_id)
    rel = confine(config, source_id, path)
    where = str(Ref(source_id, rel))
    if not rel:
        raise SourceError(f"{Ref(source_id, path)}: names the source root, not a file")
    if not _in_scope(source, rel):
        if source.selection.may_contain(rel) and _is_folder(config, store, source, rel):
            raise SourceError(f"{where}: is a folder, not a file (search it with --path, or list it with toc)")
        if excluded := excluded_file(config, source_id, rel):
            raise PathOutsideSources(f"{where}: {excluded}")
        raise PathOutsideSources(f"{where}: outside the source's scope (paths/include/exclude in the config)")
    if isinstance(source, GitSource):
        rev = indexed_rev(store, source)
        try:
            data = _read_blob(source, rev, rel)
        except FileNotAtRevision as exc:
            raise SourceError(f"{exc}{did_you_mean(config, store, rel, [source_id])}") from None
        if len(data) > config.max_file_bytes:
            raise SourceError(f"{where}: too large ({len(data)} bytes > {config.max_file_bytes})")
        return _decode(data, where)
    real = _real_inside(source, rel)
    try:
        mode = os.stat(real).st_mode
    except (FileNotFoundError, NotADirectoryError):
        if store is not None and source_id in store.sources_with_file(nfc(rel)):
            if root_away(os.fspath(source.root)):
                raise SourceError(f"{where}: cannot be read now: {away(source)}") from None
            raise SourceError(f"{where}: {DELETED_SINCE_SYNC}") from None
        raise SourceError(f"{where}: no such file{did_you_mean(config, store, rel, [source_id])}") from None
    except OSError as exc:  # a folder on the way we may not search: say so, not "no such file"
        raise SourceError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):  # also keeps a FIFO from blocking the reader forever
        raise SourceError(f"{where}: {'is a folder, not a file' if stat.S_ISDIR(mode) else 'not a regular file'}")
    try:
        with open(real, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > config.max_file_bytes:
                raise SourceError(f"{where}: too large ({size} bytes > {config.max_file_bytes})")
            data = f.read()
    except OSError as exc:
        raise SourceError(f"{where}: cannot read: {exc.strerror or exc}") from None
    return _decode(data, where)


def _has_file(store: IndexReader | None, source: Source, rel: str, indexed: set[str]) -> bool:
    """Is `rel` a readable file of the source? Workspace: the disk decides (the index may lag
    it); git: the index at its rev, else the tree (files the index skipped are still there)."""
    if not rel or not _in_scope(source, rel):
        return False
    if isinstance(source, WorkspaceSource):
        return os.path.isfile(_real_inside(source, rel))
    if source.id in indexed:
        return True
    try:
        _read_blob(source, indexed_rev(store, source), rel)
    except SourceError:
        return False
    return True


def excluded_file(config: Config, source_id: str, rel: str) -> str | None:
    """Why the confined `rel`, a file on disk, is kept out of the index by the source's
    paths/include/exclude (or `.git`); None when it is not such a file. Whoever re-indexes,
    shows or asks the status of it learns what to change, not only that something did."""
    source = config.sources[source_id]
    if not rel or not isinstance(source, WorkspaceSource) or _in_scope(source, rel):
        return None
    if not os.path.isfile(_real_inside(source, rel)):
        return None
    return f"excluded by the config: {_left_out_by(source, rel)}"


def _is_folder(config: Config, store: IndexReader | None, source: Source, rel: str) -> bool:
    """A folder on disk (workspace), or one the index holds files below (a git source's, or a
    workspace folder deleted since the last sync)."""
    if isinstance(source, WorkspaceSource):
        on_disk = disk_path(os.fspath(source.root), rel)
        if os.path.lexists(on_disk):
            return os.path.isdir(on_disk)
    return has_path(config, store, source.id, rel)


SHOWN_PATTERNS = 3  # of a config key, in a message


def _left_out_by(source: Source, rel: str) -> str:
    """Which key of the source's config keeps the file `rel` out, e.g. "`include` (*.md) does
    not admit it"."""
    selection = source.selection
    if isinstance(source, WorkspaceSource) and ".git" in rel.split("/"):
        return "it is inside a .git folder, which is never read"
    key = f"sources.{source.kind}.{source.id}"
    if name := selection.hidden_name(rel):
        return f"{name} is hidden (its name starts with '.'); a pattern in `{key}.paths` that names it admits it"
    if not match_any(selection.paths, rel):
        return f"`{key}.paths` ({_patterns(selection.paths)}) does not reach it"
    if not match_any(selection.include, rel):
        return f"`{key}.include` ({_patterns(selection.include)}) does not admit it"
    return f"`{key}.exclude` ({_patterns(selection.exclude)}) leaves it out"


def _patterns(patterns: tuple[str, ...]) -> str:
    if not patterns:
        return "none"
    more = f", … ({len(patterns)} patterns)" if len(patterns) > SHOWN_PATTERNS else ""
    return ", ".join(patterns[:SHOWN_PATTERNS]) + more


def has_path(config: Config, store: IndexReader | None, source_id: str, rel: str, *, in_tree: bool = False) -> bool:
    """Is the confined `rel` a file or folder of the source, on disk (workspace) or in the index?
    A folder deleted since the last sync still counts: re-indexing it is how its entries go.
    `in_tree`: a git source's file or folder at the indexed rev that the scope admits counts
    too (a note the sync skipped as not UTF-8, for `status` to say why); it opens the mirror,
    so only a path nothing else has is looked for there."""
    source = config.sources[source_id]
    if isinstance(source, WorkspaceSource) and os.path.lexists(disk_path(os.fspath(source.root), rel)):
        return True
    if store is None:
        return False
    if source_id in store.sources_with_path(nfc(rel)):
        return True
    return in_tree and isinstance(source, GitSource) and _in_indexed_tree(store, source, nfc(rel))


def _in_indexed_tree(store: IndexReader, source: GitSource, rel: str) -> bool:
    """A file the scope admits, or a folder it may hold notes in, of the indexed commit."""
    from indexer.sources import git as git_source  # pygit2 loads only when a mirror is read

    rev = store.source_state(source.id).indexed_rev
    try:
        kind = git_source.entry_kind(source, rev, rel) if rev is not None else None
    except SourceError:  # no mirror, or not the commit: the index is all there is to go by
        return False
    if kind == "folder":
        return source.selection.may_contain(rel)
    return kind == "file" and source.selection.admits(rel)


def missing_file(config: Config, store: IndexReader | None, path: str) -> SourceError:
    """The error for a bare PATH that no source has as a file: say so when it is a folder, or
    a file deleted since the last sync."""
    deleted = _deleted_but_indexed(config, store, path)
    if deleted:
        return SourceError(f"{', '.join(deleted)}: {DELETED_SINCE_SYNC}")
    folders = [
        str(Ref(source_id, rel))
        for source_id, rel in _confined_in_each(config, path)
        if config.sources[source_id].selection.may_contain(rel) and has_path(config, store, source_id, rel)
    ]
    if folders:
        return SourceError(
            f"{path!r} is a folder, not a file ({', '.join(folders)}); search it with --path, or list it with toc"
        )
    return SourceError(
        f"{path!r}: no such file in any source ({', '.join(config.sources) or 'none configured'})"
        f"{did_you_mean(config, store, path)}"
    )


SUGGESTED = 5  # indexed files named by "did you mean"


def did_you_mean(
    config: Config, store: IndexReader | None, path: str, source_ids: Collection[str] | None = None
) -> str:
    """ "; did you mean notes:devops/x.md?" for a PATH no source has, or "" when nothing is like it."""
    refs = similar_files(config, store, path, source_ids)
    if not refs:
        return ""
    if len(refs) == 1:
        return f"; did you mean {refs[0]}?"
    more = f", … ({len(refs)} in all)" if len(refs) > SUGGESTED else ""
    return f"; did you mean one of: {', '.join(refs[:SUGGESTED])}{more}?"


def similar_files(
    config: Config, store: IndexReader | None, path: str, source_ids: Collection[str] | None = None
) -> list[str]:
    """The indexed files (as refs) a bare or misplaced PATH may mean: those with its file name
    (case aside, `.md` optional) anywhere in the source, else those whose names are close to it.
    A path that names no file only costs the listing of the index's paths, on this error path."""
    wanted = nfc(path).rstrip("/").rsplit("/", 1)[-1].casefold()
    if store is None or not wanted:
        return []
    by_name: dict[str, list[str]] = {}
    for source_id in source_ids if source_ids is not None else config.sources:
        for rel in sorted(store.known_files(source_id)):
            name = rel.rsplit("/", 1)[-1].casefold()
            by_name.setdefault(name, []).append(str(Ref(source_id, rel)))
    same = [ref for name, refs in by_name.items() if wanted in (name, os.path.splitext(name)[0]) for ref in refs]
    if same:
        return same
    import difflib  # only on this error path

    close = difflib.get_close_matches(wanted, list(by_name), n=SUGGESTED, cutoff=0.8)
    return [ref for name in close for ref in by_name[name]]


DELETED_SINCE_SYNC = "no such file: deleted since the last sync (the next `notes-search sync` drops it from the index)"


def _confined_in_each(config: Config, path: str) -> Iterator[tuple[str, str]]:
    """(source id, confined path) for each source that admits `path` as a path below its root."""
    for source_id in config.sources:
        try:
            rel = confine(config, source_id, path)
        except PathOutsideSources:
            continue
        if rel:
            yield source_id, rel


def _deleted_but_indexed(config: Config, store: IndexReader | None, path: str) -> list[str]:
    """`source:path` of each workspace source whose index still has the file `path` that its
    disk no longer has."""
    if store is None:
        return []
    indexed = [
        (source_id, nfc(rel))
        for source_id, rel in _confined_in_each(config, path)
        if source_id in store.sources_with_file(nfc(rel))
    ]
    gone = deleted_from_disk(config, indexed)
    return [str(Ref(source_id, rel)) for source_id, rel in indexed if (source_id, rel) in gone]


def sources_having(config: Config, store: IndexReader | None, path: str) -> list[str]:
    """Every configured source that has `path`, in config order (a bare PATH means all of them).

    When no source has it and some source refused the path (e.g. a symlink out of its root),
    that refusal is raised instead of an empty answer, so the user learns why.
    """
    found: list[str] = []
    refused: PathOutsideSources | None = None
    indexed: set[str] | None = None
    for source_id, source in config.sources.items():
        try:
            rel = confine(config, source_id, path)
            if indexed is None:  # the normalised path is the same in every source
                indexed = set(store.sources_with_file(nfc(rel))) if store is not None and rel else set()
            if _has_file(store, source, rel, indexed):
                found.append(source_id)
        except PathOutsideSources as exc:
            refused = refused or exc
    if not found and refused is not None:
        raise refused
    return found


def single_source(config: Config, store: IndexReader | None, ref: Ref) -> str:
    """The one source a ref reads from: its `SOURCE:`, else the only source that has the path
    (an error when none or several have it)."""
    if ref.source_id is not None:
        return ref.source_id
    having = sources_having(config, store, ref.path)
    if not having:
        raise missing_file(config, store, ref.path)
    if len(having) > 1:
        choices = ", ".join(str(Ref(sid, ref.path)) for sid in having)
        raise NotesSearchError(f"{ref.path!r} exists in several sources; name one: {choices}")
    return having[0]
