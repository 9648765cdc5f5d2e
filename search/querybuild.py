"""Turn free text into a safe FTS5 MATCH expression (pure; user input never reaches FTS5 raw)."""

from __future__ import annotations

import re
import unicodedata

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


def _term(word: str) -> str:
    parts = _WORD.findall(word)
    if len(parts) > 1:
        # db-01.lan, 10.0.0.1, e-mail: the tokenizer splits them, a phrase keeps them together
        return _quote(" ".join(parts)) + ("*" if len(parts[-1]) >= PREFIX_MIN_CHARS else "")
    term = parts[0]
    if len(term) > STEM_CHARS and _INFLECTED.fullmatch(term):
        return _quote(term[: max(STEM_CHARS, len(term) - ENDING_CHARS)]) + "*"
    return _quote(term) + ("*" if len(term) >= PREFIX_MIN_CHARS else "")


def build_fts_query(text: str) -> str | None:
    """FTS5 expression OR-ing the query's terms (BM25 ranks docs with more terms higher).

    Quoted "phrases" stay phrases; words joined by punctuation become phrases; FTS5 operators
    typed by the user (AND, NEAR, -, *, :, parentheses) are treated as plain words.
    Returns None when the text contains nothing searchable (only punctuation or emoji).
    """
    text = _MARKS.sub("", unicodedata.normalize("NFC", text))
    terms: list[str] = []
    phrases = [p for p in _PHRASE.findall(text) if _WORD.search(p)]
    for phrase in phrases:
        terms.append(_quote(" ".join(_WORD.findall(phrase))))
    rest = _PHRASE.sub(" ", text)
    words = [w for w in rest.split() if _WORD.search(w)]
    content = [w for w in words if w.lower() not in STOPWORDS or len(_WORD.findall(w)) > 1]
    for word in content or words:
        terms.append(_term(word))
    unique = list(dict.fromkeys(terms))[:MAX_TERMS]
    if not unique:
        return None
    return " OR ".join(unique)
