"""What is indexed, when, what is pending, and whether the index lags the disk or the remote."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from indexer.config import GitSource, identity_mismatch
from indexer.errors import NotesSearchError
from indexer.lock import running_sync
from indexer.store import IndexReader, ScopeCounts, ServerMemory, describe_location, is_unfinished_copy

if TYPE_CHECKING:
    from indexer.embed_health import Outage
    from search.service import NotesService


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
class StatusReport:
    scope: str
    db: str
    sync_running: SyncRunning | None
    embedding: EmbeddingState
    languages: dict[str, int]  # chunks per language over the sources shown, largest first
    sources: tuple[dict[str, Any], ...]  # one per place: counts, last sync, languages, lag
    unfinished_copy: bool = False  # a `migrate` into this index was stopped before it verified
    server_memory: ServerMemory | None = None  # a database server's buffer pool (PostgreSQL)

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "db": self.db,
            "unfinished_copy": self.unfinished_copy,
            "server_memory": None if self.server_memory is None else self.server_memory.to_json(),
            "sync_running": None if self.sync_running is None else {"pid": self.sync_running.pid},
            "embedding": self.embedding.to_json(),
            "languages": self.languages,
            "sources": list(self.sources),
        }


def language_totals(per_source: Iterable[dict[str, int]]) -> dict[str, int]:
    """Chunks per language over several sources, largest first."""
    totals: dict[str, int] = {}
    for languages in per_source:
        for language, count in languages.items():
            totals[language] = totals.get(language, 0) + count
    return dict(sorted(totals.items(), key=lambda item: (-item[1], item[0])))


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
        sources = []
        for place in target.places:
            source_id = place.source_id
            source = config.sources[source_id]
            stats = totals.get(source_id)
            entry: dict[str, Any] = {
                "id": source_id,
                "kind": source.kind,
                "path": place.folder or None,
                "indexed_rev": stats.indexed_rev if stats else None,
                "last_sync_at": stats.last_sync_at if stats else None,
                "error": stats.last_error if stats else None,
            }
            if path:
                entry.update(counts.get(source_id, ScopeCounts()).to_json())
            else:
                entry.update(
                    files=stats.files if stats else 0,
                    chunks=stats.chunks if stats else 0,
                    pending=stats.pending if stats else 0,
                )
            # files written but no whole sync finished: a first sync was killed (or still runs)
            entry["incomplete"] = bool(stats and stats.files and stats.last_sync_at is None)
            entry["languages"] = languages.get(source_id, {})
            entry["front_matter_problems"] = [
                {"path": p.path, "problem": p.problem}
                for p in store.front_matter_problems(source_id)
                if not place.folder or p.path == place.folder or p.path.startswith(place.folder.rstrip("/") + "/")
            ]
            try:
                entry["lag"] = _lag(service, store, source_id, place.folder)
            except NotesSearchError as exc:  # one unreadable source must not hide the others
                entry["lag"] = {"lags": None, "error": str(exc)}
            sources.append(entry)
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
        languages=language_totals(languages.get(source_id, {}) for source_id in {e["id"]: None for e in sources}),
        sources=tuple(sources),
        unfinished_copy=is_unfinished_copy(meta),
        server_memory=server_memory,
    )


def _lag(service: NotesService, store: IndexReader, source_id: str, place: str) -> dict[str, Any]:
    """How the index differs from the disk (workspace: a stat scan, hashing only on mismatch)
    or from git (the indexed rev vs the mirror head, and the remote's when `check_remote`)."""
    from indexer.freshness import git_freshness, workspace_freshness  # keeps pygit2 out of other commands

    source = service.config.sources[source_id]
    if isinstance(source, GitSource):
        return git_freshness(source, store, check_remote=service.check_remote)
    return workspace_freshness(source, store, place, service.config.max_file_bytes)
