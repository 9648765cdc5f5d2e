"""What one run of the indexer did, per source and in all: the sync's answer to its callers.

Kept apart from `indexer.sync` so that the vector half (`indexer.vectors`), which counts into the
same report, does not import the orchestrator that drives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# said of a source a search could not look at (a drive not mounted): what the index holds answers
AS_LAST_INDEXED = "its notes are searched as last indexed"


@dataclass
class SourceReport:
    source_id: str
    kind: str
    added: int = 0
    updated: int = 0
    deleted: int = 0
    touched: int = 0
    skipped: int = 0
    skips: list[tuple[str, str]] = field(default_factory=list)  # (path, why), for `reindex PATH`
    rev: str | None = None
    error: str | None = None
    error_repeated: bool = False  # the same error as the last sync's: cron has been told it once
    unreadable: list[str] = field(default_factory=list)  # folders whose indexed files were kept
    recloned: str | None = None  # why a damaged git mirror was cloned again
    # (`_meta.yaml` path, what is wrong): collections that fell back to their folder's name
    collection_problems: list[tuple[str, str]] = field(default_factory=list)
    # (note path, what is wrong): front matter of the notes indexed now, read line by line or
    # with a repeated key's first value (`status` keeps listing them until they are mended)
    front_matter_problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.deleted)


@dataclass
class SyncReport:
    locked: bool = False
    sources: list[SourceReport] = field(default_factory=list)
    embedded: int = 0
    repaired_vectors: int = 0  # zero vectors an older version stored, dropped to be embedded again
    pending: int = 0
    embed_notice: str | None = None
    rebuilt: str | None = None  # why vectors were dropped, when they were
    rechunked: str | None = None  # why every note of some sources was chunked again, when it was
    busy: list[str] = field(default_factory=list)  # sources left alone: another worker syncs them
    neutral: str | None = None  # the language statistics, when this run re-estimated them
    coverage: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.rebuilt) or self.embedded > 0 or any(s.changed for s in self.sources)

    @property
    def failed(self) -> list[SourceReport]:
        return [s for s in self.sources if s.error]
