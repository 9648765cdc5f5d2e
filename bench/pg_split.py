"""Where a PostgreSQL search's time goes: each store call of `search.engine.search` timed apart,
on bench_pg's cached PostgreSQL copy (run bench_pg at that size first: it makes the copy).

    .venv/bin/python -m bench.pg_split [--size 1000000] [--corpus realistic] [--queries 20]

Per mode and scope, the p50 over the queries of: the whole search, and the summed time of each
store method it called (on the query's connection and on the sibling reader that runs the
vector half beside the keyword half: the halves overlap, so the calls may sum to more than the
whole). "other" is every remaining store call (meta, snapshot, chunk_languages, ...). As in
bench_pg, every search meets its phrases for the first time (their kept document frequencies
forgotten before each), so no mode rides on the counts an earlier one left. Then
HNSW recall@10 and the unscoped vector search's p50 at fixed ef_search values. Not in run_all:
it needs the 1M copy.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/pg_split.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.bench_pg import PLAN, RECALL_QUERIES, K, open_backend, pg_copy, start_server
from bench.bench_search import FixedQueryEmbedder, _scopes
from bench.corpus_real import CORPUS_KINDS, DEFAULT_DATA, corpus_of
from bench.corpus_text import AREAS, TOPICS_PER_AREA, query_vector
from bench.report import emit, eprint, header, machine_table, md_table, ms
from bench.workspaces import store_built_workspace

TIMED = ("fts_search", "vec_search", "chunk_rows")
EF_SWEEP = (100, 200, 400, 1000)


@contextmanager
def timed_store_calls() -> Iterator[dict[str, list[float]]]:
    """Every PostgresStore method call (any connection, any thread) adds its seconds under its
    name while the block runs."""
    from indexer.store.postgres import PostgresStore

    spent: dict[str, list[float]] = defaultdict(list)
    lock = threading.Lock()
    originals: dict[str, Any] = {}
    for name, value in vars(PostgresStore).items():
        if name.startswith("_") or not callable(value) or isinstance(value, (staticmethod, classmethod)):
            continue
        originals[name] = value

        def wrapper(*args: Any, __name: str = name, __call: Callable[..., Any] = value, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return __call(*args, **kwargs)
            finally:
                with lock:
                    spent[__name].append(time.perf_counter() - started)

        setattr(PostgresStore, name, functools.wraps(value)(wrapper))
    try:
        yield spent
    finally:
        for name, value in originals.items():
            setattr(PostgresStore, name, value)


def ef_sweep(url: str, size: int) -> list[list[object]]:
    """recall@10 (by id, against the exact top 10) and the unscoped vec_search p50 at fixed
    candidate-list lengths instead of the store's choice (which grows with the index)."""
    import numpy as np

    from indexer.store import SearchScope, open_store
    from indexer.store import postgres as pg_store

    chosen = (pg_store.EF_SEARCH_MIN, pg_store.EF_SEARCH_MAX)
    store = open_store(url, readonly=True)
    rows: list[list[object]] = []
    try:
        everything = store.all_vectors()
        unit = everything.matrix / np.maximum(np.linalg.norm(everything.matrix, axis=1, keepdims=True), 1e-12)
        topics = AREAS * TOPICS_PER_AREA
        queries = [query_vector(10_000 + i, topics) for i in range(RECALL_QUERIES)]
        exact = [set(everything.ids[np.argsort(-(unit @ q), kind="stable")[:10]].tolist()) for q in queries]
        del unit, everything
        for ef in EF_SWEEP:
            pg_store.EF_SEARCH_MIN = pg_store.EF_SEARCH_MAX = ef
            found, took = [], []
            for q, top in zip(queries, exact, strict=True):
                started = time.perf_counter()
                hits = store.vec_search(q, 10, SearchScope())
                took.append(time.perf_counter() - started)
                found.append(len(top & {hit.chunk_id for hit in hits}) / 10)
            rows.append(
                [f"{size:,}", ef, f"{statistics.mean(found):.3f}", f"{min(found):.1f}", ms(statistics.median(took))]
            )
            eprint(f"  ef_search {ef}: {rows[-1]}")
    finally:
        pg_store.EF_SEARCH_MIN, pg_store.EF_SEARCH_MAX = chosen
        store.close()
    return rows


def split(size: int, corpus_kind: str, queries: int) -> str:
    from indexer.store.postgres import forget_phrase_counts
    from search.engine import search

    corpus = corpus_of(corpus_kind, DEFAULT_DATA)
    server, socket_dir = start_server()
    rows: list[list[object]] = []
    try:
        ws = store_built_workspace(corpus.name("search", size), chunks=size, log=eprint, corpus=corpus)
        if not any(ws.root.glob("pg-*.done")):
            raise SystemExit(f"no PostgreSQL copy of {ws.root} yet: run bench.bench_pg --sizes {size} first")
        url, _ = pg_copy(socket_dir, ws, size)
        sweep = ef_sweep(url, size)
        qs = corpus.queries(queries)
        topics = AREAS * TOPICS_PER_AREA
        embedder = FixedQueryEmbedder({q: query_vector(i, topics) for i, q in enumerate(qs)})
        scopes = _scopes()
        config, store, _ = open_backend(ws, url, "postgres")
        try:
            for mode, scope_name in PLAN:
                walls: list[float] = []
                per_call: dict[str, list[float]] = defaultdict(list)
                calls: dict[str, list[int]] = defaultdict(list)
                for q in qs[:3]:  # warm-up
                    forget_phrase_counts()
                    search(
                        store, config, q, k=K, mode=mode, scope=scopes[scope_name], embedder_factory=lambda: embedder
                    )
                for q in qs:
                    forget_phrase_counts()  # as bench_pg: each mode meets the query's phrases for the first time
                    with timed_store_calls() as spent:
                        started = time.perf_counter()
                        search(
                            store,
                            config,
                            q,
                            k=K,
                            mode=mode,
                            scope=scopes[scope_name],
                            embedder_factory=lambda: embedder,
                        )
                        walls.append(time.perf_counter() - started)
                    for name in TIMED:
                        per_call[name].append(sum(spent.get(name, [])))
                        calls[name].append(len(spent.get(name, [])))
                    per_call["other"].append(sum(sum(v) for n, v in spent.items() if n not in TIMED))
                rows.append(
                    [f"{size:,}", mode, scope_name, len(qs), ms(statistics.median(walls))]
                    + [
                        f"{ms(statistics.median(per_call[name]))} ({statistics.median(calls[name]):g})"
                        for name in TIMED
                    ]
                    + [ms(statistics.median(per_call["other"]))]
                )
                eprint(f"  {mode} {scope_name}: {rows[-1]}")
        finally:
            store.close()
    finally:
        from indexer.store.postgres import discard_pool

        discard_pool()
        server.cleanup()
    return "\n".join(
        [
            header("PostgreSQL: a search's time by store call", False),
            machine_table(),
            "",
            f"Corpus: {corpus.kind}. p50 over the queries; store calls as p50 of their summed ms per search (p50 calls).",
            "",
            md_table(
                ["index", "mode", "scope", "queries", "search p50 ms"]
                + [f"{n} ms (calls)" for n in TIMED]
                + ["other ms"],
                rows,
            ),
            "",
            f"Unscoped vec_search at a fixed hnsw.ef_search ({RECALL_QUERIES} bench_pg recall queries):",
            "",
            md_table(["index", "ef_search", "recall@10", "worst query", "vec_search p50 ms"], sweep),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--corpus", choices=CORPUS_KINDS, default="realistic")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = split(args.size, args.corpus, args.queries)
    emit(text, args.out)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
