"""Searches keep working while the index is rebuilt under them.

Load: CLI subprocesses (`notes-search query --json --explain`, some scoped so their catch-up
competes for the sync lock), in-process engine searches on separate connections (one thread
with a long-lived connection, one opening a connection per query) and the MCP tool layer
(`search.mcp_server.NotesTools.search`, in process) and real `notes-search mcp` servers called
over stdio (`tools/call search`), all running continuously while

1. `sync --full` re-reads and re-chunks every note (twice in a row),
2. a model change rebuilds the vector space (same dimensions, a different space), and
3. a dimension change rebuilds it again (64 -> 32 d),

each sync being a real `notes-search sync` subprocess. Required: zero "database is locked",
zero failed queries; lexical queries always answer; hybrid/vec queries either answer or refuse
with ReindexNeeded ("reindex needed"); and every vector distance a successful query reports is
the distance between the query and that chunk *in the space of the config the query used*
(the test server makes the two same-dimension spaces very different, so one vector of the
wrong space shows). Queries/s sustained during each re-index are printed (-s) and recorded in
RELIABILITY.md.

Rerun: .venv/bin/pytest tests/test_concurrency.py -s
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.config import Config, load_config
from indexer.embedders import Embedder, make_embedder
from indexer.errors import ReindexNeeded
from indexer.store import Store
from indexer.windows import estimate_tokens, windows
from search import cli as cli_module
from search.engine import search
from tests.conftest import write_tree
from tests.test_crash_safety import (
    DIMS,
    MODEL,
    MODEL_2,
    NOTES_SEARCH,
    CachingOllamaServer,
    TreeGuard,
    assert_consistent,
    corpus_files,
    space_vector,
    subprocess_env,
    sync_in_process,
    write_config,
)

pytestmark = pytest.mark.sqlite_only(
    "readers and writers of one SQLite file (WAL, busy timeouts); PostgreSQL has test_concurrency_pg.py"
)

MODEL_3 = "fake-embed-3:latest"
DIMS_3 = 32
CORPUS_FILES = 200
QUERIES = [
    "backup server",
    "záloha databáze",
    "поезд река",
    "restic backup --tag",
    "flour starter oven",
    "replica latency",
    "Section 2 kernel",
    "id17",
]
MODES = ["hybrid", "lex", "vec"]
LOCKED = "database is locked"

try:  # the MCP tool layer, when it is there (search/mcp_server.py is written in parallel)
    from search.mcp_server import NotesTools
    from search.service import NotesService
except ImportError:  # pragma: no cover - reported by test_mcp_layer_was_exercised
    NotesTools = None  # type: ignore[assignment,misc]


@dataclass
class Tally:
    """Outcomes per client kind, with completion times for the queries/s figures."""

    done: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (started, finished)
    refused: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    checked_distances: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, kind: str, started: float, checked: int = 0) -> None:
        with self.lock:
            self.done.setdefault(kind, []).append((started, time.monotonic()))
            self.checked_distances += checked

    def refuse(self, kind: str, started: float) -> None:
        with self.lock:
            self.done.setdefault(kind, []).append((started, time.monotonic()))
            self.refused[kind] += 1

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)

    def rate(self, kind: str, start: float, end: float) -> tuple[int, float, int]:
        """(answered inside the window, per second, overlapping the window at all)."""
        spans = self.done.get(kind, [])
        n = sum(1 for _, t in spans if start <= t <= end)
        overlapping = sum(1 for t0, t1 in spans if t0 <= end and t1 >= start)
        return n, n / max(end - start, 1e-9), overlapping


class Space:
    """What a config's vectors are: lets a test recompute any distance a query reports."""

    def __init__(self, config: Config, embed_texts: dict[tuple[str, str, int], str]) -> None:
        self.config = config
        self.embed_texts = embed_texts

    def check_hits(self, query: str, hits: list[dict[str, Any]]) -> int:
        """Assert every reported vector distance; returns how many were checked."""
        emb = self.config.embedding
        q = space_vector(emb.model, emb.query_prefix + query, emb.dims)
        checked = 0
        for hit in hits:
            distance = (hit.get("explain") or {}).get("distance")
            if distance is None:
                continue
            # a chunk longer than the model's window is as near as its nearest window
            breadcrumb, _, body = self.embed_texts[(hit["source"], hit["path"], hit["line"])].partition("\n\n")
            pieces = windows(breadcrumb, body, lambda text: estimate_tokens(emb.passage_prefix + text), emb.window)
            expected = min(
                1.0 - float(np.dot(q, space_vector(emb.model, emb.passage_prefix + piece, emb.dims)))
                for piece in pieces
            )
            assert abs(distance - expected) < 2e-3, (
                f"{hit['path']}:{hit['line']}: distance {distance} is not the {emb.model} distance {expected:.4f}: "
                "a vector of another embedding space was used"
            )
            checked += 1
        return checked


def is_refusal(message: str) -> bool:
    return "reindex needed" in message.lower()


class Load:
    """Client threads that query until stopped; every outcome lands in the tally."""

    def __init__(self, spaces: list[Space], config_paths: list[Path], tally: Tally) -> None:
        self.spaces = spaces
        self.config_paths = config_paths
        self.tally = tally
        self.stop = threading.Event()
        self.mcp_ready = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        targets: list[tuple[str, Callable[[], None]]] = [
            ("engine-long", lambda: self.engine(long_lived=True)),
            ("engine-fresh", lambda: self.engine(long_lived=False)),
            ("cli", self.cli),
        ]
        if NotesTools is not None:
            targets.append(("mcp", self.mcp))
        if "mcp" in cli_module.LAZY_COMMANDS:  # (commands load when named: `cli.commands` may not list it yet)
            targets.append(("mcp-stdio", self.mcp_stdio))
        for name, target in targets:
            thread = threading.Thread(target=self.guarded(name, target), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), f"{thread.name} did not stop"

    def guarded(self, name: str, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - a dead client thread is a failure too
                self.tally.fail(f"{name} thread died: {exc!r}")

        return run

    def work(self) -> Iterator[tuple[int, str, str]]:
        """(space index, query, mode) round robin until stopped."""
        combos = itertools.cycle(itertools.product(range(len(self.spaces)), QUERIES, MODES))
        while not self.stop.is_set():
            yield next(combos)

    def engine(self, long_lived: bool) -> None:
        kind = "engine (long-lived conn)" if long_lived else "engine (conn per query)"
        embedders: dict[int, Embedder] = {}
        store = Store.open(self.spaces[0].config.db, readonly=True) if long_lived else None
        try:
            for index, query, mode in self.work():
                space = self.spaces[index]
                if index not in embedders:
                    embedders[index] = make_embedder(space.config.embedding)
                started = time.monotonic()
                conn = store or Store.open(space.config.db, readonly=True)
                try:
                    response = search(
                        conn, space.config, query, k=5, mode=mode, embedder_factory=lambda index=index: embedders[index]
                    )
                    hits = [h.to_json(explain=True) for h in response.results]
                    self.tally.ok(kind, started, space.check_hits(query, hits))
                except ReindexNeeded as exc:
                    if mode == "lex":
                        self.tally.fail(f"{kind}: lexical query refused: {exc}")
                    else:
                        self.tally.refuse(kind, started)
                except AssertionError as exc:
                    self.tally.fail(f"{kind}: {exc}")
                except Exception as exc:  # noqa: BLE001 - every other exception is a failed query
                    self.tally.fail(f"{kind} {mode} {query!r}: {type(exc).__name__}: {exc}")
                finally:
                    if store is None:
                        conn.close()
        finally:
            if store is not None:
                store.close()
            for embedder in embedders.values():
                embedder.close()

    def cli(self) -> None:
        kind = "cli subprocess"
        for n, (index, query, mode) in enumerate(self.work()):
            space = self.spaces[index]
            scope = ["--source", "notes"] if n % 2 else []  # scoped: a catch-up competes for the lock
            started = time.monotonic()
            proc = subprocess.run(
                [
                    NOTES_SEARCH,
                    "--config",
                    str(self.config_paths[index]),
                    "query",
                    query,
                    "--json",
                    "--explain",
                    "--mode",
                    mode,
                    "-k",
                    "5",
                    *scope,
                ],
                env=subprocess_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            if LOCKED in proc.stderr or LOCKED in proc.stdout:
                self.tally.fail(f"{kind}: {proc.stderr.strip()}")
            elif proc.returncode == 0:
                try:
                    hits = json.loads(proc.stdout)["results"]
                    self.tally.ok(kind, started, space.check_hits(query, hits))
                except AssertionError as exc:
                    self.tally.fail(f"{kind}: {exc}")
            elif proc.returncode == 1 and is_refusal(proc.stderr) and mode != "lex":
                self.tally.refuse(kind, started)
            else:
                self.tally.fail(f"{kind} {mode} {query!r}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")

    def mcp(self) -> None:
        kind = "mcp tools (in process)"
        tools = [NotesTools(NotesService.from_config_file(str(path))) for path in self.config_paths]
        for index, query, mode in self.work():
            started = time.monotonic()
            try:
                data = tools[index].search(query, None, 5, mode)
                assert isinstance(data["results"], list)
                self.tally.ok(kind, started)
            except ReindexNeeded as exc:
                if mode == "lex":
                    self.tally.fail(f"{kind}: lexical query refused: {exc}")
                else:
                    self.tally.refuse(kind, started)
            except Exception as exc:  # noqa: BLE001
                self.tally.fail(f"{kind} {mode} {query!r}: {type(exc).__name__}: {exc}")

    def mcp_stdio(self) -> None:
        """A real `notes-search mcp` server per config, called over stdio like an agent does."""
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client

        kind = "mcp stdio subprocess"

        async def main() -> None:
            async with contextlib.AsyncExitStack() as stack:
                sessions = []
                for path in self.config_paths:
                    params = StdioServerParameters(
                        command=NOTES_SEARCH,
                        args=["--config", str(path), "mcp"],
                        env=subprocess_env(),
                        cwd=str(path.parent),
                    )
                    errlog = stack.enter_context(path.with_suffix(".mcp.log").open("w"))
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                    session = await stack.enter_async_context(ClientSession(read, write))
                    await session.initialize()
                    sessions.append(session)
                self.mcp_ready.set()
                for index, query, mode in self.work():
                    started = time.monotonic()
                    result = await sessions[index].call_tool("search", {"query": query, "mode": mode, "k": 5})
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    if LOCKED in text:
                        self.tally.fail(f"{kind}: {text}")
                    elif not result.is_error:
                        assert isinstance(json.loads(result.content[0].text), dict)  # type: ignore[union-attr]
                        self.tally.ok(kind, started)
                    elif is_refusal(text) and mode != "lex":
                        self.tally.refuse(kind, started)
                    else:
                        self.tally.fail(f"{kind} {mode} {query!r}: {text}")

        try:
            anyio.run(main)
        finally:
            self.mcp_ready.set()


def run_sync_subprocess(config_path: Path, *args: str) -> dict[str, Any]:
    """A real `notes-search sync --json`; retried while a query's catch-up holds the lock."""
    for _ in range(200):
        proc = subprocess.run(
            [NOTES_SEARCH, "--config", str(config_path), "sync", "--json", *args],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0 and LOCKED not in proc.stderr, proc.stderr
        report: dict[str, Any] = json.loads(proc.stdout)
        if not report["locked"]:
            return report
        time.sleep(0.05)  # a query's catch-up held the lock: exit 0, `"locked": true`; try again
    raise AssertionError("the sync never got the lock")


# ------------------------------------------------------------------------------------ fixtures

RATES: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def server() -> Iterator[CachingOllamaServer]:
    with CachingOllamaServer({MODEL: DIMS, MODEL_2: DIMS, MODEL_3: DIMS_3}) as srv:
        srv.delay = 0.02  # a rebuild takes a few seconds: long enough to query through it
        yield srv


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, server: CachingOllamaServer) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("concurrency")
    notes = base / "notes"
    write_tree(notes, corpus_files(CORPUS_FILES))
    guard = TreeGuard(notes)
    home = base / "home"
    paths = [
        write_config(home, server.url, notes=notes, name="space1.yaml"),
        write_config(home, server.url, notes=notes, model=MODEL_2, passage_prefix="doc: ", name="space2.yaml"),
        write_config(home, server.url, notes=notes, model=MODEL_3, dims=DIMS_3, name="space3.yaml"),
    ]
    sync_in_process(paths[0])
    configs = [load_config(p) for p in paths]
    assert len({c.db for c in configs}) == 1, "all three configs share one index file"
    store = Store.open(configs[0].db, readonly=True)
    try:
        embed_texts = {
            (src, path, line): f"{crumb}\n\n{text}"
            for src, path, line, crumb, text in store.conn.execute(
                "SELECT source_id, path, start_line, breadcrumb, text FROM chunks"
            )
        }
    finally:
        store.close()
    yield {"paths": paths, "spaces": [Space(c, embed_texts) for c in configs], "db": configs[0].db}
    guard.check()


def under_load(setup: dict[str, Any], which: list[int], label: str, job: Callable[[], Any]) -> tuple[Tally, Any]:
    """Run `job` while clients query with the configs `which`; check and record the figures."""
    tally = Tally()
    load = Load([setup["spaces"][i] for i in which], [setup["paths"][i] for i in which], tally)
    load.start()
    load.mcp_ready.wait(timeout=60)  # the stdio servers are up
    time.sleep(0.5)  # every client is in its loop before the writer starts
    started = time.monotonic()
    try:
        result = job()
    finally:
        ended = time.monotonic()
        time.sleep(0.3)
        load.finish()
    assert tally.failures == [], f"{len(tally.failures)} failed queries, first: {tally.failures[:5]}"
    rates = {kind: tally.rate(kind, started, ended) for kind in sorted(tally.done)}
    RATES[label] = {
        "seconds": round(ended - started, 2),
        "queries": {kind: n for kind, (n, _, _) in rates.items()},
        "per_second": {kind: round(r, 1) for kind, (_, r, _) in rates.items()},
        "total_per_second": round(sum(r for _, r, _ in rates.values()), 1),
        "refused_reindex_needed": dict(tally.refused),
        "distances_checked": tally.checked_distances,
    }
    print(f"\n{label}: {json.dumps(RATES[label], ensure_ascii=False)}")
    for kind, (_, _, overlapping) in rates.items():
        assert overlapping > 0, f"{kind} made no query during the re-index"
    assert_consistent(setup["db"])
    return tally, result


# --------------------------------------------------------------------------------------- tests


def test_queries_during_full_reindex(setup: dict[str, Any]) -> None:
    def reindex() -> list[dict[str, Any]]:
        return [run_sync_subprocess(setup["paths"][0], "--full") for _ in range(2)]

    tally, reports = under_load(setup, [0], "sync --full x2", reindex)
    assert all(r["sources"][0]["updated"] > 0 and r["embedded"] == 0 for r in reports), reports
    assert sum(tally.refused.values()) == 0, "nothing about the embedding space changed: no query may be refused"


def test_queries_during_model_change_never_mix_spaces(setup: dict[str, Any]) -> None:
    """Space 1 -> space 2 (same 64 dims, different vectors): clients query with both configs."""
    tally, report = under_load(
        setup, [0, 1], "model change (same dims)", lambda: run_sync_subprocess(setup["paths"][1])
    )
    assert report["rebuilt"] and MODEL_2 in report["rebuilt"] and report["pending"] == 0
    assert tally.checked_distances > 0
    assert sum(tally.refused.values()) > 0, "one of the two configs must have been refused at some point"


def test_queries_during_dimension_change_refuse_or_answer(setup: dict[str, Any]) -> None:
    """Space 2 -> space 3 (32 d): a 64-d query must never reach the 32-d table (nor vice versa)."""
    store = Store.open(setup["db"], readonly=True)
    try:
        current = store.meta()["embedding_model"]
    finally:
        store.close()
    if current != MODEL_2:  # this test ran on its own
        sync_in_process(setup["paths"][1])
    tally, report = under_load(setup, [1, 2], "dimension change 64->32", lambda: run_sync_subprocess(setup["paths"][2]))
    assert report["rebuilt"] and "32" in report["rebuilt"]
    assert tally.checked_distances > 0


def test_mcp_was_part_of_the_load() -> None:
    assert NotesTools is not None, "search/mcp_server.py has no NotesTools: MCP was not part of the load"
    kinds = {kind for rates in RATES.values() for kind in rates["queries"]}
    assert {"mcp tools (in process)", "mcp stdio subprocess"} <= kinds or not RATES, kinds
