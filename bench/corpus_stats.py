"""What the benchmark corpora look like to a lexical engine: the realistic generator's
parameters, and per built index its vocabulary and the document frequency of its query terms.

    .venv/bin/python -m bench.corpus_stats [--sizes 100000,1000000] [--data /work/shared/eval]
        [--dense-cache DIR]

Reads the store-built indexes that bench_pg / bench_search left in the bench cache (a size not
built yet is reported as such; nothing is built here). `--latency` also times SQLite search in
one long-lived process on each pair of indexes, the corpora alternating round by round so that
both see the same machine load. Document frequencies are counted with
the engine's own MATCH expression of each term (prefix stars included), as a fraction of the
index's chunks; "OR of the terms" is what BM25 has to score for the whole query.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/corpus_stats.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench import corpus_real
from bench.corpus_real import CORPUS_KINDS, DEFAULT_DATA, Corpus, RealisticWords, corpus_of
from bench.machine import cache_root, code_key
from bench.report import emit, eprint, md_table
from bench.workspaces import store_built_version

QUERIES = 50
LATENCY_ROUNDS = 3
LATENCY_PLAN = (("hybrid", "all"), ("hybrid", "1% (--path area-07)"), ("lex", "all"), ("vec", "all"))


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def generator_table(source: RealisticWords) -> str:
    rows: list[list[object]] = []
    for lang, lex in source.lexicons.items():
        rows.append(
            [
                lang,
                f"{lex.tokens:,}",
                f"{lex.measured:,}",
                f"{lex.reliable:,}",
                f"{lex.slope:.2f}",
                f"{corpus_real.TAIL_SLOPE:.1f}",
                f"{len(lex.words):,}",
                f"{lex.share(lex.reliable + 1, len(lex.words)):.1%}",
                f"{lex.share(lex.measured + 1, len(lex.words)):.1%}",
            ]
        )
    table = md_table(
        [
            "lang",
            "words counted",
            "distinct",
            f"r0 (seen ≥ {corpus_real.MIN_RELIABLE}×)",
            "head slope (fitted)",
            "tail slope",
            "ranks",
            "draws past r0",
            "draws of synthetic words",
        ],
        rows,
    )
    mix = (
        f"Each word of a note: {corpus_real.TOPIC_SHARE:.0%} from its topic's lexicon "
        f"({corpus_real.TOPIC_WORDS} words, log-uniform over ranks ≥ {corpus_real.TOPIC_MIN_RANK}, "
        f"Zipf in their own order), {corpus_real.NOTE_SHARE:.0%} one of the note's "
        f"{corpus_real.NOTE_KEYWORDS} keywords, the rest from the language's ranks above "
        "(the shares in the table are of those global draws). Query words: "
        + ", ".join(f"{share:.0%} from ranks {lo:.0%}-{hi:.0%}" for share, lo, hi in corpus_real.QUERY_BANDS)
        + " of the measured content words (4+ letters, no stop words)."
    )
    return table + "\n\n" + mix


def find_index(corpus: Corpus, size: int, roots: list[Path]) -> Path | None:
    name = f"{corpus.name('search', size)}-g{store_built_version(corpus)}-{code_key()}"
    for root in roots:
        db = root / name / "db" / "index.sqlite"
        if (root / name / "DONE.json").exists() and db.exists():
            return db
    return None


def index_row(corpus: Corpus, size: int, db: Path) -> list[object]:
    """Vocabulary and query-term document frequencies of one index, read-only."""
    import apsw

    from search.querybuild import build_fts_query, query_terms

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, 'chunks_fts', 'row')")
        vocab = conn.execute("SELECT count(*) FROM temp.vocab").fetchone()[0]
        terms: dict[str, float] = {}
        matched: list[float] = []

        def count(match: str) -> float:
            return (
                conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (match,)).fetchone()[0]
                / chunks
            )

        for q in corpus.queries(QUERIES):
            for term in query_terms(q):
                if term.match not in terms:
                    terms[term.match] = count(term.match)
            expression = build_fts_query(q)
            if expression:
                matched.append(count(expression))
    finally:
        conn.close()
    dfs = sorted(terms.values())
    p90 = statistics.quantiles(dfs, n=10)[-1]
    qp90 = statistics.quantiles(matched, n=10)[-1]
    rare = sum(1 for d in dfs if d < 0.01) / len(dfs)
    return [
        corpus.kind,
        f"{chunks:,}",
        f"{vocab:,}",
        len(dfs),
        f"{statistics.median(dfs):.2%}",
        f"{p90:.1%}",
        f"{rare:.0%}",
        f"{statistics.median(matched):.1%}",
        f"{qp90:.1%}",
    ]


def sqlite_latency(size: int, built: list[tuple[Corpus, Path]], rounds: int = LATENCY_ROUNDS) -> list[list[object]]:
    """p50/p90 of engine searches on each index (read-only, resident vectors, query vector
    precomputed), per-query median of `rounds` rounds; the corpora take turns."""
    from bench.bench_search import FixedQueryEmbedder, _scopes
    from bench.corpus_text import AREAS, TOPICS_PER_AREA, query_vector
    from bench.report import Stats, ms
    from bench.workspaces import Workspace
    from indexer.store import Store
    from search.engine import search
    from search.resident import ResidentVectors

    scopes = _scopes()
    opened = []
    for corpus, db in built:
        ws = Workspace(db.parent.parent, 0, 0)
        resident = ResidentVectors(db)
        resident.reload_in_background()
        if not resident.wait():
            raise RuntimeError(f"the vectors of {db} could not be loaded")
        qs = corpus.queries(QUERIES)
        embedder = FixedQueryEmbedder({q: query_vector(i, AREAS * TOPICS_PER_AREA) for i, q in enumerate(qs)})
        opened.append((corpus, Store.open(db, readonly=True), ws.config(), resident, qs, embedder))
    samples: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    try:
        for _ in range(rounds):
            for corpus, store, config, resident, qs, embedder in opened:
                for mode, scope_name in LATENCY_PLAN:
                    per = samples.setdefault((corpus.kind, mode, scope_name), {})
                    for q in qs:
                        started = time.perf_counter()
                        search(
                            store,
                            config,
                            q,
                            k=8,
                            mode=mode,
                            scope=scopes[scope_name],
                            embedder_factory=lambda e=embedder: e,
                            resident=resident,
                        )
                        per.setdefault(q, []).append(time.perf_counter() - started)
    finally:
        for _, store, *_ in opened:
            store.close()
    rows: list[list[object]] = []
    for (kind, mode, scope_name), per in samples.items():
        s = Stats.of([statistics.median(v) for v in per.values()])
        rows.append([f"{size:,}", kind, mode, scope_name, s.n, ms(s.median), ms(s.p90), ms(s.max)])
    return rows


def run(
    sizes: list[int],
    data: Path,
    dense_cache: Path | None,
    kinds: tuple[str, ...] = CORPUS_KINDS,
    with_latency: bool = False,
    rounds: int = LATENCY_ROUNDS,
    with_df: bool = True,
) -> str:
    realistic = corpus_of("realistic", data)
    rows: list[list[object]] = []
    latency_rows: list[list[object]] = []
    for size in sizes:
        built: list[tuple[Corpus, Path]] = []
        for kind in kinds:
            corpus = realistic if kind == "realistic" else corpus_of(kind)
            roots = [cache_root()] + ([dense_cache] if dense_cache and kind == "dense" else [])
            db = find_index(corpus, size, roots)
            if db is None:
                rows.append([kind, f"{size:,} (not built)", "", "", "", "", "", "", ""])
                continue
            eprint(f"  {kind} {size:,}: {db}")
            if with_df:
                rows.append(index_row(corpus, size, db))
            built.append((corpus, db))
        if with_latency and built:
            eprint(f"  SQLite latency at {size:,} ...")
            latency_rows += sqlite_latency(size, built, rounds)
    return "\n".join(
        [
            f"### The realistic corpus's generator (version {realistic.version})",
            "",
            generator_table(realistic.source),
            "",
            f"### Vocabulary and document frequency of the {QUERIES} benchmark queries' terms",
            "",
            md_table(
                [
                    "corpus",
                    "chunks",
                    "vocabulary (FTS terms)",
                    "query terms",
                    "term df p50",
                    "term df p90",
                    "terms in < 1 %",
                    "query (OR) p50",
                    "query (OR) p90",
                ],
                rows,
            ),
        ]
        + (
            [
                "",
                f"### SQLite latency side by side (long-lived process, k=8, per-query median of {rounds} "
                f"rounds, the corpora alternating; {load_average()})",
                "",
                md_table(["index", "corpus", "mode", "scope", "queries", "p50 ms", "p90 ms", "max ms"], latency_rows),
            ]
            if latency_rows
            else []
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated chunk counts")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="eval data the realistic words come from")
    parser.add_argument("--dense-cache", type=Path, help="another bench cache folder holding the dense indexes")
    parser.add_argument("--kinds", default=",".join(CORPUS_KINDS), help="comma-separated corpus kinds")
    parser.add_argument("--latency", action="store_true", help="also time SQLite search on each pair of indexes")
    parser.add_argument("--rounds", type=int, default=LATENCY_ROUNDS, help="latency rounds per corpus")
    parser.add_argument("--no-df", action="store_true", help="skip the document-frequency counts")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    kinds = tuple(args.kinds.split(","))
    text = run(
        [int(s) for s in args.sizes.split(",")],
        args.data,
        args.dense_cache,
        kinds,
        args.latency,
        args.rounds,
        not args.no_df,
    )
    emit(text, args.out)


if __name__ == "__main__":
    main()
