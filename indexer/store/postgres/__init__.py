"""The PostgreSQL backend of the index (pgvector for vectors): every PostgreSQL statement the
store runs, its schema and migrations included.

The same tables and columns as the SQLite store: `meta`, `sources`, `files`, `chunks`,
`collections`, `chunks_fts` (one tsvector per chunk, GIN-indexed, with its token count and
its impact tiers, a second GIN-indexed tsvector that bounds unscoped keyword search) and
`chunk_vectors` (`vector(dims)`, a row per window the model read of a chunk, keyed by chunk id
and window; created by `reset_vectors`, which knows the dimensions; an HNSW cosine index on it
once it holds HNSW_MIN_VECTORS). `fts_stats` holds per-source row and
token totals for BM25, kept by statement triggers on `chunks_fts`: per source, so sync workers
of different sources never wait on one counter row. `lexemes` lists every lexeme a lexical row
has held (see schema.LEXEMES_SQL).

The rooms: `connection` (the per-process pool, error wording, the URL as shown), `schema`
(tables and named migrations), `tsvector` (text folded as SQLite's tokenizer folds it, and
tsvectors sent in binary), `tsquery` (a query's phrases as tsqueries), `keyword`
(`KeywordSearch`: FTS5's bm25 over tsvectors, with impact tiers, sampling and the counts it
keeps), `vectors` (pgvector, the HNSW index and its bulk builds) and `store` (`PostgresStore`,
on the shared `indexer.store.core`).

Readers never wait for writers (MVCC); `snapshot()` is a REPEATABLE READ read-only
transaction. Connections are pooled per process, so a long-lived server pays no connection per
query.
"""

from indexer.store.postgres.connection import connect_error, describe, discard_pool
from indexer.store.postgres.keyword import forget_phrase_counts
from indexer.store.postgres.schema import PG_MIGRATIONS, PG_SCHEMA_VERSION
from indexer.store.postgres.store import PostgresStore
from indexer.store.postgres.tsvector import MAX_LEXEME_BYTES, lexical_row

__all__ = [
    "MAX_LEXEME_BYTES",
    "PG_MIGRATIONS",
    "PG_SCHEMA_VERSION",
    "PostgresStore",
    "connect_error",
    "describe",
    "discard_pool",
    "forget_phrase_counts",
    "lexical_row",
]
