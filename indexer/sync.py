"""The sync orchestrator: sources -> chunker -> store -> embedder, under the lock, in transactions.

Crash safety comes from the order of writes: file changes are committed in batches (each a
transaction), vectors are attached afterwards in their own transactions, and a git source's
`indexed_rev` moves only once every change of that revision is committed. A killed sync
therefore leaves a consistent index that the next run completes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from indexer import chunker, language, neutral, toc
from indexer.collections import META_FILE, CollectionFolder, collection_for, collections_of, find_collections
from indexer.config import (
    GIT_COLLECTIONS_KEY,
    SAID_ERROR_KEY,
    VECTOR_SPACE_KEY,
    WALKED_FILES_KEY,
    Config,
    GitSource,
    Source,
    WorkspaceSource,
    identity_mismatch,
    unrecorded_identity,
)
from indexer.errors import (
    NotesSearchError,
    SourceError,
    StoreError,
)
from indexer.globs import SELECTION_RULES
from indexer.lock import HeldIndexLock, IndexLock, open_index_lock
from indexer.model import Change, CollectionProblem, Delete, Skipped, Touch, Unlisted, Upsert
from indexer.progress_log import Progress, ProgressLog

# run_sync and run_reindex answer with these, so callers may name them from here too
from indexer.reports import AS_LAST_INDEXED
from indexer.reports import SourceReport as SourceReport
from indexer.reports import SyncReport as SyncReport
from indexer.sources import workspace
from indexer.store import CollectionRow, IndexWriter, integrity, is_postgres, open_store
from indexer.vectors import VectorWork

if TYPE_CHECKING:
    from indexer.embedders import Embedder

log = logging.getLogger("notes_search.sync")

WRITE_BATCH_FILES = 200
LANGUAGE_BACKFILL_BATCH = 2000  # chunks per transaction when an older index gets its languages
COVERAGE_KEY = "coverage_report"  # the last sync's coverage lines, to log them only when they change


class Syncer(VectorWork):
    """One run of the indexer: a sync, a reindex or a catch-up. Holds no state between runs:
    the database is the state."""

    def __init__(
        self,
        config: Config,
        store: IndexWriter,
        embedder_factory: Callable[[], Embedder] | None,
        progress: Progress | None = None,
        lock: IndexLock | None = None,
        retry_embedder: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        self.embedder_factory = embedder_factory
        # nobody watching (cron, hooks, the MCP server, --quiet): a long stage is told in the log
        self.progress = progress or ProgressLog(log)
        self.lock: IndexLock = lock or HeldIndexLock()
        self.walked: dict[str, int] = {}  # workspace source -> files after a whole walk
        # try the embedder even while a remembered outage's back-off runs (`--full`, `--retry-embedder`)
        self.retry_embedder = retry_embedder
        # git source -> its remote's head (or why it is unknown), asked before the lock was taken
        self.remote_heads: dict[str, str | SourceError] = {}

    # ---- identity -------------------------------------------------------------------------

    def ensure_identity(self) -> tuple[str | None, dict[str, str | None]]:
        """Rebuild the vector space if the config's differs. Returns (why rebuilt, the sources
        whose files were chunked by another chunker version and must be re-chunked, each with the
        version that chunked them: None for a source not synced yet).
        Raises IndexBusy when a rebuild is due but other workers share the index."""
        meta = self.store.meta()
        rebuilt = None
        if not self.store.has_vector_table() or identity_mismatch(self.config.embedding, meta):
            if not self.lock.claim_index():
                raise IndexBusy
            meta = self.store.meta()  # as it was when the other runs ended
        if not self.store.has_vector_table() or identity_mismatch(self.config.embedding, meta):
            mismatch = identity_mismatch(self.config.embedding, meta)
            if self.store.has_vector_table() and meta.get("embedding_model") is not None:
                rebuilt = "embedding space changed (" + "; ".join(mismatch) + "): old vectors dropped"
                log.warning("%s", rebuilt)
            # a new space starts without language statistics: they are estimated from its vectors
            self.store.reset_vectors(
                self.config.embedding.dims,
                {**self.config.embedding.identity(), neutral.STATS_KEY: "", neutral.SUMMARY_KEY: ""},
            )
        elif config_space := self._adopt_unrecorded_space(meta):
            self.store.set_meta(config_space)
        self.lock.release_index()
        # per source, so `sync --source`, hooks and the watcher's reconcile record their own;
        # the global key is what indexes written before per-source keys hold
        chunked_by = {source_id: self._chunked_by(source_id, meta) for source_id in self.config.sources}
        stale = {source_id: version for source_id, version in chunked_by.items() if version != chunker.CHUNKER_VERSION}
        return rebuilt, stale

    def _chunked_by(self, source_id: str, meta: dict[str, str]) -> str | None:
        """The chunker version that chunked a source's notes: its own key, else the global one
        of an index written before per-source keys, unless the source was added since and never
        synced (chunked by nothing). Its state is read only in that case, not on every sync."""
        own = meta.get(f"chunker_version:{source_id}")
        if own is not None or "chunker_version" not in meta:
            return own
        return meta["chunker_version"] if self.store.source_state(source_id).last_sync_at else None

    def _adopt_unrecorded_space(self, meta: dict[str, str]) -> dict[str, str]:
        """An index written before the vector space was recorded holds raw vectors and no
        statistics: a valid space of either kind; one written before the window was recorded
        holds the local engine's vectors. Record them instead of re-embedding."""
        adopted = unrecorded_identity(self.config.embedding, meta)
        if VECTOR_SPACE_KEY in adopted:
            adopted.update({neutral.STATS_KEY: "", neutral.SUMMARY_KEY: ""})
        return adopted

    # ---- applying changes -----------------------------------------------------------------

    def apply(self, source_id: str, changes: Iterable[Change], report: SourceReport, known: set[str]) -> None:
        """Write changes in batches; upserts of a batch go before its deletions (vector reuse)."""
        batch: list[Change] = []
        for change in changes:
            batch.append(change)
            if len(batch) >= WRITE_BATCH_FILES:
                self._write_batch(source_id, batch, report, known)
                batch = []
        if batch:
            self._write_batch(source_id, batch, report, known)

    def _write_batch(self, source_id: str, batch: list[Change], report: SourceReport, known: set[str]) -> None:
        parsed = []
        for change in batch:
            if isinstance(change, Upsert):
                try:
                    doc = chunker.parse_markdown(change.file.text, change.file.path)
                except Exception as exc:  # noqa: BLE001 - one bad file must not stop the sync
                    log.warning("%s:%s: skipped, chunker failed: %s", source_id, change.file.path, exc)
                    report.skipped += 1
                    report.skips.append((change.file.path, f"chunker failed: {exc}"))
                    continue
                parsed.append((change.file, doc))
                if doc.front_matter_problem:
                    log.warning("%s:%s: front matter: %s", source_id, change.file.path, doc.front_matter_problem)
                    report.front_matter_problems.append((change.file.path, doc.front_matter_problem))
        # the chunks of new files are detected together; an edited file's unchanged chunks keep
        # their language by content hash, so its other chunks are detected one by one
        language_of = language.chunk_language_of(
            [chunk.text for file, doc in parsed if file.path not in known for chunk in doc.chunks]
        )
        toc.mark_stale(self.config, source_id)
        with self.store.transaction():
            self.store.write_files(source_id, parsed, language_of)
            for file, _ in parsed:
                if file.path in known:
                    report.updated += 1
                else:
                    report.added += 1
                    known.add(file.path)
            for change in batch:
                if isinstance(change, Delete) and change.path in known:
                    self.store.delete_file(source_id, change.path)
                    known.discard(change.path)
                    report.deleted += 1
                elif isinstance(change, Touch):
                    self.store.touch_file(source_id, change.path, change.size, change.mtime)
                    report.touched += 1
                elif isinstance(change, Skipped):
                    # a driver that knows the indexed copy is stale (now binary, too large) sends
                    # a Delete first; a transient failure (unreadable now) keeps the copy
                    report.skipped += 1
                    report.skips.append((change.path, change.reason))
                    log.warning("%s:%s: skipped: %s", source_id, change.path, change.reason)

    # ---- per source -------------------------------------------------------------------------

    def sync_workspace(
        self, source: WorkspaceSource, full: bool, path: str | None = None, *, rechunk: bool = False
    ) -> SourceReport:
        """`rechunk`: every note is read again as for `full`, but a root found empty is still a
        drive not mounted (an upgrade's re-chunk emptied such a source's index)."""
        report = SourceReport(source.id, source.kind)
        known_files = self.store.known_files(source.id, under=path)
        # last_sync_at is set only once a whole walk finished: until then `status` calls the
        # index incomplete (a killed first sync), whatever a scoped run indexed meanwhile
        never_synced = self.store.source_state(source.id).last_sync_at is None
        if path:
            # a scoped re-index: walk and compare only below `path`
            source = dataclasses.replace(source, selection=source.selection.within(path))
        changes = workspace.scan(
            source,
            known_files,
            full=full or rechunk,
            accept_empty=full,
            max_file_bytes=self.config.max_file_bytes,
            log=log,
        )
        self.apply(
            source.id, self._counting(self._noting_folder_findings(changes, report), "files"), report, set(known_files)
        )
        if not path:
            self._refresh_collections(source, report.unreadable)
            self.walked[source.id] = len(known_files) + report.added - report.deleted
        if (report.changed or full or rechunk or never_synced) and not (path and never_synced):
            self.store.mark_synced(source.id)
        return report

    @staticmethod
    def _noting_folder_findings(changes: Iterable[Change], report: SourceReport) -> Iterator[Change]:
        """Folders the scan could not list, and `_meta.yaml` files it could not take as written,
        go to the report and the log, not to the store."""
        for change in changes:
            if isinstance(change, CollectionProblem):  # the scan has logged it
                report.collection_problems.append((change.path, change.problem))
            elif isinstance(change, Unlisted):
                report.unreadable.append(change.path)
                log.warning(
                    "%s:%s/: cannot read the folder (%s); keeping its %d indexed files until it can be read",
                    report.source_id,
                    change.path or ".",
                    change.reason,
                    change.kept,
                )
            else:
                yield change

    def _record_walked_files(self) -> None:
        """How many files each wholly walked workspace source has: an unscoped search catches up
        only the sources whose walk this says fits its time budget. Written only when it changed,
        so a no-op sync (a cron tick, a search's catch-up) writes nothing."""
        meta = self.store.meta() if self.walked else {}
        changed = {
            WALKED_FILES_KEY + sid: str(files)
            for sid, files in self.walked.items()
            if meta.get(WALKED_FILES_KEY + sid) != str(files)
        }
        if changed:
            self.store.set_meta(changed)

    def _refresh_collections(self, source: WorkspaceSource, unreadable: list[str]) -> None:
        """Keep collections (and each file's collection) in step with `_meta.yaml` files, which
        can appear or change without any note changing. Writes only when something differs.
        Collections inside folders that cannot be read now are kept, like their files."""
        # the collections walk repeats the scan's walk, whose findings the scan has already logged:
        # a logger that drops them, never registered with `logging` (nothing configured at import)
        rewalk = logging.Logger("notes_search.sync.rewalk")  # noqa: LOG001 - unregistered on purpose
        rewalk.addHandler(logging.NullHandler())
        found = find_collections(source.id, source.root, source.selection, rewalk)
        stored = self.store.collection_rows(source.id)
        found += [
            CollectionFolder(row.name, row.description, row.tags, source.id, row.folder)
            for row in stored
            if any(
                not blocked or row.folder == blocked or row.folder.startswith(blocked + "/") for blocked in unreadable
            )
        ]
        self._store_collections(source.id, found, stored)

    def _store_collections(
        self, source_id: str, found: list[CollectionFolder], stored: list[CollectionRow] | None = None
    ) -> None:
        """The source's collections as `found`, each file in its own; writes only what differs."""
        stored = self.store.collection_rows(source_id) if stored is None else stored
        declared = sorted((c.name, c.folder, c.description, tuple(c.tags)) for c in found)
        rows = [
            CollectionRow(source_id, name, folder, description, tags) for name, folder, description, tags in declared
        ]
        if rows == stored:
            return
        toc.mark_stale(self.config, source_id)  # its folder headings name the collections
        with self.store.transaction():  # one transaction: a kill must not split table and file rows
            self.store.replace_collections(source_id, rows)
            for path in self.store.known_files(source_id):
                self.store.set_file_collection(source_id, path, collection_for(path, found))

    def _git_collections(self, source: GitSource, rev: str, report: SourceReport) -> list[CollectionFolder]:
        """The collections of a git source at `rev`: its `_meta.yaml` files, read from the tree
        (what one got wrong goes to the report and the log, as a workspace scan's does)."""
        from indexer.sources import git as git_source

        def reader(data: bytes) -> Callable[[], str]:
            return lambda: data.decode("utf-8-sig")

        metas = [
            (folder, f"{source.id}:{folder + '/' if folder else ''}{META_FILE}", reader(data))
            for folder, data in git_source.meta_files(source, rev)
        ]
        problems: list[CollectionProblem] = []
        found = collections_of(source.id, metas, log, problems)
        report.collection_problems += [(problem.path, problem.problem) for problem in problems]
        return found

    def sync_git(self, source: GitSource, full: bool) -> SourceReport:
        from indexer.sources import (
            git as git_source,  # pygit2 loads only when a git source syncs
        )

        try:
            return self._sync_git(source, full)
        except git_source.MirrorDamaged as exc:
            # objects a fetch never reads (blobs) turned out broken while indexing: clone again
            # and index as after a force-push (indexed_rev has not moved, so nothing is lost)
            git_source.reclone(source, exc.reason)
            report = self._sync_git(source, full)
            report.recloned = exc.reason
            return report

    def _sync_git(self, source: GitSource, full: bool) -> SourceReport:
        from indexer.sources import git as git_source

        report = SourceReport(source.id, source.kind)
        indexed_rev = self.store.source_state(source.id).indexed_rev
        # A tree diff only visits paths that changed between commits: after the config's scope
        # (or size limit) changed, only a full pass adds files that entered it and drops the rest.
        scope_key = f"scope:{source.id}"
        # how the patterns are read (SELECTION_RULES: hidden names left out) is part of the scope
        selection = source.selection
        scope = repr(
            (selection.paths, selection.include, selection.exclude, self.config.max_file_bytes, SELECTION_RULES)
        )
        meta = self.store.meta()
        rescope = meta.get(scope_key) != scope
        full = full or (rescope and indexed_rev is not None)
        # the rev whose `_meta.yaml` files the collections were read from (an index made before
        # git sources had collections reads them once, on its next tick)
        collections_key = f"{GIT_COLLECTIONS_KEY}{source.id}"
        asked = self.remote_heads.get(source.id)
        if isinstance(asked, SourceError):
            raise asked
        remote = asked or git_source.remote_head(source)
        if remote == indexed_rev and not full and git_source.mirror_head(source) == indexed_rev:
            report.rev = indexed_rev
            if indexed_rev is not None and meta.get(collections_key) != indexed_rev:
                self._store_collections(source.id, self._git_collections(source, indexed_rev, report))
                self.store.set_meta({collections_key: indexed_rev})
            return report  # the common cron tick: no fetch, no write
        head, report.recloned = git_source.update_mirror(source)
        report.rev = head
        if head == indexed_rev and not full:
            return report
        known_files = self.store.known_files(source.id)
        incremental = not full and indexed_rev is not None and git_source.is_ancestor(source, indexed_rev, head)
        collections = self._git_collections(source, head, report)
        changes: Iterator[Change] = git_source.changes(
            source, indexed_rev if incremental else None, head, max_file_bytes=self.config.max_file_bytes
        )
        if not incremental:
            # full contract: every admitted file is upserted; whatever else the index holds goes
            present = git_source.tree_paths(source, head)
            stale = [Delete(path) for path in sorted(set(known_files) - present)]
            changes = _chain(changes, stale)
        changes = _in_collections(changes, collections)
        self.apply(source.id, self._counting(changes, "files"), report, set(known_files))
        self._store_collections(source.id, collections)
        self.store.mark_synced(source.id, indexed_rev=head)
        self.store.set_meta({collections_key: head, **({scope_key: scope} if rescope else {})})
        return report

    def _counting(self, changes: Iterable[Change], stage: str) -> Iterator[Change]:
        for done, change in enumerate(changes, 1):
            self.progress(stage, done, 0)
            yield change

    # ---- the three operations ---------------------------------------------------------------

    def sync(self, source_ids: list[str] | None, *, full: bool, tells_errors: bool = False) -> SyncReport:
        """Bring whole sources up to date (None: every configured one, and a source no longer
        configured leaves the index): the cron job, a hook, `sync`, the watcher's reconcile."""
        started = time.monotonic()
        try:
            report, stale_chunking = self._begin()
        except IndexBusy:
            return SyncReport(locked=True)
        self._backfill_languages()
        self._index_sources(report, source_ids or list(self.config.sources), full, None, stale_chunking, tells_errors)
        if not source_ids:
            self._remove_unconfigured()
        self._write_tocs(report, whole=True)
        self._record_rechunked(report, stale_chunking, whole=True)
        self._embed_whole(report)
        report.coverage = workspace.coverage_report(self.config)
        self._log_coverage(report.coverage)
        return self._finish(report, started)

    def reindex(self, source_ids: list[str], path: str | None, *, full: bool) -> SyncReport:
        """Re-read one file or folder of the sources now (`reindex PATH`, a watcher event); a
        git source is brought to its head whole, as a tree diff has no notion of one path.
        Without a path it is a sync of those sources."""
        if path is None:
            return self.sync(source_ids, full=full)
        started = time.monotonic()
        try:
            report, stale_chunking = self._begin()
        except IndexBusy:
            return SyncReport(locked=True)
        self._backfill_languages()
        self._index_sources(report, source_ids or list(self.config.sources), full, path, stale_chunking)
        # the TOC waits for the next whole sync: rebuilding a large source's costs more than the edit
        self._write_tocs(report, whole=False)
        self._record_rechunked(report, stale_chunking, whole=False)
        self._embed_whole(report)
        return self._finish(report, started)

    def catch_up(self, source_ids: list[str], path: str | None, *, embed_budget: float) -> SyncReport:
        """Index what changed on disk before a search: never a rebuild, never a re-chunking of
        whole sources, and at most `embed_budget` seconds of embedding (the rest stays pending)."""
        started = time.monotonic()
        if identity_mismatch(self.config.embedding, self.store.meta()) or not self.store.has_vector_table():
            return SyncReport(embed_notice="index needs a full sync (embedding identity changed); catch-up skipped")
        try:
            report, _ = self._begin()
        except IndexBusy:
            return SyncReport(locked=True)
        self._index_sources(report, source_ids or list(self.config.sources), False, path, {})
        self._write_tocs(report, whole=path is None)
        self._record_walked_files()
        self.embed_pending(report, started + embed_budget)  # someone waits: never a bulk index build
        return self._finish(report, started)

    # ---- the steps they share ---------------------------------------------------------------

    def _begin(self) -> tuple[SyncReport, dict[str, str | None]]:
        """A report that says whether the vector space was rebuilt, and the sources to re-chunk."""
        report = SyncReport()
        report.rebuilt, stale_chunking = self.ensure_identity()
        return report, stale_chunking

    def _backfill_languages(self) -> None:
        if self.store.language_backfill() is not None and self.lock.claim_index():
            try:
                backfill_languages(self.store)
            finally:
                self.lock.release_index()

    def _index_sources(
        self,
        report: SyncReport,
        source_ids: list[str],
        full: bool,
        path: str | None,
        rechunk: dict[str, str | None],
        tells_errors: bool = False,
    ) -> None:
        """Each source's changes into the index; a failing source is reported and recorded, and
        the others go on. `tells_errors`: this run's errors reach a person or cron's mail (the
        `sync` command): one failing as the last such run said is marked `error_repeated`
        (what a catch-up, a hook or the watcher met was never said to anyone)."""
        errored = self.store.errored_sources()
        said = {k: v for k, v in self.store.meta().items() if k.startswith(SAID_ERROR_KEY)} if tells_errors else {}
        for source_id in source_ids:
            source: Source = self.config.source(source_id)
            self.store.ensure_source(source.id, source.kind)
            again = source.id in rechunk
            try:
                if isinstance(source, GitSource):
                    # a tree diff has no notion of one path: `reindex PATH --full` re-reads the
                    # path in workspace sources and brings git sources to their head as usual
                    result = self.sync_git(source, (full and path is None) or again)
                else:
                    result = self.sync_workspace(source, full, path, rechunk=again)
                if source.id in errored:
                    self.store.set_source_error(source.id, None)  # recovered
                if SAID_ERROR_KEY + source.id in said:
                    self.store.delete_meta([SAID_ERROR_KEY + source.id])
            except NotesSearchError as exc:
                result = SourceReport(source.id, source.kind, error=str(exc))
                result.error_repeated = said.get(SAID_ERROR_KEY + source.id) == str(exc)
                log.error("source %s: %s", source.id, exc)
                self.store.set_source_error(source.id, str(exc))
                if tells_errors and not result.error_repeated:
                    self.store.set_meta({SAID_ERROR_KEY + source.id: str(exc)})
            report.sources.append(result)

    def _remove_unconfigured(self) -> None:
        """After the configured sources: a source renamed in the config finds its vectors (by
        content hash) still there and re-embeds nothing."""
        for stale in sorted(set(self.store.source_ids()) - set(self.config.sources)):
            if not self.lock.claim_source(stale):
                continue  # a worker with an older config still syncs it: the next run removes it
            log.info("source %s is no longer configured: removing it from the index", stale)
            self.store.remove_source(stale)

    def _write_tocs(self, report: SyncReport, *, whole: bool) -> None:
        """The TOCs of the sources this run changed, when it looked at them whole."""
        changed_tocs = [
            s.source_id
            for s in report.sources
            if not s.error and whole and (s.changed or toc.needs_rewrite(self.config, s.source_id))
        ]
        try:
            toc.write_tocs(self.config, self.store, changed_tocs)
        except OSError as exc:  # the TOC is a convenience: a sync never fails over it
            log.warning("cannot write a table of contents under %s: %s", self.config.toc_dir, exc)

    def _record_rechunked(self, report: SyncReport, stale_chunking: dict[str, str | None], *, whole: bool) -> None:
        """The chunker version of each source re-chunked whole (a path-scoped run re-chunked
        only that path of a workspace source; git sources ignore paths), and why its notes were
        all read again, said once: the run that records the new version."""
        rechunked = {
            s.source_id
            for s in report.sources
            if not s.error and s.source_id in stale_chunking and (whole or s.kind == "git")
        }
        if rechunked:
            self.store.set_meta({f"chunker_version:{sid}": chunker.CHUNKER_VERSION for sid in sorted(rechunked)})
        report.rechunked = rechunk_notice({sid: stale_chunking[sid] for sid in rechunked})
        if report.rechunked:
            log.info("%s", report.rechunked)

    def _embed_whole(self, report: SyncReport) -> None:
        """The vector work of a sync or reindex: nobody waits on it, so it embeds every pending
        chunk and keeps the vector space in order."""
        report.repaired_vectors = self.repair_zero_vectors()
        self._record_walked_files()
        with self.store.bulk_load():  # a first sync builds a server's vector index once, in bulk
            self.embed_pending(report, None)
        report.neutral = self.refresh_neutral_space() or report.neutral
        # texts may be gone with their chunks; pruned by the index's only worker (another one
        # may be embedding a text again whose lines a prune that started before would drop)
        if any(source.changed for source in report.sources) and self.lock.claim_index():
            try:
                self.store.prune_window_lines()
            finally:
                self.lock.release_index()

    def _log_coverage(self, lines: list[str]) -> None:
        """Log the coverage gaps when they differ from the last sync's, not on every sync: a
        cron job syncing each minute would otherwise add the same warnings to the log each minute."""
        recorded = json.dumps(lines, ensure_ascii=False)
        previous = self.store.meta().get(COVERAGE_KEY)
        if previous == recorded:
            return
        for line in lines:
            log.warning("coverage: %s", line)
        if not lines and previous is not None:
            log.info("coverage: every top-level folder holding markdown is indexed now")
        self.store.set_meta({COVERAGE_KEY: recorded})

    def _finish(self, report: SyncReport, started: float) -> SyncReport:
        report.pending = self.store.count_pending_all()
        report.seconds = round(time.monotonic() - started, 3)
        return report


def rechunk_notice(chunked_by: dict[str, str | None]) -> str | None:
    """Why the notes of these sources were all chunked again (the chunker version that chunked
    them before, by source), or None where none was chunked by another version: a source synced
    for the first time has no notes to re-chunk."""
    changed = {sid: version for sid, version in chunked_by.items() if version is not None}
    if not changed:
        return None
    before = ", ".join(sorted(set(changed.values()), key=lambda version: (len(version), version)))  # 2 before 10
    sources = ", ".join(sorted(changed))
    return (
        f"notes re-chunked (source{'s' if len(changed) > 1 else ''} {sources}): the chunker changed"
        f" (version {before} → {chunker.CHUNKER_VERSION}); a chunk whose text came out the same keeps its vector"
    )


class IndexBusy(Exception):
    """A whole-index operation is due but other sync workers share the index now."""


def backfill_languages(store: IndexWriter) -> int:
    """Detect the language of chunks written before chunks had one (an index from an older
    version), once, in batches that each commit: an interrupted run resumes. Returns how many."""
    state = store.language_backfill()
    if state is None:
        return 0
    upto, after = state
    done = 0
    while True:
        rows = store.chunks_for_language_backfill(after, upto, LANGUAGE_BACKFILL_BATCH)
        finished = len(rows) < LANGUAGE_BACKFILL_BATCH
        after = upto if finished else rows[-1].id
        detected = list(
            zip((row.id for row in rows), language.chunk_languages([row.text for row in rows]), strict=True)
        )
        store.store_backfilled_languages(detected, upto, after)
        done += len(rows)
        if finished:
            break
    log.info("detected the language of %d chunks indexed before languages were kept", done)
    return done


def _chain(first: Iterable[Change], then: Iterable[Change]) -> Iterator[Change]:
    yield from first
    yield from then


def _in_collections(changes: Iterable[Change], collections: list[CollectionFolder]) -> Iterator[Change]:
    """Each new file of a git source in the collection its folder is in, as a workspace scan
    puts its own (a collection added or renamed moves every file in `_store_collections`)."""
    for change in changes:
        if isinstance(change, Upsert) and collections:
            change = Upsert(dataclasses.replace(change.file, collection=collection_for(change.file.path, collections)))
        yield change


def run_sync(
    config: Config,
    *,
    source_ids: list[str] | None = None,
    full: bool = False,
    embedder_factory: Callable[[], Embedder] | None,
    progress: Progress | None = None,
    lock_timeout: float = 0.0,
    retry_embedder: bool = False,
    tells_errors: bool = False,
) -> SyncReport:
    """`Syncer.sync` under the lock (held -> report.locked, nothing done). `tells_errors`: the
    `sync` command's run, whose errors a person or cron reads (`_index_sources`).

    Without `embedder_factory` only text is indexed and every new chunk stays pending. An
    embedder that failed recent syncs is tried again on a back-off schedule (embed_health),
    at once with `retry_embedder` or `full`.
    """
    return _locked(
        config,
        source_ids,
        lambda syncer, ids: syncer.sync(ids, full=full, tells_errors=tells_errors),
        embedder_factory,
        progress,
        lock_timeout,
        retry_embedder or full,
    )


def run_reindex(
    config: Config,
    *,
    source_ids: list[str],
    path: str | None,
    full: bool = False,
    embedder_factory: Callable[[], Embedder] | None,
    progress: Progress | None = None,
    lock_timeout: float = 0.0,
) -> SyncReport:
    """`Syncer.reindex` of one file or folder (None: the sources whole) under the lock."""
    return _locked(
        config,
        source_ids,
        lambda syncer, ids: syncer.reindex(ids or [], path, full=full),
        embedder_factory,
        progress,
        lock_timeout,
        full,
    )


def _locked(
    config: Config,
    source_ids: list[str] | None,
    operation: Callable[[Syncer, list[str] | None], SyncReport],
    embedder_factory: Callable[[], Embedder] | None,
    progress: Progress | None,
    lock_timeout: float,
    retry_embedder: bool,
) -> SyncReport:
    """Take the lock and the sources (on a shared server another worker may hold some: the
    others are synced), open the store, run `operation`, log what it did."""
    for source_id in source_ids or []:
        config.source(source_id)  # unknown ids fail before any work
    remote_heads = _ask_remotes([config.sources[sid] for sid in source_ids or config.sources])
    lock = open_index_lock(config)
    if not lock.acquire(timeout=lock_timeout):
        return SyncReport(locked=True)
    try:
        selected = source_ids or list(config.sources)
        busy = [sid for sid in selected if not lock.claim_source(sid, lock_timeout)]
        if busy and len(busy) == len(selected):
            return SyncReport(locked=True, busy=busy)
        if busy:
            log.info("sources synced by another worker now, left to it: %s", ", ".join(busy))
            source_ids = [sid for sid in selected if sid not in busy]
        store = open_store(config.index_location)  # a SQLite file is checked on open
        sqlite_file = None if is_postgres(config.index_location) else config.db
        if sqlite_file is not None:
            # marked at the first write: a crash from there is found next time, a run that
            # writes nothing leaves the stamp as it was
            store.on_first_write(functools.partial(integrity.writes_begin, sqlite_file))
        try:
            syncer = Syncer(config, store, embedder_factory, progress, lock, retry_embedder)
            syncer.remote_heads = remote_heads
            report = operation(syncer, source_ids)
        finally:
            store.close()
        if sqlite_file is not None:
            integrity.writes_end(sqlite_file)
        report.busy = busy
    finally:
        lock.release()
    _log_summary(report)
    return report


def _ask_remotes(sources: list[Source]) -> dict[str, str | SourceError]:
    """Each git source's remote head, asked before the index lock: a remote that does not
    answer (a laptop on a train, a host gone) held the lock for its whole timeout, once a
    minute, and every other source, the watcher and each search's catch-up waited behind it."""
    remotes = [source for source in sources if isinstance(source, GitSource)]
    if not remotes:
        return {}
    from indexer.sources import git as git_source

    return git_source.remote_heads(remotes)


def _log_summary(report: SyncReport) -> None:
    for s in report.sources:
        if s.changed or s.error or s.skipped:
            log.info(
                "source %s: +%d ~%d -%d, %d skipped%s%s",
                s.source_id,
                s.added,
                s.updated,
                s.deleted,
                s.skipped,
                f", rev {s.rev[:12]}" if s.rev else "",
                f", error: {s.error}" if s.error else "",
            )
    if report.changed:
        log.info("sync done in %.2fs: %d chunks embedded, %d pending", report.seconds, report.embedded, report.pending)


CATCH_UP_BUDGET = 1.0  # seconds of embedding a search may spend on what changed on disk


def catch_up(
    config: Config,
    source_ids: tuple[str, ...],
    path: str | None,
    embedder_factory: Callable[[], Embedder] | None,
) -> str | None:
    """Index what changed in the searched workspace scope, so an edit made just before a search
    is found by it. The text is indexed at once; embedding is bounded (CATCH_UP_BUDGET, one
    attempt, skipped while the embedder is known down) and whatever it leaves stays pending for
    the next sync, found by keywords meanwhile. A lexical search passes no embedder factory: it
    never waits on embedding. Returns a notice when the index may lag."""
    workspace_ids = [
        sid
        for sid, src in config.sources.items()
        if isinstance(src, WorkspaceSource) and (not source_ids or sid in source_ids)
    ]
    # (a PostgreSQL index exists: the search that calls this has just opened it)
    if not workspace_ids or (not is_postgres(config.index_location) and not config.db.exists()):
        return None
    try:
        report = _locked(
            config,
            workspace_ids,
            lambda syncer, ids: syncer.catch_up(ids or [], path, embed_budget=CATCH_UP_BUDGET),
            embedder_factory,
            None,
            0.0,
            False,
        )
    except StoreError as exc:  # e.g. an index this user may read but not write: search what is there
        return f"the index could not be updated before this search ({exc}); results may lag the disk"
    if report.locked:
        # it may run for long (a first sync, a huge note): no promise of seconds
        return "a sync is running: what changed on disk since it began is searchable once it ends"
    notices = [f"{failed.error}; {AS_LAST_INDEXED}" for failed in report.failed]
    return "; ".join([*notices, *([report.embed_notice] if report.embed_notice else [])]) or None
