"""The benchmark corpora: the dense generator's output stays exactly as before, and the
realistic one counts real words, keeps their frequencies, grows its vocabulary with the corpus,
is deterministic and never shares (or removes) a dense cache."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bench import corpus_real, workspaces
from bench.corpus_real import (
    DENSE_CORPUS,
    SOURCES,
    TOPIC_MIN_RANK,
    Corpus,
    Lexicon,
    cached_counts,
    count_words,
    query_pool,
    realistic_queries,
    realistic_words,
)
from bench.corpus_text import HOSTS, note_path, note_text, note_topic, queries
from search.words import STOPWORDS

# sha256 of note_text(0..199) and queries(50) of GEN_VERSION 1: every dense figure in
# RESULTS.md was measured on exactly this output
DENSE_DIGEST = "9d62edb3ab72e711b0579a4e8e778fbcccdbcd3f3025c87a548d2147d3a5abd1"

BASE = {
    "en": "server backup restore network storage cluster replica volume gateway proxy".split(),
    "cs": "záloha obnova síť úložiště brána služba nastavení fronta úloha protokol".split(),
    "ru": "резервное восстановление сервер хранилище сеть шлюз служба очередь задача журнал".split(),
}


def _vocabulary(lang: str) -> list[str]:
    """80 distinct words of the language's alphabet (base words with letter suffixes)."""
    suffixes = {"en": "abcdefgh", "cs": "áčďéěíňó", "ru": "абвгдежз"}[lang]
    return BASE[lang] + [w + s for s in suffixes[:7] for w in BASE[lang]]


def _zipf_text(lang: str) -> str:
    """Running text in which word k of the vocabulary occurs about 400/k times."""
    words = _vocabulary(lang)
    return " ".join(" ".join([w] * max(1, 400 // k)) for k, w in enumerate(words, start=1))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny eval-data tree with every source the realistic corpus reads."""
    root = tmp_path_factory.mktemp("eval")
    for lang, pattern, kind in SOURCES:
        path = root / pattern.replace("**/*.md", "common/page.md")
        path.parent.mkdir(parents=True, exist_ok=True)
        text = _zipf_text(lang)
        if kind == "jsonl":
            path.write_text(json.dumps({"_id": "1", "title": "", "text": text}, ensure_ascii=False) + "\n")
        elif kind == "tldr":
            path.write_text(f"# titleword\n\n> {text}\n\n- {BASE[lang][0]}:\n\n`commandline {{{{placeholder}}}}`\n")
        else:
            path.write_text(f"<!-- commentword -->\n{text}\n\n```\ncodeword\n```\n")
    return root


@pytest.fixture(scope="module")
def source(data: Path, tmp_path_factory: pytest.TempPathFactory) -> corpus_real.RealisticWords:
    return realistic_words(data, tmp_path_factory.mktemp("cache"), vocab=5_000)


def test_the_dense_corpus_output_is_unchanged() -> None:
    h = hashlib.sha256()
    for i in range(200):
        h.update(note_text(i).encode())
    h.update("\n".join(queries(50)).encode())
    assert h.hexdigest() == DENSE_DIGEST
    assert DENSE_CORPUS.note_text(3) == note_text(3)
    assert DENSE_CORPUS.queries(16) == queries(16)


def test_word_counts_take_prose_only_in_each_languages_alphabet(data: Path) -> None:
    counts = count_words(data)
    for lang, words in counts.items():
        assert set(words) == set(_vocabulary(lang)), lang
    # every source counted: 3 files of English, 2 of Czech, 3 of Russian (+1: a tldr description)
    assert counts["en"]["server"] == 3 * 400 + 1 and counts["cs"]["záloha"] == 2 * 400 + 1
    for word in ("titleword", "commandline", "placeholder", "commentword", "codeword"):
        assert all(word not in c for c in counts.values())


def test_one_letter_words_count_only_when_they_are_stop_words(tmp_path: Path) -> None:
    for _, pattern, kind in SOURCES:
        path = tmp_path / pattern.replace("**/*.md", "p.md")
        path.parent.mkdir(parents=True, exist_ok=True)
        line = "a x v q и ы word слово"
        path.write_text(json.dumps({"text": line}, ensure_ascii=False) + "\n" if kind == "jsonl" else line + "\n")
    counts = count_words(tmp_path)
    assert set(counts["en"]) == {"a", "v", "word"} and set(counts["ru"]) == {"и", "слово"}
    assert "a" in STOPWORDS and "x" not in STOPWORDS


def test_missing_data_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--data"):
        count_words(tmp_path)


def test_counts_are_cached_per_data_version(data: Path, tmp_path: Path) -> None:
    first = cached_counts(data, tmp_path)
    [file] = tmp_path.glob("wordcounts-*.json")
    file.write_text(json.dumps({"en": [["cachedword", 5]]}), encoding="utf-8")
    assert cached_counts(data, tmp_path) == {"en": [("cachedword", 5)]}  # read back, not recounted
    assert first["en"][0] == ("server", 1201) and [w for w, _ in first["en"]][:3] == _vocabulary("en")[:3]


def test_lexicon_keeps_measured_frequencies_then_a_zipf_tail_of_new_words() -> None:
    ranked = [(f"word{chr(97 + k % 26)}{chr(97 + k // 26)}", max(1, 600 // k)) for k in range(1, 300)]
    lex = Lexicon.build("en", ranked, vocab=2_000)
    assert lex.words[: len(ranked)] == [w for w, _ in ranked]
    assert len(lex.words) == len(set(lex.words)) == 2_000
    tail = lex.words[len(ranked) :]
    assert all(re.fullmatch("[a-z]{3,20}", w) for w in tail)
    assert lex.reliable == sum(1 for _, c in ranked if c >= corpus_real.MIN_RELIABLE)
    weights = [b - a for a, b in zip([0.0, *lex.cum], lex.cum, strict=False)]
    assert weights[: lex.reliable] == [c for _, c in ranked[: lex.reliable]]
    r = 1_000  # past r0 the weight falls as rank^-TAIL_SLOPE
    assert weights[2 * r - 1] / weights[r - 1] == pytest.approx(2.0**-corpus_real.TAIL_SLOPE, rel=1e-3)
    assert lex.share(1, len(lex.words)) == pytest.approx(1.0)
    assert 1.0 < lex.slope < 1.2  # the fitted head slope of counts ~ 600/k


def test_realistic_notes_are_deterministic_and_keep_the_dense_structure(
    source: corpus_real.RealisticWords, data: Path, tmp_path: Path
) -> None:
    again = realistic_words(data, tmp_path, vocab=5_000)
    assert again.version == source.version
    corpus = Corpus("realistic", source.version, "real-", source, lambda n: [])
    for i in (0, 1, 57, 1234):
        text = corpus.note_text(i)
        assert text == Corpus("realistic", again.version, "real-", again, lambda n: []).note_text(i)
        assert text != note_text(i)
        assert text.startswith("---\ntitle: ") and f"id: note-{i:06d}" in text and "\n## " in text
    body = "".join(corpus.note_text(i) for i in range(40))
    assert "```" in body and any(h in body for h in HOSTS)


def _realistic_text(source: corpus_real.RealisticWords, i: int) -> str:
    return Corpus("realistic", source.version, "real-", source, lambda n: []).note_text(i)


def test_each_topic_favours_its_own_mid_and_rare_words(source: corpus_real.RealisticWords) -> None:
    lexicon, _ = source.topic_lexicon(0, "en")
    ranks = {w: r for r, w in enumerate(source.lexicons["en"].words, start=1)}
    assert len(lexicon) == corpus_real.TOPIC_WORDS and min(ranks[w] for w in lexicon) >= TOPIC_MIN_RANK
    assert set(lexicon) != set(source.topic_lexicon(1, "en")[0])
    topic0 = [i for i in range(0, 4000) if note_topic(note_path(i)) == 0][:6]
    used = Counter(w for i in topic0 for w in re.findall(r"[^\W\d_]+", _realistic_text(source, i).lower()))
    own = sum(used[w] for lang in ("en", "cs", "ru") for w in set(source.topic_lexicon(0, lang)[0]))
    other = sum(used[w] for lang in ("en", "cs", "ru") for w in set(source.topic_lexicon(1, lang)[0]))
    assert own > 3 * other


def test_the_vocabulary_keeps_growing_with_the_corpus(source: corpus_real.RealisticWords) -> None:
    seen: set[str] = set()
    sizes = []
    for i in range(120):
        seen.update(re.findall(r"[^\W\d_]+", _realistic_text(source, i).lower()))
        if i + 1 in (30, 120):
            sizes.append(len(seen))
    assert sizes[1] > 1.5 * sizes[0]


def test_queries_use_the_templates_and_real_content_words(source: corpus_real.RealisticWords) -> None:
    qs = realistic_queries(source, 50)
    assert len(set(qs)) == 50 and qs == realistic_queries(source, 50)
    assert qs[8] in HOSTS and re.fullmatch(r"10\.\d+\.\d+", qs[13]) and len(qs[3]) == 5
    assert qs[9].startswith('"') and qs[10].startswith("how do I ") and qs[12].startswith("как настроить ")
    pools = {w for lex in source.lexicons.values() for w in query_pool(lex)}
    for q in (qs[0], qs[1], qs[2], qs[16], qs[17], qs[18]):
        assert q in pools and q not in STOPWORDS and len(q) >= 4
    assert all(w in pools for w in qs[14].split())


def test_cache_names_never_reach_a_dense_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = workspaces.cache_root()
    dense = root / f"search-100000-g1-{workspaces.code_key()}"
    dense.mkdir()
    real = Corpus("realistic", "r1.abc", "real-", DENSE_CORPUS.source, queries)
    assert real.name("search", 100000) == "search-real-100000" and DENSE_CORPUS.name("search", 7) == "search-7"
    # an older realistic build is replaced, the dense one stays
    (root / "search-real-100000-gr0.old-x").mkdir()
    path, info = workspaces._cached("search-real-100000", lambda r: {"files": 1}, lambda m: None, version="r1.abc")
    assert dense.exists() and path.name.startswith("search-real-100000-gr1.abc-") and info["files"] == 1
    assert not (root / "search-real-100000-gr0.old-x").exists()
    with pytest.raises(ValueError, match="label"):
        workspaces.store_built_workspace("search-100000", chunks=10, corpus=real)


def test_unknown_corpus_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="dense, realistic"):
        corpus_real.corpus_of("sparse")


def test_a_realistic_index_is_built_and_measured(
    source: corpus_real.RealisticWords, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import corpus_stats

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    corpus = Corpus("realistic", source.version, "real-", source, lambda n: realistic_queries(source, n))
    ws = workspaces.store_built_workspace(corpus.name("search", 300), chunks=300, log=lambda m: None, corpus=corpus)
    assert (ws.notes / note_path(5)).read_text(encoding="utf-8") == corpus.note_text(5)
    assert corpus_stats.find_index(corpus, 300, [workspaces.cache_root()]) == ws.db
    assert corpus_stats.find_index(DENSE_CORPUS, 300, [workspaces.cache_root()]) is None
    row = corpus_stats.index_row(corpus, 300, ws.db)
    assert row[:2] == ["realistic", f"{ws.chunks:,}"] and int(str(row[2]).replace(",", "")) > 1_000
    fractions = [float(str(cell).rstrip("%")) for cell in row[4:]]
    assert all(0.0 <= f <= 100.0 for f in fractions) and fractions[0] <= fractions[1]


def _folder_runs(db: Path) -> tuple[int, list[str]]:
    """How many runs of one top-level folder the chunks form in id order, and the paths in that order."""
    from indexer.store import Store

    store = Store.open(db, readonly=True)
    try:
        paths = [str(path) for (path,) in store.conn.execute("SELECT path FROM chunks ORDER BY id")]
    finally:
        store.close()
    tops = [path.split("/", 1)[0] for path in paths]
    return 1 + sum(a != b for a, b in itertools.pairwise(tops)), paths


def test_store_built_layouts_place_a_folder_as_a_sync_would_or_scattered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    synced = workspaces.store_built_workspace("search-3000", chunks=3000, log=lambda m: None)
    scattered = workspaces.store_built_workspace("search-3000", chunks=3000, log=lambda m: None, layout="scattered")
    assert synced.root != scattered.root and synced.root.exists()  # each layout keeps a cache of its own
    runs, paths = _folder_runs(synced.db)
    folders = len({path.split("/", 1)[0] for path in paths})
    # a first sync writes folder by folder: each top-level folder's chunks are one run of ids
    assert folders > 50 and runs == folders
    # and in the order the workspace source lists the files on disk
    from indexer.sources.workspace import list_files

    source = synced.config().sources[workspaces.SOURCE_ID]
    listed = [item.rel for item in list_files(source)]
    assert list(dict.fromkeys(paths)) == listed
    # note order: consecutive notes fall into different folders
    runs_scattered, paths_scattered = _folder_runs(scattered.db)
    assert sorted(paths_scattered) == sorted(paths) and runs_scattered > 4 * folders
    with pytest.raises(ValueError, match="sync, scattered"):
        workspaces.store_built_workspace("search-3000", chunks=3000, log=lambda m: None, layout="sorted")
