"""The catch-up before a search: what changed on disk in the workspace sources it covers is
indexed first, so a note written just before the search is found by it.

Apart from the sync and the reindex (`indexing.py`): every search runs this, and an unscoped
one that finds nothing changed must load no indexer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.config import WALKED_FILES_KEY, Config, WorkspaceSource
from indexer.errors import SourceError
from indexer.reports import AS_LAST_INDEXED
from indexer.store import IndexReader
from search.service.scope import Target

if TYPE_CHECKING:
    from search.service import NotesService

# what looking for changes in one file costs an unscoped search (figures in the README), rounded up
CATCH_UP_FILE_SECONDS = 50e-6
# what an unscoped search may spend walking workspace sources first: one such folder
UNSCOPED_CATCH_UP_BUDGET = 0.05


@dataclass(frozen=True)
class CatchUpChoice:
    """Which workspace sources an unscoped search caught up first, and which it left (why)."""

    caught_up: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (source id, reason)

    def to_json(self) -> dict[str, object]:
        return {
            "caught_up": list(self.caught_up),
            "skipped": [{"source": source_id, "reason": reason} for source_id, reason in self.skipped],
        }

    def describe(self) -> str:
        """One line for --explain."""
        parts = [f"caught up {', '.join(self.caught_up)}" if self.caught_up else "caught up nothing"]
        parts += [f"skipped {source_id} ({reason})" for source_id, reason in self.skipped]
        return "; ".join(parts)


def choose_unscoped(config: Config, meta: dict[str, str]) -> CatchUpChoice:
    """The workspace sources whose whole walk fits UNSCOPED_CATCH_UP_BUDGET together, in config
    order, judged by their file count at the last whole walk (a sync records it); a source never
    walked whole has no count and waits for `sync`."""
    left = UNSCOPED_CATCH_UP_BUDGET
    caught_up: list[str] = []
    skipped: list[tuple[str, str]] = []
    for source_id, source in config.sources.items():
        if not isinstance(source, WorkspaceSource):
            continue
        files = meta.get(WALKED_FILES_KEY + source_id, "")
        if not files.isdigit():
            skipped.append((source_id, "not walked whole yet: `notes-search sync` first"))
            continue
        cost = int(files) * CATCH_UP_FILE_SECONDS
        if cost > left:
            skipped.append(
                (
                    source_id,
                    f"{files} files, ~{cost * 1000:.0f} ms to walk: over the search's budget; a scoped search, sync or watch catches it up",
                )
            )
            continue
        caught_up.append(source_id)
        left -= cost
    return CatchUpChoice(tuple(caught_up), tuple(skipped))


def catch_up_unscoped(service: NotesService, store: IndexReader, *, embed: bool) -> tuple[list[str], CatchUpChoice]:
    """An unscoped search's catch-up: the workspace sources `choose_unscoped` picks are compared
    with the index by a read-only stat walk, and only those where something changed are synced
    (bounded like a scoped catch-up), so a search with nothing to catch up writes nothing and
    loads no indexer. Returns the notices and the choice."""
    choice = choose_unscoped(service.config, store.meta())
    notices: list[str] = []
    changed: list[str] = []
    for source_id in choice.caught_up:
        try:
            if _changed_on_disk(service.config, store, source_id):
                changed.append(source_id)
        except SourceError as exc:  # a drive not mounted: the other sources are still searched
            notices.append(f"{exc}; {AS_LAST_INDEXED}")
    if not changed:
        return notices, choice
    from indexer.sync import catch_up as catch_up_sources

    notice = catch_up_sources(service.config, tuple(changed), None, service.embedder if embed else None)
    return notices + ([notice] if notice else []), choice


def _changed_on_disk(config: Config, store: IndexReader, source_id: str) -> bool:
    """Whether a file of the workspace source was added, edited or removed since it was indexed
    (stat first, then the hash of files whose stat differs)."""
    from indexer.model import Delete, Upsert
    from indexer.sources import workspace

    source = config.sources[source_id]
    assert isinstance(source, WorkspaceSource)
    known = store.known_files(source_id)
    changes = workspace.scan(source, known, max_file_bytes=config.max_file_bytes, log=workspace.QUIET_LOG)
    return any(isinstance(change, (Upsert, Delete)) for change in changes)


def catch_up(service: NotesService, target: Target, *, embed: bool) -> list[str]:
    """Index what changed on disk inside the target first, so a note written just before the
    search is found by it; bounded, and it never rebuilds. Each workspace place is caught up on
    its own (a collection spans folders); equal notices are said once. `embed=False` (a lexical
    search) indexes the text only and leaves the vectors to the next sync: it never waits on
    the embedder."""
    from indexer.sync import catch_up as catch_up_place

    notices: list[str] = []
    for place in target.places:
        if isinstance(service.config.sources[place.source_id], WorkspaceSource):
            notice = catch_up_place(
                service.config, (place.source_id,), place.folder or None, service.embedder if embed else None
            )
            if notice and notice not in notices:
                notices.append(notice)
    return notices
