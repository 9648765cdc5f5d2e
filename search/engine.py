"""Run one search against the store: lexical and vector halves, fusion, honest degraded mode."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from indexer import neutral
from indexer.config import Config, identity_mismatch
from indexer.errors import EmbedderError, NotesSearchError, ReindexNeeded
from indexer.store import IndexReader, RankedChunk, SearchScope
from search.fusion import exact_value_terms, match_terms, rrf, term_coverage
from search.querybuild import build_fts_query
from search.snippets import excerpt, snippet_terms

if TYPE_CHECKING:  # numpy and the embedders stay unimported on the lexical path
    import numpy as np

    from indexer.embedders import Embedder
    from search.resident import ResidentVectors

MODES = ("hybrid", "lex", "vec")
UNKNOWN = "unknown"
SNIPPET_CHARS = 1200
MIN_DEPTH = 50  # candidates taken from each half before fusion
RARE_EXACT_HITS = 3  # at most this many keyword hits hold a language-less term that decides the fusion
COVERAGE_HITS = 5  # keyword hits whose term coverage weighs the keyword half in mixed languages


@dataclass
class Hit:
    source: str
    path: str
    line: int  # the chunk's span in the file: line..end_line
    end_line: int
    match_line: int  # the file line where the query matches best (search.snippets)
    breadcrumb: str
    score: float
    snippet: str  # a few lines around match_line
    text: str  # SNIPPET_CHARS of the chunk around match_line
    rev: str | None
    explain: dict[str, float | int | str | None] = field(default_factory=dict)
    chunk_text: str = field(default="", repr=False)  # the whole chunk, for `query --full`

    def to_json(self, explain: bool = False) -> dict[str, object]:
        data = asdict(self)
        data.pop("chunk_text")
        if not explain:
            data.pop("explain")
        data["ref"] = f"{self.source}:{self.path}:{self.line}"  # what `show` / MCP `get` take
        return data


@dataclass
class SearchResponse:
    query: str
    mode: str
    degraded: bool = False
    notice: str | None = None
    results: list[Hit] = field(default_factory=list)
    # what --explain reports about the whole query: its detected language (None in lex mode,
    # which never detects it), the index's language statistics, and how many candidates were
    # scored without the keyword half because it cannot match their language
    query_language: str | None = None
    vector_space: str | None = None
    keyword_blind: int = 0
    keyword_weight: float = 1.0

    def to_json(self, explain: bool = False) -> dict[str, object]:
        data: dict[str, object] = {
            "query": self.query,
            "mode": self.mode,
            "degraded": self.degraded,
            "notice": self.notice,
            "results": [hit.to_json(explain) for hit in self.results],
        }
        if explain:
            data["explain"] = {
                "query_language": self.query_language,
                "vector_space": self.vector_space,
                "keyword_blind": self.keyword_blind,
                "keyword_weight": self.keyword_weight,
            }
        return data


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


def keyword_blind(
    query_language: str | None, lexical_ids: set[int], candidates: set[int], languages: dict[int, str]
) -> dict[int, tuple[str, ...]]:
    """Candidates the keyword half could not have found: written in another (detected)
    language than the (detected) query. Nothing is blind to a query of unknown language."""
    if not query_language or query_language == UNKNOWN:
        return {}
    return {
        cid: ("bm25",)
        for cid in candidates - lexical_ids
        if languages.get(cid, UNKNOWN) not in (UNKNOWN, query_language)
    }


def found_exact_value(terms: list[tuple[tuple[str, ...], bool]], top: list[str], every: list[str]) -> bool:
    """Whether the keyword half's best hits (`top`) hold a rare language-less term of the query
    (`5432`, `db-01.lan`): a term found in few of its hits (`every`) singles the note out in any
    language, so meaning-only hits in other languages must not outweigh it. A common one (a
    year that many notes mention) proves nothing and leaves the mixed-language fusion on."""
    for term in exact_value_terms(terms):
        if any(term_coverage([term], text) for text in top):
            holders = (text for text in every if term_coverage([term], text) > 0)
            # counting stops past the limit: a common term is known common after a few hits
            if sum(1 for _ in itertools.islice(holders, RARE_EXACT_HITS + 1)) <= RARE_EXACT_HITS:
                return True
    return False


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
) -> SearchResponse:
    """`resident`: an in-memory copy of the vectors kept by a long-lived caller; when current, it
    answers the unscoped vector half (scoped ones are already exact and fast through the path
    index), else vec0 does."""
    if mode not in MODES:
        raise NotesSearchError(f"unknown mode {mode!r} (use one of {', '.join(MODES)})")
    response = SearchResponse(query=query, mode=mode)
    notices: list[str] = []  # why the vector half could not (fully) run: degraded
    info: list[str] = []  # everything else worth saying
    depth = max(MIN_DEPTH, 3 * k)
    with store.snapshot():
        if mode != "lex":
            meta = check_identity(config, store)
            response.vector_space = describe_vector_space(config, meta)
            from indexer.language import detect_query_language  # the model is loaded for vectors anyway

            response.query_language = detect_query_language(query)
        lexical: list[RankedChunk] = []
        match = None
        if mode != "vec":
            match = build_fts_query(query)
            if match is not None:
                lexical = store.fts_search(match, depth, scope)
            elif mode == "lex":
                info.append("the query has no searchable words")
        vector: list[RankedChunk] = []
        if mode != "lex":
            query_vector = _embed_query(config, embedder_factory, query, mode, notices, info)
            if query_vector is not None and config.embedding.language_neutral and response.query_language != UNKNOWN:
                basis = neutral.query_basis(meta.get(neutral.STATS_KEY) or "")
                if basis is not None:
                    query_vector = neutral.project_query(query_vector, basis)
                    response.vector_space = (
                        f"{response.vector_space}; query projected off the index's language directions"
                    )
            if query_vector is not None:
                from_memory = resident.knn(store, query_vector, depth) if resident and scope.is_all else None
                vector = from_memory if from_memory is not None else store.vec_search(query_vector, depth, scope)
                pending = store.count_pending(scope)
                if pending:
                    notices.append(
                        f"{pending} chunks in scope have no vector yet (run `notes-search sync`); "
                        "they can only match by keywords"
                    )
        candidates = {cid for cid, _ in lexical} | {cid for cid, _ in vector}
        rows = store.chunk_rows(candidates)
        lexical_ids = {cid for cid, _ in lexical}
        # only a hybrid query of known language asks which candidates the keywords could not see
        knows_language = mode == "hybrid" and response.query_language not in (None, UNKNOWN)
        languages = store.chunk_languages(candidates - lexical_ids) if knows_language else {}
    recency = {cid: row.updated_at for cid, row in rows.items()}
    terms = match_terms(match) if match is not None else []
    top_lexical = [f"{rows[cid].breadcrumb}\n{rows[cid].text}" for cid, _ in lexical[:COVERAGE_HITS] if cid in rows]
    blind = {}
    if mode == "hybrid":
        blind = keyword_blind(response.query_language, lexical_ids, candidates, languages)
    if blind and exact_value_terms(terms):  # every keyword hit's text is read only for such a query
        every_lexical = [f"{rows[cid].breadcrumb}\n{rows[cid].text}" for cid, _ in lexical if cid in rows]
        if found_exact_value(terms, top_lexical, every_lexical):
            blind = {}
    response.keyword_blind = len(blind)
    weights = {}
    if blind:
        # notes in other languages are in play: the keyword half answers from the query's
        # language only, so it counts as much as its best hit covers the query's terms (not at
        # all when it found nothing: then no candidate is scaled up for being out of its reach)
        coverage = max((term_coverage(terms, text) for text in top_lexical), default=0.0)
        weights["bm25"] = round(coverage**2, 4)
        response.keyword_weight = weights["bm25"]
    fused = rrf(
        {"bm25": [cid for cid, _ in lexical], "vec": [cid for cid, _ in vector]},
        recency=recency,
        blind=blind,
        weights=weights,
    )
    shown = [item.chunk_id for item in fused[:k] if item.chunk_id not in languages]
    if mode != "lex" and shown:  # --explain names each hit's language
        languages.update(store.chunk_languages(shown))
    bm25 = dict(lexical)
    distance = dict(vector)
    wanted = snippet_terms(query)  # also in vec mode: the words the keyword half would search for
    for item in fused[:k]:
        row = rows.get(item.chunk_id)
        if row is None:
            continue
        found = excerpt(wanted, row.text, row.start_line, text_chars=SNIPPET_CHARS)
        response.results.append(
            Hit(
                source=row.source_id,
                path=row.path,
                line=row.start_line,
                end_line=row.end_line,
                match_line=found.match_line,
                breadcrumb=row.breadcrumb,
                score=round(item.score, 6),
                text=found.text,
                rev=row.indexed_rev if row.kind == "git" else None,
                snippet=found.snippet,
                chunk_text=row.text,
                explain={
                    "bm25_rank": item.ranks.get("bm25"),
                    "bm25": round(bm25[item.chunk_id], 4) if item.chunk_id in bm25 else None,
                    "vec_rank": item.ranks.get("vec"),
                    "distance": round(distance[item.chunk_id], 4) if item.chunk_id in distance else None,
                    "rrf": round(item.score, 6),
                    "language": languages.get(item.chunk_id),
                    "keyword_blind": item.chunk_id in blind,
                },
            )
        )
    response.degraded = bool(notices)
    response.notice = "; ".join(notices + info) or None
    return response


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
        return guarded(config, lambda: embedder_factory().interactive().embed_query(query))
    except EmbedderError as exc:
        if mode == "vec":
            raise
        notices.append(f"vector search unavailable ({exc}); showing keyword results only")
        return None
