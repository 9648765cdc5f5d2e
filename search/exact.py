"""Exact beats prefix (pure functions): a chunk holding a query term as typed ranks above the
chunks that hold only a longer word starting with it (`token5` above `token50`, `PROJ-123`
above `PROJ-1231`).

The lexical expression widens every term to a prefix (and trims inflected words to a stem), so
BM25 scores `token50` exactly like `token5` and then favours the shorter note. The rule here
reorders only the chunks a widened term matched: they keep the places they hold in the ranking
between themselves, the ones with more exact terms take the first of those places, and every
other chunk (one found by other words or by meaning alone) stays where it was.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from search.querybuild import QueryTerm

_TOKEN = re.compile(r"[^\W_]+")
_MARKS = re.compile(r"[\u0300-\u036f]")
_PHRASE = re.compile(r'"((?:[^"]|"")*)"(\*?)')


def tokens(text: str) -> list[str]:
    """The words FTS5's unicode61 tokenizer (remove_diacritics 2) indexes: lowercase, no accents."""
    return _TOKEN.findall(_MARKS.sub("", unicodedata.normalize("NFKD", text.casefold())))


@dataclass(frozen=True)
class ExactRule:
    """One widened identifier term: what the index matched (`widened`, its last word as a
    prefix) and the word as typed (`exact`)."""

    widened: tuple[str, ...]
    exact: tuple[str, ...]


def _words(phrase: str) -> tuple[str, ...]:
    match = _PHRASE.fullmatch(phrase)
    body = match.group(1).replace('""', '"') if match else phrase
    return tuple(tokens(body))


def exact_rules(terms: Sequence[QueryTerm]) -> list[ExactRule]:
    """The identifier terms that the expression widens. Words of a language keep their stems:
    exact-first on `backups` would rank a note saying `backups` above a better one saying
    `backup` (measured on the public sets, bench/EVAL.md)."""
    rules = []
    for term in terms:
        if term.exact is None or not term.is_identifier:
            continue
        widened, exact = _words(term.match), _words(term.exact)
        if widened and exact:
            rules.append(ExactRule(widened, exact))
    return rules


def _holds(words: list[str], vocabulary: frozenset[str], phrase: tuple[str, ...], prefix: bool) -> bool:
    """Whether `words` holds `phrase` as consecutive words, its last one as a prefix if asked."""
    head, last = phrase[:-1], phrase[-1]
    if not head and not prefix:
        return last in vocabulary
    if any(w not in vocabulary for w in head):
        return False
    n = len(phrase)
    for i in range(len(words) - n + 1):
        if tuple(words[i : i + n - 1]) == head and (
            words[i + n - 1].startswith(last) if prefix else words[i + n - 1] == last
        ):
            return True
    return False


def exact_counts(rules: Sequence[ExactRule], text: str) -> tuple[bool, int]:
    """(whether a widened term matches `text`, how many terms it holds exactly)."""
    words = tokens(text)
    vocabulary = frozenset(words)
    related = False
    exact = 0
    for rule in rules:
        if _holds(words, vocabulary, rule.exact, prefix=False):
            related = True
            exact += 1
        elif _holds(words, vocabulary, rule.widened, prefix=True):
            related = True
    return related, exact


def exact_first(ids: Sequence[int], texts: Mapping[int, str], rules: Sequence[ExactRule]) -> list[int]:
    """`ids` with the chunks a widened term matched reordered among their own places: more exact
    terms first, the given order within equals. An id without text keeps its place."""
    if not rules:
        return list(ids)
    slots: list[int] = []
    related: list[tuple[int, int, int]] = []  # (-exact terms, position, id)
    for position, chunk_id in enumerate(ids):
        text = texts.get(chunk_id)
        if text is None:
            continue
        matched, exact = exact_counts(rules, text)
        if matched:
            slots.append(position)
            related.append((-exact, position, chunk_id))
    out = list(ids)
    for slot, (_, _, chunk_id) in zip(slots, sorted(related), strict=True):
        out[slot] = chunk_id
    return out
