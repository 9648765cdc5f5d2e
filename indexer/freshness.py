"""Does the index lag its sources? (what `status` reports per source)

A git source lags when its remote (or, without `check_remote`, its mirror) points at another
commit than the indexed one; a workspace source lags when an admitted file was added, removed
or edited since the last sync. Both checks are cheap on purpose, because `status` is what a
user or an agent runs to decide whether to trust a search: one ls-remote per git source, and for
a workspace a stat walk that reads only files whose (size, mtime) differ from the index.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

from indexer.config import GitSource, WorkspaceSource
from indexer.errors import SourceError
from indexer.model import Delete, Skipped, Unlisted, Upsert
from indexer.sources import workspace
from indexer.store import IndexReader

LAG_LIST = 20  # changed (or skipped) paths named in a status answer
# skips `status` names elsewhere or that are not the file's fault: it was gone, or unreadable now
_NOT_A_SKIP = ("unreadable", "vanished while scanning")


@dataclass(frozen=True)
class NotIndexed:
    """Files of a source the index leaves out, and why (not UTF-8, too large, an LFS pointer, a
    symlink): what someone runs `status PATH` for when a note they know is never found."""

    count: int
    files: tuple[tuple[str, str], ...] = ()  # (path, reason), the first LAG_LIST

    def to_json(self) -> dict[str, object]:
        return {"count": self.count, "files": [{"path": path, "reason": reason} for path, reason in self.files]}


def _not_indexed(skips: list[tuple[str, str]]) -> NotIndexed:
    skips.sort()
    return NotIndexed(len(skips), tuple(skips[:LAG_LIST]))


@dataclass(frozen=True)
class GitLag:
    """A git source: the indexed rev against the mirror's head and, when the remote was asked,
    the remote's. It lags when the remote's head (else the mirror's) is another commit."""

    indexed_rev: str | None
    mirror_head: str | None
    remote_head: str | None
    remote_error: str | None  # why the remote did not answer
    mirror_damaged: str | None  # why the next sync clones the mirror again (once the remote answers)
    not_indexed: NotIndexed = NotIndexed(0)  # at the indexed rev

    @property
    def lags(self) -> bool | None:
        """None: neither head is known."""
        head = self.remote_head or self.mirror_head
        return None if head is None else head != self.indexed_rev

    def to_json(self) -> dict[str, object]:
        return {
            "kind": "git",
            "indexed_rev": self.indexed_rev,
            "mirror_head": self.mirror_head,
            "remote_head": self.remote_head,
            "remote_error": self.remote_error,
            "mirror_damaged": self.mirror_damaged,
            "lags": self.lags,
        }


@dataclass(frozen=True)
class WorkspaceLag:
    """A workspace source, or a file or folder inside it: how many files were added or edited
    and how many are gone since the last sync, the first LAG_LIST of their paths, and what cannot
    be read now (folders with a trailing '/'), whose indexed copies are kept."""

    changed: int
    deleted: int
    paths: tuple[str, ...]
    unreadable: tuple[str, ...]
    not_indexed: NotIndexed = NotIndexed(0)

    @property
    def lags(self) -> bool:
        return bool(self.changed or self.deleted)

    def to_json(self) -> dict[str, object]:
        return {
            "lags": self.lags,
            "changed": self.changed,
            "deleted": self.deleted,
            "paths": list(self.paths),
            "unreadable": list(self.unreadable),
        }


@dataclass(frozen=True)
class LagUnknown:
    """Whether the index lags could not be told: one unreadable source must not hide the others."""

    error: str
    lags: None = None
    not_indexed: NotIndexed = NotIndexed(0)  # not known either

    def to_json(self) -> dict[str, object]:
        return {"lags": None, "error": self.error}


Lag = GitLag | WorkspaceLag | LagUnknown


def git_freshness(
    source: GitSource,
    store: IndexReader,
    place: str,
    max_file_bytes: int,
    *,
    check_remote: bool,
    asked: str | SourceError | None = None,
) -> GitLag:
    """One git source: indexed rev vs the remote head (ls-remote, no fetch; `asked`: already
    asked, by `git_source.remote_heads`) or the mirror head; and what of it (or of the file or
    folder `place`) the indexed rev holds that is left out."""
    from indexer.sources import git as git_source  # pygit2: ~95 ms a status of workspaces never needs

    remote_head = remote_error = None
    if check_remote:
        try:
            if isinstance(asked, SourceError):
                raise asked
            remote_head = asked or git_source.remote_head(source, git_source.STATUS_REMOTE_TIMEOUT)
        except SourceError as exc:
            remote_error = str(exc)
    indexed_rev = store.source_state(source.id).indexed_rev
    try:
        mirror = git_source.mirror_head(source)
    except SourceError:  # a mirror without the configured branch: the next sync fetches it
        mirror = None
    # raises SourceError, as sync does, when something not ours sits at the mirror path
    damage = git_source.mirror_damage(source)
    if damage is None and indexed_rev is not None and not source.mirror.exists() and not source.mirror.is_symlink():
        damage = f"the mirror {source.mirror} is missing"  # show and grep fail until sync clones it
    skips: list[tuple[str, str]] = []
    if indexed_rev is not None and damage is None:
        known = store.known_files(source.id, under=place or None)
        selection = source.selection.within(place) if place else source.selection
        with contextlib.suppress(SourceError):  # the heads above say what is wrong with the mirror
            skips = list(git_source.left_out(source, indexed_rev, known.keys(), selection, max_file_bytes))
    return GitLag(indexed_rev, mirror, remote_head, remote_error, damage, _not_indexed(skips))


def workspace_freshness(source: WorkspaceSource, store: IndexReader, place: str, max_file_bytes: int) -> WorkspaceLag:
    """A workspace source, or the file or folder `place` inside it. Touches (same content, new
    mtime) and files that are never indexable do not count."""
    scanned = dataclasses.replace(source, selection=source.selection.within(place)) if place else source
    changed: list[str] = []
    deleted: list[str] = []
    unreadable: list[str] = []
    skips: list[tuple[str, str]] = []
    known = store.known_files(source.id, under=place or None)
    for change in workspace.scan(scanned, known, max_file_bytes=max_file_bytes, log=workspace.QUIET_LOG):
        if isinstance(change, Upsert):
            changed.append(change.file.path)
        elif isinstance(change, Delete):
            deleted.append(change.path)
        elif isinstance(change, Unlisted):
            unreadable.append(f"{change.path}/" if change.path else "./")
        elif isinstance(change, Skipped) and change.reason.startswith("unreadable"):
            unreadable.append(change.path)
        elif isinstance(change, Skipped) and not change.reason.startswith(_NOT_A_SKIP):
            skips.append((change.path, change.reason))
    return WorkspaceLag(
        len(changed),
        len(deleted),
        tuple((changed + deleted)[:LAG_LIST]),
        tuple(unreadable[:LAG_LIST]),
        _not_indexed(skips),
    )
