"""The fusion of a mixed-language index on hand-made hit lists: a note in the query's language
that holds every word of the query keeps its keyword evidence, and an answer in another
language that the vector half finds clearly nearer still rises.

The lists mirror a measured case (a 13-note cs/en/ru folder, `obnova zálohy`, the real model):
similarities of 0.78-0.82 are the background of a two-word query there."""

from __future__ import annotations

import pytest

from indexer.config import parse_config
from indexer.store import ChunkRow, RankedChunk
from search import engine
from search.engine import SearchResponse, keyword_coverage
from search.fusion import match_terms, rrf
from search.querybuild import build_fts_query

QUERY = "obnova zálohy"

# id: (path, breadcrumb, text, language)
CHUNKS = {
    # one Czech note: the restore section says `obnova`, the set-up section `zálohy`
    1: (
        "cs/restic.md",
        "Restic na NAS > Jak dostat data zpátky",
        "Obnova jednoho souboru: restic restore latest.",
        "cs",
    ),
    2: ("cs/restic.md", "Restic na NAS", "Každou noc jdou zálohy na NAS, restic je šifruje.", "cs"),
    3: ("cs/disky.md", "Disky a SMART", "Nové disky testuji, než na ně pustím zálohy.", "cs"),
    # other languages, nothing to do with restoring a backup
    10: ("en/docker.md", "Docker Compose conventions", "Every service lives in /srv with its compose file.", "en"),
    11: ("ru/postgres.md", "Репликация PostgreSQL", "Реплика на ноутбуке в режиме горячего резерва.", "ru"),
    12: ("en/ssh.md", "SSH keys", "One ed25519 key per device.", "en"),
    13: ("ru/nginx.md", "Nginx", "Все веб-сервисы идут через один nginx.", "ru"),
    14: ("ru/borsch.md", "Борщ", "Бульон варю из говядины два часа.", "ru"),
    # the same question answered in English
    20: ("en/restore.md", "Restoring from backup", "How to get files back from the restic repository.", "en"),
}


def rows() -> dict[int, ChunkRow]:
    return {
        cid: ChunkRow(cid, "notes", path, 0, crumb, text, 1, 3, 0.0, None, "workspace")
        for cid, (path, crumb, text, _) in CHUNKS.items()
    }


def fuse(lexical: list[int], vector: list[tuple[int, float]], query: str = QUERY) -> list[str]:
    """The engine's fusion of these lists for a Czech query: the paths, best first."""
    config = parse_config("sources: {}\n")
    response = SearchResponse(query=query, mode="hybrid", query_language="cs")
    match = build_fts_query(query)
    languages = {cid: CHUNKS[cid][3] for cid, _ in vector if cid not in lexical}
    fused, _, _ = engine._fuse(
        config,
        response,
        "hybrid",
        match,
        [],
        [RankedChunk(cid, -10.0 + rank) for rank, cid in enumerate(lexical)],
        [RankedChunk(cid, 1.0 - similarity) for cid, similarity in vector],
        rows(),
        languages,
    )
    return [f"{CHUNKS[item.chunk_id][0]}#{item.chunk_id}" for item in fused]


def test_a_note_covers_the_query_over_all_of_its_keyword_hits() -> None:
    terms = match_terms(build_fts_query(QUERY) or "")
    texts = {cid: f"{crumb}\n{text}" for cid, (_, crumb, text, _) in CHUNKS.items()}
    files = {cid: path for cid, (path, *_) in CHUNKS.items()}
    assert keyword_coverage(terms, [1, 3, 2], texts, files) == 1.0
    # the same sections in two notes: no note holds both words
    assert keyword_coverage(terms, [1, 3, 2], texts, {**files, 2: "cs/other.md"}) == 0.5
    # only the notes of the best hits are weighed, each with all of its keyword hits
    assert keyword_coverage(terms, [3, 3, 3, 3, 3, 1, 2], texts, files) == 0.5
    assert keyword_coverage([], [1, 2], texts, files) == 0.0


def test_a_note_holding_every_query_word_is_not_outranked_by_background_meaning_hits() -> None:
    lexical = [1, 2, 3]  # the restore section first: `obnova` is rarer than `zálohy`
    vector = [(3, 0.822), (1, 0.820), (10, 0.812), (2, 0.807), (11, 0.799), (12, 0.798), (13, 0.796), (14, 0.796)]
    ranked = fuse(lexical, vector)
    assert ranked[0] == "cs/restic.md#1"
    restic = max(ranked.index(hit) for hit in ("cs/restic.md#1", "cs/restic.md#2"))
    foreign = min(ranked.index(hit) for hit in ranked if hit.startswith(("en/", "ru/")))
    assert restic < foreign, ranked  # both of its sections come before any other language's note


def test_a_clearly_nearer_answer_in_another_language_still_rises() -> None:
    lexical = [1, 2, 3]
    vector = [(20, 0.880), (3, 0.822), (1, 0.820), (10, 0.812), (2, 0.807), (11, 0.799), (12, 0.798)]
    ranked = fuse(lexical, vector)
    assert ranked[0] == "en/restore.md#20", ranked
    assert ranked[1] == "cs/restic.md#1", ranked
    # a longer Czech question whose words no note holds together: the English answer leads by more
    question = "jak obnovit soubory ze zálohy na notebooku"
    ranked = fuse([3, 2], [(20, 0.880), (3, 0.822), (1, 0.820), (10, 0.812), (2, 0.807)], question)
    assert ranked[0] == "en/restore.md#20", ranked


def test_rrf_records_what_each_list_added() -> None:
    fused = {f.chunk_id: f for f in rrf({"bm25": [1, 2], "vec": [9, 1]}, blind={9: ("bm25",)}, weights={"bm25": 0.5})}
    assert fused[1].parts == {"bm25": pytest.approx(0.5 / 61), "vec": pytest.approx(1 / 62)}
    assert fused[1].imputed == {}
    # the blind one is credited at twice its best rank, with the list's weight
    assert fused[9].imputed == {"bm25": 2}
    assert fused[9].parts == {"vec": pytest.approx(1 / 61), "bm25": pytest.approx(0.5 / 62)}
    assert all(f.score == pytest.approx(sum(f.parts.values())) for f in fused.values())
