"""Where the notes are, in a few lines: the sources and collections with a short description,
and the package version, for a front end that introduces itself (the MCP server's
instructions), so an agent knows where to look before its first call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.errors import NotesSearchError

if TYPE_CHECKING:
    from search.service import NotesService

PACKAGE = "notes-search"


@dataclass(frozen=True)
class Named:
    name: str
    description: str


@dataclass(frozen=True)
class Overview:
    sources: tuple[Named, ...]  # config order
    collections: tuple[Named, ...]  # by name; empty before the first sync


def package_version() -> str:
    """The installed package's version (what `notes-search --version` prints)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


def overview(service: NotesService) -> Overview:
    """Sources from the config (with their indexed file counts), collections from the index."""
    config = service.config
    stats = {}
    collections: tuple[Named, ...] = ()
    try:
        with service.reading_if_indexed() as store:
            if store is not None:
                stats = {s.source_id: s for s in store.source_stats()}
                rows = sorted(store.collections(), key=lambda row: (row.name, row.source_id))
                collections = tuple(Named(row.name, row.description) for row in rows)
    except NotesSearchError:  # an unreadable index: the sources alone still help
        pass
    sources = []
    for source_id, source in config.sources.items():
        kind = "git repository" if source.kind == "git" else "folder"
        state = stats.get(source_id)
        files = f"{state.files} files indexed" if state is not None and state.last_sync_at else "not synced yet"
        sources.append(Named(source_id, f"{kind}, {files}"))
    return Overview(tuple(sources), collections)
