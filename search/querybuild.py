"""Turn free text into the typed keyword query the stores answer (pure): user input never
reaches a backend's query syntax, since each store renders the phrases itself."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from indexer.keywords import KeywordQuery, Phrase
from search.words import STEM_CHARS, STOPWORDS

MAX_TERMS = 48  # thousands of OR terms make FTS5 slow without improving the ranking
# The model reads a long text whole, a window of 512 tokens (about 2,000 characters of prose)
# after another, 1-2 s each on a busy 2-core machine: a pasted page took minutes, and on a
# server it held the one embedder every other search waits for. A question fits in one window,
# so the meaning half reads a query's first MEANING_BYTES bytes of UTF-8; the keyword half reads
# all. Bytes, not characters: 2,000 of them are 410-720 tokens of Russian, Czech or English
# prose and at most about 1,000 of anything (2,000 emoji or CJK characters were 2,000 tokens).
MEANING_BYTES = 2000
# An answer repeats its query (JSON's `query`, MCP's search): a pasted page came back whole in
# every answer, as long again as what was asked, so the echo is the first ECHO_BYTES of it.
ECHO_BYTES = 2000
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
# quotes and brackets around a typed word, sentence punctuation after it: not part of the word
_WORD_EDGES = re.compile(r"^[\"'(\[«„“‚‘]+|[\"'.,;:!?)\]»“”’…]+$")


@dataclass(frozen=True)
class QueryTerm:
    """One term of the keyword query and the word the user typed: `match` may widen it (a
    prefix, a trimmed stem), `exact` is the whole word as a phrase without prefix, or None
    when the term matches nothing but itself (a quoted phrase, a word too short for a prefix)."""

    match: Phrase
    exact: Phrase | None

    @property
    def is_identifier(self) -> bool:
        """A term of no language (a digit in it, or words joined by punctuation: `token5`,
        `PROJ-123`, `db-01.lan`): the kind of value a note is looked up by."""
        words = (self.exact or self.match).words
        return len(words) > 1 or any(ch.isdigit() for word in words for ch in word)


def _term(word: str) -> QueryTerm:
    parts = tuple(_WORD.findall(word))
    whole = Phrase(parts)
    if len(parts) > 1:
        # db-01.lan, 10.0.0.1, e-mail: the tokenizer splits them, a phrase keeps them together
        widened = len(parts[-1]) >= PREFIX_MIN_CHARS
        return QueryTerm(Phrase(parts, prefix=True), whole) if widened else QueryTerm(whole, None)
    term = parts[0]
    if len(term) > STEM_CHARS and _INFLECTED.fullmatch(term):
        return QueryTerm(Phrase((term[: max(STEM_CHARS, len(term) - ENDING_CHARS)],), prefix=True), whole)
    if len(term) >= PREFIX_MIN_CHARS:
        return QueryTerm(Phrase(parts, prefix=True), whole)
    return QueryTerm(whole, None)


def query_terms(text: str) -> list[QueryTerm]:
    """The query's terms, in order, without repeats, at most MAX_TERMS.

    Quoted "phrases" stay phrases; words joined by punctuation become phrases; operators of a
    backend's query syntax typed by the user (FTS5's AND, NEAR, -, *, :, parentheses) are
    plain words.
    """
    text = _MARKS.sub("", unicodedata.normalize("NFC", text))
    terms: list[QueryTerm] = []
    phrases = [p for p in _PHRASE.findall(text) if _WORD.search(p)]
    for phrase in phrases:
        terms.append(QueryTerm(Phrase(tuple(_WORD.findall(phrase))), None))
    rest = _PHRASE.sub(" ", text)
    words = [w for w in rest.split() if _WORD.search(w)]
    content = [w for w in words if w.lower() not in STOPWORDS or len(_WORD.findall(w)) > 1]
    for word in content or words:
        terms.append(_term(word))
    unique: dict[Phrase, QueryTerm] = {}
    for term in terms:
        unique.setdefault(term.match, term)
    return list(unique.values())[:MAX_TERMS]


def code_like(text: str) -> bool:
    """Whether a typed word of `text` is more than letters once quotes, brackets and sentence
    punctuation around it are set aside: a flag (`-x`, `--pdb`), a path, `key=value`, a
    version, a number. Such a query is a command or a value a note is looked up by."""
    for word in text.split():
        core = _WORD_EDGES.sub("", word)
        if core and not core.isalpha():
            return True
    return False


def keyword_query(text: str) -> KeywordQuery | None:
    """The keyword query of free text (see `prefix_query`)."""
    return prefix_query(query_terms(text))


def prefix_query(terms: Sequence[QueryTerm]) -> KeywordQuery | None:
    """The terms' phrases as they match (widened), any of them (BM25 ranks docs with more
    terms higher). None when the text held nothing searchable (only punctuation or emoji)."""
    return KeywordQuery(tuple(term.match for term in terms)) if terms else None


def exact_query(terms: Sequence[QueryTerm]) -> KeywordQuery | None:
    """The identifier terms that the prefix query widens, as typed (no prefix): the chunks
    holding one of them exactly, found even when thousands of prefix matches outrank them by
    BM25. None when no such term exists."""
    exact = tuple(dict.fromkeys(term.exact for term in terms if term.exact is not None and term.is_identifier))
    return KeywordQuery(exact) if exact else None


def meaning_text(text: str) -> str:
    """What the embedder reads of a query: the whole text, or its first MEANING_BYTES bytes
    (whole characters) ending at a word boundary when the text is longer."""
    if len(text) * 4 <= MEANING_BYTES or len(text.encode()) <= MEANING_BYTES:
        return text
    head = text.encode()[:MEANING_BYTES].decode(errors="ignore")  # a character cut in two is left out
    cut = max(head.rfind(" "), head.rfind("\n"))
    return head[:cut] if cut > len(head) // 2 else head


def echoed_query(text: str) -> str:
    """The query as an answer repeats it: whole, or its first ECHO_BYTES bytes of UTF-8 (whole
    characters) and a marker that it was cut, which names the query's full size."""
    if len(text) * 4 <= ECHO_BYTES:
        return text
    data = text.encode()
    if len(data) <= ECHO_BYTES:
        return text
    head = data[:ECHO_BYTES].decode(errors="ignore")  # a character cut in two is left out
    return f"{head}… [cut: the query has {len(data):,} bytes]"
