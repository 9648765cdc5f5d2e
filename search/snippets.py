"""Where in a hit the query matches, and the few lines that show it (pure functions).

A chunk's text is its file's lines `start_line`.. joined by "\\n" (the chunker drops front
matter, a BOM and CRLF's "\\r" but never reflows a line), so line i of the text is file line
`start_line + i`: split on "\\n" only, as the chunker joined them (`str.splitlines` would also
break at a lone "\\r" or a form feed inside a line and shift every number after it).

A line holds a query term under the index's own rules: the text folded as FTS5's unicode61
folds it (`search.exact.fold`), a prefix term (`backu*`) matching every word it starts, a
phrase (`db-01.lan`) its words in a row.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from search.exact import TOKEN, fold, tokens
from search.fusion import match_terms
from search.querybuild import keyword_query

Term = tuple[tuple[str, ...], bool]  # (folded words, last word is a prefix) as fusion.match_terms gives
Span = tuple[int, int]

SNIPPET_CHARS = 300
SNIPPET_LINES = 4
TEXT_CHARS = 1200
ELLIPSIS = "…"

# A word as unicode61 sees it before folding: combining marks belong to their letter (a
# decomposed "é" is one token), unlike in Python's \w.
_RAW_WORD = re.compile(r"(?:[^\W_]|[\u0300-\u036f])+")
_ATX_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
_SETEXT_UNDERLINE = re.compile(r" {0,3}(?:=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(?:`{3,}|~{3,})")
_WORD_CHAR = re.compile(r"[^\W_]")


@dataclass(frozen=True)
class Excerpt:
    """What a hit shows of its chunk."""

    match_line: int  # line of the file
    keyword: bool  # the match line holds a query term (else: the first content line)
    snippet: str  # a few lines around the match line, at most SNIPPET_CHARS unless one match is longer
    text: str  # at most TEXT_CHARS of the chunk, a window around the match line


def snippet_terms(query: str) -> list[Term]:
    """The terms the keyword half searches for (the index's prefix and stem rules), also when it
    did not run (mode vec)."""
    return match_terms(keyword_query(query))


def chunk_lines(text: str) -> list[str]:
    """The chunk's lines, one per file line (see the module docstring)."""
    return text.split("\n")


@functools.lru_cache(maxsize=1024)
def _tokens(line: str) -> tuple[tuple[str, int, int], ...]:
    """(folded token, start, end in `line`) per token, as the index tokenizes the line. Kept: an
    excerpt looks at its match line three times (its best line, the snippet, the highlights)."""
    if line.isascii():
        # nothing to decompose and no marks: each raw word is one token, folded by lowercasing
        # in place (the same offsets), so the whole line is tokenized in one pass
        return tuple((raw.group(), raw.start(), raw.end()) for raw in TOKEN.finditer(line.lower()))
    return tuple(
        (token, raw.start(), raw.end()) for raw in _RAW_WORD.finditer(line) for token in _word_tokens(raw.group())
    )


@functools.lru_cache(maxsize=1 << 16)
def _word_tokens(word: str) -> tuple[str, ...]:
    """The folded tokens of one raw word: kept, as the words of notes repeat from hit to hit and
    folding (NFKD, marks dropped) is most of tokenizing a line."""
    return tuple(tokens(word))


def term_spans(terms: Sequence[Term], line: str) -> list[list[Span]]:
    """Per term, the spans of `line` where it occurs (a phrase: from its first word to its last).

    A term whose first word is not even a substring of the folded line cannot occur in it (a
    token that equals or starts with the word holds it): most lines of a shown hit hold no
    term, and are passed over without being tokenized word by word."""
    return _line_spans(terms, line, fold(line))


def folded_lines(lines: Sequence[str]) -> list[str]:
    """Each line folded (`_fold`), the chunk folded at once: folding works character by
    character and never makes or removes a line break, so line i of the folded chunk is line i
    folded."""
    folded = fold("\n".join(lines)).split("\n")
    return folded if len(folded) == len(lines) else [fold(line) for line in lines]


def _lines_that_may_hold(terms: Sequence[Term], folded: Sequence[str]) -> list[int]:
    """The indexes, in order, of the folded lines holding some term's first word as a substring:
    the only lines that can hold a term (see `term_spans`). Found by searching the whole folded
    chunk for each word (a word holds no line break), not by testing line after line."""
    text = "\n".join(folded)
    starts = list(itertools.accumulate((len(line) + 1 for line in folded[:-1]), initial=0))
    found: set[int] = set()
    for word in {words[0] for words, _ in terms}:
        at = text.find(word)
        while at >= 0:
            line = bisect.bisect_right(starts, at) - 1
            found.add(line)
            at = text.find(word, starts[line + 1]) if line + 1 < len(starts) else -1
    return sorted(found)


def _line_spans(terms: Sequence[Term], line: str, folded: str) -> list[list[Span]]:
    """`term_spans` of `line`, whose folded text is `folded`."""
    possible = [words[0] in folded for words, _ in terms]
    if not any(possible):
        return [[] for _ in terms]
    tokens = _tokens(line)
    found: list[list[Span]] = []
    for (words, prefix), may_occur in zip(terms, possible, strict=True):
        spans: list[Span] = []
        if not may_occur:
            found.append(spans)
            continue
        last = len(words) - 1
        if last == 0:  # one word, as most terms are: no window to slide
            word = words[0]
            if prefix:
                spans = [(start, end) for token, start, end in tokens if token.startswith(word)]
            else:
                spans = [(start, end) for token, start, end in tokens if token == word]
            found.append(spans)
            continue
        for first in range(len(tokens) - last):
            if all(
                tokens[first + i][0] == word or (prefix and i == last and tokens[first + i][0].startswith(word))
                for i, word in enumerate(words)
            ):
                spans.append((tokens[first][1], tokens[first + last][2]))
        found.append(spans)
    return found


def holds_term(terms: Sequence[Term], text: str) -> bool:
    """Whether any line of `text` holds a query term."""
    return any(any(spans) for line in chunk_lines(text) for spans in term_spans(terms, line))


def is_heading(lines: Sequence[str], index: int) -> bool:
    line = lines[index]
    if _ATX_HEADING.match(line) or (index > 0 and lines[index - 1].strip() and _SETEXT_UNDERLINE.match(line)):
        return True
    return index + 1 < len(lines) and bool(line.strip()) and bool(_SETEXT_UNDERLINE.match(lines[index + 1]))


def _says_something(line: str) -> bool:
    """Worth a place in a snippet as context: words, and not a code fence (```` ```bash ````)."""
    return bool(_WORD_CHAR.search(line)) and not _FENCE.match(line)


def is_content(lines: Sequence[str], index: int) -> bool:
    """A line that says something: words, and neither a heading nor a code fence."""
    line = lines[index]
    return bool(_WORD_CHAR.search(line)) and not _FENCE.match(line) and not is_heading(lines, index)


def first_content_line(lines: Sequence[str], start: int = 0) -> int:
    """The first content line from `start` on, else the first non-blank one, else `start`
    (0 when it lies outside `lines`)."""
    start = start if 0 <= start < len(lines) else 0
    for index in range(start, len(lines)):
        if is_content(lines, index):
            return index
    return next((index for index in range(start, len(lines)) if lines[index].strip()), start)


def best_line(terms: Sequence[Term], lines: Sequence[str]) -> tuple[int, bool]:
    """(index of the line where the query matches best, whether it holds a term at all).

    A line scores the sum of its terms' weights, a term weighing the more the fewer lines of the
    chunk hold it (a word in every line of a section says little about which line answers).
    Ties go to a content line over a heading, then to the earlier line. No line with a term:
    the first content line."""
    folded = folded_lines(lines)
    per_line = {  # the lines that hold some term: which terms each holds
        index: [bool(spans) for spans in _line_spans(terms, lines[index], folded[index])]
        for index in _lines_that_may_hold(terms, folded)
    }
    holding = [sum(found[t] for found in per_line.values()) for t in range(len(terms))]
    weight = [math.log(1 + len(lines) / count) if count else 0.0 for count in holding]
    best: tuple[float, bool, int] | None = None
    for index, found in per_line.items():
        score = sum(w for w, hit in zip(weight, found, strict=True) if hit)
        if score <= 0:
            continue
        key = (score, is_content(lines, index), -index)
        if best is None or key > best:
            best = key
    if best is None:
        return first_content_line(lines), False
    return -best[2], True


def clip_line(line: str, spans: Sequence[Span], max_chars: int) -> str:
    """`line` cut to about `max_chars` around its first match (whole if it fits). The match itself
    is never cut, so a match longer than the budget comes out whole."""
    if len(line) <= max_chars:
        return line
    start, end = spans[0] if spans else (0, 0)
    room = max(0, max_chars - (end - start) - 2 * len(ELLIPSIS))
    left = max(0, start - room // 2)
    right = min(len(line), max(end, left + (end - start) + room))
    left = max(0, min(left, right - (end - start) - room))
    return (ELLIPSIS if left > 0 else "") + line[left:right] + (ELLIPSIS if right < len(line) else "")


def snippet(
    terms: Sequence[Term],
    lines: Sequence[str],
    index: int,
    *,
    max_chars: int = SNIPPET_CHARS,
    max_lines: int = SNIPPET_LINES,
) -> str:
    """The match line and the lines with words nearest it (one before, then mostly after: a
    heading or lead-in above, the rest of the answer below), in file order, within the budget."""
    spans = [span for found in term_spans(terms, lines[index]) for span in found] if lines else []
    spans.sort()
    picked = {index: clip_line(lines[index], spans, max_chars)} if lines else {}
    used = len(picked.get(index, ""))
    # looked at lazily: a snippet stops after a few lines
    before = (i for i in range(index - 1, -1, -1) if _says_something(lines[i]))
    after = (i for i in range(index + 1, len(lines)) if _says_something(lines[i]))
    for i in itertools.chain(itertools.islice(before, 1), after, before):
        if len(picked) >= max_lines:
            break
        room = max_chars - used - 1  # the line break before it
        if room < min(len(lines[i]), 20):
            break
        if len(lines[i]) <= room:
            text = lines[i]
        elif i < index:  # the end of a line above is what leads to the match
            text = ELLIPSIS + lines[i][len(lines[i]) - room + len(ELLIPSIS) :].lstrip()
        else:
            text = lines[i][: room - len(ELLIPSIS)].rstrip() + ELLIPSIS
        picked[i] = text
        used += len(text) + 1
    return "\n".join(picked[i] for i in sorted(picked))


def text_window(lines: Sequence[str], index: int, max_chars: int = TEXT_CHARS, focus: int = 0) -> str:
    """At most `max_chars` of the chunk with its match line in the middle: the head of the chunk
    when the match lies in it (as a head-of-chunk window always was), else from the start of a
    line so far before the match line that the window is centred on it. A match line longer than
    the window is cut around `focus`, the match's offset in it."""
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    line_start = sum(len(line) + 1 for line in lines[:index])
    line_end = line_start + len(lines[index]) if lines else 0
    if line_end - line_start > max_chars:
        start = max(line_start, min(line_start + focus - max_chars // 2, line_end - max_chars))
        return text[start : start + max_chars]
    slack = max(0, max_chars - (line_end - line_start))
    start = max(0, min(line_start - slack // 2, len(text) - max_chars))
    if start > 0 and text[start - 1] != "\n":  # begin with a whole line, at the latest the match line
        start = min(text.index("\n", start) + 1, line_start)
    return text[start : start + max_chars]


def excerpt(
    terms: Sequence[Term],
    text: str,
    start_line: int,
    *,
    snippet_chars: int = SNIPPET_CHARS,
    text_chars: int = TEXT_CHARS,
    meaning_line: int | None = None,
) -> Excerpt:
    """The match line (a file line), the snippet and the text window of one chunk.
    `meaning_line`: where the chunk's part nearest in meaning begins (a line of `text`, from 0),
    the match line when no line holds a query term."""
    lines = chunk_lines(text)
    index, keyword = best_line(terms, lines)
    if not keyword and meaning_line:
        index = first_content_line(lines, meaning_line)
    spans = highlights(terms, lines[index]) if keyword else []
    return Excerpt(
        match_line=start_line + index,
        keyword=keyword,
        snippet=snippet(terms, lines, index, max_chars=snippet_chars),
        text=text_window(lines, index, text_chars, focus=spans[0][0] if spans else 0),
    )


def highlights(terms: Sequence[Term], line: str) -> list[Span]:
    """The non-overlapping spans of `line` that hold a query term, in order (for bold)."""
    spans = sorted(span for found in term_spans(terms, line) for span in found)
    merged: list[Span] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def marked(terms: Sequence[Term], line: str) -> list[tuple[str, bool]]:
    """`line` as (part, holds a query term) pieces, for highlighting."""
    parts: list[tuple[str, bool]] = []
    at = 0
    for start, end in highlights(terms, line):
        if start > at:
            parts.append((line[at:start], False))
        parts.append((line[start:end], True))
        at = end
    if at < len(line) or not parts:
        parts.append((line[at:], False))
    return parts


def snippet_in_bytes(terms: Sequence[Term], text: str, start_line: int, match_line: int, max_bytes: int) -> str:
    """The snippet of a chunk's match line at most `max_bytes` long in UTF-8 (what an agent pays
    for: a Cyrillic line costs twice the bytes of a Latin one), the widest that fits."""
    lines, index = _match_index(text, start_line, match_line)
    shortest = snippet(terms, lines, index, max_chars=1)
    return _widest_in_bytes(lambda chars: snippet(terms, lines, index, max_chars=chars), max_bytes, shortest)


def text_in_bytes(text: str, start_line: int, match_line: int, max_bytes: int) -> str:
    """`text_window` of a chunk's match line at most `max_bytes` long in UTF-8, the widest that
    fits (an agent pays per byte, and a Cyrillic line costs twice a Latin one)."""
    lines, index = _match_index(text, start_line, match_line)
    return _widest_in_bytes(lambda chars: text_window(lines, index, chars), max_bytes, "")


def _match_index(text: str, start_line: int, match_line: int) -> tuple[list[str], int]:
    """The chunk's lines and the index of its match line among them."""
    lines = chunk_lines(text)
    return lines, min(max(match_line - start_line, 0), len(lines) - 1)


def _widest_in_bytes(render: Callable[[int], str], max_bytes: int, fallback: str) -> str:
    """The longest `render(max_chars)` that fits `max_bytes` in UTF-8 (`fallback` when none does),
    by bisection: a character is at least one byte, so max_bytes characters is the most that can fit."""
    low, high = 1, max_bytes
    best = fallback
    while low <= high:
        middle = (low + high) // 2
        candidate = render(middle)
        if len(candidate.encode("utf-8")) <= max_bytes:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best
