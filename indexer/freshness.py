"""Does the index lag its sources? (what `status` reports per source)

A git source lags when its remote (or, without `check_remote`, its mirror) points at another
commit than the indexed one; a workspace source lags when an admitted file was added, removed
or edited since the last sync. Both checks are cheap on purpose, because `status` is what a
user or an agent runs to decide whether to trust a search: one ls-remote per git source, and for
a workspace a stat walk that reads only files whose (size, mtime) differ from the index.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from indexer.config import GitSource, WorkspaceSource
from indexer.errors import SourceError
from indexer.model import Delete, Skipped, Unlisted, Upsert
from indexer.sources import git as git_source
from indexer.sources import workspace
from indexer.store import IndexReader

LAG_LIST = 20  # changed paths named in a status answer


@dataclass(frozen=True)
class GitLag:
    """A git source: the indexed rev against the mirror's head and, when the remote was asked,
    the remote's. It lags when the remote's head (else the mirror's) is another commit."""

    indexed_rev: str | None
    mirror_head: str | None
    remote_head: str | None
    remote_error: str | None  # why the remote did not answer
    mirror_damaged: str | None  # why the next sync clones the mirror again (once the remote answers)

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

    def to_json(self) -> dict[str, object]:
        return {"lags": None, "error": self.error}


Lag = GitLag | WorkspaceLag | LagUnknown


def git_freshness(source: GitSource, store: IndexReader, *, check_remote: bool) -> GitLag:
    """One git source: indexed rev vs the remote head (ls-remote, no fetch) or the mirror head."""
    remote_head = remote_error = None
    if check_remote:
        try:
            remote_head = git_source.remote_head(source)
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
    return GitLag(indexed_rev, mirror, remote_head, remote_error, damage)


def workspace_freshness(source: WorkspaceSource, store: IndexReader, place: str, max_file_bytes: int) -> WorkspaceLag:
    """A workspace source, or the file or folder `place` inside it. Touches (same content, new
    mtime) and files that are never indexable do not count."""
    scanned = dataclasses.replace(source, selection=source.selection.within(place)) if place else source
    changed: list[str] = []
    deleted: list[str] = []
    unreadable: list[str] = []
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
    return WorkspaceLag(len(changed), len(deleted), tuple((changed + deleted)[:LAG_LIST]), tuple(unreadable[:LAG_LIST]))
