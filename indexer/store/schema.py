"""The index schema as named migration steps, each with its SQL and its data change together.

`PRAGMA user_version` counts the steps applied: step i upgrades a database from version i to
i + 1, so an index written by any earlier version migrates by running the steps it lacks, in
order, each in its own transaction (`Store._migrate`). Append new steps; never edit or reorder
a released one, since indexes on disk already carry its number.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import apsw

from indexer.store.rows import tag_key

# meta key "<last chunk id written before chunks had a language>:<last id detected so far>":
# present while the chunks of an index older than the language column still wait for detection
LANGUAGE_BACKFILL_KEY = "language_backfill"
# meta key set in the target of `migrate` from before its first write until the copy is verified
# (an empty value after): a copy killed halfway says so, and a re-run may replace it unasked
COPY_UNFINISHED_KEY = "copy_unfinished"


def is_unfinished_copy(meta: dict[str, str]) -> bool:
    """Whether an index is a copy that `migrate` began and did not verify (killed, or failed)."""
    return bool(meta.get(COPY_UNFINISHED_KEY))


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: `sql` (a script), then `data` on the same connection in the same
    transaction, so a step is applied whole or not at all."""

    name: str
    sql: str
    data: Callable[[apsw.Connection], None] | None = None


def set_meta(conn: apsw.Connection, values: dict[str, str]) -> None:
    """Insert or replace `meta` entries (the migration steps and the store share it)."""
    for key, value in values.items():
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )


INITIAL_SQL = """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

    CREATE TABLE sources (
      source_id    TEXT PRIMARY KEY,
      kind         TEXT NOT NULL CHECK (kind IN ('git', 'workspace')),
      indexed_rev  TEXT,
      last_sync_at TEXT,
      last_error   TEXT
    );

    CREATE TABLE files (
      source_id  TEXT NOT NULL REFERENCES sources(source_id) ON DELETE CASCADE,
      path       TEXT NOT NULL,
      title      TEXT,
      tags       TEXT,          -- JSON array
      headings   TEXT,          -- JSON array
      collection TEXT,
      sha256     TEXT NOT NULL,
      size       INTEGER NOT NULL,
      mtime      REAL,          -- workspace stat pre-filter
      updated_at REAL NOT NULL, -- recency: mtime, or commit time of the file's last change
      indexed_at TEXT NOT NULL,
      PRIMARY KEY (source_id, path)
    );
    CREATE INDEX idx_files_collection ON files(collection) WHERE collection IS NOT NULL;

    CREATE TABLE chunks (
      id           INTEGER PRIMARY KEY AUTOINCREMENT,
      source_id    TEXT NOT NULL,
      path         TEXT NOT NULL,
      chunk_idx    INTEGER NOT NULL,
      breadcrumb   TEXT NOT NULL,
      text         TEXT NOT NULL,
      start_line   INTEGER NOT NULL,
      end_line     INTEGER NOT NULL,
      content_hash TEXT NOT NULL,  -- sha256 of the embedded text: identical text reuses its vector
      embedded_at  TEXT,           -- NULL = waiting for a vector (degraded mode)
      UNIQUE (source_id, path, chunk_idx),
      FOREIGN KEY (source_id, path) REFERENCES files(source_id, path) ON DELETE CASCADE
    );
    CREATE INDEX idx_chunks_pending ON chunks(id) WHERE embedded_at IS NULL;
    CREATE INDEX idx_chunks_hash ON chunks(content_hash);

    CREATE VIRTUAL TABLE chunks_fts USING fts5(
      breadcrumb, text,
      content='chunks', content_rowid='id',
      tokenize='unicode61 remove_diacritics 2'
    );

    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
      INSERT INTO chunks_fts(rowid, breadcrumb, text) VALUES (new.id, new.breadcrumb, new.text);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
      INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, text)
        VALUES ('delete', old.id, old.breadcrumb, old.text);
    END;
    -- only text changes touch FTS: marking a chunk embedded must not re-index it
    CREATE TRIGGER chunks_au AFTER UPDATE OF breadcrumb, text ON chunks BEGIN
      INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, text)
        VALUES ('delete', old.id, old.breadcrumb, old.text);
      INSERT INTO chunks_fts(rowid, breadcrumb, text) VALUES (new.id, new.breadcrumb, new.text);
    END;
"""


def _fts_rank_weights(conn: apsw.Connection) -> None:
    """The same weights as the store's bm25() call, for ad-hoc `ORDER BY rank` in the sqlite3 shell."""
    conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('rank', 'bm25(2.0, 1.0)')")


COLLECTIONS_SQL = """
    CREATE TABLE collections (
      source_id   TEXT NOT NULL REFERENCES sources(source_id) ON DELETE CASCADE,
      name        TEXT NOT NULL,
      folder      TEXT NOT NULL,
      description TEXT NOT NULL,
      tags        TEXT NOT NULL,  -- JSON array
      PRIMARY KEY (source_id, name)
    );
"""

CHUNK_VECTORS_SQL = """
    CREATE INDEX idx_chunks_path ON chunks(path);
    CREATE TABLE chunk_vectors (
      id        INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
      embedding BLOB NOT NULL  -- float32, L2-normalised, as in vec_chunks
    );
"""


def _copy_vectors_from_vec0(conn: apsw.Connection) -> None:
    """Fill `chunk_vectors` from the vectors an older index kept in vec0 only (vec_chunks exists
    once an embedding space was chosen; a fresh index has none yet)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_chunks'").fetchone() is None:
        return
    conn.execute(
        "INSERT INTO chunk_vectors(id, embedding) SELECT v.rowid, v.embedding FROM vec_chunks v"
        " JOIN chunks c ON c.id = v.rowid"
    )


# the natural language of a chunk's prose (ISO 639-1 code or 'unknown'); adding a column with a
# constant default rewrites no row
CHUNK_LANGUAGE_SQL = """
    ALTER TABLE chunks ADD COLUMN language TEXT NOT NULL DEFAULT 'unknown';
"""


def _start_language_backfill(conn: apsw.Connection) -> None:
    """Chunks that exist now predate language detection: record the last of them, so the next
    sync detects their languages in resumable batches (indexer.sync.backfill_languages)."""
    row = conn.execute("SELECT MAX(id) FROM chunks").fetchone()
    upto = row[0] if row is not None else None
    if upto is not None:
        set_meta(conn, {LANGUAGE_BACKFILL_KEY: f"{upto}:0"})


# Filters by tag and by time. A file's tags, one row each, as `tag_key` compares them (the JSON
# in files.tags keeps them as written, for display): a tag filter is an index lookup, and
# case-folding stays Unicode-correct, which SQL's lower() is not. The updated_at index serves a
# time filter that keeps few files.
FILE_TAGS_SQL = """
    CREATE TABLE file_tags (
      tag       TEXT NOT NULL,  -- tag_key(): NFC, case-folded, no leading '#'
      source_id TEXT NOT NULL,
      path      TEXT NOT NULL,
      PRIMARY KEY (tag, source_id, path),
      FOREIGN KEY (source_id, path) REFERENCES files(source_id, path) ON DELETE CASCADE
    ) WITHOUT ROWID;
    CREATE INDEX idx_file_tags_file ON file_tags(source_id, path);
    CREATE INDEX idx_files_updated ON files(updated_at);
"""


# a nested tag's ancestors are stored for tags this short and this deep: a tag of 5,000 levels
# (10 KB of front matter) made 5,000 rows of up to 10 KB each, a 65 MB index
NESTED_TAG_CHARS = 200
NESTED_TAG_LEVELS = 10


def file_tag_keys(tags: object) -> list[str]:
    """The distinct non-empty `tag_key`s of a tag list (what `file_tags` holds for a file), each
    nested tag with the tags it is nested in: `project/alpha` is also `project`, so that
    `--tag project` finds it, as Obsidian's tag search does."""
    if not isinstance(tags, (list, tuple)):
        return []
    keys: dict[str, None] = {}
    for tag in tags:
        key = tag_key(str(tag))
        parts = key.split("/")[:NESTED_TAG_LEVELS] if len(key) <= NESTED_TAG_CHARS else []
        keys.update(dict.fromkeys(prefix for n in range(1, len(parts)) if (prefix := "/".join(parts[:n]).rstrip())))
        if key:
            keys[key] = None
    return list(keys)


def _fill_file_tags(conn: apsw.Connection) -> None:
    """The tags of the files indexed before `file_tags` existed."""
    rows = conn.execute("SELECT source_id, path, tags FROM files WHERE tags IS NOT NULL AND tags != '[]'").fetchall()
    for source_id, path, tags in rows:
        try:
            parsed = json.loads(str(tags))
        except ValueError:
            continue
        conn.executemany(
            "INSERT OR IGNORE INTO file_tags(tag, source_id, path) VALUES (?, ?, ?)",
            [(key, source_id, path) for key in file_tag_keys(parsed)],
        )


# what is wrong with a file's front matter (broken YAML, a key written twice), NULL when nothing
# is: `status` lists them until the file is mended; files indexed before have none recorded
# until they are chunked again (the chunker version that reads broken front matter re-chunks all)
FRONT_MATTER_PROBLEM_SQL = """
    ALTER TABLE files ADD COLUMN front_matter_problem TEXT;
    CREATE INDEX idx_files_front_matter_problem ON files(source_id, path) WHERE front_matter_problem IS NOT NULL;
"""


# A long chunk's windows after its first (indexer.windows): window_idx 1, 2, ... of chunk_id; the
# first is the chunk's own vector (chunk_vectors). `vec_windows` (vec0, rowid = id) holds the same
# vectors for the KNN scan; it is made with vec_chunks when an embedding space is chosen.
WINDOW_VECTORS_SQL = """
    CREATE TABLE window_vectors (
      id         INTEGER PRIMARY KEY,
      chunk_id   INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
      window_idx INTEGER NOT NULL,
      embedding  BLOB NOT NULL,  -- float32, L2-normalised, as in vec_windows
      UNIQUE (chunk_id, window_idx)
    );
"""

# Where each window of a long chunk begins (its own lines, past those it repeats), by the text's
# content hash as the windows are: a hit found by meaning points there without cutting the text
# again at query time (the local model's tokenizer takes ~0.1 ms a line). Lines of windows 2, 3,
# ..., comma-separated; rows whose text no chunk holds any more are pruned after a sync.
WINDOW_LINES_SQL = """
    CREATE TABLE window_lines (
      content_hash TEXT PRIMARY KEY,
      lines        TEXT NOT NULL
    ) WITHOUT ROWID;
"""


MIGRATIONS: tuple[Migration, ...] = (
    Migration("initial_schema", INITIAL_SQL, data=_fts_rank_weights),
    Migration("collections", COLLECTIONS_SQL),
    Migration("chunk_vectors", CHUNK_VECTORS_SQL, data=_copy_vectors_from_vec0),
    Migration("chunk_language", CHUNK_LANGUAGE_SQL, data=_start_language_backfill),
    Migration("file_tags_and_recency", FILE_TAGS_SQL, data=_fill_file_tags),
    Migration("front_matter_problems", FRONT_MATTER_PROBLEM_SQL),
    Migration("window_vectors", WINDOW_VECTORS_SQL),
    Migration("window_lines", WINDOW_LINES_SQL),
)

SCHEMA_VERSION = len(MIGRATIONS)
