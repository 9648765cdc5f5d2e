"""Which natural language a chunk or a query is written in (pure: no I/O besides the model file).

Code, tables, URLs and markup say nothing about the language of the prose around them (a Czech
note full of `tar czf` lines is still Czech), so `prose_for_language` keeps only the prose and
the detectors see words made of letters alone. Anything too short, too uncertain, written in
two scripts or in a language outside SUPPORTED_LANGUAGES is UNKNOWN: a wrong guess would bend
the language-dependent parts of search, an honest "unknown" leaves them as they are.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy
    from numpy.typing import NDArray

    from indexer.langid_tables import Tables

UNKNOWN = "unknown"
# ISO 639-1 codes the detector is trusted with (measured, bench/EVAL.md); any other
# language it recognises is reported as UNKNOWN, never as the nearest supported one.
SUPPORTED_LANGUAGES: tuple[str, ...] = ("cs", "en", "ru", "sk", "de", "uk")

# ---- prose extraction ------------------------------------------------------------------------


class _LazyPattern:
    """A regular expression compiled on first use: a query needs few of this module's patterns,
    and compiling them all at import was a noticeable part of a one-shot query's start."""

    __slots__ = ("_compiled", "_flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def _regex(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self._flags)
        return self._compiled

    def sub(self, replacement: str | Callable[[re.Match[str]], str], text: str, count: int = 0) -> str:
        return self._regex().sub(replacement, text, count=count)

    def findall(self, text: str) -> list[Any]:
        return self._regex().findall(text)


# Whole-text patterns (one C-level scan each, and only when a cheap `in` test says the construct
# can be there): chunks are written by the thousand per second.
# (the body is taken a whole line at a time: the closing line starts at a line break anyway, and
# the pattern tries it at each line instead of at each character)
_FENCED_CODE = _LazyPattern(r"^ {0,3}(`{3,}|~{3,})[^\n]*(?:\n[^\n]*)*?(?:\n {0,3}\1[`~]*[ \t]*(?=\n|\Z)|\Z)", re.M)
# indented code: after a blank line (or at the start), lines indented by 4 spaces or a tab that
# are not list items (a list item's continuation is indented too, and is prose)
_INDENTED_CODE = _LazyPattern(
    r"(?:(?<=\n\n)|\A)(?:(?: {4}|\t)(?![ \t]*(?:[-*+]|\d{1,9}[.)])[ \t])[^\n]*(?:\n|\Z)|[ \t]*\n(?=(?: {4}|\t)))+"
)
_TABLE_ROW = _LazyPattern(r"^[^\n]*\|[^\n]*\|[^\n]*$|^[ \t]*:?-{3,}:?[ \t]*\|[-:| \t]*$", re.M)
_REFERENCE_DEF = _LazyPattern(r"^ {0,3}\[[^\]\n]+\]:[ \t]*\S[^\n]*$", re.M)
_FRONT_MATTER = _LazyPattern(r"\A---[ \t]*\n(.*?)(?:\n(?:---|\.\.\.)[ \t]*(?=\n|\Z)|\Z)", re.S)
_FRONT_MATTER_KEY = _LazyPattern(r"^[ \t]*[\w-]+[ \t]*:[ \t]?", re.M)
_HTML_COMMENT = _LazyPattern(r"<!--.*?(?:-->|\Z)", re.S)
_INLINE_CODE = _LazyPattern(r"(`+)(?:(?!\1).)+?\1")
_IMAGE_OR_LINK = _LazyPattern(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_REFERENCE_LINK = _LazyPattern(r"\[([^\]\n]*)\]\[[^\]\n]*\]")
# "www." in lower case only, as the cheap test before the pattern looks for it: a text's prose
# must not depend on whether some other line holds a lower-case "www." or a "://"
_URL = _LazyPattern(r"<?\b(?:[a-z][a-z0-9+.-]*://|(?-i:www\.))[^\s>]*>?", re.I)
_HTML_TAG = _LazyPattern(r"</?[a-zA-Z][^>\n]*>")
_EMAIL = _LazyPattern(r"\S+@\S+\.\w+")


def prose_for_language(markdown_text: str) -> str:
    """The prose of a markdown chunk: no fenced or indented code, tables, front matter keys,
    reference definitions, HTML, inline code, URLs or link targets (link texts stay)."""
    text = markdown_text
    if text.startswith("---"):
        # the values of front matter fields may be prose (a title, a summary); the keys are not
        text = _FRONT_MATTER.sub(lambda m: _FRONT_MATTER_KEY.sub("", m.group(1)), text, count=1)
    return _prose_of_lines(_without_fences(text))


def _without_fences(text: str) -> str:
    """`text` without its fenced code. Only a line holding three backticks or tildes in a row
    can open a fence, so the pattern runs from the first such line on. A search for one
    character runs as a memchr, several times cheaper than one for three, and most prose has
    neither character: each is looked for alone first."""
    at = text.find("```") if "`" in text else -1
    tildes = text.find("~~~") if "~" in text else -1
    if tildes >= 0 and (at < 0 or tildes < at):
        at = tildes
    if at < 0:
        return text
    line = text.rfind("\n", 0, at) + 1
    return text[:line] + _FENCED_CODE.sub("", text[line:])


def _prose_of_lines(text: str) -> str:
    """`prose_for_language` of a text without front matter, fences or HTML comments: only
    indented code spans lines (a block of whole lines), every other step keeps to one line.

    Each step runs only when the text holds what its pattern needs, looked for as one character
    before several where one is rare (a single character is found by memchr): no step adds a
    character to the text, so one absent before a step is absent after it."""
    if "\t" in text or "    " in text:
        text = _INDENTED_CODE.sub("", text)
    if "|" in text:
        text = _TABLE_ROW.sub("", text)
    brackets = "]" in text
    if brackets and "]:" in text:
        text = _REFERENCE_DEF.sub("", text)
    if "<" in text and "<!--" in text:
        text = _HTML_COMMENT.sub(" ", text)
    if "`" in text:
        text = _INLINE_CODE.sub(" ", text)
    if brackets and "](" in text:
        text = _IMAGE_OR_LINK.sub(r"\1", text)
    if brackets and "][" in text:
        text = _REFERENCE_LINK.sub(r"\1", text)
    if ("/" in text and "://" in text) or ("w" in text and "www." in text):
        text = _URL.sub(" ", text)
    if "<" in text:
        text = _HTML_TAG.sub(" ", text)
    if "@" in text:
        text = _EMAIL.sub(" ", text)
    return text


# ---- words -----------------------------------------------------------------------------------

# A word: letters only, optionally joined by an apostrophe or a hyphen ("don't", "česko-slovenský").
# Identifiers with digits, underscores, slashes or dots ("PROJ-123", "51820/udp", "foo_bar",
# "--merge", "Ctrl+Shift+I") carry no language and are dropped whole.
_TOKEN_EDGE = "\"'()[]{}«»„“”‚‘’.,;:!?…*_~#>"
_WORD = r"[^\W\d_]+(?:['’\-][^\W\d_]+)*"
# the same in one scan: a whitespace-delimited token that is a word between edge characters
_EDGES = "[" + re.escape(_TOKEN_EDGE) + "]*"
_WORD_TOKEN = _LazyPattern(rf"(?<!\S){_EDGES}({_WORD}){_EDGES}(?!\S)")


_WHOLE_WORD = re.compile(_WORD)


def language_words(text: str) -> list[str]:
    """The words of `text` that can tell a language: letter-only tokens, markup trimmed.

    `_WORD_TOKEN.findall(text)`, token by token (checked equal in tests): a token is a run of
    non-space characters (`str.split` and the pattern's `\\S` agree on what a space is), its
    edges are never letters, so what is left once they are stripped is the word or nothing;
    most words are letters alone, and `str.isalpha` is a subset of the pattern's letters."""
    return [
        core
        for token in text.split()
        if (core := token.strip(_TOKEN_EDGE)).isalpha() or (core and _WHOLE_WORD.fullmatch(core))
    ]


# ---- detection -------------------------------------------------------------------------------

# The detector chooses among the supported languages and these others, the likeliest to be
# mistaken for one of them (pl, sl, hr next to cs and sk; bg, be next to ru and uk; a few large
# Latin-script ones) plus py3langid's "zxx" (no linguistic content). One of them winning means
# UNKNOWN. Measured against the full model (bench/EVAL.md): as safe on other languages, more
# often right on three-word English and Russian queries, and a smaller set is faster.
OTHER_LANGUAGES: tuple[str, ...] = ("pl", "sl", "hr", "bg", "be", "fr", "es", "it", "nl", "hu", "zxx")
CANDIDATE_LANGUAGES = SUPPORTED_LANGUAGES + OTHER_LANGUAGES
# Below these a text says too little: "lvconvert --merge" keeps one word, "Ctrl+Shift+I" none.
MIN_WORDS = 2
MIN_LETTERS = 8
# The winner's probability among the candidate languages; below it the text is ambiguous
# (measured, bench/EVAL.md "Language identification").
MIN_CONFIDENCE = 0.4
# Slovak wins over Czech only by more than this factor when no letter only Slovak has is there.
CZECH_TIE = 0.5
# Both scripts at least this share of the letters: mixed text (a Russian note quoting English
# sentences, or the reverse), whatever the detector would say.
MIXED_SCRIPT_SHARE = 0.25
# The detector reads about this many characters of words from the start of a long text and as
# many from its end: its cost grows with the length, and two ends that disagree mean mixed text.
WINDOW_CHARS = 64

_CZECH_ONLY = frozenset("řůěŘŮĚ")
_SLOVAK_ONLY = frozenset("ľĺŕôäĽĹŔÔÄ")
_CZECH_LETTER = re.compile("[" + "".join(sorted(_CZECH_ONLY)) + "]")
_SLOVAK_LETTER = re.compile("[" + "".join(sorted(_SLOVAK_ONLY)) + "]")
# query syntax words, not language: "backup OR restore"
_QUERY_OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})
_CYRILLIC_RUN = re.compile("[\u0400-\u052f]+")
# The supported languages written in Cyrillic; the others are written in Latin letters.
CYRILLIC_LANGUAGES = frozenset({"ru", "uk"})

_identifier_lock = threading.Lock()
_identifier_instance: _Scorer | None = None

# A byte that never occurs in UTF-8 and sends py3langid's automaton back to its start state from
# every state (checked in tests): samples joined by it are walked as one byte string.
_SEPARATOR = b"\xff"
# The automaton's states stand for at most this many trailing bytes (its trie is that deep; checked
# in tests), so the state after any byte follows from the bytes just before it: a long byte string
# can be walked in many segments at once, each first reading the bytes before its start.
_AUTOMATON_DEPTH = 6
# Below this many bytes a Python loop over the automaton is cheaper than numpy's setup.
_SEGMENT_WALK_BYTES = 512
# Samples scored in one numpy pass: more would leave the processor's caches (measured slower).
_SAMPLES_PER_PASS = 512


def _visit_counts(nextmove: memoryview, rows: memoryview, output: memoryview, data: bytes) -> dict[int, int]:
    """How often each feature occurs in `data` (py3langid's `visit_counts`, without importing
    its module and what that loads)."""
    state, counts = 0, dict[int, int]()
    for byte in data:
        state = nextmove[rows[state] + byte]
        feature = output[state]
        if feature >= 0:
            counts[feature] = counts.get(feature, 0) + 1
    return counts


def _model_bytes(sample: str) -> bytes:
    """The bytes py3langid scores for `sample` (its own normalisation)."""
    text = sample.lower() if sample.isupper() else sample
    if text.isascii():  # NFC leaves ASCII as it is
        return text.encode()
    return unicodedata.normalize("NFC", text).encode("utf-8", errors="surrogatepass")


class _Scorer:
    """py3langid's naive Bayes classifier over the candidate languages, scored here from its
    model's tables: the same n-gram automaton and arithmetic, for many samples in one pass (its
    per-call overhead and the Python loop over every byte were most of a sync's language cost)."""

    def __init__(self, tables: Tables) -> None:
        import numpy as np

        self.labels: list[str] = list(tables.labels)
        self.table = tables.table  # features x languages
        self.prior = tables.prior
        # memoryviews for the byte loops: indexing one gives a Python int, several times
        # cheaper than a numpy scalar
        self._next = tables.nextmove.data
        self._rows = tables.rows.data
        self._output = tables.output.data
        self._next_array = tables.nextmove
        self._rows_array = tables.rows
        self._output_array = tables.output
        self._czech = self.labels.index("cs") if "cs" in self.labels else -1
        # what a label decides alone (`_decide`): 0 UNKNOWN (another language), 1 nothing yet
        # (Czech and Slovak), else the index of the supported language in `_outcomes`
        self._outcomes: list[str | None] = [
            UNKNOWN,
            None,
            *(code for code in SUPPORTED_LANGUAGES if code not in ("cs", "sk")),
        ]
        self._outcome = np.array(
            [
                1 if label in ("cs", "sk") else self._outcomes.index(label) if label in self._outcomes[2:] else 0
                for label in self.labels
            ],
            dtype=np.int64,
        )
        self._np = np

    def _walk_loop(self, data: bytes) -> list[int]:
        """The automaton's state after each byte (state 0 before the first)."""
        nextmove, rows = self._next, self._rows
        state, states = 0, list[int]()
        append = states.append
        for byte in data:
            state = nextmove[rows[state] + byte]
            append(state)
        return states

    def _walk_segments(self, data: bytes) -> NDArray[numpy.int64]:
        """The same states, computed for many segments of `data` side by side (numpy)."""
        np = self._np
        size = len(data)
        # segment length: a numpy step costs about the same for any number of segments, and each
        # segment reads a few bytes before its start; a quarter of the square root measured fastest
        width = max(16, int(math.sqrt(size) / 4))
        segments = -(-size // width)
        warmup = _AUTOMATON_DEPTH - 1
        padded = np.full(warmup + segments * width, _SEPARATOR[0], dtype=np.uint8)
        padded[warmup : warmup + size] = np.frombuffer(data, dtype=np.uint8)
        # column j: the j-th byte of every segment, the first `warmup` ones from before its start
        columns = np.lib.stride_tricks.as_strided(padded, shape=(warmup + width, segments), strides=(1, width)).copy()
        nextmove, rows = self._next_array, self._rows_array
        state = np.zeros(segments, dtype=np.int64)
        for step in range(warmup):
            state = nextmove[rows[state] + columns[step]]
        states = np.empty((width, segments), dtype=np.int64)
        for step in range(width):
            state = nextmove[rows[state] + columns[warmup + step]]
            states[step] = state
        flat: NDArray[numpy.int64] = states.T.reshape(-1)[:size]
        return flat

    def probabilities(self, samples: list[str]) -> NDArray[numpy.float64]:
        """Each sample's probability per label of `labels` (py3langid's `rank`, normalised)."""
        np = self._np
        encoded = [_model_bytes(sample) for sample in samples]
        if len(encoded) == 1 and len(encoded[0]) < _SEGMENT_WALK_BYTES:
            return self._probabilities_of_one(encoded[0])
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        data = _SEPARATOR.join(encoded)
        states: list[int] | NDArray[numpy.int64] = (
            self._walk_loop(data) if len(data) < _SEGMENT_WALK_BYTES else self._walk_segments(data)
        )
        features = self._output_array[states]
        found = np.flatnonzero(features >= 0)
        sample_of = np.repeat(np.arange(len(encoded), dtype=np.int64), lengths + 1)  # per byte (+ separator)
        n_features = self.table.shape[0]
        keys = sample_of[found] * n_features + features[found]
        keys.sort()
        # no feature at all: every language equally likely
        result: NDArray[numpy.float64] = np.full((len(encoded), len(self.labels)), 1.0 / len(self.labels))
        if keys.size:
            starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
            counts = np.diff(np.append(starts, keys.size)).astype(np.float32)
            owner, feature = np.divmod(keys[starts], n_features)
            weighted = np.take(self.table, feature, axis=0)
            weighted *= np.log1p(counts)[:, None]
            firsts = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
            scored = owner[firsts]
            scores = np.add.reduceat(weighted, firsts, axis=0) + self.prior
            # py3langid's temperature, the square root of the byte length: calibrated across lengths
            scores *= (1.0 / np.sqrt(lengths[scored]))[:, None]
            scores -= scores.max(axis=1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=1, keepdims=True)
            result[scored] = scores
        return result

    def _probabilities_of_one(self, data: bytes) -> NDArray[numpy.float64]:
        """`probabilities` of one short sample (a query) in fewer numpy steps: the
        same features, counts and arithmetic in the same order, so the same figures."""
        np = self._np
        visits = _visit_counts(self._next, self._rows, self._output, data)
        if not visits:
            uniform: NDArray[numpy.float64] = np.full((1, len(self.labels)), 1.0 / len(self.labels))
            return uniform
        features = sorted(visits)
        counts = np.array([visits[feature] for feature in features], dtype=np.float32)
        weighted = self.table[features] * np.log1p(counts)[:, None]
        scores: NDArray[numpy.float64] = np.add.reduceat(weighted, [0], axis=0) + self.prior
        scores *= 1.0 / np.sqrt(np.array([len(data)]))[:, None]
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        return scores

    def best(self, samples: list[str]) -> tuple[list[str | None], list[str], list[float], list[float]]:
        """Each sample's likeliest label (first on a tie), its probability and Czech's, and
        the supported language or UNKNOWN that label already decides, or None for Czech and
        Slovak (their letters decide too): `_decide` without a Python call for most samples."""
        np = self._np
        probabilities = self.probabilities(samples)
        best = probabilities.argmax(axis=1)
        top = probabilities[np.arange(len(samples)), best]
        outcome = self._outcome[best]
        outcome[(outcome > 1) & (top < MIN_CONFIDENCE)] = 0
        czech = probabilities[:, self._czech].tolist() if self._czech >= 0 else [0.0] * len(samples)
        outcomes, labels = self._outcomes, self.labels
        return (
            [outcomes[code] for code in outcome.tolist()],
            [labels[index] for index in best.tolist()],
            top.tolist(),
            czech,
        )


def _identifier() -> _Scorer:
    """The classifier, loaded once per process on first use (mapped from the cache folder,
    see indexer.langid_tables); classifying only reads it, so every thread shares the one instance."""
    global _identifier_instance
    if _identifier_instance is None:
        with _identifier_lock:
            if _identifier_instance is None:
                from indexer.langid_tables import load_tables

                _identifier_instance = _Scorer(load_tables(CANDIDATE_LANGUAGES))
    return _identifier_instance


def preload() -> None:
    """Load the tables now (a long-running server pays for it at start, not on its first query)."""
    _identifier()


def _decide(language: str, probability: float, czech_probability: float, sample: str) -> str:
    """The supported language of one sample whose likeliest label is `language`, or UNKNOWN;
    `sample`: the text's words (its letters tell Czech from Slovak)."""
    if language == "cs" or language == "sk":
        czech = not sample.isascii() and _CZECH_LETTER.search(sample) is not None
        slovak = not sample.isascii() and _SLOVAK_LETTER.search(sample) is not None
        if language == "cs" and slovak and not czech:
            language = "sk"
        elif language == "sk" and czech and not slovak:
            language = "cs"
        elif language == "sk" and not slovak and czech_probability >= CZECH_TIE * probability:
            # Czech and Slovak share most n-grams: without a letter only Slovak has, a near tie
            # goes to Czech (the language these notes are far more likely to be in)
            language, probability = "cs", probability + czech_probability
    if language not in SUPPORTED_LANGUAGES or probability < MIN_CONFIDENCE:
        return UNKNOWN
    return language


def _samples(head: list[str], tail: list[str]) -> tuple[list[str], str] | None:
    """What the detector reads of a text's words (`head` from its start, `tail`, maybe empty,
    from its end) and all those words; None when the words alone make it UNKNOWN. A text
    longer than two windows is read at its start and at its end, which must agree."""
    words = head + tail if tail else head
    sample = " ".join(words)
    letters = len(sample) - len(words) + 1
    if len(words) < MIN_WORDS or letters < MIN_LETTERS:
        return None
    if not sample.isascii():
        cyrillic = sum(map(len, _CYRILLIC_RUN.findall(sample)))
        if MIXED_SCRIPT_SHARE <= cyrillic / letters <= 1 - MIXED_SCRIPT_SHARE:
            return None
    if len(sample) <= 2 * WINDOW_CHARS:
        return [sample], sample
    # the words from the start up to the first that ends WINDOW_CHARS - 1 or more characters
    # into the sample, and as many from the end (words hold no space: they end at one)
    head_end = sample.find(" ", WINDOW_CHARS - 1)
    tail_start = sample.rfind(" ", 0, len(sample) - WINDOW_CHARS + 1) + 1
    return [sample[:head_end] if head_end >= 0 else sample, sample[tail_start:]], sample


def _detect_all(plans: list[tuple[list[str], str] | None]) -> list[str]:
    """The language of every planned text, all samples scored in one pass."""
    samples = [sample for plan in plans if plan is not None for sample in plan[0]]
    if not samples:
        return [UNKNOWN] * len(plans)
    scorer = _identifier()
    outcomes: list[str | None] = []
    labels: list[str] = []
    tops: list[float] = []
    czechs: list[float] = []
    for first in range(0, len(samples), _SAMPLES_PER_PASS):
        outcome, label, top, czech = scorer.best(samples[first : first + _SAMPLES_PER_PASS])
        outcomes += outcome
        labels += label
        tops += top
        czechs += czech
    languages = []
    at = 0
    for plan in plans:
        if plan is None:
            languages.append(UNKNOWN)
            continue
        windows, sample = plan
        found = outcomes[at]
        if found is None:
            found = _decide(labels[at], tops[at], czechs[at], sample)
        if len(windows) == 2:  # both ends must agree: an unknown start already decides
            at += 1
            if found != UNKNOWN:
                tail = outcomes[at]
                if tail is None:
                    tail = _decide(labels[at], tops[at], czechs[at], sample)
                if tail != found:
                    found = UNKNOWN
        at += 1
        languages.append(found)
    return languages


def _text_samples(text: str) -> tuple[list[str], str] | None:
    span = 2 * WINDOW_CHARS
    if len(text) <= 3 * span:
        return _samples(language_words(text), [])
    # a long text: only its start and its end are read; a word the cut went through is dropped
    return _samples(language_words(text[:span])[:-1], language_words(text[-span:])[1:])


# A chunk longer than both is read at its two ends only: the prose of about this many characters
# from its start and as many from its end, instead of the prose of all of it.
END_CHARS = 200
_INDENT = (" " * 4, "\t")


def _chunk_samples(markdown_text: str) -> tuple[list[str], str] | None:
    """`_text_samples(prose_for_language(markdown_text))`, computed from the chunk's two ends
    when that gives the same plan, exactly.

    Without front matter or HTML comments, and once fenced code is gone, every step of the
    prose keeps to its line but indented code, whose blocks are whole lines: a line is code by
    itself and the line before it, and a blank line also by the line after it. So the prose of
    the lines up to a non-blank line is the start of the chunk's prose, and the prose from a
    line that is neither blank nor indented to the end is its end. When both parts have a
    window's worth of prose and more than the long-text threshold together, the chunk's prose
    is long and its windows lie inside them; otherwise the whole prose is computed."""
    text = markdown_text
    if len(text) <= 2 * END_CHARS or ("<" in text and "<!--" in text) or text.startswith("---"):
        return _text_samples(prose_for_language(text))
    text = _without_fences(text)  # what prose_for_language does first here
    size = len(text)
    head_end = text.find("\n", END_CHARS)
    # a blank line is code when code follows it; a line whose last character is neither a
    # space, a tab nor the line break before it (an empty line) is not blank: no need to read it
    while head_end >= 0 and (
        text[head_end - 1] in " \t\n" and not text[text.rfind("\n", 0, head_end) + 1 : head_end].strip(" \t")
    ):
        head_end = text.find("\n", head_end + 1)
    tail_start = text.rfind("\n", 0, size - END_CHARS)
    while tail_start >= 0:
        first = text[tail_start + 1]  # a line starting with neither a space nor a tab is not indented
        if first not in " \t\n":
            break
        if first != "\n":
            line_end = text.find("\n", tail_start + 1)
            line = text[tail_start + 1 : line_end if line_end >= 0 else size]
            if line.strip(" \t") and not line.startswith(_INDENT):
                break
        tail_start = text.rfind("\n", 0, tail_start)
    span = 2 * WINDOW_CHARS
    if 0 <= head_end <= tail_start:
        head = _prose_of_lines(text[: head_end + 1])
        tail = _prose_of_lines(text[tail_start + 1 :])
        if len(head) >= span and len(tail) >= span and len(head) + len(tail) > 3 * span:
            return _samples(language_words(head[:span])[:-1], language_words(tail[-span:])[1:])
    return _text_samples(_prose_of_lines(text))


def detect_language(text: str) -> str:
    """ISO 639-1 code of the plain text's language (one of SUPPORTED_LANGUAGES), or UNKNOWN when
    the text is too short, uncertain, mixed, language-less or in another language."""
    return _detect_all([_text_samples(text)])[0]


def detect_languages(texts: list[str]) -> list[str]:
    """`detect_language` of each text, scored together (much cheaper per text than one by one)."""
    return _detect_all([_text_samples(text) for text in texts])


def in_another_script(markdown_text: str, language: str) -> bool:
    """Whether a chunk's prose is written in another script than `language`'s (Cyrillic against
    Latin letters); False where its prose has too few words to tell. A text without a Cyrillic
    letter is not Cyrillic prose: for a Latin-script language one scan decides, no prose is
    extracted (most chunks of Czech or English notes have none)."""
    cyrillic_language = language in CYRILLIC_LANGUAGES
    if not cyrillic_language and _CYRILLIC_RUN.search(markdown_text) is None:
        return False
    cyrillic = prose_is_cyrillic(markdown_text)
    return cyrillic is not None and cyrillic != cyrillic_language


# A server meets the same chunks query after query: the answers for texts up to this long are
# kept (CACHED_TEXTS of them: a few MB at most; an oversized block is read again each time).
CACHED_TEXT_CHARS = 4096
CACHED_TEXTS = 1024


def prose_is_cyrillic(markdown_text: str) -> bool | None:
    """Whether a chunk's prose is written in Cyrillic: at least MIXED_SCRIPT_SHARE of its words'
    letters are (a Russian note keeps its commands and names in Latin letters, and is often too
    mixed for a language to be named). None when its prose has too few words to tell: code, a
    bare heading."""
    if len(markdown_text) <= CACHED_TEXT_CHARS:
        return _prose_is_cyrillic_kept(markdown_text)
    return _prose_is_cyrillic(markdown_text)


def _prose_is_cyrillic(markdown_text: str) -> bool | None:
    words = language_words(prose_for_language(markdown_text))
    letters = sum(map(len, words))
    if len(words) < MIN_WORDS or letters < MIN_LETTERS:
        return None
    return sum(map(len, _CYRILLIC_RUN.findall(" ".join(words)))) >= MIXED_SCRIPT_SHARE * letters


_prose_is_cyrillic_kept = functools.lru_cache(maxsize=CACHED_TEXTS)(_prose_is_cyrillic)


def chunk_language(markdown_text: str) -> str:
    """The language of a chunk's prose: code, tables and links do not take part."""
    return _detect_all([_chunk_samples(markdown_text)])[0]


def chunk_languages(markdown_texts: list[str]) -> list[str]:
    """`chunk_language` of each chunk, scored together."""
    return _detect_all([_chunk_samples(text) for text in markdown_texts])


def chunk_language_of(markdown_texts: list[str]) -> Callable[[str], str]:
    """`chunk_language` for a write batch: asked about one of `markdown_texts` (the chunks of
    files new to the index), it detects them all in one pass; any other text (a chunk of an
    edited file whose language is not known by its hash) is detected alone."""
    # each distinct text once (copied notes, boilerplate); "" until the batch is detected
    pending = dict.fromkeys(markdown_texts, "")

    def language_of(markdown_text: str) -> str:
        found = pending.get(markdown_text)
        if found is None:
            return chunk_language(markdown_text)
        if not found:
            unique = list(pending)
            pending.update(zip(unique, chunk_languages(unique), strict=True))
            found = pending[markdown_text]
        return found

    return language_of


def detect_query_language(query: str) -> str:
    """The language of a search query, or UNKNOWN for identifiers, key combinations, commands
    and one-word queries (there a guess would be noise)."""
    words = [word for word in language_words(query) if word not in _QUERY_OPERATORS]
    return _detect_all([_samples(words, [])])[0]
