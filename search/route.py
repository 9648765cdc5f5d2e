"""Collections and routing: with many folders of notes, the hard part is choosing *where* to search.

A collection is a folder with `_meta.yaml` (name, description, tags). `collections` lists them
(flat up to TREE_AFTER, grouped by name prefix beyond, since a long flat list stops being
readable); `route` ranks them for a question by BM25 over name + description + tags fused (RRF)
with the cosine between the question and each description, so an agent can scope its search.
Collections are few, so both halves run in memory; description vectors are cached per process.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from indexer.config import Config
from indexer.embed_health import guarded
from indexer.errors import EmbedderError
from search.fusion import RRF_K, rrf
from search.querybuild import echoed_query, meaning_text
from search.words import ROUTING_STOPWORDS, STEM_CHARS

if TYPE_CHECKING:  # numpy and the embedders load only when a route is computed
    import numpy as np

    from indexer.embedders import Embedder
    from indexer.store import CollectionRow

# up to ~50 collections, a flat `name — description` list still fits an agent's prompt
TREE_AFTER = 50
ROUTE_K = 3
BM25_K1 = 1.2
BM25_B = 0.75
_WORD = re.compile(r"\w+")


def collection_json(entry: CollectionRow) -> dict[str, object]:
    """A collection as `collections` and `route` print it."""
    return {
        "name": entry.name,
        "description": entry.description,
        "tags": list(entry.tags),
        "source": entry.source_id,
        "folder": entry.folder,
        "files": entry.files,
    }


def collection_line(entry: CollectionRow) -> str:
    """`name — description`, the one line a person (or a prompt) reads per collection."""
    return f"{entry.name} — {entry.description}" if entry.description else entry.name


# ---- listing --------------------------------------------------------------------------------


def group_key(entry: CollectionRow) -> str:
    """The prefix a long list is grouped by: the name's first '/' segment, else its first '-'
    segment, else the folder's first component; a name with none of these is its own group."""
    for separator in ("/", "-"):
        head, sep, _ = entry.name.partition(separator)
        if sep and head:
            return head
    head, sep, _ = entry.folder.partition("/")
    return head if sep and head else entry.name


@dataclass(frozen=True)
class CollectionGroup:
    """The collections whose names share a prefix (see `group_key`)."""

    prefix: str
    members: tuple[CollectionRow, ...]


@dataclass(frozen=True)
class CollectionsView:
    """The collections to list: flat up to TREE_AFTER, else also grouped by name prefix."""

    entries: tuple[CollectionRow, ...]
    groups: tuple[CollectionGroup, ...] | None = None  # None: a flat list
    prefix: str | None = None  # the prefix asked for, if any
    total: int = 0  # collections in the index, whatever the prefix

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def notice(self) -> str | None:
        """Why the list is empty: no collection at all, or none under the prefix asked for."""
        if self.count:
            return None
        if self.prefix and self.total:
            return (
                f"no collection matches the prefix {self.prefix!r} "
                f"({self.total} collections in all: `collections` without a prefix lists them)"
            )
        return NO_COLLECTIONS

    def to_json(self) -> dict[str, object]:
        """`{"count", "layout": "flat", "collections"}` or `{"count", "layout": "tree", "groups"}`."""
        view: dict[str, object] = {"count": self.count}
        if self.groups is None:
            view["layout"] = "flat"
            view["collections"] = [collection_json(e) for e in self.entries]
            return view
        view["layout"] = "tree"
        view["groups"] = [
            {
                "prefix": group.prefix,
                "count": len(group.members),
                "collections": [collection_json(e) for e in group.members],
            }
            for group in self.groups
        ]
        return view


def list_collections(entries: Sequence[CollectionRow], prefix: str | None = None) -> CollectionsView:
    """`prefix` keeps the names below it (or in its group); beyond TREE_AFTER they are grouped."""
    total = len(entries)
    if prefix:
        wanted = prefix.rstrip("/-")
        entries = [e for e in entries if e.name.startswith(prefix) or group_key(e) == wanted]
    if len(entries) <= TREE_AFTER:
        return CollectionsView(tuple(entries), prefix=prefix, total=total)
    groups: dict[str, list[CollectionRow]] = {}
    for entry in entries:
        groups.setdefault(group_key(entry), []).append(entry)
    return CollectionsView(
        tuple(entries),
        tuple(CollectionGroup(key, tuple(members)) for key, members in sorted(groups.items())),
        prefix=prefix,
        total=total,
    )


def collections_view(entries: Sequence[CollectionRow], prefix: str | None = None) -> dict[str, object]:
    """The JSON of `list_collections`."""
    return list_collections(entries, prefix).to_json()


NO_COLLECTIONS = "no collections yet: a folder becomes one with a _meta.yaml (name, description, tags) and a sync"


# ---- routing --------------------------------------------------------------------------------


def fold(text: str) -> str:
    """Lowercase without diacritics ("Zálohy" -> "zalohy"), as the FTS tokenizer folds."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


# the question is folded before it is split, so the list is folded too ("proč" -> "proc")
_STOP = frozenset(fold(word) for word in ROUTING_STOPWORDS)


def terms(text: str) -> list[str]:
    """Folded word stems (first STEM_CHARS letters), minus stop words and one- or two-letter
    tokens. Crude on purpose: the embedding half carries the meaning."""
    return [w[:STEM_CHARS] for w in _WORD.findall(fold(text)) if len(w) > 2 and w not in _STOP]


def bm25_ranking(question: str, documents: Sequence[str]) -> list[tuple[int, float]]:
    """(document index, BM25 score) of the documents sharing a term with the question, best first."""
    query = set(terms(question))
    docs = [Counter(terms(d)) for d in documents]
    if not query or not docs:
        return []
    avg_len = sum(sum(d.values()) for d in docs) / len(docs) or 1.0
    scores: list[tuple[int, float]] = []
    for index, doc in enumerate(docs):
        length = sum(doc.values())
        score = 0.0
        for term in query:
            tf = doc.get(term, 0)
            if not tf:
                continue
            df = sum(1 for d in docs if term in d)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / avg_len))
        if score > 0:
            scores.append((index, score))
    scores.sort(key=lambda item: (-item[1], item[0]))
    return scores


def _name_words(entry: CollectionRow) -> str:
    """A collection's name as words: `devops/vpn-setup` reads as `devops vpn setup`."""
    return entry.name.replace("/", " ").replace("-", " ")


def lexical_text(entry: CollectionRow) -> str:
    return " ".join([_name_words(entry), entry.description, *entry.tags])


MATCH_FIELDS = ("name", "description", "tags")


def matched_words(question: str, entry: CollectionRow) -> dict[str, list[str]]:
    """The question's words found in the collection's name, description and tags, as the
    keyword half compares them (folded, stemmed): what a person checks a route against."""
    fields = {
        "name": set(terms(_name_words(entry))),
        "description": set(terms(entry.description)),
        "tags": set(terms(" ".join(entry.tags))),
    }
    found: dict[str, list[str]] = {name: [] for name in MATCH_FIELDS}
    for word in dict.fromkeys(_WORD.findall(question)):
        for stem in terms(word)[:1]:
            for name in MATCH_FIELDS:
                if stem in fields[name]:
                    found[name].append(word)
    return found


def relevance(score: float, halves: int) -> int:
    """A fused score as 0-100 of the best a collection can get: first in every half that ran
    (keywords, and meaning unless the embedder was unavailable). 50 is first in one half only."""
    return round(100 * score / (halves / (RRF_K + 1))) if halves else 0


def semantic_text(entry: CollectionRow) -> str:
    """What is embedded for a collection: its description alone. Names and tags are terse and
    often in another language than the question; with e5 they blur more than they add."""
    return entry.description or entry.name


@dataclass
class RouteHit:
    entry: CollectionRow
    score: float
    bm25_rank: int | None
    vec_rank: int | None
    cosine: float | None
    relevance: int = 0  # 0-100, see `relevance()`
    matched: dict[str, list[str]] = field(default_factory=dict)  # field -> the question's words in it

    def to_json(self) -> dict[str, object]:
        return {
            **collection_json(self.entry),
            "score": round(self.score, 6),
            "bm25_rank": self.bm25_rank,
            "vec_rank": self.vec_rank,
            "cosine": None if self.cosine is None else round(self.cosine, 4),
            "relevance": self.relevance,
            "matched": self.matched,
        }

    def why(self) -> str:
        """How it matched, in words: `wireguard (description), vpn (tags); meaning #1 (cosine 0.23)`."""
        fields_of: dict[str, list[str]] = {}
        for name in MATCH_FIELDS:
            for word in self.matched.get(name, []):
                fields_of.setdefault(word, []).append(name)
        words = ", ".join(f"{word} ({', '.join(names)})" for word, names in fields_of.items()) or "no word in common"
        if self.cosine is None:
            return f"{words}; meaning not compared"
        return f"{words}; meaning #{self.vec_rank} (cosine {self.cosine:.2f})"


@dataclass
class RouteResponse:
    question: str
    results: list[RouteHit] = field(default_factory=list)
    degraded: bool = False
    notice: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "question": echoed_query(self.question),
            "degraded": self.degraded,
            "notice": self.notice,
            "results": [hit.to_json() for hit in self.results],
        }


class Router:
    """Ranks collections for a question. One per process: it caches description vectors
    (keyed by model and text hash), so a long-lived MCP server embeds each description once.

    Someone waits on a route, so the embedder is asked as a search asks it: once, with short
    timeouts, and not at all while an outage of it is remembered for `config`'s index (the
    memory a search shares). Without a config, outages are not remembered.
    """

    def __init__(self, embedder_factory: Callable[[], Embedder], config: Config | None = None) -> None:
        self.embedder_factory = embedder_factory
        self.config = config
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def route(self, entries: Sequence[CollectionRow], question: str, k: int = ROUTE_K) -> RouteResponse:
        response = RouteResponse(question=question)
        if not entries:
            response.notice = NO_COLLECTIONS
            return response
        if not question.strip():
            response.notice = "empty question"
            return response
        lexical = bm25_ranking(question, [lexical_text(e) for e in entries])
        cosines: dict[int, float] = {}
        try:
            cosines = self._cosines(entries, question)
        except EmbedderError as exc:
            response.degraded = True
            response.notice = f"embedding unavailable ({exc}); ranked by keywords only"
        vector = sorted(cosines, key=lambda i: (-cosines[i], i))
        fused = rrf({"bm25": [i for i, _ in lexical], "vec": vector})
        halves = 1 + (not response.degraded)
        for item in fused[:k]:
            response.results.append(
                RouteHit(
                    entry=entries[item.chunk_id],
                    score=item.score,
                    bm25_rank=item.ranks.get("bm25"),
                    vec_rank=item.ranks.get("vec"),
                    cosine=cosines.get(item.chunk_id),
                    relevance=relevance(item.score, halves),
                    matched=matched_words(question, entries[item.chunk_id]),
                )
            )
        if not response.results and response.notice is None:
            response.notice = "no collection matches the question's words"
        return response

    def _cosines(self, entries: Sequence[CollectionRow], question: str) -> dict[int, float]:
        """Cosine of the question to every description; EmbedderError when there is none."""
        if self.config is None:
            return self._embedded_cosines(entries, question)
        # during a remembered outage the embedder is not even constructed: a route costs what BM25 does
        return guarded(self.config, lambda: self._embedded_cosines(entries, question))

    def _embedded_cosines(self, entries: Sequence[CollectionRow], question: str) -> dict[int, float]:
        """Vectors are L2-normalised: the cosine is a dot product."""
        import numpy as np

        embedder = self.embedder_factory().interactive()
        keys = [self._key(embedder, semantic_text(e)) for e in entries]
        with self._lock:
            missing = {key: semantic_text(e) for key, e in zip(keys, entries, strict=True) if key not in self._vectors}
        if missing:
            vectors = embedder.embed_passages(list(missing.values()))
            with self._lock:
                self._vectors.update(zip(missing, vectors, strict=True))
        query = embedder.embed_query(meaning_text(question))
        with self._lock:
            matrix = np.stack([self._vectors[key] for key in keys])
        return {i: float(v) for i, v in enumerate(matrix @ query)}

    @staticmethod
    def _key(embedder: Embedder, text: str) -> str:
        identity = json.dumps(embedder.config.identity(), sort_keys=True)
        return hashlib.sha256(f"{identity}\0{text}".encode()).hexdigest()
