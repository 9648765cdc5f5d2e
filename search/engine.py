"""Run one search against the store: lexical and vector halves, fusion, honest degraded mode."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from indexer import neutral
from indexer.config import Config, identity_mismatch
from indexer.errors import EmbedderError, NotesSearchError, ReindexNeeded, StoreError
from indexer.keywords import KeywordQuery
from indexer.store import ChunkRow, IndexReader, RankedChunk, SearchScope
from search.exact import ExactRule, exact_first, exact_rules, verbatim_holders
from search.fusion import (
    Fused,
    Fusion,
    background_hits,
    covered_terms,
    exact_value_terms,
    folded_words,
    match_terms,
    meaning_weight,
    rrf,
    term_coverage,
)
from search.hits import Hit, build_hits, window_finder
from search.querybuild import QueryTerm, code_like, echoed_query, exact_query, meaning_text, prefix_query, query_terms

if TYPE_CHECKING:  # numpy and the embedders stay unimported on the lexical path
    from concurrent.futures import Future

    import numpy as np

    from indexer.embedders import Embedder
    from search.resident import ResidentVectors

T = TypeVar("T")
# the store's `sibling`, asked once per search: how to open readers of its snapshot, or None
SiblingOf = Callable[[], Callable[[], AbstractContextManager[IndexReader]] | None]
MODES = ("hybrid", "lex", "vec")
UNKNOWN = "unknown"
MIN_DEPTH = 50  # candidates taken from each half before fusion
# how deep the halves are searched again when --per-file or --min-similarity left fewer than k
# hits: vec0's limit on k
MAX_DEPTH = 4096


RARE_EXACT_HITS = 3  # at most this many keyword hits hold a language-less term that decides the fusion
COVERAGE_HITS = 5  # keyword hits whose notes' term coverage weighs the keyword half in mixed languages


@dataclass
class SearchResponse:
    query: str
    mode: str
    degraded: bool = False
    notice: str | None = None
    results: list[Hit] = field(default_factory=list)
    # what --explain reports about the whole query: its detected language (None in lex mode,
    # which never detects it), the index's language statistics, and how many candidates were
    # scored without the keyword half because it cannot match their language (or, where none was
    # detected, their script)
    query_language: str | None = None
    vector_space: str | None = None
    keyword_blind: int = 0
    keyword_weight: float = 1.0
    meaning_weight: float = 1.0  # the vector half's weight (fusion.meaning_weight), 1 unless weighed
    # the share of the query's terms the keyword half's best note holds, when candidates in other
    # languages made it weigh the keyword half (None: it did not)
    keyword_coverage: float | None = None
    exact_value: bool = False  # a rare language-less term kept the fusion plain (found_exact_value)
    exact_value_term: str | None = None  # that term, its words as typed
    # meaning hits in other languages that stand out from none of their language's: passed over
    # where the vector half ranks the keyword half's best hits (fusion.background_hits)
    background: int = 0
    rrf_k: int = 60  # the fusion's constant: a list's rank r adds weight / (rrf_k + r)

    def to_json(self, explain: bool = False, full: bool = False) -> dict[str, object]:
        data: dict[str, object] = {
            "query": echoed_query(self.query),
            "mode": self.mode,
            "degraded": self.degraded,
            "notice": self.notice,
            "results": [hit.to_json(explain, full) for hit in self.results],
        }
        if explain:
            data["explain"] = {
                "query_language": self.query_language,
                "vector_space": self.vector_space,
                "keyword_blind": self.keyword_blind,
                "keyword_weight": self.keyword_weight,
                "meaning_weight": self.meaning_weight,
                "keyword_coverage": self.keyword_coverage,
                "exact_value": self.exact_value,
                "exact_value_term": self.exact_value_term,
                "background": self.background,
                "rrf_k": self.rrf_k,
            }
        return data


def pending_notice(config: Config, pending: int) -> str:
    """Chunks without a vector match by keywords only. While a sync or the watcher holds the
    index it is computing them (it embeds before it lets go), so running another sync is no
    advice; otherwise it is."""
    from indexer.lock import running_sync

    if running_sync(config) is not None:
        return f"{pending} chunks in scope have no vector yet: a running sync is computing them; until then they can only match by keywords"
    return f"{pending} chunks in scope have no vector yet (run `notes-search sync`); they can only match by keywords"


def check_identity(config: Config, store: IndexReader) -> dict[str, str]:
    """Refuse vector search when the index holds another embedding space than the config's.
    Returns the index's meta."""
    meta = store.meta()
    mismatch = identity_mismatch(config.embedding, meta)
    if mismatch or not store.has_vector_table():
        detail = "; ".join(mismatch) or "the index has no vectors yet"
        raise ReindexNeeded(f"reindex needed: {detail}. Run `notes-search sync` to rebuild the vectors")
    return meta


def describe_vector_space(config: Config, meta: dict[str, str]) -> str:
    """How the stored vectors relate to the embedder's, for --explain."""
    if not config.embedding.language_neutral:
        return "raw"
    return "language-neutral: " + (meta.get(neutral.SUMMARY_KEY) or "no language statistics yet")


def other_language(
    query_language: str | None, candidates: set[int], languages: dict[int, str], rows: Mapping[int, ChunkRow]
) -> dict[int, tuple[str, ...]]:
    """Candidates in another language than the (detected) query's, each with the list that
    cannot read them: the keyword half, which matches such a note only by what both languages
    share (a name, a command). A note of another detected language is; where the candidates hold
    one, so is a note of no detected language whose prose is in another script than the query's
    language (a Russian note full of Latin-script commands, too mixed for a language to be
    named, holds no word of a Czech question either). An index of the query's language alone,
    and a query of unknown language, have none: their fusion stays plain."""
    if not query_language or query_language == UNKNOWN:
        return {}
    foreign: dict[int, tuple[str, ...]] = {
        cid: ("bm25",) for cid in candidates if languages.get(cid, UNKNOWN) not in (UNKNOWN, query_language)
    }
    if not foreign:
        return foreign
    from indexer.language import in_another_script  # loaded to detect the query's language

    for cid in candidates:
        if languages.get(cid, UNKNOWN) == UNKNOWN and cid in rows and in_another_script(rows[cid].text, query_language):
            foreign[cid] = ("bm25",)
    return foreign


def found_exact_value(
    terms: list[tuple[tuple[str, ...], bool]], top: list[str], every: list[str]
) -> tuple[str, ...] | None:
    """The rare language-less term of the query (`5432`, `db-01.lan`, a quoted phrase) that the
    keyword half's best hits (`top`) hold, as its folded words: a term found in few of its hits
    (`every`) singles the note out in any language, so meaning-only hits in other languages must
    not outweigh it. None if there is none: a common one (a year that many notes mention) proves
    nothing and leaves the mixed-language fusion on."""
    for term in exact_value_terms(terms):
        if any(term_coverage([term], text) for text in top):
            holders = (text for text in every if term_coverage([term], text) > 0)
            # counting stops past the limit: a common term is known common after a few hits
            if sum(1 for _ in itertools.islice(holders, RARE_EXACT_HITS + 1)) <= RARE_EXACT_HITS:
                return term[0]
    return None


def keyword_coverage(
    terms: list[tuple[tuple[str, ...], bool]],
    lexical_ids: list[int],
    texts: dict[int, str],
    files: Mapping[int, object],
) -> float:
    """How much of the query the keyword half answers in the query's language: the largest share
    of its terms one note holds, among the notes of the best COVERAGE_HITS keyword hits, over all
    of that note's keyword hits. A note may hold `obnova` in one section and `zálohy` in another:
    no chunk of it covers the query, the note does."""
    if not terms:
        return 0.0
    chunks_of: dict[object, list[int]] = {}
    for cid in lexical_ids:
        if cid in files and cid in texts:
            chunks_of.setdefault(files[cid], []).append(cid)
    best = 0
    for note in dict.fromkeys(files[cid] for cid in lexical_ids[:COVERAGE_HITS] if cid in files and cid in texts):
        missing = set(range(len(terms)))
        for cid in chunks_of[note]:
            missing -= covered_terms(terms, texts[cid], missing)
            if not missing:
                return 1.0  # no note can cover more
        best = max(best, len(terms) - len(missing))
    return best / len(terms)


def search(
    store: IndexReader,
    config: Config,
    query: str,
    *,
    k: int = 8,
    mode: str = "hybrid",
    scope: SearchScope = SearchScope(),
    embedder_factory: Callable[[], Embedder],
    resident: ResidentVectors | None = None,
    per_file: int | None = None,
    min_similarity: float | None = None,
) -> SearchResponse:
    """`resident`: an in-memory copy of the vectors kept by a long-lived caller; when current, it
    answers the unscoped vector half (scoped ones are already exact and fast through the path
    index), else vec0 does. `per_file`: at most this many hits from one file. `min_similarity`:
    a hit found by meaning alone needs at least this cosine similarity to the query."""
    if mode not in MODES:
        raise NotesSearchError(f"unknown mode {mode!r} (use one of {', '.join(MODES)})")
    if per_file is not None and per_file < 1:
        raise NotesSearchError(f"per_file must be at least 1, got {per_file}")
    if min_similarity is not None and not -1.0 <= min_similarity <= 1.0:
        raise NotesSearchError(f"min_similarity is a cosine similarity from -1 to 1, got {min_similarity}")
    response = SearchResponse(query=query, mode=mode, rrf_k=config.search.rrf_k)
    notices: list[str] = []  # why the vector half could not (fully) run: degraded
    info: list[str] = []  # everything else worth saying
    depth = max(MIN_DEPTH, 3 * k)
    terms = query_terms(query) if mode != "vec" else []
    match = prefix_query(terms)
    rules = exact_rules(terms)
    with store.snapshot():
        # one exported snapshot for every reader that works beside this search (a round trip each)
        sibling = functools.cache(store.sibling)
        half = None
        meta = None
        if mode != "lex":
            try:
                meta = check_identity(config, store)
            except ReindexNeeded as exc:
                if mode == "vec":
                    raise  # nothing left to answer with
                # the keywords still answer; the notice says why meaning is left out
                notices.append(f"vector search unavailable ({exc}); showing keyword results only")
        if meta is not None:
            response.vector_space = describe_vector_space(config, meta)
            from indexer.language import detect_query_language  # the model is loaded for vectors anyway

            response.query_language = detect_query_language(query)
            half = _VectorHalf(
                store,
                config,
                meta,
                query,
                response.query_language,
                mode,
                scope,
                embedder_factory,
                resident,
                sibling,
                # only a keyword half gives the query's embedding something to run beside
                overlap=mode == "hybrid" and match is not None,
            )
        if mode == "lex" and match is None:
            info.append("the query has no searchable words")
        try:
            while True:
                if half is not None:
                    half.start(depth)
                try:
                    lexical = _lexical_half(store, sibling, match, terms, depth, scope)
                except Exception:
                    if half is not None:
                        half.settle()  # a failure of what ran before the keyword half comes first
                    raise
                vector = half.collect(response, notices, info) if half is not None else []
                read_apart = half.read_apart if half is not None else _ReadApart()
                candidates = {cid for cid, _ in lexical} | {cid for cid, _ in vector}
                rows = read_apart.rows_of(store, candidates)
                # only a hybrid query of known language asks which meaning hits the keywords cannot read
                knows_language = mode == "hybrid" and response.query_language not in (None, UNKNOWN)
                meaning_ids = {cid for cid, _ in vector}
                languages = read_apart.languages_of(store, meaning_ids) if knows_language else {}
                fusion = _fuse(config, response, mode, match, rules, lexical, vector, rows, languages)
                fused = fusion.fused
                chosen = _choose(fused, rows, lexical, vector, k, per_file, min_similarity)
                shown = [item.chunk_id for item in chosen if item.chunk_id not in languages]
                if mode != "lex" and shown:  # --explain names each hit's language
                    languages.update(read_apart.languages_of(store, shown))
                find_windows = window_finder(store, half.vector if half else None, embedder_factory)
                response.results = build_hits(chosen, rows, lexical, vector, languages, fusion, query, find_windows)
                exhausted = len(lexical) < depth and len(vector) < depth
                if (
                    len(response.results) >= k
                    or exhausted
                    or depth >= MAX_DEPTH
                    or (per_file is None and min_similarity is None)
                ):
                    break
                depth = min(MAX_DEPTH, depth * 4)
        finally:
            if half is not None:
                half.close()
    if mode == "hybrid" and not lexical:
        if match is None:
            meaning_only = ": every hit matches by meaning only" if response.results else ""
            info.append(f"the query has no searchable words{meaning_only}")
        elif response.results:
            info.append("no keyword match: every hit matches by meaning only")
        else:
            info.append("no keyword match")
    response.degraded = bool(notices)
    response.notice = "; ".join(notices + info) or None
    return response


def _lexical_half(
    store: IndexReader,
    sibling: SiblingOf,
    match: KeywordQuery | None,
    terms: list[QueryTerm],
    depth: int,
    scope: SearchScope,
) -> list[RankedChunk]:
    """The keyword half: prefix matches, then the exact ones a full list may have left out."""
    if match is None:
        return []
    exact_match = exact_query(terms)
    if exact_match is None:
        return store.fts_search(match, depth, scope)
    beside = _ExactBeside.start(sibling, exact_match, depth, scope)
    full = False
    try:
        lexical = store.fts_search(match, depth, scope)
        # an exact match is also a prefix match: only a full list can have left one out
        full = len(lexical) >= depth
    finally:
        if beside is not None and not full:
            beside.wait()  # not needed (or the prefix search failed): its end, not its answer
    if not full:
        return lexical
    exact = beside.hits() if beside is not None else None
    if exact is None:
        exact = store.fts_search(exact_match, depth, scope)
    seen = {cid for cid, _ in lexical}
    return lexical + [hit for hit in exact if hit.chunk_id not in seen]


class _ExactBeside:
    """The exact identifier search, run on a sibling reader while the prefix search runs: it is
    needed only when the prefix list comes back full, which is known only after that search,
    and on a large index it costs about as much as the prefix search itself (PostgreSQL at 1M
    chunks: 10-15 ms of 30-40). Its matches are a subset of the prefix's, so when it turns out
    unneeded the prefix list was short and so was this search. Started only where the store
    can share its snapshot and a shared worker is free; otherwise the caller searches in turn."""

    def __init__(self, running: Future[list[RankedChunk] | None]) -> None:
        self.running = running

    @classmethod
    def start(cls, sibling: SiblingOf, match: KeywordQuery, depth: int, scope: SearchScope) -> _ExactBeside | None:
        from search.overlap import apart, busy

        if busy():  # nothing would run apart: no snapshot to export for it
            return None
        opener = sibling()
        if opener is None:
            return None

        def search() -> list[RankedChunk] | None:
            with ExitStack() as opened:
                try:
                    reader = opened.enter_context(opener())
                except StoreError:
                    return None  # a server at its connection limit: the store's own connection searches
                return reader.fts_search(match, depth, scope)

        running = apart(search)
        return cls(running) if running is not None else None

    def hits(self) -> list[RankedChunk] | None:
        """The exact search's hits; None when the sibling could not open (search in turn)."""
        return self.running.result()

    def wait(self) -> None:
        """Let the unneeded search end (its sibling closes before the snapshot does); what it
        raised is dropped, as a search never run raises nothing."""
        from concurrent.futures import wait

        wait([self.running])


@dataclass
class _QueryVector:
    """The query's vector (None: the vector half finds nothing) and what preparing it found."""

    vector: np.ndarray | None
    projected: bool = False
    notices: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    counted: bool = False  # the chunks in scope without a vector were counted


@dataclass
class _ReadApart:
    """The rows and languages of a pass's hits, read through the sibling reader beside the
    keyword half (the same snapshot): what is left for the store's own connection afterwards
    is the keyword half's other candidates."""

    rows: dict[int, ChunkRow] = field(default_factory=dict)
    languages: dict[int, str] = field(default_factory=dict)

    def rows_of(self, store: IndexReader, ids: Iterable[int]) -> dict[int, ChunkRow]:
        return _read_or_known(self.rows, set(ids), store.chunk_rows)

    def languages_of(self, store: IndexReader, ids: Iterable[int]) -> dict[int, str]:
        return _read_or_known(self.languages, set(ids), store.chunk_languages)


def _read_or_known(known: dict[int, T], ids: set[int], read: Callable[[set[int]], dict[int, T]]) -> dict[int, T]:
    """`ids`' entries of `known`, and `read` of the rest (not called when none is left)."""
    found = {cid: known[cid] for cid in ids if cid in known}
    if len(found) < len(ids):
        found.update(read(ids - found.keys()))
    return found


@dataclass
class _Pass:
    """One pass of the vector half, or as much of it as a worker ran: the query vector on the
    first pass, then the hits or what stopped them (kept apart: the keyword half's failure, had
    it one, comes first). No hits and no error: the search is left to the store's thread."""

    prepared: _QueryVector | None
    hits: list[RankedChunk] | None = None
    error: Exception | None = None
    read_apart: _ReadApart = field(default_factory=_ReadApart)


class _VectorHalf:
    """The vector half of one search, inside the store's snapshot: `start` begins a pass at a
    depth, the caller runs the keyword half, `collect` ends the pass. With `overlap`, the first
    pass embeds the query on a shared worker meanwhile, which also searches through a sibling
    reader where the store opens one in its snapshot (PostgreSQL), or asks the resident copy;
    what is left, or all of it when every worker is busy, runs in `collect`, in the order a
    search without the workers runs it."""

    def __init__(
        self,
        store: IndexReader,
        config: Config,
        meta: dict[str, str],
        query: str,
        query_language: str,
        mode: str,
        scope: SearchScope,
        embedder_factory: Callable[[], Embedder],
        resident: ResidentVectors | None,
        sibling: SiblingOf,
        *,
        overlap: bool,
    ) -> None:
        self.store = store
        self.sibling = sibling
        self.config = config
        self.meta = meta
        self.query = query
        self.query_language = query_language
        self.mode = mode
        self.scope = scope
        self.embedder_factory = embedder_factory
        self.resident = resident
        self.overlap = overlap
        self.depth = 0
        self.vector: np.ndarray | None = None
        self.prepared = False
        self.reader: IndexReader | None = None  # the sibling, once the worker opened it
        self.opened = ExitStack()
        self.running: Future[_Pass] | None = None  # the pass's work on a worker
        self.read_apart = _ReadApart()  # the last pass's

    def start(self, depth: int) -> None:
        self.depth = depth
        if not self.overlap:
            return
        from search.overlap import apart, busy

        if not self.prepared:
            if busy():  # nothing would run apart: no snapshot to export for it
                return
            opener = self.sibling()
            # without a sibling, the resident copy answers apart from the store, for the generation read here
            use_resident = opener is None and self.resident is not None and self.scope.is_all
            generation = self.store.vectors_generation() if use_resident else None
            self.running = apart(lambda: self._ahead(depth, opener, generation))
        elif self.reader is not None:
            reader = self.reader
            self.running = apart(lambda: self._searched(reader, depth))

    def settle(self) -> None:
        """Wait for work running apart; raise what stopped the query vector's preparation."""
        if self.running is not None:
            self.running.result()

    def collect(self, response: SearchResponse, notices: list[str], info: list[str]) -> list[RankedChunk]:
        """The pass's hits; on the first pass also what preparing the query vector had to say."""
        running, self.running = self.running, None
        done = running.result() if running is not None else _Pass(None if self.prepared else self._prepare())
        if done.prepared is not None:
            if not done.prepared.counted:
                self._count(done.prepared, self.store)
            notices += done.prepared.notices
            info += done.prepared.info
            if done.prepared.projected:
                response.vector_space = f"{response.vector_space}; query projected off the index's language directions"
        if done.hits is None and done.error is None:
            done = self._searched(self.reader or self.store, self.depth)
        if done.error is not None:
            raise done.error
        self.read_apart = done.read_apart
        return done.hits or []

    def close(self) -> None:
        """Wait for work still running apart (the keyword half failed), then close the sibling."""
        running, self.running = self.running, None
        if running is not None:
            from concurrent.futures import wait

            wait([running])
        self.opened.close()

    def _ahead(
        self, depth: int, opener: Callable[[], AbstractContextManager[IndexReader]] | None, generation: str | None
    ) -> _Pass:
        """The first pass as far as it runs apart from the store's connection: the query vector,
        then the search through a sibling reader (`opener`) or the resident copy's answer for the
        vectors `generation`."""
        prepared = self._prepare()
        if prepared.vector is None:
            return _Pass(prepared, [])
        if opener is not None:
            try:
                self.reader = self.opened.enter_context(opener())
            except StoreError:
                # the sibling only saves time: a server refusing one more connection (at its
                # limit) leaves the vector half to the store's own, after the keyword half
                return _Pass(prepared)
            self._count(prepared, self.reader)
            done = self._searched(self.reader, depth)
            done.prepared = prepared
            return done
        if generation is not None and self.resident is not None:
            try:  # None when the copy is not current: the store's thread searches
                return _Pass(prepared, self.resident.knn_at(generation, prepared.vector, depth))
            except Exception as exc:  # noqa: BLE001 - raised by collect, unless the keyword half failed first
                return _Pass(prepared, error=exc)
        return _Pass(prepared)

    def _prepare(self) -> _QueryVector:
        """Embed (and project) the query: no store involved, so it may run on any thread."""
        prepared = _QueryVector(None)
        prepared.vector = _embed_query(
            self.config, self.embedder_factory, self.query, self.mode, prepared.notices, prepared.info
        )
        if prepared.vector is not None and self.config.embedding.language_neutral and self.query_language != UNKNOWN:
            basis = neutral.query_basis(self.meta.get(neutral.STATS_KEY) or "")
            if basis is not None:
                prepared.vector = neutral.project_query(prepared.vector, basis)
                prepared.projected = True
        self.vector = prepared.vector
        self.prepared = True
        return prepared

    def _count(self, prepared: _QueryVector, reader: IndexReader) -> None:
        """Count the chunks in scope still without a vector: they can only match by keywords."""
        prepared.counted = True
        if prepared.vector is not None:
            pending = reader.count_pending(self.scope)
            if pending:
                prepared.notices.append(pending_notice(self.config, pending))

    def _searched(self, reader: IndexReader, depth: int) -> _Pass:
        if self.vector is None:
            return _Pass(None, [])
        try:
            from_memory = self.resident.knn(reader, self.vector, depth) if self.resident and self.scope.is_all else None
            hits = from_memory if from_memory is not None else reader.vec_search(self.vector, depth, self.scope)
            read_apart = _ReadApart()
            if hits and reader is self.reader:  # a sibling, maybe running beside the keyword half
                ids = [hit.chunk_id for hit in hits]
                read_apart = _ReadApart(reader.chunk_rows(ids), reader.chunk_languages(ids))
        except Exception as exc:  # noqa: BLE001 - raised by collect, unless the keyword half failed first
            return _Pass(None, [], exc)
        return _Pass(None, hits, read_apart=read_apart)


def _fuse(
    config: Config,
    response: SearchResponse,
    mode: str,
    match: KeywordQuery | None,
    rules: list[ExactRule],
    lexical: list[RankedChunk],
    vector: list[RankedChunk],
    rows: dict[int, ChunkRow],
    languages: dict[int, str],
) -> Fusion:
    """Both halves fused (a code-like query's verbatim holders first, exact terms first among
    the chunks their prefixes matched), and what --explain tells of it (`Fusion`)."""
    recency = {cid: row.updated_at for cid, row in rows.items()}
    terms = match_terms(match)
    texts = {cid: f"{row.breadcrumb}\n{row.text}" for cid, row in rows.items()}
    seen: dict[int, tuple[bool, int]] = {}  # each chunk is read once for both orderings
    lexical_ids = exact_first([cid for cid, _ in lexical], texts, rules, seen)
    keyword_ids = set(lexical_ids)
    top_lexical = [texts[cid] for cid in lexical_ids[:COVERAGE_HITS] if cid in texts]
    foreign = {}
    response.exact_value = False
    response.exact_value_term = None
    if mode == "hybrid":
        foreign = other_language(response.query_language, {cid for cid, _ in vector}, languages, rows)
    if foreign and exact_value_terms(terms):  # every keyword hit's text is read only for such a query
        every_lexical = [texts[cid] for cid in lexical_ids if cid in texts]
        value = found_exact_value(terms, top_lexical, every_lexical)
        if value is not None:
            foreign = {}
            response.exact_value = True
            # named as typed (`ze zálohy`), not as the index folds it
            phrases = match.phrases if match is not None else ()
            typed = (phrase.words for phrase in phrases if folded_words(phrase) == value)
            response.exact_value_term = " ".join(next(typed, value))
    # of those, the ones the keyword half did not find by a word both languages share either
    blind = {cid: lists for cid, lists in foreign.items() if cid not in keyword_ids}
    response.keyword_blind = len(blind)
    weights = {}
    passed_over: dict[int, set[int]] = {}
    background: set[int] = set()
    response.keyword_weight = 1.0
    response.meaning_weight = 1.0
    response.keyword_coverage = None
    response.background = 0
    if foreign:
        # notes in other languages are in play: the keyword half answers from the query's
        # language only, so it counts as much as its best note covers the query's terms (not at
        # all when it found nothing: then no candidate is scaled up for being out of its reach)
        files = {cid: (row.source_id, row.path) for cid, row in rows.items()}
        coverage = keyword_coverage(terms, lexical_ids, texts, files)
        response.keyword_coverage = coverage
        weights["bm25"] = round(coverage**2, 4)
        response.keyword_weight = weights["bm25"]
        # and the vector half as much as its ranking stands out from a level (fusion.meaning_weight)
        similarities = [(cid, 1.0 - distance) for cid, distance in vector]
        weights["vec"] = meaning_weight([similarity for _, similarity in similarities])
        response.meaning_weight = weights["vec"]
        # a long question meets every language's generic notes at one level of similarity: the
        # vector half ranks the keyword half's best hits among what the keyword half could have
        # found and the other languages' answers that stand out, not behind that background
        best = lexical_ids[:COVERAGE_HITS]
        # (a note the keyword half found holds a word of the query: never background)
        background = background_hits(similarities, blind, languages, best)
        response.background = len(background)
        passed_over = dict.fromkeys(best, background) if background else {}
    fused = rrf(
        {"bm25": lexical_ids, "vec": [cid for cid, _ in vector]},
        k=config.search.rrf_k,
        recency=recency,
        blind=foreign,
        weights=weights,
        passed_over=passed_over,
    )
    order = [item.chunk_id for item in fused]
    verbatim: set[int] = set()
    if code_like(response.query):  # exact.verbatim_holders: they come first
        # a chunk holding every word of the query is a keyword hit: only those are read
        holders = verbatim_holders([cid for cid in order if cid in keyword_ids], texts, response.query)
        verbatim = set(holders)
        order = holders + [cid for cid in order if cid not in verbatim]
    if rules:  # the vector half must not undo exact-first either
        order = exact_first(order, texts, rules, seen)
    by_id = {item.chunk_id: item for item in fused}
    fused = [by_id[cid] for cid in order]
    exact = {cid: exact for cid, (matched, exact) in seen.items() if matched}
    return Fusion(fused, blind, exact, verbatim, background)


def _choose(
    fused: list[Fused],
    rows: dict[int, ChunkRow],
    lexical: list[RankedChunk],
    vector: list[RankedChunk],
    k: int,
    per_file: int | None,
    min_similarity: float | None,
) -> list[Fused]:
    """The first k fused chunks that still exist and pass the per-file cap and the similarity floor."""
    keyword = {cid for cid, _ in lexical}
    distance = dict(vector)
    per_path: dict[tuple[str, str], int] = {}
    chosen: list[Fused] = []
    for item in fused:
        if len(chosen) >= k:
            break
        row = rows.get(item.chunk_id)
        if row is None:
            continue
        if (
            min_similarity is not None
            and item.chunk_id not in keyword
            and item.chunk_id in distance
            and 1.0 - distance[item.chunk_id] < min_similarity
        ):
            continue
        file_key = (row.source_id, row.path)
        if per_file is not None and per_path.get(file_key, 0) >= per_file:
            continue
        per_path[file_key] = per_path.get(file_key, 0) + 1
        chosen.append(item)
    return chosen


def _embed_query(
    config: Config,
    embedder_factory: Callable[[], Embedder],
    query: str,
    mode: str,
    notices: list[str],
    info: list[str],
) -> np.ndarray | None:
    """The query vector, or None with a notice when the embedder is down (hybrid degrades to lex).

    One attempt with short timeouts; a failure is remembered for a while (embed_health), during
    which the embedder is not even constructed, so a degraded search costs what a lexical one does.
    """
    from indexer.embed_health import guarded

    if not query.strip():
        info.append("empty query")
        return None
    try:
        return guarded(config, lambda: embedder_factory().interactive().embed_query(meaning_text(query)))
    except EmbedderError as exc:
        if mode == "vec":
            raise
        notices.append(f"vector search unavailable ({exc}); showing keyword results only")
        return None
