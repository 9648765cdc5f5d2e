"""The watcher (`notes-search watch`: the index follows the disk while it runs) on real files with a
real observer and a real index.

Waits poll with a timeout instead of sleeping a fixed time; bounds on latency are generous
because CI machines are noisy.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import (
    DirCreatedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, EventEmitter

from indexer.config import Config, WorkspaceSource, load_config
from indexer.globs import FileSelection
from indexer.model import KnownFile
from indexer.watch import Debouncer, Watcher, collapse, event_targets
from search.engine import search
from tests.conftest import FAKE_EMBEDDING, make_config, open_index, sync_lock_held, wait_for
from tests.fakes import FakeEmbedder

ROOT = Path(__file__).resolve().parent.parent


def known(config: Config, source_id: str = "notes") -> dict[str, KnownFile]:
    store = open_index(config, readonly=True)
    try:
        return store.known_files(source_id)
    finally:
        store.close()


def unembedded(config: Config) -> int:
    store = open_index(config, readonly=True)
    try:
        return store.count_pending_all()
    finally:
        store.close()


def lex(config: Config, text: str) -> list[str]:
    """Paths a lexical search finds, on a read-only connection of its own (like the MCP server)."""
    store = open_index(config, readonly=True)
    try:
        response = search(store, config, text, k=20, mode="lex", embedder_factory=_no_embedder)
    finally:
        store.close()
    return [hit.path for hit in response.results]


def _no_embedder() -> Any:
    raise AssertionError("a lexical search must not need the embedder")


FAST = {"debounce": 0.1, "max_wait": 0.5, "lock_timeout": 0.05, "retry_delay": 0.1, "health_every": 0.05}


@contextmanager
def watching(config: Config, embedder: FakeEmbedder, **options: Any) -> Iterator[Watcher]:
    """A started watcher whose start-up reconcile is done (so the index exists)."""
    watcher = Watcher(config, lambda: embedder, **{**FAST, **options})
    watcher.start()
    try:
        wait_for(lambda: watcher.stats.reconciles >= 1, "the start-up reconcile")
        yield watcher
    finally:
        watcher.stop()


def save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


# ---- the debouncer, on a fake clock -----------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_debouncer_waits_for_quiet() -> None:
    clock = FakeClock()
    d: Debouncer[str] = Debouncer(quiet=0.5, max_wait=2.0, clock=clock)
    assert d.wait_time() is None and d.take() == set()
    d.add(["a.md"])
    clock.now = 0.4
    d.add(["b.md", "a.md"])  # a new event restarts the quiet window
    clock.now = 0.8
    assert d.take() == set() and d.wait_time() == pytest.approx(0.1)
    clock.now = 0.9
    assert d.take() == {"a.md", "b.md"}
    assert d.wait_time() is None and d.pending == frozenset()


def test_debouncer_releases_a_continuous_burst_after_max_wait() -> None:
    clock = FakeClock()
    d: Debouncer[str] = Debouncer(quiet=0.5, max_wait=2.0, clock=clock)
    for step in range(30):  # a save every 100 ms: never 500 ms of quiet
        clock.now = step * 0.1
        d.add(["busy.md"])
        if d.take():
            break
    assert clock.now == pytest.approx(2.0)


def test_debouncer_ignores_empty_adds_and_holds_deferred_keys() -> None:
    clock = FakeClock()
    d: Debouncer[str] = Debouncer(quiet=0.5, max_wait=2.0, clock=clock)
    d.add([])  # an ignored event neither starts nor extends a batch
    assert d.wait_time() is None
    d.defer(["x.md"], delay=3.0)  # the lock was busy: keep, but not before 3 s
    clock.now = 2.9
    assert d.take() == set()
    clock.now = 3.0
    assert d.take() == {"x.md"}
    d.add(["y.md"])  # the hold ends with its batch
    clock.now = 3.5
    assert d.take() == {"y.md"}


# ---- events -> targets, and batches -> sync runs ---------------------------------------------


@pytest.fixture
def roots(tmp_path: Path) -> list[tuple[WorkspaceSource, str]]:
    scope = FileSelection(paths=("notes/**",), include=("*.md",), exclude=("notes/private/**",))
    return [(WorkspaceSource("ws", tmp_path, scope), str(tmp_path))]


def test_event_targets_follow_editor_saves(tmp_path: Path, roots: list[tuple[WorkspaceSource, str]]) -> None:
    n = f"{tmp_path}/notes"
    assert event_targets(FileModifiedEvent(f"{n}/a.md"), roots) == {("ws", "notes/a.md")}
    assert event_targets(FileClosedEvent(f"{n}/a.md"), roots) == {("ws", "notes/a.md")}
    # vim: probe file 4913, rename the original to a backup, write anew, drop the backup
    assert event_targets(FileCreatedEvent(f"{n}/4913"), roots) == set()
    assert event_targets(FileMovedEvent(f"{n}/a.md", f"{n}/a.md~"), roots) == {("ws", "notes/a.md")}
    assert event_targets(FileDeletedEvent(f"{n}/a.md~"), roots) == set()
    # VS Code / Obsidian: write a temp file, rename it over the target: the rename counts
    assert event_targets(FileMovedEvent(f"{n}/.a.md.tmp", f"{n}/a.md"), roots) == {("ws", "notes/a.md")}
    assert event_targets(FileMovedEvent(f"{n}/a.md.tmp", f"{n}/a.md"), roots) == {("ws", "notes/a.md")}
    # a folder moved in the tree: both ends; its "modified" noise: nothing
    assert event_targets(DirMovedEvent(f"{n}/x", f"{n}/y"), roots) == {("ws", "notes/x"), ("ws", "notes/y")}
    assert event_targets(DirCreatedEvent(f"{n}/z"), roots) == {("ws", "notes/z")}
    assert event_targets(DirModifiedEvent(n), roots) == set()
    # reads (the sync's own) never trigger anything
    assert event_targets(FileOpenedEvent(f"{n}/a.md"), roots) == set()
    assert event_targets(FileClosedNoWriteEvent(f"{n}/a.md"), roots) == set()


def test_event_targets_ignore_what_the_scope_does_not_admit(
    tmp_path: Path, roots: list[tuple[WorkspaceSource, str]]
) -> None:
    for path in ("other/a.md", "notes/a.txt", "notes/private/a.md", "notes/.git/a.md", "../outside/notes/a.md"):
        assert event_targets(FileModifiedEvent(f"{tmp_path}/{path}"), roots) == set(), path
    assert event_targets(DirCreatedEvent(f"{tmp_path}/notes/private"), roots) == set()
    assert event_targets(DirCreatedEvent(f"{tmp_path}/other"), roots) == set()


def test_collapse_merges_paths_below_a_folder_and_caps_scoped_runs() -> None:
    targets = {("a", "x/1.md"), ("a", "x"), ("a", "x-y.md"), ("a", "x/sub/2.md"), ("b", "3.md")}
    assert collapse(targets) == [("a", "x"), ("a", "x-y.md"), ("b", "3.md")]
    assert collapse({("a", ""), ("a", "x.md")}) == [("a", "")]
    assert collapse({("a", f"{i}.md") for i in range(5)}, limit=4) == [("a", "")]


# ---- the watcher on real files ----------------------------------------------------------------


def test_create_modify_delete_reach_the_index(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    note = notes / "devops" / "dns.md"
    with watching(config, embedder):
        save(note, "# DNS\n\nThe resolver is quasarwhale.\n")
        wait_for(lambda: "devops/dns.md" in lex(config, "quasarwhale"), "a created file")
        save(note, "# DNS\n\nThe resolver is nebulafox now.\n")
        wait_for(lambda: lex(config, "nebulafox") and not lex(config, "quasarwhale"), "a modified file")
        note.unlink()
        wait_for(lambda: "devops/dns.md" not in known(config), "a deleted file")


def test_vim_style_save_reaches_the_index(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    folder = notes / "devops"
    with watching(config, embedder):
        probe = folder / "4913"  # vim checks that it may create files here
        probe.write_text("")
        probe.unlink()
        os.rename(folder / "postgres.md", folder / "postgres.md~")  # backup of the original
        save(folder / "postgres.md", "# PostgreSQL\n\nThe pooler is pgbouncer-vimsaved.\n")
        (folder / "postgres.md~").unlink()
        wait_for(lambda: lex(config, "vimsaved") == ["devops/postgres.md"], "the vim save")
        assert not [p for p in known(config) if p.endswith(("~", "4913"))]


@pytest.mark.parametrize("temp_name", [".postgres.md.tmp", "postgres.md.tmp"])
def test_atomic_rename_save_reaches_the_index(
    config: Config, notes: Path, embedder: FakeEmbedder, temp_name: str
) -> None:
    folder = notes / "devops"
    with watching(config, embedder):
        save(folder / temp_name, "# PostgreSQL\n\nReplaced atomically: renamedzebra.\n")
        os.replace(folder / temp_name, folder / "postgres.md")  # VS Code / Obsidian
        wait_for(lambda: lex(config, "renamedzebra") == ["devops/postgres.md"], "the atomic save")
        assert set(known(config)) >= {"devops/postgres.md"} and not [p for p in known(config) if "tmp" in p]


def test_a_burst_of_saves_embeds_the_file_once_or_twice(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    note = notes / "draft.md"
    with watching(config, embedder, debounce=0.5, max_wait=2.0) as watcher:
        before = embedder.texts_embedded
        for i in range(100):
            save(note, f"# Draft\n\nRevision r{i:03d} of the draft.\n")
        # the FTS row is committed before its vector: wait for both
        wait_for(lambda: lex(config, "r099") == ["draft.md"] and unembedded(config) == 0, "the last save")
        embedded = embedder.texts_embedded - before
    print(f"\n100 saves -> {embedded} chunk(s) embedded in {watcher.stats.batches} batch(es)")
    assert 1 <= embedded <= 2


def test_an_event_for_an_excluded_path_does_nothing(
    tmp_path: Path, notes: Path, embedder: FakeEmbedder, db_url: str | None
) -> None:
    config_file = tmp_path / "scoped.yaml"
    db_line = f'db: "{db_url}"\n' if db_url else ""
    config_file.write_text(
        f"root: {tmp_path}\n{db_line}{FAKE_EMBEDDING}sources:\n  workspace:\n    notes:\n      root: {notes}\n"
        '      paths: ["devops/**"]\n      exclude: ["devops/private/**"]\n',
        encoding="utf-8",
    )
    config = load_config(config_file)
    with watching(config, embedder, debounce=60.0, max_wait=60.0) as watcher:  # batches only by flush()
        batches = watcher.stats.batches
        save(notes / "travel" / "paris.md", "# Paris\n")  # outside `paths`
        save(notes / "devops" / "private" / "keys.md", "# Keys\n")  # excluded
        save(notes / "devops" / "notes.txt", "not markdown\n")  # not included
        save(notes / "devops" / "ok.md", "# Ok\n")  # admitted: its event comes after the others
        wait_for(lambda: watcher.pending(), "the admitted file's event")
        assert watcher.pending() == {("notes", "devops/ok.md")}
        batch = watcher.flush()
        assert batch.targets == [("notes", "devops/ok.md")] and batch.added == 1
        assert watcher.stats.batches == batches + 1
        assert set(known(config)) == {"devops/ok.md", "devops/postgres.md", "devops/zalohovani.md"}


class DeafEmitter(EventEmitter):
    """Sees nothing, like inotify on sshfs or after a queue overflow."""

    def queue_events(self, timeout: float) -> None:
        self.stopped_event.wait(timeout)


def deaf_observer() -> BaseObserver:
    return BaseObserver(DeafEmitter, timeout=0.1)


def test_the_periodic_reconcile_picks_up_changes_the_events_missed(
    config: Config, notes: Path, embedder: FakeEmbedder
) -> None:
    with watching(config, embedder, reconcile_every=0.3, observer_factory=deaf_observer) as watcher:
        save(notes / "travel" / "prague.md", "# Praha\n\nKarlův most v noci: unseenotter.\n")
        wait_for(lambda: lex(config, "unseenotter") and watcher.stats.reconciles >= 2, "the next reconcile")
        assert watcher.stats.batches == 0


def test_an_inotify_overflow_reconciles_at_once(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    with watching(config, embedder, reconcile_every=0, observer_factory=deaf_observer) as watcher:
        save(notes / "travel" / "brno.md", "# Brno\n\nLost in an overflow: droppedlynx.\n")
        logging.getLogger("watchdog.observers.inotify_c").warning(
            "Inotify queue overflowed; filesystem events were lost"
        )
        wait_for(lambda: lex(config, "droppedlynx") and watcher.stats.reconciles == 2, "the overflow reconcile")


def test_a_busy_lock_delays_the_batch_but_never_drops_it(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    with watching(config, embedder) as watcher:
        with sync_lock_held(config):  # a long cron sync, say
            retries = watcher.stats.retries
            save(notes / "cooking" / "sourdough.md", "# Sourdough\n\nFeed it rye: lockedbread.\n")
            wait_for(lambda: watcher.stats.retries >= retries + 3, "retries while the lock is held")
            wait_for(lambda: ("notes", "cooking/sourdough.md") in watcher.pending(), "the batch back in the queue")
            assert lex(config, "lockedbread") == []
        wait_for(lambda: lex(config, "lockedbread") == ["cooking/sourdough.md"], "the retried batch")


def test_a_dead_observer_is_logged_and_restarted(
    config: Config, notes: Path, embedder: FakeEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    made: list[BaseObserver] = []

    def factory() -> BaseObserver:
        made.append(Observer())
        return made[-1]

    with watching(config, embedder, observer_factory=factory) as watcher:
        made[0].stop()  # the observer thread dies behind the watcher's back
        wait_for(lambda: watcher.stats.restarts == 1 and len(made) == 2, "the restart")
        assert watcher.running
        assert any("observer stopped" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
        save(notes / "cooking" / "bread.md", "# Bread\n\nSeen by the new observer: phoenixloaf.\n")
        wait_for(lambda: lex(config, "phoenixloaf"), "an event through the restarted observer")


def test_a_replaced_root_folder_is_watched_again(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    """Deleting the watched root ends watchdog's emitter thread: the real-world silent stop."""
    with watching(config, embedder) as watcher:
        shutil.rmtree(notes)
        save(notes / "restored.md", "# Restored\n\nThe folder came back: lazarusnote.\n")
        wait_for(lambda: watcher.stats.restarts >= 1, "the restart")
        wait_for(lambda: lex(config, "lazarusnote") and set(known(config)) == {"restored.md"}, "the reconcile after it")
        save(notes / "after.md", "# After\n\nAn event on the new watch: afterglowmoth.\n")
        wait_for(lambda: lex(config, "afterglowmoth"), "an event through the new observer")


def test_a_source_whose_folder_is_away_is_watched_once_it_is_back(
    tmp_path: Path, notes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A drive not mounted when the watcher starts: the other sources are watched (it used to
    refuse to start at all), and the drive once it is mounted."""
    usb = tmp_path / "usb"
    extra = f"    usb:\n      root: {usb}\n      paths: ['**']\n"
    config = load_config(make_config(tmp_path, notes, extra_sources=extra))
    embedder = FakeEmbedder(config.embedding)
    with watching(config, embedder) as watcher:
        assert any("not watching" in r.getMessage() and str(usb) in r.getMessage() for r in caplog.records)
        save(notes / "cooking" / "soup.md", "# Soup\n\nWatched while the drive is away: borschtmark.\n")
        wait_for(lambda: lex(config, "borschtmark"), "an event in the source that is there")
        save(usb / "trip.md", "# Trip\n\nOn the drive: carpathianmark.\n")  # mounted
        wait_for(lambda: lex(config, "carpathianmark"), "the reconcile once the drive is back")
        save(usb / "later.md", "# Later\n\nAn event on the drive: latermark.\n")
        wait_for(lambda: lex(config, "latermark"), "an event through the new watch")
        assert watcher.running


def test_a_root_mounted_over_is_watched_as_it_is_now(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    """A drive mounted on its mount point (or taken off it) puts another folder at the root's
    path; inotify kept watching the one below, and nothing was seen until the next reconcile.
    A folder renamed away and a new one made in its place is the same change."""
    with watching(config, embedder) as watcher:
        notes.rename(notes.with_name("notes-under-the-mount"))
        notes.mkdir()
        save(notes / "mounted.md", "# Mounted\n\nOn the drive: mountedmark.\n")
        wait_for(lambda: lex(config, "mountedmark") and set(known(config)) == {"mounted.md"}, "the reconcile")
        save(notes / "later.md", "# Later\n\nAn event on the drive: latermark.\n")
        wait_for(lambda: lex(config, "latermark"), "an event through the new watch")
        assert watcher.running


def test_a_symlinked_root_pointed_elsewhere_is_watched_there(tmp_path: Path, embedder: FakeEmbedder) -> None:
    """`vault -> vault-2025`, then `vault -> vault-2026`: the watcher kept watching the old one."""
    for year in ("2025", "2026"):
        save(tmp_path / f"vault-{year}" / "index.md", f"# Vault {year}\n\nyear{year}mark\n")
    link = tmp_path / "vault"
    link.symlink_to(tmp_path / "vault-2025")
    config = load_config(make_config(tmp_path, link))
    with watching(config, embedder):
        wait_for(lambda: lex(config, "year2025mark"), "the first vault")
        swap = tmp_path / "vault.new"
        swap.symlink_to(tmp_path / "vault-2026")
        swap.replace(link)
        wait_for(
            lambda: lex(config, "year2026mark") and not lex(config, "year2025mark"), "the reconcile of the new one"
        )
        save(tmp_path / "vault-2026" / "new.md", "# New\n\nnewvaultmark\n")
        wait_for(lambda: lex(config, "newvaultmark"), "an event in the new one")


def test_a_watcher_whose_only_folder_is_away_waits_for_it(tmp_path: Path, embedder: FakeEmbedder) -> None:
    """It refused to start, and one whose folder went away gave up after its restarts."""
    usb = tmp_path / "usb"
    config = load_config(make_config(tmp_path, usb))
    with watching(config, embedder, restart_attempts=3) as watcher:
        save(usb / "trip.md", "# Trip\n\nOn the drive: tatramark.\n")
        wait_for(lambda: lex(config, "tatramark"), "the drive, once it is there")
        shutil.rmtree(usb)
        time.sleep(0.5)  # ten health checks: more than the restarts it may fail
        assert watcher.running and watcher.failure is None
        save(usb / "back.md", "# Back\n\nThe drive again: backmark.\n")
        wait_for(lambda: lex(config, "backmark"), "the drive, once it is back")


def test_an_observer_that_cannot_be_restarted_fails_the_watcher(config: Config, embedder: FakeEmbedder) -> None:
    made: list[BaseObserver] = []

    def factory() -> BaseObserver:
        if made:
            raise OSError("inotify watch limit reached")
        made.append(Observer())
        return made[-1]

    with watching(config, embedder, observer_factory=factory, restart_attempts=3) as watcher:
        made[0].stop()
        wait_for(lambda: watcher.failure, "the watcher to give up")
        wait_for(lambda: not watcher.running, "the worker to end")
        assert "inotify watch limit reached" in (watcher.failure or "")


def test_a_hand_edit_is_searchable_within_a_second_or_so(config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    with watching(config, embedder, debounce=0.5, max_wait=2.0):
        started = time.monotonic()
        save(notes / "travel" / "kazan.md", "# Казань\n\nПоезд опаздывает: handeditheron.\n")
        wait_for(lambda: lex(config, "handeditheron"), "the hand edit", timeout=10.0)
        latency = time.monotonic() - started
    print(f"\nedit -> searchable under watch (debounce 0.5 s): {latency * 1000:.0f} ms")
    assert latency < 5.0


def test_readers_never_see_database_is_locked_while_the_watcher_writes(
    config: Config, notes: Path, embedder: FakeEmbedder
) -> None:
    errors: list[str] = []
    searches = 0
    done = threading.Event()

    def reader() -> None:
        nonlocal searches
        store = open_index(config, readonly=True)
        try:
            while not done.is_set():
                try:
                    search(store, config, "burst", k=5, mode="lex", embedder_factory=_no_embedder)
                    searches += 1
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    errors.append(repr(exc))
        finally:
            store.close()

    with watching(config, embedder) as watcher:
        thread = threading.Thread(target=reader)
        thread.start()
        try:
            for round_ in range(3):  # three bursts: writes keep overlapping the reads
                for i in range(80):
                    save(
                        notes / "burst" / f"note-{i:02d}.md", f"# Burst {i}\n\nA burst of writes, roundmark{round_}.\n"
                    )
                word = f"roundmark{round_}"
                wait_for(lambda word=word: len(lex(config, word)) == 20, f"burst {round_}", timeout=15.0)
        finally:
            done.set()
            thread.join()
    print(f"\n{searches} lexical searches beside {watcher.stats.batches} watcher batches, {len(errors)} errors")
    assert searches > 0
    assert errors == []


def test_the_watch_command_indexes_and_exits_cleanly_on_sigterm(config_path: Path, notes: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        import search.cli as cli_module
        from search.cli.watch import watch
        from tests.fakes import FakeEmbedder
        cli_module.make_embedder = FakeEmbedder  # offline: no model, no server
        cli_module.cli.add_command(watch)
        cli_module.cli(sys.argv[1:], prog_name="notes-search")
        """
    )
    stderr = tmp_path / "watch.err"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, "-c", str(config_path), "watch", "--debounce", "0.1"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(
            lambda: "watching" in stderr.read_text() and "reconciled" in stderr.read_text(),
            "the command to start",
            timeout=15.0,
        )
        config = load_config(config_path)
        save(notes / "cli.md", "# CLI\n\nWatched by the command: commandcrane.\n")
        wait_for(lambda: lex(config, "commandcrane"), "the command to index an edit")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "indexed 1 path (notes:cli.md)" in stderr.read_text()
    assert "stopped:" in stderr.read_text()


@pytest.mark.parametrize("new_name", ["aaa-kitchen", "zzz-kitchen"])
def test_renamed_folder_reuses_vectors_whichever_name_sorts_first(
    config: Config, notes: Path, embedder: FakeEmbedder, new_name: str
) -> None:
    """The new path is indexed before the old one is dropped, so its chunks find their vectors
    by content hash whether the new name sorts before or after the old one."""
    with watching(config, embedder) as watcher:
        before = embedder.texts_embedded
        (notes / "cooking").rename(notes / new_name)
        wait_for(lambda: {("notes", "cooking"), ("notes", new_name)} <= watcher.pending(), "both paths' events")
        batch = watcher.flush()
        assert [rel for _, rel in batch.targets] == [new_name, "cooking"]
        assert embedder.texts_embedded == before, "moved text must not be embedded again"
        assert set(known(config)) >= {f"{new_name}/sourdough.md"} and "cooking/sourdough.md" not in known(config)
