"""Reciprocal Rank Fusion over chunk ids (pure functions)."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

RRF_K = 60


@dataclass(frozen=True)
class Fused:
    chunk_id: int
    score: float
    ranks: dict[str, int] = field(default_factory=dict)  # 1-based rank in each list that has the id


def rrf(
    rankings: Mapping[str, Sequence[int]],
    *,
    k: int = RRF_K,
    recency: Mapping[int, float] | None = None,
    blind: Mapping[int, Collection[str]] | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[Fused]:
    """Fuse ranked id lists: score = sum of weight / (k + rank), weights 1 unless given. Ties
    go to the more recent chunk.

    `blind`: id -> the lists that could not have found it (keywords of a Czech question cannot
    match an English note). Such an id is scored over the lists that could, scaled up to the
    weight of all of them: its missing ranks are no evidence against it, so a good vector hit
    in another language is not drowned by keyword hits in the query's. An id a list did rank
    is never blind to it. Without `blind` and `weights` this is plain RRF."""
    weight = {name: (weights or {}).get(name, 1.0) for name in rankings}
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    for name, ids in rankings.items():
        for rank, chunk_id in enumerate(ids, 1):
            if name in ranks.get(chunk_id, {}):
                continue  # a list naming an id twice counts it once, at its best rank
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight[name] / (k + rank)
            ranks.setdefault(chunk_id, {})[name] = rank
    total = sum(weight.values())
    for chunk_id, lists in (blind or {}).items():
        if chunk_id not in scores:
            continue
        unseeing = sum(weight[name] for name in set(lists) if name in rankings and name not in ranks[chunk_id])
        if unseeing and total > unseeing:
            scores[chunk_id] *= total / (total - unseeing)
    recency = recency or {}
    order = sorted(scores, key=lambda cid: (-round(scores[cid], 12), -recency.get(cid, 0.0), cid))
    return [Fused(cid, scores[cid], ranks[cid]) for cid in order]


_TERM = re.compile(r'"((?:[^"]|"")*)"(\*?)')
_TOKEN = re.compile(r"[^\W_]+")


_MARKS = re.compile(r"[\u0300-\u036f]")


def _fold(text: str) -> str:
    """What FTS5's unicode61 tokenizer (remove_diacritics 2) compares: lowercase, no accents.
    Only Latin/Cyrillic accents matter here; the regex is ~10x faster than testing each char."""
    return _MARKS.sub("", unicodedata.normalize("NFKD", text.casefold()))


def match_terms(match: str) -> list[tuple[tuple[str, ...], bool]]:
    """The terms of a MATCH expression from search.querybuild: (words, prefix?) per term."""
    terms = []
    for body, star in _TERM.findall(match):
        words = tuple(_TOKEN.findall(_fold(body.replace('""', '"'))))
        if words:
            terms.append((words, bool(star)))
    return terms


def term_coverage(terms: Sequence[tuple[tuple[str, ...], bool]], text: str) -> float:
    """The share of the query's terms that `text` contains (prefix terms as prefixes; a phrase
    counts when all its words are there). The keyword half's evidence for its best hit."""
    if not terms:
        return 0.0
    tokens = sorted(set(_TOKEN.findall(_fold(text))))

    def has(word: str, as_prefix: bool) -> bool:
        i = bisect.bisect_left(tokens, word)
        return i < len(tokens) and (tokens[i] == word or (as_prefix and tokens[i].startswith(word)))

    found = 0
    for words, prefix in terms:
        last = len(words) - 1
        found += all(has(w, (prefix and i == last) or len(words) > 1) for i, w in enumerate(words))
    return found / len(terms)
