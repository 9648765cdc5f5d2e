"""The `realistic` benchmark corpus: the same notes as the dense one (paths, areas and topics,
front matter, headings, hosts, IPs, versions, code blocks, tables, clustered vectors), but
words drawn from real vocabularies with their real frequencies, so that a term's document
frequency at 1M chunks looks like it does in real notes instead of matching most chunks.

Word lists are counted at bench time from public text under a data folder (the eval data:
BEIR SciFact, XQuAD and TyDi QA passages, tldr-pages in three languages, a Czech Linux book),
never copied into the repository, and cached in the bench cache. From a language's counts:

- ranks 1..`r0` (every word seen at least MIN_RELIABLE times) keep their measured frequency
  (the fitted Zipf slope of ranks FIT_FROM_RANK..r0 is reported, not used);
- beyond `r0` frequency falls as rank^-TAIL_SLOPE, out to VOCAB_PER_LANG ranks: the measured
  words seen fewer times first, then synthetic words made of real word halves (a real
  collection's tail of names, typos and compounds). Large corpora show this second Zipf regime
  with an exponent near 2 past the few thousand words everyone uses (Ferrer i Cancho & Sole
  2001), and an exponent of 2 means Heaps' law with beta = 1/2: the vocabulary keeps growing
  with the corpus instead of stopping at the sample's;
- every topic (area x topic folder) has its own lexicon of TOPIC_WORDS words taken
  log-uniformly from ranks TOPIC_MIN_RANK.. (mostly mid and rare words), Zipf-weighted in its
  own order, which supplies TOPIC_SHARE of a note's words; every note repeats NOTE_KEYWORDS
  words of its topic (NOTE_SHARE of its words), as a real note keeps naming its subject.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import corpus_text
from bench.corpus_text import GEN_VERSION, HOSTS, SEED, Draw, WordSource
from bench.machine import eval_root

REAL_GEN_VERSION = "1"  # bump when this generator's output changes for the same word counts
MIN_RELIABLE = 3  # a count below this is sampling noise: the fitted Zipf tail takes over
VOCAB_PER_LANG = 300_000  # ranks per language, real words first, then synthetic tail words
TOPIC_WORDS = 300
TOPIC_MIN_RANK = 150
TOPIC_SHARE = 0.2
NOTE_KEYWORDS = 4
NOTE_SHARE = 0.04
FIT_FROM_RANK = 30  # the slope is fitted from here to r0 (the head is flatter than Zipf)
TAIL_SLOPE = 2.0
# query words by frequency rank among a language's measured content words, as fractions of
# that list (the samples differ in size): (share of query words, first, last)
QUERY_BANDS = ((0.2, 0.0, 0.05), (0.5, 0.05, 0.4), (0.3, 0.4, 1.0))

LETTERS = {
    "en": re.compile(r"[a-z]+"),
    "cs": re.compile(r"[a-záčďéěíňóřšťúůýž]+"),
    "ru": re.compile(r"[а-яё]+"),
}
# (language, glob under the data folder, how to read it)
SOURCES = (
    ("en", "scifact/corpus.jsonl", "jsonl"),
    ("en", "xquad-mixed-en-ru/corpus.jsonl", "jsonl"),
    ("en", "corpora/tldr-pages/pages/**/*.md", "tldr"),
    ("cs", "corpora/tldr-pages/pages.cs/**/*.md", "tldr"),
    ("cs", "corpora/linux-spellbook-cs/**/*.md", "markdown"),
    ("ru", "corpora/tldr-pages/pages.ru/**/*.md", "tldr"),
    ("ru", "tydiqa-goldp-ru/corpus.jsonl", "jsonl"),
    ("ru", "xquad-ru/corpus.jsonl", "jsonl"),
)

_TOKEN = re.compile(r"[^\W\d_]+")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_INLINE = re.compile(r"`[^`\n]*`|<[^>\n]*>|\]\([^)\n]*\)|https?://\S+|\{\{[^}\n]*\}\}")


def _prose(kind: str, text: str) -> Iterator[str]:
    """The running text of one file: JSON passages' title and text; markdown without code,
    comments, links and (tldr) the command lines and page titles."""
    if kind == "jsonl":
        for line in text.splitlines():
            if line.strip():
                row = json.loads(line)
                yield f"{row.get('title', '')} {row.get('text', '')}"
        return
    text = _INLINE.sub(" ", _FENCE.sub(" ", _COMMENT.sub(" ", text)))
    for line in text.splitlines():
        if kind == "tldr" and line.startswith("#"):
            continue  # the page title is a command name
        yield line


def count_words(data: Path) -> dict[str, Counter[str]]:
    """Word counts per language of every source file under `data` (lower-cased, NFC, letters
    only, words in that language's alphabet; a one-letter word only if it is a stop word)."""
    from search.words import STOPWORDS

    counts: dict[str, Counter[str]] = {lang: Counter() for lang in LETTERS}
    for lang, pattern, kind in SOURCES:
        files = sorted(data.glob(pattern))
        if not files:
            raise FileNotFoundError(f"no {pattern} under {data}: pass the eval data folder with --data")
        for path in files:
            for line in _prose(kind, path.read_text(encoding="utf-8", errors="replace")):
                for token in _TOKEN.findall(unicodedata.normalize("NFC", line).lower()):
                    if LETTERS[lang].fullmatch(token) and (len(token) > 1 or token in STOPWORDS):
                        counts[lang][token] += 1
    return counts


def data_digest(data: Path) -> str:
    """What the word counts depend on: every source file's path and bytes."""
    h = hashlib.sha256()
    for _, pattern, _ in SOURCES:
        for path in sorted(data.glob(pattern)):
            h.update(path.relative_to(data).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def cached_counts(data: Path, cache: Path) -> dict[str, list[tuple[str, int]]]:
    """Ranked (word, count) lists per language, counted once per data version and cached."""
    file = cache / f"wordcounts-{data_digest(data)}.json"
    if file.exists():
        stored = json.loads(file.read_text(encoding="utf-8"))
        return {lang: [(w, int(c)) for w, c in rows] for lang, rows in stored.items()}
    ranked = {
        lang: sorted(counter.items(), key=lambda wc: (-wc[1], wc[0])) for lang, counter in count_words(data).items()
    }
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(ranked, ensure_ascii=False), encoding="utf-8")
    tmp.replace(file)
    return ranked


def zipf_slope(counts: list[int], first: int, last: int) -> float:
    """Least-squares slope s of log(count) = a - s log(rank) over ranks first..last (1-based)."""
    xs = [math.log(r) for r in range(first, last + 1)]
    ys = [math.log(counts[r - 1]) for r in range(first, last + 1)]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return -sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def _synthetic_tail(lang: str, real: list[str], taken: set[str], n: int) -> list[str]:
    """`n` new words of the language's alphabet: the front of one real word and the back of
    another, never a real word, deterministic."""
    rng = random.Random(f"{SEED}-tail-{lang}")
    pool = [w for w in real if len(w) >= 5] or real
    out: list[str] = []
    while len(out) < n:
        a, b = rng.choice(pool), rng.choice(pool)
        word = a[: rng.randint(2, max(2, len(a) - 2))] + b[rng.randint(1, len(b) - 2) :]
        if word not in taken and 3 <= len(word) <= 20:
            taken.add(word)
            out.append(word)
    return out


@dataclass(frozen=True)
class Lexicon:
    """One language's ranked words and their sampling weights (cumulative, for bisect)."""

    lang: str
    words: list[str]
    cum: list[float]
    measured: int  # words seen in the data (the rest are synthetic tail words)
    reliable: int  # r0: words seen at least MIN_RELIABLE times
    slope: float
    tokens: int  # words counted in the data

    @staticmethod
    def build(lang: str, ranked: list[tuple[str, int]], vocab: int = VOCAB_PER_LANG) -> Lexicon:
        words = [w for w, _ in ranked]
        counts = [c for _, c in ranked]
        reliable = sum(1 for c in counts if c >= MIN_RELIABLE)
        if reliable < 2:
            raise ValueError(f"too little {lang} text: {reliable} words seen {MIN_RELIABLE}+ times")
        slope = zipf_slope(counts, min(FIT_FROM_RANK, reliable // 2), reliable)
        vocab = max(vocab, len(words))
        words += _synthetic_tail(lang, words, set(words), vocab - len(words))
        anchor = counts[reliable - 1]
        weights = counts[:reliable] + [anchor * (reliable / r) ** TAIL_SLOPE for r in range(reliable + 1, vocab + 1)]
        cum: list[float] = []
        total = 0.0
        for weight in weights:
            total += weight
            cum.append(total)
        return Lexicon(lang, words, cum, len(ranked), reliable, slope, sum(counts))

    def share(self, first: int, last: int) -> float:
        """The share of drawn words that fall in ranks first..last (1-based, inclusive)."""
        low = self.cum[first - 2] if first > 1 else 0.0
        return (self.cum[min(last, len(self.cum)) - 1] - low) / self.cum[-1]


class RealisticWords:
    """The WordSource of the realistic corpus: global Zipf draws, the topic's own lexicon and
    the note's keywords, mixed per sentence."""

    def __init__(self, lexicons: dict[str, Lexicon], version: str) -> None:
        self.lexicons = lexicons
        self.version = version  # names the cache: changes with the word counts or this generator
        self._topics: dict[tuple[int, str], tuple[list[str], list[float]]] = {}
        self._notes: dict[tuple[int, str], list[str]] = {}

    def topic_lexicon(self, topic: int, lang: str) -> tuple[list[str], list[float]]:
        key = (topic, lang)
        if key not in self._topics:
            lex = self.lexicons[lang]
            rng = random.Random(f"{SEED}-topic-{topic}-{lang}")
            low, high = math.log(TOPIC_MIN_RANK), math.log(len(lex.words))
            chosen: dict[str, None] = {}
            while len(chosen) < TOPIC_WORDS:
                chosen[lex.words[int(math.exp(rng.uniform(low, high))) - 1]] = None
            words = list(chosen)
            cum = list(itertools.accumulate(1.0 / k for k in range(1, len(words) + 1)))
            self._topics[key] = (words, cum)
        return self._topics[key]

    def note_keywords(self, note: int, topic: int, lang: str) -> list[str]:
        key = (note, lang)
        if key not in self._notes:
            if len(self._notes) > 64:
                self._notes.clear()  # notes are generated one after another
            words, cum = self.topic_lexicon(topic, lang)
            rng = random.Random(f"{SEED}-note-{note}-{lang}")
            self._notes[key] = rng.choices(words, cum_weights=cum, k=NOTE_KEYWORDS)
        return self._notes[key]

    def draw(self, lang: str, topic: int, note: int) -> Draw:
        lex = self.lexicons[lang]
        topic_words, topic_cum = self.topic_lexicon(topic, lang)
        keywords = self.note_keywords(note, topic, lang)

        def sample(rng: random.Random, n: int) -> list[str]:
            from_topic = min(n, int(n * TOPIC_SHARE + rng.random()))
            from_note = min(n - from_topic, int(n * NOTE_SHARE + rng.random()))
            out = rng.choices(lex.words, cum_weights=lex.cum, k=n - from_topic - from_note)
            out += rng.choices(topic_words, cum_weights=topic_cum, k=from_topic)
            out += [rng.choice(keywords) for _ in range(from_note)]
            rng.shuffle(out)
            return out

        return sample


def realistic_words(data: Path, cache: Path, vocab: int = VOCAB_PER_LANG) -> RealisticWords:
    ranked = cached_counts(data, cache)
    lexicons = {lang: Lexicon.build(lang, rows, vocab) for lang, rows in ranked.items()}
    h = hashlib.sha256(REAL_GEN_VERSION.encode())
    h.update(json.dumps(ranked, ensure_ascii=False).encode())
    params = (
        MIN_RELIABLE,
        TAIL_SLOPE,
        vocab,
        TOPIC_WORDS,
        TOPIC_MIN_RANK,
        TOPIC_SHARE,
        NOTE_KEYWORDS,
        NOTE_SHARE,
    )
    h.update(repr(params).encode())
    return RealisticWords(lexicons, f"r{REAL_GEN_VERSION}.{h.hexdigest()[:8]}")


def query_pool(lex: Lexicon) -> list[str]:
    """Words people would search for: measured (real) words of 4+ letters, not stop words."""
    from search.words import ROUTING_STOPWORDS

    return [w for w in lex.words[: lex.reliable] if len(w) >= 4 and w not in ROUTING_STOPWORDS]


def realistic_queries(source: RealisticWords, n: int = 50) -> list[str]:
    """The dense corpus's 16 query templates over the real vocabularies: content words drawn
    by QUERY_BANDS (20 % from the commonest 5 % of the measured content words, 50 % from the
    next 35 %, 30 % from the rarest 60 %), quoted phrases
    of two common words, questions with real stop words, hosts and IPs as in the dense set."""
    rng = random.Random(SEED + 8)
    pools = {lang: query_pool(lex) for lang, lex in source.lexicons.items()}

    def word(lang: str, band: tuple[float, float, float] | None = None) -> str:
        pool = pools[lang]
        _, first, last = band or rng.choices(QUERY_BANDS, weights=[b[0] for b in QUERY_BANDS])[0]
        return pool[rng.randrange(int(first * len(pool)), max(int(first * len(pool)) + 1, int(last * len(pool))))]

    def words(lang: str, k: int) -> str:
        return " ".join(word(lang) for _ in range(k))

    def stem() -> str:
        w = word("cs")
        while len(w) < 7:
            w = word("cs")
        return w[:5]

    common = QUERY_BANDS[0]
    templates: list[Callable[[], str]] = [
        lambda: word("en"),
        lambda: word("cs"),
        lambda: word("ru"),
        stem,
        lambda: words("en", 2),
        lambda: words("cs", 3),
        lambda: words("ru", 2),
        lambda: f"{word('en')} {word('cs')} {word('ru')}",
        lambda: rng.choice(HOSTS),
        lambda: f'"{word("en", common)} {word("en", common)}"',
        lambda: f"how do I {word('en')} the {word('en')} on {rng.choice(HOSTS)}",
        lambda: f"jak nastavit {word('cs')} pro {word('cs')}",
        lambda: f"как настроить {word('ru')} для {word('ru')}",
        lambda: f"10.{rng.randint(0, 9)}.{rng.randint(0, 255)}",
        lambda: " ".join(word(rng.choice(["en", "cs", "ru"])) for _ in range(6)),
        lambda: rng.choice(["restic snapshots", "pg_dump", "systemctl status", "kubectl rollout", "v2.3"]),
    ]
    return corpus_text.distinct_queries(templates, n)


@dataclass(frozen=True)
class Corpus:
    """One kind of benchmark corpus: its notes, its queries and how its caches are named."""

    kind: str  # "dense" or "realistic"
    version: str  # part of every cache name: a new version never reuses an older build
    label: str  # inserted into cache names ("search-real-100000"), "" for the dense corpus
    source: WordSource
    make_queries: Callable[[int], list[str]]

    def note_text(self, i: int) -> str:
        return corpus_text.note_text(i, self.source)

    def queries(self, n: int = 50) -> list[str]:
        return self.make_queries(n)

    def name(self, prefix: str, size: int) -> str:
        return f"{prefix}-{self.label}{size}"


DENSE_CORPUS = Corpus("dense", GEN_VERSION, "", corpus_text.DENSE, corpus_text.queries)
CORPUS_KINDS = ("dense", "realistic")
DEFAULT_DATA = eval_root()


def corpus_of(kind: str, data: Path | None = None) -> Corpus:
    """The corpus `kind`; the realistic one counts (once, cached) the text under `data`."""
    if kind == "dense":
        return DENSE_CORPUS
    if kind != "realistic":
        raise ValueError(f"unknown corpus kind {kind!r}: one of {', '.join(CORPUS_KINDS)}")
    from bench.machine import cache_root

    source = realistic_words(data or DEFAULT_DATA, cache_root())
    return Corpus("realistic", source.version, "real-", source, lambda n: realistic_queries(source, n))
