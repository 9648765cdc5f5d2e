"""The PostgreSQL backend of the index (pgvector for vectors): every PostgreSQL statement the
store runs, its schema and migrations included.

The same tables and columns as the SQLite store: `meta`, `sources`, `files`, `chunks`,
`collections`, `chunks_fts` (one tsvector per chunk, GIN-indexed, with its token count and
its impact tiers, a second GIN-indexed tsvector that bounds unscoped keyword search) and
`chunk_vectors` (`vector(dims)`, created by `reset_vectors`, which knows the dimensions; an
HNSW cosine index on it once it holds HNSW_MIN_VECTORS). `fts_stats` holds per-source row and token totals for BM25, kept by
statement triggers on `chunks_fts`: per source, so sync workers of different sources never
wait on one counter row. `lexemes` lists every lexeme a lexical row has held (see LEXEMES_SQL).

Text is folded by SQLite's own unicode61 tokenizer (remove_diacritics 2, through apsw) and the
tsvector is built here, position by position: PostgreSQL's parser and dictionaries would split
and fold differently (and pgvector's bundled servers have no `unaccent`), so both backends match
the same words. Lexical scores are FTS5's bm25 computed in SQL from the same statistics
(term frequencies from `ts_rank_cd` with one position per hit, weights breadcrumb 2, text 1):
lower is better, as in SQLite.

Readers never wait for writers (MVCC); `snapshot()` is a REPEATABLE READ read-only
transaction. Connections are pooled per process, so a long-lived server pays no connection per
query.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import os
import re
import selectors
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql
from psycopg.adapt import Dumper
from psycopg.pq import Format, TransactionStatus

from indexer.errors import StoreError
from indexer.model import FileVersion, ParsedDocument
from indexer.redaction import PERCENT_ENCODED, describe_url, password_needs_encoding, redact
from indexer.store.core import POSTGRES, StoreCore, content_hash, no_nul, utc_now
from indexer.store.errormap import wrap_public_methods
from indexer.store.rows import (
    ChunkRow,
    RankedChunk,
    SearchScope,
    ServerMemory,
    VectorMatrix,
    VectorPage,
    tag_key,
)
from indexer.store.schema import LANGUAGE_BACKFILL_KEY, file_tag_keys

if TYPE_CHECKING:  # numpy is imported where vectors are touched, keeping lexical queries light
    import numpy as np

log = logging.getLogger("notes_search.store")

URL_SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_S = 10
POOL_SIZE = 4  # idle connections kept per URL and mode: a server's concurrent readers reuse them
MIGRATION_LOCK = 0x6E6F7465  # advisory lock id: two first syncs on several hosts migrate once
HNSW_BUILD_LOCK = 0x6E6F7466  # and build the vector index once
HNSW_MIN_VECTORS = 10_000  # below this an exact scan answers unscoped KNN (see _index_vectors_once_many)
# The HNSW graph: HNSW_M links per vector (pgvector's default), each linked in through a
# candidate list of ef_construction. pgvector's default 64 leaves part of a large clustered index
# badly linked: some vectors are never reached, however long the search's list (at the 1M
# bench's topic density, 200k vectors of 100 topics: recall@10 0.975, worst query 0.7, the same at
# ef_search 400 and 1000, and 27 of 2,000 vectors not found even as their own query); 128 found
# every exact top 10 there (1 vector of 2,000 not found). On the realistic 1M bench recall@10
# went from 0.936 (worst 0.7) to 0.996 (worst 0.9); m = 32 was no better and built 2x slower.
# Below HNSW_WIDE_FROM vectors 64 already finds every exact top 10 (recall 1.000 at 100k) and
# builds in half the time (20k vectors: 5.8-6.9 s against 9.9-19 s), which is most of a first
# sync's store writes; an index built small is built again once it has grown past it.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128
HNSW_EF_CONSTRUCTION_SMALL = 64
HNSW_WIDE_FROM = 100_000


def hnsw_options(vectors: int) -> tuple[str, str]:
    """The graph's parameters for an index over `vectors`, as pg_class.reloptions lists them."""
    ef_construction = HNSW_EF_CONSTRUCTION if vectors >= HNSW_WIDE_FROM else HNSW_EF_CONSTRUCTION_SMALL
    return (f"m={HNSW_M}", f"ef_construction={ef_construction}")


def hnsw_graph(reloptions: Sequence[str] | None) -> tuple[str, str]:
    """An HNSW index's graph parameters from its reloptions, pgvector's defaults filled in (an
    index built without options has none listed)."""
    listed = dict(option.split("=", 1) for option in reloptions or ())
    return (f"m={listed.get('m', '16')}", f"ef_construction={listed.get('ef_construction', '64')}")


# The graph holds half-precision copies of the vectors (`halfvec`), the table the floats: at 1M
# chunks of 384 dimensions the index is 1.12 GB instead of 1.95, recall@10 0.986 against 0.984,
# and hybrid search on a 4 GB buffer pool, which the keyword and vector halves share, 69 ms p50
# instead of 111. The distances shown, and the order of the hits found, come from the floats.
# pgvector indexes at most 4,000 dimensions of halfvec (2,000 of vector: text-embedding-3-large
# has 3,072); a wider space is scanned exactly.
HNSW_HALFVEC_MAX_DIMS = 4_000
HNSW_OPERATORS = "halfvec_cosine_ops"


def hnsw_key(dims: int) -> str | None:
    """What the HNSW index orders by for vectors of `dims` (None: too wide for any)."""
    return f"(embedding::halfvec({int(dims)}))" if dims <= HNSW_HALFVEC_MAX_DIMS else None


def hnsw_index_sql(name: str, vectors: int, dims: int) -> str | None:
    key = hnsw_key(dims)
    if key is None:
        return None
    return (
        f"CREATE INDEX IF NOT EXISTS {name} ON chunk_vectors USING hnsw ({key} {HNSW_OPERATORS})"
        f" WITH ({', '.join(hnsw_options(vectors))})"
    )


# HNSW candidate list: at least this, and four times k (pgvector's cap is 1000), growing with
# the index from EF_GROWS_FROM vectors to the cap at EF_GROWS_TO. On clustered vectors a short
# list can settle in the wrong cluster entirely (recall 0 for that query): at 300k chunks 64
# gave recall@10 0.918, 200 gave 0.946, 400 gave 0.986, for ~2 ms more a query; at 1M chunks
# (ef_construction 128) 100 gave 0.836 and 200 0.934 (a query at 0.0 each), 400 gave 0.994,
# 1000 gave 0.996 (worst 0.9), all in 10-13 ms
EF_SEARCH_MIN = 400
EF_SEARCH_PER_RESULT = 4
EF_SEARCH_MAX = 1000
EF_GROWS_FROM = 300_000
EF_GROWS_TO = 1_000_000
MAX_POSITION = 16383  # tsvector positions above this collapse into it
MAX_POSITIONS_PER_LEXEME = 256  # tsvector keeps no more per lexeme
MAX_LEXEME_BYTES = 2046  # a longer token cannot be a lexeme: it is not indexed (nor found)
BM25_K1 = 1.2
BM25_B = 0.75
# ts_rank_cd weights {D, C, B, A}: a cover of one lexeme scores its weight, so rank / 0.5 counts
# the hits of a phrase, a breadcrumb hit (weight A) twice, as bm25(chunks_fts, 2.0, 1.0) does
RANK_WEIGHTS = "{0.5, 0.5, 0.5, 1.0}"
EMBED_TEXT_SQL = "c.breadcrumb || chr(10) || chr(10) || c.text"
# which state of the lexical rows the statistics describe: the statement triggers rewrite a
# source's fts_stats row in every transaction that writes its lexical rows, so the row versions'
# xmin (the writing transaction) change with any write, even one that leaves the totals equal
LEXICAL_VERSION_SQL = (
    "COALESCE(string_agg(fts_stats.source_id || ':' || fts_stats.xmin::text, ',' ORDER BY fts_stats.source_id), '')"
)
PHRASE_HITS_KEPT = 10_000
# A sync's write transactions commit without waiting for the WAL flush: a server or machine
# crash may lose the last ones (never part of one: each is lost whole, and the next sync writes
# those files or embeds those chunks again), as SQLite's WAL with synchronous=NORMAL may; a
# killed worker loses nothing it committed. Any synchronous commit (marking a source synced,
# building the vector index) flushes every earlier one.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"
# Impact tiers: each chunk also keeps, for every lexeme whose bm25 saturation there reaches
# IMPACT_TIERS[-1], one word naming the highest tier it reaches (`impacts`, GIN-indexed).
# Unscoped keyword search scores the chunks of the top tiers first: a chunk outside them scores
# at most sum(idf) * tier floor (times avgdl / IMPACT_REFERENCE_LENGTH when the index's chunks
# are longer on average), so once the limit-th best score reaches that bound the top is
# decided without reading the other matches (on the 100k-chunk bench a one-word query matching
# 20-50 % of the chunks scores a few hundred). The saturation is taken at a fixed reference
# length, longer than typical chunks, so that the bound is rarely widened; a prefix several of
# a chunk's words share has a tier of its own, for their summed frequency (see impact_words).
IMPACT_TIERS = (2.0, 1.95, 1.9, 1.85, 1.8, 1.75, 1.7, 1.6, 1.5, 1.4)
IMPACT_LABELS = "abcdefghij"
IMPACT_REFERENCE_LENGTH = 256
IMPACT_STEPS = 4  # tier passes (each IMPACT_STEP tiers deeper while too few chunks are found) before the full scan
IMPACT_STEP = 3
SHARED_PREFIX_MIN = 3  # a shorter prefix in a query has no summed tiers: the full scan answers it
EVERY_PHRASE_MAX = 4  # queries of 2..4 phrases also take chunks holding all of them (see _tiered_search),
EVERY_MAX_ROWS = 3_000  # all such chunks when the sample says they are at most this many
# Below this many lexical rows every match is scored (cheap) with exact document frequencies;
# above, a phrase's document frequency is estimated from a sample of about SAMPLED_ROWS rows
# (counted exactly when the sample holds fewer than SAMPLE_MIN_HITS of its chunks: rare
# phrases, whose idf weighs most, are cheap to count through the GIN index), and a query whose
# phrases match fewer than FULL_SCAN_MAX_MATCHES chunks is scored whole.
TIERED_MIN_ROWS = 20_000
SAMPLED_ROWS = 2_000
SAMPLE_MIN_HITS = 20
FULL_SCAN_MAX_MATCHES = 2_000
# A one-word phrase (or prefix) whose lexemes the planner's statistics list among the column's
# most common elements takes its document frequency from there: ANALYZE's sample (30,000 rows at
# the default target) is 15x the keyword search's, its frequencies are read once per ANALYZE,
# and the query needs no sample at all (at 100k chunks the sample was 3-7 ms of a fresh query).
# A prefix's chunks are those holding any of its listed lexemes, taken as independent. Rows
# written since that ANALYZE move a frequency by at most one each: while they exceed
# STATS_DRIFT_SHARE of the phrase's estimate, the sample answers as before. LEXEME_STATISTICS off
# leaves every phrase to the sample and the counts (exactness checks).
LEXEME_STATISTICS = True
STATS_DRIFT_SHARE = 0.25
# how many of a query's chunks hold every one of its phrases is estimated only to choose a pass
# (EVERY_MAX_ROWS), never for a score: alone it takes a quarter of the sample (a subset of the
# same pages: SYSTEM sampling keeps a page by a hash of its number under the share), 0.4 against
# 2.6 ms at 100k chunks
CONJUNCTION_SAMPLED_ROWS = 500
# autovacuum analyzes the lexical rows after this share of them changed (PostgreSQL's default
# is 0.1): the statistics above then follow the index within about a percent of its rows
LEXICAL_ANALYZE_SHARE = 0.01
# The pass that settles a top whose floor is known (see _settling_pass) looks up at most this
# many phrase sets (each one a GIN scan: 20 sets of three common prefixes cost about as much as
# scoring every match), and only when the planner expects it to read under this share of every
# match (scoring the rows it reads costs more than one scan's: at 100k chunks a settling pass
# over ~44k of ~71k matches took longer than the scan)
SETTLING_MAX_SETS = 16
SETTLING_MAX_SHARE = 0.4
# A settling pass's candidate set is counted only while the planner expects at most the larger
# of COUNTED_MAX_ESTIMATE rows and COUNTED_MAX_SHARE of the index's (it expects 20-350x too many
# of an impact tsquery's prefix words, so most such counts are small); past it, its estimate
# stands. Counting a deep tier of common prefixes builds the whole bitmap of their impact words:
# on the dense 100k, 0.2-0.25 s a count and p90 0.7 s a query (the scan: 70 ms). The 50 bench
# queries' unscoped keyword calls, summed, counting always -> gated: dense 100k 6.8 -> 2.0 s,
# realistic 100k 1.17 -> 1.31 s, realistic 1M 7.11 -> 7.08 s (with 10,000 alone there: 10.8 s).
COUNTED_MAX_ESTIMATE = 10_000
COUNTED_MAX_SHARE = 0.1
# A scoped keyword search reads either the scope's rows, the match tested on each (~1.4 us a
# row at 200k chunks, its ids sorted so that neighbours share one descent of the key), or the
# matches through the document index, the scope testing each (2.5-8 us a match: their heap
# pages are scattered and mostly outside shared buffers). The matches lead when the phrases'
# summed document frequencies (at least the matches' count) are under SCOPE_MATCH_SHARE of the
# scope's rows and every phrase is one word (a phrase of several words reads, and rechecks,
# every chunk holding all of them: at 200k "10 5 122" had 98 matches but 80 us of reads per
# match). A scope of more than SCOPE_IDS_MAX chunks is left to the planner's join (an array of
# its ids would hide its size and cost memory).
SCOPE_MATCH_SHARE = 0.5
SCOPE_IDS_MAX = 100_000
# A folder's matches come from one scan of the document index, which reads every posting of its
# phrases over the whole index (and the folder lexeme's) before the folder narrows them; the
# folder's own rows, each testing the match, cost about FOLDER_ROW_POSTINGS postings a row. At 1M
# chunks, a folder of 10k (1 %): the scan took 0.2-0.4 us a posting (320k postings: 79 ms), the
# rows 12-13 ms plus the ranking both do. The rows lead when the phrases' summed document
# frequencies exceed FOLDER_ROW_POSTINGS times the folder's rows (the planner's estimate of its
# lexeme), which is only asked once the postings reach FOLDER_ROW_POSTINGS * FOLDER_LEAD_MIN_ROWS;
# then they also replace a phrase's tier passes, whose lowest tiers read nearly every posting
# of the phrase too (a host name at 1M: 40-60 ms of passes).
FOLDER_ROW_POSTINGS = 5
FOLDER_LEAD_MIN_ROWS = 1_000
# The lexical GIN indexes keep new entries in a pending list (fastupdate) until it outgrows
# gin_pending_list_limit (4 MB by default) or autovacuum merges it, and every keyword search
# reads the whole list once per index condition of each pass. At 100k chunks the list a copy
# left behind (2 MB and 0.8 MB) doubled the median unscoped fts_search (51-62 against 33 ms, the
# same queries and load). The end of a sync merges it, in bulk as a flush would, so the
# searches between syncs read none of it.
# what searches read, with their indexes and TOAST: the lexical rows, the vectors and their
# HNSW graph, the chunks shown, the files and tags that scopes and filters test, the words
# prefixes begin
SEARCHED_TABLES = ("chunks_fts", "chunk_vectors", "chunks", "files", "file_tags", "lexemes")
LEXICAL_GIN_INDEXES = ("idx_chunks_fts_document", "idx_chunks_fts_impacts")


def is_postgres_url(location: object) -> bool:
    return isinstance(location, str) and location.startswith(URL_SCHEMES)


def describe(url: str) -> str:
    """The URL without its password, for messages and `status` (see indexer.redaction)."""
    return describe_url(url)


# ---- text folding: SQLite's tokenizer, so both backends index and match the same words ------

_tokenizer_lock = threading.Lock()
_tokenizer: Any = None


def _fts5_tokenizer() -> Any:
    global _tokenizer
    with _tokenizer_lock:
        if _tokenizer is None:
            import apsw

            conn = apsw.Connection(":memory:")
            _tokenizer = (conn, conn.fts5_tokenizer("unicode61", ["remove_diacritics", "2"]))
        return _tokenizer[1]


def fold_tokens(text: str, query: bool = False) -> list[str]:
    """The tokens unicode61 (remove_diacritics 2) makes of `text`: lowercased, accents removed,
    runs of letters and digits."""
    import apsw

    flags = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
    tokens: list[str] = _fts5_tokenizer()(
        text.encode("utf-8", "surrogatepass"), flags, None, include_offsets=False, include_colocated=False
    )
    return tokens


def _lexeme(token: str) -> str:
    if "'" in token or "\\" in token:
        token = token.replace("\\", "\\\\").replace("'", "''")
    return "'" + token + "'"


# a token of at most this many characters fits MAX_LEXEME_BYTES whatever it holds (4 bytes each)
_SURELY_INDEXABLE = MAX_LEXEME_BYTES // 4


def _indexable(token: str) -> bool:
    return len(token) <= _SURELY_INDEXABLE or len(token.encode("utf-8")) <= MAX_LEXEME_BYTES


# ---- tsvectors on the wire: the binary form the server takes without parsing ----------------

TSVECTOR_OID = 3614  # a built-in type: the same oid on every server
WEIGHT_A = 3  # the weight bits of a breadcrumb position (the text's, D, are 0)


class Tsvector(bytes):
    """A tsvector as `tsvectorrecv` reads it: int32 count, then per lexeme (in byte order) its
    UTF-8 bytes, a NUL, a uint16 count of positions and each as uint16 weight << 14 | position.
    Sent so, a lexical row costs the server half of what parsing and sorting its text costs."""


class _TsvectorDumper(Dumper):
    format = Format.BINARY
    oid = TSVECTOR_OID

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


# a packed position is uint16 weight << 14 | position: a breadcrumb position starts at this
_HEAD_POSITION = WEIGHT_A << 14
_POSITION_BITS = (1 << 14) - 1


@functools.cache
def _positions_packer(count: int) -> struct.Struct:
    """Packs a lexeme's position count and its `count` positions: one call per lexeme."""
    return struct.Struct(f">H{count}H")


@functools.cache
def _sole_position_tails() -> list[bytes]:
    """What follows a lexeme of one position, indexed by the packed position: its NUL, count 1
    and the position (most lexemes of a chunk occur once). Packed once per process."""
    return [b"\0" + _positions_packer(1).pack(1, packed) for packed in range(1 << 16)]


def _document_tsvector(places: Mapping[str, list[int]]) -> tuple[Tsvector, dict[str, int]]:
    """The tsvector of the lexemes in `places` (each token's ascending packed positions) and the
    number of positions kept per lexeme, in lexeme order. A token too long to be a lexeme is
    left out; a lexeme keeps its first MAX_POSITIONS_PER_LEXEME positions, as the server's
    text input keeps them."""
    tails = _sole_position_tails()
    parts = [b""]
    kept: dict[str, int] = {}
    for token in sorted(places):  # code point order is UTF-8 byte order: the server sorts nothing
        found = places[token]
        if len(token) > _SURELY_INDEXABLE and not _indexable(token):
            continue
        count = len(found)
        if count == 1:
            parts.append(token.encode() + tails[found[0]])
        else:
            count = min(count, MAX_POSITIONS_PER_LEXEME)
            parts.append(token.encode() + b"\0" + _positions_packer(count).pack(count, *found[:count]))
        kept[token] = count
    parts[0] = len(kept).to_bytes(4, "big")
    return Tsvector(b"".join(parts)), kept


def _words_tsvector(words: Iterable[str]) -> Tsvector:
    """The tsvector of distinct lexemes without positions: each lexeme, a NUL, count 0."""
    ordered = sorted(set(words))
    if not ordered:
        return Tsvector(bytes(4))
    return Tsvector(len(ordered).to_bytes(4, "big") + ("\0\0\0".join(ordered) + "\0\0\0").encode())


def scope_tsvector(path: str) -> Tsvector:
    """A file's scope lexemes: each of its folders and its own path (as `path_scopes` makes
    them in SQL for the rows written before the column existed)."""
    parts = path.split("/")
    folders = ("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return _words_tsvector(f for f in folders if f and _indexable(f))


def lexical_row(breadcrumb: str, text: str) -> tuple[Tsvector, int, Tsvector]:
    """What `chunks_fts` keeps of a chunk: its tsvector (breadcrumb hits weighted A, text hits
    D; one empty position between the two columns so that no phrase spans both), its token
    count and its impact tiers (`impact_words`). Positions past MAX_POSITION collapse into it,
    once (the first, a breadcrumb's if any), as the server's text input keeps them."""
    document, length, impacts, _ = _lexical_parts(breadcrumb, text)
    return document, length, impacts


def _lexical_parts(breadcrumb: str, text: str) -> tuple[Tsvector, int, Tsvector, Iterable[str]]:
    """`lexical_row` and the lexemes of its tsvector."""
    head = fold_tokens(breadcrumb)
    body = fold_tokens(text)
    places: dict[str, list[int]] = {}
    for tokens, first, weight in ((head, 1, _HEAD_POSITION), (body, len(head) + 2, 0)):
        # one tight loop appends each token's packed position (this is most of a write's CPU);
        # the positions past MAX_POSITION (a chunk of over 16k words) collapse into it, once
        # per lexeme, after the others
        uncapped = max(0, min(len(tokens), MAX_POSITION - first))
        for position, token in enumerate(tokens if uncapped == len(tokens) else tokens[:uncapped], first + weight):
            if token in places:
                places[token].append(position)
            else:
                places[token] = [position]
        for token in tokens[uncapped:]:
            found = places.setdefault(token, [])
            if not found or found[-1] & _POSITION_BITS != MAX_POSITION:
                found.append(weight | MAX_POSITION)
    document, kept = _document_tsvector(places)
    length = len(head) + len(body)
    return document, length, impact_words(kept, head, length), kept.keys()


def impact_words(kept: Mapping[str, int], head: list[str], length: int) -> Tsvector:
    """A tsvector of `tier|lexeme` words: each lexeme whose bm25 saturation in this chunk,
    tf (k1 + 1) / (tf + k1 (1 - b + b length / IMPACT_REFERENCE_LENGTH)), reaches one of
    IMPACT_TIERS, under the label of the highest tier it reaches. tf is what `ts_rank_cd` counts
    of the positions the tsvector keeps (`kept`, per lexeme): a breadcrumb hit (they come first)
    twice.

    A prefix query counts the hits of every lexeme it matches, so each prefix (of at least
    SHARED_PREFIX_MIN characters) that several lexemes of the chunk share also gets a
    `tier>prefix` word for their summed tf: without it a chunk of many words of one stem
    (backup, backups, backuped) would be bounded by its best word alone and could be left out
    of a top it belongs to."""
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / IMPACT_REFERENCE_LENGTH)
    frequencies = dict(kept)
    for token, hits in Counter(head).items():
        positions = frequencies.get(token)
        if positions is not None:
            frequencies[token] = positions + min(hits, positions)
    tiers: dict[int, str | None] = {}  # tf -> label: most lexemes share a few frequencies

    def tier_of(tf: int) -> str | None:
        label = tiers.get(tf, "")
        if label == "":
            impact = tf * (BM25_K1 + 1) / (tf + norm)
            label = next((IMPACT_LABELS[i] for i, floor in enumerate(IMPACT_TIERS) if impact >= floor), None)
            tiers[tf] = label
        return label

    # the saturation grows with tf: the lexemes below the lowest tier's tf, most of a chunk's,
    # are passed over without a look at their tier (a lexeme's tf is at most twice its kept positions)
    lowest = 1
    while lowest <= 2 * MAX_POSITIONS_PER_LEXEME and tier_of(lowest) is None:
        lowest += 1
    words = [
        f"{tier_of(tf)}|{token}"
        for token, tf in frequencies.items()
        if tf >= lowest and len(token) <= _SURELY_INDEXABLE - 2
    ]
    # the lexemes holding a prefix are adjacent once sorted: each pair adds its shared prefixes
    shared: dict[str, int] = {}
    ordered = sorted(frequencies)
    for before, token in itertools.pairwise(ordered):
        if before[:SHARED_PREFIX_MIN] != token[:SHARED_PREFIX_MIN]:
            continue  # most pairs: nothing shared worth a word
        common = min(len(os.path.commonprefix((before, token))), _SURELY_INDEXABLE - 2)  # noqa: RUF071 - characters wanted
        for n in range(SHARED_PREFIX_MIN, common + 1):
            prefix = token[:n]
            if prefix not in shared:  # `before` is the first lexeme holding it
                shared[prefix] = frequencies[before]
            shared[prefix] += frequencies[token]
    for prefix, tf in shared.items():
        label = tier_of(tf)
        if label is not None:
            words.append(label + ">" + prefix)
    return _words_tsvector(words)


_MATCH_TERM = re.compile(r'"((?:[^"]|"")*)"(\*?)')


def match_phrases(match: str) -> list[tuple[list[str], bool]]:
    """The folded words of each phrase of the FTS5 expression of `search.querybuild`
    (double-quoted phrases, each maybe followed by `*`, joined by OR) and whether its last word
    is a prefix. Phrases with nothing to match are left out."""
    phrases = []
    for body, star in _MATCH_TERM.findall(match):
        tokens = fold_tokens(body.replace('""', '"'), query=True)
        if tokens and all(_indexable(token) for token in tokens):
            phrases.append((tokens, bool(star)))
    return phrases


def _phrase_tsquery(tokens: list[str], prefix: bool) -> str:
    words = [_lexeme(token) for token in tokens]
    if prefix:
        words[-1] += ":*"
    return " <-> ".join(words)


def match_to_tsqueries(match: str) -> list[str]:
    """Translate the FTS5 expression into one tsquery per phrase: words joined by `<->`, a
    prefix `*` as `:*` on the last word."""
    return [_phrase_tsquery(tokens, prefix) for tokens, prefix in match_phrases(match)]


def impact_tsquery(phrases: Sequence[tuple[list[str], bool]], tiers: int) -> str | None:
    """The chunks where some phrase has all its words (the last one maybe a prefix: through
    one lexeme's tiers or the summed ones) in the first `tiers` impact tiers. A phrase occurs
    at most as often as each of its words, so in a chunk outside, each phrase's saturation is
    below those tiers (None: a word too long to have impact words, or a prefix too short)."""
    items = []
    for tokens, prefix in phrases:
        if any(len(token) > _SURELY_INDEXABLE - 2 for token in tokens):
            return None  # only the full scan finds it
        words = []
        for n, token in enumerate(tokens, 1):
            labels = IMPACT_LABELS[:tiers]
            if prefix and n == len(tokens):  # one lexeme holding it, or the sum of several
                if len(token) < SHARED_PREFIX_MIN:
                    return None
                alternatives = [_lexeme(f"{label}|{token}") + ":*" for label in labels]
                alternatives += [_lexeme(f"{label}>{token}") for label in labels]
            else:
                alternatives = [_lexeme(f"{label}|{token}") for label in labels]
            words.append("(" + " | ".join(alternatives) + ")")
        items.append(" & ".join(words))
    return " | ".join(f"({item})" for item in items)


# ---- scope ------------------------------------------------------------------------------------


def scope_condition(scope: SearchScope, alias: str = "c") -> tuple[str, dict[str, object]]:
    """SQL condition over `chunks` (or `files`) under `alias`, and its bindings (the same
    semantics as the SQLite store's)."""
    clauses: list[str] = []
    params: dict[str, object] = {}
    if scope.source_ids:
        params["scope_sources"] = list(scope.source_ids)
        clauses.append(f"{alias}.source_id = ANY(%(scope_sources)s)")
    if scope.path:
        folder = scope.path.strip("/")
        params["scope_path"] = folder
        params["scope_lo"] = folder + "/"
        params["scope_hi"] = folder + "0"  # '0' sorts right after '/' (paths compare bytewise: C collation)
        clauses.append(
            f"{alias}.path >= %(scope_path)s AND {alias}.path < %(scope_hi)s"
            f" AND ({alias}.path = %(scope_path)s OR {alias}.path >= %(scope_lo)s)"
        )
    if scope.collection is not None:
        params["scope_collection"] = _text(scope.collection)  # as `files` holds it
        clauses.append(
            f"EXISTS (SELECT 1 FROM files f WHERE f.source_id = {alias}.source_id"
            f" AND f.path = {alias}.path AND f.collection = %(scope_collection)s)"
        )
    # tags (all of them, by tag_key) and the time window, as the files that pass: a narrow
    # filter starts from its few files (file_tags' key, idx_files_updated)
    times: list[str] = []
    if scope.updated_since is not None:
        params["scope_since"] = float(scope.updated_since)
        times.append("u.updated_at >= %(scope_since)s")
    if scope.updated_before is not None:
        params["scope_before"] = float(scope.updated_before)
        times.append("u.updated_at < %(scope_before)s")
    if times:
        clauses.append(
            f"({alias}.source_id, {alias}.path) IN (SELECT u.source_id, u.path FROM files u WHERE {' AND '.join(times)})"
        )
    for i, tag in enumerate(dict.fromkeys(tag_key(tag) for tag in scope.tags)):
        params[f"scope_tag{i}"] = _text(tag)  # as `file_tags` holds it
        clauses.append(
            f"({alias}.source_id, {alias}.path) IN"
            f" (SELECT t.source_id, t.path FROM file_tags t WHERE t.tag = %(scope_tag{i})s)"
        )
    return (" AND ".join(clauses) or "TRUE"), params


def folder_scope(scope: SearchScope) -> tuple[str, dict[str, object]] | None:
    """The condition over `chunks_fts f` of a scope that is a folder or a file (maybe within some
    sources), through the folder lexemes of `f.scope` (see LEXICAL_SCOPES_SQL); None for any
    other scope (filters, no path, a path too long for a lexeme)."""
    if not scope.path or scope.collection is not None or scope.has_filters:
        return None
    folder = _text(scope.path.strip("/"))
    if not folder or not _indexable(folder):
        return None
    params: dict[str, object] = {"scope_folder": _lexeme(folder)}
    where = "f.scope @@ %(scope_folder)s::tsquery"
    if scope.source_ids:
        params["scope_sources"] = list(scope.source_ids)
        where += " AND f.source_id = ANY(%(scope_sources)s)"
    return where, params


# ---- schema ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PgMigration:
    """One schema step: `sql`, then `data` on the same store in the same transaction (applied
    whole or not at all); `meta.schema_version` counts the steps applied."""

    name: str
    sql: str
    data: Callable[[PostgresStore], None] | None = None


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


def _fill_file_tags(store: PostgresStore) -> None:
    """The tags of the files indexed before `file_tags` existed."""
    rows = store.conn.execute("SELECT source_id, path, tags FROM files WHERE tags IS NOT NULL AND tags <> '[]'")
    for source_id, path, tags in rows.fetchall():
        try:
            parsed = json.loads(str(tags))
        except ValueError:
            continue
        for key in _stored_tag_keys(parsed):
            store.conn.execute(
                "INSERT INTO file_tags(tag, source_id, path) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (key, source_id, path),
            )


# the tsvectors kept in the table's own pages, uncompressed, up to a page's worth: keyword search
# reads each one once per phrase, and a compressed or out-of-line one is decompressed or fetched
# every time (at 100k chunks, 13 % of them: ranking took 1.7x as long). Rows written from then on.
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


def _require_impacts(store: PostgresStore) -> None:
    """No default for new rows; the rows written before get their tiers in the next step
    (`_write_impacts`: a reader refuses the schema in between)."""
    store.conn.execute("ALTER TABLE chunks_fts ALTER COLUMN impacts DROP DEFAULT")


def _write_impacts(store: PostgresStore) -> None:
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


# a scope's chunk ids from the path index alone (an index-only scan): at 1M chunks a 1 % folder's
# ids came from 3,700 heap pages of chunks (their texts), now from about a hundred index pages
CHUNK_PATHS_COVERING_SQL = """
    CREATE INDEX IF NOT EXISTS idx_chunks_path_ids ON chunks(path) INCLUDE (id, source_id);
    DROP INDEX IF EXISTS idx_chunks_path;
"""


# each lexical row's folders (every ancestor of its file, and the file's own path) as lexemes
# of a second column of the document index: a folder scope becomes one more condition of the
# same index scan, which walks the folder's few entries and skips through the words' long
# posting lists, instead of reading every row of the folder to test the match on it (at 1M
# chunks, 10k rows of ~3 KB for a 1 % folder). A column of its own, not lexemes in `document`:
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


def _write_scopes(store: PostgresStore) -> None:
    """Every lexical row's folders, then the document index again over (document, scope) and
    the impact index (rewriting each row would otherwise add every one of its words to both)."""
    for name in LEXICAL_GIN_INDEXES:
        store.conn.execute(f"DROP INDEX IF EXISTS {name}")
    store.conn.execute("UPDATE chunks_fts f SET scope = path_scopes(c.path) FROM chunks c WHERE c.id = f.id")
    store.conn.execute("ALTER TABLE chunks_fts ALTER COLUMN scope SET NOT NULL")
    store.conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (SCOPES_BUILD_MEMORY,))
    store.conn.execute("CREATE INDEX idx_chunks_fts_document ON chunks_fts USING gin(document, scope)")
    store.conn.execute("CREATE INDEX idx_chunks_fts_impacts ON chunks_fts USING gin(impacts)")


def _rebuild_vector_index(store: PostgresStore) -> None:
    """An HNSW index built with other parameters than `hnsw_options` gives for its size
    (pgvector's defaults, or the small graph of an index that has grown since), or over the
    float vectors rather than their half-precision copies (see HNSW_OPERATORS), is built again:
    as a new index beside it, swapped in at the end, so readers keep searching the old one
    meanwhile (the build blocks writes to the chunks and vectors, not reads). It takes as long
    as the first build did (minutes at a million vectors), once."""
    row = store.conn.execute(
        "SELECT reloptions, pg_get_indexdef(oid) FROM pg_class WHERE oid = to_regclass('idx_chunk_vectors_hnsw')"
    ).fetchone()
    if row is None:
        return
    from indexer.store.postgres_bulk import build_memory

    # the chunks first, as a writer takes them (a file's chunks, then their vectors), and as the
    # path index after this step needs them: holding the vectors while waiting for the chunks an
    # earlier version's sync holds, itself waiting for the vectors, is a deadlock that aborts
    # the whole rebuild (both share locks block writes only, as the build does anyway)
    store.conn.execute("LOCK TABLE chunks, chunk_vectors IN SHARE MODE")
    vectors, dims = store.conn.execute(
        "SELECT count(*), (SELECT vector_dims(embedding) FROM chunk_vectors LIMIT 1) FROM chunk_vectors"
    ).fetchone() or (0, 0)
    if hnsw_graph(row[0]) == hnsw_options(int(vectors)) and HNSW_OPERATORS in str(row[1]):
        return
    log.info("index %s: rebuilding the vector index (%d vectors, once)", describe(store.url), vectors)
    store.conn.execute(
        "SELECT set_config('maintenance_work_mem', %s, true)", (build_memory(int(vectors), int(dims or 0)),)
    )
    store.conn.execute("DROP INDEX IF EXISTS idx_chunk_vectors_hnsw_rebuilt")
    rebuilt = hnsw_index_sql("idx_chunk_vectors_hnsw_rebuilt", int(vectors), int(dims or 0))
    assert rebuilt is not None  # an index exists, so the vectors are narrow enough for one
    store.conn.execute(rebuilt)
    _take_whole(store, "chunks, chunk_vectors")
    store.conn.execute("DROP INDEX idx_chunk_vectors_hnsw")
    store.conn.execute("ALTER INDEX idx_chunk_vectors_hnsw_rebuilt RENAME TO idx_chunk_vectors_hnsw")


# Every lexeme a lexical row has held, for keyword search to name the lexemes a query's prefix
# stands for: GIN finds a prefix by collecting every matching entry's rows into a bitmap first,
# an exact lexeme by walking its posting list, so a prefix that stands for one lexeme is looked
# up as that lexeme (the dense 100k: `'sestave':*` 4.8 ms, `'sestaveni'` 2.0; three such
# prefixes ANDed 9.6 ms against 1.7). Complete by construction: a write commits its rows'
# lexemes here before the rows themselves can commit (`_add_lexemes`); nothing is deleted, so a
# lexeme no row holds any more only keeps its prefixes' lookup as it was. `words_listed` has no
# default once filled: a writer of an earlier version, which knows nothing of `lexemes`, is
# refused rather than leaving its words out of it (the step holds the lexical rows meanwhile:
# keyword searches wait for it, 34 s at 1M chunks).
LEXEMES_SQL = """
    CREATE TABLE IF NOT EXISTS lexemes (lexeme TEXT COLLATE "C" PRIMARY KEY);
    ALTER TABLE chunks_fts ADD COLUMN IF NOT EXISTS words_listed BOOLEAN NOT NULL DEFAULT TRUE;
"""


def _fill_lexemes(store: PostgresStore) -> None:
    """The lexemes of the rows written before `lexemes` existed; no row without them from now on."""
    store.conn.execute(
        """INSERT INTO lexemes(lexeme) SELECT DISTINCT unnest(tsvector_to_array(document)) FROM chunks_fts
           ON CONFLICT DO NOTHING"""
    )
    store.conn.execute("ALTER TABLE chunks_fts ALTER COLUMN words_listed DROP DEFAULT")


SWAP_LOCK_TRIES = 1200  # at SWAP_LOCK_PAUSE apart: a minute, then a plain wait
SWAP_LOCK_PAUSE = 0.05


def _take_whole(store: PostgresStore, tables: str) -> None:
    """Exclusive locks on `tables` for dropping their indexes, all at once and without waiting:
    a search of an earlier version holds one table in its snapshot and then reads the other, so
    holding one whole while waiting for the other is a deadlock that aborts the migration.
    Searches meanwhile go on; each refused try is undone to a savepoint and tried again."""
    for _ in range(SWAP_LOCK_TRIES):
        store.conn.execute("SAVEPOINT vector_index_swap")
        try:
            store.conn.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE NOWAIT")
        except pg_errors.LockNotAvailable:
            store.conn.execute("ROLLBACK TO SAVEPOINT vector_index_swap")
            time.sleep(SWAP_LOCK_PAUSE)
            continue
        store.conn.execute("RELEASE SAVEPOINT vector_index_swap")
        return
    store.conn.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")


# as SQLite's step of the same name (`indexer.store.schema`), repeatable like the steps above
FRONT_MATTER_PROBLEM_SQL = """
    ALTER TABLE files ADD COLUMN IF NOT EXISTS front_matter_problem TEXT;
    CREATE INDEX IF NOT EXISTS idx_files_front_matter_problem ON files(source_id, path)
        WHERE front_matter_problem IS NOT NULL;
"""


PG_MIGRATIONS: tuple[PgMigration, ...] = (
    PgMigration("initial_schema", INITIAL_SQL),
    PgMigration("file_tags_and_recency", FILE_TAGS_SQL, data=_fill_file_tags),
    PgMigration("lexical_rows_inline", LEXICAL_INLINE_SQL),
    PgMigration("lexical_impacts", LEXICAL_IMPACTS_SQL, data=_require_impacts),
    # rows written before prefixes shared by several lexemes had summed tiers get them
    PgMigration("shared_prefix_impacts", "SELECT 1", data=_write_impacts),
    # indexes built with pgvector's default ef_construction miss part of a clustered index
    PgMigration("hnsw_ef_construction_128", "SELECT 1", data=_rebuild_vector_index),
    PgMigration("chunk_paths_covering", CHUNK_PATHS_COVERING_SQL),
    PgMigration(
        "lexical_statistics_follow_writes",
        f"ALTER TABLE chunks_fts SET (autovacuum_analyze_scale_factor = {LEXICAL_ANALYZE_SHARE})",
    ),
    PgMigration("lexical_scopes", LEXICAL_SCOPES_SQL, data=_write_scopes),
    # the graph of float vectors, twice the size of one of their half-precision copies
    PgMigration("hnsw_half_precision", "SELECT 1", data=_rebuild_vector_index),
    PgMigration("lexemes", LEXEMES_SQL, data=_fill_lexemes),
    PgMigration("front_matter_problems", FRONT_MATTER_PROBLEM_SQL),
)
PG_SCHEMA_VERSION = len(PG_MIGRATIONS)


# ---- errors ---------------------------------------------------------------------------------


def _first_lines(exc: BaseException, url: str) -> str:
    """The driver's message on one line, without the password of `url` in any form (libpq quotes
    what it cannot parse, password included)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return redact("; ".join(lines), url) or type(exc).__name__


def connect_error(url: str, exc: psycopg.Error) -> StoreError:
    """One line for a connection that failed: the server, the login or the database."""
    where = describe(url)
    sqlstate = getattr(exc, "sqlstate", None)
    text = _first_lines(exc, url)
    if password_needs_encoding(url):
        return StoreError(f"index {where}: the password in the URL must be {PERCENT_ENCODED}: {text}")
    if sqlstate == "3D000" or ("does not exist" in text and "database" in text):
        dbname = urlsplit(url).path.lstrip("/") or "?"
        return StoreError(
            f"index {where}: the PostgreSQL database {dbname!r} does not exist (create it: `createdb {dbname}`)"
        )
    if sqlstate in {"28P01", "28000"} or "authentication failed" in text or "password" in text:
        return StoreError(f"index {where}: PostgreSQL refused the login ({text})")
    if "connect" in text.lower() or "server" in text.lower():
        return StoreError(f"index {where}: cannot reach the PostgreSQL server ({text}); is it running?")
    return StoreError(f"index {where}: {text}")


# what a server, a network or permissions can do to a statement; anything else is a bug to see whole
STORAGE_ERRORS = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    pg_errors.InsufficientPrivilege,
    pg_errors.ReadOnlySqlTransaction,
)


def storage_error(url: str, exc: psycopg.Error) -> StoreError:
    where = describe(url)
    if isinstance(exc, pg_errors.DiskFull):
        return StoreError(f"index {where}: the server's disk is full ({_first_lines(exc, url)})")
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StoreError(f"index {where}: opened read-only, cannot write ({_first_lines(exc, url)})")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StoreError(f"index {where}: this PostgreSQL user lacks a privilege ({_first_lines(exc, url)})")
    if isinstance(exc, psycopg.InterfaceError) or getattr(exc, "sqlstate", None) is None:
        return StoreError(f"index {where}: lost the connection to the PostgreSQL server ({_first_lines(exc, url)})")
    return StoreError(f"index {where}: {_first_lines(exc, url)}")


StoreT = TypeVar("StoreT", bound="type[PostgresStore]")
MethodT = TypeVar("MethodT", bound=Callable[..., Any])


def _map_storage_errors(method: MethodT) -> MethodT:
    @functools.wraps(method)
    def run(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except STORAGE_ERRORS as exc:
            raise storage_error(self.url, exc) from None

    return run  # type: ignore[return-value]


def _storage_errors_mapped(cls: StoreT) -> StoreT:
    return wrap_public_methods(cls, _map_storage_errors, skip={"transaction", "snapshot", "close", "open", "exists"})


# ---- vectors on the wire: pgvector's binary format ----------------------------------------


class _VectorDumper(Dumper):
    """numpy arrays as pgvector `vector` parameters (binary: uint16 dims, uint16 0, float4 BE)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        import numpy as np

        values = np.asarray(obj, dtype=">f4").ravel()
        return struct.pack(">HH", values.size, 0) + values.tobytes()


def _vector_bytes(sent: bytes) -> bytes:
    """Little-endian float32 values from `vector_send` output (4 header bytes, then BE float4)."""
    import numpy as np

    return np.frombuffer(sent, dtype=">f4", offset=4).astype(np.float32).tobytes()


# ---- connections ----------------------------------------------------------------------------

_pool_lock = threading.Lock()
_pool: dict[tuple[str, bool], list[psycopg.Connection[Any]]] = {}
_pool_pid = os.getpid()
# url -> (lexical rows' version, phrase -> chunks holding it, phrase -> sampled estimate), see
# PostgresStore._remember_phrase_hits
_phrase_memory: dict[str, tuple[str, dict[str, int], dict[str, float]]] = {}
# url -> (which ANALYZE of the lexical rows, lexeme -> share of rows holding it), see
# PostgresStore._lexeme_shares
_lexeme_memory: dict[str, tuple[str, dict[str, float]]] = {}


def forget_phrase_counts() -> None:
    """Forget every phrase's kept document frequency, as a new process starts: benchmarks time
    a query as met for the first time (a server mostly meets new phrases)."""
    with _pool_lock:
        for _, hits, samples in _phrase_memory.values():
            hits.clear()  # in place: open stores share these dicts
            samples.clear()


def _connect(url: str, readonly: bool) -> psycopg.Connection[Any]:
    with _pool_lock:  # maybe a restarted server, whose lost commits' transaction ids come again
        _phrase_memory.pop(url, None)
        _lexeme_memory.pop(url, None)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in url:
        extra["connect_timeout"] = CONNECT_TIMEOUT_S
    try:
        conn = psycopg.connect(url, autocommit=True, application_name="notes-search", **extra)
    except psycopg.Error as exc:
        raise connect_error(url, exc) from None
    conn.adapters.register_dumper(Tsvector, _TsvectorDumper)
    try:
        conn.execute(f"SET default_transaction_read_only = {'on' if readonly else 'off'}")
    except psycopg.Error as exc:
        conn.close()
        raise connect_error(url, exc) from None
    return conn


def _take(url: str, readonly: bool) -> psycopg.Connection[Any] | None:
    global _pool_pid
    with _pool_lock:
        if _pool_pid != os.getpid():  # a forked child must not share its parent's sockets
            _pool.clear()
            _pool_pid = os.getpid()
        idle = _pool.get((url, readonly))
        return idle.pop() if idle else None


def _give_back(url: str, readonly: bool, conn: psycopg.Connection[Any]) -> None:
    if conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
        conn.close()
        return
    with _pool_lock:
        idle = _pool.setdefault((url, readonly), [])
        if _pool_pid == os.getpid() and len(idle) < POOL_SIZE:
            idle.append(conn)
            return
    conn.close()


def _live_connection(url: str, readonly: bool) -> psycopg.Connection[Any]:
    """A pooled connection that still answers, or a new one (the server may have restarted)."""
    conn = _take(url, readonly)
    if conn is not None:
        try:
            conn.execute("SELECT 1")
            return conn
        except psycopg.Error:
            conn.close()
    return _connect(url, readonly)


def discard_pool() -> None:
    """Close every idle pooled connection (tests dropping a database, a process ending)."""
    with _pool_lock:
        conns = [conn for idle in _pool.values() for conn in idle]
        _pool.clear()
    for conn in conns:
        conn.close()


# ---- the store ------------------------------------------------------------------------------


@_storage_errors_mapped
class PostgresStore(StoreCore):
    """A connection to the index database with the schema applied."""

    dialect = POSTGRES
    conn: psycopg.Connection[Any]

    def __init__(self, conn: psycopg.Connection[Any], url: str, readonly: bool) -> None:
        self.conn = conn
        self.url = url
        self.reading = readonly
        self._vectors_changed = False
        self._vector_oid: int | None = None
        self._has_vectors = False
        self._hnsw_ready = False
        # phrase -> chunks holding it, valid while the lexical rows are as they were when counted
        self._phrase_hits: dict[str, int] = {}
        self._phrase_hits_key: str | None = None
        # phrase -> its share of a fixed sample times the rows, for the same version (rare ones too)
        self._phrase_samples: dict[str, float] = {}
        self._in_snapshot = False
        self._lexicon_conn: psycopg.Connection[Any] | None = None  # see _add_lexemes
        # a query's prefixes that stand for one lexeme: quoted prefix -> quoted lexeme (see fts_search)
        self._sole_lexemes: dict[str, str] = {}
        self._analyzed_state: tuple[int, str] | None = None  # (rows written since, which ANALYZE)
        # how the last unscoped keyword search on a large index went, pass by pass (for benchmarks)
        self.keyword_trace: list[str] = []

    # ---- opening and schema -------------------------------------------------------------

    @classmethod
    def open(cls, url: str, *, readonly: bool = False) -> PostgresStore:
        """Open the index at `url` (sync migrates it; a reader needs it migrated)."""
        conn = _live_connection(url, readonly)
        store = cls(conn, url, readonly)
        try:
            version = store._schema_version()
            if readonly:
                if version is None:
                    raise StoreError(f"no index at {describe(url)}: run `notes-search sync` first")
                if version != PG_SCHEMA_VERSION:
                    raise StoreError(
                        f"index {describe(url)} has schema {version}, expected {PG_SCHEMA_VERSION}: run `notes-search sync`"
                    )
            else:
                store._migrate(version)
            store._register_vector_type()
        except StoreError:
            conn.close()
            raise
        except STORAGE_ERRORS as exc:
            conn.close()
            raise storage_error(url, exc) from None
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"index {describe(url)}: {_first_lines(exc, url)}") from None
        return store

    @classmethod
    def exists(cls, url: str) -> bool:
        """Whether `url` holds an index (a sync ran); a server that cannot be reached raises."""
        conn = _live_connection(url, True)
        try:
            exists = PostgresStore(conn, url, True)._schema_version() is not None
        except psycopg.Error as exc:
            conn.close()
            raise storage_error(url, exc) from None
        _give_back(url, True, conn)
        return exists

    def close(self) -> None:
        if self.conn.info.transaction_status != TransactionStatus.IDLE and not self.conn.closed:
            try:
                self.conn.execute("ROLLBACK")
            except psycopg.Error:
                self.conn.close()
        _give_back(self.url, self.reading, self.conn)
        if self._lexicon_conn is not None:
            _give_back(self.url, False, self._lexicon_conn)
            self._lexicon_conn = None

    def _one(self, sql: str, params: Sequence[object] | dict[str, object] | None = None) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        if row is None:
            raise StoreError(f"index {describe(self.url)}: no row from {sql.split()[0]} query")
        return row[0]

    def _schema_version(self) -> int | None:
        """meta.schema_version, None for a database without our tables; a database holding
        other tables but no index is refused (sync's first step would meet them)."""
        if self._one("SELECT to_regclass('meta') IS NOT NULL"):
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None:
                return int(row[0])
        tables = [
            str(r[0])
            for r in self.conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename LIMIT 4"
            )
        ]
        if tables:
            raise StoreError(
                f"index {describe(self.url)}: not a notes-search index (its schema holds other tables: "
                f"{', '.join(tables)}); use another database or change `db:` in the config"
            )
        return None

    def _migrate(self, version: int | None) -> None:
        if version == PG_SCHEMA_VERSION:
            return
        if version is not None and version > PG_SCHEMA_VERSION:
            raise StoreError(f"index {describe(self.url)} was written by a newer notes-search (schema {version})")
        with self.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            # another worker may have migrated while this one waited for the lock
            current = 0
            if self._one("SELECT to_regclass('meta') IS NOT NULL"):
                row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                current = int(row[0]) if row else 0
            for number, step in enumerate(PG_MIGRATIONS[current:], current):
                self.conn.execute(step.sql.encode())
                if step.data is not None:
                    step.data(self)
                self._set_meta({"schema_version": str(number + 1)})
                if current:
                    log.info("index %s: migrated to schema %d (%s)", describe(self.url), number + 1, step.name)

    def _register_vector_type(self) -> None:
        oid = self._one("SELECT oid FROM pg_type WHERE typname = 'vector'")
        if self._vector_oid != oid:
            self._use_vector_oid(int(oid))

    def _use_vector_oid(self, oid: int) -> None:
        self._vector_oid = oid
        dumper = type("VectorDumper", (_VectorDumper,), {"oid": oid})
        self.conn.adapters.register_dumper("numpy.ndarray", dumper)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN ... COMMIT; any exception rolls back. Not re-entrant on purpose."""
        if self.conn.info.transaction_status != TransactionStatus.IDLE:
            raise RuntimeError("transactions do not nest")
        try:
            self.conn.execute("BEGIN")
            self._vectors_changed = False
            try:
                yield
                if self._vectors_changed:
                    # random, not a counter: a rebuilt index must not reach a value an old copy has
                    self.conn.execute(
                        "INSERT INTO meta(key, value) VALUES ('vectors_generation', md5(random()::text))"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                    )
                self.conn.execute("COMMIT")
            except BaseException:
                if not self.conn.closed and self.conn.info.transaction_status != TransactionStatus.IDLE:
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self._vectors_changed = False
        except STORAGE_ERRORS as exc:
            raise storage_error(self.url, exc) from None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read-only REPEATABLE READ transaction: every query inside sees one committed state."""
        try:
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        except STORAGE_ERRORS as exc:
            raise storage_error(self.url, exc) from None
        self._in_snapshot = True
        try:
            yield
        finally:
            self._in_snapshot = False
            try:
                if not self.conn.closed:
                    self.conn.execute("COMMIT")
            except STORAGE_ERRORS as exc:
                raise storage_error(self.url, exc) from None

    def sibling(self) -> Callable[[], AbstractContextManager[PostgresStore]] | None:
        """Inside `snapshot()`: an opener of readers on other pooled connections that import
        this transaction's snapshot (`pg_export_snapshot()` here, `SET TRANSACTION SNAPSHOT`
        there), so their reads run beside this connection's and see exactly its state. The
        export lasts as long as this transaction: every sibling must close before it ends."""
        if not self._in_snapshot:
            return None
        token = str(self._one("SELECT pg_export_snapshot()"))
        return functools.partial(self._sibling_reader, token)

    @contextmanager
    def _sibling_reader(self, token: str) -> Iterator[PostgresStore]:
        conn = _live_connection(self.url, True)
        try:
            # one round trip: the import must be the transaction's first statement
            conn.execute(
                pg_sql.SQL("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}").format(
                    pg_sql.Literal(token)
                )
            )
        except psycopg.Error as exc:
            conn.close()
            raise storage_error(self.url, exc) from None
        reader = PostgresStore(conn, self.url, True)
        reader._in_snapshot = True
        reader._has_vectors = self._has_vectors
        reader._hnsw_ready = self._hnsw_ready
        if self._vector_oid is not None:  # the same database: no lookup
            reader._use_vector_oid(self._vector_oid)
        try:
            yield reader
        finally:
            reader._in_snapshot = False
            try:  # every read has answered: a failed COMMIT of a read-only transaction changes nothing
                conn.execute("COMMIT")
            except psycopg.Error:
                conn.close()
            _give_back(self.url, True, conn)

    # ---- meta and embedding identity ------------------------------------------------------

    def has_vector_table(self) -> bool:
        # once there, the table stays (reset_vectors replaces it within one transaction)
        if not self._has_vectors:
            self._has_vectors = bool(self._one("SELECT to_regclass('chunk_vectors') IS NOT NULL"))
        return self._has_vectors

    def reset_vectors(self, dims: int, identity: dict[str, str]) -> None:
        """Switch embedding spaces atomically: drop every vector, mark every chunk pending."""
        with self.transaction():
            self.conn.execute("DROP TABLE IF EXISTS chunk_vectors")
            self.conn.execute(
                f"""CREATE TABLE chunk_vectors (
                      id        BIGINT PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
                      embedding vector({int(dims)}) NOT NULL
                    )""".encode()
            )
            self.conn.execute("UPDATE chunks SET embedded_at = NULL WHERE embedded_at IS NOT NULL")
            self._vectors_changed = True
            self._hnsw_ready = False
            self._set_meta(identity)
            self._set_meta({"pgvector_version": self.vec_version()})

    def _vector_dims(self) -> int:
        """The width of the space's vectors: the embedding column's declared dimensions."""
        return int(
            self._one(
                """SELECT atttypmod FROM pg_attribute
                   WHERE attrelid = 'chunk_vectors'::regclass AND attname = 'embedding'"""
            )
        )

    def vec_version(self) -> str:
        return str(self._one("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))

    # ---- sources ---------------------------------------------------------------------------

    def _scope_condition(self, scope: SearchScope, alias: str) -> tuple[str, dict[str, object]]:
        return scope_condition(scope, alias)

    def _after_sync(self) -> None:
        self._merge_pending_lexical_entries()

    def _merge_pending_lexical_entries(self) -> None:
        """Move the lexical indexes' pending entries into their main structure (see
        LEXICAL_GIN_INDEXES); a user who does not own the indexes, or a merge that cannot get
        its lock or finish within the role's timeouts (a REINDEX or a migration elsewhere), leaves
        it to autovacuum: the source's state is committed already and the sync succeeded."""
        merges = ", ".join(f"gin_clean_pending_list('{name}'::regclass)" for name in LEXICAL_GIN_INDEXES)
        try:
            self.conn.execute(f"SELECT {merges}")
        except (pg_errors.InsufficientPrivilege, pg_errors.LockNotAvailable, pg_errors.QueryCanceled) as exc:
            log.debug("pending lexical index entries left to autovacuum: %s", _first_lines(exc, self.url))

    def _delete_source_rows(self, source_id: str) -> None:
        # the lexical rows first, in one statement: the cascade would delete them one by one
        self.conn.execute("DELETE FROM chunks_fts WHERE source_id = %s", (source_id,))
        if (
            self.has_vector_table()
            and self.conn.execute(
                "DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM chunks WHERE source_id = %s)", (source_id,)
            ).rowcount
        ):
            self._vectors_changed = True
        self.conn.execute("DELETE FROM files WHERE source_id = %s", (source_id,))
        self.conn.execute("DELETE FROM sources WHERE source_id = %s", (source_id,))

    # ---- files and chunks ------------------------------------------------------------------

    def delete_file(self, source_id: str, path: str) -> None:
        """Remove a file with its chunks, their lexical rows and vectors. Inside a transaction."""
        self._delete_files_read(self._delete_files_sent(source_id, [path]))

    def _delete_files_sent(self, source_id: str, paths: Sequence[str]) -> psycopg.Cursor[Any]:
        """Delete files in one statement: the lexical rows and vectors go by id first (the cascade
        from `files` would delete them one statement per chunk); `_delete_files_read` takes the
        answer (apart, so a pipeline can send more meanwhile)."""
        vectors = (
            ", v AS (DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM gone) RETURNING 1)"
            if self.has_vector_table()
            else ", v AS (SELECT 1 WHERE FALSE)"
        )
        return self.conn.execute(
            f"""WITH gone AS (SELECT id FROM chunks WHERE source_id = %(source)s AND path = ANY(%(paths)s)),
                     fts AS (DELETE FROM chunks_fts WHERE id IN (SELECT id FROM gone) RETURNING 1){vectors},
                     f AS (DELETE FROM files WHERE source_id = %(source)s AND path = ANY(%(paths)s) RETURNING 1)
                SELECT (SELECT count(*) FROM v), (SELECT count(*) FROM fts), (SELECT count(*) FROM f)""",
            {"source": source_id, "paths": [_text(path) for path in paths]},
        )

    def _delete_files_read(self, sent: psycopg.Cursor[Any]) -> None:
        row = sent.fetchone()
        if row is not None and row[0]:
            self._vectors_changed = True

    def write_files(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        language_of: Callable[[str], str] | None = None,
        vectors: Mapping[str, bytes] | None = None,
    ) -> int:
        """`write_file` for many files in three round trips whatever their number: the reads and
        the delete, one statement writing every file, chunk and lexical row, one COPY of the
        vectors (reused, or given: see the protocol). A path given twice is written in order
        (its later version wins)."""
        if self.conn.info.transaction_status == TransactionStatus.IDLE:
            with self.transaction():  # the lexemes must commit before the rows can (`_add_lexemes`)
                return self.write_files(source_id, files, language_of, vectors)
        pending = 0
        for run in _distinct_path_runs(files):
            pending += self._write_run(source_id, run, language_of, vectors)
        return pending

    def _write_run(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        language_of: Callable[[str], str] | None,
        vectors: Mapping[str, bytes] | None,
    ) -> int:
        if not files:
            return 0
        hashes = [content_hash(chunk.embed_text) for _, doc in files for chunk in doc.chunks]
        pieces = _pieces(files)
        self.has_vector_table()  # known before the pipeline: the statements below depend on it
        # one pipeline: the reads and the delete (after them: a reusable vector may be one of these
        # files' old chunks), then one statement per piece, each sent as soon as its tsvectors
        # are folded, so the server writes one piece while the next is folded here
        with self.conn.pipeline():
            self.conn.execute(ASYNC_COMMIT)
            vectors_read = self._vectors_by_hash_sent(set(hashes)) if vectors is None else None
            languages_read = self._languages_by_hash_sent(set(hashes)) if language_of is not None else None
            deleted = self._delete_files_sent(source_id, [file.path for file, _ in files])
            lexemes: set[str] = set()
            first = _folded(pieces[0], lexemes)
            carried = self._vectors_by_hash_read(vectors_read) if vectors is None else vectors
            known_languages = self._languages_by_hash_read(languages_read)
            self._delete_files_read(deleted)
            now = utc_now()
            written = []
            done = 0
            for number, piece in enumerate(pieces):
                documents = first if number == 0 else _folded(piece, lexemes)
                chunk_count = sum(len(doc.chunks) for _, doc in piece)
                piece_hashes = hashes[done : done + chunk_count]
                done += chunk_count
                written.append(
                    self._write_piece_sent(
                        source_id, piece, piece_hashes, documents, language_of, known_languages, carried, now
                    )
                )
                _send_whole(self.conn)
        rows = [row for sent in written for row in sent.fetchall()]
        self._add_lexemes(lexemes)
        attached = [(int(chunk_id), carried[digest]) for chunk_id, digest in rows if digest in carried]
        if attached:
            self._insert_vectors(attached)
        return len(hashes) - len(attached)

    def _add_lexemes(self, lexemes: set[str]) -> None:
        """Commit `lexemes` to the lexicon on a connection of its own, before the transaction
        writing rows that hold them can commit: a reader's snapshot that holds a row then holds
        its lexemes. Inside that transaction two first syncs would wait for each other's
        uncommitted new words (or deadlock). One statement in code point order (the
        key's byte order) waits on another's keys in one order only."""
        if not lexemes:
            return
        conn = self._lexicon_conn
        if conn is None or conn.closed:
            conn = self._lexicon_conn = _live_connection(self.url, False)
        conn.execute("INSERT INTO lexemes(lexeme) SELECT unnest(%b::text[]) ON CONFLICT DO NOTHING", (sorted(lexemes),))

    def _write_piece_sent(
        self,
        source_id: str,
        files: Sequence[tuple[FileVersion, ParsedDocument]],
        hashes: Sequence[str],
        documents: Sequence[tuple[Tsvector, int, Tsvector]],
        language_of: Callable[[str], str] | None,
        known_languages: dict[str, str],
        carried: Mapping[str, bytes],
        now: str,
    ) -> psycopg.Cursor[Any]:
        """Send the statement writing these files, their chunks and lexical rows; the cursor
        answers (chunk id, content hash) per chunk once the pipeline has run it."""
        chunks = [(file.path, chunk) for file, doc in files for chunk in doc.chunks]
        languages = []
        for (_, chunk), digest in zip(chunks, hashes, strict=True):
            chunk_language = known_languages.get(digest) or (language_of(chunk.text) if language_of else "unknown")
            known_languages[digest] = chunk_language
            languages.append(chunk_language)
        scopes = {file.path: scope_tsvector(_text(file.path)) for file, _ in files}
        # PostgreSQL text holds no NUL (front matter can spell one): keys as stored, distinct again
        tag_rows = [(key, file.path) for file, doc in files for key in _stored_tag_keys(doc.tags)]
        # the files, their chunks and lexical rows in one statement (foreign keys are checked at
        # its end, when all exist); chunk ids ascend in the order given. The arrays go binary
        # (%b): a third of the text format's cost to dump, and the tsvectors need no parsing
        return self.conn.execute(
            """WITH f AS (
                   INSERT INTO files(source_id, path, title, tags, headings, collection, sha256, size, mtime,
                                     updated_at, indexed_at, front_matter_problem)
                   SELECT %(source)s, path, title, tags, headings, collection, sha256, size, mtime, updated_at,
                          %(now)s, problem
                   FROM unnest(%(path)b::text[], %(title)b::text[], %(tags)b::text[], %(headings)b::text[],
                               %(collection)b::text[], %(sha256)b::text[], %(size)b::bigint[],
                               %(mtime)b::float8[], %(updated_at)b::float8[], %(problem)b::text[])
                       AS f(path, title, tags, headings, collection, sha256, size, mtime, updated_at, problem)),
               tags AS (
                   INSERT INTO file_tags(tag, source_id, path)
                   SELECT tag, %(source)s, path FROM unnest(%(tag_key)b::text[], %(tag_path)b::text[]) AS t(tag, path)),
               u AS (
                   SELECT * FROM unnest(%(chunk_path)b::text[], %(idx)b::int[], %(breadcrumb)b::text[],
                                        %(text)b::text[], %(start)b::int[], %(end)b::int[], %(hash)b::text[],
                                        %(embedded)b::text[], %(language)b::text[], %(document)b::tsvector[],
                                        %(length)b::int[], %(impacts)b::tsvector[], %(scope)b::tsvector[]) WITH ORDINALITY
                       AS u(path, idx, breadcrumb, text, start_line, end_line, hash, embedded_at, language, document,
                            length, impacts, scope, ord)),
               c AS (
                   INSERT INTO chunks(source_id, path, chunk_idx, breadcrumb, text, start_line, end_line,
                                      content_hash, embedded_at, language)
                   SELECT %(source)s, path, idx, breadcrumb, text, start_line, end_line, hash, embedded_at,
                          language FROM u ORDER BY ord
                   RETURNING id, path, chunk_idx, content_hash),
               fts AS (
                   INSERT INTO chunks_fts(id, source_id, document, length, impacts, scope, words_listed)
                   SELECT c.id, %(source)s, u.document, u.length, u.impacts, u.scope, TRUE
                   FROM c JOIN u ON u.path COLLATE "C" = c.path AND u.idx = c.chunk_idx)
               SELECT id, content_hash FROM c""",
            {
                "source": source_id,
                "now": now,
                "path": [_text(file.path) for file, _ in files],
                "title": [_opt_text(doc.title) for _, doc in files],
                "tags": [json.dumps(doc.tags, ensure_ascii=False) for _, doc in files],
                "headings": [json.dumps(doc.headings, ensure_ascii=False) for _, doc in files],
                "collection": [_opt_text(file.collection) for file, _ in files],
                "sha256": [file.sha256 for file, _ in files],
                "size": [int(file.size) for file, _ in files],
                "mtime": [None if file.mtime is None else float(file.mtime) for file, _ in files],
                "updated_at": [float(file.updated_at) for file, _ in files],
                "problem": [_opt_text(doc.front_matter_problem) for _, doc in files],
                "tag_key": [key for key, _ in tag_rows],
                "tag_path": [_text(path) for _, path in tag_rows],
                "chunk_path": [_text(path) for path, _ in chunks],
                "idx": [chunk.idx for _, chunk in chunks],
                "breadcrumb": [_text(chunk.breadcrumb) for _, chunk in chunks],
                "text": [_text(chunk.text) for _, chunk in chunks],
                "start": [chunk.start_line for _, chunk in chunks],
                "end": [chunk.end_line for _, chunk in chunks],
                "hash": hashes,
                "embedded": [now if digest in carried else None for digest in hashes],
                "language": languages,
                "document": [d for d, _, _ in documents],
                "length": [n for _, n, _ in documents],
                "impacts": [i for _, _, i in documents],
                "scope": [scopes[path] for path, _ in chunks],
            },
        )

    def _vectors_by_hash_sent(self, hashes: set[str]) -> psycopg.Cursor[Any] | None:
        """Ask for the vector (float32 bytes) of the oldest embedded chunk with each content hash;
        `_vectors_by_hash_read` takes the answer (apart, so a pipeline can send more meanwhile)."""
        if not hashes or not self.has_vector_table():
            return None
        return self.conn.execute(
            """SELECT DISTINCT ON (c.content_hash) c.content_hash, vector_send(v.embedding)
               FROM chunks c JOIN chunk_vectors v ON v.id = c.id
               WHERE c.content_hash = ANY(%s) AND c.embedded_at IS NOT NULL ORDER BY c.content_hash, c.id""",
            (sorted(hashes),),
            binary=True,
        )

    @staticmethod
    def _vectors_by_hash_read(sent: psycopg.Cursor[Any] | None) -> dict[str, bytes]:
        if sent is None:
            return {}
        return {str(digest): _vector_bytes(bytes(vector)) for digest, vector in sent.fetchall()}

    def _languages_by_hash_sent(self, hashes: set[str]) -> psycopg.Cursor[Any] | None:
        """Ask for the languages already detected for these texts ('unknown' is not reused)."""
        if not hashes:
            return None
        return self.conn.execute(
            """SELECT content_hash, MIN(language) FROM chunks
               WHERE content_hash = ANY(%s) AND language <> 'unknown' GROUP BY content_hash""",
            (sorted(hashes),),
        )

    @staticmethod
    def _languages_by_hash_read(sent: psycopg.Cursor[Any] | None) -> dict[str, str]:
        if sent is None:
            return {}
        return {str(digest): str(language) for digest, language in sent.fetchall()}

    def _insert_vectors(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """(chunk id, float32 bytes) pairs into chunk_vectors, by binary COPY (one round trip)."""
        import numpy as np

        assert self._vector_oid is not None
        with (
            self.conn.cursor() as cursor,
            cursor.copy("COPY chunk_vectors (id, embedding) FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types([20, self._vector_oid])  # int8, vector
            for chunk_id, blob in rows:
                copy.write_row((chunk_id, np.frombuffer(blob, dtype=np.float32)))
        self._vectors_changed = True

    # ---- collections -----------------------------------------------------------------------

    # ---- embeddings ------------------------------------------------------------------------

    def store_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> int:
        """Attach vectors to chunks that still exist and are still pending. Returns how many."""
        import numpy as np

        if not len(ids):
            return 0
        with self.transaction():
            with self.conn.pipeline():
                self.conn.execute(ASYNC_COMMIT)
                marked = self.conn.execute(
                    "UPDATE chunks SET embedded_at = %s WHERE id = ANY(%s) AND embedded_at IS NULL RETURNING id",
                    (utc_now(), [int(i) for i in ids]),
                )
            waiting = {int(r[0]) for r in marked.fetchall()}
            rows = [
                (int(chunk_id), np.asarray(vector, dtype=np.float32).tobytes())
                for chunk_id, vector in zip(ids, vectors, strict=True)
                if int(chunk_id) in waiting
            ]
            if rows:
                self._insert_vectors(rows)
        if rows:
            self._index_vectors_once_many()
        return len(rows)

    def check_integrity(self, *, full: bool = False) -> None:
        """Nothing to do from here: the server keeps its own pages whole (WAL, checksums)."""

    def unembed(self, ids: Sequence[int]) -> None:
        """Drop the vectors of these chunks and make them pending again."""
        with self.transaction():
            self.conn.execute("DELETE FROM chunk_vectors WHERE id = ANY(%s)", ([int(i) for i in ids],))
            self.conn.execute("UPDATE chunks SET embedded_at = NULL WHERE id = ANY(%s)", ([int(i) for i in ids],))
            self._vectors_changed = True

    @contextmanager
    def vector_index_deferred(self, build_memory: Callable[[int, int], str]) -> Iterator[None]:
        """Drop the HNSW index and build none while the block stores vectors, then build it
        once (at HNSW_MIN_VECTORS, with `build_memory(vectors, dims)` as maintenance_work_mem):
        one bulk build links the graph several times faster than an insert per vector. A failed
        block leaves the index to the next store_vectors."""
        with self.transaction():
            self.conn.execute("DROP INDEX IF EXISTS idx_chunk_vectors_hnsw")
        with self._bulk_load(build_memory):
            yield

    @contextmanager
    def vector_index_held_back(self, build_memory: Callable[[int, int], str]) -> Iterator[None]:
        """While the block attaches vectors to at least HNSW_MIN_VECTORS pending chunks of a
        space that has no HNSW index yet (a first sync, a new embedding space), build none midway
        and keep none up: build it once after the block, as `vector_index_deferred` does. An
        index already there is kept and kept up. With fewer waiting, a space that holds enough
        vectors but no index (a run stopped between its last vectors and its build: nothing is
        pending, so no store_vectors would ever build it) gets it before the block."""
        if not self.has_vector_table() or not self._one("SELECT to_regclass('idx_chunk_vectors_hnsw') IS NULL"):
            yield
            return
        waiting = self._one(
            "SELECT count(*) FROM (SELECT 1 FROM chunks WHERE embedded_at IS NULL LIMIT %s) waiting",
            (HNSW_MIN_VECTORS,),
        )
        if int(waiting) < HNSW_MIN_VECTORS:
            self._build_vector_index(build_memory)  # nothing below HNSW_MIN_VECTORS vectors
            yield
            return
        with self._bulk_load(build_memory):
            yield

    @contextmanager
    def _bulk_load(self, build_memory: Callable[[int, int], str]) -> Iterator[None]:
        """No HNSW upkeep while the block stores vectors; after it, one bulk build and fresh
        planner statistics (a failed block leaves both to later writes and autovacuum)."""
        self._hnsw_ready = True  # "built": no store_vectors builds it midway
        try:
            yield
        finally:
            self._hnsw_ready = False
        self._build_vector_index(build_memory)
        self._analyze_bulk_load()

    def _analyze_bulk_load(self) -> None:
        """Refresh the planner's statistics after a bulk load. Until autovacuum gets to it, the
        planner would take the filled tables for the empty ones it last saw, and the keyword
        search's pass planning (which picks the cheapest exact candidate set by the planner's row
        estimates) would choose blindly: still exact, but slower."""
        tables = ["files", "file_tags", "chunks", "chunks_fts"] + (["chunk_vectors"] if self.has_vector_table() else [])
        self.conn.execute(f"ANALYZE {', '.join(tables)}")

    def _build_vector_index(self, build_memory: Callable[[int, int], str]) -> None:
        """Build the HNSW index (at HNSW_MIN_VECTORS) with memory for the whole graph."""
        if not self.has_vector_table():
            return
        vectors, dims = self.conn.execute(
            "SELECT count(*), (SELECT vector_dims(embedding) FROM chunk_vectors LIMIT 1) FROM chunk_vectors"
        ).fetchone() or (0, 0)
        self.conn.execute(
            "SELECT set_config('maintenance_work_mem', %s, false)", (build_memory(int(vectors), int(dims or 0)),)
        )
        try:
            self._index_vectors_once_many()
        finally:
            self.conn.execute("RESET maintenance_work_mem")

    def _index_vectors_once_many(self) -> None:
        """Build the HNSW index once the space holds HNSW_MIN_VECTORS vectors. Below that an
        unscoped search scans them exactly in a few milliseconds, and writes skip the index's
        upkeep (most of the cost of storing a vector); a first sync builds it once, in bulk."""
        if self._hnsw_ready:
            return
        if not self._one("SELECT to_regclass('idx_chunk_vectors_hnsw') IS NULL"):
            self._widen_grown_vector_index()
            self._hnsw_ready = True
            return
        vectors = int(self._one("SELECT count(*) FROM chunk_vectors"))
        if vectors < HNSW_MIN_VECTORS:
            return
        index = hnsw_index_sql("idx_chunk_vectors_hnsw", vectors, self._vector_dims())
        if index is not None:
            with self.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (HNSW_BUILD_LOCK,))  # one worker builds it
                self.conn.execute(index)
        self._hnsw_ready = True

    def _widen_grown_vector_index(self) -> None:
        """An index built small (HNSW_EF_CONSTRUCTION_SMALL) that has since grown past
        HNSW_WIDE_FROM vectors is built again with the wide graph, once, by the first writer that
        sees it (the planner's row count decides cheaply; the rebuild counts exactly)."""
        row = self.conn.execute(
            """SELECT i.reloptions, v.reltuples FROM pg_class i, pg_class v
               WHERE i.oid = to_regclass('idx_chunk_vectors_hnsw') AND v.oid = 'chunk_vectors'::regclass"""
        ).fetchone()
        if row is None or float(row[1]) < HNSW_WIDE_FROM or hnsw_graph(row[0]) == hnsw_options(HNSW_WIDE_FROM):
            return
        with self.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (HNSW_BUILD_LOCK,))  # one worker rebuilds it
            _rebuild_vector_index(self)

    # ---- search (reads) --------------------------------------------------------------------

    def fts_search(self, match: str, limit: int, scope: SearchScope) -> list[RankedChunk]:
        """Chunks matching the FTS5 expression `match`, best bm25 (lowest) first: FTS5's bm25
        over the whole index's statistics (breadcrumb weight 2, text 1), ties by id.

        Unscoped on a large index (TIERED_MIN_ROWS), the chunks of the top impact tiers are
        scored first, and the rest only when the bound says they could reach the top (see
        IMPACT_TIERS). Otherwise one pass: every match's phrase frequencies are taken once
        (ts_rank_cd per phrase) and each phrase's document frequency is counted from those same
        rows. Scoped, the document frequencies still come from the whole index: counted (or on
        a large index estimated) once per phrase and kept until the lexical rows change, so a
        repeated phrase costs only the scoring of the scope's own matches; a folder or file scope
        finds those in the same index scan as the match (`folder_scope`), any other scope by its
        chunk ids."""
        self.keyword_trace = []
        self._sole_lexemes = {}
        self._analyzed_state = None
        phrases = match_phrases(match)
        if not phrases or limit <= 0:
            return []
        queries = [_phrase_tsquery(tokens, prefix) for tokens, prefix in phrases]
        prefixes = _prefix_ranges(phrases)
        # with the totals, the prefixes' sole lexemes and the state of the planner's statistics
        # (`_lexeme_shares`): one round trip before any row is read
        version, total_rows, total_tokens, sole, analysis = self.conn.execute(
            f"""SELECT {LEXICAL_VERSION_SQL}, COALESCE(sum(rows), 0), COALESCE(sum(tokens), 0),
                       ARRAY(SELECT (SELECT CASE WHEN count(*) = 1 THEN min(w.lexeme) END
                                     FROM (SELECT lexeme FROM lexemes WHERE lexeme >= p.low AND lexeme < p.high
                                           ORDER BY lexeme LIMIT 2) w)
                             FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS p(low, high, n) ORDER BY p.n),
                       (SELECT ARRAY[n_mod_since_analyze::text,
                                     concat_ws(':', analyze_count + autoanalyze_count, last_analyze, last_autoanalyze)]
                        FROM pg_stat_user_tables WHERE relid = 'chunks_fts'::regclass)
                FROM fts_stats""",
            ([low for low, _ in prefixes], [high for _, high in prefixes]),
        ).fetchone() or ("", 0, 0, [], None)
        self._analyzed_state = None if analysis is None else (int(analysis[0] or 0), str(analysis[1]))
        total_rows, total_tokens = int(total_rows), int(total_tokens)
        exact = {low: str(lexeme) for (low, _), lexeme in zip(prefixes, sole, strict=True) if lexeme is not None}
        self._sole_lexemes = _sole_lexeme_forms(exact)
        if exact:
            self.keyword_trace.append(
                "prefixes as their one lexeme: " + ", ".join(f"{p}* = {w}" for p, w in exact.items())
            )
        if not total_rows:
            return []
        self._remember_phrase_hits(str(version), {})
        avgdl = total_tokens / total_rows or 1.0
        large = total_rows >= TIERED_MIN_ROWS
        if scope.is_all:
            if large:
                # the sample first: a query of rare phrases is scored whole, and that scan counts them
                every = " & ".join(f"({q})" for q in queries) if 2 <= len(queries) <= EVERY_PHRASE_MAX else None
                self._sample_phrases([*queries, *([every] if every else [])], total_rows)
                common = sum(self._phrase_hits.get(phrase, 0) for phrase in queries)
                if common > FULL_SCAN_MAX_MATCHES:
                    found = self._document_frequencies(queries, total_rows)
                    few = every is not None and self._phrase_samples.get(every, math.inf) <= EVERY_MAX_ROWS
                    hits = self._tiered_search(phrases, queries, found, total_rows, avgdl, limit, every, few)
                    if hits is not None:
                        return hits
            return self._full_search(queries, limit)
        found = self._document_frequencies(queries, total_rows)
        if not any(found):
            return []
        idf = _idfs(found, total_rows)
        folder = folder_scope(scope)
        if folder is not None:
            self.keyword_trace.append("scope: the folder's lexeme in the document index")
            postings = sum(found)
            may_lead = postings >= FOLDER_ROW_POSTINGS * FOLDER_LEAD_MIN_ROWS
            folder_rows = self._estimated_rows(*folder) if may_lead or (large and len(queries) == 1) else 0.0
            rows_lead = may_lead and postings > FOLDER_ROW_POSTINGS * folder_rows
            if rows_lead:
                # cheaper than the postings, and than a phrase's tier passes, which read most of them
                self.keyword_trace.append(f"scope: the folder's ~{folder_rows:.0f} rows test the match")
            elif large and len(queries) == 1 and min(1.0, folder_rows / total_rows) * found[0] > FULL_SCAN_MAX_MATCHES:
                # one phrase with many matches in the folder: its top impact tiers first, as the
                # whole index's (a query of several phrases scores the folder's matches faster
                # than the passes settle it)
                share = min(1.0, folder_rows / total_rows)
                hits = self._tiered_search(
                    phrases, queries, found, total_rows, avgdl, limit, None, False, folder, share
                )
                if hits is not None:
                    return hits
                self.keyword_trace.append("scope: every match in the folder scored")
            return self._scored(queries, idf, avgdl, limit, *folder, where_leads=rows_lead)
        where, scope_params = scope_condition(scope, "c")
        scoped = f"SELECT c.id FROM chunks c WHERE {where}"
        scope_rows = self._scope_rows(scoped, scope_params)
        if not scope_rows:
            return []
        if all(_single_lexeme(q) for q in queries) and sum(found) < SCOPE_MATCH_SHARE * scope_rows:
            self.keyword_trace.append(f"scope: {scope_rows} rows, the matches first (~{sum(found)})")
            return self._scored(queries, idf, avgdl, limit, f"f.id IN ({scoped})", scope_params, matches_lead=True)
        if scope_rows <= SCOPE_IDS_MAX:
            self.keyword_trace.append(f"scope: {scope_rows} rows, each tested")
            sorted_ids = f"f.id = ANY(ARRAY({scoped} ORDER BY c.id))"
            return self._scored(queries, idf, avgdl, limit, sorted_ids, scope_params, where_leads=True)
        self.keyword_trace.append(f"scope: over {SCOPE_IDS_MAX} rows, the planner's join")
        return self._scored(queries, idf, avgdl, limit, f"f.id IN ({scoped})", scope_params)

    def _scope_rows(self, scoped: str, params: dict[str, object]) -> int:
        """How many chunks the scope's id query `scoped` yields, counted up to SCOPE_IDS_MAX + 1
        (a path scope's ids come from the covering path index: ~0.1 us a chunk). The
        planner's own estimate of a folder's range is far off (71 expected where 2,001 were)."""
        row = self.conn.execute(
            f"SELECT count(*) FROM ({scoped} LIMIT {SCOPE_IDS_MAX + 1}) s", params, prepare=False
        ).fetchone()
        return int(row[0]) if row else 0

    def _full_search(self, queries: Sequence[str], limit: int) -> list[RankedChunk]:
        """Every match of the whole index scored, in one scan; its exact document frequencies
        are kept for later queries."""
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(queries)}
        params["all"] = " | ".join(f"({phrase})" for phrase in queries)
        params["limit"] = limit
        numbers = range(len(queries))
        # one scan ranks every match once per phrase (parallel workers may share the scan;
        # OFFSET 0 keeps the ranking below the window, so it runs once per row); each
        # phrase's document frequency is then counted over those rows by a window aggregate
        hits = ", ".join(f"count(*) FILTER (WHERE t{i} > 0) OVER () AS n{i}" for i in numbers)
        idf = (f"greatest(1e-6, ln((s.total_rows - m.n{i} + 0.5) / (m.n{i} + 0.5)))" for i in numbers)
        norm = f"{BM25_K1} * (1 - {BM25_B} + {BM25_B} * m.length / s.avgdl)"
        terms = " + ".join(f"{w} * (m.t{i} * {BM25_K1 + 1}) / (m.t{i} + {norm})" for i, w in enumerate(idf))
        sql = f"""WITH s AS (SELECT sum(rows)::float8 AS total_rows, COALESCE(NULLIF(sum(tokens)::float8 / sum(rows), 0), 1) AS avgdl,
                                    {LEXICAL_VERSION_SQL} AS version
                             FROM fts_stats HAVING sum(rows) > 0)
                  SELECT m.id, -({terms}) AS score, s.version, {", ".join(f"m.n{i}" for i in numbers)} FROM s, (
                      SELECT r.*, {hits} FROM (
                          SELECT f.id, f.length::float8 AS length, {_frequencies_sql(len(queries))}
                          FROM chunks_fts f WHERE f.document @@ %(all)s::tsquery OFFSET 0) r) m
                  ORDER BY score, m.id LIMIT %(limit)s"""
        rows = self.conn.execute(sql, self._exact(params), prepare=False).fetchall()
        if rows:
            self._remember_phrase_hits(str(rows[0][2]), dict(zip(queries, map(int, rows[0][3:]), strict=True)))
        return [RankedChunk(int(r[0]), float(r[1])) for r in rows]

    def _tiered_search(
        self,
        phrases: Sequence[tuple[list[str], bool]],
        queries: Sequence[str],
        found: Sequence[int],
        total_rows: int,
        avgdl: float,
        limit: int,
        every: str | None,
        every_few: bool,
        within: tuple[str, dict[str, object]] | None = None,
        share: float = 1.0,
    ) -> list[RankedChunk] | None:
        """The top `limit` from the chunks of the top impact tiers, or None when the bound
        cannot be met in bounded passes (the caller scores every match). `within`: a condition
        every pass also meets (a folder scope, about `share` of the index's rows): the bound
        holds for any set of chunks, so the top of the chunks meeting it is settled alike.

        A pass at tier t takes the chunks where some phrase reaches tier t; with `every` (the
        tsquery of all phrases at once) also the chunks holding every phrase where some phrase
        reaches a lower tier t2 (all of those when `every_few`): a short query's best chunks
        hold all its words. A chunk outside then either lacks a phrase (its others below t) or
        has all of them below t2. When the limit-th score of a pass falls short of its bound it
        is still a floor the true limit-th score reaches, and one last pass settles the top:
        the chunks of some tier plus those holding a set of phrases that could reach the floor
        below that tier (`_settling_pass`), whichever of those the planner expects smallest."""
        idf = _idfs(found, total_rows)
        widen = max(1.0, avgdl / IMPACT_REFERENCE_LENGTH)
        last = len(IMPACT_TIERS) - 1

        def parts(tier: int) -> list[float]:
            return [
                weight * min(BM25_K1 + 1, widen * IMPACT_TIERS[tier]) if n_hit else 0.0
                for weight, n_hit in zip(idf, found, strict=True)
            ]

        def plan(tier: int) -> tuple[int | None, float]:
            """The lower tier for the chunks holding every phrase (None: all of them) and the
            best score a chunk outside the pass's candidates can have."""
            if every is None:
                return None, sum(parts(tier))
            lacking = sum(parts(tier)) - min(parts(tier))
            for lower in range(tier, last + 1):
                if sum(parts(lower)) <= lacking:
                    return lower, lacking
            if every_few:
                return None, lacking
            return last, max(lacking, sum(parts(last)))

        def pass_condition(tier: int) -> tuple[str, dict[str, object]] | None:
            lower, _ = plan(tier)
            candidates = impact_tsquery(phrases, tier + 1)
            if candidates is None:
                return None
            params: dict[str, object] = {"candidates": candidates}
            where = "f.impacts @@ %(candidates)s::tsquery"
            if every is not None:
                params["every"] = every
                if lower is None:
                    where = f"({where} OR f.document @@ %(every)s::tsquery)"
                else:
                    params["every_tiers"] = impact_tsquery(phrases, lower + 1)
                    where = f"({where} OR (f.document @@ %(every)s::tsquery AND f.impacts @@ %(every_tiers)s::tsquery))"
            return _within(where, params, within)

        tier = 0
        for _ in range(IMPACT_STEPS):
            condition = pass_condition(tier)
            if condition is None:
                return None
            bound = plan(tier)[1]
            hits = self._scored(queries, idf, avgdl, limit, *condition, True)
            if len(hits) >= limit:
                kth = -hits[limit - 1].score
                self.keyword_trace.append(f"tier {IMPACT_LABELS[tier]}: kth {kth:.3f} bound {bound:.3f}")
                if kth >= bound:
                    return hits
                # a deeper tier whose bound the limit-th score already meets is sure to settle it too
                deeper = next((t for t in range(tier + 1, last + 1) if plan(t)[1] <= kth), None)
                settles = None if deeper is None else pass_condition(deeper)
                return self._settling_pass(
                    phrases,
                    queries,
                    idf,
                    avgdl,
                    limit,
                    kth,
                    parts,
                    settles,
                    [n * share for n in found],
                    within,
                    max(COUNTED_MAX_ESTIMATE, COUNTED_MAX_SHARE * total_rows),
                )
            self.keyword_trace.append(f"tier {IMPACT_LABELS[tier]}: {len(hits)} hits")
            if tier == last:
                return None
            tier = min(last, tier + IMPACT_STEP)
        return None

    def _settling_pass(
        self,
        phrases: Sequence[tuple[list[str], bool]],
        queries: Sequence[str],
        idf: Sequence[float],
        avgdl: float,
        limit: int,
        floor: float,
        parts: Callable[[int], list[float]],
        deeper_pass: tuple[str, dict[str, object]] | None,
        found: Sequence[float],
        within: tuple[str, dict[str, object]] | None,
        count_up_to: float,
    ) -> list[RankedChunk] | None:
        """The exact top `limit` when `floor` is a score the limit-th best chunk is known to
        reach (None: no candidate set looks cheaper than the scan of every match). Outside
        tier t's chunks a chunk has every phrase below t, so it scores less than the sum of
        `parts(t)` over the phrases it holds: tier t's chunks plus those holding some set of
        phrases whose parts reach the floor (MaxScore over phrase sets, each set through the
        document index) hold the whole top. Each tier gives one such candidate set; the one
        the planner expects to be smallest is scored, or `deeper_pass` (a tier pass whose bound
        the floor meets) when it expects that one smaller. A candidate set is sized by counting
        its tier's chunks while the planner expects at most `count_up_to` (it expects 20-350x
        too many of an impact tsquery's prefix words: at 100k chunks 5,721 where 70 were, which
        sent cheap settling passes to the scan) plus each phrase set's matches: a phrase's
        document frequency `found` (in the scope's share), the planner's estimate for sets of
        several. The scan it is weighed against reads
        at least the largest phrase's document frequency: the planner's own estimate of a
        prefix or phrase tsquery's matches falls far short of it (at 200k chunks ~5.6k expected
        where 48.7k matched).
        When the scan still looks cheaper, `deeper_pass` answers if there is one: its rows are
        a subset of the matches (one-phrase queries at 200k: 50-130 ms by the scan, 9-30 ms)."""
        choices: list[tuple[float, str, dict[str, object], str]] = []
        # no count needs to go past what the scan of every match costs, nor past the best so far
        cap = math.ceil(SETTLING_MAX_SHARE * max(found)) + 1
        if deeper_pass is not None:
            choices.append((self._counted_rows(*deeper_pass, cap, count_up_to), *deeper_pass, "pass"))
        shallower_sets: list[tuple[int, ...]] | None = None
        for tier in range(len(IMPACT_TIERS)):
            candidates = impact_tsquery(phrases, tier + 1)
            if candidates is None:
                return None
            params: dict[str, object] = {"candidates": candidates}
            where = "f.impacts @@ %(candidates)s::tsquery"
            sets = _phrase_sets_reaching(parts(tier), floor)
            if sets is None:
                continue  # too many sets at this tier: the index evaluates a long tsquery slowly
            if all((i,) in sets for i, part in enumerate(parts(tier)) if part > 0):
                continue  # every phrase alone reaches the floor: every match, the scan's rows and more
            if sets == shallower_sets:
                continue  # the same sets beside a deeper tier's chunks, which include the shallower's
            shallower_sets = sets
            cheapest = min((choice[0] for choice in choices), default=cap)
            rows: float = self._counted_rows(
                *_within(where, params, within), math.ceil(min(cheapest, cap)) + 1, count_up_to
            )
            if choices and rows >= min(choice[0] for choice in choices):
                break  # a deeper tier's own chunks include these: no deeper candidate set is smaller
            if sets:  # one index condition each: GIN evaluates short tsqueries faster than one long one
                for n, chosen in enumerate(sets):
                    params[f"holding{n}"] = " & ".join(f"({queries[i]})" for i in chosen)
                arms = [f"f.document @@ %(holding{n})s::tsquery" for n in range(len(sets))]
                rows += sum(found[chosen[0]] for chosen in sets if len(chosen) == 1)
                several = [arm for arm, chosen in zip(arms, sets, strict=True) if len(chosen) > 1]
                if several:
                    rows += self._estimated_rows(*_within(" OR ".join(several), params, within))
                where = f"({where} OR {' OR '.join(arms)})"
            where, params = _within(where, params, within)
            choices.append((rows, where, params, f"tier {IMPACT_LABELS[tier]}"))
            if not sets or choices[-1][0] > 2 * min(choice[0] for choice in choices):
                break  # a deeper tier takes more chunks of its own and drops fewer sets
        best = min(choices, key=lambda choice: choice[0], default=None)
        if best is None:
            self.keyword_trace.append(f"settle: over {SETTLING_MAX_SETS} phrase sets at every tier")
            return None
        estimate, where, params, label = best
        matches = float(max(found))
        if estimate > SETTLING_MAX_SHARE * matches:  # the planner may know the phrases' union larger
            every: dict[str, object] = {"all": " | ".join(f"({q})" for q in queries)}
            matches = max(matches, self._estimated_rows(*_within("f.document @@ %(all)s::tsquery", every, within)))
        if estimate > SETTLING_MAX_SHARE * matches:
            if deeper_pass is None:
                self.keyword_trace.append(f"settle: ~{estimate:.0f} of ~{matches:.0f} matches, the scan of every match")
                return None
            # a tier pass reads a subset of the matches, whatever the planner expects of it
            estimate, where, params, label = choices[0]
        self.keyword_trace.append(f"settle at {label}: ~{estimate:.0f} of ~{matches:.0f} matches")
        return self._scored(queries, idf, avgdl, limit, where, params, True)

    def _counted_rows(self, where: str, params: dict[str, object], cap: int, up_to: float) -> float:
        """How many lexical rows meet `where`, counted: for an impact tsquery, whose chunks are
        few and which the planner's statistics misjudge (see `_settling_pass`), the bitmap of
        its index and a heap page per row (~4 us a row), up to `cap`: a deep tier of common
        prefixes holds tens of thousands (the dense 100k: counting them all took 0.5-1.5 s a
        query, more than the scan they were weighed against)."""
        estimate = self._estimated_rows(where, params)
        if estimate > up_to:
            return estimate
        row = self.conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM chunks_fts f WHERE {where} LIMIT {int(cap)}) s",
            self._exact(params),
            prepare=False,
        ).fetchone()
        return int(row[0]) if row else 0

    def _exact(self, params: dict[str, object]) -> dict[str, object]:
        """`params` as a statement that reads rows runs them: each tsquery with the query's
        prefixes that stand for one lexeme as that lexeme (the same rows, found faster). The
        planner's estimates keep the prefixes: the passes are chosen by what it expects of them."""
        forms = self._sole_lexemes
        if not forms:
            return params
        return {
            key: _with_lexemes(value, forms) if isinstance(value, str) and _MATCH_PARAM.fullmatch(key) else value
            for key, value in params.items()
        }

    def _estimated_rows(self, where: str, params: dict[str, object]) -> float:
        """The planner's estimate of the lexical rows meeting `where` (a fraction of a
        millisecond: no row is read)."""
        row = self.conn.execute(
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM chunks_fts f WHERE {where}", params, prepare=False
        ).fetchone()
        assert row is not None  # EXPLAIN always answers
        return float(row[0][0]["Plan"]["Plan Rows"])

    def _scored(
        self,
        queries: Sequence[str],
        idf: Sequence[float],
        avgdl: float,
        limit: int,
        where: str,
        where_params: dict[str, object],
        where_leads: bool = False,
        matches_lead: bool = False,
    ) -> list[RankedChunk]:
        """The best `limit` of the matches that also meet `where` (over `chunks_fts f`), scored
        with the given idf and average length. `where` selects through its own index when
        `where_leads`: the match is then tested on its rows alone, not ANDed with every match's
        bitmap (all of a common word's chunks). With `matches_lead` the matches are read first
        (the document index) and `where` only filters them: a planner expecting few rows of
        `where` would otherwise test the match on each of them."""
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(queries)}
        params["all"] = " | ".join(f"({phrase})" for phrase in queries)
        params["limit"] = limit
        params["avgdl"] = avgdl
        params.update(where_params)
        terms = []
        for i, weight in enumerate(idf):
            params[f"idf{i}"] = weight
            terms.append(f"%(idf{i})s * (t{i} * {BM25_K1 + 1}) / (t{i} + m.norm)")
        match = "f.document @@ %(all)s::tsquery"
        rows = "chunks_fts f"
        if where_leads:
            match = f"({match}) IS TRUE"  # not an index condition
        elif matches_lead:
            # OFFSET 0: a subquery the scan of `where` cannot drive row by row; the ranking
            # above it runs on the rows meeting `where` alone
            rows = f"(SELECT f.id, f.length, f.document FROM chunks_fts f WHERE {match} OFFSET 0) f"
            match = "TRUE"
        # MATERIALIZED: each ts_rank_cd runs once per row, not once per use in the score
        sql = f"""WITH m AS MATERIALIZED (
                      SELECT f.id, {BM25_K1} * (1 - {BM25_B} + {BM25_B} * f.length::float8 / %(avgdl)s) AS norm,
                             {_frequencies_sql(len(queries))}
                      FROM {rows} WHERE {match} AND {where})
                  SELECT m.id, -({" + ".join(terms)}) AS score FROM m
                  ORDER BY score, m.id LIMIT %(limit)s"""
        return [
            RankedChunk(int(r[0]), float(r[1])) for r in self.conn.execute(sql, self._exact(params), prepare=False)
        ]  # planned for its terms

    def _document_frequencies(self, queries: Sequence[str], total_rows: int) -> list[int]:
        """Each phrase's document frequency over the whole index: remembered, else counted (on
        a large index estimated from a sample, rare phrases counted; a lone phrase's idf
        scales every score alike, so it keeps the sample's estimate)."""
        missing = [phrase for phrase in queries if phrase not in self._phrase_hits]
        if missing:
            if total_rows >= TIERED_MIN_ROWS:
                self._sample_phrases(missing, total_rows)
                if len(queries) == 1:
                    estimate = self._phrase_samples.get(queries[0], 0.0)
                    return [self._phrase_hits.get(queries[0], max(1, round(estimate)))]  # not 0: unknown
            rare = [phrase for phrase in missing if phrase not in self._phrase_hits]
            if rare:
                self._count_phrase_hits(rare)
            if any(phrase not in self._phrase_hits for phrase in queries):  # a write came between
                self._count_phrase_hits(queries)
        return [self._phrase_hits.get(phrase, 0) for phrase in queries]

    def _sample_phrases(self, phrases: Sequence[str], total_rows: int) -> None:
        """Estimate the chunks matching each tsquery: from the planner's statistics where they
        cover it (see LEXEME_STATISTICS), else from a fixed sample of about SAMPLED_ROWS lexical
        rows (REPEATABLE: the same rows while the table is unchanged, so a query keeps its
        scores; CONJUNCTION_SAMPLED_ROWS when only a conjunction is left): kept as a document
        frequency when the sample holds it SAMPLE_MIN_HITS times (a rarer phrase is counted
        where its idf is needed)."""
        wanted = [
            phrase for phrase in phrases if phrase not in self._phrase_samples and phrase not in self._phrase_hits
        ]
        if wanted and LEXEME_STATISTICS:
            wanted = self._frequencies_from_statistics(wanted, total_rows)
        if not wanted:
            return
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(wanted)}
        scored = any(not phrase.startswith("(") for phrase in wanted)  # not only a conjunction (see fts_search)
        params["percent"] = min(100.0, 100.0 * (SAMPLED_ROWS if scored else CONJUNCTION_SAMPLED_ROWS) / total_rows)
        counts = ", ".join(f"count(*) FILTER (WHERE document @@ %(q{i})s::tsquery)" for i in range(len(wanted)))
        row = self.conn.execute(
            f"""SELECT (SELECT {LEXICAL_VERSION_SQL} FROM fts_stats), count(*), {counts}
                FROM chunks_fts TABLESAMPLE SYSTEM (%(percent)s) REPEATABLE (0)""",
            self._exact(params),
            prepare=False,
        ).fetchone()
        assert row is not None  # an aggregate without GROUP BY always answers
        self._remember_phrase_hits(str(row[0]), {})
        sampled = max(1, int(row[1]))
        for phrase, hits in zip(wanted, map(int, row[2:]), strict=True):
            self._phrase_samples[phrase] = hits * total_rows / sampled
            if hits >= SAMPLE_MIN_HITS:
                self._phrase_hits[phrase] = round(hits * total_rows / sampled)

    def _frequencies_from_statistics(self, phrases: Sequence[str], total_rows: int) -> list[str]:
        """Keep the document frequency of each one-word phrase the planner's statistics cover
        (see LEXEME_STATISTICS); the phrases left for the sample."""
        single = {phrase: _single_lexeme(phrase) for phrase in phrases}
        if not any(single.values()):
            return list(phrases)
        shares, drift = self._lexeme_shares()
        left = []
        for phrase, word in single.items():
            share = None
            if word is not None and shares:
                lexeme, prefix = word
                if prefix:
                    listed = [f for e, f in shares.items() if e.startswith(lexeme)]
                    share = 1 - math.prod(1 - f for f in listed) if listed else None
                else:
                    share = shares.get(lexeme)
            estimate = None if share is None else share * total_rows
            if estimate is None or drift > STATS_DRIFT_SHARE * estimate:
                left.append(phrase)
                continue
            self._phrase_samples[phrase] = estimate
            self._phrase_hits[phrase] = max(1, round(estimate))
        return left

    def _lexeme_shares(self) -> tuple[dict[str, float], int]:
        """The share of the lexical rows holding each of the most common lexemes, as the last
        ANALYZE counted them (read once per ANALYZE and process), and how many lexical rows were
        written or deleted since (the cumulative statistics, which may lag a write by seconds)."""
        row = self._analyzed_state  # read by this search's first statement
        if row is None:
            return {}, 0
        drift, analyzed = row
        with _pool_lock:
            kept = _lexeme_memory.get(self.url)
        if kept is not None and kept[0] == analyzed:
            return kept[1], drift
        listed = self.conn.execute(
            """SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs
               FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
                    JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
               WHERE c.oid = 'chunks_fts'::regclass AND s.attname = 'document'""",
            prepare=False,
        ).fetchone()
        shares: dict[str, float] = {}
        if listed is not None and listed[0] is not None:
            # the frequencies end with the lowest, the highest and the null share: not lexemes'
            shares = dict(zip(listed[0], map(float, listed[1][: len(listed[0])]), strict=True))
        with _pool_lock:
            _lexeme_memory[self.url] = (analyzed, shares)
        return shares, drift

    def _count_phrase_hits(self, phrases: Sequence[str]) -> None:
        """Count the chunks holding each phrase over the whole index (one scan of their matches)."""
        params: dict[str, object] = {f"q{i}": phrase for i, phrase in enumerate(phrases)}
        params["any"] = " | ".join(f"({phrase})" for phrase in phrases)
        counts = ", ".join(f"count(*) FILTER (WHERE document @@ %(q{i})s::tsquery)" for i in range(len(phrases)))
        row = self.conn.execute(
            f"""SELECT (SELECT {LEXICAL_VERSION_SQL} FROM fts_stats), {counts}
                FROM chunks_fts WHERE document @@ %(any)s::tsquery""",
            self._exact(params),
            prepare=False,
        ).fetchone()
        assert row is not None  # an aggregate without GROUP BY always answers
        self._remember_phrase_hits(str(row[0]), dict(zip(phrases, map(int, row[1:]), strict=True)))

    def _remember_phrase_hits(self, version: str, hits: dict[str, int]) -> None:
        """Keep document frequencies for the lexical rows' `version`; a new version (any write
        since) forgets the older counts. Bounded: a long-lived server sees unbounded queries."""
        if version != self._phrase_hits_key or len(self._phrase_hits) + len(self._phrase_samples) > PHRASE_HITS_KEPT:
            # shared by the process's stores of this index at this version: a server opens a store
            # per call, whose own counts would start empty every time
            with _pool_lock:
                kept = _phrase_memory.get(self.url)
                if kept is None or kept[0] != version or len(kept[1]) + len(kept[2]) > PHRASE_HITS_KEPT:
                    kept = _phrase_memory[self.url] = (version, {}, {})
            self._phrase_hits_key, self._phrase_hits, self._phrase_samples = kept
        self._phrase_hits.update(hits)

    def vec_search(self, vector: np.ndarray, k: int, scope: SearchScope) -> list[RankedChunk]:
        """Chunks by cosine distance, nearest first. Unscoped: the HNSW index (approximate, with a
        candidate list of at least 4k, longer in a larger index), or an exact scan while there are too few vectors for
        one (HNSW_MIN_VECTORS). Scoped: exact over the scope's own vectors (a
        materialised set, so no index scan can cut it short). A zero vector is never a hit."""
        import numpy as np

        if k <= 0 or not self.has_vector_table() or not np.any(vector):
            return []
        query = np.asarray(vector, dtype=np.float32)
        if scope.is_all:
            # the index's size from the planner's estimate (kept by index builds and autovacuum);
            # strict_order: k beyond ef_search still gets k
            self.conn.execute(
                """SELECT set_config('hnsw.ef_search', LEAST(%(max)s, GREATEST(%(min)s, %(per_k)s,
                              %(min)s + (%(max)s - %(min)s) * (c.reltuples - %(from)s) / %(span)s))::int::text, false),
                          set_config('hnsw.iterative_scan', 'strict_order', false)
                   FROM pg_class c WHERE c.oid = 'chunk_vectors'::regclass""",
                {
                    "max": EF_SEARCH_MAX,
                    "min": EF_SEARCH_MIN,
                    "per_k": EF_SEARCH_PER_RESULT * k,
                    "from": EF_GROWS_FROM,
                    "span": EF_GROWS_TO - EF_GROWS_FROM,
                },
            )
            dims = len(query)  # the column's width: pgvector compares no vectors of two
            key = hnsw_key(dims)
            order = "embedding <=> %(q)s" if key is None else f"{key} <=> %(q)s::halfvec({dims})"
            rows = self.conn.execute(
                f"""SELECT id, embedding <=> %(q)s AS distance FROM chunk_vectors
                    ORDER BY {order} LIMIT %(k)s""",
                {"q": query, "k": k},
                prepare=False,  # planned for this query each time
            ).fetchall()
        else:
            where, params = scope_condition(scope, "c")
            params.update(q=query, k=k)
            # the scope's ids first, sorted, then their vectors in one index scan over them (leaf
            # pages read in turn, each heap page once) instead of a descent per chunk from a join:
            # at 1M chunks a 1 % scope touched 9k buffers instead of 40k, in 0.7x the time
            rows = self.conn.execute(
                f"""WITH scoped AS MATERIALIZED (
                        SELECT v.id, v.embedding <=> %(q)s AS distance FROM chunk_vectors v
                        WHERE v.id = ANY(ARRAY(SELECT c.id FROM chunks c WHERE {where} ORDER BY c.id)))
                    SELECT id, distance FROM scoped WHERE distance <> 'NaN' ORDER BY distance, id LIMIT %(k)s""",
                params,
                prepare=False,  # planned for this scope's size each time
            ).fetchall()
        hits = [RankedChunk(int(chunk_id), float(distance)) for chunk_id, distance in rows if distance == distance]
        hits.sort(key=lambda hit: (hit.score, hit.chunk_id))
        return hits

    def vectors_by_language(self, after_id: int, limit: int) -> VectorPage:
        import numpy as np

        if not self.has_vector_table():
            return VectorPage([], [], np.empty((0, 0), np.float32))
        rows = self.conn.execute(
            """SELECT v.id, COALESCE(c.language, 'unknown'), vector_send(v.embedding) FROM chunk_vectors v
               JOIN chunks c ON c.id = v.id WHERE v.id > %s ORDER BY v.id LIMIT %s""",
            (after_id, limit),
            binary=True,
        ).fetchall()
        if not rows:
            return VectorPage([], [], np.empty((0, 0), np.float32))
        matrix = np.frombuffer(b"".join(_vector_bytes(bytes(r[2])) for r in rows), dtype=np.float32)
        return VectorPage([int(r[0]) for r in rows], [str(r[1]) for r in rows], matrix.reshape(len(rows), -1).copy())

    def rewrite_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Replace stored vectors in place. Inside a transaction."""
        import numpy as np

        with self.conn.cursor() as cursor:
            cursor.executemany(
                "UPDATE chunk_vectors SET embedding = %s WHERE id = %s",
                [
                    (np.asarray(vector, dtype=np.float32), int(chunk_id))
                    for chunk_id, vector in zip(ids, vectors, strict=True)
                ],
            )
        self._vectors_changed = True

    def all_vectors(self) -> VectorMatrix:
        import numpy as np

        ids: list[int] = []
        buffer = bytearray()
        if self.has_vector_table():
            with self.conn.cursor(binary=True) as cursor:
                for chunk_id, sent in cursor.execute(
                    "SELECT id, vector_send(embedding) FROM chunk_vectors ORDER BY id"
                ):
                    ids.append(int(chunk_id))
                    buffer += _vector_bytes(bytes(sent))
        matrix = np.frombuffer(buffer, dtype=np.float32).reshape(len(ids), -1) if ids else np.empty((0, 0), np.float32)
        return VectorMatrix(np.array(ids, dtype=np.int64), matrix)

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        wanted = [int(i) for i in ids]
        if not wanted:
            return {}
        rows = self.conn.execute(
            """SELECT c.id, c.source_id, c.path, c.chunk_idx, c.breadcrumb, c.text, c.start_line, c.end_line,
                      f.updated_at, s.indexed_rev, s.kind
               FROM chunks c JOIN files f ON f.source_id = c.source_id AND f.path = c.path
               JOIN sources s ON s.source_id = c.source_id
               WHERE c.id = ANY(%s)""",
            (wanted,),
        )
        return {int(r[0]): ChunkRow(int(r[0]), *r[1:]) for r in rows}

    # ---- languages -------------------------------------------------------------------------

    def store_backfilled_languages(self, languages: Sequence[tuple[int, str]], upto_id: int, done_upto: int) -> None:
        with self.transaction():
            if languages:
                self.conn.execute(
                    """UPDATE chunks c SET language = u.language
                       FROM unnest(%s::bigint[], %s::text[]) AS u(id, language)
                       WHERE c.id = u.id AND c.language IS DISTINCT FROM u.language""",
                    ([chunk_id for chunk_id, _ in languages], [language for _, language in languages]),
                )
            if done_upto >= upto_id:
                self.conn.execute("DELETE FROM meta WHERE key = %s", (LANGUAGE_BACKFILL_KEY,))
            else:
                self._set_meta({LANGUAGE_BACKFILL_KEY: f"{upto_id}:{done_upto}"})

    def chunk_languages(self, ids: Iterable[int] | None = None) -> dict[int, str]:
        if ids is None:
            rows = self.conn.execute("SELECT id, language FROM chunks")
        else:
            rows = self.conn.execute("SELECT id, language FROM chunks WHERE id = ANY(%s)", ([int(i) for i in ids],))
        return {int(chunk_id): str(language) for chunk_id, language in rows}

    # ---- status and checks -----------------------------------------------------------------

    def server_memory(self) -> ServerMemory:
        row = self.conn.execute(
            """SELECT (SELECT COALESCE(sum(pg_total_relation_size(to_regclass(name))), 0)
                       FROM unnest(%s::text[]) AS name),
                      (SELECT setting::bigint * current_setting('block_size')::bigint
                       FROM pg_settings WHERE name = 'shared_buffers')""",
            (list(SEARCHED_TABLES),),
        ).fetchone()
        assert row is not None  # a query of constants always answers
        return ServerMemory(int(row[0]), int(row[1]))


# chunks per statement of a batch: the server writes one piece while the next is folded
PIECE_CHUNKS = 256


def _send_whole(conn: psycopg.Connection[Any]) -> None:
    """Send the rest of the pipeline's queued statements now. psycopg writes a statement only as
    far as the socket takes it and leaves the rest in libpq's buffer until the next statement is
    queued: a piece's statement (hundreds of kB) would wait there, unexecuted, while the next
    piece is folded, and folding and writing would take turns instead of overlapping. Results
    that arrive meanwhile are read into libpq's buffer (the server must never block on them)."""
    pgconn = conn.pgconn
    if pgconn.flush() == 0:
        return
    with selectors.DefaultSelector() as waiting:
        waiting.register(pgconn.socket, selectors.EVENT_READ | selectors.EVENT_WRITE)
        while True:
            for _, events in waiting.select():
                if events & selectors.EVENT_READ:
                    pgconn.consume_input()
            if pgconn.flush() == 0:
                return


def _pieces(files: Sequence[tuple[FileVersion, ParsedDocument]]) -> list[list[tuple[FileVersion, ParsedDocument]]]:
    """Consecutive runs of whole files of about PIECE_CHUNKS chunks each (at least one file)."""
    pieces: list[list[tuple[FileVersion, ParsedDocument]]] = [[]]
    size = 0
    for item in files:
        if size >= PIECE_CHUNKS:
            pieces.append([])
            size = 0
        pieces[-1].append(item)
        size += len(item[1].chunks)
    return pieces


def _folded(
    files: Sequence[tuple[FileVersion, ParsedDocument]], lexemes: set[str]
) -> list[tuple[Tsvector, int, Tsvector]]:
    """Each chunk's lexical row; their lexemes are added to `lexemes`."""
    rows = []
    for _, doc in files:
        for chunk in doc.chunks:
            document, length, impacts, words = _lexical_parts(chunk.breadcrumb, chunk.text)
            lexemes.update(words)
            rows.append((document, length, impacts))
    return rows


def _distinct_path_runs(
    files: Sequence[tuple[FileVersion, ParsedDocument]],
) -> Iterator[Sequence[tuple[FileVersion, ParsedDocument]]]:
    """Consecutive runs of `files` in which no path repeats (one statement writes a run)."""
    start = 0
    seen: set[str] = set()
    for n, (file, _) in enumerate(files):
        if file.path in seen:
            yield files[start:n]
            start, seen = n, set()
        seen.add(file.path)
    if start < len(files):
        yield files[start:]


def _frequencies_sql(phrases: int) -> str:
    """Each phrase's frequency in `f.document` as t0, t1, ...: ts_rank_cd's covers, one per hit."""
    return ", ".join(
        f"ts_rank_cd('{RANK_WEIGHTS}', f.document, %(q{i})s::tsquery, 0)::float8 / 0.5 AS t{i}" for i in range(phrases)
    )


def _phrase_sets_reaching(parts: Sequence[float], floor: float) -> list[tuple[int, ...]] | None:
    """The smallest sets of phrases (by index) whose parts sum to at least `floor` (a little
    less: a rounding error must not leave a chunk out), each set once; None when there are more
    than SETTLING_MAX_SETS. A chunk holding none of them scores less than the floor."""
    reach = floor * (1 - 1e-9) - 1e-12
    order = sorted((i for i, part in enumerate(parts) if part > 0), key=lambda i: -parts[i])
    remaining = [0.0] * (len(order) + 1)
    for n in range(len(order) - 1, -1, -1):
        remaining[n] = remaining[n + 1] + parts[order[n]]
    sets: list[tuple[int, ...]] = []
    visits = [0]

    def extend(start: int, chosen: tuple[int, ...], total: float) -> bool:
        visits[0] += 1
        if visits[0] > 100 * SETTLING_MAX_SETS:
            return False
        for n in range(start, len(order)):
            if total + remaining[n] < reach:
                return True  # nor can any later, smaller part
            picked = (*chosen, order[n])
            if total + parts[order[n]] >= reach:  # minimal: without its smallest part it falls short
                sets.append(tuple(sorted(picked)))
                if len(sets) > SETTLING_MAX_SETS:
                    return False
            elif not extend(n + 1, picked, total + parts[order[n]]):
                return False
        return True

    return sets if extend(0, (), 0.0) else None


_SINGLE_LEXEME = re.compile(r"'((?:[^'\\]|''|\\.)*)'(:\*)?")


_MATCH_PARAM = re.compile(r"q\d+|holding\d+|all|any|every|every_tiers|candidates")  # the tsqueries of a match


def _prefix_ranges(phrases: Sequence[tuple[list[str], bool]]) -> list[tuple[str, str]]:
    """Each distinct prefix of `phrases` (a phrase's last word) with the least string above
    every string it begins (code point order, the lexemes' byte order under COLLATE "C"); a
    prefix no string is above is left out, and so is one a tsquery would spell with escapes."""
    ranges: dict[str, str] = {}
    for tokens, prefix in phrases:
        low = tokens[-1]
        if not prefix or low in ranges or "'" in low or "\\" in low:
            continue
        after = ord(low[-1]) + 1
        if 0xD800 <= after <= 0xDFFF:
            after = 0xE000  # no text holds a surrogate
        if after <= sys.maxunicode:
            ranges[low] = low[:-1] + chr(after)
    return list(ranges.items())


def _sole_lexeme_forms(exact: Mapping[str, str]) -> dict[str, str]:
    """The tsquery items (quoted, `:*`) of prefixes that stand for one lexeme in the documents
    and the impact tiers (`label|prefix`), each with its lexeme's item. A prefix's impact words
    name the lexemes of the chunk it begins: for these, that one."""
    forms: dict[str, str] = {}
    for prefix, lexeme in exact.items():
        forms[_lexeme(prefix) + ":*"] = _lexeme(lexeme)
        if len(lexeme.encode()) + 2 <= MAX_LEXEME_BYTES:
            for label in IMPACT_LABELS:
                forms[_lexeme(f"{label}|{prefix}") + ":*"] = _lexeme(f"{label}|{lexeme}")
    return forms


def _with_lexemes(tsquery: str, forms: Mapping[str, str]) -> str:
    """`tsquery` with each item of `forms` replaced (an item is quoted whole: no other item
    contains it, and the words of a match hold no quote)."""
    for item, lexeme in forms.items():
        if item in tsquery:
            tsquery = tsquery.replace(item, lexeme)
    return tsquery


def _within(
    where: str, params: dict[str, object], within: tuple[str, dict[str, object]] | None
) -> tuple[str, dict[str, object]]:
    """`where` also meeting the condition `within` (None: as it is)."""
    if within is None:
        return where, params
    return f"({where}) AND {within[0]}", {**params, **within[1]}


def _single_lexeme(tsquery: str) -> tuple[str, bool] | None:
    """The lexeme of a one-word phrase's tsquery (see `_phrase_tsquery`) and whether it is a
    prefix; None for a phrase of several words or a conjunction."""
    found = _SINGLE_LEXEME.fullmatch(tsquery)
    if found is None:
        return None
    return re.sub(r"''|\\(.)", lambda m: m.group(1) or "'", found.group(1)), bool(found.group(2))


def _idfs(found: Sequence[int], total_rows: int) -> list[float]:
    """FTS5's idf of each phrase from its document frequency."""
    return [max(1e-6, math.log((total_rows - n_hit + 0.5) / (n_hit + 0.5))) for n_hit in found]


def _stored_tag_keys(tags: object) -> list[str]:
    """A file's `file_tags` keys as PostgreSQL stores them (see `_text`), each once."""
    return list(dict.fromkeys(_text(key) for key in file_tag_keys(tags)))


_text = no_nul
_opt_text = POSTGRES.opt_text


__all__ = ["PG_MIGRATIONS", "PG_SCHEMA_VERSION", "PostgresStore", "describe", "forget_phrase_counts", "is_postgres_url"]
