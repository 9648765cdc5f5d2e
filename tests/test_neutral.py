"""Language-neutral vectors: the transform on hand-made vectors, the statistics' life cycle in a
real index (estimated, frozen, re-estimated, part of the identity), keyword-blind fusion."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from indexer import neutral
from indexer.config import Config, EmbeddingConfig, identity_mismatch, load_config
from indexer.language import UNKNOWN, chunk_language
from indexer.neutral import DEFAULT, INDEX, LanguageStats, NeutralSpace
from indexer.store import ChunkRow, SearchScope, Store, open_store
from indexer.sync import run_sync
from search import engine
from search.engine import other_language
from search.fusion import match_terms, rrf, term_coverage
from search.querybuild import keyword_query
from search.resident import ResidentVectors
from tests.conftest import open_index, write
from tests.fakes import FakeEmbedder

DIMS = 32


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def basis(i: int) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    v[i] = 1.0
    return v


def biased(topics: range, language_axis: int, weight: float = 1.5) -> np.ndarray:
    """One unit vector per topic: the topic's axis plus a strong shared language axis."""
    return unit(np.stack([basis(t) + weight * basis(language_axis) for t in topics]))


def estimated(vectors: dict[str, np.ndarray]) -> NeutralSpace:
    return neutral.estimate(
        {lang: (v.mean(axis=0), neutral.MIN_CHUNKS) for lang, v in vectors.items()}, "no-such-model"
    )


# ---- the transform ---------------------------------------------------------------------------


def test_a_shared_language_offset_is_removed() -> None:
    english, czech = biased(range(6), 30), biased(range(6, 12), 31)
    space = estimated({"en": english, "cs": czech})
    passages = np.vstack([english, czech])
    languages = ["en"] * 6 + ["cs"] * 6
    # a Czech question about topic 2, which only an English passage covers
    question = unit(basis(2) + 1.5 * basis(31))
    raw_best = int(np.argmax(passages @ question))
    assert languages[raw_best] == "cs"  # raw: the language wins over the topic
    neutral_passages = space.neutralise(passages, languages)
    assert int(np.argmax(neutral_passages @ question)) == 2
    # the two languages' passages now share one centre
    gap = neutral_passages[:6].mean(axis=0) - neutral_passages[6:].mean(axis=0)
    assert float(np.linalg.norm(gap)) < 1e-5
    assert np.allclose(np.linalg.norm(neutral_passages, axis=1), 1.0, atol=1e-6)


def test_same_language_order_is_kept() -> None:
    english, czech = biased(range(6), 30), biased(range(6, 12), 31)
    space = estimated({"en": english, "cs": czech})
    moved = space.neutralise(english, ["en"] * 6)
    rng = np.random.default_rng(7)
    for _ in range(20):
        query = unit(rng.normal(size=DIMS))
        assert list(np.argsort(-(english @ query))) == list(np.argsort(-(moved @ query)))


def test_restore_inverts_neutralise_and_leaves_zero_and_unknown_vectors() -> None:
    rng = np.random.default_rng(1)
    space = NeutralSpace(
        {
            "en": LanguageStats(unit(rng.normal(size=DIMS)) * 0.6, 40, INDEX),
            "ru": LanguageStats(unit(rng.normal(size=DIMS)) * 0.6, 25, INDEX),
        }
    )
    vectors = unit(rng.normal(size=(8, DIMS)))
    vectors[3] = 0.0
    languages = ["en", "ru", "unknown", "en", "ru", "cs", "en", "ru"]
    moved = space.neutralise(vectors, languages)
    assert not np.any(moved[3])
    assert np.array_equal(moved[[2, 5]], vectors[[2, 5]])  # unknown and unseen languages stay
    assert not np.allclose(moved[0], vectors[0])
    assert np.allclose(space.restore(moved, languages), vectors, atol=1e-5)


def _neutralise_language_by_language(vectors: np.ndarray, languages: list[str], space: NeutralSpace) -> np.ndarray:
    """The forward step as first written: the rows of one language at a time."""
    out = np.array(vectors, dtype=np.float32, copy=True)
    for lang, offset in space.offsets().items():
        rows = np.array([chunk_lang == lang for chunk_lang in languages], dtype=bool)
        block = out[rows]
        live = np.linalg.norm(block, axis=1) > 0
        shifted = block[live] - offset
        norms = np.linalg.norm(shifted, axis=1, keepdims=True)
        block[live] = shifted / np.where(norms == 0, 1, norms)
        out[rows] = block
    return out


@pytest.mark.parametrize("rows", [0, 1, 7, 300])
def test_all_rows_neutralised_at_once_get_the_bits_of_one_language_at_a_time(rows: int) -> None:
    rng = np.random.default_rng(rows)
    space = NeutralSpace(
        {lang: LanguageStats(unit(rng.normal(size=384)) * 0.3, 30, INDEX) for lang in ("cs", "en", "ru")}
    )
    vectors = unit(rng.normal(size=(rows, 384)))
    if rows:
        vectors[rng.integers(0, rows, size=2)] = 0.0
    languages = [str(lang) for lang in rng.choice(["cs", "en", "ru", "unknown", "de", ""], size=rows)]
    assert (
        space.neutralise(vectors, languages).tobytes()
        == _neutralise_language_by_language(vectors, languages, space).tobytes()
    )


def test_the_offsets_follow_the_statistics_they_were_computed_from() -> None:
    space = NeutralSpace({"en": LanguageStats(basis(0), 40, INDEX), "cs": LanguageStats(basis(1), 40, INDEX)})
    first = space.offsets()
    assert space.offsets() is first  # computed once per page of a sync, not per page
    space.languages["cs"] = LanguageStats(basis(2), 40, INDEX)
    assert np.allclose(space.offsets()["cs"], (basis(2) - basis(0)) / 2)


def test_one_language_moves_nothing_and_defaults_sit_next_to_the_index_language() -> None:
    english = biased(range(6), 30)
    alone = estimated({"en": english})
    assert alone.offsets() == {}
    assert np.array_equal(alone.neutralise(english, ["en"] * 6), english)
    # a language with too few chunks: no statistics without shipped defaults ...
    few = neutral.estimate({"en": (english.mean(0), 50), "cs": (basis(3), 2)}, "no-such-model")
    assert set(few.languages) == {"en"}
    # ... the shipped default for the bundled model, placed relative to the index's English
    shipped = neutral.shipped_defaults("multilingual-e5-small")
    assert {"en", "cs", "ru"} <= set(shipped)
    en_mean = unit(np.ones(384, dtype=np.float32))
    with_default = neutral.estimate({"en": (en_mean, 50), "cs": (np.zeros(384), 2)}, "multilingual-e5-small")
    stats = with_default.languages["cs"]
    assert stats.origin == DEFAULT and stats.chunks == 2
    assert np.allclose(stats.mean, en_mean + shipped["cs"] - shipped["en"], atol=1e-6)


def test_the_bounded_drift_rule() -> None:
    space = NeutralSpace({"en": LanguageStats(basis(0), 40, INDEX), "cs": LanguageStats(basis(1), 3, DEFAULT)})
    model = "no-such-model"
    assert not neutral.needs_estimate(space, {"en": 79, "cs": 19, "unknown": 500}, model)
    assert neutral.needs_estimate(space, {"en": 80, "cs": 3}, model)  # doubled since estimated
    assert neutral.needs_estimate(space, {"en": 40, "cs": neutral.MIN_CHUNKS}, model)  # default -> own
    assert neutral.needs_estimate(space, {"en": 40, "cs": 3, "ru": neutral.MIN_CHUNKS}, model)  # new language
    assert not neutral.needs_estimate(space, {"en": 40, "cs": 3, "de": 5}, model)  # too few, no default
    assert neutral.needs_estimate(space, {"en": 40, "cs": 3, "ru": 1}, "multilingual-e5-small")
    # the stored statistics decide the same without their means being read (the no-op sync)
    cases = [
        ({"en": 79, "cs": 19, "unknown": 500}, model),
        ({"en": 80, "cs": 3}, model),
        ({"en": 40, "cs": neutral.MIN_CHUNKS}, model),
        ({"en": 40, "cs": 3, "ru": neutral.MIN_CHUNKS}, model),
        ({"en": 40, "cs": 3, "de": 5}, model),
        ({"en": 40, "cs": 3, "ru": 1}, "multilingual-e5-small"),
        ({"en": 40, "de": 1}, "multilingual-e5-small"),
    ]
    for counts, name in cases:
        assert neutral.stored_needs_estimate(space.to_json(), counts, name) == neutral.needs_estimate(
            space, counts, name
        )
    assert neutral.stored_needs_estimate(None, {"ru": 1}, "multilingual-e5-small")
    assert not neutral.stored_needs_estimate(None, {"de": 1}, "multilingual-e5-small")


def test_statistics_round_trip_through_json() -> None:
    space = NeutralSpace({"en": LanguageStats(basis(0) * 0.5, 40, INDEX), "cs": LanguageStats(basis(1), 3, DEFAULT)})
    again = NeutralSpace.from_json(space.to_json())
    assert again.summary() == space.summary() == "cs:default/3 en:index/40"
    assert neutral.same_offsets(space, again)
    assert NeutralSpace.from_json("").languages == {}


# ---- identity -----------------------------------------------------------------------------------


def test_identity_names_the_statistics_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    config = EmbeddingConfig()
    meta = config.identity()
    assert identity_mismatch(config, meta) == []
    monkeypatch.setattr(neutral, "MIN_CHUNKS", neutral.MIN_CHUNKS + 1)
    assert [m.split(":")[0] for m in identity_mismatch(config, meta)] == ["vector_space"]
    monkeypatch.undo()
    raw = EmbeddingConfig(language_neutral=False)
    assert [m.split(":")[0] for m in identity_mismatch(raw, meta)] == ["vector_space"]
    # an index from before the key existed holds raw vectors without statistics: valid as it is
    older = {k: v for k, v in meta.items() if k != "vector_space"}
    assert identity_mismatch(config, older) == [] and identity_mismatch(raw, older) == []


# ---- in a real index ----------------------------------------------------------------------------

ENGLISH = [
    "The backup of server {i} runs every night with restic and keeps seven daily snapshots.",
    "We planted tomatoes in garden bed {i} and water them every second evening in summer.",
    "Meeting notes {i}: the team agreed to move the release to the end of the month.",
    "Recipe {i}: bake the bread for forty minutes and let it cool before slicing it.",
]
CZECH = [
    "Záloha serveru {i} běží každou noc a uchovává sedm denních snímků na disku.",
    "Na záhonu {i} jsme zasadili rajčata a zaléváme je každý druhý večer v létě.",
    "Zápis ze schůzky {i}: tým se dohodl, že vydání posuneme na konec měsíce.",
    "Recept {i}: chléb pečeme čtyřicet minut a před krájením ho necháme vychladnout.",
]
LANGUAGE_AXIS = {"en": 0, "cs": 1}


class LanguageBiasedEmbedder(FakeEmbedder):
    """The fake bag of words plus a strong shared component per detected language: the bias
    multilingual models have, in a form whose removal can be checked exactly."""

    def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        vectors = super().embed_batch(texts, is_query=is_query)
        for row, text in zip(vectors, texts, strict=True):
            axis = LANGUAGE_AXIS.get(chunk_language(text))
            if axis is not None:
                row[axis] += 2.0
                row /= np.linalg.norm(row)
        return vectors


def bilingual_notes(root: Path, per_language: int, start: int = 0) -> None:
    files = {}
    for i in range(start, start + per_language):
        files[f"en/note-{i}.md"] = f"# English note {i}\n\n{ENGLISH[i % 4].format(i=i)}\n"
        files[f"cs/poznamka-{i}.md"] = f"# Česká poznámka {i}\n\n{CZECH[i % 4].format(i=i)}\n"
    write(root, files)


@pytest.fixture
def biased_embedder(config: Config) -> LanguageBiasedEmbedder:
    return LanguageBiasedEmbedder(config.embedding)


def raw_vectors(store: Store, embedder: FakeEmbedder) -> tuple[list[int], list[str], np.ndarray]:
    """What the embedder gives for every stored chunk (its embed text), with the chunk languages."""
    ids, languages, _ = store.vectors_by_language(0, 100_000)
    rows = store.chunk_rows(ids)
    texts = [f"{rows[i].breadcrumb}\n\n{rows[i].text}" for i in ids]
    return ids, languages, embedder.embed_passages(texts)


def stored(store: Store) -> np.ndarray:
    return store.vectors_by_language(0, 100_000)[2]


def test_sync_estimates_statistics_and_stores_neutral_vectors_everywhere(
    config: Config, notes: Path, biased_embedder: LanguageBiasedEmbedder
) -> None:
    bilingual_notes(notes, neutral.MIN_CHUNKS)
    report = run_sync(config, embedder_factory=lambda: biased_embedder)
    assert report.neutral is not None and "cs:index/" in report.neutral and "en:index/" in report.neutral
    store = open_index(config, readonly=True)
    try:
        space = NeutralSpace.from_json(store.meta()[neutral.STATS_KEY])
        _, languages, raw = raw_vectors(store, biased_embedder)
        assert np.allclose(stored(store), space.neutralise(raw, languages), atol=1e-5)
        # vec0, the exact scoped path and the resident copy give the same neighbours
        query = biased_embedder.embed_query("záloha serveru restic snímky")
        unscoped = store.vec_search(query, 10, SearchScope())
        scoped = store.vec_search(query, 10, SearchScope(source_ids=("notes",)))
        resident = ResidentVectors(config.db, open_reader=lambda: open_store(config.index_location, readonly=True))
        resident.reload_in_background()
        assert resident.wait(30)
        with store.snapshot():
            in_memory = resident.knn(store, query, 10)
        assert in_memory is not None
        for other in (scoped, in_memory):
            assert [cid for cid, _ in other] == [cid for cid, _ in unscoped]
            assert [d for _, d in other] == pytest.approx([d for _, d in unscoped], abs=1e-5)
    finally:
        store.close()


def test_statistics_stay_frozen_until_the_language_doubles_and_stay_consistent(
    config: Config, notes: Path, biased_embedder: LanguageBiasedEmbedder
) -> None:
    bilingual_notes(notes, neutral.MIN_CHUNKS)
    run_sync(config, embedder_factory=lambda: biased_embedder)
    with closing(open_index(config, readonly=True)) as store:
        first = store.meta()[neutral.STATS_KEY]
    bilingual_notes(notes, 5, start=neutral.MIN_CHUNKS)  # +5 per language: not yet stale
    assert run_sync(config, embedder_factory=lambda: biased_embedder).neutral is None
    with closing(open_index(config, readonly=True)) as store:
        assert store.meta()[neutral.STATS_KEY] == first
        space = NeutralSpace.from_json(first)
        _, languages, raw = raw_vectors(store, biased_embedder)
        assert np.allclose(stored(store), space.neutralise(raw, languages), atol=1e-5)
    bilingual_notes(notes, neutral.MIN_CHUNKS, start=neutral.MIN_CHUNKS + 5)  # more than doubled
    texts = biased_embedder.texts_embedded
    assert run_sync(config, embedder_factory=lambda: biased_embedder).neutral is not None
    assert biased_embedder.texts_embedded - texts == 2 * neutral.MIN_CHUNKS  # the new notes only
    with closing(open_index(config, readonly=True)) as store:
        renewed = NeutralSpace.from_json(store.meta()[neutral.STATS_KEY])
        assert renewed.languages["en"].chunks > neutral.MIN_CHUNKS * 2
        _, languages, raw = raw_vectors(store, biased_embedder)
        assert np.allclose(stored(store), renewed.neutralise(raw, languages), atol=1e-5)


def test_copied_text_reuses_its_neutral_vector(
    config: Config, notes: Path, biased_embedder: LanguageBiasedEmbedder
) -> None:
    bilingual_notes(notes, neutral.MIN_CHUNKS)
    run_sync(config, embedder_factory=lambda: biased_embedder)
    write(notes, {"copy/poznamka-3.md": (notes / "cs" / "poznamka-3.md").read_text(encoding="utf-8")})
    texts_before = biased_embedder.texts_embedded
    run_sync(config, embedder_factory=lambda: biased_embedder)
    assert biased_embedder.texts_embedded == texts_before  # nothing embedded: reused by hash
    with closing(open_index(config, readonly=True)) as store:
        space = NeutralSpace.from_json(store.meta()[neutral.STATS_KEY])
        _, languages, raw = raw_vectors(store, biased_embedder)
        assert np.allclose(stored(store), space.neutralise(raw, languages), atol=1e-5)


def test_an_unrecorded_index_is_adopted_and_a_changed_definition_rebuilds(
    config_path: Path, config: Config, notes: Path, biased_embedder: LanguageBiasedEmbedder
) -> None:
    bilingual_notes(notes, 3)
    run_sync(config, embedder_factory=lambda: biased_embedder)
    with closing(open_index(config)) as store:  # as an index written before the key existed
        store.set_meta({"neutral_stats": ""})
        with store.transaction():
            store.conn.execute("DELETE FROM meta WHERE key = 'vector_space'")
    texts = biased_embedder.texts_embedded
    report = run_sync(config, embedder_factory=lambda: biased_embedder)
    assert report.rebuilt is None and biased_embedder.texts_embedded == texts
    with closing(open_index(config, readonly=True)) as store:
        assert store.meta()["vector_space"] == neutral.definition(True)
    config_path.write_text(
        config_path.read_text(encoding="utf-8").replace("embedding:\n", "embedding:\n  language_neutral: false\n"),
        encoding="utf-8",
    )
    raw = load_config(config_path)
    assert raw.embedding.language_neutral is False
    report = run_sync(raw, embedder_factory=lambda: biased_embedder)
    assert report.rebuilt is not None and "vector_space" in report.rebuilt
    assert biased_embedder.texts_embedded > texts
    with closing(open_index(config, readonly=True)) as store:
        _, _, fresh = raw_vectors(store, biased_embedder)
        assert np.allclose(stored(store), fresh, atol=1e-6)  # raw space: the embedder's own vectors


# ---- fusion -------------------------------------------------------------------------------------


def test_keyword_blind_candidates_are_scored_over_the_vector_list() -> None:
    lexical = [1, 2, 3]  # weak keyword hits in the query's language
    vector = [9, 4, 1, 2, 3]  # 9: the right note, in another language
    plain = rrf({"bm25": lexical, "vec": vector})
    assert [f.chunk_id for f in plain][:3] == [1, 2, 3]
    fused = rrf({"bm25": lexical, "vec": vector}, blind={9: ("bm25",)})
    assert fused[0].chunk_id == 9 and fused[0].score == pytest.approx(1 / 61 + 1 / 62)  # keywords taken to rank it 2nd
    # a blind list that ranked an id better than it would be taken to keeps its rank; an empty
    # blind map is plain RRF
    seen = rrf({"bm25": lexical, "vec": vector}, blind={1: ("bm25",)})
    assert [(f.chunk_id, f.score) for f in seen] == [(f.chunk_id, f.score) for f in plain]
    assert rrf({"bm25": lexical, "vec": vector}, blind={}) == plain


def test_keyword_coverage_follows_the_fts_terms() -> None:
    terms = match_terms(keyword_query("zálohování databáze db-01.lan"))
    assert len(terms) == 3
    assert term_coverage(terms, "Zalohovani a databaze bezi na db-01.lan") == 1.0  # folded, prefixes
    assert term_coverage(terms, "Zálohy databází") == pytest.approx(1 / 3)  # "zaloh" stem is longer
    assert term_coverage(terms, "nothing in common") == 0.0
    assert term_coverage([], "text") == 0.0


def chunk_row(chunk_id: int, text: str) -> ChunkRow:
    return ChunkRow(chunk_id, "notes", f"n{chunk_id}.md", 0, "", text, 1, 3, 0.0, None, "workspace")


def test_candidates_in_another_language_or_script_are_out_of_the_keyword_halfs_reading() -> None:
    languages = {1: "en", 2: "cs", 3: "unknown", 4: "en", 5: "unknown", 6: "unknown", 7: "unknown"}
    rows = {
        3: chunk_row(3, "```\nls -la\n```"),  # code alone: the keyword half reads it in any language
        5: chunk_row(5, "Пароль root сбрасываем так: mysqld --skip-grant-tables и SIGHUP"),  # Russian, mixed
        6: chunk_row(6, "Zálohy jdou na NAS, restic je šifruje, obnova trvá hodinu."),  # Latin letters
        # Latin prose, Cyrillic only in its code
        8: chunk_row(8, "How to greet the world from a script:\n\n```\necho 'привет мир'\n```\n"),
    }  # 7: not among the rows read, nothing to tell its script by
    languages[8] = "unknown"
    assert other_language("cs", {1, 2, 3, 4, 5, 6, 7, 8}, languages, rows) == {
        1: ("bm25",),
        4: ("bm25",),
        5: ("bm25",),
    }
    # an index of the query's language alone: nothing is judged by its script, the fusion stays plain
    assert other_language("cs", {2, 3, 5, 6}, languages, rows) == {}
    assert other_language("ru", {1, 2, 3, 4, 5, 6, 7}, languages, rows) == {
        1: ("bm25",),
        2: ("bm25",),
        4: ("bm25",),
        6: ("bm25",),
    }
    assert other_language("unknown", {1, 2, 3, 4, 5}, languages, rows) == {}
    assert other_language(None, {1, 2}, languages, rows) == {}


def test_a_language_less_term_keeps_keywords_in_charge(
    config: Config, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Czech question naming port 5432 finds the Czech note that holds 5432 first, although
    many English notes are near in meaning: a number matches in every language, so the keyword
    half is not blind across languages and is not down-weighted."""
    import search.engine as engine

    write(
        notes,
        {
            "db.md": "# Databázový server\n\nPostgreSQL běží na stroji db-01 a poslouchá na portu 5432.\n",
            **{
                # no word of the question either (`server` would match its `serve*`): found by
                # meaning only whatever order the vector half gives their equal distances
                f"en/topic{i}.md": f"# Host notes {i}\n\nThe host listens on a socket and access is allowed from the LAN, topic {i}.\n"
                for i in range(12)
            },
        },
    )
    question = "Na jakém portu poslouchá databázový server a odkud je povolený přístup 5432?"

    class MeaningEmbedder(FakeEmbedder):
        """The English notes mean nearly what the question asks, topic 0 the most (a real model
        would put them near, one ahead of another, so the vector half is sure of its order);
        everything else keeps its bag-of-words vector."""

        def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
            vectors = super().embed_batch(texts, is_query=is_query)
            asked = super().embed_batch([question], is_query=True)[0]
            for row, text in enumerate(texts):
                if "Host notes" in text:
                    topic = int(text.rsplit("topic ", 1)[1].split(".")[0])
                    vector = asked + 0.1 * topic * vectors[row]
                    vectors[row] = vector / np.linalg.norm(vector)
            return vectors

    embedder = MeaningEmbedder(config.embedding)
    run_sync(config, embedder_factory=lambda: embedder)

    def first_hit() -> str:
        store = open_index(config, readonly=True)
        try:
            response = engine.search(store, config, question, k=5, embedder_factory=lambda: embedder)
        finally:
            store.close()
        assert response.query_language == "cs"
        return response.results[0].path

    assert first_hit() == "db.md"
    terms = match_terms(keyword_query(question))
    assert engine.found_exact_value(terms, ["na portu 5432"], ["na portu 5432", "port 80"]) == ("5432",)
    assert not engine.found_exact_value(terms, ["na portu 5432"], ["5432"] * (engine.RARE_EXACT_HITS + 1))  # common
    assert not engine.found_exact_value(match_terms(keyword_query("na jakém portu")), ["na portu 5432"], [])
    # a quoted phrase is asked for as typed: a rare one decides as a value does, and is named
    quoted = match_terms(keyword_query('"binary search" v gitu'))
    assert engine.found_exact_value(quoted, ["a binary search"], ["a binary search"]) == ("binary", "search")
    monkeypatch.setattr(engine, "found_exact_value", lambda terms, top, every: None)  # the rule this test guards
    assert first_hit() != "db.md"


def answering_embedder(config: Config, question: str, marker: str) -> FakeEmbedder:
    """A test embedder that gives the note holding `marker` the question's own vector (it means
    what the question asks); every other text keeps its bag of words."""

    class Answering(FakeEmbedder):
        def embed_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
            vectors = super().embed_batch(texts, is_query=is_query)
            for row, text in enumerate(texts):
                if marker in text:
                    vectors[row] = super().embed_batch([question], is_query=True)[0]
            return vectors

    return Answering(config.embedding)


def searched(config: Config, question: str, embedder: FakeEmbedder) -> engine.SearchResponse:
    store = open_index(config, readonly=True)
    try:
        return engine.search(store, config, question, k=5, embedder_factory=lambda: embedder)
    finally:
        store.close()


def test_a_note_in_another_language_found_by_a_name_counts_as_if_unfound_where_that_is_better(
    config: Config, notes: Path
) -> None:
    """A Czech question naming `restic`: the English note that answers it, the nearest in
    meaning, holds the name, and the keyword half ranks it below the Czech notes that hold the
    question's common words and the name too. It is counted at the keyword rank it would be
    taken at unfound, twice its meaning rank, and comes first; the explain data carry both."""
    write(
        notes,
        {
            "en/restic-restore.md": "# Restoring a snapshot\n\nrestic restore latest --target /srv brings the files back.\n",
            **{
                f"cs/zaloha-{i}.md": f"# Záloha stroje {i}\n\nJak obnovit zálohu stroje {i} z repozitáře restic.\n"
                for i in range(12)
            },
        },
    )
    question = "jak obnovit zálohu restic"
    embedder = answering_embedder(config, question, "Restoring a snapshot")
    run_sync(config, embedder_factory=lambda: embedder)
    response = searched(config, question, embedder)
    assert response.query_language == "cs"
    first = response.results[0]
    assert first.path == "en/restic-restore.md", [hit.path for hit in response.results]
    e = first.explain
    assert e["language"] == "en" and e["keyword_blind"] is False  # found: a keyword match was possible
    assert e["vec_rank"] == 1 and e["bm25_rank"] is not None and e["bm25_rank"] > 2
    assert e["bm25_counted_rank"] == 2
    assert e["bm25_part"] == pytest.approx(response.keyword_weight / (60 + 2), abs=1e-6)


def test_a_russian_note_too_mixed_to_name_is_out_of_a_czech_questions_keyword_reading(
    config: Config, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer to a Czech question is a Russian note whose commands and names are in Latin
    letters: its language cannot be named, but its prose is Cyrillic, so the keyword half, which
    finds it only by `MySQL` and `root`, is blind to it as to a note labelled Russian."""
    import indexer.language as language

    answer = (
        "# Сброс пароля root в MySQL\n\nПоднимаем второй экземпляр mysqld с опцией skip-grant-tables,"
        " копируем файлы таблицы user из исходной базы mysql и посылаем SIGHUP нашему mysqld.\n"
    )
    assert language.chunk_language(answer) == UNKNOWN
    write(
        notes,
        {
            "ru/mysql-root.md": answer,
            **{
                f"cs/hesla-{i}.md": f"# Hesla {i}\n\nHeslo roota na serveru {i} měníme v konzoli MySQL.\n"
                for i in range(12)
            },
        },
    )
    question = "Jak obnovit zapomenuté heslo roota v MySQL bez restartu serveru?"
    embedder = answering_embedder(config, question, "Сброс пароля")
    run_sync(config, embedder_factory=lambda: embedder)
    hit = searched(config, question, embedder).results[0]
    assert hit.path == "ru/mysql-root.md"
    assert hit.explain["language"] == UNKNOWN and hit.explain["vec_rank"] == 1
    assert hit.explain["bm25_rank"] is not None and hit.explain["bm25_rank"] > 2
    assert hit.explain["bm25_counted_rank"] == 2
    monkeypatch.setattr(language, "prose_is_cyrillic", lambda text: None)  # the rule this test guards
    assert searched(config, question, embedder).results[0].path != "ru/mysql-root.md"


def test_query_is_projected_off_the_index_language_directions_only() -> None:
    cs, en = basis(9), basis(10)
    space = NeutralSpace(
        {
            "cs": LanguageStats(unit(basis(0) + 1.5 * cs), 40, INDEX),
            "en": LanguageStats(unit(basis(1) + 1.5 * en), 40, INDEX),
            "ru": LanguageStats(unit(basis(2) + 1.5 * basis(11)), 5, DEFAULT),
        }
    )
    rows = neutral.query_basis(space.to_json())
    assert rows is not None and rows.shape == (1, DIMS)  # two index languages: one direction
    along = unit(space.offsets()["cs"] - space.offsets()["en"])
    assert abs(float(rows[0] @ along)) == pytest.approx(1.0, abs=1e-5)
    query = unit(basis(3) + 0.8 * cs)
    projected = neutral.project_query(query, rows)
    assert float(np.linalg.norm(projected)) == pytest.approx(1.0, abs=1e-6)
    assert float(projected @ along) == pytest.approx(0.0, abs=1e-6)  # the language component is gone
    assert float(projected @ basis(3)) > float(query @ basis(3))  # what it is about weighs more
    # a shipped default gives no direction; one index language gives none either
    defaults_only = NeutralSpace({lang: LanguageStats(s.mean, 5, DEFAULT) for lang, s in space.languages.items()})
    assert neutral.query_basis(defaults_only.to_json()) is None
    assert neutral.query_basis(NeutralSpace({"cs": space.languages["cs"]}).to_json()) is None


def test_the_offsets_follow_statistics_replaced_twice_between_two_reads() -> None:
    # a replaced LanguageStats is freed, and the next one is often allocated at its address:
    # offsets remembered by the objects' ids would then be those of the first statistics
    space = NeutralSpace({"en": LanguageStats(basis(0), 40, INDEX), "cs": LanguageStats(basis(1), 40, INDEX)})
    for n in range(2, 12):
        space.offsets()
        space.languages["cs"] = LanguageStats(basis(n), 40, INDEX)
        space.languages["cs"] = LanguageStats(basis(n + 1), 40, INDEX)
        assert np.allclose(space.offsets()["cs"], (basis(n + 1) - basis(0)) / 2), n
