"""Exact beats prefix (pure functions): a chunk holding a query term as typed ranks above the
chunks that hold only a longer word starting with it (`token5` above `token50`, `PROJ-123`
above `PROJ-1231`); a chunk holding a code-like query as typed ranks first (`verbatim_holders`).

The lexical expression widens every term to a prefix (and trims inflected words to a stem), so
BM25 scores `token50` exactly like `token5` and then favours the shorter note. The rule here
reorders only the chunks a widened term matched: they keep the places they hold in the ranking
between themselves, the ones with more exact terms take the first of those places, and every
other chunk (one found by other words or by meaning alone) stays where it was.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from indexer.keywords import Phrase
from search.querybuild import QueryTerm

# a token as unicode61 splits text: a run of letters and digits
TOKEN = re.compile(r"[^\W_]+")
_MARKS = re.compile(r"[\u0300-\u036f]")


def tokens(text: str) -> list[str]:
    """The words FTS5's unicode61 tokenizer (remove_diacritics 2) indexes: lowercase, no accents."""
    return TOKEN.findall(fold(text))


@dataclass(frozen=True)
class ExactRule:
    """One widened identifier term: what the index matched (`widened`, its last word as a
    prefix) and the word as typed (`exact`)."""

    widened: tuple[str, ...]
    exact: tuple[str, ...]


def _words(phrase: Phrase) -> tuple[str, ...]:
    return tuple(tokens(" ".join(phrase.words)))


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


@functools.lru_cache(maxsize=256)
def _pattern(phrase: tuple[str, ...], prefix: bool) -> re.Pattern[str]:
    """`phrase` as consecutive words of folded text (what FTS5 compares), its last word as a
    prefix if asked; matched where its first word starts a token (see `_holds`)."""
    body = r"[\W_]+".join(re.escape(word) for word in phrase)
    return re.compile(body + ("" if prefix else r"(?![^\W_])"))


def _holds(folded: str, phrase: tuple[str, ...], prefix: bool) -> bool:
    """Whether `folded` holds `phrase` (see `_pattern`). The first word is found by str.find and
    the pattern tried only there: a regex scan with a look-behind costs ~10x more."""
    pattern = _pattern(phrase, prefix)
    first = phrase[0]
    at = folded.find(first)
    while at >= 0:
        if (at == 0 or not TOKEN.match(folded, at - 1)) and pattern.match(folded, at):
            return True
        at = folded.find(first, at + 1)
    return False


def fold(text: str) -> str:
    """Lowercase, accents removed: the form FTS5's unicode61 tokenizer (remove_diacritics 2) compares.
    ASCII text has nothing to decompose: lowercasing it is the same and ~10x cheaper (a chunk's
    text is folded for every code-like or identifier query it is a candidate of)."""
    if text.isascii():
        return text.lower()
    return _MARKS.sub("", unicodedata.normalize("NFKD", text.casefold()))


def exact_counts(rules: Sequence[ExactRule], text: str) -> tuple[bool, int]:
    """(whether a widened term matches `text`, how many terms it holds exactly)."""
    folded = fold(text)
    related = False
    exact = 0
    for rule in rules:
        if rule.widened[0] not in folded:  # a plain substring test first: most chunks fail it
            continue
        if _holds(folded, rule.exact, prefix=False):
            related = True
            exact += 1
        elif _holds(folded, rule.widened, prefix=True):
            related = True
    return related, exact


def exact_first(
    ids: Sequence[int],
    texts: Mapping[int, str],
    rules: Sequence[ExactRule],
    seen: dict[int, tuple[bool, int]] | None = None,
) -> list[int]:
    """`ids` with the chunks a widened term matched reordered among their own places: more exact
    terms first, the given order within equals. An id without text keeps its place. `seen`
    keeps each chunk's counts for the next call of the same query."""
    if not rules:
        return list(ids)
    seen = {} if seen is None else seen
    slots: list[int] = []
    related: list[tuple[int, int, int]] = []  # (-exact terms, position, id)
    for position, chunk_id in enumerate(ids):
        text = texts.get(chunk_id)
        if text is None:
            continue
        if chunk_id not in seen:
            seen[chunk_id] = exact_counts(rules, text)
        matched, exact = seen[chunk_id]
        if matched:
            slots.append(position)
            related.append((-exact, position, chunk_id))
    out = list(ids)
    for slot, (_, _, chunk_id) in zip(slots, sorted(related), strict=True):
        out[slot] = chunk_id
    return out


def verbatim_holders(ids: Sequence[int], texts: Mapping[int, str], query: str) -> list[int]:
    """The chunks of `ids` (in their order) that hold the whole query as typed: its words
    consecutive, as the index folds them. For a code-like query (`journalctl
    --vacuum-size=50M`, `pytest -Werror --pdb -x`, see `querybuild.code_like`) they are the
    notes looked for, whatever the two halves' ranks add up to, so they go first; a phrase of
    plain words is held verbatim by many notes that are not about it, so the caller asks only
    for code. One word counts too (`5432`, `sha256`): exact-first orders the keyword hits, but
    a meaning-only hit, near any bare number, tied with the one note holding it."""
    words = tuple(tokens(query))
    if not words:
        return []
    return [cid for cid in ids if cid in texts and _holds(fold(texts[cid]), words, prefix=False)]
