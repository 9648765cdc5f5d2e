"""The query path's language work made cheaper without changing a figure: term coverage found
by searching the folded text instead of splitting it, case folding of ASCII text, and the
detection of one short query with fewer numpy steps."""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer import language
from search.exact import _MARKS
from search.exact import TOKEN as _TOKEN
from search.exact import fold as _fold
from search.fusion import match_terms, term_coverage
from search.querybuild import keyword_query


def coverage_by_tokens(terms: Sequence[tuple[tuple[str, ...], bool]], text: str) -> float:
    """term_coverage as it was written first: the text split into its sorted tokens."""
    if not terms:
        return 0.0
    tokens = sorted(set(_TOKEN.findall(_MARKS.sub("", unicodedata.normalize("NFKD", text.casefold())))))

    def has(word: str, as_prefix: bool) -> bool:
        i = bisect.bisect_left(tokens, word)
        return i < len(tokens) and (tokens[i] == word or (as_prefix and tokens[i].startswith(word)))

    found = 0
    for words, prefix in terms:
        last = len(words) - 1
        found += all(has(w, (prefix and i == last) or len(words) > 1) for i, w in enumerate(words))
    return found / len(terms)


WORDS = ["záloha", "zalohy", "backup", "back", "db-01.lan", "5432", "Straße", "база", "ĲSSEL", "x_y", "a", "ab"]
text_parts = st.lists(st.sampled_from([*WORDS, " ", "\n", "_", ".", "-", "²", "ǅ"]), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), text_parts, st.text(max_size=40))
def test_coverage_by_search_equals_coverage_by_tokens(query: list[str], parts: list[str], noise: str) -> None:
    terms = match_terms(keyword_query(" ".join(query)))
    for text in ("".join(parts), " ".join(parts), noise, "".join(parts) + noise):
        assert term_coverage(terms, text) == coverage_by_tokens(terms, text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_ascii_text_folds_as_before(text: str) -> None:
    assert _fold(text) == _MARKS.sub("", unicodedata.normalize("NFKD", text.casefold()))
    ascii_text = text.encode("ascii", errors="ignore").decode()
    assert _fold(ascii_text) == _MARKS.sub("", unicodedata.normalize("NFKD", ascii_text.casefold()))


def test_a_query_is_scored_exactly_as_in_a_batch() -> None:
    scorer = language._identifier()
    queries = ["jak obnovit zálohu databáze", "how to restore the database", "как восстановить базу", "zxq", "12"]
    alone = np.vstack([scorer.probabilities([query]) for query in queries])
    assert np.array_equal(alone, scorer.probabilities(queries))
