"""Workspace source driver: walk a folder, compare stat, hash only on a mismatch.

Drivers never touch the database: the store hands over what it knows (`KnownFile` per path)
and applies the changes yielded here. Nothing is ever written to the source folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from indexer.collections import (
    META_FILE,
    CollectionFolder,
    WalkedFolder,
    collection_for,
    load_collections,
    nfc,
    walk_folders,
)
from indexer.config import Config, WorkspaceSource
from indexer.errors import SourceError
from indexer.filetext import LFS_POINTER_REASON, is_lfs_pointer, looks_binary, note_text
from indexer.globs import FileSelection
from indexer.model import (
    Change,
    CollectionProblem,
    Delete,
    FileVersion,
    KnownFile,
    Skipped,
    Touch,
    Unlisted,
    Upsert,
)

INBOX = "inbox.md"  # drafts at a library or collection root: never indexed (unsorted, half-written notes would crowd the results)
COVERAGE_CAP = 1000  # the coverage report stops counting here ("≥1000")

_LOG = logging.getLogger("notes_search.workspace")
# for a scan that only looks (status, a search's catch-up): what it finds unindexable is the
# sync's to log; never registered with `logging`, so importing this module configures nothing
QUIET_LOG = logging.Logger("notes_search.workspace.look")  # noqa: LOG001 - unregistered on purpose
QUIET_LOG.addHandler(logging.NullHandler())


@dataclass(frozen=True)
class ListedFile:
    """A file the walk admitted, stat'ed once: the scan compares that stat with the store's."""

    rel: str  # index path: relative, '/'-separated, NFC
    path: str  # on-disk path to open
    stat: os.stat_result


def _check_root(source: WorkspaceSource, indexed: int = 0, *, accept_empty: bool = True) -> None:
    """Refuse to scan a root that is gone, unreadable or (with files indexed from it) empty.

    Each of these looks like "every note was deleted" to a walk, and each is more often a
    drive that is not mounted or a permission slip: the source fails with one line and its
    index stays as it was.
    """
    where = f"workspace source {source.id!r}"
    if not source.root.exists():
        raise SourceError(f"{where}: folder {source.root} does not exist; its index is kept")
    if not source.root.is_dir():
        raise SourceError(f"{where}: {source.root} is not a folder")
    try:
        with os.scandir(source.root) as it:
            empty = next(it, None) is None
    except OSError as exc:
        raise SourceError(
            f"{where}: cannot read folder {source.root}: {exc.strerror or exc}; its index is kept"
        ) from None
    if empty and indexed and not accept_empty:
        raise SourceError(
            f"{where}: folder {source.root} is empty but {indexed} indexed files came from it "
            "(a drive not mounted?); its index is kept. If the notes were removed on purpose, "
            "run `notes-search sync --full`"
        )


def _admitted(folder: WalkedFolder, unreadable: list[tuple[str, str]] | None = None) -> Iterator[ListedFile]:
    """The folder's indexable files, stat'ed now; a vanished one is just absent, and one that
    cannot be stat'ed (a folder without search permission) goes to `unreadable`."""
    drafts_here = folder.rel == "" or folder.is_collection
    for rel, entry in folder.files:
        if entry.name == META_FILE or (entry.name == INBOX and drafts_here):
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            if unreadable is not None:
                unreadable.append((rel, f"unreadable: {exc.strerror or exc}"))
            continue
        yield ListedFile(rel, entry.path, st)


def list_files(source: WorkspaceSource, *, log: logging.Logger | None = None) -> Iterator[ListedFile]:
    """Admitted files (index path, path on disk, stat) in walk order. Raises SourceError at call time."""
    _check_root(source)
    return _listed(source, log or _LOG)


def _listed(source: WorkspaceSource, log: logging.Logger) -> Iterator[ListedFile]:
    for folder in walk_folders(source.root, source.selection, log):
        if folder.unreadable is not None:
            log.warning("cannot list folder %s: %s", folder.path, folder.unreadable)
        for rel, reason in folder.skipped:
            log.warning("%s:%s: skipped: %s", source.id, rel, reason)
        yield from _admitted(folder)


def scan(
    source: WorkspaceSource,
    known: Mapping[str, KnownFile],
    *,
    full: bool = False,
    accept_empty: bool = False,
    max_file_bytes: int = 5_000_000,
    log: logging.Logger | None = None,
) -> Iterator[Change]:
    """Changes that bring the store's `known` files in line with the folder.

    Unchanged (size, mtime) costs a stat only; on a mismatch the sha256 decides between Touch
    and Upsert. `full` re-reads everything and yields Upsert for every indexable file (the store
    re-chunks). Vanished paths yield Delete; a rename is Delete + Upsert. Content that cannot be
    indexed (binary, not UTF-8, too large, a Git LFS pointer) yields Skipped, preceded by Delete
    when the store holds an older, now stale copy; an unreadable file yields Skipped alone (a
    transient error should not drop the index's copy). A folder that cannot be listed yields Unlisted first, and
    nothing indexed below it is deleted. No single file stops the scan. Skips are not logged
    here (the consumer logs each once); folders that cannot be listed are. A missing,
    unreadable or suddenly empty root raises SourceError at call time, not on first iteration;
    an empty one only with `accept_empty` (the user's `--full`: notes removed on purpose).
    """
    _check_root(source, len(known), accept_empty=accept_empty)
    return _scan(source, known, full, max_file_bytes, log or _LOG)


def _scan(
    source: WorkspaceSource,
    known: Mapping[str, KnownFile],
    full: bool,
    limit: int,
    log: logging.Logger,
) -> Iterator[Change]:
    # List everything before reading anything: collections must be known before the first
    # Upsert, and the Delete pass needs the complete set of present paths.
    folders = list(walk_folders(source.root, source.selection, log))
    problems: list[CollectionProblem] = []
    collections = load_collections(source.id, folders, log, problems)
    yield from problems
    unstatable: list[tuple[str, str]] = []
    listed = [item for folder in folders for item in _admitted(folder, unstatable)]
    # what could not be listed is unknown, not gone: the index keeps its copy until it is readable
    blocked = [folder for folder in folders if folder.unreadable is not None]
    for folder in blocked:
        yield Unlisted(folder.rel, folder.unreadable or "", sum(1 for path in known if _below(path, folder.rel)))
    for item in listed:
        prev = known.get(item.rel)
        st = item.stat
        # unchanged stat: nothing to read, unless a lowered max_file_bytes now excludes the file
        if (
            prev is not None
            and not full
            and prev.size == st.st_size
            and prev.mtime == st.st_mtime
            and st.st_size <= limit
        ):
            continue
        yield from _read(item, prev, full, limit, collections)
    for rel, reason in unstatable:
        yield Skipped(rel, reason)
    for folder in folders:
        for rel, reason in folder.skipped:
            yield Skipped(rel, reason)
    present = {item.rel for item in listed} | {rel for rel, _ in unstatable}
    for path in sorted(known.keys() - present):
        if not any(_below(path, folder.rel) for folder in blocked):
            yield Delete(path)


def _below(path: str, folder: str) -> bool:
    return folder == "" or path.startswith(folder + "/")


def _read(
    item: ListedFile,
    prev: KnownFile | None,
    full: bool,
    limit: int,
    collections: Sequence[CollectionFolder],
) -> Iterator[Change]:
    if item.stat.st_size > limit:
        yield from _unindexable(item.rel, prev, f"too large ({item.stat.st_size} bytes > limit {limit})")
        return
    try:
        with open(item.path, "rb") as f:
            # stat before reading: a write racing the read then leaves a newer mtime on disk
            # than the one recorded, so the next scan re-reads instead of trusting stale text
            st = os.fstat(f.fileno())
            data = f.read(limit + 1)
    except FileNotFoundError:
        if prev is not None:
            yield Delete(item.rel)
        else:
            yield Skipped(item.rel, "vanished while scanning")
        return
    except OSError as exc:
        # transient (permissions, I/O): keep whatever the index holds, retry on a later scan
        yield Skipped(item.rel, f"unreadable: {exc.strerror or exc}")
        return
    if len(data) > limit:
        yield from _unindexable(item.rel, prev, f"too large (> {limit} bytes limit)")
        return
    sha = hashlib.sha256(data).hexdigest()
    if prev is not None and not full and sha == prev.sha256:
        yield Touch(item.rel, st.st_size, st.st_mtime)
        return
    text = _decode(data)
    if text is None:
        yield from _unindexable(item.rel, prev, "binary or not UTF-8")
        return
    if is_lfs_pointer(data):
        yield from _unindexable(item.rel, prev, LFS_POINTER_REASON)
        return
    yield Upsert(
        FileVersion(
            path=item.rel,
            text=text,
            sha256=sha,
            size=st.st_size,
            mtime=st.st_mtime,
            updated_at=st.st_mtime,
            collection=collection_for(item.rel, collections),
        )
    )


def _unindexable(path: str, prev: KnownFile | None, reason: str) -> Iterator[Change]:
    """Skip a file whose content cannot be indexed; if it was indexed before, that copy is stale."""
    if prev is not None:
        yield Delete(path)
    yield Skipped(path, reason)


def _decode(data: bytes) -> str | None:
    """The note's text (`filetext.note_text`); None for binary or other encodings."""
    return None if looks_binary(data) else note_text(data)


def coverage_report(config: Config) -> list[str]:
    """Top-level workspace folders holding markdown that no workspace source indexes.

    Turns "silently missing" into a log line. A folder counts as covered as soon as one `.md`
    below it is admitted by some workspace source (nested source roots included); markdown a
    source's `exclude` takes out was left out on purpose and is no gap. Hidden folders and
    symlinks are not looked at.
    """
    scopes = [
        (os.path.realpath(s.root), s.selection) for s in config.sources.values() if isinstance(s, WorkspaceSource)
    ]
    ours = os.path.realpath(config.toc_dir)  # our tables of contents are markdown, not a gap
    lines: list[str] = []
    for root in sorted({root for root, _ in scopes}):
        try:
            with os.scandir(root) as it:
                tops = sorted(
                    (e for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)),
                    key=lambda e: e.name,
                )
        except OSError:
            continue  # a missing root is reported by its scan
        for top in tops:
            count, exact = _uncovered_markdown(top.path, scopes, ours)
            if count:
                shown = str(count) if exact else f"≥{count}"
                noun = "file" if count == 1 else "files"
                lines.append(f"not indexed: {nfc(top.name)}/ ({shown} .md {noun}) under {root}")
    return lines


def relative_index_path(path: str, root: str) -> str | None:
    """`path` relative to `root` as an index path ('' for root itself), or None if outside."""
    if path == root:
        return ""
    base = root.rstrip(os.sep) + os.sep
    if not path.startswith(base):
        return None
    return nfc(path[len(base) :].replace(os.sep, "/"))


def _excluded(path: str, scopes: list[tuple[str, FileSelection]]) -> bool:
    """Does a source rooted above `path` exclude it (a folder when `path` ends in a separator)?"""
    for root, scope in scopes:
        rel = relative_index_path(path.rstrip(os.sep), root)
        if rel and scope.excluded(rel + ("/" if path.endswith(os.sep) else "")):
            return True
    return False


def _uncovered_markdown(folder: str, scopes: list[tuple[str, FileSelection]], ours: str) -> tuple[int, bool]:
    """(count, exact) of the `.md` files below `folder`, not counting the folder `ours`; 0 as
    soon as a source admits one."""
    # Counting may stop at the cap only when no source can reach below the folder; otherwise
    # an admitted file further on would still mean "covered".
    reachable = False
    for root, scope in scopes:
        rel = relative_index_path(folder, root)
        if (rel is not None and scope.may_contain(rel)) or relative_index_path(root, folder) is not None:
            reachable = True
    count = 0
    stack = [] if _excluded(folder + os.sep, scopes) or folder == ours else [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not _excluded(entry.path + os.sep, scopes) and entry.path != ours:
                        stack.append(entry.path)
                    continue
                if not entry.name.lower().endswith(".md") or not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            if _excluded(entry.path, scopes):
                continue
            if reachable and any(
                (rel := relative_index_path(entry.path, root)) is not None and scope.admits(rel)
                for root, scope in scopes
            ):
                return 0, True
            count += 1
            if count >= COVERAGE_CAP and not reachable:
                return count, False
    return count, True
