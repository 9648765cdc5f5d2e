"""Sync end to end on real files and a real index (the SQLite file, or PostgreSQL with
NOTES_SEARCH_TEST_BACKEND=postgres): orphan vectors, idempotence, the lock, degraded mode, the
identity guard and the coverage report; a second sync of the same files is a no-op."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from indexer.config import Config, load_config
from indexer.lock import SyncLock
from indexer.store import index_exists
from indexer.sync import SyncReport, run_reindex, run_sync
from indexer.toc import toc_path
from tests.conftest import NOTES, cli_on, make_config, open_index, sync_lock_held, write
from tests.fakes import FakeEmbedder
from tests.pg import both_backends
from tests.store_checks import (
    chunk_fingerprint,
    embedded_without_vector,
    fts_integrity_check,
    orphan_vectors,
    write_mark,
)

Sync = Callable[..., SyncReport]


def snapshot(config: Config) -> tuple[dict[str, int], list[tuple[object, ...]], dict[str, str]]:
    store = open_index(config)
    try:
        return store.counts(), chunk_fingerprint(store), store.meta()
    finally:
        store.close()


def disk_state(config: Config) -> object:
    """Changes with any write to the index (see `write_mark`)."""
    return write_mark(config.index_location)


def assert_consistent(config: Config) -> None:
    store = open_index(config)
    try:
        assert orphan_vectors(store) == []
        assert embedded_without_vector(store) == []
        fts_integrity_check(store)
        counts = store.counts()
        assert counts["chunks"] == counts["chunks_fts"]
        assert counts["vectors"] == counts["chunks"] - counts["pending"]
    finally:
        store.close()


def test_first_sync_indexes_every_admitted_file(do_sync: Sync, config: Config, embedder: FakeEmbedder) -> None:
    report = do_sync()
    assert [s.added for s in report.sources] == [4]
    counts, _rows, meta = snapshot(config)
    assert counts["files"] == 4
    assert counts["pending"] == 0
    assert counts["vectors"] == counts["chunks"] > 0
    assert meta["embedding_model"] == "fake:1" and meta["embedding_dims"] == "64"
    assert embedder.texts_embedded == counts["chunks"]
    assert_consistent(config)


def test_second_sync_is_a_noop(do_sync: Sync, config: Config, embedder: FakeEmbedder) -> None:
    do_sync()
    before = snapshot(config)
    embedded = embedder.texts_embedded
    on_disk = disk_state(config)
    report = do_sync()
    assert not report.changed
    assert disk_state(config) == on_disk  # nothing was written
    assert snapshot(config) == before
    assert embedder.texts_embedded == embedded


def test_deleted_file_leaves_no_orphan_vectors(do_sync: Sync, config: Config, notes: Path) -> None:
    do_sync()
    store = open_index(config)
    rows = store.chunk_rows(sorted(store.chunk_languages()))
    ids = {chunk_id for chunk_id, row in rows.items() if row.path == "devops/postgres.md"}
    assert ids <= set(store.all_vectors().ids.tolist())
    store.close()
    assert ids
    (notes / "devops/postgres.md").unlink()
    report = do_sync()
    assert report.sources[0].deleted == 1
    store = open_index(config)
    try:
        assert not ids & set(store.all_vectors().ids.tolist())
        assert orphan_vectors(store) == []
    finally:
        store.close()
    assert_consistent(config)


def test_only_changed_chunks_are_embedded(do_sync: Sync, config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    do_sync()
    before = embedder.texts_embedded
    path = notes / "travel/kazan.md"
    path.write_text(path.read_text(encoding="utf-8").replace("12 часов", "11 часов"), encoding="utf-8")
    report = do_sync()
    assert report.sources[0].updated == 1
    # the file is small enough to be one or two chunks; untouched files are not re-embedded
    assert 1 <= embedder.texts_embedded - before <= 2
    assert_consistent(config)


def test_rename_reuses_vectors(do_sync: Sync, config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    do_sync()
    before = embedder.texts_embedded
    (notes / "cooking").rename(notes / "kitchen")
    report = do_sync()
    assert (report.sources[0].added, report.sources[0].deleted) == (1, 1)
    assert embedder.texts_embedded == before, "moved text must not be embedded again"
    assert_consistent(config)


@both_backends
def test_text_moved_between_two_changed_files_is_not_embedded_again(
    do_sync: Sync, config: Config, notes: Path, embedder: FakeEmbedder
) -> None:
    """Two notes swap their contents: one write batch replaces both, the first one's old chunks
    (the second one's new text) are deleted before the second is written, and still every
    vector is reused by text."""
    first, second = notes / "devops/postgres.md", notes / "travel/kazan.md"
    do_sync()
    before = embedder.texts_embedded
    first_text, second_text = first.read_text(encoding="utf-8"), second.read_text(encoding="utf-8")
    first.write_text(second_text, encoding="utf-8")
    second.write_text(first_text, encoding="utf-8")
    report = do_sync()
    assert report.sources[0].updated == 2
    assert embedder.texts_embedded == before, "moved text must not be embedded again"
    assert_consistent(config)


def test_touched_file_is_not_reembedded(do_sync: Sync, config: Config, notes: Path, embedder: FakeEmbedder) -> None:
    do_sync()
    before = embedder.texts_embedded
    later = time.time() + 5
    os.utime(notes / "devops/postgres.md", (later, later))
    report = do_sync()
    assert report.sources[0].touched == 1 and not report.changed
    assert embedder.texts_embedded == before
    report = do_sync()
    assert report.sources[0].touched == 0  # the stat was refreshed: the next scan is cheap again


def test_degraded_mode_stores_pending_then_fills(do_sync: Sync, config: Config, embedder: FakeEmbedder) -> None:
    embedder.down = True
    report = do_sync()
    assert report.embed_notice and "unreachable" in report.embed_notice
    counts, _, _ = snapshot(config)
    assert counts["chunks"] > 0 and counts["pending"] == counts["chunks"] and counts["vectors"] == 0
    assert_consistent(config)
    embedder.down = False
    held_back = do_sync()  # within the failed sync's back-off: the embedder is left alone
    assert held_back.embedded == 0 and held_back.embed_notice and "next sync tries it at" in held_back.embed_notice
    report = do_sync(retry_embedder=True)
    assert report.embedded == counts["chunks"]
    counts, _, _ = snapshot(config)
    assert counts["pending"] == 0 and counts["vectors"] == counts["chunks"]
    assert_consistent(config)


def test_identity_change_rebuilds_vectors(tmp_path: Path, notes: Path, do_sync: Sync, config: Config) -> None:
    do_sync()
    changed = config.__class__(
        **{
            **config.__dict__,
            "embedding": config.embedding.__class__(**{**config.embedding.__dict__, "model": "fake:2", "dims": 32}),
        }
    )
    other = FakeEmbedder(changed.embedding)
    report = run_sync(changed, embedder_factory=lambda: other)
    assert report.rebuilt and "fake:2" in report.rebuilt and "fake:1" in report.rebuilt
    counts, _, meta = snapshot(changed)
    assert meta["embedding_model"] == "fake:2" and meta["embedding_dims"] == "32"
    assert counts["pending"] == 0 and counts["vectors"] == counts["chunks"]
    store = open_index(changed)
    try:
        vectors = store.all_vectors()
        assert orphan_vectors(store) == [] and embedded_without_vector(store) == []
    finally:
        store.close()
    assert vectors.matrix.shape == (counts["chunks"], 32), "vectors of the old model must be gone"


def test_identity_change_with_embedder_down_leaves_no_old_vectors(do_sync: Sync, config: Config) -> None:
    do_sync()
    changed = config.__class__(
        **{
            **config.__dict__,
            "embedding": config.embedding.__class__(**{**config.embedding.__dict__, "model": "fake:2"}),
        }
    )
    down = FakeEmbedder(changed.embedding)
    down.down = True
    run_sync(changed, embedder_factory=lambda: down)
    counts, _, meta = snapshot(changed)
    assert meta["embedding_model"] == "fake:2"
    assert counts["vectors"] == 0 and counts["pending"] == counts["chunks"]


def test_full_keeps_vectors_of_unchanged_text(do_sync: Sync, config: Config, embedder: FakeEmbedder) -> None:
    do_sync()
    before_snapshot = snapshot(config)
    before = embedder.texts_embedded
    report = do_sync(full=True)
    assert report.sources[0].updated == 4
    assert embedder.texts_embedded == before
    assert snapshot(config)[1] == before_snapshot[1]


def test_lock_held_means_exit_quietly(do_sync: Sync, config: Config) -> None:
    with sync_lock_held(config):
        report = do_sync()
        assert report.locked and not report.sources
        assert not index_exists(config.index_location) or snapshot(config)[0]["files"] == 0
    assert not do_sync().locked


def test_lock_is_released_when_holder_is_killed(config: Config) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from indexer.lock import SyncLock;"
            "l = SyncLock(Path(sys.argv[1])); assert l.acquire(); print('held', flush=True); time.sleep(60)",
            str(config.lock_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert not SyncLock(config.lock_path).acquire()
        holder.kill()
        holder.wait()
        lock = SyncLock(config.lock_path)
        assert lock.acquire(timeout=5), "a killed holder must not leave the lock behind"
        lock.release()
    finally:
        holder.kill()


def test_coverage_report_logs_uncovered_folder(
    tmp_path: Path, notes: Path, caplog: pytest.LogCaptureFixture, db_url: str | None
) -> None:
    write(notes, {"archive/old.md": "# Old\n\nNot whitelisted.\n"})
    config = load_config(make_config(tmp_path, notes, paths='["devops/**", "travel/**", "cooking/**"]', db=db_url))
    embedder = FakeEmbedder(config.embedding)
    with caplog.at_level(logging.WARNING, logger="notes_search"):
        report = run_sync(config, embedder_factory=lambda: embedder)
    assert any("archive" in line for line in report.coverage)
    assert any("archive" in rec.getMessage() and "coverage" in rec.getMessage() for rec in caplog.records)

    def coverage_logged() -> list[str]:
        """The log's coverage lines of another sync (its report always names every gap)."""
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="notes_search"):
            report = run_sync(config, embedder_factory=lambda: embedder)
        assert any("archive" in line for line in report.coverage)
        return [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("coverage:")]

    assert coverage_logged() == []  # a no-op sync (a cron tick) does not repeat the warning
    write(notes, {"more/new.md": "# New\n"})
    changed = coverage_logged()
    assert any("more/" in m for m in changed) and any("archive" in m for m in changed)
    assert coverage_logged() == []


def test_unreadable_files_are_skipped_and_the_rest_indexed(do_sync: Sync, config: Config, notes: Path) -> None:
    (notes / "binary.md").write_bytes(b"\x00\x01\x02PNG")
    (notes / "latin1.md").write_bytes("Příliš žluťoučký".encode("cp1250"))
    report = do_sync()
    assert report.sources[0].skipped == 2 and report.sources[0].added == 4
    assert_consistent(config)


def test_file_that_becomes_binary_leaves_the_index(do_sync: Sync, config: Config, notes: Path) -> None:
    do_sync()
    (notes / "devops/postgres.md").write_bytes(b"\x00" * 100)
    report = do_sync()
    assert report.sources[0].deleted == 1
    store = open_index(config)
    try:
        assert "devops/postgres.md" not in store.known_files("notes")
    finally:
        store.close()


def test_removed_source_is_dropped(
    tmp_path: Path, notes: Path, do_sync: Sync, config: Config, db_url: str | None
) -> None:
    other = tmp_path / "other"
    write(other, {"a.md": "# A\n\nalpha\n"})
    two = load_config(
        make_config(tmp_path, notes, extra_sources=f"    other:\n      root: {other}\n      paths: ['**']\n", db=db_url)
    )
    run_sync(two, embedder_factory=lambda: FakeEmbedder(two.embedding))
    store = open_index(two)
    assert {s.source_id for s in store.source_stats()} == {"notes", "other"}
    store.close()
    do_sync()
    store = open_index(config)
    try:
        assert store.source_ids() == ["notes"]
        assert orphan_vectors(store) == []
    finally:
        store.close()


def test_missing_workspace_root_is_a_source_error(tmp_path: Path, notes: Path, db_url: str | None) -> None:
    gone = tmp_path / "gone"
    config = load_config(
        make_config(tmp_path, notes, extra_sources=f"    gone:\n      root: {gone}\n      paths: ['**']\n", db=db_url)
    )
    report = run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    errors = {s.source_id: s.error for s in report.sources}
    assert errors["notes"] is None and errors["gone"] and "does not exist" in errors["gone"]


def test_new_meta_yaml_makes_a_collection_without_any_note_changing(do_sync: Sync, config: Config, notes: Path) -> None:
    do_sync()
    (notes / "travel/_meta.yaml").write_text(
        "name: trips\ndescription: Cesty a výlety\ntags: [travel]\n", encoding="utf-8"
    )
    do_sync()
    store = open_index(config)
    try:
        assert [(c.name, c.folder, c.files) for c in store.collections()] == [("trips", "travel", 1)]
    finally:
        store.close()
    assert "## travel/ — collection: trips" in toc_path(config, "notes").read_text(encoding="utf-8")
    on_disk = disk_state(config)
    assert not do_sync().changed
    assert disk_state(config) == on_disk


@both_backends
def test_a_full_sync_after_a_scoped_run_brings_the_toc_up_to_date(
    do_sync: Sync, config: Config, notes: Path, embedder: FakeEmbedder
) -> None:
    """A scoped run (reindex PATH, a watcher batch, a query's catch-up) leaves the TOC to the
    next full sync; that sync then finds nothing left to change, and must rewrite it anyway."""
    from indexer.toc import render_toc, toc_path

    do_sync()
    (notes / "cooking/bread.md").write_text("# Rye bread\n\nA rye loaf.\n", encoding="utf-8")
    (notes / "travel/kazan.md").unlink()
    for path in ("cooking", "travel"):
        run_reindex(config, source_ids=["notes"], path=path, embedder_factory=lambda: embedder)
    assert "bread.md" not in toc_path(config, "notes").read_text(encoding="utf-8")  # not yet
    assert not do_sync().changed
    store = open_index(config)
    try:
        assert toc_path(config, "notes").read_text(encoding="utf-8") == render_toc("notes", store.file_rows("notes"))
    finally:
        store.close()
    assert "bread.md" in toc_path(config, "notes").read_text(encoding="utf-8")
    assert not list(config.toc_dir.glob(".*"))  # no mark, no temporary file left behind


def test_error_clears_when_the_source_recovers(tmp_path: Path, notes: Path, db_url: str | None) -> None:
    later = tmp_path / "later"
    config = load_config(
        make_config(tmp_path, notes, extra_sources=f"    later:\n      root: {later}\n      paths: ['**']\n", db=db_url)
    )
    embedder = FakeEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    assert list(store.errored_sources()) == ["later"] and "later" in store.errored_sources()["later"]
    store.close()
    later.mkdir()
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    try:
        assert store.errored_sources() == {}
    finally:
        store.close()


def test_a_file_name_that_is_not_utf8_is_skipped_not_fatal(
    config: Config, do_sync: Callable[..., SyncReport], notes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with open(os.path.join(os.fsencode(notes), b"caf\xe9.md"), "wb") as f:
        f.write(b"# Cafe\n\nlatin-1 name\n")
    report = do_sync()
    assert [s.error for s in report.sources] == [None]
    store = open_index(config, readonly=True)
    try:
        assert sorted(row.path for row in store.file_rows()) == sorted(NOTES)
    finally:
        store.close()
    assert "not valid UTF-8" in caplog.text


def test_renamed_source_reuses_vectors(tmp_path: Path, notes: Path, embedder: FakeEmbedder, db_url: str | None) -> None:
    """Renaming a source in the config re-indexes its files under the new id; the old id's
    vectors are removed only afterwards, so nothing is embedded again."""
    config_path = make_config(tmp_path, notes, db=db_url)
    run_sync(load_config(config_path), embedder_factory=lambda: embedder)
    before = embedder.texts_embedded
    config_path.write_text(
        config_path.read_text(encoding="utf-8").replace("    notes:\n", "    renamed:\n"), encoding="utf-8"
    )
    config = load_config(config_path)
    assert list(config.sources) == ["renamed"]
    report = run_sync(config, embedder_factory=lambda: embedder)
    assert report.sources[0].added == len(NOTES)
    assert embedder.texts_embedded == before
    store = open_index(config, readonly=True)
    try:
        assert store.source_ids() == ["renamed"]
    finally:
        store.close()
    assert_consistent(config)


def test_a_transiently_unreadable_file_keeps_its_indexed_copy(
    do_sync: Sync, config: Config, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EACCES or EIO on one scan is not a deletion: the note stays searchable and is re-read
    on a later scan (root ignores chmod, so the failure is injected)."""
    import builtins

    from indexer.sources import workspace as workspace_module

    do_sync()
    target = notes / "devops" / "postgres.md"
    later = time.time() + 5
    os.utime(target, (later, later))  # a stat change makes the scan read it

    def failing_open(file: object, *args: object, **kwargs: object) -> object:
        if os.fspath(file) == os.fspath(target):  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied")
        return builtins.open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(workspace_module, "open", failing_open, raising=False)
    report = do_sync()
    assert (report.sources[0].skipped, report.sources[0].deleted) == (1, 0)
    store = open_index(config, readonly=True)
    try:
        assert "devops/postgres.md" in {row.path for row in store.file_rows()}
    finally:
        store.close()
    monkeypatch.delattr(workspace_module, "open")
    assert do_sync().sources[0].touched == 1  # readable again: the same content, new stat
    assert_consistent(config)


def test_a_new_chunker_version_is_recorded_per_source(
    tmp_path: Path, notes: Path, embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch, db_url: str | None
) -> None:
    """After an upgrade, `sync --source`, a hook or the watcher's reconcile re-chunks a source
    once and records it; it does not re-chunk on every run until a plain `sync`."""
    from indexer import chunker

    other = tmp_path / "other"
    write(other, {"a.md": "# A\n\nalpha\n"})
    config = load_config(
        make_config(tmp_path, notes, extra_sources=f"    other:\n      root: {other}\n      paths: ['**']\n", db=db_url)
    )
    run_sync(config, embedder_factory=lambda: embedder)
    monkeypatch.setattr(chunker, "CHUNKER_VERSION", "next")
    first = run_sync(config, source_ids=["notes"], embedder_factory=lambda: embedder)
    assert first.sources[0].updated == len(NOTES)
    again = run_sync(config, source_ids=["notes"], embedder_factory=lambda: embedder)
    assert again.sources[0].updated == 0
    rest = run_sync(config, embedder_factory=lambda: embedder)  # only `other` is still stale
    assert {s.source_id: s.updated for s in rest.sources} == {"notes": 0, "other": 1}
    assert run_sync(config, embedder_factory=lambda: embedder).sources[1].updated == 0


def test_a_re_chunk_keeps_the_index_of_a_drive_not_mounted(
    tmp_path: Path, notes: Path, embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch, db_url: str | None
) -> None:
    """An upgrade's re-chunk reads every note again, as `--full` does, but it is no one's
    "the notes were removed on purpose": an empty mount point still keeps its source's index
    (it was emptied), and the re-chunk waits until the drive is back."""
    from indexer import chunker

    usb = tmp_path / "usb"
    write(usb, {"trip.md": "# Trip\n\nthe tatra ridge\n"})
    config = load_config(
        make_config(tmp_path, notes, extra_sources=f"    usb:\n      root: {usb}\n      paths: ['**']\n", db=db_url)
    )
    run_sync(config, embedder_factory=lambda: embedder)
    (usb / "trip.md").rename(tmp_path / "trip.md")  # the drive is unmounted: its mount point is empty
    monkeypatch.setattr(chunker, "CHUNKER_VERSION", "next")
    report = run_sync(config, embedder_factory=lambda: embedder)
    by_id = {s.source_id: s for s in report.sources}
    assert by_id["notes"].updated == len(NOTES) and not by_id["notes"].error
    assert by_id["usb"].deleted == 0 and "is empty but 1 indexed files came from it" in (by_id["usb"].error or "")
    store = open_index(config, readonly=True)
    try:
        assert set(store.known_files("usb")) == {"trip.md"}
    finally:
        store.close()
    (tmp_path / "trip.md").rename(usb / "trip.md")  # mounted again: now it is re-chunked
    back = {s.source_id: s for s in run_sync(config, embedder_factory=lambda: embedder).sources}
    assert back["usb"].updated == 1 and back["notes"].updated == 0 and not back["usb"].error


def test_a_new_chunker_version_says_once_why_every_note_was_chunked_again(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch, db_url: str | None
) -> None:
    """A chunker upgrade re-reads every note: the sync says why, as a rebuild does, once."""
    import search.cli as cli_module
    from indexer import chunker

    run = cli_on(make_config(tmp_path, notes, db=db_url), monkeypatch)
    assert json.loads(run("sync", "--json").stdout)["rechunked"] is None  # a first sync re-chunks nothing
    before = chunker.CHUNKER_VERSION
    monkeypatch.setattr(chunker, "CHUNKER_VERSION", "next")
    report = json.loads(run("sync", "--json").stdout)
    assert report["rechunked"] == (
        f"notes re-chunked (source notes): the chunker changed (version {before} → next);"
        " a chunk whose text came out the same keeps its vector"
    )
    assert report["rebuilt"] is None and report["sources"][0]["updated"] == len(NOTES)
    assert report["embedded"] == 0  # the same texts: their vectors are kept
    assert json.loads(run("sync", "--json").stdout)["rechunked"] is None  # said once
    monkeypatch.setattr(chunker, "CHUNKER_VERSION", "after next")
    monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: True)  # a person reads the summary
    assert "notes re-chunked (source notes): the chunker changed (version next → after next)" in run("sync").stderr


def test_a_giant_chunk_is_embedded_after_every_other_note(tmp_path: Path, notes: Path, db_url: str | None) -> None:
    """A pasted log of megabytes takes the model an hour: the notes after it in the index
    (here every one: `a-log.md` is indexed first) get their vectors before it, not after."""
    from indexer.vectors import GIANT_CHUNK_CHARS

    write(notes, {"a-log.md": "# Log\n\n" + "GET /index.html 200 " * (GIANT_CHUNK_CHARS // 10) + "\n"})
    config = load_config(make_config(tmp_path, notes, db=db_url))
    order: list[str] = []

    class Recording(FakeEmbedder):
        def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
            order.extend(texts)
            return super().embed_batch(texts, is_query=is_query)

    report = run_sync(config, embedder_factory=lambda: Recording(config.embedding))
    assert report.pending == 0
    giant = [i for i, text in enumerate(order) if "GET /index.html" in text]
    small = [i for i, text in enumerate(order) if "GET /index.html" not in text]
    assert giant and small and max(small) < min(giant)


def test_a_source_added_to_an_index_of_an_older_chunker_was_not_re_chunked(
    tmp_path: Path, notes: Path, embedder: FakeEmbedder, db_url: str | None
) -> None:
    """An index written before per-source chunker versions holds one global key; a source added
    since inherited it, and its first sync said its notes were chunked again."""
    config = load_config(make_config(tmp_path, notes, db=db_url))
    run_sync(config, embedder_factory=lambda: embedder)
    store = open_index(config)
    try:
        store.set_meta({"chunker_version": "old", "chunker_version:notes": "old"})
    finally:
        store.close()
    other = tmp_path / "other"
    write(other, {"a.md": "# A\n\nhello there\n"})
    extra = f"    other:\n      root: {other}\n      paths: ['**']\n"
    both = load_config(make_config(tmp_path, notes, extra_sources=extra, db=db_url))
    report = run_sync(both, embedder_factory=lambda: embedder)
    assert report.rechunked is not None and "(source notes)" in report.rechunked, report.rechunked
    assert run_sync(both, embedder_factory=lambda: embedder).rechunked is None


def test_reindex_runs_say_each_source_re_chunked() -> None:
    from search.service.indexing import merged_reports

    merged = merged_reports(
        [SyncReport(rechunked="notes re-chunked (source a)"), SyncReport(rechunked="notes re-chunked (source b)")]
    )
    assert merged.rechunked == "notes re-chunked (source a); notes re-chunked (source b)"


def test_lowering_max_file_bytes_drops_files_now_too_large(
    tmp_path: Path, notes: Path, embedder: FakeEmbedder, db_url: str | None
) -> None:
    """The same result as a fresh index: an unchanged file over the new limit leaves the index."""
    write(notes, {"big.md": "# Big\n\n" + "word " * 400 + "\n"})
    config_path = make_config(tmp_path, notes, db=db_url)
    run_sync(load_config(config_path), embedder_factory=lambda: embedder)
    config_path.write_text(config_path.read_text(encoding="utf-8") + "max_file_bytes: 1000\n", encoding="utf-8")
    config = load_config(config_path)
    assert config.max_file_bytes == 1000
    report = run_sync(config, embedder_factory=lambda: embedder)
    assert (report.sources[0].deleted, report.sources[0].skipped) == (1, 1)
    store = open_index(config, readonly=True)
    try:
        assert sorted(row.path for row in store.file_rows()) == sorted(NOTES)
    finally:
        store.close()
    assert_consistent(config)
