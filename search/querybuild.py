"""Turn free text into a safe FTS5 MATCH expression (pure; user input never reaches FTS5 raw)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from search.words import STEM_CHARS, STOPWORDS

MAX_TERMS = 48  # thousands of OR terms make FTS5 slow without improving the ranking
# a one- or two-letter term would expand into every word starting with it
PREFIX_MIN_CHARS = 3
# Czech, Russian and English inflect the ends of words (záloha/zálohy/zálohou, запись/записи/
# записью): a longer word loses up to ENDING_CHARS letters before the prefix wildcard, keeping
# at least STEM_CHARS (backup -> backu*, restored -> resto*), a crude stemmer for all three.
# Measured (bench/beir.py, nDCG@10, lex): TyDi ru 0.868 -> 0.928, XQuAD ru 0.875 -> 0.949,
# SciFact en 0.680 -> 0.683.
ENDING_CHARS = 2
# Only words of alphabetic scripts that inflect at the end (Latin, Greek, Cyrillic); a run of
# CJK characters is a whole phrase to unicode61, and trimming it would drop a word.
_INFLECTED = re.compile(r"[A-Za-z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]+")

# What unicode61 treats as token characters: letters, digits (and marks folded with them).
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_PHRASE = re.compile(r'"([^"]*)"')
# Combining marks left after NFC (Russian stress accents as in "правово́е") would split a word in two;
# unicode61 folds them away in the index, so the query drops them too.
_MARKS = re.compile(r"[\u0300-\u036f]")


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


@dataclass(frozen=True)
class QueryTerm:
    """One term of the MATCH expression and the word the user typed: `match` may widen it (a
    prefix, a trimmed stem), `exact` is the star-less phrase of the whole word, or None when
    the term matches nothing but itself (a quoted phrase, a word too short for a prefix)."""

    match: str
    exact: str | None

    @property
    def is_identifier(self) -> bool:
        """A term of no language (a digit in it, or words joined by punctuation: `token5`,
        `PROJ-123`, `db-01.lan`): the kind of value a note is looked up by."""
        body = self.exact or self.match
        return any(ch.isdigit() for ch in body) or " " in body


def _term(word: str) -> QueryTerm:
    parts = _WORD.findall(word)
    whole = _quote(" ".join(parts))
    if len(parts) > 1:
        # db-01.lan, 10.0.0.1, e-mail: the tokenizer splits them, a phrase keeps them together
        widened = len(parts[-1]) >= PREFIX_MIN_CHARS
        return QueryTerm(whole + ("*" if widened else ""), whole if widened else None)
    term = parts[0]
    if len(term) > STEM_CHARS and _INFLECTED.fullmatch(term):
        return QueryTerm(_quote(term[: max(STEM_CHARS, len(term) - ENDING_CHARS)]) + "*", whole)
    if len(term) >= PREFIX_MIN_CHARS:
        return QueryTerm(whole + "*", whole)
    return QueryTerm(whole, None)


def query_terms(text: str) -> list[QueryTerm]:
    """The query's terms, in order, without repeats, at most MAX_TERMS.

    Quoted "phrases" stay phrases; words joined by punctuation become phrases; FTS5 operators
    typed by the user (AND, NEAR, -, *, :, parentheses) are treated as plain words.
    """
    text = _MARKS.sub("", unicodedata.normalize("NFC", text))
    terms: list[QueryTerm] = []
    phrases = [p for p in _PHRASE.findall(text) if _WORD.search(p)]
    for phrase in phrases:
        terms.append(QueryTerm(_quote(" ".join(_WORD.findall(phrase))), None))
    rest = _PHRASE.sub(" ", text)
    words = [w for w in rest.split() if _WORD.search(w)]
    content = [w for w in words if w.lower() not in STOPWORDS or len(_WORD.findall(w)) > 1]
    for word in content or words:
        terms.append(_term(word))
    unique: dict[str, QueryTerm] = {}
    for term in terms:
        unique.setdefault(term.match, term)
    return list(unique.values())[:MAX_TERMS]


def build_fts_query(text: str) -> str | None:
    """FTS5 expression OR-ing the query's terms (BM25 ranks docs with more terms higher).
    Returns None when the text contains nothing searchable (only punctuation or emoji)."""
    terms = query_terms(text)
    return " OR ".join(term.match for term in terms) if terms else None


def build_exact_query(terms: list[QueryTerm]) -> str | None:
    """The star-less expression of the identifier terms that the MATCH expression widens: the
    chunks holding one of them exactly, found even when thousands of prefix matches outrank
    them by BM25. None when no such term exists."""
    exact = list(dict.fromkeys(term.exact for term in terms if term.exact and term.is_identifier))
    return " OR ".join(exact) if exact else None
