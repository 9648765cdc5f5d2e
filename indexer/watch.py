"""The watcher: filesystem events -> debounce -> scoped sync, so notes are searchable seconds after a save.

An event is a trigger, not the truth: every changed path goes through `run_reindex(path=...)`,
whose stat + sha256 comparison decides whether anything is re-chunked or re-embedded, so the
burst of events one editor save produces (vim's `4913` probe, atomic renames) costs at most a
hash. Events can be lost (inotify is blind on FUSE/sshfs/SMB and drops events when its queue
overflows), so a periodic reconcile — a full sync of the workspace sources — backs them up.

Threads: the watchdog observer only maps events to targets and hands them to the debouncer;
one worker thread does all indexing, the periodic reconcile and the observer health check.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import stat
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from indexer.config import Config, WorkspaceSource
from indexer.embedders import Embedder
from indexer.errors import ConfigError, NotesSearchError, SourceError
from indexer.sources.workspace import relative_index_path
from indexer.sync import SyncReport, run_reindex, run_sync

log = logging.getLogger("notes_search.watch")

Target = tuple[str, str]  # (source id, index path of a file or folder; '' = the whole source)
K = TypeVar("K", bound=Hashable)

# Only what can change indexed content. Opened / closed-without-write / attribute events are
# left out of the inotify mask, so the sync reading a file never wakes the watcher again.
EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
]
SCOPED_LIMIT = 50  # more changed paths than this in one source: one stat-only walk of it is cheaper
MAX_BACKOFF = 30.0  # seconds between retries after unexpected errors, at most
HEALTH_EVERY = 1.0  # seconds between observer liveness checks
OVERFLOW_MESSAGE = "Inotify queue overflowed"


class Debouncer(Generic[K]):
    """Collects keys and releases them as one batch once `quiet` seconds pass without a new key,
    but no later than `max_wait` after the first key of the burst (a file saved every 100 ms
    would otherwise never be indexed). Pure: time comes from `clock`, nothing runs by itself."""

    def __init__(self, quiet: float = 0.5, max_wait: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet = quiet
        self.max_wait = max(max_wait, quiet)
        self.clock = clock
        self._keys: set[K] = set()
        self._first = 0.0
        self._last = 0.0
        self._hold_until = -math.inf

    @property
    def pending(self) -> frozenset[K]:
        return frozenset(self._keys)

    def add(self, keys: Iterable[K]) -> None:
        """Record keys; an empty iterable changes nothing (ignored events must not delay a batch)."""
        keys = set(keys)
        if not keys:
            return
        now = self.clock()
        if not self._keys:
            self._first = now
        self._last = now
        self._keys |= keys

    def defer(self, keys: Iterable[K], delay: float) -> None:
        """Put keys back (their batch could not run) and release nothing before `delay` has passed."""
        self.add(keys)
        if self._keys:
            self._hold_until = max(self._hold_until, self.clock() + delay)

    def wait_time(self) -> float | None:
        """Seconds until the batch is due (0 when it is); None when nothing is pending."""
        if not self._keys:
            return None
        due = max(self._hold_until, min(self._last + self.quiet, self._first + self.max_wait))
        return max(0.0, due - self.clock())

    def take(self) -> set[K]:
        """The batch if it is due, else an empty set."""
        return self.take_all() if self.wait_time() == 0.0 else set()

    def take_all(self) -> set[K]:
        keys, self._keys = self._keys, set()
        self._hold_until = -math.inf
        return keys


def _wanted(source: WorkspaceSource, rel: str, is_directory: bool) -> bool:
    if rel == "":
        return True  # the root itself appeared, vanished or moved: re-check the whole source
    if ".git" in rel.split("/"):
        return False  # the workspace walk never enters .git folders
    return source.selection.may_contain(rel) if is_directory else source.selection.admits(rel)


def event_targets(event: FileSystemEvent, roots: Sequence[tuple[WorkspaceSource, str]]) -> set[Target]:
    """What an event asks to re-index: for each source (root given resolved) whose scope admits
    the path, the changed file or folder. A move counts at both ends, so a rename into an
    admitted name (an editor's `.x.md.tmp` -> `x.md`) and out of one (vim's `x.md` -> `x.md~`)
    both reach the index. A folder's "modified" event is noise: its files report themselves."""
    if not isinstance(event, tuple(EVENT_FILTER)):
        return set()
    paths = [event.src_path, event.dest_path] if event.event_type == "moved" else [event.src_path]
    targets: set[Target] = set()
    for raw in paths:
        if not raw:
            continue
        path = os.fsdecode(raw)
        for source, root in roots:
            rel = relative_index_path(path, root)
            if rel is not None and _wanted(source, rel, event.is_directory):
                targets.add((source.id, rel))
    return targets


def collapse(targets: Iterable[Target], limit: int = SCOPED_LIMIT) -> list[Target]:
    """The sync runs one batch needs: a folder covers what lies below it, and a source with more
    than `limit` changed paths is walked once as a whole (stat-only for unchanged files)."""
    by_source: dict[str, set[str]] = {}
    for source_id, rel in targets:
        by_source.setdefault(source_id, set()).add(rel)
    runs: list[Target] = []
    for source_id in sorted(by_source):
        paths = by_source[source_id]
        kept = [p for p in sorted(paths) if not _has_ancestor(p, paths)]
        if "" in paths or len(kept) > limit:
            kept = [""]
        runs.extend((source_id, p) for p in kept)
    return runs


def _has_ancestor(path: str, paths: set[str]) -> bool:
    parts = path.split("/")
    return any("/".join(parts[:n]) in paths for n in range(1, len(parts)))


@dataclass
class Batch:
    """What one round of indexing did; `retried` went back to the debouncer (lock busy, error)."""

    targets: list[Target] = field(default_factory=list)
    added: int = 0
    updated: int = 0
    deleted: int = 0
    embedded: int = 0
    retried: list[Target] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ms: float = 0.0

    def count(self, report: SyncReport) -> None:
        self.embedded += report.embedded
        for s in report.sources:
            self.added += s.added
            self.updated += s.updated
            self.deleted += s.deleted
            if s.error:
                self.errors.append(f"{s.source_id}: {s.error}")

    def summary(self) -> str:
        return (
            f"+{self.added} ~{self.updated} -{self.deleted}, {self.embedded} chunks embedded, {self.ms:.0f} ms"
            + (f", {len(self.retried)} retried" if self.retried else "")
            + (f", errors: {'; '.join(self.errors)}" if self.errors else "")
        )


@dataclass
class WatchStats:
    """Counters a caller can poll (tests, the command's exit line)."""

    batches: int = 0
    reconciles: int = 0
    retries: int = 0
    restarts: int = 0  # observers started anew: one died, or a root came, went or was mounted over
    last: Batch | None = None


class _Handler(FileSystemEventHandler):
    """Runs in the observer's thread: must never raise (an exception would kill that thread)."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            self.watcher._queue(event_targets(event, self.watcher.roots))
        except Exception:
            log.exception("cannot handle %r", event)


class _OverflowListener(logging.Handler):
    """watchdog rebuilds its inotify watches after IN_Q_OVERFLOW but reports the lost events
    only as a warning on its logger; that warning is the cue to reconcile at once."""

    def __init__(self, on_overflow: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self.on_overflow = on_overflow

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(OVERFLOW_MESSAGE):
            self.on_overflow()


class _SkipsOnce(logging.Filter):
    """Passes each skip warning once per process: every batch re-walks the folders it covers, and
    an entry that can never be indexed (a name that is not UTF-8, a FIFO) would otherwise add
    the same line to the log for every saved file, for as long as watch runs."""

    MESSAGES = ("%s:%s: skipped: %s", "skipping symlink %s: its target is outside %s")  # sync's and the walker's

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in self.MESSAGES:
            return True
        line = record.getMessage()
        with self._lock:
            if line in self._seen:
                return False
            self._seen.add(line)
        return True


_SKIPS_ONCE = _SkipsOnce()
_SYNC_LOG = "notes_search.sync"


class Watcher:
    """Keeps the workspace sources' index in step with the disk while it runs.

    `start()` watches every workspace source root (recursively), reconciles once (changes made
    while nobody watched) and then indexes each debounced batch of changed paths. Changes are
    never dropped: a batch that finds the sync lock busy (a cron sync, the MCP server's
    reindex) or fails goes back to the debouncer and is retried. A dead observer is restarted
    (followed by a reconcile); after `restart_attempts` failed restarts in a row the watcher
    gives up and sets `failure`, so a service manager can restart the process.
    """

    def __init__(
        self,
        config: Config,
        embedder_factory: Callable[[], Embedder],
        debounce: float = 0.5,
        reconcile_every: float = 600.0,
        *,
        max_wait: float = 2.0,
        lock_timeout: float = 1.0,
        retry_delay: float = 0.5,
        reconcile_on_start: bool = True,
        observer_factory: Callable[[], BaseObserver] = Observer,
        health_every: float = HEALTH_EVERY,
        restart_attempts: int = 30,
    ) -> None:
        sources = [s for s in config.sources.values() if isinstance(s, WorkspaceSource)]
        if not sources:
            raise ConfigError("no workspace sources to watch (git sources are indexed by `sync` and git hooks)")
        self.config = config
        self.embedder_factory = embedder_factory
        self.roots = [(s, os.path.realpath(s.root)) for s in sources]
        self.reconcile_every = reconcile_every
        self.lock_timeout = lock_timeout
        self.retry_delay = retry_delay
        self.reconcile_on_start = reconcile_on_start
        self.observer_factory = observer_factory
        self.health_every = health_every
        self.restart_attempts = restart_attempts
        self.stats = WatchStats()
        self.failure: str | None = None
        self._debouncer: Debouncer[Target] = Debouncer(debounce, max_wait)
        self._cond = threading.Condition()
        self._work = threading.Lock()  # one indexing round at a time (worker vs flush/reconcile)
        self._stopping = False
        self._reconcile_at = math.inf
        self._requested_at = -math.inf  # when events were last reported lost
        self._failures = 0  # consecutive unexpected errors, for the backoff
        self._waiting_for_lock = False
        self._restart_failures = 0
        # each root's identity when the observer started (None: no folder then, not watched)
        self._roots_seen: dict[str, tuple[int, int] | None] = {}
        self._rewatch_failed: str | None = None  # why watching the roots anew failed, said once
        self._rewatch_delay = 0.0  # the back-off after such failures
        self._rewatch_at = 0.0
        self._said_away: set[str] = set()  # roots said not to be folders (said again once back and gone)
        self._handler = _Handler(self)
        self._overflow = _OverflowListener(self.request_reconcile)
        self._observer: BaseObserver | None = None
        self._worker: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------------

    @property
    def watch_roots(self) -> list[str]:
        """Resolved roots to schedule; one nested in another is already covered by it."""
        unique = sorted({root for _, root in self.roots})
        return [r for r in unique if not any(relative_index_path(r, other) for other in unique if other != r)]

    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.is_alive() and self.failure is None

    def start(self) -> None:
        """Watch, then index in the background. Raises SourceError if the roots there cannot be
        watched (a root that is no folder now is watched once it is)."""
        if self._worker is not None:
            raise RuntimeError("watcher already started")
        self._observer = self._start_observer()
        logging.getLogger("watchdog.observers").addHandler(self._overflow)
        logging.getLogger(_SYNC_LOG).addFilter(_SKIPS_ONCE)
        with self._cond:
            self._stopping = False
            now = time.monotonic()
            self._reconcile_at = now if self.reconcile_on_start else self._next_reconcile(now)
        self._worker = threading.Thread(target=self._loop, name="notes-search-watch", daemon=True)
        self._worker.start()
        watched = [root for root in self.watch_roots if os.path.isdir(root)]
        log.info("watching %s", ", ".join(watched) if watched else "nothing yet: no root is a folder now")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop watching; a batch in flight finishes (within `timeout`). Changes still waiting in
        the debouncer are left to the reconcile that the next start runs."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join(timeout)
            self._worker = None
        if self._observer is not None:
            _halt(self._observer)
            self._observer = None
        logging.getLogger("watchdog.observers").removeHandler(self._overflow)
        logging.getLogger(_SYNC_LOG).removeFilter(_SKIPS_ONCE)

    def _root_identities(self) -> dict[str, tuple[int, int] | None]:
        """Each configured root's (device, inode), None when it is no folder: a drive mounted on
        its mount point or taken off it, or a symlinked root pointed elsewhere, changes them
        while the path stays the same."""
        identities: dict[str, tuple[int, int] | None] = {}
        for source, _ in self.roots:
            path = os.fspath(source.root)
            try:
                st = os.stat(path)
            except OSError:
                identities[path] = None
                continue
            identities[path] = (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None
        return identities

    def _start_observer(self) -> BaseObserver:
        """Watch the roots that are folders now. One that is not (a drive not mounted) is
        watched once it is, and a drive mounted on an empty mount point once it is mounted
        (`_check_observer` compares the roots' identities every HEALTH_EVERY)."""
        # resolved anew: a symlinked root may lead elsewhere now (events are mapped through these)
        self.roots = [(source, os.path.realpath(source.root)) for source, _ in self.roots]
        identities = self._root_identities()
        for path, identity in identities.items():
            if identity is None and path not in self._said_away:  # said once as it goes
                log.warning("not watching %s: not a folder now (a drive not mounted?); watched once it is", path)
                self._said_away.add(path)
            elif identity is not None:
                self._said_away.discard(path)
        present = [root for root in self.watch_roots if os.path.isdir(root)]
        observer = self.observer_factory()
        try:
            for root in present:
                observer.schedule(self._handler, root, recursive=True, event_filter=EVENT_FILTER)
            observer.start()
        except Exception as exc:
            _halt(observer)
            raise SourceError(f"cannot watch {', '.join(present)}: {exc}") from exc
        self._roots_seen = identities
        return observer

    def _rewatch(self) -> None:
        """A root came, went or was mounted over: watch the roots as they are now, and reconcile
        what changed there meanwhile. The running observer stays until the new one runs; a
        failure (the inotify watch limit) is tried again later and later, and said once."""
        changed = [path for path, identity in self._root_identities().items() if identity != self._roots_seen.get(path)]
        try:
            observer = self._start_observer()
        except Exception as exc:  # noqa: BLE001 - tried again after a back-off
            if str(exc) != self._rewatch_failed:
                log.error("cannot watch %s yet: %s", ", ".join(changed), exc)
            self._rewatch_failed = str(exc)
            self._rewatch_delay = min(max(2 * self._rewatch_delay, self.health_every), MAX_BACKOFF)
            self._rewatch_at = time.monotonic() + self._rewatch_delay
            return
        self._rewatch_failed = None
        self._rewatch_delay = 0.0
        if self._observer is not None:
            _halt(self._observer)
        self._observer = observer
        self.stats.restarts += 1
        log.info("watching again: %s changed (a drive mounted or taken away?)", ", ".join(changed))
        self.request_reconcile()

    def _observer_alive(self) -> bool:
        observer = self._observer
        return observer is not None and observer.is_alive() and all(e.is_alive() for e in observer.emitters)

    def _check_observer(self) -> None:
        """A watcher that silently stops is worse than none: restart a dead observer (or watch
        the roots anew when one came or went), reconcile what it missed, and give up loudly
        (`failure`) when restarting keeps failing."""
        moved = self._root_identities() != self._roots_seen
        if self._observer_alive():
            self._restart_failures = 0
            if moved and time.monotonic() >= self._rewatch_at:
                self._rewatch()
            return
        if self._restart_failures == 0:
            if moved:  # a root deleted or unmounted ends its emitter: nothing died
                log.warning("a watched folder went away: watching the others, and it once it is back")
            else:
                log.error("the file observer stopped (thread died): restarting it")
        if self._observer is not None:
            _halt(self._observer)
            self._observer = None
        try:
            self._observer = self._start_observer()
        except Exception as exc:  # noqa: BLE001 - counted; the watcher gives up after enough of them
            self._restart_failures += 1
            log.error(
                "restarting the file observer failed (%d/%d): %s", self._restart_failures, self.restart_attempts, exc
            )
            if self._restart_failures >= self.restart_attempts:
                self.failure = f"the file observer died and could not be restarted: {exc}"
                log.critical("%s; giving up", self.failure)
                with self._cond:
                    self._stopping = True
            return
        self._restart_failures = 0
        self.stats.restarts += 1
        log.warning("file observer restarted; reconciling what it may have missed")
        self.request_reconcile()

    # ---- events in ----------------------------------------------------------------------------

    def _queue(self, targets: set[Target]) -> None:
        if not targets:
            return
        with self._cond:
            self._debouncer.add(targets)
            self._cond.notify()

    def pending(self) -> frozenset[Target]:
        """Targets waiting for their batch."""
        with self._cond:
            return self._debouncer.pending

    def request_reconcile(self) -> None:
        """Reconcile at the worker's next turn (events were lost: overflow, observer restart)."""
        with self._cond:
            self._reconcile_at = 0.0
            self._requested_at = time.monotonic()
            self._cond.notify()

    # ---- the worker ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._stopping:
                    self._cond.wait(self._sleep_time())
                if self._stopping:
                    return
                reconcile_due = time.monotonic() >= self._reconcile_at
                targets = self._debouncer.take()
            try:
                self._check_observer()
                if reconcile_due:
                    self.reconcile()
                if targets:
                    self._index(targets)
            except NotesSearchError as exc:  # the index or the config: one line, the watcher goes on
                log.error("watcher round failed: %s", exc)
            except Exception:
                log.exception("watcher round failed")

    def _sleep_time(self) -> float:
        now = time.monotonic()
        debounce = self._debouncer.wait_time()
        waits = [self.health_every, self._reconcile_at - now] + ([debounce] if debounce is not None else [])
        return max(0.0, min(waits))

    def _next_reconcile(self, now: float) -> float:
        return now + self.reconcile_every if self.reconcile_every > 0 else math.inf

    def _backoff(self) -> float:
        self._failures += 1
        return min(self.retry_delay * 2.0**self._failures, MAX_BACKOFF)

    def flush(self) -> Batch:
        """Index everything pending now, debounce or not (tests; a caller that wants it done)."""
        with self._cond:
            targets = self._debouncer.take_all()
        return self._index(targets)

    def _index(self, targets: set[Target]) -> Batch:
        """One batch: a scoped sync per changed path. What cannot run now is deferred, never dropped."""
        batch = Batch(targets=self._arrivals_first(collapse(targets)))
        if not batch.targets:
            return batch
        started = time.monotonic()
        with self._work:
            for n, (source_id, rel) in enumerate(batch.targets):
                try:
                    report = run_reindex(
                        self.config,
                        source_ids=[source_id],
                        path=rel or None,
                        embedder_factory=self.embedder_factory,
                        lock_timeout=self.lock_timeout,
                    )
                except Exception as exc:
                    if isinstance(exc, NotesSearchError):  # e.g. a damaged index: one line, no traceback
                        log.error("indexing %s:%s failed: %s", source_id, rel or ".", exc)
                        batch.errors.append(f"{source_id}:{rel or '.'}: {exc}")
                    else:
                        log.exception("indexing %s:%s failed", source_id, rel or ".")
                        batch.errors.append(f"{source_id}:{rel or '.'}: unexpected error (see log)")
                    batch.retried = batch.targets[n:]
                    self._defer(batch.retried, self._backoff())
                    break
                if report.locked:
                    batch.retried = batch.targets[n:]
                    self._lock_busy(f"{len(batch.retried)} paths wait for it")
                    self._defer(batch.retried, self.retry_delay)
                    break
                batch.count(report)
            else:
                self._succeeded()
            batch.ms = round((time.monotonic() - started) * 1000, 1)
            self.stats.batches += 1
            self.stats.last = batch
        log.info("indexed %s: %s", _describe(batch.targets), batch.summary())
        return batch

    def _arrivals_first(self, targets: list[Target]) -> list[Target]:
        """Paths that exist before paths that are gone: after a rename (`alpha/` -> `zeta/`) the new
        path is indexed while the old one's vectors are still there to be reused by content hash."""

        def gone(target: Target) -> bool:
            source_id, rel = target
            source = self.config.sources[source_id]
            assert isinstance(source, WorkspaceSource), "the watcher queues workspace paths only"
            return not os.path.lexists(os.path.join(source.root, rel))

        return sorted(targets, key=gone)  # stable: otherwise collapse's order

    def _defer(self, targets: list[Target], delay: float) -> None:
        self.stats.retries += 1
        with self._cond:
            self._debouncer.defer(targets, delay)
            self._cond.notify()

    def _lock_busy(self, what: str) -> None:
        """Say once per busy spell that work waits for the lock (a full sync may hold it for minutes)."""
        if not self._waiting_for_lock:
            self._waiting_for_lock = True
            log.info("sync lock busy (another sync is running): %s", what)

    def _succeeded(self) -> None:
        self._failures = 0
        if self._waiting_for_lock:
            self._waiting_for_lock = False
            log.info("sync lock free again")

    def reconcile(self) -> SyncReport | None:
        """A full sync of the workspace sources: catches whatever the events missed. Returns None
        (and retries soon) when the lock is busy or the sync failed."""
        started = time.monotonic()
        source_ids = sorted({source.id for source, _ in self.roots})
        with self._work:
            try:
                report = run_sync(
                    self.config,
                    source_ids=source_ids,
                    embedder_factory=self.embedder_factory,
                    lock_timeout=self.lock_timeout,
                )
            except NotesSearchError as exc:  # e.g. a damaged index: one line per try, no traceback
                log.error("reconcile failed: %s", exc)
                self._postpone_reconcile(self._backoff())
                return None
            except Exception:
                log.exception("reconcile failed")
                self._postpone_reconcile(self._backoff())
                return None
            if report.locked:
                self._lock_busy("the reconcile waits for it")
                self._postpone_reconcile(self.retry_delay)
                return None
            self._succeeded()
            now = time.monotonic()
            with self._cond:
                if self._requested_at < started:  # else events were lost during this run: go again
                    self._reconcile_at = self._next_reconcile(now)
            batch = Batch(targets=[(sid, "") for sid in source_ids], ms=round((now - started) * 1000, 1))
            batch.count(report)
            self.stats.reconciles += 1
        log.info("reconciled %s: %s", ", ".join(source_ids), batch.summary())
        return report

    def _postpone_reconcile(self, delay: float) -> None:
        self.stats.retries += 1
        with self._cond:
            self._reconcile_at = time.monotonic() + delay


def _halt(observer: BaseObserver) -> None:
    """Stop an observer that may be half started or already dead, without raising."""
    with contextlib.suppress(Exception):
        observer.stop()
    if observer.is_alive():
        observer.join(5.0)


def _describe(targets: list[Target], shown: int = 5) -> str:
    names = [f"{sid}:{rel or '.'}" for sid, rel in targets]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    noun = "path" if len(names) == 1 else "paths"
    return f"{len(names)} {noun} ({', '.join(names[:shown])}{more})"
