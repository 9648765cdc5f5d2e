"""How the PostgreSQL store's bounded keyword search answers each unscoped benchmark query: the
passes it made (the store's `keyword_trace`), their milliseconds, and which queries still end
in the scan of every match.

    XDG_CACHE_HOME=... .venv/bin/python -m bench.pg_keyword_passes [--size 100000] [--corpus realistic] [--queries 50] [--check] [--path area-07]

Runs on the PostgreSQL copy `bench.bench_pg` caches (run that first at the same size). Each
query's keyword calls are made as the search engine makes them (the MATCH expression, then the
exact identifier terms). `--check` counts every phrase's chunks exactly (no sampled document
frequencies) and compares each answer with the scan of every match: ids and scores must be equal.
`--path` searches inside that folder instead (the way the store reads the scope is the trace);
its check compares with every match of the scope scored through the planner's join of the scope.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.bench_pg import database_url, start_server
from bench.corpus_real import CORPUS_KINDS, DEFAULT_DATA, corpus_of
from bench.report import eprint, md_table, ms
from bench.workspaces import store_built_workspace


def _kind(sql: str) -> str:
    if sql.startswith("EXPLAIN"):
        return "estimate"
    if "TABLESAMPLE" in sql:
        return "sample"
    if "OVER ()" in sql:
        return "full"
    if "impacts @@" in sql:
        return "pass"
    return "other"


def run(size: int, n_queries: int, limit: int, check: bool, corpus_kind: str = "dense", path: str | None = None) -> str:
    from indexer.store import SearchScope, open_store
    from indexer.store import postgres as pg_module
    from indexer.store.postgres import discard_pool
    from search.querybuild import build_exact_query, build_fts_query, query_terms

    if check:
        pg_module.SAMPLE_MIN_HITS = 10**9  # every phrase counted: the bounded top must be the scan's
        pg_module.LEXEME_STATISTICS = False
    corpus = corpus_of(corpus_kind, DEFAULT_DATA)
    server, socket_dir = start_server()
    rows: list[list[object]] = []
    took: list[float] = []
    wrong = 0
    try:
        ws = store_built_workspace(corpus.name("search", size), chunks=size, log=eprint, corpus=corpus)
        marker = f"bench_{size}_{hashlib.sha256(str(ws.root).encode()).hexdigest()[:8]}"
        if not (ws.root / f"pg-{marker}.done").exists():
            raise SystemExit(
                f"no PostgreSQL copy of the {size:,}-chunk index:"
                f" run bench.bench_pg --sizes {size} --corpus {corpus.kind} first"
            )
        store: Any = open_store(database_url(socket_dir, marker), readonly=True)
        sent: list[tuple[str, float]] = []
        execute = store.conn.execute

        def recording(sql: Any, params: Any = None, **kwargs: Any) -> Any:
            started = time.perf_counter()
            cursor = execute(sql, params, **kwargs)
            sent.append((str(sql).lstrip(), time.perf_counter() - started))
            return cursor

        store.conn.execute = recording
        try:
            calls = []
            for q in corpus.queries(n_queries):
                match = build_fts_query(q)
                if match is not None:
                    calls.append((q, match))
                    exact = build_exact_query(query_terms(q))
                    if exact is not None:
                        calls.append((f"(exact) {exact}", exact))
            scope = SearchScope(path=path) if path else SearchScope()
            for shown, expression in calls:
                if check and path:  # a one-phrase query would keep the sample's estimate: every one counted
                    store._count_phrase_hits(
                        [pg_module._phrase_tsquery(t, p) for t, p in pg_module.match_phrases(expression)]
                    )
                store.fts_search(expression, limit, scope)  # document frequencies known, as in a server
                sent.clear()
                started = time.perf_counter()
                hits = store.fts_search(expression, limit, scope)
                seconds = time.perf_counter() - started
                took.append(seconds)
                trace = list(store.keyword_trace)
                spent: dict[str, float] = {}
                for sql, part in sent:
                    spent[_kind(sql)] = spent.get(_kind(sql), 0.0) + part
                same = ""
                if check:
                    queries = [pg_module._phrase_tsquery(t, p) for t, p in pg_module.match_phrases(expression)]
                    scanned = (
                        store._full_search(queries, limit) if not path else _scope_scanned(store, queries, limit, scope)
                    )
                    same = "yes" if scanned == hits else "**NO**"
                    wrong += scanned != hits
                ended = "full scan" if "full" in spent else ("passes" if trace else "every match (few)")
                if path:
                    ended = "scope"
                rows.append(
                    [
                        shown,
                        expression.count(" OR ") + 1,
                        ended,
                        "; ".join(trace),
                        ms(spent.get("pass", 0.0)),
                        ms(spent.get("estimate", 0.0)),
                        ms(spent.get("full", 0.0)),
                        ms(seconds),
                        same,
                    ]
                )
        finally:
            store.close()
    finally:
        discard_pool()
        server.cleanup()
    fell = sum(1 for r in rows if r[2] == "full scan")
    summary = (
        f"{'Unscoped' if not path else f'Scoped (--path {path})'} fts_search({limit}) on the {size:,}-chunk PostgreSQL copy: {len(rows)} calls, {fell} ended "
        f"in the scan of every match; p50 {ms(statistics.median(took))} ms, "
        f"p90 {ms(statistics.quantiles(took, n=10)[-1])} ms, max {ms(max(took))} ms"
    )
    if check:
        summary += f"; {len(rows) - wrong} of {len(rows)} equal to the scan of every match"
    return "\n".join(
        [
            summary,
            "",
            md_table(
                ["query", "phrases", "ended", "passes", "pass ms", "estimate ms", "scan ms", "total ms", "= scan"],
                rows,
            ),
        ]
    )


def _scope_scanned(store: Any, queries: list[str], limit: int, scope: Any) -> list[Any]:
    """Every match of the scope scored, through the planner's join of the scope's ids (the
    exact document frequencies counted over the whole index)."""
    from indexer.store import postgres as pg_module

    found = [store._phrase_hits[q] for q in queries]
    if not any(found):
        return []
    _, total_rows, total_tokens = store.conn.execute(
        f"SELECT {pg_module.LEXICAL_VERSION_SQL}, sum(rows), sum(tokens) FROM fts_stats"
    ).fetchone()
    where, params = pg_module.scope_condition(scope, "c")
    avgdl = int(total_tokens) / int(total_rows) or 1.0
    idf = pg_module._idfs(found, int(total_rows))
    hits: list[Any] = store._scored(
        queries, idf, avgdl, limit, f"f.id IN (SELECT c.id FROM chunks c WHERE {where})", params
    )
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--corpus", choices=CORPUS_KINDS, default="dense")
    parser.add_argument("--check", action="store_true", help="exact frequencies; compare with the scan of every match")
    parser.add_argument("--path", help="search inside this folder (a scope) instead of the whole index")
    args = parser.parse_args()
    print(run(args.size, args.queries, args.limit, args.check, args.corpus, args.path))


if __name__ == "__main__":
    main()
