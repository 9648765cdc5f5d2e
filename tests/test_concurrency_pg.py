"""Two sync workers and readers on one PostgreSQL index at once.

Two loops of real `notes-search sync --full` subprocesses (two "hosts": each its own config
file and local folder, one database) run against three sources while reader threads search the
same database continuously. Each worker records when it synced which source (a wrapper around
Syncer.sync_workspace, CLOCK_MONOTONIC is shared by all processes). Required: no source is ever
synced by both workers at overlapping times, every source was synced, zero failed queries, and
the index is consistent and complete afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from indexer.config import load_config
from indexer.embedders import make_embedder
from indexer.store import SearchScope, open_store
from search.engine import search
from tests.conftest import write_tree
from tests.embed_servers import OllamaServer
from tests.store_checks import embedded_without_vector, fts_integrity_check, orphan_vectors
from tests.test_crash_safety import corpus_files, server, subprocess_env, sync_in_process, write_config  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("alpha", "beta", "gamma")
RUNS_PER_WORKER = 4
READERS = 3

RECORDER = r"""
import json, os, sys, time
from indexer import sync
log = open(sys.argv[1], "a", encoding="utf-8")
original = sync.Syncer.sync_workspace
def recorded(self, source, full, path=None, **options):
    start = time.monotonic()
    try:
        return original(self, source, full, path, **options)
    finally:
        log.write(json.dumps([os.getpid(), source.id, start, time.monotonic()]) + "\n")
        log.flush()
sync.Syncer.sync_workspace = recorded
sys.argv = ["notes-search", *sys.argv[2:]]
from search.cli import main
main()
"""


def host_config(home: Path, endpoint: str, url: str, notes: Path) -> Path:
    path = write_config(home, endpoint)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["db"] = url
    data["sources"] = {"workspace": {sid: {"root": str(notes / sid), "paths": ["**"]} for sid in SOURCES}}
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def test_two_workers_never_sync_one_source_at_once_and_readers_keep_answering(
    tmp_path: Path,
    server: OllamaServer,
    pg_url: str,
) -> None:
    notes = tmp_path / "notes"
    files = corpus_files(150)
    for n, sid in enumerate(SOURCES):
        write_tree(notes / sid, {rel: text for k, (rel, text) in enumerate(sorted(files.items())) if k % 3 == n})  # type: ignore[misc]
    hosts = [host_config(tmp_path / f"host-{n}", server.url, pg_url, notes) for n in range(2)]
    first = sync_in_process(hosts[0])  # the embedding space is made by a sole run
    assert not first.locked and not first.failed
    log = tmp_path / "intervals.jsonl"

    def worker(config_path: Path) -> None:
        for _ in range(RUNS_PER_WORKER):
            proc = subprocess.run(
                [sys.executable, "-c", RECORDER, str(log), "--config", str(config_path), "sync", "--full", "--quiet"],
                env=subprocess_env(),
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr

    config = load_config(hosts[1])
    stop = threading.Event()
    answered: list[int] = [0] * READERS
    errors: list[str] = []

    def reader(n: int) -> None:
        embedder = make_embedder(config.embedding)
        scopes = [SearchScope(), SearchScope(source_ids=(SOURCES[n % 3],))]
        try:
            while not stop.is_set():
                for mode in ("hybrid", "lex", "vec"):
                    store = open_store(pg_url, readonly=True)
                    try:
                        response = search(
                            store,
                            config,
                            "backup server",
                            mode=mode,
                            scope=scopes[answered[n] % 2],
                            embedder_factory=lambda: embedder,
                        )
                        assert response.results, f"{mode}: no results"
                        answered[n] += 1
                    except Exception as exc:  # noqa: BLE001 - every failure is the finding
                        errors.append(f"{mode}: {type(exc).__name__}: {exc}")
                    finally:
                        store.close()
        finally:
            embedder.close()

    readers = [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
    workers = [threading.Thread(target=worker, args=(path,)) for path in hosts]
    for thread in readers + workers:
        thread.start()
    for thread in workers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()

    assert errors == []
    assert all(answered), answered
    intervals: list[tuple[int, str, float, float]] = [
        tuple(json.loads(line))
        for line in log.read_text(encoding="utf-8").splitlines()  # type: ignore[misc]
    ]
    assert {sid for _, sid, _, _ in intervals} == set(SOURCES)
    for a in intervals:
        for b in intervals:
            if a[0] != b[0] and a[1] == b[1]:
                assert a[3] <= b[2] or b[3] <= a[2], f"source {a[1]} synced by two workers at once: {a} {b}"
    print(
        f"\n{len(intervals)} source syncs by {len({i[0] for i in intervals})} processes; queries answered: {answered}"
    )

    final = sync_in_process(hosts[0])
    assert not final.locked and not final.failed and final.pending == 0
    store: Any = open_store(pg_url)
    try:
        assert orphan_vectors(store) == [] and embedded_without_vector(store) == []
        fts_integrity_check(store)
        counts = store.counts()
        assert counts["files"] == sum(rel.endswith(".md") for rel in files)
        assert counts["vectors"] == counts["chunks"] > 0
    finally:
        store.close()
