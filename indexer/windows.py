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

Token counts come from the embedder (`Embedder.token_count`): exact for the local engine, a
conservative per-script estimate (`estimate_tokens`) for HTTP servers, whose tokenizers are
not at hand.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

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

# Tokens per character by kind of character, fitted on multilingual-e5-small's tokenizer over
# the public corpora (Czech, Russian and English notes, tldr pages; 2,168 chunks): a text's
# tokens are about the sum over its characters. ESTIMATE_MARGIN covers the worst chunk seen
# (1.33 times the fit), so an estimated window is not longer than the model reads.
_RATES = {
    "space": 0.022,
    "ascii_letter": 0.294,
    "other_latin": 0.435,
    "cyrillic": 0.268,
    "digit": 0.574,
    "punct": 0.877,
    "other": 1.0,  # CJK, emoji, other scripts: a token each, at most
}
ESTIMATE_MARGIN = 1.35
ESTIMATE_OVERHEAD = 2  # the model's start and end tokens


@cache
def _char_rate(ch: str) -> float:
    if ch.isspace():
        return _RATES["space"]
    if ch.isascii():
        if ch.isalpha():
            return _RATES["ascii_letter"]
        return _RATES["digit"] if ch.isdigit() else _RATES["punct"]
    if ch.isalpha():
        name = unicodedata.name(ch, "")
        if name.startswith("LATIN"):
            return _RATES["other_latin"]
        if name.startswith("CYRILLIC"):
            return _RATES["cyrillic"]
        return _RATES["other"]
    if ch.isdigit():
        return _RATES["digit"]
    return _RATES["punct"] if unicodedata.category(ch)[0] in "PS" else _RATES["other"]


def estimate_tokens(text: str) -> int:
    """A conservative token count of `text` for a tokenizer we cannot run (an HTTP server's)."""
    return ESTIMATE_OVERHEAD + int(ESTIMATE_MARGIN * sum(_char_rate(ch) for ch in text)) + 1


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
