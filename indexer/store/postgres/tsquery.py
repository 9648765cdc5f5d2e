"""Keyword queries on PostgreSQL as tsqueries: the phrases of a `KeywordQuery`, folded as the
documents are (`tsvector.fold_tokens`), each a tsquery of adjacent lexemes; the impact-tier
form of a query; and the prefixes that stand for one lexeme, looked up as that lexeme."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence

from indexer.keywords import KeywordQuery
from indexer.store.postgres.tsvector import (
    IMPACT_LABELS,
    MAX_LEXEME_BYTES,
    SHARED_PREFIX_MIN,
    SURELY_INDEXABLE,
    fold_tokens,
    indexable,
    quoted_lexeme,
)


def folded_phrases(query: KeywordQuery) -> list[tuple[list[str], bool]]:
    """The folded words of each phrase of `query` and whether its last word is a prefix.
    Phrases with nothing to match (no token, or one too long for any lexeme) are left out."""
    phrases = []
    for phrase in query.phrases:
        tokens = fold_tokens(" ".join(phrase.words), query=True)
        if tokens and all(indexable(token) for token in tokens):
            phrases.append((tokens, phrase.prefix))
    return phrases


def phrase_tsquery(tokens: list[str], prefix: bool) -> str:
    words = [quoted_lexeme(token) for token in tokens]
    if prefix:
        words[-1] += ":*"
    return " <-> ".join(words)


def impact_tsquery(phrases: Sequence[tuple[list[str], bool]], tiers: int) -> str | None:
    """The chunks where some phrase has all its words (the last one maybe a prefix: through
    one lexeme's tiers or the summed ones) in the first `tiers` impact tiers. A phrase occurs
    at most as often as each of its words, so in a chunk outside, each phrase's saturation is
    below those tiers (None: a word too long to have impact words, or a prefix too short)."""
    items = []
    for tokens, prefix in phrases:
        if any(len(token) > SURELY_INDEXABLE - 2 for token in tokens):
            return None  # only the full scan finds it
        words = []
        for n, token in enumerate(tokens, 1):
            labels = IMPACT_LABELS[:tiers]
            if prefix and n == len(tokens):  # one lexeme holding it, or the sum of several
                if len(token) < SHARED_PREFIX_MIN:
                    return None
                alternatives = [quoted_lexeme(f"{label}|{token}") + ":*" for label in labels]
                alternatives += [quoted_lexeme(f"{label}>{token}") for label in labels]
            else:
                alternatives = [quoted_lexeme(f"{label}|{token}") for label in labels]
            words.append("(" + " | ".join(alternatives) + ")")
        items.append(" & ".join(words))
    return " | ".join(f"({item})" for item in items)


_SINGLE_LEXEME = re.compile(r"'((?:[^'\\]|''|\\.)*)'(:\*)?")
MATCH_PARAM = re.compile(r"q\d+|holding\d+|all|any|every|every_tiers|candidates")  # the tsqueries of a match


def prefix_ranges(phrases: Sequence[tuple[list[str], bool]]) -> list[tuple[str, str]]:
    """Each distinct prefix of `phrases` (a phrase's last word) with the least string above
    every string it begins (code point order, the lexemes' byte order under COLLATE "C"); a
    prefix no string is above is left out, and so is one a tsquery would spell with escapes."""
    ranges: dict[str, str] = {}
    for tokens, prefix in phrases:
        low = tokens[-1]
        if not prefix or low in ranges or "'" in low or "\\" in low:
            continue
        after = ord(low[-1]) + 1
        if 0xD800 <= after <= 0xDFFF:
            after = 0xE000  # no text holds a surrogate
        if after <= sys.maxunicode:
            ranges[low] = low[:-1] + chr(after)
    return list(ranges.items())


def sole_lexeme_forms(exact: Mapping[str, str]) -> dict[str, str]:
    """The tsquery items (quoted, `:*`) of prefixes that stand for one lexeme in the documents
    and the impact tiers (`label|prefix`), each with its lexeme's item. A prefix's impact words
    name the lexemes of the chunk it begins: for these, that one."""
    forms: dict[str, str] = {}
    for prefix, lexeme in exact.items():
        forms[quoted_lexeme(prefix) + ":*"] = quoted_lexeme(lexeme)
        if len(lexeme.encode()) + 2 <= MAX_LEXEME_BYTES:
            for label in IMPACT_LABELS:
                forms[quoted_lexeme(f"{label}|{prefix}") + ":*"] = quoted_lexeme(f"{label}|{lexeme}")
    return forms


def with_lexemes(tsquery: str, forms: Mapping[str, str]) -> str:
    """`tsquery` with each item of `forms` replaced (an item is quoted whole: no other item
    contains it, and the words of a match hold no quote)."""
    for item, lexeme in forms.items():
        if item in tsquery:
            tsquery = tsquery.replace(item, lexeme)
    return tsquery


def single_lexeme(tsquery: str) -> tuple[str, bool] | None:
    """The lexeme of a one-word phrase's tsquery (see `phrase_tsquery`) and whether it is a
    prefix; None for a phrase of several words or a conjunction."""
    found = _SINGLE_LEXEME.fullmatch(tsquery)
    if found is None:
        return None
    return re.sub(r"''|\\(.)", lambda m: m.group(1) or "'", found.group(1)), bool(found.group(2))
