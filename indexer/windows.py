"""A chunk's embedded text cut into windows the embedding model reads whole.

A chunk is the lexical unit (its words are searched together), sized by characters; the model
reads a fixed number of its own tokens (multilingual-e5-small: 512) and an HTTP server drops
the rest. Czech and Russian prose and code run at 2.5-3 characters per token, so about half of
real notes' chunks are longer than that. Each window is the chunk's breadcrumb followed by a
run of whole lines (a line longer than a window is cut between words), counted in the
embedder's tokens with its passage prefix; consecutive windows repeat the last lines (up to
WINDOW_OVERLAP tokens, or one paragraph of up to a quarter window), so text at a window's edge
is read with its context in the next. A chunk gets as few windows as fit, as even as they go:
each keeps its own vector and a search ranks the chunk by its nearest one, so a scrap of a tail
read alone would be near every question about its few words.

Token counts come from the embedder (`Embedder.token_count`): exact for the local engine and
for a server whose model uses the same XLM-R vocabulary, a conservative estimate
(`estimate_tokens`) for any other server, whose tokenizer is not at hand.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache

# how chunks are cut into windows and what is stored of them (2: a vector per window, the
# nearest counts; 3: no window of repeated lines alone, where each window begins is stored):
# part of the index identity (a change re-embeds every chunk)
WINDOWS_VERSION = "3"
# tokens of whole lines a window repeats from the one before: about one line of prose
WINDOW_OVERLAP = 48
# the breadcrumb is dropped from the windows of a chunk when it would take more than this
# share of a window (a tiny declared window): the text is what must reach the vector
MAX_BREADCRUMB_SHARE = 0.5

TokenCount = Callable[[str], int]

# How `estimate_tokens` counts: part of an HTTP embedder's index identity, as another estimate
# cuts other windows (1: per-character rates fitted on multilingual-e5-small; 2: an upper bound
# for dense text and for models with an English vocabulary; 3: a word-start marker before a
# word of a script without Latin, Greek or Cyrillic pieces)
ESTIMATE_VERSION = "3"

# The estimate is for a tokenizer we cannot run, so it is an upper bound in practice over the
# kinds a server uses: XLM-R's SentencePiece (multilingual-e5, bge-m3), the English uncased
# WordPiece of mxbai-embed-large, all-minilm, nomic-embed-text v1, bge-*-en and gte-*, and a
# byte-level BPE (OpenAI) on Latin and Cyrillic text. An English WordPiece vocabulary splits a
# Cyrillic or Greek word into single letters (each piece is at least one character, an unknown
# word one [UNK]), so any letter outside ASCII Latin counts one token; a dense ASCII run (base64,
# hex, a key, a random identifier) splits at every change of case or between letters and digits,
# so it counts by those segments, each a token at least. English prose stays near the first
# estimate's windows. Measured against the real tokenizers in tests/test_windows_estimate.py.
R_WORD = 0.4  # per letter of a pronounceable lowercase or Capitalised segment (prose: 0.26-0.28 real)
R_CAPS = 0.55  # per letter of an all-caps segment: cased vocabularies hold fewer capitalised pieces
R_DENSE = 0.85  # per character of a run mixing letters and digits, or of letters without vowels
R_DIGIT = 0.65  # per digit of a number: vocabularies hold few numbers whole
R_ACCENT = 0.6  # more per accented Latin letter: its accent is often a token of its own
# the model's start and end tokens, and SentencePiece's word-start marker before the text, a
# token of its own before a letter it holds no piece with
ESTIMATE_OVERHEAD = 3


def _is_accented(ch: str) -> bool:
    base = unicodedata.normalize("NFD", ch)[0]
    return ch != base and base.isascii() and base.isalpha()


@cache
def _pieces() -> re.Pattern[str]:
    """Runs of ASCII letters and digits, whitespace that costs a token, any other character.
    Latin letters with diacritics (č, ř, ü, ồ) join a run as their ASCII letter and an accent,
    so a Czech word stays one run. Built on first use (~2 ms): only where a server's windows
    are counted, a config's passage prefix among them."""
    accented = "".join(ch for ch in map(chr, range(0xC0, 0x2000)) if ch.isalpha() and _is_accented(ch))
    return re.compile(rf"(?P<run>[A-Za-z0-9{accented}]+)|(?P<space>\n\s*|[ \t]{{2,}})|(?P<char>\S)")


_SEGMENTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_VOWELS = frozenset("aeiouyAEIOUY")
_CONSONANT_RUN = re.compile(r"[^aeiouyAEIOUY]{5,}")
_SYMBOL_AT_WORD_START = re.compile(r"(?:^|\s)([^\x00-\x7f])", re.MULTILINE)
_CACHED_RUN_CHARS = 32  # words repeat: the cost of a short run is kept, a long blob's is not


def _run_tokens(run: str) -> float:
    """Tokens of a run of ASCII letters, digits and accented Latin letters (one word's)."""
    accents = 0
    if not run.isascii():
        accents = sum(not ch.isascii() for ch in run)
        run = "".join(ch for ch in unicodedata.normalize("NFD", run) if not unicodedata.combining(ch))
    segments = _SEGMENTS.findall(run)
    has_digits = any(segment[0].isdigit() for segment in segments)
    # letters mixed with digits are a hash or a key; letters mostly accented are no prose either
    dense = (has_digits and any(segment[0].isalpha() for segment in segments)) or accents * 3 > len(run)
    tokens = accents * R_ACCENT
    for segment in segments:
        if dense or not (segment[0].isdigit() or _pronounceable(segment)):
            rate = R_DENSE
        elif segment[0].isdigit():
            rate = R_DIGIT
        elif len(segment) > 1 and segment.isupper():
            rate = R_CAPS
        else:
            rate = R_WORD
        tokens += max(1.0, len(segment) * rate)
    return tokens


def _pronounceable(letters: str) -> bool:
    return any(ch in _VOWELS for ch in letters) and not _CONSONANT_RUN.search(letters)


_cached_run_tokens = lru_cache(maxsize=1 << 15)(_run_tokens)


@cache
def _char_tokens(ch: str) -> int:
    """Tokens of one character outside a run: one, or as many as it expands to (a ligature or
    ǅ under NFKC, a Hangul syllable into its letters under an uncased WordPiece's NFD)."""
    decomposed = [part for part in unicodedata.normalize("NFD", ch) if not unicodedata.combining(part)]
    return max(1, len(unicodedata.normalize("NFKC", ch)), len(decomposed))


@cache
def _word_start_tokens(ch: str) -> int:
    """A word that starts with a symbol (an emoji, ├, ∑) or a letter of a script without
    Latin, Greek or Cyrillic pieces (a CJK word in a line of tags) may take the word-start
    marker of a SentencePiece vocabulary as a token of its own."""
    if unicodedata.category(ch)[0] in "SC":
        return 1
    return 0 if unicodedata.name(ch, "").startswith(("LATIN", "CYRILLIC", "GREEK")) else 1


def estimate_tokens(text: str) -> int:
    """A conservative token count of `text` for a tokenizer we cannot run (an HTTP server's)."""
    total = 0.0
    for match in _pieces().finditer(text):
        kind = match.lastgroup
        if kind == "run":
            run = match.group()
            total += _cached_run_tokens(run) if len(run) <= _CACHED_RUN_CHARS else _run_tokens(run)
        elif kind == "space":
            total += 1  # a line break with its indentation, or a run of spaces: byte-level BPEs keep them
        else:
            total += _char_tokens(match.group())
    total += sum(_word_start_tokens(ch) for ch in _SYMBOL_AT_WORD_START.findall(text))
    return ESTIMATE_OVERHEAD + math.ceil(total)


@dataclass(frozen=True)
class _Unit:
    """A piece a window is built of: whole lines (or part of one too long for any window)."""

    text: str
    tokens: int  # counted alone, without the prefix and the model's own tokens
    line: int  # the line of the chunk's text it is (part of), from 0


def windows(breadcrumb: str, text: str, count: TokenCount, max_tokens: int) -> list[str]:
    """The embed texts of one chunk: `[breadcrumb + text]` when the model reads it whole, else
    overlapping windows that together hold every line of `text`, each within `max_tokens`
    (`count` counts a passage as the model feeds it: prefix and special tokens included)."""
    return windows_and_lines(breadcrumb, text, count, max_tokens)[0]


def window_lines(breadcrumb: str, text: str, count: TokenCount, max_tokens: int) -> list[int]:
    """Per window of `windows(...)`, the line of `text` (from 0) where its own text begins, past
    the lines it repeats from the window before: what made it nearer to a question than that
    one, so where a hit found by it points."""
    return windows_and_lines(breadcrumb, text, count, max_tokens)[1]


def windows_and_lines(breadcrumb: str, text: str, count: TokenCount, max_tokens: int) -> tuple[list[str], list[int]]:
    """`windows(...)` and `window_lines(...)` from one cut."""
    cut = _cut(breadcrumb, text, count, max_tokens)
    if cut is None:
        return [f"{breadcrumb}\n\n{text}"], [0]
    head, units, spans = cut
    pieces = [head + "\n".join(unit.text for unit in units[a:b]) for a, b in spans]
    return pieces, [0] + [units[end].line for _, end in spans[:-1]]


def _cut(
    breadcrumb: str, text: str, count: TokenCount, max_tokens: int
) -> tuple[str, list[_Unit], list[tuple[int, int]]] | None:
    """None when the model reads the chunk whole, else the windows' head (the breadcrumb, or
    nothing when it would crowd the text out), the units and each window's span of them."""
    if count(f"{breadcrumb}\n\n{text}") <= max_tokens:
        return None
    # a line counted alone pays the prefix and special tokens, and joined to others one token
    # for its line break
    overhead = count("") - 1
    head = f"{breadcrumb}\n\n"
    if count(head) > max_tokens * MAX_BREADCRUMB_SHARE:
        head = ""
    budget = max(max_tokens - count(head), 1)
    units = _units(text, count, overhead, budget)
    spans = _pack(units, budget)
    if len(spans) > 1:
        # as many windows, as even as they go: the smallest budget that needs no more of them.
        # A short tail read alone (a line or two of a long page) is near every question about
        # its few generic words, and a search ranks the chunk by its nearest window.
        low, high = 1, budget
        while low < high:
            middle = (low + high) // 2
            if len(_pack(units, middle)) <= len(spans):
                high = middle
            else:
                low = middle + 1
        even = _pack(units, low)
        if len(even) <= len(spans):
            spans = even
    return head, units, spans


def _pack(units: list[_Unit], budget: int) -> list[tuple[int, int]]:
    """Windows as (first, past-last) unit spans: whole units up to `budget` tokens each (a unit
    alone may fill one), each after the first repeating the last lines of the one before."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units) and (end == start or used + units[end].tokens <= budget):
            used += units[end].tokens
            end += 1
        spans.append((start, end))
        if end == len(units):
            break
        # the next window starts with the last whole lines of this one: up to WINDOW_OVERLAP
        # tokens of them, or the last line alone when it is a paragraph of up to a quarter window,
        # and never so many that its first new line would not fit (a window of repeated lines
        # alone adds nothing, and a scrap is near every question about its few words)
        following, repeated = end, 0
        while (
            following - 1 > start
            and (
                repeated + units[following - 1].tokens <= WINDOW_OVERLAP
                or (following == end and units[following - 1].tokens <= budget // 4)
            )
            and repeated + units[following - 1].tokens + units[end].tokens <= budget
        ):
            following -= 1
            repeated += units[following].tokens
        start = following
    return spans


def _units(text: str, count: TokenCount, overhead: int, budget: int) -> list[_Unit]:
    """Lines with their token counts; a line over `budget` is cut between words (or anywhere,
    if it has no spaces) into pieces that fit. A line's count alone is at least its share of
    the whole text's, so packing by these counts never overfills a window."""
    units: list[_Unit] = []
    for number, line in enumerate(text.split("\n")):
        tokens = max(count(line) - overhead, 0)
        if tokens <= budget:
            units.append(_Unit(line, tokens, number))
        else:
            units.extend(_cut_line(line, number, tokens, count, overhead, budget))
    return units


def _cut_line(line: str, number: int, tokens: int, count: TokenCount, overhead: int, budget: int) -> list[_Unit]:
    # characters per piece from this line's own characters per token, shrunk until the piece's
    # exact count fits
    size = max(int(len(line) * budget / max(tokens, 1) * 0.9), 1)
    pieces: list[_Unit] = []
    rest = line
    while rest:
        width = size
        while True:
            piece = rest[:width]
            if width < len(rest):
                space = piece.rfind(" ")
                if space > width // 2:
                    piece = piece[: space + 1]
            piece_tokens = max(count(piece) - overhead, 0)
            if piece_tokens <= budget or len(piece) == 1:
                break
            width = max(len(piece) * 3 // 4, 1)
        pieces.append(_Unit(piece, piece_tokens, number))
        rest = rest[len(piece) :]
    return pieces
