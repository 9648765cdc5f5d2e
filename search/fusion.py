"""Reciprocal Rank Fusion over chunk ids (pure functions)."""

from __future__ import annotations

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
) -> list[Fused]:
    """Fuse ranked id lists: score = sum of 1 / (k + rank). Ties go to the more recent chunk.

    `blind`: id -> the lists that could not have found it (keywords of a Czech question cannot
    match an English note). Such an id is scored over the lists that could, scaled to all of
    them: its missing ranks are no evidence against it, so a good vector hit in another
    language is not drowned by weak keyword hits in the query's. An id a list did rank is never
    blind to it. Without `blind` this is plain RRF."""
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    for name, ids in rankings.items():
        for rank, chunk_id in enumerate(ids, 1):
            if name in ranks.get(chunk_id, {}):
                continue  # a list naming an id twice counts it once, at its best rank
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
            ranks.setdefault(chunk_id, {})[name] = rank
    for chunk_id, lists in (blind or {}).items():
        if chunk_id not in scores:
            continue
        unseeing = {name for name in lists if name in rankings and name not in ranks[chunk_id]}
        if unseeing and len(unseeing) < len(rankings):
            scores[chunk_id] *= len(rankings) / (len(rankings) - len(unseeing))
    recency = recency or {}
    order = sorted(scores, key=lambda cid: (-round(scores[cid], 12), -recency.get(cid, 0.0), cid))
    return [Fused(cid, scores[cid], ranks[cid]) for cid in order]
