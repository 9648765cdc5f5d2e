"""Collections and routing (seed B §3, §7): the hard part is choosing *where* to search.

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
from typing import TYPE_CHECKING, cast

import click

from indexer.errors import EmbedderError
from indexer.store import Store
from search.fusion import rrf
from search.terminal import echo, echo_json, styled

if TYPE_CHECKING:  # numpy and the embedders load only when a route is computed
    import numpy as np

    from indexer.embedders import Embedder
    from search.cli import App

TREE_AFTER = 50  # seed B §7: up to ~50 collections a flat `name — description` list fits a prompt
ROUTE_K = 3
STEM_CHARS = 5  # crude stemming: "zálohy"/"zálohování", "рецепт"/"рецепты" share their first 5 letters
BM25_K1 = 1.2
BM25_B = 0.75
_WORD = re.compile(r"\w+")
# function words of the three languages the notes are written in; without them a question's
# "what"/"jak"/"как" would give a collection a lexical rank (which RRF rewards) for nothing
STOPWORDS = frozenset(
    """
    the and for are was were with what which when where who whom why how that this these those from into
    about have has had does did can could should would will your you our their there here not but any all
    some more most also than then them they its just only very such other each many much over under
    jak jaký jaká jaké kde kdy kdo kolik proč což pro při jsou jsem jsme byl byla bylo být nebo ale tak
    také jako jen ještě už této tento tato toho tom tím mám máme mít může můžu musím který která které
    что как где когда кто какой какая какое какие сколько почему зачем это этот эта эти там тут для при
    или так также уже ещё есть был была были быть мне меня мой моя мои наш наша нам нас вам вас они она
    оно его её их чем чтобы можно нужно
    """.split()
)


@dataclass(frozen=True)
class CollectionEntry:
    source_id: str
    name: str
    folder: str
    description: str
    tags: tuple[str, ...]
    files: int

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "tags": list(self.tags),
            "source": self.source_id,
            "folder": self.folder,
            "files": self.files,
        }

    @property
    def line(self) -> str:
        return f"{self.name} — {self.description}" if self.description else self.name


def load_entries(store: Store) -> list[CollectionEntry]:
    return [
        CollectionEntry(
            source_id=str(row["source_id"]),
            name=str(row["name"]),
            folder=str(row["folder"]),
            description=str(row["description"]),
            tags=tuple(cast("list[str]", row["tags"])),
            files=cast(int, row["files"]),
        )
        for row in store.collections()
    ]


# ---- listing --------------------------------------------------------------------------------


def group_key(entry: CollectionEntry) -> str:
    """The prefix a long list is grouped by: the name's first '/' segment, else its first '-'
    segment, else the folder's first component; a name with none of these is its own group."""
    for separator in ("/", "-"):
        head, sep, _ = entry.name.partition(separator)
        if sep and head:
            return head
    head, sep, _ = entry.folder.partition("/")
    return head if sep and head else entry.name


def collections_view(entries: Sequence[CollectionEntry], prefix: str | None = None) -> dict[str, object]:
    """`{"count", "layout": "flat", "collections"}`, or `{"count", "layout": "tree", "groups"}`
    when there are more than TREE_AFTER. `prefix` keeps the names below it (or in its group)."""
    if prefix:
        wanted = prefix.rstrip("/-")
        entries = [e for e in entries if e.name.startswith(prefix) or group_key(e) == wanted]
    view: dict[str, object] = {"count": len(entries)}
    if len(entries) <= TREE_AFTER:
        view["layout"] = "flat"
        view["collections"] = [e.to_json() for e in entries]
        return view
    groups: dict[str, list[CollectionEntry]] = {}
    for entry in entries:
        groups.setdefault(group_key(entry), []).append(entry)
    view["layout"] = "tree"
    view["groups"] = [
        {"prefix": key, "count": len(members), "collections": [e.to_json() for e in members]}
        for key, members in sorted(groups.items())
    ]
    return view


NO_COLLECTIONS = "no collections yet: a folder becomes one with a _meta.yaml (name, description, tags) and a sync"


# ---- routing --------------------------------------------------------------------------------


def fold(text: str) -> str:
    """Lowercase without diacritics ("Zálohy" -> "zalohy"), as the FTS tokenizer folds."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


_STOP = frozenset(fold(word) for word in STOPWORDS)


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


def lexical_text(entry: CollectionEntry) -> str:
    return " ".join([entry.name.replace("/", " ").replace("-", " "), entry.description, *entry.tags])


def semantic_text(entry: CollectionEntry) -> str:
    """What is embedded for a collection: its description alone. Names and tags are terse and
    often in another language than the question; with e5 they blur more than they add."""
    return entry.description or entry.name


@dataclass
class RouteHit:
    entry: CollectionEntry
    score: float
    bm25_rank: int | None
    vec_rank: int | None
    cosine: float | None

    def to_json(self) -> dict[str, object]:
        return {
            **self.entry.to_json(),
            "score": round(self.score, 6),
            "bm25_rank": self.bm25_rank,
            "vec_rank": self.vec_rank,
            "cosine": None if self.cosine is None else round(self.cosine, 4),
        }


@dataclass
class RouteResponse:
    question: str
    results: list[RouteHit] = field(default_factory=list)
    degraded: bool = False
    notice: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "question": self.question,
            "degraded": self.degraded,
            "notice": self.notice,
            "results": [hit.to_json() for hit in self.results],
        }


class Router:
    """Ranks collections for a question. One per process: it caches description vectors
    (keyed by model and text hash), so a long-lived MCP server embeds each description once."""

    def __init__(self, embedder_factory: Callable[[], Embedder]) -> None:
        self.embedder_factory = embedder_factory
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def route(self, entries: Sequence[CollectionEntry], question: str, k: int = ROUTE_K) -> RouteResponse:
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
        for item in fused[:k]:
            response.results.append(
                RouteHit(
                    entry=entries[item.chunk_id],
                    score=item.score,
                    bm25_rank=item.ranks.get("bm25"),
                    vec_rank=item.ranks.get("vec"),
                    cosine=cosines.get(item.chunk_id),
                )
            )
        if not response.results and response.notice is None:
            response.notice = "no collection matches the question's words"
        return response

    def _cosines(self, entries: Sequence[CollectionEntry], question: str) -> dict[int, float]:
        """Cosine of the question to every description (vectors are L2-normalised: a dot product)."""
        import numpy as np

        embedder = self.embedder_factory()
        keys = [self._key(embedder, semantic_text(e)) for e in entries]
        with self._lock:
            missing = {key: semantic_text(e) for key, e in zip(keys, entries) if key not in self._vectors}
        if missing:
            vectors = embedder.embed_passages(list(missing.values()))
            with self._lock:
                self._vectors.update(zip(missing, vectors))
        query = embedder.embed_query(question)
        with self._lock:
            matrix = np.stack([self._vectors[key] for key in keys])
        return {i: float(v) for i, v in enumerate(matrix @ query)}

    @staticmethod
    def _key(embedder: Embedder, text: str) -> str:
        identity = json.dumps(embedder.config.identity(), sort_keys=True)
        return hashlib.sha256(f"{identity}\0{text}".encode()).hexdigest()


# ---- CLI ------------------------------------------------------------------------------------


def _entries(app: App) -> list[CollectionEntry]:
    store = app.open_store(readonly=True)
    try:
        return load_entries(store)
    finally:
        store.close()


@click.command("collections")
@click.option("--prefix", metavar="P", help="Only collections whose name starts with P (or in group P).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: flat list, or groups beyond 50.")
@click.pass_obj
def collections_command(app: App, prefix: str | None, as_json: bool) -> None:
    """List collections (folders with _meta.yaml) as `name — description`."""
    view = collections_view(_entries(app), prefix)
    if as_json:
        echo_json(view)
        return
    if not view["count"]:
        echo(NO_COLLECTIONS, err=True)
        return
    if view["layout"] == "flat":
        for item in view["collections"]:  # type: ignore[attr-defined]
            echo(_line(item))
        return
    for group in view["groups"]:  # type: ignore[attr-defined]
        echo(styled(f"{group['prefix']}/ ({group['count']})", bold=True))
        for item in group["collections"]:
            echo("  " + _line(item))


def _line(item: dict[str, object]) -> str:
    return f"{item['name']} — {item['description']}" if item["description"] else str(item["name"])


@click.command("route")
@click.argument("text")
@click.option("-k", "k", default=ROUTE_K, show_default=True, type=click.IntRange(1, 100), help="Collections to return.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.pass_obj
def route_command(app: App, text: str, k: int, as_json: bool) -> None:
    """Pick the collections a question most likely belongs to (then: query --collection NAME)."""
    response = Router(app.embedder).route(_entries(app), text, k)
    if as_json:
        echo_json(response.to_json())
        return
    if response.notice:
        echo(f"notice: {response.notice}", err=True)
    for hit in response.results:
        echo(f"{hit.score:.4f}  {hit.entry.line}")
