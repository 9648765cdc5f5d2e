"""Does the index lag its sources? (what `status` reports per source)

A git source lags when its remote (or, without `check_remote`, its mirror) points at another
commit than the indexed one; a workspace source lags when an admitted file was added, removed
or edited since the last sync. Both checks are cheap on purpose, because `status` is what a
user or an agent runs to decide whether to trust a search: one ls-remote per git source, and for
a workspace a stat walk that reads only files whose (size, mtime) differ from the index.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from indexer.config import GitSource, WorkspaceSource
from indexer.errors import SourceError
from indexer.model import Delete, Skipped, Unlisted, Upsert
from indexer.sources import git as git_source
from indexer.sources import workspace
from indexer.store import IndexReader

LAG_LIST = 20  # changed paths named in a status answer


def _silent_logger() -> logging.Logger:
    """A logger that drops everything: the scan logs unindexable files, and a status check must
    not repeat that in the sync log. Built per call and never registered with `logging`, so
    importing this module configures nothing."""
    silent = logging.Logger("notes_search.freshness.scan")  # noqa: LOG001 - unregistered on purpose
    silent.addHandler(logging.NullHandler())
    return silent


def git_freshness(source: GitSource, store: IndexReader, *, check_remote: bool) -> dict[str, Any]:
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
    head = remote_head or mirror
    # raises SourceError, as sync does, when something not ours sits at the mirror path
    damage = git_source.mirror_damage(source)
    if damage is None and indexed_rev is not None and not source.mirror.exists() and not source.mirror.is_symlink():
        damage = f"the mirror {source.mirror} is missing"  # show and grep fail until sync clones it
    return {
        "kind": source.kind,
        "indexed_rev": indexed_rev,
        "mirror_head": mirror,
        "remote_head": remote_head,
        "remote_error": remote_error,
        # a damaged mirror is cloned again by the next sync (once the remote answers)
        "mirror_damaged": damage,
        "lags": None if head is None else head != indexed_rev,
    }


def workspace_freshness(source: WorkspaceSource, store: IndexReader, place: str, max_file_bytes: int) -> dict[str, Any]:
    """A workspace source, or the file or folder `place` inside it: {"lags", "changed", "deleted",
    "paths", "unreadable"} (counts of files added or edited and of files gone; the first LAG_LIST
    paths; folders (with a trailing '/') and files that cannot be read now, whose indexed copies
    are kept). Touches (same content, new mtime) and files that are never indexable do not count."""
    scanned = dataclasses.replace(source, selection=source.selection.within(place)) if place else source
    changed: list[str] = []
    deleted: list[str] = []
    unreadable: list[str] = []
    known = store.known_files(source.id, under=place or None)
    for change in workspace.scan(scanned, known, max_file_bytes=max_file_bytes, log=_silent_logger()):
        if isinstance(change, Upsert):
            changed.append(change.file.path)
        elif isinstance(change, Delete):
            deleted.append(change.path)
        elif isinstance(change, Unlisted):
            unreadable.append(f"{change.path}/" if change.path else "./")
        elif isinstance(change, Skipped) and change.reason.startswith("unreadable"):
            unreadable.append(change.path)
    return {
        "lags": bool(changed or deleted),
        "changed": len(changed),
        "deleted": len(deleted),
        "paths": (changed + deleted)[:LAG_LIST],
        "unreadable": unreadable[:LAG_LIST],
    }
