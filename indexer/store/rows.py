"""The values that cross the store's boundary: what a search may return (`SearchScope`) and every
row the store hands back, typed and immutable.

Nothing here knows SQL, so a second backend returns the same types. Records are frozen
dataclasses; results that callers unpack by position (a hit as `chunk_id, score`, a page of
vectors as `ids, languages, matrix`) are NamedTuples, which are typed and immutable too and keep
that unpacking working without a copy per row on the hot search path.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # numpy is imported where vectors are touched, keeping lexical queries light
    import numpy as np


_TAG_LEAD = re.compile(r"^[\s#]+")


def tag_key(tag: str) -> str:
    """How tags compare, in the index and in a filter: Unicode NFC, case-folded, without the
    `#` a note or a user may write before it and without surrounding blanks (`#DevOps` ->
    `devops`). '' for a tag that is nothing else."""
    text = _TAG_LEAD.sub("", unicodedata.normalize("NFC", tag)).rstrip()
    return unicodedata.normalize("NFC", text.casefold())  # idempotent: a key is its own key


@dataclass(frozen=True, slots=True)
class SearchScope:
    """Which chunks a search may return. Empty fields mean "no restriction"; every field given
    must hold (they combine with AND).

    Where: `source_ids` (any of them), `collection`, `path`. What: `tags`, the file's
    front-matter tags, every one required (all-of: repeating a tag narrows), compared by
    `tag_key`. When: `updated_since <= files.updated_at < updated_before`, in Unix seconds;
    `updated_at` is the file's mtime (workspace) or the commit time of the commit that gave the
    file its indexed content (git).
    """

    source_ids: tuple[str, ...] = ()
    collection: str | None = None
    path: str | None = None  # a file, or a folder searched recursively ('' = the whole source)
    tags: tuple[str, ...] = ()
    updated_since: float | None = None  # inclusive
    updated_before: float | None = None  # exclusive

    @property
    def is_all(self) -> bool:
        """Nothing restricted: the whole index (what the resident vectors and vec0's unfiltered
        KNN may answer)."""
        return not self.source_ids and self.collection is None and not self.path and not self.has_filters

    @property
    def has_filters(self) -> bool:
        """A tag or time filter is set (a restriction on files, wherever they are)."""
        return bool(self.tags) or self.updated_since is not None or self.updated_before is not None


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk with what a hit needs of its file and source."""

    id: int
    source_id: str
    path: str
    chunk_idx: int
    breadcrumb: str
    text: str
    start_line: int
    end_line: int
    updated_at: float
    indexed_rev: str | None
    kind: str


@dataclass(frozen=True, slots=True)
class SourceStats:
    """One source's sync state with its file, chunk and pending-vector counts (status)."""

    source_id: str
    kind: str
    indexed_rev: str | None
    last_sync_at: str | None
    last_error: str | None
    files: int
    chunks: int
    pending: int


class SourceState(NamedTuple):
    """Where a source's index stands: the revision indexed (git) and when a whole sync of it last
    finished (None: never, e.g. a first sync was killed). Both None for an unknown source."""

    indexed_rev: str | None
    last_sync_at: str | None


@dataclass(frozen=True, slots=True)
class ServerMemory:
    """A database server's buffer pool beside the tables and indexes searches read. When they
    outgrow the pool, a search meeting words or vectors no recent search read copies their pages
    in from the operating system's cache first: at 1M chunks (9 GB searched) with a 4 GB pool, a
    hybrid search's p50 was 77 ms the first time and 47 ms once its pages were in."""

    searched_bytes: int
    buffer_pool_bytes: int

    @property
    def fits(self) -> bool:
        return self.searched_bytes <= self.buffer_pool_bytes

    def to_json(self) -> dict[str, object]:
        return {
            "searched_bytes": self.searched_bytes,
            "buffer_pool_bytes": self.buffer_pool_bytes,
            "fits": self.fits,
        }


@dataclass(frozen=True, slots=True)
class ScopeCounts:
    """Files, chunks and chunks waiting for a vector of one source inside a scope."""

    files: int = 0
    chunks: int = 0
    pending: int = 0

    def to_json(self) -> dict[str, int]:
        return {"files": self.files, "chunks": self.chunks, "pending": self.pending}


@dataclass(frozen=True, slots=True)
class FileRow:
    """A file as indexed: what the table of contents shows of it."""

    source_id: str
    path: str
    title: str | None
    tags: tuple[str, ...]
    headings: tuple[str, ...]
    collection: str | None
    sha256: str
    size: int
    updated_at: float
    front_matter_problem: str | None = None


@dataclass(frozen=True, slots=True)
class CollectionRow:
    """A collection declared in a source (`_meta.yaml`); `files` counts the indexed files in it
    (0 where the store returns the declarations only, as `collection_rows`)."""

    source_id: str
    name: str
    folder: str
    description: str
    tags: tuple[str, ...]
    files: int = 0


class PendingChunk(NamedTuple):
    """A chunk waiting for its vector, with the exact text to embed."""

    id: int
    content_hash: str
    text: str


class RankedChunk(NamedTuple):
    """One hit of a lexical or vector search: bm25 (lower is better) or cosine distance (nearer
    is better)."""

    chunk_id: int
    score: float


class ChunkText(NamedTuple):
    """A chunk's prose, as language detection reads it."""

    id: int
    text: str


class LanguageBackfill(NamedTuple):
    """Progress of detecting the languages of chunks written before chunks had one: every chunk
    up to `upto_id` predates the language column; those up to `after_id` are done."""

    upto_id: int
    after_id: int


class VectorPage(NamedTuple):
    """Stored vectors in id order with their chunks' languages ("unknown" when undetected); a
    chunk's windows are consecutive rows under its repeated id, first window first."""

    def first_windows(self) -> np.ndarray:
        """A boolean mask of the rows holding a chunk's first window (its own vector)."""
        import numpy as np

        ids = np.asarray(self.ids, dtype=np.int64)
        mask = np.ones(len(ids), dtype=bool)
        mask[1:] = ids[1:] != ids[:-1]
        return mask

    ids: list[int]
    languages: list[str]
    matrix: np.ndarray


class VectorMatrix(NamedTuple):
    """Every stored vector: chunk ids ascending (a chunk's windows under its repeated id, first
    window first) and a writable float32 matrix, one row each."""

    ids: np.ndarray
    matrix: np.ndarray


def chunk_windows(ids: Sequence[int], vectors: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(chunk id, its windows' rows) for rows given as the store takes them: a chunk's windows
    consecutive under its repeated id, first window first."""
    start = 0
    for end in range(1, len(ids) + 1):
        if end == len(ids) or ids[end] != ids[start]:
            yield int(ids[start]), vectors[start:end]
            start = end


class NearestWindow(NamedTuple):
    """Which window of a chunk longer than the model reads is nearest a query."""

    window: int  # from 0: the chunk's own (first) vector
    windows: int
    line: int | None  # the line of the chunk's text where that window's own text begins, if stored


def encode_window_lines(starts: Sequence[int]) -> str:
    """A text's window starts as stored: the lines of windows 2, 3, ... (the first begins at 0)."""
    return ",".join(str(line) for line in starts[1:])


def decode_window_lines(stored: str) -> list[int]:
    """`encode_window_lines` read back: every window's start, the first's 0 included."""
    return [0, *(int(line) for line in stored.split(","))]


def nearest_window_of(distances: Iterable[Sequence[Any]], lines: Mapping[int, str]) -> dict[int, NearestWindow]:
    """From (chunk id, window index, distance) rows, each chunk's nearest window, for chunks with
    more than one (a distance of None or NaN, a zero vector's, is never nearest; ties go to the
    earlier window); `lines`: the stored window lines by chunk id (`encode_window_lines`)."""
    best: dict[int, tuple[float, int]] = {}
    windows: dict[int, int] = {}
    for chunk_id, window, distance in distances:
        cid, idx = int(chunk_id), int(window)
        windows[cid] = windows.get(cid, 0) + 1
        if distance is None or distance != distance:
            continue
        if cid not in best or (float(distance), idx) < best[cid]:
            best[cid] = (float(distance), idx)
    found = {}
    for cid, (_, idx) in best.items():
        if windows[cid] < 2:
            continue
        starts = decode_window_lines(lines[cid]) if cid in lines else []
        # lines of another cut (a window count that differs) are not this chunk's
        line = starts[idx] if len(starts) == windows[cid] else None
        found[cid] = NearestWindow(idx, windows[cid], line)
    return found


def split_windows(blob: bytes, dims: int) -> list[bytes]:
    """A chunk's carried vector bytes (its windows' float32 vectors concatenated) one per window."""
    width = 4 * dims
    if width <= 0 or len(blob) <= width:
        return [blob]
    return [blob[at : at + width] for at in range(0, len(blob), width)]


def json_strings(column: str | None) -> tuple[str, ...]:
    """A stored JSON list column (tags, headings) as strings; anything else stored there reads as none."""
    value = json.loads(column or "[]")
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


FILE_ROW_COLUMNS = "source_id, path, title, tags, headings, collection, sha256, size, updated_at, front_matter_problem"


def file_row(values: Sequence[Any]) -> FileRow:
    """A `files` row read as FILE_ROW_COLUMNS (the same columns on every backend)."""
    source, path, title, tags, headings, collection, sha256, size, updated, problem = values
    return FileRow(
        source,
        path,
        title,
        json_strings(tags),
        json_strings(headings),
        collection,
        sha256,
        int(size),
        float(updated),
        problem,
    )


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A file whose front matter could not be taken as written (see `indexer.frontmatter`)."""

    source_id: str
    path: str
    problem: str


# the files with a front-matter problem, by source and path (`?` is the backend's placeholder)
FRONT_MATTER_PROBLEMS_SQL = (
    "SELECT source_id, path, front_matter_problem FROM files"
    " WHERE front_matter_problem IS NOT NULL AND source_id = ? ORDER BY path"
)
