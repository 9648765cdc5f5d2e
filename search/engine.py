"""Run one search against the store: lexical and vector halves, fusion, honest degraded mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from indexer.config import Config, identity_mismatch
from indexer.errors import EmbedderError, EmbedderUnavailable, NotesSearchError, ReindexNeeded
from indexer.store import SearchScope, Store
from search.fusion import rrf
from search.querybuild import build_fts_query

if TYPE_CHECKING:  # numpy and the embedders stay unimported on the lexical path
    import numpy as np

    from indexer.embedders import Embedder
    from search.resident import ResidentVectors

MODES = ("hybrid", "lex", "vec")
SNIPPET_CHARS = 1200
MIN_DEPTH = 50  # candidates taken from each half before fusion


@dataclass
class Hit:
    source: str
    path: str
    line: int
    end_line: int
    breadcrumb: str
    score: float
    text: str
    rev: str | None
    explain: dict[str, float | int | None] = field(default_factory=dict)

    def to_json(self, explain: bool = False) -> dict[str, object]:
        data = asdict(self)
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

    def to_json(self, explain: bool = False) -> dict[str, object]:
        return {
            "query": self.query,
            "mode": self.mode,
            "degraded": self.degraded,
            "notice": self.notice,
            "results": [hit.to_json(explain) for hit in self.results],
        }


def check_identity(config: Config, store: Store) -> None:
    """Refuse vector search when the index holds another embedding space than the config's."""
    mismatch = identity_mismatch(config.embedding, store.meta())
    if mismatch or not store.has_vector_table():
        detail = "; ".join(mismatch) or "the index has no vectors yet"
        raise ReindexNeeded(f"reindex needed: {detail}. Run `notes-search sync` to rebuild the vectors")


def search(
    store: Store,
    config: Config,
    query: str,
    *,
    k: int = 8,
    mode: str = "hybrid",
    scope: SearchScope = SearchScope(),
    embedder_factory: Callable[[], "Embedder"],
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
            check_identity(config, store)
        lexical: list[tuple[int, float]] = []
        if mode != "vec":
            match = build_fts_query(query)
            if match is not None:
                lexical = store.fts_search(match, depth, scope)
            elif mode == "lex":
                info.append("the query has no searchable words")
        vector: list[tuple[int, float]] = []
        if mode != "lex":
            query_vector = _embed_query(config, embedder_factory, query, mode, notices, info)
            if query_vector is not None:
                from_memory = resident.knn(store, query_vector, depth) if resident and scope.is_all else None
                vector = from_memory if from_memory is not None else store.vec_search(query_vector, depth, scope)
                pending = store.count_pending(scope)
                if pending:
                    notices.append(
                        f"{pending} chunks in scope have no vector yet (run `notes-search sync`); "
                        "they can only match by keywords"
                    )
        rows = store.chunk_rows({cid for cid, _ in lexical} | {cid for cid, _ in vector})
    recency = {cid: row.updated_at for cid, row in rows.items()}
    fused = rrf({"bm25": [cid for cid, _ in lexical], "vec": [cid for cid, _ in vector]}, recency=recency)
    bm25 = dict(lexical)
    distance = dict(vector)
    for item in fused[:k]:
        row = rows.get(item.chunk_id)
        if row is None:
            continue
        response.results.append(
            Hit(
                source=row.source_id,
                path=row.path,
                line=row.start_line,
                end_line=row.end_line,
                breadcrumb=row.breadcrumb,
                score=round(item.score, 6),
                text=row.text[:SNIPPET_CHARS],
                rev=row.indexed_rev if row.kind == "git" else None,
                explain={
                    "bm25_rank": item.ranks.get("bm25"),
                    "bm25": round(bm25[item.chunk_id], 4) if item.chunk_id in bm25 else None,
                    "vec_rank": item.ranks.get("vec"),
                    "distance": round(distance[item.chunk_id], 4) if item.chunk_id in distance else None,
                    "rrf": round(item.score, 6),
                },
            )
        )
    response.degraded = bool(notices)
    response.notice = "; ".join(notices + info) or None
    return response


def _embed_query(
    config: Config, embedder_factory: Callable[[], "Embedder"], query: str, mode: str, notices: list[str],
    info: list[str],
) -> np.ndarray | None:
    """The query vector, or None with a notice when the embedder is down (hybrid degrades to lex).

    One attempt with short timeouts; a failure is remembered for a while (embed_health), during
    which the embedder is not even constructed, so a degraded search costs what a lexical one does.
    """
    from indexer.embed_health import embedder_health

    if not query.strip():
        info.append("empty query")
        return None
    health = embedder_health(config)
    try:
        outage = health.outage(config.embedding)
        if outage is not None:
            raise EmbedderUnavailable(outage)
        try:
            vector = embedder_factory().interactive().embed_query(query)
        except EmbedderUnavailable as exc:
            health.failed(config.embedding, str(exc))
            raise
        health.succeeded(config.embedding)
        return vector
    except EmbedderError as exc:
        if mode == "vec":
            raise
        notices.append(f"vector search unavailable ({exc}); showing keyword results only")
        return None
