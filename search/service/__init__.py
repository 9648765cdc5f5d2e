"""The application layer: what the CLI and the MCP server do, free of either front end.

One `NotesService` per process holds what a process keeps between calls: the loaded config,
the embedder (the local model loads once, lazily), the vectors kept in memory for a long-lived
server, and the collection router. Every method opens its own read-only connection (apsw
connections stay on their thread), so the MCP worker threads may call it concurrently. It
imports neither click nor mcp; each front end maps the domain errors to its own wording.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.config import Config, EmbeddingConfig, load_located_config
from indexer.configpaths import locate_config
from indexer.store import IndexReader, index_exists, is_postgres, open_store

if TYPE_CHECKING:
    from indexer.embedders import Embedder
    from indexer.progress_log import Progress
    from search.evaluate import EvalReport
    from search.hits import Hit
    from search.resident import ResidentVectors
    from search.route import Router, RouteResponse
    from search.service.indexing import ReindexOutcome, SyncOutcome
    from search.service.locating import Opened
    from search.service.lookup import CollectionsView, GrepOutcome, TocFile
    from search.service.overview import Overview
    from search.service.reading import FileView, LineWindow, ManyViews
    from search.service.scope import Filters, Target
    from search.service.searching import SearchOutcome
    from search.service.sources import Selection, SourceAdded, SourceRemoved
    from search.service.status import StatusReport

GREP_MAX_HITS = 200  # lines a grep shows unless asked for more: a screenful to scan, a page for an agent

# Every command builds the service, so each operation's module is imported when the operation
# runs: the cron no-op `sync` loads no search engine, a lexical `query` no indexer, and only
# the commands that need them pay for numpy and requests (embedder, resident vectors).


def build_embedder(config: EmbeddingConfig) -> Embedder:
    """The configured embedder; imported on first use (it pulls in numpy and requests)."""
    from indexer.embedders import make_embedder

    return make_embedder(config)


class NotesService:
    """The composition root of one process: config, embedder, resident vectors, stores."""

    def __init__(
        self,
        config: Config,
        embedder_factory: Callable[[EmbeddingConfig], Embedder] = build_embedder,
        *,
        check_remote: bool = False,
    ) -> None:
        self.config = config
        self.check_remote = check_remote  # `status` asks git remotes for their heads (`--offline`: no)
        self._embedder_factory = embedder_factory
        self._lock = threading.RLock()  # tools run on worker threads: creation is serialised
        self._embedder: Embedder | None = None
        self._resident: ResidentVectors | None = None  # created on the first search (imports numpy)
        self._router: Router | None = None

    @classmethod
    def from_config_file(
        cls,
        path: str | None,
        embedder_factory: Callable[[EmbeddingConfig], Embedder] = build_embedder,
        *,
        check_remote: bool = False,
    ) -> NotesService:
        """The service for a config file (None: found as `indexer.configpaths.locate_config` says)."""
        return cls(load_located_config(locate_config(path)), embedder_factory, check_remote=check_remote)

    # ---- per-process state --------------------------------------------------------------------

    def embedder(self) -> Embedder:
        """The process's one embedder, created on first use (the local model loads lazily)."""
        with self._lock:
            if self._embedder is None:
                self._embedder = self._embedder_factory(self.config.embedding)
            return self._embedder

    def resident_vectors(self) -> ResidentVectors:
        """The vectors kept in memory across searches: a long-lived process reuses them."""
        from search.resident import ResidentVectors

        with self._lock:
            if self._resident is None:
                location = self.config.index_location
                self._resident = ResidentVectors(
                    self.config.db, open_reader=lambda: open_store(location, readonly=True)
                )
            return self._resident

    @property
    def keeps_vectors_in_memory(self) -> bool:
        """SQLite's vec0 scans every vector for an unscoped query, so a long-lived process keeps a
        copy in memory; PostgreSQL answers it from its HNSW index instead."""
        return not is_postgres(self.config.index_location)

    def warm_up(self) -> None:
        """Start loading the vectors into memory now, so that the first searches find them there."""
        if self.keeps_vectors_in_memory and index_exists(self.config.index_location):
            self.resident_vectors().reload_in_background()

    def router(self) -> Router:
        """The collection router; it caches the embeddings of the collection descriptions."""
        from search.route import Router

        with self._lock:
            if self._router is None:
                self._router = Router(self.embedder, self.config)
            return self._router

    @contextmanager
    def reading(self) -> Iterator[IndexReader]:
        """A read-only connection per call (cheap; apsw connections stay on their thread, and
        PostgreSQL's come from a pool)."""
        store = open_store(self.config.index_location, readonly=True)
        try:
            yield store
        finally:
            store.close()

    @contextmanager
    def reading_if_indexed(self) -> Iterator[IndexReader | None]:
        """For what works from the files alone (show, get, grep, reindex) before any sync ran:
        workspace files need no index; git files need it only for their indexed rev."""
        if not index_exists(self.config.index_location):
            yield None
            return
        with self.reading() as store:
            yield store

    # ---- scope --------------------------------------------------------------------------------

    def resolve(self, path: str | None, store: IndexReader | None) -> Target:
        from search.service.scope import resolve_path

        return resolve_path(self.config, store, path)

    def scope_from_options(
        self,
        source_ids: tuple[str, ...],
        collection: str | None,
        path: str | None,
        store: IndexReader | None = None,
        filters: Filters | None = None,
    ) -> Target:
        """The CLI's --source/--collection/--path (and --tag/--since/--until); with a store,
        also checked to name something (`search` checks a target it is given itself, in its own
        connection)."""
        from search.service.scope import check_scope_exists, resolve_options, with_filters

        target = with_filters(resolve_options(self.config, source_ids, collection, path), filters)
        if store is not None:
            check_scope_exists(self.config, store, target.scope)
        return target

    # ---- searching ----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        target: Target | None = None,
        path: str | None = None,
        k: int,
        mode: str,
        resident: bool = False,
        filters: Filters | None = None,
        per_file: int | None = None,
        min_similarity: float | None = None,
    ) -> SearchOutcome:
        from search.service.searching import search

        return search(
            self,
            query,
            target=target,
            path=path,
            k=k,
            mode=mode,
            resident=resident,
            filters=filters,
            per_file=per_file,
            min_similarity=min_similarity,
        )

    # ---- indexing -----------------------------------------------------------------------------

    def sync(
        self,
        source_ids: Sequence[str] | None,
        *,
        full: bool,
        progress: Progress | None,
        on_warning: Callable[[str], None] | None = None,
        retry_embedder: bool = False,
    ) -> SyncOutcome:
        from search.service.indexing import sync

        return sync(
            self, source_ids, full=full, progress=progress, on_warning=on_warning, retry_embedder=retry_embedder
        )

    def reindex(self, path: str, *, full: bool, lock_wait: float, progress: Progress | None = None) -> ReindexOutcome:
        """Re-index one place (a source id, collection or [SOURCE:]PATH) now, waiting up to
        `lock_wait` seconds for a running sync."""
        from search.service.indexing import reindex

        return reindex(self, path, full=full, lock_wait=lock_wait, progress=progress)

    def catch_up(self, target: Target, *, embed: bool) -> list[str]:
        from search.service.catchup import catch_up

        return catch_up(self, target, embed=embed)

    # ---- sources in the config ----------------------------------------------------------------

    def add_git_source(
        self, name: str, url: str, *, branch: str | None, mirror: str | None, selection: Selection
    ) -> SourceAdded:
        from search.service.sources import add_git

        return add_git(self.config, name, url, branch=branch, mirror=mirror, selection=selection)

    def add_workspace_source(self, name: str, root: str, selection: Selection) -> SourceAdded:
        from search.service.sources import add_workspace

        return add_workspace(self.config, name, root, selection)

    def remove_source(self, name: str) -> SourceRemoved:
        """The source leaves the config and the index; its mirror is deleted, the user's files never."""
        from search.service.sources import remove

        return remove(self, name)

    # ---- status -------------------------------------------------------------------------------

    def status(self, path: str | None, *, check: bool = False) -> StatusReport:
        from search.service.status import status

        return status(self, path, check)

    # ---- reading ------------------------------------------------------------------------------

    def show(self, ref: str) -> list[FileView]:
        from search.service.reading import show

        return show(self, ref)

    def get(self, ref: str, from_line: int | None, max_lines: int, max_bytes: int) -> LineWindow:
        from search.service.reading import get

        return get(self, ref, from_line, max_lines, max_bytes)

    def read_many(
        self, refs: Sequence[str], *, max_lines: int | None = None, max_bytes: int | None = None
    ) -> ManyViews:
        """Several refs and globs under one size cap (None: the default cap)."""
        from search.service.reading import MANY_MAX_BYTES, MANY_MAX_LINES, read_many

        return read_many(self, refs, max_lines=max_lines or MANY_MAX_LINES, max_bytes=max_bytes or MANY_MAX_BYTES)

    # ---- from a hit to the editor -------------------------------------------------------------

    def locate(self, ref: str) -> Opened:
        """The file an editor opens for `ref` (a git source without checkout: a read-only copy)."""
        from search.service.locating import locate

        return locate(self, ref)

    def remember_hits(self, query: str, hits: Sequence[Hit]) -> None:
        """Keep a `query`'s hits for `open RANK` (the CLI's, not an agent's searches)."""
        from search.service.locating import remember_hits

        remember_hits(self.config, query, hits)

    def remembered_ref(self, rank: int) -> str:
        from search.service.locating import remembered_ref

        return remembered_ref(self.config, rank)

    def overview(self) -> Overview:
        """The sources and collections, named and described (the MCP server's instructions)."""
        from search.service.overview import overview

        return overview(self)

    # ---- lookup -------------------------------------------------------------------------------

    def grep(
        self,
        pattern: str | Sequence[str],
        *,
        target: Target | None = None,
        path: str | None = None,
        ignore_case: bool,
        fixed: bool,
        max_count: int = GREP_MAX_HITS,
    ) -> GrepOutcome:
        """Lines matching `pattern`, or any of several patterns (as `rg -e A -e B`), in `target`,
        or else in what `path` names (resolved as `resolve` does; None: everything); the first
        `max_count` of them."""
        from search.service.lookup import grep

        return grep(self, pattern, target=target, path=path, ignore_case=ignore_case, fixed=fixed, max_count=max_count)

    def toc(self, source_ids: tuple[str, ...], *, max_bytes: int | None = None) -> list[TocFile]:
        """Each source's table of contents (all sources when none is named), its file refreshed;
        the texts cut at whole lines to `max_bytes` in all (None: whole)."""
        from search.service.lookup import toc

        return toc(self, source_ids, max_bytes=max_bytes)

    def collections(self, prefix: str | None) -> CollectionsView:
        from search.service.lookup import collections

        return collections(self, prefix)

    def indexed_refs(self, prefix: str, limit: int) -> list[str]:
        from search.service.lookup import indexed_refs

        return indexed_refs(self, prefix, limit)

    def route(self, question: str, k: int) -> RouteResponse:
        from search.service.lookup import route

        return route(self, question, k)

    def evaluate(self, file: Path, modes: tuple[str, ...]) -> EvalReport:
        from search.service.lookup import evaluate

        return evaluate(self, file, modes)
