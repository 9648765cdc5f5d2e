"""What is indexed, when, what is pending, and whether the index lags the disk or the remote."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from indexer.config import GitSource, identity_mismatch
from indexer.errors import NotesSearchError, SourceError
from indexer.lock import running_sync
from indexer.store import (
    FileProblem,
    IndexReader,
    ScopeCounts,
    ServerMemory,
    SourceStats,
    describe_location,
    is_unfinished_copy,
)
from search.refs import excluded_file

if TYPE_CHECKING:
    from indexer.embed_health import Outage
    from indexer.freshness import Lag, NotIndexed
    from search.service import NotesService
    from search.service.scope import Place


# what a person or agent does about an index that `migrate` left half-written
UNFINISHED_COPY_ADVICE = "run `notes-search migrate --to` it again from the SQLite index (no --force needed)"


@dataclass(frozen=True)
class SyncRunning:
    """A sync (or reindex, watcher batch) holds the lock now: the counts are still moving."""

    pid: int | None


@dataclass(frozen=True)
class EmbeddingState:
    provider: str
    model: str
    dims: int
    reindex_needed: tuple[str, ...] | None  # why the index's vectors do not match the config
    outage: Outage | None = None  # the embedder failed: since when, why, when a sync tries again

    def to_json(self) -> dict[str, object]:
        return {
            "provider": self.provider,
            "model": self.model,
            "dims": self.dims,
            "reindex_needed": list(self.reindex_needed) if self.reindex_needed else None,
            "outage": None if self.outage is None else self.outage.to_json(),
        }


@dataclass(frozen=True)
class SourceStatus:
    """One place of a source in `status`: its counts (inside the place when one was named), last
    sync, languages, front-matter problems and how far the index lags it."""

    id: str
    kind: str
    path: str | None  # the folder or file asked about; None: the whole source
    indexed_rev: str | None
    last_sync_at: str | None
    error: str | None  # why the last sync of the source failed
    counts: ScopeCounts
    incomplete: bool  # files written but no whole sync finished: a first sync was killed (or runs)
    languages: dict[str, int]
    front_matter_problems: tuple[FileProblem, ...]
    lag: Lag  # behind the remote or mirror (git) or the disk (workspace), or why it cannot be told

    not_indexed: NotIndexed  # what the index leaves out here, and why (not UTF-8, too large ...)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "path": self.path,
            "indexed_rev": self.indexed_rev,
            "last_sync_at": self.last_sync_at,
            "error": self.error,
            **self.counts.to_json(),
            "incomplete": self.incomplete,
            "languages": self.languages,
            "front_matter_problems": [{"path": p.path, "problem": p.problem} for p in self.front_matter_problems],
            "not_indexed": self.not_indexed.to_json(),
            "lag": self.lag.to_json(),
        }


@dataclass(frozen=True)
class StatusReport:
    scope: str
    db: str
    sync_running: SyncRunning | None
    embedding: EmbeddingState
    languages: dict[str, int]  # chunks per language over the sources shown, largest first
    sources: tuple[SourceStatus, ...]  # one per place
    unfinished_copy: bool = False  # a `migrate` into this index was stopped before it verified
    server_memory: ServerMemory | None = None  # a database server's buffer pool (PostgreSQL)
    check: str | None = None  # what `--check` found (None: not asked); damage is an error instead

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "db": self.db,
            "check": self.check,
            "unfinished_copy": self.unfinished_copy,
            "server_memory": None if self.server_memory is None else self.server_memory.to_json(),
            "sync_running": None if self.sync_running is None else {"pid": self.sync_running.pid},
            "embedding": self.embedding.to_json(),
            "languages": self.languages,
            "sources": [source.to_json() for source in self.sources],
        }


def language_totals(per_source: Iterable[dict[str, int]]) -> dict[str, int]:
    """Chunks per language over several sources, largest first."""
    totals: dict[str, int] = {}
    for languages in per_source:
        for language, count in languages.items():
            totals[language] = totals.get(language, 0) + count
    return dict(sorted(totals.items(), key=lambda item: (-item[1], item[0])))


# A check that passes used to print the same status as none: the reader could not tell it ran.
CHECKED_FILE = "ok: the whole index file was read, no damage found"
CHECKED_SERVER = "nothing to read from here: the PostgreSQL server keeps its own pages whole"


def status(service: NotesService, path: str | None, check: bool = False) -> StatusReport:
    """`check`: read the whole index for damage now (else only a file changed since its last
    good check is read)."""
    from indexer.embed_health import embedder_health  # status only: the query path imports less

    config = service.config
    with service.reading() as store:
        store.check_integrity(full=check)
        target = service.resolve(path, store)
        meta = store.meta()
        totals = {s.source_id: s for s in store.source_stats()}
        counts = store.scope_stats(target.scope) if path else {}
        languages = store.language_counts(target.scope if path else None)
        server_memory = store.server_memory()
        heads = _remote_heads(service, [place.source_id for place in target.places])
        sources = [
            _source_status(
                service,
                store,
                place,
                totals.get(place.source_id),
                counts.get(place.source_id, ScopeCounts()) if path else None,
                languages.get(place.source_id, {}),
                heads,
            )
            for place in target.places
        ]
    mismatch = identity_mismatch(config.embedding, meta)
    running = running_sync(config)
    return StatusReport(
        scope=target.label,
        db=describe_location(config.index_location),
        sync_running=None if running is None else SyncRunning(running or None),
        embedding=EmbeddingState(
            config.embedding.provider,
            config.embedding.model,
            config.embedding.dims,
            tuple(mismatch) if mismatch else None,
            embedder_health(config).recorded(config.embedding),
        ),
        # each source once, however many of its folders a collection spans
        languages=language_totals(languages.get(source_id, {}) for source_id in {e.id: None for e in sources}),
        sources=tuple(sources),
        unfinished_copy=is_unfinished_copy(meta),
        server_memory=server_memory,
        check=None if not check else CHECKED_SERVER if config.db_url else CHECKED_FILE,
    )


def _source_status(
    service: NotesService,
    store: IndexReader,
    place: Place,
    stats: SourceStats | None,
    counts: ScopeCounts | None,
    languages: dict[str, int],
    heads: dict[str, str | SourceError],
) -> SourceStatus:
    """`counts`: inside the place asked about; None: the whole source's, from its `stats`."""
    source_id, folder = place.source_id, place.folder
    if counts is None:
        counts = ScopeCounts(stats.files, stats.chunks, stats.pending) if stats else ScopeCounts()
    from indexer.freshness import LagUnknown, NotIndexed

    lag: Lag
    try:
        lag = _lag(service, store, source_id, folder, heads.get(source_id))
    except NotesSearchError as exc:  # one unreadable source must not hide the others
        lag = LagUnknown(str(exc))
    not_indexed = lag.not_indexed
    if excluded := excluded_file(service.config, source_id, folder):  # the walk never lists it
        not_indexed = NotIndexed(1, ((folder, excluded),))
    return SourceStatus(
        id=source_id,
        kind=service.config.sources[source_id].kind,
        path=folder or None,
        indexed_rev=stats.indexed_rev if stats else None,
        last_sync_at=stats.last_sync_at if stats else None,
        error=stats.last_error if stats else None,
        counts=counts,
        incomplete=bool(stats and stats.files and stats.last_sync_at is None),
        languages=languages,
        front_matter_problems=tuple(
            p
            for p in store.front_matter_problems(source_id)
            if not folder or p.path == folder or p.path.startswith(folder.rstrip("/") + "/")
        ),
        not_indexed=not_indexed,
        lag=lag,
    )


def _remote_heads(service: NotesService, source_ids: list[str]) -> dict[str, str | SourceError]:
    """The git sources' remote heads, asked all at once: a remote that does not answer costs
    the status one timeout, not one a source."""
    sources = [service.config.sources[source_id] for source_id in dict.fromkeys(source_ids)]
    remotes = [source for source in sources if isinstance(source, GitSource)]
    if not service.check_remote or len(remotes) < 2:
        return {}
    from indexer.sources import git as git_source

    return git_source.remote_heads(remotes, git_source.STATUS_REMOTE_TIMEOUT)


def _lag(service: NotesService, store: IndexReader, source_id: str, place: str, asked: str | SourceError | None) -> Lag:
    """How the index differs from the disk (workspace: a stat scan, hashing only on mismatch)
    or from git (the indexed rev vs the mirror head, and the remote's when `check_remote`)."""
    from indexer.freshness import git_freshness, workspace_freshness  # keeps pygit2 out of other commands

    source = service.config.sources[source_id]
    if isinstance(source, GitSource):
        return git_freshness(
            source, store, place, service.config.max_file_bytes, check_remote=service.check_remote, asked=asked
        )
    return workspace_freshness(source, store, place, service.config.max_file_bytes)
