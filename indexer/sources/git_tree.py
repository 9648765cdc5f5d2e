"""The local half of the git source driver: reading a source's mirror in process with pygit2.

The heads of its branches, the tree diff that `changes` walks, blobs and the commit time of
each file; a read that meets broken objects marks the mirror damaged (DAMAGE_MARK) for the next
sync to clone again. Nothing here runs git or talks to the remote: `indexer.sources.git` clones
and refreshes the mirror with the git command line, and names this module's public functions.

Change contract of `changes(source, old_rev, new_rev)`
    Incremental (old_rev is a commit present in the mirror, full=False): the exact tree diff
    old_rev -> new_rev. A tree diff compares two snapshots, so it is exact even when old_rev is
    not an ancestor; the sync still passes old_rev only when `is_ancestor(source, old_rev,
    new_rev)` (conservative after a force-push), and is_ancestor is False for a missing old_rev.
    Full (full=True, old_rev None, or old_rev not in the mirror, e.g. pruned by gc after a
    force-push or a re-cloned mirror): one Upsert per admitted, readable file of new_rev and no
    Deletes. The CALLER must then delete every indexed path of this source that is not in
    `tree_paths(source, new_rev)`.
    In both modes:
    - Upserts come first and Deletes after, so the content of a renamed file (Delete(old) +
      Upsert(new), same sha256) is still in the store when the new path arrives and its
      vectors can be reused by content hash.
    - A file whose new content cannot be indexed (binary, invalid UTF-8, too large, a Git LFS
      pointer) yields Delete(path) then Skipped(path, reason): no stale text survives, whatever
      the caller does with Skipped. Symlinks and submodules are never indexed: Skipped (the caller logs it).
    - FileSelection is applied to both sides: a file moved out of scope is a Delete, into scope an Upsert.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

import pygit2
from pygit2.enums import DeltaStatus, FileMode, RepositoryOpenFlag, SortMode

from indexer.collections import META_FILE, is_utf8_name
from indexer.config import GitSource
from indexer.errors import FileNotAtRevision, SourceError
from indexer.filetext import LFS_POINTER_REASON, is_lfs_pointer, note_text
from indexer.globs import FileSelection
from indexer.model import Change, Delete, FileVersion, Skipped, Upsert
from indexer.redaction import redact

_log = logging.getLogger("notes_search.git")  # the driver's one logger, both halves

_BLOB_MODES = frozenset({FileMode.BLOB, FileMode.BLOB_EXECUTABLE})


# Written into a mirror when a read meets broken objects that no fetch would notice (a blob in a
# corrupt pack that `grep` or `show` reads, while incremental syncs only read changed blobs):
# the next sync clones the mirror again and `status` reports it until then. It lives inside the
# mirror, so the re-clone that swaps the mirror out also removes it.
DAMAGE_MARK = "notes-search-damaged"


class MirrorDamaged(SourceError):
    """The mirror's own files are broken (a corrupt pack, missing objects): a fresh clone fixes it."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def source_error(source: GitSource, what: str, reason: str) -> SourceError:
    """One line naming the source and url; an embedded password never reaches a log."""
    return SourceError(source_message(source, what, reason))


def source_message(source: GitSource, what: str, reason: str) -> str:
    return redact(" ".join(f"git source {source.id!r} ({source.url}): {what}: {reason}".split()), source.url)


def open_bare(path: Path) -> pygit2.Repository | None:
    """The bare repository at exactly `path` (no search upwards into an enclosing repository)."""
    try:
        repo = pygit2.Repository(str(path), RepositoryOpenFlag.NO_SEARCH)
        repo.references["HEAD"]  # libgit2 opens a repository whose HEAD file is garbage
    except (KeyError, pygit2.GitError):
        return None
    return repo if repo.is_bare else None


def mark_damaged(source: GitSource, reason: str) -> None:
    """Record that the mirror's objects are broken (see DAMAGE_MARK). Best effort: a reader that
    may not write the mirror (another user's MCP server) still reports the error it met."""
    path = source.mirror
    if not path.is_dir() or path.is_symlink():
        return
    line = " ".join(reason.split())[:500] or "objects cannot be read"
    try:
        (path / DAMAGE_MARK).write_text(line + "\n", encoding="utf-8")
    except OSError as exc:
        _log.warning("git source %s: cannot mark mirror %s as damaged: %s", source.id, path, exc.strerror or exc)
        return
    _log.warning("git source %s: mirror %s is damaged (%s): the next sync clones it again", source.id, path, line)


def marked_damage(source: GitSource) -> str | None:
    """Why a read marked the mirror damaged, or None (no mark, or it cannot be read)."""
    try:
        text = (source.mirror / DAMAGE_MARK).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.strip() or "objects cannot be read"


@contextlib.contextmanager
def _reading(source: GitSource) -> Iterator[pygit2.Repository]:
    """The mirror, opened for one operation. Objects that cannot be read (a corrupt pack, a
    missing object) mean a damaged mirror; its handles are released at once, because libgit2
    shares open pack files by path and would serve the damaged pack to a re-cloned mirror."""
    repo = open_mirror(source)
    try:
        yield repo
    except pygit2.GitError as exc:
        repo.free()
        gc.collect()  # and closed ones (in reference cycles): a long-lived process reads a re-clone
        mark_damaged(source, str(exc))  # `show` meets it too: the next sync clones again
        raise MirrorDamaged(source_message(source, "mirror", f"{source.mirror} is damaged: {exc}"), str(exc)) from None


def open_mirror(source: GitSource) -> pygit2.Repository:
    """The source's mirror; a SourceError when there is none yet."""
    repo = open_bare(source.mirror)
    if repo is None:
        raise source_error(source, "mirror", f"no mirror at {source.mirror} (run sync first)")
    return repo


def branch_head(source: GitSource, repo: pygit2.Repository) -> str:
    """The commit of the source's branch (its `branch:`, else the mirror's HEAD) in `repo`."""
    name = f"refs/heads/{source.branch}" if source.branch else "HEAD"
    try:
        return str(repo.references[name].resolve().target)
    except (KeyError, pygit2.GitError):
        what = f"branch {source.branch!r}" if source.branch else "HEAD (no commits?)"
        raise source_error(source, "mirror", f"{what} not found in {source.mirror}") from None


def mirror_head(source: GitSource) -> str | None:
    """The commit of the selected branch in the existing mirror (no network); None if there is
    no mirror, or it is marked damaged: that mirror is no base for "nothing changed"."""
    repo = open_bare(source.mirror)
    if repo is None or marked_damage(source) is not None:
        return None
    return branch_head(source, repo)


def find_commit(repo: pygit2.Repository, rev: str | pygit2.Oid) -> pygit2.Commit | None:
    """The commit `rev` names (a tag is peeled), or None when the mirror does not hold it."""
    try:
        obj = repo.get(rev) if isinstance(rev, pygit2.Oid) else repo.revparse_single(rev)
        return None if obj is None else obj.peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def is_ancestor(source: GitSource, old_rev: str, new_rev: str) -> bool:
    """May the index move from old_rev to new_rev incrementally? False after a force-push that
    rewrote old_rev away, or when old_rev is no longer in the mirror."""
    with _reading(source) as repo:
        new = find_commit(repo, new_rev)
        if new is None:
            raise source_error(source, "mirror", f"revision {new_rev} not found in {source.mirror}")
        old = find_commit(repo, old_rev)
        return old is not None and (old.id == new.id or repo.descendant_of(new.id, old.id))


NOT_UTF8_NAME = "its name is not valid UTF-8"


def shown_name(path: str) -> str:
    """A path as text to show: bytes that are not UTF-8 (kept as lone surrogates) as \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _relevant(scope: FileSelection, path: str, mode: int) -> bool:
    """Does this tree entry concern the source? Submodules count when their folder is in scope,
    so a user sees in the log that notes inside one are not followed. (A name that is not UTF-8
    counts: the caller skips it, saying why.)"""
    if mode == FileMode.COMMIT:
        return scope.may_contain(path)
    return scope.admits(path)


def _entries(
    tree: pygit2.Tree, scope: FileSelection, prefix: str = "", known: Collection[str] = ()
) -> Iterator[tuple[str, pygit2.Oid, int]]:
    """(path, oid, mode) of every relevant non-tree entry, pruning folders the scope excludes,
    and passing over the paths in `known` unchecked (they were relevant when indexed)."""
    for entry in tree:
        if entry.name is None:  # only a tree's own root has no name
            continue
        path = prefix + entry.name
        if path in known:
            continue
        if entry.filemode == FileMode.TREE:
            if isinstance(entry, pygit2.Tree) and scope.may_contain(path):
                yield from _entries(entry, scope, path + "/", known)
        elif _relevant(scope, path, entry.filemode):
            yield path, entry.id, entry.filemode


def _commit_at(source: GitSource, repo: pygit2.Repository, rev: str, what: str) -> pygit2.Commit:
    """The commit `rev` of the mirror, or the source's error saying it is not there."""
    commit = find_commit(repo, rev)
    if commit is None:
        raise source_error(source, what, f"revision {rev} not found in {source.mirror}")
    return commit


def tree_paths(source: GitSource, rev: str) -> set[str]:
    """Admitted regular files of `rev`: in the full contract, everything else indexed goes."""
    with _reading(source) as repo:
        commit = _commit_at(source, repo, rev, "mirror")
        return {
            path
            for path, _, mode in _entries(commit.tree, source.selection)
            if mode in _BLOB_MODES and is_utf8_name(path)
        }


def left_out(
    source: GitSource, rev: str, known: Collection[str], selection: FileSelection, max_file_bytes: int
) -> Iterator[tuple[str, str]]:
    """(path, why) of each file `selection` admits at `rev` that the index does not hold: what
    the sync that indexed `rev` skipped. A file that reads as a note now is not listed (a first
    sync still running, or a chunker failure the log told)."""
    with _reading(source) as repo:
        commit = _commit_at(source, repo, rev, "mirror")
        for path, oid, mode in _entries(commit.tree, selection, known=known):
            if not is_utf8_name(path):
                yield shown_name(path), NOT_UTF8_NAME
            elif mode not in _BLOB_MODES:
                yield path, f"{'submodule' if mode == FileMode.COMMIT else 'symlink'} (not followed)"
            elif isinstance(reason := _read(repo, path, oid, 0.0, max_file_bytes), str):
                yield path, reason


def meta_files(source: GitSource, rev: str) -> list[tuple[str, bytes]]:
    """(folder, bytes) of each `_meta.yaml` at `rev` in a folder the scope may hold notes in,
    in the order a walk of the folders on disk meets them (a folder before those inside it)."""
    found: list[tuple[str, bytes]] = []

    def walk(tree: pygit2.Tree, folder: str) -> None:
        subfolders: list[tuple[str, pygit2.Tree]] = []
        for entry in tree:  # a git tree lists its entries by name
            if entry.name is None:
                continue
            path = f"{folder}/{entry.name}" if folder else entry.name
            if entry.name == META_FILE and entry.filemode in _BLOB_MODES and isinstance(entry, pygit2.Blob):
                found.append((folder, entry.data))
            elif isinstance(entry, pygit2.Tree) and is_utf8_name(path) and source.selection.may_contain(path):
                subfolders.append((path, entry))  # (a folder not named in UTF-8 holds no note of the index)
        for path, subtree in subfolders:
            walk(subtree, path)

    with _reading(source) as repo:
        commit = _commit_at(source, repo, rev, "mirror")
        walk(commit.tree, "")
    return found


def entry_kind(source: GitSource, rev: str, path: str) -> str | None:
    """What `rev` holds at `path`: "folder", "file" (any other entry), or None."""
    with _reading(source) as repo:
        commit = _commit_at(source, repo, rev, "mirror")
        try:
            entry = commit.tree[path]
        except KeyError:
            return None
        return "folder" if entry.filemode == FileMode.TREE else "file"


def _blob_id(tree: pygit2.Tree, path: str) -> pygit2.Oid | None:
    try:
        return tree[path].id
    except KeyError:
        return None


def _introduced(commit: pygit2.Commit, wanted: dict[str, pygit2.Oid]) -> list[str]:
    """Paths whose wanted blob appears in `commit` and in none of its parents.

    Matching the final blob (not "any change") skips side-branch edits a merge discarded,
    and a merge that is identical to one parent introduces nothing, as in `git log -- path`.
    """
    if not commit.parents:
        return [p for p, oid in wanted.items() if _blob_id(commit.tree, p) == oid]
    first, *others = commit.parents
    found = [
        d.new_file.path
        for d in first.tree.diff_to_tree(commit.tree).deltas
        if wanted.get(d.new_file.path) == d.new_file.id
    ]
    for parent in others:
        found = [p for p in found if _blob_id(parent.tree, p) != wanted[p]]
    return found


def last_change_times(
    repo: pygit2.Repository,
    rev: str | pygit2.Oid,
    paths: Iterable[str],
    *,
    since: str | pygit2.Oid | None = None,
) -> dict[str, float]:
    """Commit time of the commit that gave each path its content at `rev` (recency ranking).

    Walks newest first and stops once every path is assigned. With `since` (the previously
    indexed commit) only the new commits are walked first; paths whose content came from older
    history (a force-push back to old content) continue into the full history. Paths still
    unassigned (shallow history) get the commit time of `rev`.
    """
    head = find_commit(repo, rev)
    if head is None:
        raise KeyError(f"revision {rev} not found")
    wanted = {p: oid for p in paths if (oid := _blob_id(head.tree, p)) is not None}
    times: dict[str, float] = {}
    seen: set[pygit2.Oid] = set()
    for hide in ([since] if since is not None else []) + [None]:
        walker = repo.walk(head.id, SortMode.TIME)
        if hide is not None:
            walker.hide(hide)
        for commit in walker:
            if not wanted:
                break
            if commit.id in seen:
                continue
            seen.add(commit.id)
            for path in _introduced(commit, wanted):
                times[path] = float(commit.commit_time)
                del wanted[path]
    times.update(dict.fromkeys(wanted, float(head.commit_time)))
    return times


def _read(
    repo: pygit2.Repository, path: str, oid: pygit2.Oid, updated_at: float, max_file_bytes: int
) -> FileVersion | str:
    """The file as text, or the reason it cannot be indexed."""
    _, size = repo.odb.read_header(oid)
    if size > max_file_bytes:
        return f"too large ({size} bytes > {max_file_bytes})"
    blob = repo.get(oid)
    if blob is None:
        raise pygit2.GitError(f"object {oid} ({path}) is missing")
    if not isinstance(blob, pygit2.Blob):
        raise pygit2.GitError(f"object {oid} ({path}) is not a blob")
    data = blob.data
    if b"\0" in data:
        return "binary"
    text = note_text(data)
    if text is None:
        return "invalid UTF-8"
    if is_lfs_pointer(data):
        return LFS_POINTER_REASON
    return FileVersion(
        path=path,
        text=text,
        sha256=hashlib.sha256(data).hexdigest(),
        size=size,
        mtime=None,
        updated_at=updated_at,
    )


def changes(
    source: GitSource,
    old_rev: str | None,
    new_rev: str,
    *,
    full: bool = False,
    max_file_bytes: int = 5_000_000,
) -> Iterator[Change]:
    """What to apply to the index to move it from old_rev to new_rev (contract: module doc).
    Objects that cannot be read raise MirrorDamaged."""
    with _reading(source) as repo:
        yield from _changes(source, repo, old_rev, new_rev, full, max_file_bytes)


def _changes(
    source: GitSource,
    repo: pygit2.Repository,
    old_rev: str | None,
    new_rev: str,
    full: bool,
    max_file_bytes: int,
) -> Iterator[Change]:
    new = find_commit(repo, new_rev)
    if new is None:
        raise source_error(source, "diff", f"revision {new_rev} not found in {source.mirror}")
    old = None if full or old_rev is None else find_commit(repo, old_rev)
    scope = source.selection

    arrivals: list[tuple[str, pygit2.Oid, int]] = []
    departures: list[str] = []
    if old is None:
        arrivals = list(_entries(new.tree, scope))
    else:
        # No rename detection: a rename already shows as DELETED old + ADDED new, which is
        # exactly the Delete + Upsert the store needs; find_similar would only spend time.
        for delta in old.tree.diff_to_tree(new.tree).deltas:
            before = None if delta.status == DeltaStatus.ADDED else delta.old_file
            after = None if delta.status == DeltaStatus.DELETED else delta.new_file
            if after is not None and _relevant(scope, after.path, after.mode):
                arrivals.append((after.path, after.id, after.mode))
            if (
                before is not None
                and before.mode in _BLOB_MODES
                and scope.admits(before.path)
                and (after is None or after.mode not in _BLOB_MODES)
            ):
                departures.append(before.path)

    for path, _, _ in arrivals:
        if not is_utf8_name(path):  # an index path must be text: said, as a workspace scan says it
            yield Skipped(shown_name(path), NOT_UTF8_NAME)
    arrivals = [(path, oid, mode) for path, oid, mode in arrivals if is_utf8_name(path)]
    blobs = [(path, oid) for path, oid, mode in arrivals if mode in _BLOB_MODES]
    times = last_change_times(repo, new.id, [path for path, _ in blobs], since=None if old is None else old.id)
    for path, oid in blobs:
        version = _read(repo, path, oid, times[path], max_file_bytes)
        if isinstance(version, FileVersion):
            yield Upsert(version)
        else:
            yield Delete(path)
            yield Skipped(path, version)
    for path, _, mode in arrivals:
        if mode not in _BLOB_MODES:
            kind = "submodule" if mode == FileMode.COMMIT else "symlink"
            yield Skipped(path, f"{kind} (not followed)")
    for path in departures:
        yield Delete(path)


def read_blob(source: GitSource, rev: str, path: str) -> bytes:
    """A file's bytes at `rev`, straight from the object database (for `show`)."""
    with _reading(source) as repo:
        commit = _commit_at(source, repo, rev, "read")
        try:
            entry = commit.tree[path]
        except KeyError:
            raise FileNotAtRevision(source_message(source, "read", f"{path} not found at {rev}")) from None
        if entry.filemode not in _BLOB_MODES:
            raise source_error(source, "read", f"{path} at {rev} is not a regular file")
        blob = repo.get(entry.id)
        if blob is None:
            raise pygit2.GitError(f"object {entry.id} ({path}) is missing")
        if not isinstance(blob, pygit2.Blob):
            raise pygit2.GitError(f"object {entry.id} ({path}) is not a blob")
        data: bytes = blob.data
        return data
