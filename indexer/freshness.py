"""Does the index lag its sources? (`status`, SPEC §7.)

A git source lags when its remote (or, without `check_remote`, its mirror) points at another
commit than the indexed one; a workspace source lags when an admitted file was added, removed
or edited since the last sync. Both checks are cheap on purpose, because `status` is what a
user or an agent runs to decide whether to trust a search: one ls-remote per git source (all
in parallel), and for a workspace a stat walk that reads only files whose (size, mtime) differ
from the index and stops at the first real change.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from indexer.config import Config, GitSource, WorkspaceSource
from indexer.errors import SourceError
from indexer.model import Delete, Upsert
from indexer.sources import git as git_source
from indexer.sources import workspace
from indexer.store import Store

# The scan logs unindexable files; a status check must not repeat that in the sync log.
_SILENT = logging.getLogger("notes_search.freshness.scan")
_SILENT.propagate = False
_SILENT.addHandler(logging.NullHandler())


def source_freshness(config: Config, store: Store, *, check_remote: bool) -> dict[str, dict[str, Any]]:
    """Per configured source id:

    git:       {"kind", "indexed_rev", "mirror_head", "remote_head", "remote_error", "lags"}
               `lags` compares the indexed rev with the remote head when it was checked and
               reachable, else with the mirror head; None when neither is known.
    workspace: {"kind", "lags", "changed", "error"}; `changed` is the first path found that
               differs from the index (not a complete list).
    """
    git_sources = [s for s in config.sources.values() if isinstance(s, GitSource)]
    remotes: dict[str, str | SourceError] = {}
    if check_remote and git_sources:
        with ThreadPoolExecutor(max_workers=min(8, len(git_sources))) as pool:
            remotes = dict(zip((s.id for s in git_sources), pool.map(_remote_head, git_sources)))
    out: dict[str, dict[str, Any]] = {}
    for source_id, source in config.sources.items():
        if isinstance(source, GitSource):
            out[source_id] = _git(source, store, remotes.get(source_id))
        else:
            out[source_id] = _workspace(source, store, config.max_file_bytes)
    return out


def _remote_head(source: GitSource) -> str | SourceError:
    try:
        return git_source.remote_head(source)
    except SourceError as exc:
        return exc


def git_freshness(source: GitSource, store: Store, *, check_remote: bool) -> dict[str, Any]:
    """One git source: indexed rev vs the remote head (ls-remote, no fetch) or the mirror head."""
    return _git(source, store, _remote_head(source) if check_remote else None)


def _git(source: GitSource, store: Store, remote: str | SourceError | None) -> dict[str, Any]:
    indexed_rev, _ = store.source_state(source.id)
    try:
        mirror = git_source.mirror_head(source)
    except SourceError:  # a mirror without the configured branch: the next sync fetches it
        mirror = None
    remote_head = remote if isinstance(remote, str) else None
    head = remote_head or mirror
    return {
        "kind": source.kind,
        "indexed_rev": indexed_rev,
        "mirror_head": mirror,
        "remote_head": remote_head,
        "remote_error": str(remote) if isinstance(remote, SourceError) else None,
        "lags": None if head is None else head != indexed_rev,
    }


def _workspace(source: WorkspaceSource, store: Store, max_file_bytes: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": source.kind, "lags": False, "changed": None, "error": None}
    try:
        changes = workspace.scan(source, store.known_files(source.id), max_file_bytes=max_file_bytes, log=_SILENT)
        for change in changes:
            # Touch (same content, new stat) and Skipped (never indexable) leave search results as they are
            if isinstance(change, (Upsert, Delete)):
                entry["lags"] = True
                entry["changed"] = change.file.path if isinstance(change, Upsert) else change.path
                break
    except SourceError as exc:
        entry.update(lags=None, error=str(exc))
    return entry
