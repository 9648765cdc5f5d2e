"""What the language-aware parts cost a hybrid query on a mixed-language index.

    .venv/bin/python -m bench.bench_mixed_latency [--quick] [--cache PATH]

tldr-mixed (bench/tldr_mixed.py: 831 pages in en/ru/cs) is indexed through `run_sync` with the
vectors from the bench cache only (a vector missing from it is an error: the real model is never
run here), then `search.engine.search` answers its cross-lingual and same-language questions in
hybrid mode with the query vector precomputed. Two ways, alternating query by query so both see
the same load:

- language-aware: as shipped (query language, projection, chunk languages, mixed-language fusion);
- language-blind: the query's language forced to "unknown", which is the path a query took
  before cross-lingual search (no projection, plain RRF; the chunk rows still carry their
  language column, a few bytes a row).

Each query is timed REPEATS times per way and its median kept; the table gives p50/p90 over the
queries, the ratio of the p50s and the median of the per-query ratios. Times are this process's
CPU time (everything runs in it, SQLite included): on the shared machine wall time under load
varied tenfold between runs. The ratio is what to read.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.beir import CachingEmbedder, LazyEmbedder, write_config, write_workspace
from bench.bench_langid import eval_root
from bench.crosslingual import load
from bench.report import arg_parser, md_table, report
from indexer.config import EmbeddingConfig, load_config
from indexer.embedders import Embedder
from indexer.errors import EmbedderError
from indexer.store import Store
from indexer.sync import run_sync

REPEATS = 5
QUICK_QUERIES = 200
MODEL_QUERIES = 50  # questions embedded by the real model for the end-to-end figure


class CacheOnly(Embedder):
    """The embedder behind the cache: any text the cache lacks is an error, never a model run."""

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        raise EmbedderError(f"{len(texts)} texts are not in the vector cache (run bench.crosslingual first)")


class Fixed(Embedder):
    """Answers every query with one precomputed vector: the timing leaves the model out."""

    def __init__(self, config: EmbeddingConfig, vector: np.ndarray) -> None:
        super().__init__(config)
        self.vector = vector

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        return np.stack([self.vector] * len(texts))


def _timed(run: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.process_time()  # CPU time: the shared machine's load moves wall time tenfold
        run()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1000


def measure(quick: bool, cache: Path | None = None) -> str:
    import search.engine as engine
    from indexer import language

    loaded = load("tldr-mixed", eval_root())
    if loaded is None:
        return "_tldr-pages corpus not found: skipped_\n"
    data, meta = loaded
    with tempfile.TemporaryDirectory(prefix="nsb-mixed-latency-") as tmp:
        workdir = Path(tmp)
        write_workspace(data, workdir / "docs")
        config = load_config(write_config(workdir, workdir / "docs"))
        cached = LazyEmbedder(lambda: CachingEmbedder(CacheOnly(config.embedding), cache))
        report_ = run_sync(config, embedder_factory=cached)
        if report_.pending:  # this benchmark never runs the model
            return f"_skipped: {report_.pending} tldr-mixed chunks are not in the vector cache (run bench.crosslingual first)_\n"
        queries = [(qid, text) for qid, text in data.queries.items() if meta.get(qid, {}).get("kind") != "code"]
        if quick:
            queries = queries[:QUICK_QUERIES]
        embedder = cached()
        vectors = {qid: embedder.embed_query(text) for qid, text in queries}
        store = Store.open(config.db, readonly=True)
        real_detect = language.detect_query_language
        ways: dict[str, list[float]] = {"language-aware": [], "language-blind": []}
        try:
            for qid, text in queries:
                fixed = Fixed(config.embedding, vectors[qid])

                def once(text: str = text, fixed: Fixed = fixed) -> object:
                    return engine.search(store, config, text, k=10, mode="hybrid", embedder_factory=lambda: fixed)

                once()  # warm: statement cache, pages
                ways["language-aware"].append(_timed(once))
                language.detect_query_language = lambda query: language.UNKNOWN  # type: ignore[assignment]
                try:
                    ways["language-blind"].append(_timed(once))
                finally:
                    language.detect_query_language = real_detect  # type: ignore[assignment]
            model = _model_query_ms(config.embedding, [text for _, text in queries[:MODEL_QUERIES]])
        finally:
            store.close()
    base = statistics.median(ways["language-blind"])
    paired = statistics.median(a / b for a, b in zip(ways["language-aware"], ways["language-blind"], strict=True))
    rows = [
        [
            way,
            len(times),
            f"{statistics.median(times):.2f}",
            f"{statistics.quantiles(times, n=10)[-1]:.2f}",
            f"{statistics.median(times) / base - 1:+.1%}",
        ]
        for way, times in ways.items()
    ]
    aware = statistics.median(ways["language-aware"])
    end_to_end = (
        f"\nWith the query's embedding by the local model ({config.embedding.model}, p50 {model:.1f} ms CPU over "
        f"{MODEL_QUERIES} of these questions, one at a time), what a user waits for: "
        f"{aware + model:.1f} vs {base + model:.1f} ms, ratio {(aware + model) / (base + model):.3f}\n"
        if model is not None
        else "\n_The local model is not available: no end-to-end figure._\n"
    )
    return (
        f"### Hybrid query, tldr-mixed ({report_.embedded or 'cached'} chunks; query vector precomputed; "
        f"median of {REPEATS} per query)\n\n"
        + md_table(["way", "queries", "p50 ms", "p90 ms", "p50 vs language-blind"], rows)
        + f"\nMedian per-query ratio language-aware / language-blind: {paired:.3f}\n"
        + end_to_end
    )


def _model_query_ms(config: EmbeddingConfig, questions: list[str]) -> float | None:
    """CPU ms (median) the local model takes to embed one question, uncached."""
    from indexer.embedders import make_embedder

    try:
        embedder = make_embedder(config)
        embedder.embed_query("warm up")  # the model load is a process's, not a query's
    except EmbedderError:
        return None
    times = []
    for question in questions:
        start = time.process_time()
        embedder.embed_query(question)
        times.append(time.process_time() - start)
    return statistics.median(times) * 1000


def run(quick: bool, with_machine: bool) -> str:
    return report(
        "Mixed-language query latency (bench/bench_mixed_latency.py)",
        "mixed-latency",
        (("hybrid", measure),),
        quick,
        with_machine,
    )


def main() -> None:
    parser = arg_parser(__doc__, f"the first {QUICK_QUERIES} questions only")
    args = parser.parse_args()
    print(run(args.quick, not args.no_machine))


if __name__ == "__main__":
    main()
