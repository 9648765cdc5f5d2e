"""Which natural language a chunk or a query is written in (pure: no I/O besides the model file).

Code, tables, URLs and markup say nothing about the language of the prose around them (a Czech
note full of `tar czf` lines is still Czech), so `prose_for_language` keeps only the prose and
the detectors see words made of letters alone. Anything too short, too uncertain, written in
two scripts or in a language outside SUPPORTED_LANGUAGES is UNKNOWN: a wrong guess would bend
the language-dependent parts of search, an honest "unknown" leaves them as they are.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from py3langid.langid import LanguageIdentifier

UNKNOWN = "unknown"
# ISO 639-1 codes the detector is trusted with (measured in bench/bench_langid.py); any other
# language it recognises is reported as UNKNOWN, never as the nearest supported one.
SUPPORTED_LANGUAGES: tuple[str, ...] = ("cs", "en", "ru", "sk", "de", "uk")

# ---- prose extraction ------------------------------------------------------------------------

# Whole-text patterns (one C-level scan each, and only when a cheap `in` test says the construct
# can be there): chunks are written by the thousand per second.
_FENCED_CODE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*(?:\n.*?)??(?:\n {0,3}\1[`~]*[ \t]*(?=\n|\Z)|\Z)", re.M | re.S)
# indented code: after a blank line (or at the start), lines indented by 4 spaces or a tab that
# are not list items (a list item's continuation is indented too, and is prose)
_INDENTED_CODE = re.compile(
    r"(?:(?<=\n\n)|\A)(?:(?: {4}|\t)(?![ \t]*(?:[-*+]|\d{1,9}[.)])[ \t])[^\n]*(?:\n|\Z)|[ \t]*\n(?=(?: {4}|\t)))+"
)
_TABLE_ROW = re.compile(r"^[^\n]*\|[^\n]*\|[^\n]*$|^[ \t]*:?-{3,}:?[ \t]*\|[-:| \t]*$", re.M)
_REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*\S[^\n]*$", re.M)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)(?:\n(?:---|\.\.\.)[ \t]*(?=\n|\Z)|\Z)", re.S)
_FRONT_MATTER_KEY = re.compile(r"^[ \t]*[\w-]+[ \t]*:[ \t]?", re.M)
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_REFERENCE_LINK = re.compile(r"\[([^\]\n]*)\]\[[^\]\n]*\]")
_URL = re.compile(r"<?\b(?:[a-z][a-z0-9+.-]*://|www\.)[^\s>]*>?", re.I)
_HTML_TAG = re.compile(r"</?[a-zA-Z][^>\n]*>")
_EMAIL = re.compile(r"\S+@\S+\.\w+")


def prose_for_language(markdown_text: str) -> str:
    """The prose of a markdown chunk: no fenced or indented code, tables, front matter keys,
    reference definitions, HTML, inline code, URLs or link targets (link texts stay)."""
    text = markdown_text
    if text.startswith("---"):
        # the values of front matter fields may be prose (a title, a summary); the keys are not
        text = _FRONT_MATTER.sub(lambda m: _FRONT_MATTER_KEY.sub("", m.group(1)), text, count=1)
    if "```" in text or "~~~" in text:
        text = _FENCED_CODE.sub("", text)
    if "    " in text or "\t" in text:
        text = _INDENTED_CODE.sub("", text)
    if "|" in text:
        text = _TABLE_ROW.sub("", text)
    if "]:" in text:
        text = _REFERENCE_DEF.sub("", text)
    if "<!--" in text:
        text = _HTML_COMMENT.sub(" ", text)
    if "`" in text:
        text = _INLINE_CODE.sub(" ", text)
    if "](" in text:
        text = _IMAGE_OR_LINK.sub(r"\1", text)
    if "][" in text:
        text = _REFERENCE_LINK.sub(r"\1", text)
    if "://" in text or "www." in text:
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
_WORD = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*")
# the same in one scan: a whitespace-delimited token that is a word between edge characters
_EDGES = "[" + re.escape(_TOKEN_EDGE) + "]*"
_WORD_TOKEN = re.compile(rf"(?<!\S){_EDGES}({_WORD.pattern}){_EDGES}(?!\S)")


def language_words(text: str) -> list[str]:
    """The words of `text` that can tell a language: letter-only tokens, markup trimmed."""
    return _WORD_TOKEN.findall(text)


# ---- detection -------------------------------------------------------------------------------

# The detector chooses among the supported languages and these others, the likeliest to be
# mistaken for one of them (pl, sl, hr next to cs and sk; bg, be next to ru and uk; a few large
# Latin-script ones) plus py3langid's "zxx" (no linguistic content). One of them winning means
# UNKNOWN. Measured against the full model (bench/EVAL.md): as safe on other languages, more
# often right on three-word English and Russian queries, and a smaller set is faster.
OTHER_LANGUAGES: tuple[str, ...] = ("pl", "sl", "hr", "bg", "be", "fr", "es", "it", "nl", "hu", "zxx")
# Below these a text says too little: "lvconvert --merge" keeps one word, "Ctrl+Shift+I" none.
MIN_WORDS = 2
MIN_LETTERS = 8
# The winner's probability among the candidate languages; below it the text is ambiguous
# (measured in bench/bench_langid.py, see bench/EVAL.md).
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
# query syntax words, not language: "backup OR restore"
_QUERY_OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})
_CYRILLIC = re.compile("[\u0400-\u052f]")

_identifier_lock = threading.Lock()
_identifier_instance: _Scorer | None = None


class _Scorer:
    """py3langid's naive Bayes classifier over the candidate languages, scored here from its
    model's tables: the same n-gram automaton and arithmetic, without its per-call overhead
    (half a call's time went to float16 conversions and softmax steps on 17 numbers; chunks are
    written by the thousand per second and each long one is classified twice)."""

    def __init__(self, identifier: LanguageIdentifier) -> None:
        import numpy as np
        from py3langid.langid import visit_counts

        self.identifier = identifier
        self.labels: list[str] = list(identifier.nb_classes)
        self.table = np.ascontiguousarray(identifier.nb_ptc, dtype=np.float32)  # features x languages
        self.prior = np.asarray(identifier.nb_pc, dtype=np.float32)
        self._walk = visit_counts
        self._next = identifier.tk_nextmove
        self._rows = [row << 8 for row in identifier.tk_row]
        self._output = identifier.tk_output
        self._np = np

    def probabilities(self, sample: str) -> dict[str, float]:
        """Each candidate language's probability for `sample` (py3langid's `rank`, normalised)."""
        np = self._np
        text = sample.lower() if sample.isupper() else sample
        data = unicodedata.normalize("NFC", text).encode("utf-8", errors="surrogatepass")
        visits = self._walk(self._next, self._rows, self._output, data)
        if not visits:  # no feature at all: every language equally likely
            return dict.fromkeys(self.labels, 1.0 / len(self.labels))
        features = np.fromiter(visits.keys(), dtype=np.intp, count=len(visits))
        counts = np.fromiter(visits.values(), dtype=np.float32, count=len(visits))
        scores: list[float] = (np.log1p(counts) @ self.table[features] + self.prior).tolist()
        scale = 1.0 / math.sqrt(len(data))  # py3langid's temperature: calibrated across lengths
        top = max(scores)
        exps = [math.exp((score - top) * scale) for score in scores]
        total = sum(exps)
        return {label: value / total for label, value in zip(self.labels, exps, strict=True)}


def _identifier() -> _Scorer:
    """py3langid's model, loaded once per process on first use (decompressing it takes ~0.5 s);
    classifying only reads the model, so every thread shares the one instance."""
    global _identifier_instance
    if _identifier_instance is None:
        with _identifier_lock:
            if _identifier_instance is None:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
                # a model without one of the others simply loses that guard, never the detector
                known = set(identifier.labels)
                identifier.set_languages([code for code in SUPPORTED_LANGUAGES + OTHER_LANGUAGES if code in known])
                _identifier_instance = _Scorer(identifier)
    return _identifier_instance


def preload() -> None:
    """Load the model now (a long-running server pays the ~0.5 s at start, not on a query)."""
    _identifier()


def _classify(sample: str, alphabet: set[str]) -> str:
    """The supported language `sample` is written in, or UNKNOWN; `alphabet`: the text's letters."""
    scores = _identifier().probabilities(sample)
    language = max(scores, key=scores.__getitem__)
    probability = scores[language]
    czech, slovak = bool(alphabet & _CZECH_ONLY), bool(alphabet & _SLOVAK_ONLY)
    if language == "cs" and slovak and not czech:
        language = "sk"
    elif language == "sk" and czech and not slovak:
        language = "cs"
    elif language == "sk" and not slovak and scores.get("cs", 0.0) >= CZECH_TIE * probability:
        # Czech and Slovak share most n-grams: without a letter only Slovak has, a near tie goes
        # to Czech (the language these notes are far more likely to be in)
        language, probability = "cs", probability + scores["cs"]
    if language not in SUPPORTED_LANGUAGES or probability < MIN_CONFIDENCE:
        return UNKNOWN
    return str(language)


def _leading(words: list[str]) -> list[str]:
    """The first words of `words` up to about WINDOW_CHARS."""
    size = 0
    for count, word in enumerate(words):
        if size >= WINDOW_CHARS:
            return words[:count]
        size += len(word) + 1
    return words


def _detect_words(head: list[str], tail: list[str]) -> str:
    """The language of a text's words: `head` from its start, `tail` (maybe empty) from its end.
    A text longer than two windows is read at its start and at its end, which must agree."""
    sample = " ".join(head + tail)
    letters = len(sample) - len(head) - len(tail) + 1
    if len(head) + len(tail) < MIN_WORDS or letters < MIN_LETTERS:
        return UNKNOWN
    cyrillic = len(_CYRILLIC.findall(sample))
    if MIXED_SCRIPT_SHARE <= cyrillic / letters <= 1 - MIXED_SCRIPT_SHARE:
        return UNKNOWN
    alphabet = set(sample)
    if len(sample) <= 2 * WINDOW_CHARS:
        return _classify(sample, alphabet)
    words = head + tail
    language = _classify(" ".join(_leading(words)), alphabet)
    if language == UNKNOWN:
        return UNKNOWN
    ending = " ".join(_leading(words[::-1])[::-1])
    return language if _classify(ending, alphabet) == language else UNKNOWN


def detect_language(text: str) -> str:
    """ISO 639-1 code of the plain text's language (one of SUPPORTED_LANGUAGES), or UNKNOWN when
    the text is too short, uncertain, mixed, language-less or in another language."""
    span = 2 * WINDOW_CHARS
    if len(text) <= 3 * span:
        return _detect_words(language_words(text), [])
    # a long text: only its start and its end are read; a word the cut went through is dropped
    return _detect_words(language_words(text[:span])[:-1], language_words(text[-span:])[1:])


def chunk_language(markdown_text: str) -> str:
    """The language of a chunk's prose: code, tables and links do not take part."""
    return detect_language(prose_for_language(markdown_text))


def detect_query_language(query: str) -> str:
    """The language of a search query, or UNKNOWN for identifiers, key combinations, commands
    and one-word queries (there a guess would be noise)."""
    words = [word for word in language_words(query) if word not in _QUERY_OPERATORS]
    return _detect_words(words, [])
