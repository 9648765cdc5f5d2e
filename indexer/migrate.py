"""Copy an index into another store (SQLite -> PostgreSQL), vectors included, without the model.

The copy goes through the store protocol only, so any backend can be either end: each file is
written again with its stored chunks and their stored vectors (write_files, a batch of files at
a time: a chunk's row is written once, already embedded; chunks pending in the source stay
pending). Chunk ids are remapped consistently: files are
written in the order of their first chunk id and chunks by index, so the target's ids ascend
in the same order as the source's. Meta (embedding identity, language statistics, chunker
versions), sources with their revision and last error, collections and each chunk's language
are copied; the target is then counted against the source, per source.

A copy is marked unfinished in the target's meta before anything is written and unmarked
once verified: a migrate killed halfway leaves a target that says so (`status`), and running
migrate again replaces that partial copy without --force, which only another index needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from indexer.errors import StoreError
from indexer.model import Chunk, FileVersion, ParsedDocument
from indexer.store import (
    COPY_UNFINISHED_KEY,
    LANGUAGE_BACKFILL_KEY,
    IndexWriter,
    SourceStats,
    chunk_windows,
    content_hash,
    is_unfinished_copy,
)

FILES_PER_TRANSACTION = 200
CHUNK_PAGE = 2000
VECTOR_PAGE = 2000
# kept by each store itself, never copied: the target's own schema step count, its copy state
LOCAL_META = frozenset(
    {"schema_version", "vectors_generation", "sqlite_vec_version", "pgvector_version", COPY_UNFINISHED_KEY}
)

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True)
class MigrationReport:
    sources: int
    files: int
    chunks: int
    vectors: int
    pending: int
    replaced_unfinished: bool = False  # the target held a copy an earlier migrate did not finish


class TargetNotEmpty(StoreError):
    """The target already holds an index (replaced only when asked to)."""


def migrate(
    source: IndexWriter, target: IndexWriter, *, force: bool = False, progress: Progress | None = None
) -> MigrationReport:
    """Copy `source` into `target` and verify the counts; raises StoreError on any difference."""
    report = progress or (lambda stage, done, total: None)
    if source.language_backfill() is not None:
        raise StoreError("the index still detects the languages of older chunks: run `notes-search sync` first")
    existing = target.source_ids()
    counts = target.counts()
    unfinished = is_unfinished_copy(target.meta())
    if (existing or counts.get("files", 0) or counts.get("chunks", 0)) and not (force or unfinished):
        raise TargetNotEmpty(
            f"the target already holds an index ({counts.get('files', 0)} files, {len(existing)} sources);"
            " pass --force to replace it"
        )
    target.set_meta({COPY_UNFINISHED_KEY: "1"})
    for source_id in existing:
        target.remove_source(source_id)
    meta = source.meta()
    stats = source.source_stats()
    if source.has_vector_table():
        dims = meta.get("embedding_dims", "")
        if not dims.isdigit():
            raise StoreError(f"the index holds vectors but records no embedding dimensions ({dims!r})")
        target.reset_vectors(int(dims), {})
    target.set_meta({key: value for key, value in meta.items() if key not in LOCAL_META | {LANGUAGE_BACKFILL_KEY}})
    with target.bulk_load(whole_space=True):
        vectors = _copy_files(source, target, stats, report)
    target.store_window_lines(source.window_lines())
    _copy_source_states(target, stats)
    copied = verify(source, target, vectors)
    target.delete_meta([COPY_UNFINISHED_KEY])
    return dataclasses.replace(copied, replaced_unfinished=unfinished)


def _copy_files(source: IndexWriter, target: IndexWriter, stats: list[SourceStats], report: Progress) -> int:
    """Write every file with its chunks and their vectors; returns the vectors stored."""
    ids_by_file: dict[tuple[str, str], list[int]] = {}
    for page in _chunk_id_pages(source):
        for chunk_id, chunk in sorted(source.chunk_rows(page).items()):
            ids_by_file.setdefault((chunk.source_id, chunk.path), []).append(chunk_id)
    files = [(s.source_id, row) for s in stats for row in source.file_rows(s.source_id)]
    known = {s.source_id: source.known_files(s.source_id) for s in stats}
    # files without chunks (empty notes) first, then by first chunk id: target ids keep the order
    files.sort(key=lambda item: (min(ids_by_file.get((item[0], item[1].path), [0])), item[0], item[1].path))
    for s in stats:
        target.ensure_source(s.source_id, s.kind)
    stream = _VectorStream(source) if source.has_vector_table() else None
    total = len(files)
    for start in range(0, total, FILES_PER_TRANSACTION):
        batch = files[start : start + FILES_PER_TRANSACTION]
        batch_ids = [i for source_id, row in batch for i in ids_by_file.get((source_id, row.path), [])]
        rows = source.chunk_rows(batch_ids)
        languages = source.chunk_languages(batch_ids)
        vectors_by_id = stream.take(batch_ids) if stream is not None else {}
        calls: list[_WriteCall] = []
        languages_by_text: dict[str, str] = {}
        for source_id, row in batch:
            chunk_ids = sorted(ids_by_file.get((source_id, row.path), []), key=lambda i: rows[i].chunk_idx)
            chunks = [
                Chunk(rows[i].chunk_idx, rows[i].breadcrumb, rows[i].text, rows[i].start_line, rows[i].end_line)
                for i in chunk_ids
            ]
            languages_by_text.update((rows[i].text, languages.get(i, "unknown")) for i in chunk_ids)
            given: dict[str, bytes] = {}
            waiting: set[str] = set()
            for i, written in zip(chunk_ids, chunks, strict=True):
                digest = content_hash(written.embed_text)
                if i in vectors_by_id:
                    given.setdefault(digest, vectors_by_id[i])
                else:
                    waiting.add(digest)
            stat = known[source_id].get(row.path)
            file = FileVersion(
                path=row.path,
                text="",  # the store keeps chunks, not the file's text
                sha256=row.sha256,
                size=row.size,
                mtime=stat.mtime if stat is not None else None,
                updated_at=row.updated_at,
                collection=row.collection,
            )
            doc = ParsedDocument(
                row.title or "",
                list(row.tags),
                list(row.headings),
                chunks=chunks,
                front_matter_problem=row.front_matter_problem,
            )
            call = calls[-1] if calls else None
            if call is None or not call.takes(source_id, given, waiting):
                call = _WriteCall(source_id)
                calls.append(call)
            call.add(file, doc, given, waiting)
        with target.transaction():
            for call in calls:  # in the order of their first chunk ids
                target.write_files(
                    call.source_id,
                    call.files,
                    _lookup(languages_by_text),
                    call.vectors if stream is not None else None,
                )
        report("files", min(start + FILES_PER_TRANSACTION, total), total)
    for s in stats:
        declared = source.collection_rows(s.source_id)
        if declared:
            with target.transaction():
                target.replace_collections(s.source_id, declared)
    return target.counts().get("vectors", 0)


@dataclass
class _WriteCall:
    """Files of one source written by one `write_files`. Its vectors go by text (content hash)
    to every chunk of the call, so a text left pending in one file (an embedding pass cut short
    between two batches can leave one copy of a text embedded and another waiting) goes in
    another call than a file where it has a vector: each chunk is copied as it is. (Both cases
    in one file cannot be told apart; verification then names the difference.)"""

    source_id: str
    files: list[tuple[FileVersion, ParsedDocument]] = field(default_factory=list)
    vectors: dict[str, bytes] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)

    def takes(self, source_id: str, given: dict[str, bytes], waiting: set[str]) -> bool:
        return source_id == self.source_id and not (given.keys() & self.waiting or waiting & self.vectors.keys())

    def add(self, file: FileVersion, doc: ParsedDocument, given: dict[str, bytes], waiting: set[str]) -> None:
        self.files.append((file, doc))
        for digest, vector in given.items():
            self.vectors.setdefault(digest, vector)
        self.waiting |= waiting


def _lookup(languages: dict[str, str]) -> Callable[[str], str]:
    """The stored language of a chunk text: detection is not run again."""
    return lambda text: languages.get(text, "unknown")


def _chunk_id_pages(source: IndexWriter) -> Iterator[list[int]]:
    ids = sorted(source.chunk_languages())
    for start in range(0, len(ids), CHUNK_PAGE):
        yield ids[start : start + CHUNK_PAGE]


class _VectorStream:
    """The source's stored vectors, read in id order a page at a time and handed out by chunk id:
    files go in the order of their first chunk id and a file's chunks are written together, so
    each batch asks for ids just past the previous one's and little is held meanwhile."""

    def __init__(self, source: IndexWriter) -> None:
        self.source = source
        self.held: dict[int, bytes] = {}
        self.after = 0
        self.done = False

    def take(self, ids: list[int]) -> dict[int, bytes]:
        """The vectors of those of `ids` that have one (float32 bytes, a chunk's windows
        concatenated, first window first), by id."""
        import numpy as np

        wanted = max(ids, default=0)
        while not self.done and self.after < wanted:
            page = self.source.vectors_by_language(self.after, VECTOR_PAGE)
            if not page.ids:
                self.done = True
                break
            self.after = page.ids[-1]
            matrix = np.ascontiguousarray(page.matrix, dtype=np.float32)
            self.held.update((chunk_id, windows.tobytes()) for chunk_id, windows in chunk_windows(page.ids, matrix))
        return {i: vector for i in ids if (vector := self.held.pop(i, None)) is not None}


def _copy_source_states(target: IndexWriter, stats: list[SourceStats]) -> None:
    for s in stats:
        if s.last_sync_at is not None:  # a source whose first sync never finished stays incomplete
            target.mark_synced(s.source_id, indexed_rev=s.indexed_rev, error=s.last_error)
        elif s.last_error is not None:
            target.set_source_error(s.source_id, s.last_error)


def verify(source: IndexWriter, target: IndexWriter, vectors: int) -> MigrationReport:
    """Compare totals and per-source counts; raises StoreError naming the first difference."""
    theirs, ours = source.counts(), target.counts()
    for key in ("files", "chunks", "vectors", "pending"):
        if theirs.get(key, 0) != ours.get(key, 0):
            raise StoreError(
                f"copy differs: {key} {theirs.get(key, 0)} in the source, {ours.get(key, 0)} in the target"
            )
    wanted = {s.source_id: (s.kind, s.indexed_rev, s.files, s.chunks, s.pending) for s in source.source_stats()}
    found = {s.source_id: (s.kind, s.indexed_rev, s.files, s.chunks, s.pending) for s in target.source_stats()}
    if wanted != found:
        differing = sorted(sid for sid in wanted.keys() | found.keys() if wanted.get(sid) != found.get(sid))
        raise StoreError(
            f"copy differs for source {differing[0]}: {wanted.get(differing[0])} vs {found.get(differing[0])}"
        )
    meta_theirs, meta_ours = source.meta(), target.meta()
    for key, value in meta_theirs.items():
        if key not in LOCAL_META and meta_ours.get(key) != value:
            raise StoreError(f"copy differs: meta {key!r}")
    return MigrationReport(
        sources=len(wanted),
        files=ours.get("files", 0),
        chunks=ours.get("chunks", 0),
        vectors=vectors,
        pending=ours.get("pending", 0),
    )
