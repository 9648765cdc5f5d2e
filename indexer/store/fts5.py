"""SQLite's dialect of the keyword query: the FTS5 MATCH expression (pure, no database)."""

from __future__ import annotations

from indexer.keywords import KeywordQuery, Phrase


def match_expression(query: KeywordQuery) -> str:
    """Each phrase double-quoted (a quote in a word doubled: no word reads as an operator such
    as AND, NEAR, `-` or a column filter), `*` after a prefix, joined by OR."""
    return " OR ".join(_phrase(phrase) for phrase in query.phrases)


def _phrase(phrase: Phrase) -> str:
    quoted = '"' + " ".join(phrase.words).replace('"', '""') + '"'
    return quoted + "*" if phrase.prefix else quoted
