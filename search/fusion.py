"""Reciprocal Rank Fusion over chunk ids (pure functions)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from indexer.keywords import KeywordQuery, Phrase
from search.exact import fold, tokens

RRF_K = 60
# The rank a blind list is taken to have given an id, as a multiple of its best seen rank. At 1
# a blind id is scored as if every list agreed; 2 measured best on both mixed-language sets
# (bench/EVAL.md: tldr same-language hybrid 0.871 -> 0.879, xquad-mixed within 0.002).
BLIND_RANK_FACTOR = 2
# A meaning hit in another language is background when its cosine similarity stands less than
# BACKGROUND_MARGIN above its language's BACKGROUND_DEPTH-th hit: a long question meets a
# collection's generic chapters in every language at nearly one level, while an answer in
# another language stands out from the rest of its language. Measured on the mixed-notes
# benchmark, xquad-mixed and tldr-mixed (bench/EVAL.md): 0.015-0.03 all give the same-language
# gain; 0.02 costs xquad-mixed cross the least.
BACKGROUND_MARGIN = 0.02
BACKGROUND_DEPTH = 10
# Where notes in other languages are in play, the vector half weighs as much as its first hit
# stands out from its FLAT_MEANING_DEPTH-th, as a share of FLAT_MEANING_GAP: a long question
# meets many notes of every language at one level, and an order among near-equals says little
# (the first hit stands 0.0097 above the 10th where the vector half misses the answer, 0.0225
# where it finds it, median over the mixed-notes questions). Measured (bench/EVAL.md): mixed
# notes MRR@10 0.810 -> 0.833, 11 questions better and 2 worse; xquad-mixed cross unchanged;
# tldr-mixed cross recall@10 -0.006. The gap is on multilingual-e5's cosine scale; a model
# whose similarities spread wider stands out more and is not weighed down.
FLAT_MEANING_GAP = 0.025
FLAT_MEANING_DEPTH = 10


@dataclass(frozen=True)
class Fused:
    chunk_id: int
    score: float
    ranks: dict[str, int] = field(default_factory=dict)  # 1-based rank in each list that has the id
    # what each list added to the score (--explain), and the rank a blind list was taken to give
    # (where it found the id too, only when that rank is the better one)
    parts: dict[str, float] = field(default_factory=dict)
    imputed: dict[str, int] = field(default_factory=dict)
    # the rank a list was counted at where `passed_over` moved it up from `ranks`
    counted: dict[str, int] = field(default_factory=dict)
    # the score of the place it took, where ids one list alone ranked were put back in its order
    place: float | None = None
    # its score equals the one fused just above it: why that one came first (TIE_RULES)
    tie: str | None = None


# how rrf orders equal scores, in this order: the id with no part taken for a blind list (both
# lists found it), then the more recent, then the lower id (the earlier indexed)
TIE_RULES = ("taken", "recency", "id")


class Fusion(NamedTuple):
    """The fused order and what --explain tells of it."""

    fused: list[Fused]
    blind: dict[int, tuple[str, ...]]  # the candidates the keyword half could not see
    exact: dict[int, int]  # how many identifier terms each chunk a widened one matched holds as typed
    verbatim: set[int]  # the holders of a code-like query as typed
    background: set[int]  # other languages' meaning hits passed over (background_hits)


def rrf(
    rankings: Mapping[str, Sequence[int]],
    *,
    k: int = RRF_K,
    recency: Mapping[int, float] | None = None,
    blind: Mapping[int, Collection[str]] | None = None,
    weights: Mapping[str, float] | None = None,
    passed_over: Mapping[int, Collection[int]] | None = None,
) -> list[Fused]:
    """Fuse ranked id lists: score = sum of weight / (k + rank), weights 1 unless given. Ties
    go to an id every list of which found it (over one with a part taken, not found), then to
    the more recent chunk.

    `blind`: id -> the lists that cannot read it (keywords of a Czech question cannot match an
    English note). Its missing ranks are no evidence against it, so a list that could not see
    it is taken to have ranked it at BLIND_RANK_FACTOR times its best rank in the others: a
    strong vector hit in another language is not drowned by keyword hits in the query's, and a
    weak one, where assuming the unseen half agreed is least justified, gains little. A blind
    list that found it anyway, by what both languages share (a name: `LFS`, `GlusterFS`),
    counts the better of the two ranks: matching a note's names never puts it below where
    matching nothing would have. Below the keyword half's first hit, an imputed
    part ranks a blind id against the ids the keyword half found, not against the other ids the
    vector half alone found: those keep its order among themselves (`single_list_order`), or a
    note in the query's language that the meaning half ranks first, which no keyword matches,
    falls behind every other language's notes at one level below it, on an assumption about
    them and none about it.

    `passed_over`: id -> ids that do not count ahead of it in any list (the keyword half's best
    hits are ranked by the vector half without the other languages' background hits, which the
    keyword half could not have ranked). Without `blind`, `weights` and `passed_over` this is
    plain RRF."""
    weight = {name: (weights or {}).get(name, 1.0) for name in rankings}
    parts: dict[int, dict[str, float]] = {}
    ranks: dict[int, dict[str, int]] = {}
    counted: dict[int, dict[str, int]] = {}
    for name, ids in rankings.items():
        for rank, chunk_id in enumerate(ids, 1):
            if name in ranks.get(chunk_id, {}):
                continue  # a list naming an id twice counts it once, at its best rank
            at = rank
            if passed_over and chunk_id in passed_over:
                at = rank - sum(1 for other in ids[: rank - 1] if other in passed_over[chunk_id])
                if at != rank:
                    counted.setdefault(chunk_id, {})[name] = at
            parts.setdefault(chunk_id, {})[name] = weight[name] / (k + at)
            ranks.setdefault(chunk_id, {})[name] = rank
    imputed: dict[int, dict[str, int]] = {}
    for chunk_id, lists in (blind or {}).items():
        if chunk_id not in parts:
            continue
        for name in sorted(set(lists)):
            # the ranks the other lists were counted at (a keyword best hit's meaning rank is
            # counted past other languages' background)
            seeing = [
                counted.get(chunk_id, {}).get(other, rank) for other, rank in ranks[chunk_id].items() if other != name
            ]
            if name not in rankings or not seeing:
                continue
            rank = BLIND_RANK_FACTOR * min(seeing)
            part = weight[name] / (k + rank)
            if name not in ranks[chunk_id] or part > parts[chunk_id][name]:
                parts[chunk_id][name] = part
                imputed.setdefault(chunk_id, {})[name] = rank
    scores = {cid: sum(got.values()) for cid, got in parts.items()}
    recency = recency or {}

    def key(cid: int) -> tuple[float, bool, float, int]:  # the score, then TIE_RULES in order
        return -round(scores[cid], 12), cid in imputed, -recency.get(cid, 0.0), cid

    order = sorted(scores, key=key)
    ties = {}
    for above, cid in itertools.pairwise(order):
        if key(above)[0] == key(cid)[0]:  # the first part of the keys that differs settled it
            ties[cid] = next(rule for rule, a, b in zip(TIE_RULES, key(above)[1:], key(cid)[1:], strict=True) if a != b)
    # the lists that ranked the ids an imputed part was added to, the blind list aside
    kept = {name for chunk_id, lists in imputed.items() for name in ranks[chunk_id] if name not in lists}
    placed = single_list_order(order, ranks, kept) if kept else order
    return [
        Fused(
            cid,
            scores[cid],
            ranks[cid],
            parts[cid],
            imputed.get(cid, {}),
            counted.get(cid, {}),
            scores[at] if round(scores[at], 12) != round(scores[cid], 12) else None,
            ties.get(cid),
        )
        for at, cid in zip(order, placed, strict=True)
    ]


def single_list_order(
    order: Sequence[int], ranks: Mapping[int, Mapping[str, int]], lists: Collection[str]
) -> list[int]:
    """`order` with the ids that one of `lists` alone ranked put back in that list's order, each
    into a place fusion gave one of them below the first id another list ranked: where they sit
    among the others is fusion's, which of them sits first is their list's. Above that first id
    the order stands: an answer in another language that outranks the keyword half's best hit
    keeps its place, and no id rises above that hit on a place another id's imputed part won."""
    below: set[str] = set()  # the lists whose first id another list ranked is already passed
    places: dict[str, list[int]] = {}
    for position, chunk_id in enumerate(order):
        ranked_by = ranks[chunk_id]
        if len(ranked_by) == 1:
            (only,) = ranked_by
            if only in below:
                places.setdefault(only, []).append(position)
        below |= {name for name in lists if any(other != name for other in ranked_by)}
    placed = list(order)
    for name, positions in places.items():
        ids = sorted((order[position] for position in positions), key=lambda chunk_id: ranks[chunk_id][name])
        for position, chunk_id in zip(positions, ids, strict=True):
            placed[position] = chunk_id
    return placed


def background_hits(
    vector: Sequence[tuple[int, float]],
    blind: Collection[int],
    languages: Mapping[int, str],
    keyword_best: Collection[int],
) -> set[int]:
    """The `blind` meaning hits (id, similarity; best first) that do not stand out: less than
    BACKGROUND_MARGIN above their own language's BACKGROUND_DEPTH-th hit (or, with fewer, its
    last) and above the nearest of the keyword half's best hits (`keyword_best`). They are what a
    question of some length meets in that language, not its answer. None without a keyword
    best hit among the meaning hits: there is nothing to rank against them."""
    similarity_of = dict(vector)
    nearest = max((similarity_of[cid] for cid in keyword_best if cid in similarity_of), default=None)
    if nearest is None:
        return set()
    foreign = [
        (chunk_id, languages.get(chunk_id, ""), similarity) for chunk_id, similarity in vector if chunk_id in blind
    ]
    of_language: dict[str, list[float]] = {}
    for _, language, similarity in foreign:
        of_language.setdefault(language, []).append(similarity)
    level = {language: found[:BACKGROUND_DEPTH][-1] for language, found in of_language.items()}
    return {
        chunk_id
        for chunk_id, language, similarity in foreign
        if similarity - level[language] < BACKGROUND_MARGIN and similarity - nearest < BACKGROUND_MARGIN
    }


def meaning_weight(similarities: Sequence[float]) -> float:
    """The vector half's weight where notes in other languages are in play: how far its first
    hit (similarities best first) stands above its FLAT_MEANING_DEPTH-th (or last), as a share
    of FLAT_MEANING_GAP, at most 1. A list of one or none is not weighed down."""
    if len(similarities) < 2:
        return 1.0
    gap = similarities[0] - similarities[:FLAT_MEANING_DEPTH][-1]
    return round(min(1.0, max(gap, 0.0) / FLAT_MEANING_GAP), 4)


def match_terms(query: KeywordQuery | None) -> list[tuple[tuple[str, ...], bool]]:
    """The phrases of a keyword query as the index compares them: (folded words, prefix?) per
    phrase; none for no query."""
    terms = []
    for phrase in query.phrases if query is not None else ():
        words = folded_words(phrase)
        if words:
            terms.append((words, phrase.prefix))
    return terms


def folded_words(phrase: Phrase) -> tuple[str, ...]:
    """A phrase's words as the index folds them (what `match_terms` compares)."""
    return tuple(tokens(" ".join(phrase.words)))


def term_coverage(terms: Sequence[tuple[tuple[str, ...], bool]], text: str) -> float:
    """The share of the query's terms that `text` contains (prefix terms as prefixes; a phrase
    counts when all its words are there). The keyword half's evidence for its best hit."""
    return len(covered_terms(terms, text)) / len(terms) if terms else 0.0


def covered_terms(
    terms: Sequence[tuple[tuple[str, ...], bool]], text: str, wanted: Collection[int] | None = None
) -> set[int]:
    """The positions in `terms` of the terms `text` contains, looking only for those in `wanted`
    (all unless given): a note's sections are read one after another for what is still missing."""
    folded = fold(text)

    def has(word: str, as_prefix: bool) -> bool:
        # a word is made of token characters, so where it starts a token it is that token or,
        # as a prefix, begins it: finding it is cheaper than splitting the whole text (a token
        # character is what `[^\W_]` matches, which is str.isalnum)
        start = folded.find(word)
        while start >= 0:
            end = start + len(word)
            if (start == 0 or not folded[start - 1].isalnum()) and (
                as_prefix or end == len(folded) or not folded[end].isalnum()
            ):
                return True
            start = folded.find(word, start + 1)
        return False

    found = set()
    for i, (words, prefix) in enumerate(terms):
        if wanted is not None and i not in wanted:
            continue
        last = len(words) - 1
        if all(has(w, (prefix and j == last) or len(words) > 1) for j, w in enumerate(words)):
            found.add(i)
    return found


def exact_value_terms(terms: Sequence[tuple[tuple[str, ...], bool]]) -> list[tuple[tuple[str, ...], bool]]:
    """The query's terms that belong to no language: numbers, versions, hostnames, ports, ids
    (a term with a digit, or words the query joined by punctuation: `5432`, `db-01.lan`,
    `51820/udp`), and quoted phrases (words asked for as typed). A note in any language may
    hold them, so keywords are not blind across languages when such a term is found."""
    return [
        (words, prefix) for words, prefix in terms if len(words) > 1 or any(ch.isdigit() for w in words for ch in w)
    ]
