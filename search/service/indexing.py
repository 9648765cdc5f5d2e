"""Writing the index on request: a sync, a reindex of one place, and the one JSON shape of a
source's report (the catch-up before a search is `catchup.py`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from indexer.config import GitSource, selection_warnings
from indexer.errors import NotesSearchError
from indexer.progress_log import Progress
from search.service.scope import Place, Target

if TYPE_CHECKING:  # indexer.sync loads the chunker and the drivers: imported by the functions that run it
    from indexer.sync import SourceReport, SyncReport
    from search.service import NotesService

log = logging.getLogger("notes_search")


def source_report_json(
    s: SourceReport, *, place: Place | None = None, shape: Literal["sync", "reindex"] = "sync"
) -> dict[str, object]:
    """One source's part of a sync (`sync --json`, `reindex --json`) or of an MCP reindex, which
    names the place re-scanned and leaves out what only a whole sync reports."""
    if shape == "reindex":
        return {
            "id": s.source_id,
            "kind": s.kind,
            "path": (place.folder if place else "") or None,
            "added": s.added,
            "updated": s.updated,
            "deleted": s.deleted,
            "skipped": s.skipped,
            "rev": s.rev,
            "error": s.error,
            "unreadable": _unreadable(s),
            "recloned": s.recloned,
        }
    return {
        "id": s.source_id,
        "kind": s.kind,
        "added": s.added,
        "updated": s.updated,
        "deleted": s.deleted,
        "touched": s.touched,
        "skipped": s.skipped,
        "rev": s.rev,
        "error": s.error,
        "unreadable": _unreadable(s),
        "recloned": s.recloned,
        "skips": [{"path": path, "reason": reason} for path, reason in s.skips],
        "collection_problems": [{"path": path, "problem": problem} for path, problem in s.collection_problems],
        "front_matter_problems": [{"path": path, "problem": problem} for path, problem in s.front_matter_problems],
    }


def _unreadable(s: SourceReport) -> list[str]:
    """The folders that could not be read (their indexed files are kept), as `folder/`."""
    return [f"{folder}/" if folder else "./" for folder in s.unreadable]


def sync_report_json(report: SyncReport) -> dict[str, object]:
    """`locked`: another sync held the lock, so nothing was done (every count is zero);
    `busy`: the sources another worker was syncing, left to it (PostgreSQL)."""
    return {
        "locked": report.locked,
        "busy": report.busy,
        "changed": report.changed,
        "seconds": report.seconds,
        "embedded": report.embedded,
        "repaired_vectors": report.repaired_vectors,
        "pending": report.pending,
        "embed_notice": report.embed_notice,
        "rebuilt": report.rebuilt,
        "rechunked": report.rechunked,
        "coverage": report.coverage,
        "sources": [source_report_json(s) for s in report.sources],
    }


@dataclass(frozen=True)
class SyncOutcome:
    """The sync's report and the config's selection warnings (logged when the sync started)."""

    report: SyncReport
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return sync_report_json(self.report)


@dataclass(frozen=True)
class ReindexRun:
    """One run of the indexer over the places of one folder (one lock, one embedding pass)."""

    places: tuple[Place, ...]
    report: SyncReport


@dataclass(frozen=True)
class ReindexOutcome:
    """`locked`: a running sync kept its lock past the wait; the runs before it are kept."""

    target: Target
    runs: tuple[ReindexRun, ...]
    locked: bool
    notices: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return any(run.report.failed for run in self.runs)

    @property
    def report(self) -> SyncReport:
        """The runs as one report, as one sync over all the places would give it."""
        return merged_reports([run.report for run in self.runs])

    @property
    def sources(self) -> list[tuple[Place, SourceReport]]:
        """Each source's part of the runs, with the place of it that was re-scanned."""
        return [(Place(s.source_id, run.places[0].folder), s) for run in self.runs for s in run.report.sources]


def merged_reports(reports: Sequence[SyncReport]) -> SyncReport:
    """Several runs' reports as one: the sources of each, the work summed, what holds at the end
    (pending) from the last."""
    from indexer.sync import SyncReport

    if len(reports) == 1:
        return reports[0]
    notices = [r.embed_notice for r in reports if r.embed_notice]
    rechunked = [r.rechunked for r in reports if r.rechunked]  # one run per git source may each say it
    return SyncReport(
        locked=any(r.locked for r in reports),
        sources=[s for r in reports for s in r.sources],
        embedded=sum(r.embedded for r in reports),
        repaired_vectors=sum(r.repaired_vectors for r in reports),
        pending=reports[-1].pending if reports else 0,
        embed_notice="; ".join(dict.fromkeys(notices)) or None,
        rebuilt=next((r.rebuilt for r in reports if r.rebuilt), None),
        rechunked="; ".join(dict.fromkeys(rechunked)) or None,
        busy=[sid for r in reports for sid in r.busy],
        neutral=next((r.neutral for r in reversed(reports) if r.neutral), None),
        coverage=[line for r in reports for line in r.coverage],
        seconds=round(sum(r.seconds for r in reports), 3),
    )


def sync(
    service: NotesService,
    source_ids: Sequence[str] | None,
    *,
    full: bool,
    progress: Progress | None,
    on_warning: Callable[[str], None] | None = None,
    retry_embedder: bool = False,
) -> SyncOutcome:
    """A sync of the selected sources (None: all). The config's selection warnings are logged
    and handed to `on_warning` before the sync starts (a person sees them before the progress)."""
    from indexer.sync import run_sync

    warnings = tuple(selection_warnings(service.config))
    for warning in warnings:
        log.warning("%s", warning)
        if on_warning is not None:
            on_warning(warning)
    report = run_sync(
        service.config,
        source_ids=list(source_ids or ()) or None,
        full=full,
        embedder_factory=service.embedder,
        progress=progress,
        retry_embedder=retry_embedder,
        tells_errors=True,
    )
    return SyncOutcome(report, warnings)


def reindex(
    service: NotesService,
    path: str,
    *,
    full: bool,
    lock_wait: float,
    progress: Progress | None = None,
) -> ReindexOutcome:
    """Re-index one place now: PATH is a source id, a collection, or [SOURCE:]PATH (a bare path
    in every source that has it; '.' every source whole), as `status` and `search` read it;
    nothing named (everything) is refused, as that is a sync. The places of one folder are one
    run, as one sync over them would be; a collection's folders are a run each."""
    from indexer.sync import run_reindex
    from search.refs import excluded_file

    config = service.config
    with service.reading_if_indexed() as store:
        target = service.resolve(path, store)
    if target.is_all:
        raise NotesSearchError("reindex needs a path, a collection or a source id (a full sync is `notes-search sync`)")
    groups: dict[str, list[Place]] = {}
    for place in target.places:
        groups.setdefault(place.folder, []).append(place)
    runs: list[ReindexRun] = []
    for folder, group in groups.items():
        report = run_reindex(
            config,
            source_ids=[p.source_id for p in group],
            path=folder or None,
            full=full,
            embedder_factory=service.embedder,
            lock_timeout=lock_wait,
            progress=progress,
        )
        if report.locked:
            return ReindexOutcome(target, tuple(runs), True)
        for s in report.sources:  # the walk never sees an excluded file: say why nothing happened
            if folder and not s.error and (excluded := excluded_file(config, s.source_id, folder)):
                s.skipped += 1
                s.skips.append((folder, excluded))
        runs.append(ReindexRun(tuple(group), report))
    notices = [run.report.embed_notice for run in runs if run.report.embed_notice]
    if any(isinstance(config.sources[p.source_id], GitSource) for p in target.places):
        notices.append("git sources are re-synced whole (fetch + tree diff); a path only narrows workspace scans")
    return ReindexOutcome(target, tuple(runs), False, tuple(notices))
