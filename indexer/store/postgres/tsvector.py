"""Text as both backends index it, on PostgreSQL: folded by SQLite's own unicode61 tokenizer
(remove_diacritics 2, through apsw: PostgreSQL's parser and dictionaries split and fold
differently, and pgvector's bundled servers have no `unaccent`, so one tokenizer makes both
backends match the same words), built into tsvectors position by position and sent in the
binary form the server reads without parsing; with each chunk's impact tiers, and scopes as
SQL conditions over the same text."""

from __future__ import annotations

import functools
import itertools
import os
import struct
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from psycopg.adapt import Dumper
from psycopg.pq import Format

from indexer.store.core import POSTGRES, no_nul, place_conditions, time_conditions
from indexer.store.rows import (
    SearchScope,
    tag_key,
)
from indexer.store.schema import file_tag_keys

MAX_POSITION = 16383  # tsvector positions above this collapse into it
MAX_POSITIONS_PER_LEXEME = 256  # tsvector keeps no more per lexeme
MAX_LEXEME_BYTES = 2046  # a longer token cannot be a lexeme: it is not indexed (nor found)
BM25_K1 = 1.2
BM25_B = 0.75

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
SHARED_PREFIX_MIN = 3  # a shorter prefix in a query has no summed tiers: the full scan answers it


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


def quoted_lexeme(token: str) -> str:
    if "'" in token or "\\" in token:
        token = token.replace("\\", "\\\\").replace("'", "''")
    return "'" + token + "'"


# a token of at most this many characters fits MAX_LEXEME_BYTES whatever it holds (4 bytes each)
SURELY_INDEXABLE = MAX_LEXEME_BYTES // 4


def indexable(token: str) -> bool:
    return len(token) <= SURELY_INDEXABLE or len(token.encode("utf-8")) <= MAX_LEXEME_BYTES


TSVECTOR_OID = 3614  # a built-in type: the same oid on every server
WEIGHT_A = 3  # the weight bits of a breadcrumb position (the text's, D, are 0)


class Tsvector(bytes):
    """A tsvector as `tsvectorrecv` reads it: int32 count, then per lexeme (in byte order) its
    UTF-8 bytes, a NUL, a uint16 count of positions and each as uint16 weight << 14 | position.
    Sent so, a lexical row costs the server half of what parsing and sorting its text costs."""


class TsvectorDumper(Dumper):
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
        if len(token) > SURELY_INDEXABLE and not indexable(token):
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
    return _words_tsvector(f for f in folders if f and indexable(f))


def lexical_row(breadcrumb: str, text: str) -> tuple[Tsvector, int, Tsvector]:
    """What `chunks_fts` keeps of a chunk: its tsvector (breadcrumb hits weighted A, text hits
    D; one empty position between the two columns so that no phrase spans both), its token
    count and its impact tiers (`impact_words`). Positions past MAX_POSITION collapse into it,
    once (the first, a breadcrumb's if any), as the server's text input keeps them."""
    document, length, impacts, _ = lexical_parts(breadcrumb, text)
    return document, length, impacts


def lexical_parts(breadcrumb: str, text: str) -> tuple[Tsvector, int, Tsvector, Iterable[str]]:
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
        if tf >= lowest and len(token) <= SURELY_INDEXABLE - 2
    ]
    # the lexemes holding a prefix are adjacent once sorted: each pair adds its shared prefixes
    shared: dict[str, int] = {}
    ordered = sorted(frequencies)
    for before, token in itertools.pairwise(ordered):
        if before[:SHARED_PREFIX_MIN] != token[:SHARED_PREFIX_MIN]:
            continue  # most pairs: nothing shared worth a word
        common = min(len(os.path.commonprefix((before, token))), SURELY_INDEXABLE - 2)  # noqa: RUF071 - characters wanted
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


stored_text = no_nul


stored_opt_text = POSTGRES.opt_text


def stored_tag_keys(tags: object) -> list[str]:
    """A file's `file_tags` keys as PostgreSQL stores them (see `stored_text`), each once."""
    return list(dict.fromkeys(stored_text(key) for key in file_tag_keys(tags)))


def scope_condition(scope: SearchScope, alias: str = "c") -> tuple[str, dict[str, object]]:
    """SQL condition over `chunks` (or `files`) under `alias`, and its bindings (the same
    semantics as the SQLite store's)."""
    clauses: list[str] = []
    params: dict[str, object] = {}
    if scope.source_ids:
        params["scope_sources"] = list(scope.source_ids)
        clauses.append(f"{alias}.source_id = ANY(%(scope_sources)s)")
    clauses.extend(place_conditions(scope, alias, POSTGRES, params))
    # tags (all of them, by tag_key) and the time window, as the files that pass: a narrow
    # filter starts from its few files (file_tags' key, idx_files_updated)
    times = time_conditions(scope, POSTGRES, params)
    if times:
        clauses.append(
            f"({alias}.source_id, {alias}.path) IN (SELECT u.source_id, u.path FROM files u WHERE {' AND '.join(times)})"
        )
    for i, tag in enumerate(dict.fromkeys(tag_key(tag) for tag in scope.tags)):
        params[f"scope_tag{i}"] = stored_text(tag)  # as `file_tags` holds it
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
    folder = stored_text(scope.path.strip("/"))
    if not folder or not indexable(folder):
        return None
    params: dict[str, object] = {"scope_folder": quoted_lexeme(folder)}
    where = "f.scope @@ %(scope_folder)s::tsquery"
    if scope.source_ids:
        params["scope_sources"] = list(scope.source_ids)
        where += " AND f.source_id = ANY(%(scope_sources)s)"
    return where, params
