"""What `query --explain` prints: the parts of a fused score that add up to the score shown,
and a plain reason for every rule that moved a hit (background, identifier terms, ties), in the
words of the mode that ran."""

from __future__ import annotations

import random

import pytest

from search.cli.query import _explain_header, _shown_parts, _why
from search.engine import SearchResponse


def response(mode: str = "hybrid", **fields: object) -> SearchResponse:
    found = SearchResponse(query="grub", mode=mode, rrf_k=60, query_language="cs", vector_space="cs, en")
    for name, value in fields.items():
        setattr(found, name, value)
    return found


def test_the_parts_shown_add_up_to_the_score_shown() -> None:
    # 1/63 + 1/63 = 0.031746: each part rounds to 0.015873, the sum to 0.031746
    assert _shown_parts([1 / 63, 1 / 63], 2 / 63) == [0.015873, 0.015873]
    # 1/7000 + 1/7000 = 0.000285714...: each part rounds to 0.000143, the sum to 0.000286
    assert _shown_parts([1 / 7000, 1 / 7000], 2 / 7000) == [0.000143, 0.000143]
    assert _shown_parts([0.0000005, 0.0000005], 0.000001) in ([0.000001, 0.0], [0.0, 0.000001])
    explained = _why(
        response(), {"bm25_rank": 3, "bm25_part": 1 / 63, "vec_rank": 3, "vec_part": 1 / 63, "rrf": 2 / 63}
    )
    assert explained == "keyword 1/(60+3) = 0.015873 + meaning 1/(60+3) = 0.015873"
    rng = random.Random(7)
    for _ in range(2000):
        parts = [rng.uniform(0, 0.02) for _ in range(rng.choice((1, 2)))]
        shown = _shown_parts(parts, sum(parts))
        assert round(sum(shown), 6) == round(sum(parts), 6), (parts, shown)
        assert all(abs(s - p) < 1e-6 + 1e-12 for s, p in zip(shown, parts, strict=True)), (parts, shown)
    # parts that are not the total's (a caller's slip) are only rounded, never bent to it
    assert _shown_parts([0.01, 0.01], 0.05) == [0.01, 0.01]


def test_a_background_hit_says_so() -> None:
    e: dict[str, float | int | str | None] = {
        "bm25_counted_rank": 8, "bm25_part": 0.25 / 68, "vec_rank": 4, "vec_part": 1 / 64, "language": "en",
    }  # fmt: skip
    assert "background" not in _why(response(keyword_weight=0.25), e)
    assert "; background: stands out from none of its language's notes" in _why(
        response(keyword_weight=0.25), {**e, "background": True}
    )


def test_identifier_terms_held_as_typed_or_only_as_a_prefix() -> None:
    e: dict[str, float | int | str | None] = {"bm25_rank": 2, "bm25_part": 1 / 62, "rrf": 1 / 62}
    assert "holds 1 identifier term(s) as typed: placed before prefix-only matches" in _why(
        response("lex"), {**e, "exact_terms": 1}
    )
    prefix_only = _why(response("lex"), {**e, "exact_terms": 0})
    assert "holds 0" not in prefix_only
    assert "only as the start of a longer word: placed after hits holding them as typed" in prefix_only
    assert "identifier" not in _why(response("lex"), e)  # no identifier term in the query


def test_a_keyword_half_of_weight_zero_adds_nothing_and_says_so() -> None:
    e: dict[str, float | int | str | None] = {
        "bm25_counted_rank": 18, "bm25_part": 0.0, "vec_rank": 9, "vec_part": 1 / 69, "rrf": 1 / 69,
    }  # fmt: skip
    assert _why(response(keyword_weight=0.0), e) == "keyword 0 (weight 0) + meaning 1/(60+9) = 0.014493"
    assert "(the keyword half found nothing)" in _explain_header(response(keyword_weight=0.0, keyword_coverage=0.0))


def test_the_header_speaks_of_what_the_mode_weighed() -> None:
    hybrid = _explain_header(response(keyword_blind=3, keyword_weight=0.25, keyword_coverage=0.5))
    assert "3 candidates in other languages (or scripts) scored without keywords; keyword weight 0.25" in hybrid
    assert "its best note holds 50% of the query's terms" in hybrid
    assert _explain_header(response("vec")) == "query language cs; vectors cs, en"  # nothing was weighed
    plain = _explain_header(response(exact_value=True, exact_value_term="binary search"))
    assert "a rare term of no language, 'binary search', was found: plain fusion" in plain


def test_a_tie_says_which_rule_settled_it() -> None:
    e: dict[str, float | int | str | None] = {"bm25_rank": 2, "bm25_part": 1 / 62, "rrf": 1 / 62}
    assert "tied" not in _why(response("lex"), {**e, "tie": None})
    assert _why(response("lex"), {**e, "tie": "recency"}).endswith(
        "; tied in score with the hit fused just above it, which came first as the more recent note"
    )
    assert "as both halves found it" in _why(response("lex"), {**e, "tie": "taken"})
    assert "as the earlier indexed (equally recent)" in _why(response("lex"), {**e, "tie": "id"})


@pytest.mark.parametrize("fmt", ["md", "csv", "files", "lines"])
def test_explain_in_a_format_that_cannot_show_it_is_a_usage_error(fmt: str) -> None:
    from click.testing import CliRunner

    from search.cli import cli

    result = CliRunner().invoke(cli, ["query", "grub", "--explain", "--format", fmt])
    assert result.exit_code == 2
    assert f"--explain shows in text, --json and --format jsonl, not in --format {fmt}" in result.output
