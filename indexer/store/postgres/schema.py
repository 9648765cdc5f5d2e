"""The PostgreSQL schema as named migration steps (`PG_MIGRATIONS`): each step's SQL, then
maybe a data step on the store, in one transaction; `meta.schema_version` counts the steps."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from psycopg import sql as pg_sql

from indexer.store.postgres.connection import OpenIndex
from indexer.store.postgres.tsvector import MAX_LEXEME_BYTES, lexical_row, stored_tag_keys
from indexer.store.postgres.vectors import rebuild_vector_index

log = logging.getLogger("notes_search.store")


MIGRATION_LOCK = 0x6E6F7465  # advisory lock id: two first syncs on several hosts migrate once

# autovacuum analyzes the lexical rows after this share of them changed (PostgreSQL's default
# is 0.1): the statistics above then follow the index within about a percent of its rows
LEXICAL_ANALYZE_SHARE = 0.01
# The lexical GIN indexes keep new entries in a pending list (fastupdate) until it outgrows
# gin_pending_list_limit or autovacuum merges it, and every keyword search reads the whole list
# once per index condition of each pass (a copy's leftover list doubled the median unscoped
# search): the end of a sync merges it, in bulk as a flush would.
LEXICAL_GIN_INDEXES = ("idx_chunks_fts_document", "idx_chunks_fts_impacts")


@dataclass(frozen=True, slots=True)
class PgMigration:
    """One schema step: `sql`, then `data` on the same store in the same transaction (applied
    whole or not at all); `meta.schema_version` counts the steps applied."""

    name: str
    sql: str
    data: Callable[[OpenIndex], None] | None = None


# text keys compare bytewise (COLLATE "C"), as SQLite's BINARY: the folder ranges of scopes and
# every listing's order depend on it
INITIAL_SQL = """
    CREATE EXTENSION IF NOT EXISTS vector;

    CREATE TABLE meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);

    CREATE TABLE sources (
      source_id    TEXT COLLATE "C" PRIMARY KEY,
      kind         TEXT NOT NULL CHECK (kind IN ('git', 'workspace')),
      indexed_rev  TEXT,
      last_sync_at TEXT,
      last_error   TEXT
    );

    CREATE TABLE files (
      source_id  TEXT COLLATE "C" NOT NULL REFERENCES sources(source_id) ON DELETE CASCADE,
      path       TEXT COLLATE "C" NOT NULL,
      title      TEXT,
      tags       TEXT,
      headings   TEXT,
      collection TEXT COLLATE "C",
      sha256     TEXT NOT NULL,
      size       BIGINT NOT NULL,
      mtime      DOUBLE PRECISION,
      updated_at DOUBLE PRECISION NOT NULL,
      indexed_at TEXT NOT NULL,
      PRIMARY KEY (source_id, path)
    );
    CREATE INDEX idx_files_collection ON files(collection) WHERE collection IS NOT NULL;

    CREATE TABLE chunks (
      id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      source_id    TEXT COLLATE "C" NOT NULL,
      path         TEXT COLLATE "C" NOT NULL,
      chunk_idx    INTEGER NOT NULL,
      breadcrumb   TEXT NOT NULL,
      text         TEXT NOT NULL,
      start_line   INTEGER NOT NULL,
      end_line     INTEGER NOT NULL,
      content_hash TEXT COLLATE "C" NOT NULL,
      embedded_at  TEXT,
      language     TEXT COLLATE "C" NOT NULL DEFAULT 'unknown',
      UNIQUE (source_id, path, chunk_idx),
      FOREIGN KEY (source_id, path) REFERENCES files(source_id, path) ON DELETE CASCADE
    );
    CREATE INDEX idx_chunks_pending ON chunks(id) WHERE embedded_at IS NULL;
    CREATE INDEX idx_chunks_hash ON chunks(content_hash);
    CREATE INDEX idx_chunks_path ON chunks(path);

    CREATE TABLE chunks_fts (
      id        BIGINT PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
      source_id TEXT COLLATE "C" NOT NULL,
      document  TSVECTOR NOT NULL,
      length    INTEGER NOT NULL  -- tokens of breadcrumb and text: bm25's document length
    );
    CREATE INDEX idx_chunks_fts_document ON chunks_fts USING gin(document);

    CREATE TABLE fts_stats (
      source_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sources(source_id) ON DELETE CASCADE,
      rows      BIGINT NOT NULL,
      tokens    BIGINT NOT NULL
    );

    CREATE FUNCTION fts_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO fts_stats(source_id, rows, tokens)
        SELECT source_id, count(*), sum(length) FROM added GROUP BY source_id
        ON CONFLICT (source_id) DO UPDATE
          SET rows = fts_stats.rows + excluded.rows, tokens = fts_stats.tokens + excluded.tokens;
      RETURN NULL;
    END $$;
    CREATE FUNCTION fts_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE fts_stats s SET rows = s.rows - r.n, tokens = s.tokens - r.t
        FROM (SELECT source_id, count(*) AS n, sum(length) AS t FROM removed GROUP BY source_id) r
        WHERE s.source_id = r.source_id;
      RETURN NULL;
    END $$;
    CREATE TRIGGER chunks_fts_added AFTER INSERT ON chunks_fts
      REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION fts_stats_added();
    CREATE TRIGGER chunks_fts_removed AFTER DELETE ON chunks_fts
      REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION fts_stats_removed();

    CREATE TABLE collections (
      source_id   TEXT COLLATE "C" NOT NULL REFERENCES sources(source_id) ON DELETE CASCADE,
      name        TEXT COLLATE "C" NOT NULL,
      folder      TEXT COLLATE "C" NOT NULL,
      description TEXT COLLATE "C" NOT NULL,
      tags        TEXT COLLATE "C" NOT NULL,
      PRIMARY KEY (source_id, name)
    );
"""


# a file's tags as `tag_key` compares them, one row each (files.tags keeps them as written)
FILE_TAGS_SQL = """
    CREATE TABLE file_tags (
      tag       TEXT COLLATE "C" NOT NULL,
      source_id TEXT COLLATE "C" NOT NULL,
      path      TEXT COLLATE "C" NOT NULL,
      PRIMARY KEY (tag, source_id, path),
      FOREIGN KEY (source_id, path) REFERENCES files(source_id, path) ON DELETE CASCADE
    );
    CREATE INDEX idx_file_tags_file ON file_tags(source_id, path);
    CREATE INDEX idx_files_updated ON files(updated_at);
"""


def _fill_file_tags(store: OpenIndex) -> None:
    """The tags of the files indexed before `file_tags` existed."""
    rows = store.conn.execute("SELECT source_id, path, tags FROM files WHERE tags IS NOT NULL AND tags <> '[]'")
    for source_id, path, tags in rows.fetchall():
        try:
            parsed = json.loads(str(tags))
        except ValueError:
            continue
        for key in stored_tag_keys(parsed):
            store.conn.execute(
                "INSERT INTO file_tags(tag, source_id, path) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (key, source_id, path),
            )


# the tsvectors kept in the table's own pages, uncompressed, up to a page's worth: keyword search
# reads each one once per phrase, and a compressed or out-of-line one is decompressed or fetched
# every time (ranking took far longer). Rows written from then on.
LEXICAL_INLINE_SQL = """
    ALTER TABLE chunks_fts ALTER COLUMN document SET STORAGE MAIN;
    ALTER TABLE chunks_fts SET (toast_tuple_target = 8160);
"""


# each lexical row's impact tiers (see IMPACT_TIERS); no default once filled: a row written
# without them would be invisible to unscoped keyword search
LEXICAL_IMPACTS_SQL = """
    ALTER TABLE chunks_fts ADD COLUMN impacts TSVECTOR NOT NULL DEFAULT '';
"""


IMPACTS_FILL_BATCH = 2_000


def _require_impacts(store: OpenIndex) -> None:
    """No default for new rows; the rows written before get their tiers in the next step
    (`_write_impacts`: a reader refuses the schema in between)."""
    store.conn.execute("ALTER TABLE chunks_fts ALTER COLUMN impacts DROP DEFAULT")


def _write_impacts(store: OpenIndex) -> None:
    """Every lexical row's impact tiers as `lexical_row` makes them today, then their index
    (built once after the rows, not kept up row by row)."""
    store.conn.execute("DROP INDEX IF EXISTS idx_chunks_fts_impacts")
    after = 0
    while True:
        rows = store.conn.execute(
            """SELECT c.id, c.breadcrumb, c.text FROM chunks c JOIN chunks_fts f ON f.id = c.id
               WHERE c.id > %s ORDER BY c.id LIMIT %s""",
            (after, IMPACTS_FILL_BATCH),
        ).fetchall()
        if not rows:
            break
        after = int(rows[-1][0])
        store.conn.execute(
            """UPDATE chunks_fts f SET impacts = u.impacts
               FROM unnest(%b::bigint[], %b::tsvector[]) AS u(id, impacts) WHERE f.id = u.id""",
            ([int(r[0]) for r in rows], [lexical_row(str(r[1]), str(r[2]))[2] for r in rows]),
        )
    store.conn.execute("CREATE INDEX idx_chunks_fts_impacts ON chunks_fts USING gin(impacts)")


# a scope's chunk ids from the path index alone (an index-only scan), not from the chunks' heap
# pages, which hold their texts
CHUNK_PATHS_COVERING_SQL = """
    CREATE INDEX IF NOT EXISTS idx_chunks_path_ids ON chunks(path) INCLUDE (id, source_id);
    DROP INDEX IF EXISTS idx_chunks_path;
"""


# each lexical row's folders (every ancestor of its file, and the file's own path) as lexemes
# of a second column of the document index: a folder scope becomes one more condition of the
# same index scan, which walks the folder's few entries and skips through the words' long
# posting lists, instead of reading every row of the folder to test the match on it. A column of its own, not lexemes in `document`:
# folders are the commonest "words" and would crowd real ones out of the planner's statistics
# the keyword search reads its document frequencies from. A path longer than a lexeme can be
# (MAX_LEXEME_BYTES) has no scope lexeme: its scopes are read as before. Writes send the lexemes
# (`scope_tsvector`); `path_scopes` makes the same in SQL for the rows written before.
LEXICAL_SCOPES_SQL = f"""
    CREATE OR REPLACE FUNCTION path_scopes(path TEXT) RETURNS TSVECTOR LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT array_to_tsvector(ARRAY(
        SELECT folder FROM (
          SELECT array_to_string(parts[1:n], '/') AS folder
          FROM (SELECT string_to_array(path, '/') AS parts) p, generate_series(1, cardinality(parts)) n) f
        WHERE folder <> '' AND octet_length(folder) <= {MAX_LEXEME_BYTES}))
    $$;
    ALTER TABLE chunks_fts ADD COLUMN IF NOT EXISTS scope TSVECTOR;
"""


SCOPES_BUILD_MEMORY = "512MB"


def _write_scopes(store: OpenIndex) -> None:
    """Every lexical row's folders, then the document index again over (document, scope) and
    the impact index (rewriting each row would otherwise add every one of its words to both)."""
    for name in LEXICAL_GIN_INDEXES:
        store.conn.execute(f"DROP INDEX IF EXISTS {name}")
    store.conn.execute("UPDATE chunks_fts f SET scope = path_scopes(c.path) FROM chunks c WHERE c.id = f.id")
    store.conn.execute("ALTER TABLE chunks_fts ALTER COLUMN scope SET NOT NULL")
    store.conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (SCOPES_BUILD_MEMORY,))
    store.conn.execute("CREATE INDEX idx_chunks_fts_document ON chunks_fts USING gin(document, scope)")
    store.conn.execute("CREATE INDEX idx_chunks_fts_impacts ON chunks_fts USING gin(impacts)")


# Every lexeme a lexical row has held, for keyword search to name the lexemes a query's prefix
# stands for: GIN finds a prefix by collecting every matching entry's rows into a bitmap first,
# an exact lexeme by walking its posting list, so a prefix that stands for one lexeme is looked
# up as that lexeme (a few times faster, more so for several ANDed). Complete by construction: a write commits its rows'
# lexemes here before the rows themselves can commit (`_add_lexemes`); nothing is deleted, so a
# lexeme no row holds any more only keeps its prefixes' lookup as it was. `words_listed` has no
# default once filled: a writer of an earlier version, which knows nothing of `lexemes`, is
# refused rather than leaving its words out of it (the step holds the lexical rows meanwhile:
# keyword searches wait for it, half a minute at a million chunks).
LEXEMES_SQL = """
    CREATE TABLE IF NOT EXISTS lexemes (lexeme TEXT COLLATE "C" PRIMARY KEY);
    ALTER TABLE chunks_fts ADD COLUMN IF NOT EXISTS words_listed BOOLEAN NOT NULL DEFAULT TRUE;
"""


def _fill_lexemes(store: OpenIndex) -> None:
    """The lexemes of the rows written before `lexemes` existed; no row without them from now on."""
    store.conn.execute(
        """INSERT INTO lexemes(lexeme) SELECT DISTINCT unnest(tsvector_to_array(document)) FROM chunks_fts
           ON CONFLICT DO NOTHING"""
    )
    store.conn.execute("ALTER TABLE chunks_fts ALTER COLUMN words_listed DROP DEFAULT")


# as SQLite's step of the same name (`indexer.store.schema`), repeatable like the steps above
FRONT_MATTER_PROBLEM_SQL = """
    ALTER TABLE files ADD COLUMN IF NOT EXISTS front_matter_problem TEXT;
    CREATE INDEX IF NOT EXISTS idx_files_front_matter_problem ON files(source_id, path)
        WHERE front_matter_problem IS NOT NULL;
"""


def _vectors_by_window(store: OpenIndex) -> None:
    """The vector table an earlier version made (one row per chunk, keyed by its id) in the shape
    `reset_vectors` makes it now (a row per window, keyed by chunk id and window): each row is
    its chunk's first and only window. An index without a space has no table yet."""
    shape = store.conn.execute(
        """SELECT (SELECT conname FROM pg_constraint WHERE conrelid = to_regclass('chunk_vectors') AND contype = 'p'),
                  EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('chunk_vectors')
                          AND attname = 'window_idx' AND NOT attisdropped)"""
    ).fetchone()
    if shape is None or shape[0] is None or shape[1]:
        return
    store.conn.execute("ALTER TABLE chunk_vectors ADD COLUMN window_idx SMALLINT NOT NULL DEFAULT 0")
    store.conn.execute(pg_sql.SQL("ALTER TABLE chunk_vectors DROP CONSTRAINT {}").format(pg_sql.Identifier(shape[0])))
    store.conn.execute("ALTER TABLE chunk_vectors ADD CONSTRAINT chunk_vectors_pkey PRIMARY KEY (id, window_idx)")


# as SQLite's table of the same name (`indexer.store.schema`)
WINDOW_LINES_SQL = """
    CREATE TABLE IF NOT EXISTS window_lines (
      content_hash TEXT COLLATE "C" PRIMARY KEY,
      lines        TEXT NOT NULL
    );
"""


PG_MIGRATIONS: tuple[PgMigration, ...] = (
    PgMigration("initial_schema", INITIAL_SQL),
    PgMigration("file_tags_and_recency", FILE_TAGS_SQL, data=_fill_file_tags),
    PgMigration("lexical_rows_inline", LEXICAL_INLINE_SQL),
    PgMigration("lexical_impacts", LEXICAL_IMPACTS_SQL, data=_require_impacts),
    # rows written before prefixes shared by several lexemes had summed tiers get them
    PgMigration("shared_prefix_impacts", "SELECT 1", data=_write_impacts),
    # indexes built with pgvector's default ef_construction miss part of a clustered index
    PgMigration("hnsw_ef_construction_128", "SELECT 1", data=rebuild_vector_index),
    PgMigration("chunk_paths_covering", CHUNK_PATHS_COVERING_SQL),
    PgMigration(
        "lexical_statistics_follow_writes",
        f"ALTER TABLE chunks_fts SET (autovacuum_analyze_scale_factor = {LEXICAL_ANALYZE_SHARE})",
    ),
    PgMigration("lexical_scopes", LEXICAL_SCOPES_SQL, data=_write_scopes),
    # the graph of float vectors, twice the size of one of their half-precision copies
    PgMigration("hnsw_half_precision", "SELECT 1", data=rebuild_vector_index),
    PgMigration("lexemes", LEXEMES_SQL, data=_fill_lexemes),
    PgMigration("front_matter_problems", FRONT_MATTER_PROBLEM_SQL),
    PgMigration("vectors_by_window", "SELECT 1", data=_vectors_by_window),
    PgMigration("window_lines", WINDOW_LINES_SQL),
)


PG_SCHEMA_VERSION = len(PG_MIGRATIONS)
