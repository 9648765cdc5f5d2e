"""The vector half of a sync: attach vectors to pending chunks (bounded when a search waits on
it), repair the zero vectors an older version stored, and keep the language-neutral space's
statistics in step with the vectors. `Syncer` runs it after the files of a run are written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from indexer import neutral
from indexer.config import Config
from indexer.embed_health import Outage, embedder_health
from indexer.errors import EmbedderError, EmbedderUnavailable, NotesSearchError
from indexer.lock import IndexLock
from indexer.progress_log import Progress
from indexer.store import IndexWriter, PendingChunk, VectorPage

if TYPE_CHECKING:
    import numpy as np

    from indexer.embedders import Embedder
    from indexer.reports import SyncReport

log = logging.getLogger("notes_search.sync")

# set once every stored vector was checked for a zero length (see VectorWork.repair_zero_vectors)
ZERO_VECTORS_CHECKED_KEY = "zero_vectors_checked"
STORED_MIN_NORM = 0.5  # stored vectors are unit length; a zero one is an embedder's failure
RETRY_NOW = "`notes-search sync --retry-embedder` tries now"
VECTOR_PAGE = 2000  # stored vectors read per page when the statistics are estimated from them
HOLD_SECONDS = 20.0  # embedding a first sync may hold back unstored: what a kill can cost
HOLD_BYTES = 64 << 20  # and the memory the held vectors may take
# a chunk of over four times the chunker's largest (800 tokens of ~4 characters: a block it
# cannot cut, a pasted log, one long line) is embedded after all others; 1 of the real notes'
# 2,230 chunks is one (not imported from the chunker: a search's catch-up would load its parser)
GIANT_CHUNK_CHARS = 12_800
CATCH_UP_STEP = 8  # chunks per embedding request in a catch-up: the budget is checked between steps
# and characters at most (or one chunk): about a second of the local model on 2 cores, so the
# budget is overrun by about one step; 8 chunks of a long note took a search 23 s
CATCH_UP_STEP_CHARS = 2_000


class VectorWork:
    """The embedding steps of one sync run (a base of `Syncer`, which sets these attributes)."""

    config: Config
    store: IndexWriter
    embedder_factory: Callable[[], Embedder] | None
    progress: Progress
    lock: IndexLock
    retry_embedder: bool  # try the embedder even while a remembered outage's back-off runs

    def embed_pending(self, report: SyncReport, deadline: float | None = None) -> None:
        """Attach vectors to pending chunks. No factory: text only (a lexical search's catch-up).
        A deadline marks a catch-up someone waits on: one attempt with short timeouts, in small
        steps, and an embedder that failed such a call recently is left alone (embed_health)."""
        total = self.store.count_pending_all()
        if total == 0 or self.embedder_factory is None:
            return
        if not self.lock.claim_embedding():
            # the other worker's pass pages by id, so it reaches the chunks committed meanwhile
            report.embed_notice = f"another sync worker is attaching vectors; {total} chunks wait for it"
            return
        interactive = deadline is not None
        health = embedder_health(self.config)
        outage = health.outage(self.config.embedding) if interactive else None
        if outage is not None:  # the search's own notice names the error
            report.embed_notice = f"embedder not available; {total} chunks wait for vectors until it is back"
            return
        backoff = None if interactive or self.retry_embedder else health.sync_backoff(self.config.embedding)
        if backoff is not None:  # a cron tick during an outage: no dead embedder's timeouts
            report.embed_notice = f"{backoff.describe()}; {total} chunks wait for vectors ({RETRY_NOW})"
            log.info("%s", report.embed_notice)
            return
        try:
            embedder = self.embedder_factory()
            if interactive:
                embedder = embedder.interactive()
        except NotesSearchError as exc:
            report.embed_notice = f"embedder not available ({exc}); {total} chunks wait for vectors"
            if not interactive:
                health.failed(self.config.embedding, str(exc), by_sync=True)
            log.warning("%s", report.embed_notice)
            return
        batch = min(self.config.embedding.batch, CATCH_UP_STEP) if interactive else self.config.embedding.batch * 4
        space = neutral.NeutralSpace.from_json(self.store.meta().get(neutral.STATS_KEY))
        held = self._hold_for_first_space(space, interactive)
        after_id = 0
        done = 0
        self.progress("embed", 0, total)  # the stage starts now: the first batch may take a while
        # chunks of a few windows first, then the giants: a huge note (a log pasted whole, one
        # long line) may take the model an hour, and every other note's vector waits behind it
        # (a search's catch-up leaves the giants to the next sync: one takes minutes)
        passes = [(0, GIANT_CHUNK_CHARS)] + ([] if interactive else [(GIANT_CHUNK_CHARS + 1, None)])
        while passes:
            rows = self.store.pending_chunks(batch, after_id, min_chars=passes[0][0], max_chars=passes[0][1])
            if not rows:
                passes.pop(0)
                after_id = 0
                continue
            if interactive:
                rows = _within_chars(rows, CATCH_UP_STEP_CHARS)
            after_id = rows[-1].id
            # identical texts (copied notes, boilerplate) are embedded once
            unique: dict[str, int] = {}
            for row in rows:
                unique.setdefault(row.content_hash, len(unique))
            texts = [""] * len(unique)
            for row in rows:
                texts[unique[row.content_hash]] = row.text
            try:
                embedded = embedder.embed_chunks(
                    texts, on_batch=self._page_progress(done, len(rows), len(texts), total)
                )
            except EmbedderUnavailable as exc:
                if held is not None:
                    report.embedded += self._store_held(held, None)
                failure = health.failed(self.config.embedding, str(exc), by_sync=not interactive)
                report.embed_notice = (
                    f"{exc}; {total - done} chunks stored without vectors (lexical only until {_next_try(failure)})"
                )
                log.warning("%s", report.embed_notice)
                return
            except EmbedderError as exc:
                if held is not None:
                    report.embedded += self._store_held(held, None)
                report.embed_notice = f"{exc}; {total - done} chunks stored without vectors"
                if not interactive:
                    failure = health.failed(self.config.embedding, str(exc), by_sync=True, unreachable=False)
                    report.embed_notice += f" until {_next_try(failure)}"
                log.error("%s", report.embed_notice)
                return
            if done == 0:
                health.succeeded(self.config.embedding)  # searches may use the embedder again
            # where each window of a long text begins: a search points a hit at its nearest one
            self.store.store_window_lines({digest: embedded.lines[index] for digest, index in unique.items()})
            # each chunk's windows under its id (identical texts share theirs)
            ids, vectors = embedded.rows_of([unique[row.content_hash] for row in rows], [row.id for row in rows])
            if self.config.embedding.language_neutral:
                languages = self.store.chunk_languages(set(ids))
                page_languages = [languages.get(i, neutral.UNKNOWN) for i in ids]
                if held is not None:
                    held.add(ids, page_languages, vectors)
                    if not held.within_bounds():  # too much work to lose on a kill: stored as before
                        report.embedded += self._store_held(held, None)
                        held = None
                else:
                    report.embedded += self.store.store_vectors(ids, space.neutralise(vectors, page_languages))
            else:
                report.embedded += self.store.store_vectors(ids, vectors)
            done += len(rows)
            self.progress("embed", done, total)
            if deadline is not None and time.monotonic() >= deadline:
                return
        if held is not None:
            report.embedded += self._store_held(held, report)

    def repair_zero_vectors(self) -> int:
        """Once per index: chunks whose stored vector has no length (an embedder's zero answer
        that an older version stored as a direction: such a chunk is never a vector hit, and
        it did not count as pending) get their vector dropped, to be embedded again by this
        run. Stored vectors are unit length, so anything far shorter is such a vector. Returns
        how many; the meta flag makes every later sync skip the scan."""
        if self.store.meta().get(ZERO_VECTORS_CHECKED_KEY) or not self.store.has_vector_table():
            return 0
        import numpy as np  # only for the one scan: the every-minute no-op sync does not load it

        broken: list[int] = []
        for page in self._vector_pages():
            short = np.linalg.norm(page.matrix, axis=1) < STORED_MIN_NORM
            broken.extend(dict.fromkeys(page.ids[i] for i in np.flatnonzero(short)))
        if broken:
            self.store.unembed(broken)
            log.warning("%d chunks had a zero vector (stored by an older version): embedding them again", len(broken))
        self.store.set_meta({ZERO_VECTORS_CHECKED_KEY: "1"})
        return len(broken)

    def _page_progress(self, before: int, rows: int, texts: int, total: int) -> Callable[[int], None]:
        """Progress per model batch inside one page: the page's rows in proportion to its unique
        texts embedded so far (a slow model takes minutes per page)."""
        return lambda embedded: self.progress("embed", before + rows * embedded // texts, total)

    def refresh_neutral_space(self) -> str | None:
        """Re-estimate the language statistics when the bounded-drift rule says they are stale
        (indexer.neutral) and move every stored vector into the new space, in one transaction,
        without the model: stored vectors are restored to raw and neutralised again. Returns a
        description of what changed, or None."""
        if not self.config.embedding.language_neutral or not self.store.has_vector_table():
            return None
        if self.store.language_backfill() is not None:
            return None  # languages still being detected: statistics would file chunks as unknown
        stored = self.store.meta().get(neutral.STATS_KEY)
        if not neutral.stored_needs_estimate(stored, self.store.vector_language_counts(), self.config.embedding.model):
            return None
        if not self.lock.claim_index():
            return None  # other workers write vectors of the current space: a later run moves them
        try:
            return self._rewrite_neutral_space()
        finally:
            self.lock.release_index()

    def _rewrite_neutral_space(self) -> str | None:
        model = self.config.embedding.model
        old = neutral.NeutralSpace.from_json(self.store.meta().get(neutral.STATS_KEY))
        if not neutral.needs_estimate(old, self.store.vector_language_counts(), model):
            return None  # another worker re-estimated them before this one got the index
        with self.store.transaction():  # one state: readers see the old space or the new one
            new = estimate_space(
                (
                    VectorPage(page.ids, page.languages, old.restore(page.matrix, page.languages))
                    for page in self._vector_pages()
                ),
                model,
            )
            moved = neutral.moved_languages(old, new)  # a one-language index moves nothing
            if moved:
                for page in self._vector_pages():
                    kept = [i for i, lang in enumerate(page.languages) if lang in moved]
                    languages = [page.languages[i] for i in kept]
                    self.store.rewrite_vectors(
                        [page.ids[i] for i in kept],
                        new.neutralise(old.restore(page.matrix[kept], languages), languages),
                    )
            summary = new.summary()
            self.store.write_meta({neutral.STATS_KEY: new.to_json(), neutral.SUMMARY_KEY: summary})
        log.info("language statistics re-estimated: %s", summary)
        return summary

    def _hold_for_first_space(self, space: neutral.NeutralSpace, interactive: bool) -> HeldVectors | None:
        """Where a first sync keeps its vectors until the language statistics can be estimated
        from all of them, or None. An index with no vector yet (a first sync, a rebuild) would
        store them raw and then rewrite every vector of a known language into the new space at
        the end of the run; held, each is stored once, already in it. Only without any stored
        vector: the statistics are then those of exactly the held vectors."""
        if interactive or not self.config.embedding.language_neutral or space.offsets():
            return None
        if self.store.vectors_by_language(0, 1).ids:
            return None
        return HeldVectors()

    def _store_held(self, held: HeldVectors, report: SyncReport | None) -> int:
        """Store the held vectors. With `report` (every pending chunk embedded), as the end of
        the run would leave them: the statistics estimated from them (the same pages, sums and
        rounding as `_rewrite_neutral_space`) and the vectors neutralised with them. Without it
        (an embedder failure, too much held), raw, as any vector stored before an estimate.

        The statistics are committed first, then the vectors in the pages they were embedded in
        (a transaction each, as when not held): a kill in between leaves the statistics and some
        of the vectors, all in their space, and the re-run neutralises the others with them (the
        rule sees its counts met): the state this run would have reached."""
        model = self.config.embedding.model
        old = neutral.NeutralSpace.from_json(self.store.meta().get(neutral.STATS_KEY))
        batches = held.batches
        if report is None or self.store.language_backfill() is not None or not self.lock.claim_index():
            return sum(self.store.store_vectors(batch.ids, batch.matrix) for batch in batches)
        try:
            # (a chunk another worker removed meanwhile is counted, and its vector not stored:
            # the same as its removal right after the estimate, which the rule also ignores)
            counts: dict[str, int] = {}
            for batch in batches:
                for lang, first in zip(batch.languages, batch.first_windows(), strict=True):
                    counts[lang] = counts.get(lang, 0) + int(first)
            if self.store.vectors_by_language(0, 1).ids or not neutral.needs_estimate(old, counts, model):
                return sum(self.store.store_vectors(batch.ids, batch.matrix) for batch in batches)
            new = estimate_space(held.pages(), model)
            summary = new.summary()
            self.store.set_meta({neutral.STATS_KEY: new.to_json(), neutral.SUMMARY_KEY: summary})
            log.info("language statistics re-estimated: %s", summary)
            report.neutral = summary
            return sum(
                self.store.store_vectors(batch.ids, new.neutralise(batch.matrix, batch.languages)) for batch in batches
            )
        finally:
            self.lock.release_index()

    def _vector_pages(self) -> Iterator[VectorPage]:
        after_id = 0
        while True:
            vectors = self.store.vectors_by_language(after_id, VECTOR_PAGE)
            if not vectors.ids:
                return
            after_id = vectors.ids[-1]
            yield vectors


def _next_try(failure: Outage) -> str:
    if failure.next_try is None:
        return "the next sync"
    return f"the next sync after {time.strftime('%H:%M:%S', time.localtime(failure.next_try))} ({RETRY_NOW})"


def estimate_space(pages: Iterable[VectorPage], model: str) -> neutral.NeutralSpace:
    """The statistics of raw vectors given in id order by pages of VECTOR_PAGE chunks: per-language
    sums of the chunks' own vectors (their first windows') in float64 page by page (the same
    pages give the same bits), then `neutral.estimate`, read back through JSON, exactly what
    later syncs will read."""
    import numpy as np

    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for page in pages:
        labels = np.array(page.languages, dtype=object)  # compared in one C loop per language
        first = page.first_windows()
        for lang in set(page.languages):
            rows = (labels == lang) & first
            sums[lang] = sums.get(lang, 0) + page.matrix[rows].sum(axis=0, dtype=np.float64)
            counts[lang] = counts.get(lang, 0) + int(rows.sum())
    new = neutral.estimate({lang: (sums[lang] / counts[lang], counts[lang]) for lang in sums}, model)
    return neutral.NeutralSpace.from_json(new.to_json())


@dataclass
class HeldVectors:
    """Raw vectors a first sync embedded and has not stored yet, in id order, in the pages
    they were embedded in (stored in those: one transaction each, as when not held)."""

    batches: list[VectorPage] = field(default_factory=list)
    nbytes: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, ids: list[int], languages: list[str], vectors: np.ndarray) -> None:
        import numpy as np

        matrix = np.asarray(vectors, dtype=np.float32)  # what the store keeps of them
        self.batches.append(VectorPage(ids, languages, matrix))
        self.nbytes += matrix.nbytes

    def within_bounds(self) -> bool:
        return self.nbytes <= HOLD_BYTES and time.monotonic() - self.started <= HOLD_SECONDS

    def pages(self) -> Iterator[VectorPage]:
        """The held vectors cut as `Syncer._vector_pages` would read them once stored, one page
        of VECTOR_PAGE chunks at a time: joining them all first would hold a second copy of every
        one (twice the bound). (A page embedded holds every window of its chunks.)"""
        import numpy as np

        ids: list[int] = []
        languages: list[str] = []
        parts: list[np.ndarray] = []
        chunks = 0
        for batch in self.batches:
            bounds = [*np.flatnonzero(batch.first_windows()).tolist(), len(batch.ids)]  # chunk starts, end
            at = 0
            while at < len(bounds) - 1:
                take = min(VECTOR_PAGE - chunks, len(bounds) - 1 - at)  # whole chunks
                start, end = bounds[at], bounds[at + take]
                ids += batch.ids[start:end]
                languages += batch.languages[start:end]
                parts.append(batch.matrix[start:end])
                chunks += take
                at += take
                if chunks == VECTOR_PAGE:
                    yield VectorPage(ids, languages, np.concatenate(parts))
                    ids, languages, parts, chunks = [], [], [], 0
        if ids:
            yield VectorPage(ids, languages, np.concatenate(parts))


def _within_chars(rows: list[PendingChunk], limit: int) -> list[PendingChunk]:
    """The first of `rows` whose texts add up to at most `limit` characters, and at least one."""
    size = 0
    for count, row in enumerate(rows):
        size += len(row.text)
        if count and size > limit:
            return rows[:count]
    return rows
