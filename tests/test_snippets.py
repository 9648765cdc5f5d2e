"""Match lines, snippets and text windows (search/snippets.py), as pure functions and end to end:
the line a hit names is the line `show` prints, in notes with front matter, CRLF or old Mac
line endings; the CLI groups hits by file and highlights terms only where it may."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.chunker import parse_markdown
from indexer.filetext import text_lines
from search import cli as cli_module
from search.snippets import (
    ELLIPSIS,
    SNIPPET_CHARS,
    TEXT_CHARS,
    excerpt,
    first_content_line,
    holds_term,
    marked,
    snippet_in_bytes,
    snippet_terms,
    term_spans,
)
from tests.fakes import FakeEmbedder

WIREGUARD = """\
# WireGuard VPN

Road-warrior setup: phone and laptop get into the LAN.

## Server side

- runs on `gw.lan` (192.168.1.2)
- interface `wg0`, ListenPort 51820/udp, forwarded on the ISP router
- VPN subnet `10.8.0.0/24`
"""


def lines_holding(query: str, text: str) -> list[int]:
    terms = snippet_terms(query)
    return [i for i, line in enumerate(text.split("\n")) if any(term_spans(terms, line))]


def test_the_match_line_is_the_line_with_the_exact_value() -> None:
    shown = excerpt(snippet_terms("51820/udp"), WIREGUARD, 10)
    assert shown.keyword and shown.match_line == 10 + 7
    assert "51820/udp" in shown.snippet and len(shown.snippet) <= SNIPPET_CHARS
    assert shown.text == WIREGUARD  # a short chunk is whole


def test_terms_match_as_the_index_folds_and_stems() -> None:
    text = "# Notes\n\nnothing here\nZálohy běží v noci\nsomething else\n"
    assert excerpt(snippet_terms("zaloha"), text, 1).match_line == 4  # folded accents, stem zaloh*
    assert excerpt(snippet_terms("backups"), "a\nb\nrestic backup nightly\n", 1).match_line == 3  # backu*
    phrase = snippet_terms("db-01.lan")
    assert term_spans(phrase, "host db-01.lan here") == [[(5, 14)]]
    assert term_spans(phrase, "db 01 then lan") == [[]]  # a phrase's words must be in a row


def test_the_line_with_more_and_rarer_terms_wins() -> None:
    text = "## restic\nrestic backup\nrestic forget\nrestic check\nnightly záloha by restic\n"
    assert excerpt(snippet_terms("záloha restic"), text, 1).match_line == 5


def test_without_any_term_the_first_content_line_is_chosen() -> None:
    text = "## Heading\n\n```bash\necho hello\n```\n"
    shown = excerpt(snippet_terms("completely unrelated"), text, 20)
    assert not shown.keyword and shown.match_line == 23
    setext = "Title\n=====\n\nfirst words\n"
    assert first_content_line(setext.split("\n")) == 3
    assert first_content_line(["", "#", ""]) == 1  # no content line: the first non-blank one


def test_the_text_window_is_centred_on_a_late_match() -> None:
    filler = [f"line {i} with some ordinary filler words to make it long" for i in range(80)]
    text = "\n".join([*filler, "the answer is QX7731", *filler])
    shown = excerpt(snippet_terms("QX7731"), text, 1)
    assert shown.match_line == 81
    assert "the answer is QX7731" in shown.text and len(shown.text) <= TEXT_CHARS
    before = shown.text.index("QX7731")
    assert abs(before - (len(shown.text) - before)) < 200  # about as much before as after
    assert text.startswith(shown.text) is False and f"\n{shown.text}" in f"\n{text}"  # starts at a line start
    early = excerpt(snippet_terms("line"), text, 1)
    assert early.text == text[:TEXT_CHARS]  # a match in the head: the head, as before


def test_a_long_line_is_cut_around_its_match() -> None:
    line = "word " * 200 + "needle " + "word " * 200
    shown = excerpt(snippet_terms("needle"), line, 1)
    assert "needle" in shown.snippet and len(shown.snippet) <= SNIPPET_CHARS
    assert shown.snippet.startswith(ELLIPSIS) and shown.snippet.endswith(ELLIPSIS)


def test_the_text_window_of_a_very_long_line_holds_its_match() -> None:
    line = "word " * 1000 + "needle " + "word " * 1000
    shown = excerpt(snippet_terms("needle"), f"# Title\n\n{line}", 1)
    assert "needle" in shown.text and len(shown.text) == TEXT_CHARS


def test_only_newlines_separate_lines() -> None:
    text = "one \x0c still one\ntwo \r still two\u2028 and two\nthree target\n"
    assert excerpt(snippet_terms("target"), text, 1).match_line == 3


def test_marked_pieces_rebuild_the_line() -> None:
    terms = snippet_terms("wireguard port")
    line = "WireGuard listens on port 51820 (Ports: portable)"
    pieces = marked(terms, line)
    assert "".join(part for part, _ in pieces) == line
    assert [part for part, hit in pieces if hit] == ["WireGuard", "port", "Ports", "portable"]
    assert marked(terms, "") == [("", False)]


def test_a_byte_budget_keeps_the_match() -> None:
    text = "\n".join(["Первая строка о чём-то другом совсем"] * 5 + ["здесь хивус и лёд", "потом ещё строка"] * 3)
    short = snippet_in_bytes(snippet_terms("хивус"), text, 1, 6, 120)
    assert "хивус" in short and len(short.encode()) <= 120


WORDS = ["alpha", "Beta", "gamma", "Záloha", "zálohy", "51820/udp", "db-01.lan", "борщ", "#", "##", "```", "-", "|"]
line_strategy = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join) | st.text(max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(line_strategy, min_size=1, max_size=40),
    query=st.lists(st.sampled_from(WORDS[:8]), min_size=1, max_size=3).map(" ".join) | st.text(max_size=20),
    start=st.integers(1, 500),
    budget=st.integers(20, 400),
)
def test_excerpt_properties(lines: list[str], query: str, start: int, budget: int) -> None:
    text = "\n".join(line.replace("\n", " ") for line in lines)
    count = len(text.split("\n"))
    terms = snippet_terms(query)
    shown = excerpt(terms, text, start, snippet_chars=budget)
    assert start <= shown.match_line < start + count  # inside the chunk's span
    assert shown.text in text and len(shown.text) <= TEXT_CHARS
    if holds_term(terms, text):
        # matched by keyword: the match line and the snippet hold a term
        assert shown.keyword and any(term_spans(terms, text.split("\n")[shown.match_line - start]))
        assert holds_term(terms, shown.snippet)
    longest_match = max(
        (e - s for line in text.split("\n") for spans in term_spans(terms, line) for s, e in spans), default=0
    )
    assert len(shown.snippet) <= max(budget, longest_match + 2 * len(ELLIPSIS))
    if shown.keyword and longest_match < TEXT_CHARS // 2:
        assert holds_term(terms, shown.text)  # the window holds the match too
    short = snippet_in_bytes(terms, text, start, shown.match_line, budget)
    if holds_term(terms, text):
        assert holds_term(terms, short)


# ---- end to end: the chunker, the store, the CLI ------------------------------------------------

NOTES = {
    "front.md": "---\ntitle: Front matter note\ntags: [x]\n---\n# Front\n\nintro words\n\nthe port is 6443 here\n",
    "crlf.md": "# CRLF note\r\n\r\nfirst line\r\nsecond line\r\nkubelet listens on 10250\r\n",
    "mac.md": "# Old Mac note\r\rfirst line\rmacport 7777 is open\r",
    "long.md": "# Long section\n\n"
    + "".join(f"filler line {i} about nothing in particular\n" for i in range(60))
    + "the rare token ZZTOP42 sits here\n",
}


@pytest.fixture(autouse=True)
def fake_cli_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_module, "make_embedder", FakeEmbedder)


def write_notes(notes: Path) -> None:
    for name, text in NOTES.items():
        (notes / name).write_bytes(text.encode("utf-8"))


def test_match_lines_point_at_the_file_lines_show_prints(
    config_path: Path, do_sync: Callable[..., object], notes: Path
) -> None:
    write_notes(notes)
    do_sync()
    runner = CliRunner()
    for query, name, needle in [
        ("6443", "front.md", "6443"),
        ("10250", "crlf.md", "10250"),
        ("7777", "mac.md", "7777"),
        ("ZZTOP42", "long.md", "ZZTOP42"),
    ]:
        result = runner.invoke(
            cli_module.cli, ["--config", str(config_path), "query", query, "--mode", "lex", "--json"]
        )
        assert result.exit_code == 0, result.output
        hit = json.loads(result.output)["results"][0]
        assert hit["path"] == name and needle in hit["snippet"] and needle in hit["text"]
        assert hit["line"] <= hit["match_line"] <= hit["end_line"]
        file_line = text_lines((notes / name).read_text(encoding="utf-8"))[hit["match_line"] - 1]
        assert needle in file_line
        shown = runner.invoke(
            cli_module.cli, ["--config", str(config_path), "show", f"notes:{name}:{hit['match_line']}:1"]
        )
        assert needle in shown.output, shown.output
    # the chunker keeps chunk lines one for one with file lines (what match_line relies on)
    for name, text in NOTES.items():
        file_lines = text_lines(text)
        for chunk in parse_markdown(text, name).chunks:
            span = [line.removesuffix("\r") for line in file_lines[chunk.start_line - 1 : chunk.end_line]]
            assert chunk.text.split("\n") == span


def test_human_output_groups_by_file_and_highlights_only_on_request(
    config_path: Path, do_sync: Callable[..., object], notes: Path
) -> None:
    (notes / "a.md").write_text(
        "# A\n\nkappa one \x1b[31mred\x1b[0m\n\n## Two\n\nkappa two\n"
        + "pad line\n" * 300
        + "## Three\n\nkappa three\n",
        encoding="utf-8",
    )
    (notes / "b.md").write_text("# B\n\nkappa in b\n", encoding="utf-8")
    do_sync()
    args = ["--config", str(config_path), "query", "kappa", "--mode", "lex"]
    plain = CliRunner().invoke(cli_module.cli, args)
    assert plain.exit_code == 0, plain.output
    refs = re.findall(r"^(notes:[ab]\.md):(\d+)  ", plain.output, re.MULTILINE)
    assert sorted(refs) == [("notes:a.md", "3"), ("notes:b.md", "3")]  # each hit as a ref `show` takes
    files = [name for name, _ in refs]
    assert files == sorted(files, key=files.index)  # one file's hits come together
    assert "\x1b" not in plain.output and "\\x1b[31m" in plain.output  # note text is escaped
    colour = CliRunner().invoke(cli_module.cli, args, color=True)
    assert "\x1b[1mkappa\x1b[0m" in colour.output  # bold on a terminal
    assert "\x1b[31m" not in colour.output.replace("\\x1b[31m", "")  # never the note's own codes
    no_colour = CliRunner(env={"NO_COLOR": "1"}).invoke(cli_module.cli, args, color=True)
    assert "\x1b" not in no_colour.output
    full = CliRunner().invoke(cli_module.cli, [*args, "--full"])
    assert full.output.count("pad line") > 200  # the whole chunk, not a snippet
    assert plain.output.count("pad line") < 10


def test_full_gives_whole_chunks_in_every_format(
    config_path: Path, do_sync: Callable[..., object], notes: Path
) -> None:
    (notes / "a.md").write_text("# A\n\nkappa first\n" + "pad line\n" * 300 + "kappa last\n", encoding="utf-8")
    do_sync()
    args = ["--config", str(config_path), "query", "kappa", "--mode", "lex", "-k", "1"]
    window = json.loads(CliRunner().invoke(cli_module.cli, [*args, "--json"]).output)["results"][0]["text"]
    assert len(window) <= 1200
    whole = json.loads(CliRunner().invoke(cli_module.cli, [*args, "--json", "--full"]).output)["results"][0]["text"]
    assert whole.startswith("# A\n") and whole.endswith("kappa last") and whole.count("pad line") == 300
    line = CliRunner().invoke(cli_module.cli, [*args, "--format", "jsonl", "--full"]).output
    assert json.loads(line)["text"] == whole
    md = CliRunner().invoke(cli_module.cli, [*args, "--format", "md", "--full"]).output
    assert md.count("pad line") == 300 and "kappa last" in md
    assert CliRunner().invoke(cli_module.cli, [*args, "--format", "md"]).output.count("pad line") < 10


def test_vec_mode_still_names_a_line(config_path: Path, do_sync: Callable[..., object], notes: Path) -> None:
    write_notes(notes)
    do_sync()
    result = CliRunner().invoke(
        cli_module.cli, ["--config", str(config_path), "query", "ZZTOP42", "--mode", "vec", "--json"]
    )
    assert result.exit_code == 0, result.output
    for hit in json.loads(result.output)["results"]:
        assert hit["line"] <= hit["match_line"] <= hit["end_line"] and hit["snippet"]
        if hit["path"] == "long.md":
            assert "ZZTOP42" in hit["snippet"]  # overlap with the query's words, also without keywords


def test_one_files_hits_come_together_each_as_a_ref(capsys: pytest.CaptureFixture[str]) -> None:
    from search.cli.query import _print_hits
    from search.engine import SearchResponse
    from search.hits import Hit

    def hit(path: str, line: int, score: float) -> Hit:
        return Hit("notes", path, line, line + 2, line, path, score, f"kappa {line}", f"kappa {line}", None, "keyword")

    response = SearchResponse("kappa", "lex", results=[hit("a.md", 3, 0.3), hit("b.md", 5, 0.2), hit("a.md", 20, 0.1)])
    _print_hits(response, explain=False)
    out = capsys.readouterr().out
    assert re.findall(r"^(\S+)  ", out, re.MULTILINE) == ["notes:a.md:3", "notes:a.md:20", "notes:b.md:5"]
    assert out.count("\n\n") == 2  # a blank line after each file, none between one file's hits


def _tokens_by_definition(line: str) -> list[tuple[str, int, int]]:
    """The line's tokens written plainly: each raw word (combining marks belong to their letter)
    folded as the index folds it, each of its folded tokens spanning the whole raw word."""
    from search.exact import TOKEN as _TOKEN
    from search.exact import fold as _fold
    from search.snippets import _RAW_WORD

    return [
        (word, raw.start(), raw.end())
        for raw in _RAW_WORD.finditer(line)
        for word in _TOKEN.findall(_fold(raw.group()))
    ]


def _spans_by_definition(terms: list[tuple[tuple[str, ...], bool]], line: str) -> list[list[tuple[int, int]]]:
    """term_spans written plainly: every line tokenized, every position tried (no shortcut)."""
    tokens = _tokens_by_definition(line)
    found = []
    for words, prefix in terms:
        last = len(words) - 1
        found.append(
            [
                (tokens[first][1], tokens[first + last][2])
                for first in range(len(tokens) - last)
                if all(
                    tokens[first + i][0] == word or (prefix and i == last and tokens[first + i][0].startswith(word))
                    for i, word in enumerate(words)
                )
            ]
        )
    return found


# decomposed accents, marks outside the range unicode61 folds (U+0483, U+1DCA, U+20D0), ß, Kelvin sign
ODD = [
    "e\u0301te\u0301",
    "Cafe\u0301\u1dca",
    "ПОЕЗД\u0483",
    "поезда",
    "Straße",
    "STRASSE",
    "\u212aelvin",
    "x\u20d0y",
    "zálohy",
]


@settings(max_examples=400, deadline=None)
@given(
    line=st.lists(st.sampled_from(WORDS + ODD) | st.text(max_size=6), max_size=14).map(" ".join),
    query=st.lists(st.sampled_from(WORDS[:8] + ODD) | st.text(max_size=5), min_size=1, max_size=3).map(" ".join),
)
def test_term_spans_skip_only_lines_that_cannot_hold_a_term(line: str, query: str) -> None:
    """Lines whose folded text lacks every term's first word are passed over without being
    tokenized: the spans are still exactly those of trying every token."""
    terms = snippet_terms(query) + snippet_terms(query + "*")
    assert term_spans(terms, line) == _spans_by_definition(terms, line)


@settings(max_examples=400, deadline=None)
@given(
    line=st.lists(
        st.sampled_from(WORDS + ODD) | st.text(max_size=6) | st.text(alphabet="aZ9_-.' \t", max_size=8), max_size=14
    ).map(" ".join)
)
def test_tokens_of_a_line_are_those_of_its_words_folded_one_by_one(line: str) -> None:
    """The shortcuts (an ASCII line lowercased at once, each word's folding kept) give the
    tokens and offsets of folding every raw word."""
    from search.snippets import _tokens

    assert list(_tokens(line)) == _tokens_by_definition(line)
    assert list(_tokens(line.encode("ascii", "ignore").decode())) == _tokens_by_definition(
        line.encode("ascii", "ignore").decode()
    )


def _best_line_by_definition(terms: list[tuple[tuple[str, ...], bool]], lines: list[str]) -> tuple[int, bool]:
    """best_line written plainly: every line's spans by definition, every line scored."""
    from search.snippets import first_content_line, is_content

    per_line = [[bool(spans) for spans in _spans_by_definition(terms, line)] for line in lines]
    holding = [sum(found[t] for found in per_line) for t in range(len(terms))]
    weight = [math.log(1 + len(lines) / count) if count else 0.0 for count in holding]
    scored = [
        (sum(w for w, hit in zip(weight, found, strict=True) if hit), is_content(lines, i), -i)
        for i, found in enumerate(per_line)
    ]
    best = max((key for key in scored if key[0] > 0), default=None)
    return (first_content_line(lines), False) if best is None else (-best[2], True)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(
        st.lists(st.sampled_from(WORDS + ODD + ["#", "```", "==="]) | st.text(max_size=5), max_size=8).map(" ".join),
        min_size=1,
        max_size=8,
    ),
    query=st.lists(st.sampled_from(WORDS[:8] + ODD) | st.text(max_size=5), min_size=1, max_size=3).map(" ".join),
)
def test_best_line_looks_only_at_lines_that_may_hold_a_term(lines: list[str], query: str) -> None:
    """Searching the folded chunk for the terms' first words picks the lines to score: the
    best line is still the one of scoring every line, and the chunk folded at once is its
    lines folded one by one."""
    from search.exact import fold as _fold
    from search.snippets import best_line, folded_lines

    terms = snippet_terms(query) + snippet_terms(query + "*")
    assert folded_lines(lines) == [_fold(line) for line in lines]
    assert best_line(terms, lines) == _best_line_by_definition(terms, lines)


def test_a_hit_names_the_section_of_the_line_it_points_at() -> None:
    """Small sections merged into one chunk are named by their parent; the hit's header names
    the one its match line is in (headings in a fence are code, the title is not repeated)."""
    from search.hits import section_breadcrumb

    text = (
        "# Server setup\n\n## Firewall\n\nufw allow 22\n\n## Monitoring\n\nAlertmanager sends mail\n\n"
        "```sh\n# restart it\nsystemctl restart alertmanager\n```\n\n### Disk alerts\n\nsmartd"
    )
    line = {row: n for n, row in enumerate(text.split("\n"), start=10)}
    assert section_breadcrumb("Server setup", text, 10, 10) == "Server setup"
    assert section_breadcrumb("Server setup", text, 10, line["ufw allow 22"]) == "Server setup > Firewall"
    assert section_breadcrumb("Server setup", text, 10, line["Alertmanager sends mail"]) == "Server setup > Monitoring"
    assert section_breadcrumb("Server setup", text, 10, line["systemctl restart alertmanager"]) == (
        "Server setup > Monitoring"
    )
    assert section_breadcrumb("Server setup", text, 10, line["smartd"]) == "Server setup > Monitoring > Disk alerts"
    assert section_breadcrumb("", "## Only\n\ntext", 1, 3) == "Only"
    assert section_breadcrumb("Notes", "no heading\n\ntext", 1, 3) == "Notes"
    setext = "Intro\n\nFirewall\n========\n\nufw\n\nMonitoring\n----------\n\nalertmark\n\n- a list item\n---\nafter"
    line = {row: n for n, row in enumerate(setext.split("\n"), start=1)}
    assert section_breadcrumb("T", setext, 1, line["ufw"]) == "T > Firewall"
    assert section_breadcrumb("T", setext, 1, line["alertmark"]) == "T > Firewall > Monitoring"
    # `---` under a list item is a rule, not a heading
    assert section_breadcrumb("T", setext, 1, line["after"]) == "T > Firewall > Monitoring"
    assert section_breadcrumb("T", "##  Two   spaces\n\nx", 1, 3) == "T > Two spaces"  # named as the chunker names it
    # a paragraph of three lines over `---` is one heading; under a list item or code it is a rule
    assert section_breadcrumb("T", "one\ntwo\nthree\n---\nz", 1, 5) == "T > one two three"
    assert section_breadcrumb("T", "- item\ncontinuation\n---\nz", 1, 4) == "T"
    assert section_breadcrumb("T", "    code line\n---\nz", 1, 3) == "T"
    # a note's fields: a YAML comment is no heading
    assert section_breadcrumb("Jana", "# Contact details\nname: Jana\nrole: dba", 2, 4) == "Jana"
    long = "x" * 300
    assert section_breadcrumb("Notes", f"## {long}\n\ntext", 1, 3) == "Notes"  # past the cap: kept as it was
