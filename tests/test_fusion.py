"""The fusion of a mixed-language index on hand-made hit lists: a note in the query's language
that holds every word of the query keeps its keyword evidence, and an answer in another
language that the vector half finds clearly nearer still rises.

The lists mirror measured cases: a 13-note cs/en/ru folder, `obnova zálohy` and the real model
(similarities of 0.78-0.82 are the background of a two-word query there), and the mixed-notes
benchmark, where a long question meets other languages' generic notes at one flat level and
its same-language answer, the keyword half's first hit, sits below a dozen of them."""

from __future__ import annotations

import pytest

from indexer.config import parse_config
from indexer.store import ChunkRow, RankedChunk
from search import engine, fusion
from search.engine import SearchResponse, keyword_coverage
from search.fusion import Fusion, background_hits, match_terms, meaning_weight, rrf
from search.querybuild import keyword_query

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
    # a long question's answer in its own language, holding few of its words
    30: ("cs/zurnal.md", "Žurnál systemd", "journalctl --vacuum-size=200M omezí žurnál na disku.", "cs"),
    31: ("cs/archiv.md", "Archiv", "Které poznámky patří do archivu.", "cs"),
    21: ("en/journal.md", "Limiting the systemd journal", "journalctl --vacuum-size keeps the journal small.", "en"),
    # other languages' generic notes, which a long question meets at one level of similarity
    **{40 + i: (f"{lang}/generic-{i}.md", "Notes", "Generic text.", lang) for i, lang in enumerate(["en", "ru"] * 6)},
    # the query's language's generic notes, met at one level too
    **{60 + i: (f"cs/obecne-{i}.md", "Poznámky", "Obecný text.", "cs") for i in range(10)},
}
LONG_QUESTION = "Jak omezit místo, které systémový žurnál zabírá na disku?"
# twelve background hits (their language's first stands 0.010 above its last), then the answer
BACKGROUND = [(40 + i, 0.870 - 0.001 * i) for i in range(12)]


def rows() -> dict[int, ChunkRow]:
    return {
        cid: ChunkRow(cid, "notes", path, 0, crumb, text, 1, 3, 0.0, None, "workspace")
        for cid, (path, crumb, text, _) in CHUNKS.items()
    }


def fusion_of(lexical: list[int], vector: list[tuple[int, float]], query: str = QUERY) -> Fusion:
    """The engine's fusion of these lists for a Czech query."""
    config = parse_config("sources: {}\n")
    response = SearchResponse(query=query, mode="hybrid", query_language="cs")
    match = keyword_query(query)
    languages = {cid: CHUNKS[cid][3] for cid, _ in vector}
    return engine._fuse(
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


def fuse(lexical: list[int], vector: list[tuple[int, float]], query: str = QUERY) -> list[str]:
    """The paths of `fusion_of(...)`, best first."""
    return [f"{CHUNKS[item.chunk_id][0]}#{item.chunk_id}" for item in fusion_of(lexical, vector, query).fused]


def test_a_note_covers_the_query_over_all_of_its_keyword_hits() -> None:
    terms = match_terms(keyword_query(QUERY))
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


def test_a_blind_list_that_found_an_id_counts_the_better_of_its_rank_and_the_imputed_one() -> None:
    # 9 and 8: another language; the keyword half found 9 by a name it holds, at 10th
    lexical = [1, 2, 3, 4, 5, 6, 7, 10, 11, 9]
    fused = {f.chunk_id: f for f in rrf({"bm25": lexical, "vec": [9, 8, 1]}, blind={9: ("bm25",), 8: ("bm25",)})}
    assert fused[9].ranks == {"bm25": 10, "vec": 1} and fused[9].imputed == {"bm25": 2}
    assert fused[9].parts["bm25"] == pytest.approx(1 / 62)
    # so it is not passed by 8, which the keyword half did not find and is taken to rank 4th
    assert fused[9].score > fused[8].score
    # found above the imputed rank, its own rank counts
    first = {f.chunk_id: f for f in rrf({"bm25": [9, 1], "vec": [1, 2, 9]}, blind={9: ("bm25",)})}
    assert first[9].imputed == {} and first[9].parts["bm25"] == pytest.approx(1 / 61)


def test_a_tie_goes_to_the_id_both_lists_found_over_one_with_a_part_taken() -> None:
    # 1: keyword 1, meaning 2; 9: another language, meaning 1, its keyword part taken at 2: equal
    # scores, and 9 the more recent
    fused = rrf({"bm25": [1], "vec": [9, 1]}, blind={9: ("bm25",)}, recency={9: 2.0, 1: 1.0})
    assert fused[0].score == pytest.approx(fused[1].score)
    assert [f.chunk_id for f in fused] == [1, 9]
    assert [f.tie for f in fused] == [None, "taken"]  # --explain says which rule settled it
    # without a part taken, recency decides a tie
    by_recency = rrf({"bm25": [1, 9], "vec": [9, 1]}, recency={9: 2.0, 1: 1.0})
    assert [(f.chunk_id, f.tie) for f in by_recency] == [(9, None), (1, "recency")]
    # equally recent (chunks of one note): the lower id, the earlier indexed
    by_id = rrf({"bm25": [12, 11, 10], "vec": [10, 11, 12]}, recency=dict.fromkeys((10, 11, 12), 5.0))
    assert [(f.chunk_id, f.tie) for f in by_id] == [(10, None), (12, "id"), (11, None)]
    # scores equal at 6 places but not at 12 are no tie
    close = rrf({"bm25": [1, 2], "vec": [*range(100, 125), 2, 3, 1]}, recency={1: 1.0, 2: 100.0})
    assert close[0].score != close[1].score and all(f.tie is None for f in close)


def test_a_name_found_in_another_languages_answer_does_not_sink_it() -> None:
    # the mixed-notes benchmark's case (cs cross en 10, `LFS`): the English answer is the meaning
    # half's first hit and holds the query's name, which the keyword half ranks 10th behind
    # Czech notes holding its common words; another English note, second by meaning and holding
    # none, used to pass it on the keyword rank taken for it (4th)
    question = "obnova zálohy restic"
    lexical = [1, 2, 3, 60, 61, 62, 63, 64, 65, 20]
    vector = [
        (20, 0.885),
        (12, 0.880),
        (1, 0.86),
        (2, 0.855),
        (3, 0.85),
        *[(40 + i, 0.84 - 0.001 * i) for i in range(12)],
    ]
    ranked = fuse(lexical, vector, question)
    assert ranked.index("en/restore.md#20") < ranked.index("en/ssh.md#12"), ranked


def test_a_name_found_in_the_only_other_language_note_does_not_sink_it_either() -> None:
    # no other note of another language is among the meaning hits: the one found by its name is
    # still weighed as one the keyword half cannot read, not fused as if all were Czech
    question = "obnova zálohy restic"
    vector = [(20, 0.885), (1, 0.86), (2, 0.855), (3, 0.85), *[(60 + i, 0.84 - 0.001 * i) for i in range(6)]]
    unfound = fuse([1, 2, 3, 60, 61, 62, 63, 64, 65], vector, question)
    found = fuse([1, 2, 3, 60, 61, 62, 63, 64, 65, 20], vector, question)
    assert found.index("en/restore.md#20") <= unfound.index("en/restore.md#20") == 1, (found, unfound)


def test_a_long_questions_keyword_answer_is_not_outranked_by_background_meaning_hits() -> None:
    texts = {cid: f"{crumb}\n{text}" for cid, (_, crumb, text, _) in CHUNKS.items()}
    files = {cid: path for cid, (path, *_) in CHUNKS.items()}
    terms = match_terms(keyword_query(LONG_QUESTION))
    assert keyword_coverage(terms, [30, 31], texts, files) == pytest.approx(3 / 7)  # few of its words
    vector = [*BACKGROUND, (30, 0.858), (31, 0.850)]
    ranked = fuse([30, 31], vector, LONG_QUESTION)
    assert ranked[0] == "cs/zurnal.md#30", ranked
    # which hits were taken for background, for --explain to mark them
    assert fusion_of([30, 31], vector, LONG_QUESTION).background == {cid for cid, _ in BACKGROUND}
    # the same lists with nothing taken for background: the answer falls behind six of the twelve
    # (nine were the vector half not weighed down for standing out little: fusion.meaning_weight)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fusion, "BACKGROUND_MARGIN", 0.0)
        assert fuse([30, 31], vector, LONG_QUESTION).index("cs/zurnal.md#30") == 6
        patch.setattr(fusion, "FLAT_MEANING_GAP", 0.001)
        assert fuse([30, 31], vector, LONG_QUESTION).index("cs/zurnal.md#30") == 9


def test_a_standing_out_answer_in_another_language_still_rises_above_a_long_questions_keyword_hit() -> None:
    vector = [(21, 0.905), *BACKGROUND, (30, 0.858), (31, 0.850)]
    ranked = fuse([30, 31], vector, LONG_QUESTION)
    assert ranked[:2] == ["en/journal.md#21", "cs/zurnal.md#30"], ranked


def test_background_is_measured_against_the_hits_own_language_and_the_keyword_half() -> None:
    english = [(i, 0.870 - 0.001 * i) for i in range(1, 12)]  # eleven English hits 0.001 apart
    languages = {cid: "en" for cid, _ in english} | {100: "en", 200: "ru", 300: "ru"}
    blind = {cid for cid, _ in english} | {100, 200, 300}
    vector = [(100, 0.90), *english, (200, 0.88), (300, 0.85), (70, 0.86)]  # 70: the keyword half's best
    found = background_hits(vector, blind, languages, [70])
    # the first English hit stands 0.009 above the tenth: background; 100 stands 0.04 above it
    assert 100 not in found and {cid for cid, _ in english} <= found
    # with fewer than BACKGROUND_DEPTH Russian hits the last one is the reference: 200 stands out
    assert 200 not in found and 300 in found
    # a language whose hits are all alike, all far nearer than the keyword half's best: no background
    assert background_hits([*english, (70, 0.80)], blind, languages, [70]) == set()
    # no keyword hit among the meaning hits: nothing to rank, nothing taken for background
    assert background_hits(vector, blind, languages, [80]) == set()
    # a hit the keyword half could see is never background
    assert background_hits([(100, 0.90), (1, 0.80), (70, 0.80)], {1}, languages, [70]) == {1}


def test_rrf_counts_a_rank_without_the_ids_passed_over() -> None:
    fused = {f.chunk_id: f for f in rrf({"bm25": [1, 2], "vec": [9, 8, 1, 2]}, passed_over={1: {9, 8}})}
    assert fused[1].ranks == {"bm25": 1, "vec": 3} and fused[1].counted == {"vec": 1}
    assert fused[1].parts["vec"] == pytest.approx(1 / 61)
    assert fused[2].counted == {} and fused[2].parts["vec"] == pytest.approx(1 / 64)  # not passed over


def test_the_meaning_weight_is_how_far_the_first_hit_stands_out_from_the_tenth() -> None:
    flat = [0.870 - 0.0005 * i for i in range(12)]  # the tenth 0.0045 below the first
    assert meaning_weight(flat) == pytest.approx(0.0045 / fusion.FLAT_MEANING_GAP)
    assert meaning_weight([0.95, *flat]) == 1.0  # the first stands out: the order means something
    assert meaning_weight([0.87] * 12) == 0.0
    assert meaning_weight(flat[:3]) == pytest.approx(0.001 / fusion.FLAT_MEANING_GAP)  # fewer: the last
    assert meaning_weight([0.9]) == meaning_weight([]) == 1.0


def test_a_flat_meaning_ranking_does_not_bury_a_keyword_hit_of_the_querys_language() -> None:
    # the restore section holds `obnova` (half the query): the keyword half weighs 0.25; the
    # vector half meets ten generic Czech notes and an English one at one level and misses it
    czech = [(60 + i, 0.870 - 0.0005 * i) for i in range(10)]
    vector = [*czech, (40, 0.864)]
    ranked = fuse([1], vector)
    assert ranked.index("cs/restic.md#1") < min(ranked.index(f"cs/obecne-{i}.md#{60 + i}") for i in range(10)), ranked
    with pytest.MonkeyPatch.context() as patch:  # the vector half weighed in full: last of them
        patch.setattr(fusion, "FLAT_MEANING_GAP", 1e-9)
        ranked = fuse([1], vector)
        assert ranked.index("cs/restic.md#1") > max(ranked.index(f"cs/obecne-{i}.md#{60 + i}") for i in range(10))


def test_a_code_like_query_held_verbatim_comes_first() -> None:
    command = "journalctl --vacuum-size=200M"
    # both halves prefer the English note, which holds the words but not the value
    lexical, vector = [21, 30], [(21, 0.90), (30, 0.80), (40, 0.79)]
    assert fuse(lexical, vector, command)[0] == "cs/zurnal.md#30"
    # words that are not code: a phrase is held verbatim by many notes, the fusion decides
    assert fuse(lexical, vector, "omezí žurnál")[0] == "en/journal.md#21"


def test_a_single_value_comes_first_from_the_note_holding_it() -> None:
    # a bare value means little to the vector half: its first hit ties with the keyword hit
    assert fuse([30], [(21, 0.81), (40, 0.80)], "200M")[:2] == ["cs/zurnal.md#30", "en/journal.md#21"]
    assert fuse([30], [(21, 0.81), (40, 0.80)], "200M200")[0] == "en/journal.md#21"  # not held: no rule


def test_an_imputed_keyword_part_does_not_decide_between_two_hits_found_by_meaning_alone() -> None:
    # 5: the query's language, no keyword in it; 9, 7 and 8: other languages, which the keyword
    # half could not read and is taken to rank at twice their meaning rank
    fused = rrf(
        {"bm25": [1, 2], "vec": [9, 5, 7, 8, 1]},
        blind={9: ("bm25",), 7: ("bm25",), 8: ("bm25",)},
        weights={"bm25": 0.25, "vec": 0.4},
    )
    by_id = {f.chunk_id: f for f in fused}
    # by their imputed parts 7 and 8 would pass 5, which the meaning half ranks above them
    assert by_id[7].score > by_id[8].score > by_id[5].score
    # below the keyword half's first hit the meaning-only hits take the places fusion gave them
    # in the meaning half's order; 9, first by meaning, still rises above the keyword hits
    assert [f.chunk_id for f in fused] == [9, 1, 5, 7, 8, 2]
    assert by_id[5].place == pytest.approx(by_id[7].score)
    assert by_id[7].place == pytest.approx(by_id[8].score) and by_id[8].place == pytest.approx(by_id[5].score)
    assert by_id[9].place is None and by_id[1].place is None and by_id[2].place is None
    # each keeps its own parts and score
    assert by_id[5].parts == {"vec": pytest.approx(0.4 / 62)} and by_id[5].score == pytest.approx(0.4 / 62)


def test_above_the_keyword_halfs_first_hit_fusions_order_stands() -> None:
    # 9, another language's note second by meaning, rose above the keyword half's best hit by
    # its imputed part: the query language's 5, first by meaning, does not take its place there
    fused = rrf(
        {"bm25": [1, 2], "vec": [5, 9, 8, 1]}, blind={9: ("bm25",), 8: ("bm25",)}, weights={"bm25": 0.25, "vec": 0.4}
    )
    assert [f.chunk_id for f in fused] == [9, 1, 5, 8, 2]


def test_only_the_hits_found_by_meaning_alone_are_put_in_order_and_a_tie_takes_no_place() -> None:
    # a keyword half weighing nothing (its best note holds none of the query's terms) ties its
    # hits at 0 and recency orders them: they are not put back in keyword order, and no hit
    # shows a place of its own score
    fused = rrf(
        {"bm25": [1, 2, 3], "vec": [9, 5, 1]},
        blind={9: ("bm25",)},
        weights={"bm25": 0.0, "vec": 1.0},
        recency={3: 5.0, 2: 4.0},
    )
    assert [f.chunk_id for f in fused] == [9, 5, 1, 3, 2]  # recency orders the tied keyword hits
    assert all(f.place is None for f in fused)


def test_without_an_imputed_part_fusion_is_plain_rrf_and_places_nothing() -> None:
    fused = rrf({"bm25": [1, 2, 3], "vec": [7, 3, 8, 1]})
    assert [f.chunk_id for f in fused] == [1, 3, 7, 2, 8]
    assert all(f.place is None for f in fused)


def test_a_note_first_by_meaning_in_the_querys_language_is_not_passed_by_other_languages_background() -> None:
    # the mixed-notes benchmark's case (en question 03, here in Czech): the answer, in the query's
    # language, holds none of its words and is the meaning half's first hit, by a little; other
    # languages' notes at one level below it carry an imputed keyword part; the keyword half's
    # one hit holds half of the query's terms
    vector = [(60, 0.8784), *[(40 + i, 0.8735 - 0.0002 * i) for i in range(12)], (3, 0.86)]
    ranked = fuse([3], vector)
    assert ranked[:2] == ["cs/disky.md#3", "cs/obecne-0.md#60"], ranked
    with pytest.MonkeyPatch.context() as patch:  # without the rule it falls below all twelve
        patch.setattr(fusion, "single_list_order", lambda order, ranks, lists: list(order))
        assert fuse([3], vector).index("cs/obecne-0.md#60") > 12
