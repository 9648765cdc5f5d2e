"""Which natural language a chunk or a query is written in (pure: no I/O besides the model file).

Code, tables, URLs and markup say nothing about the language of the prose around them (a Czech
note full of `tar czf` lines is still Czech), so `prose_for_language` keeps only the prose and
the detectors see words made of letters alone. Anything too short, too uncertain, written in
two scripts or in a language outside SUPPORTED_LANGUAGES is UNKNOWN: a wrong guess would bend
the language-dependent parts of search, an honest "unknown" leaves them as they are.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from py3langid.langid import LanguageIdentifier

UNKNOWN = "unknown"
# ISO 639-1 codes the detector is trusted with (measured in bench/bench_langid.py); any other
# language it recognises is reported as UNKNOWN, never as the nearest supported one.
SUPPORTED_LANGUAGES: tuple[str, ...] = ("cs", "en", "ru", "sk", "de", "uk")

# ---- prose extraction ------------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INDENTED = re.compile(r"^(?: {4}|\t)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$|^\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?\s*$")
_PIPE_ROW = re.compile(r"\S\s*\|\s*\S.*\|")  # a row without outer pipes: "a | b | c"
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*\S+")
_FRONT_MATTER_KEY = re.compile(r"^\s*[\w-]+\s*:\s?")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_REFERENCE_LINK = re.compile(r"\[([^\]]*)\]\[[^\]]*\]")
_AUTOLINK = re.compile(r"<(?:[a-z][a-z0-9+.-]*:|www\.)[^>\s]*>", re.I)
_URL = re.compile(r"\b(?:[a-z][a-z0-9+.-]*://|www\.)\S+", re.I)
_HTML_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_EMAIL = re.compile(r"\S+@\S+\.\w+")


def prose_for_language(markdown_text: str) -> str:
    """The prose of a markdown chunk: no fenced or indented code, tables, front matter keys,
    reference definitions, HTML, inline code, URLs or link targets (link texts stay)."""
    lines = markdown_text.split("\n")
    kept: list[str] = []
    fence: str | None = None
    in_front_matter = bool(lines) and lines[0].strip() == "---"
    previous_blank = True
    previous_code = False
    for number, line in enumerate(lines):
        if in_front_matter:
            if number > 0 and line.strip() in ("---", "..."):
                in_front_matter = False
            elif number > 0:
                kept.append(_FRONT_MATTER_KEY.sub("", line, count=1))
            continue
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence) and stripped.strip(fence[0]) == "":
                fence = None
            continue
        opened = _FENCE_OPEN.match(line)
        if opened:
            marker = opened.group(1)
            fence = marker[0] * len(marker)
            continue
        blank = not line.strip()
        # an indented line after a blank (or after more code) is code, unless it is a list item
        if not blank and _INDENTED.match(line) and (previous_blank or previous_code) and not _LIST_ITEM.match(line):
            previous_code, previous_blank = True, False
            continue
        previous_code = previous_code and blank
        previous_blank = blank
        if _TABLE_ROW.match(line) or _PIPE_ROW.search(line) or _REFERENCE_DEF.match(line):
            continue
        kept.append(line)
    text = "\n".join(kept)
    text = _HTML_COMMENT.sub(" ", text)
    text = _INLINE_CODE.sub(" ", text)
    text = _IMAGE_OR_LINK.sub(r"\1", text)
    text = _REFERENCE_LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(" ", text)
    text = _URL.sub(" ", text)
    text = _EMAIL.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    return text


# ---- words -----------------------------------------------------------------------------------

# A word: letters only, optionally joined by an apostrophe or a hyphen ("don't", "česko-slovenský").
# Identifiers with digits, underscores, slashes or dots ("PROJ-123", "51820/udp", "foo_bar",
# "--merge", "Ctrl+Shift+I") carry no language and are dropped whole.
_TOKEN_EDGE = "\"'()[]{}«»„“”‚‘’.,;:!?…*_~#>"
_WORD = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*")


def language_words(text: str) -> list[str]:
    """The words of `text` that can tell a language: letter-only tokens, markup trimmed."""
    words: list[str] = []
    for token in text.split():
        core = token.strip(_TOKEN_EDGE)
        if core and _WORD.fullmatch(core):
            words.append(core)
    return words


# ---- detection -------------------------------------------------------------------------------

# Below these a text says too little: "lvconvert --merge" keeps one word, "Ctrl+Shift+I" none.
MIN_WORDS = 2
MIN_LETTERS = 8
# Share of the supported languages' probability the winner needs; below it the text is mixed
# or ambiguous (measured in bench/bench_langid.py: see bench/EVAL.md).
MIN_CONFIDENCE = 0.6
# A language outside SUPPORTED_LANGUAGES this likely wins over any supported one.
OTHER_LANGUAGE_WINS = 0.5
# Both scripts at least this share of the letters: mixed text (a Russian note quoting English
# sentences, or the reverse), whatever the detector would say.
MIXED_SCRIPT_SHARE = 0.25
# The detector reads a window of about this many characters from the start of a long text and
# one from its end (its cost grows with the length; two windows that disagree mean mixed text).
WINDOW_CHARS = 160

_CZECH_ONLY = frozenset("řůěŘŮĚ")
_SLOVAK_ONLY = frozenset("ľĺŕôäĽĹŔÔÄ")
# query syntax words, not language: "backup OR restore"
_QUERY_OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})

_identifier_lock = threading.Lock()
_identifier_instance: LanguageIdentifier | None = None


def _identifier() -> LanguageIdentifier:
    """py3langid's model, loaded once per process on first use (decompressing it takes ~0.5 s);
    its classification only reads the model, so threads share the one instance."""
    global _identifier_instance
    if _identifier_instance is None:
        with _identifier_lock:
            if _identifier_instance is None:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                _identifier_instance = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _identifier_instance


_CYRILLIC = re.compile("[\u0400-\u052f]")


def _window(words: list[str]) -> str:
    """Leading words of `words` up to about WINDOW_CHARS."""
    out: list[str] = []
    size = 0
    for word in words:
        if size >= WINDOW_CHARS:
            break
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def _classify(sample: str) -> str:
    """The supported language `sample` is written in, or UNKNOWN."""
    ranked = _identifier().rank(sample)
    top_language, top_probability = ranked[0]
    if top_language not in SUPPORTED_LANGUAGES and top_probability >= OTHER_LANGUAGE_WINS:
        return UNKNOWN
    supported = [(language, p) for language, p in ranked if language in SUPPORTED_LANGUAGES]
    mass = sum(p for _, p in supported)
    best, probability = supported[0]
    if mass <= 0 or probability / mass < MIN_CONFIDENCE:
        return UNKNOWN
    return str(best)


def _czech_or_slovak(language: str, text: str) -> str:
    """ř, ů and ě are Czech only; ľ, ĺ, ŕ, ô and ä Slovak only: cheaper and surer than n-grams."""
    if language not in ("cs", "sk"):
        return language
    letters = set(text)
    czech, slovak = bool(letters & _CZECH_ONLY), bool(letters & _SLOVAK_ONLY)
    if czech and not slovak:
        return "cs"
    if slovak and not czech:
        return "sk"
    return language


def _detect_words(words: list[str], tail_words: list[str] | None = None) -> str:
    """The language of `words`; with `tail_words` (the end of a long text) both must agree."""
    sample = " ".join(words if tail_words is None else words + tail_words)
    if len(words) + len(tail_words or ()) < MIN_WORDS or len(sample) - sample.count(" ") < MIN_LETTERS:
        return UNKNOWN
    letters = len(sample) - sample.count(" ")
    cyrillic = len(_CYRILLIC.findall(sample))
    if MIXED_SCRIPT_SHARE <= cyrillic / letters <= 1 - MIXED_SCRIPT_SHARE:
        return UNKNOWN
    head = _window(words)
    language = _czech_or_slovak(_classify(head), sample)
    if language == UNKNOWN:
        return UNKNOWN
    if tail_words is None and len(head) < len(sample):
        tail_words = words[len(head.split()):]
    if tail_words:
        # a long text: its end must be in the same language, or it is mixed
        tail = " ".join(tail_words[-len(_window(tail_words[::-1]).split()):])
        if _czech_or_slovak(_classify(tail), sample) != language:
            return UNKNOWN
    return language


def detect_language(text: str) -> str:
    """ISO 639-1 code of the plain text's language (one of SUPPORTED_LANGUAGES), or UNKNOWN when
    the text is too short, uncertain, mixed, language-less or in another language."""
    span = 2 * WINDOW_CHARS
    if len(text) <= 3 * span:
        return _detect_words(language_words(text))
    # a long text: only its start and its end are read (the cost grows with the length); a word
    # the cut went through is dropped
    return _detect_words(language_words(text[:span])[:-1], language_words(text[-span:])[1:])


def chunk_language(markdown_text: str) -> str:
    """The language of a chunk's prose: code, tables and links do not take part."""
    return detect_language(prose_for_language(markdown_text))


def detect_query_language(query: str) -> str:
    """The language of a search query, or UNKNOWN for identifiers, key combinations, commands
    and one-word queries (there a guess would be noise)."""
    words = [word for word in language_words(query) if word not in _QUERY_OPERATORS]
    return _detect_words(words)
