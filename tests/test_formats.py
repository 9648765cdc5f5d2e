"""Output formats (`--format`) and reading several files at once (`show REF...`, globs, the cap).

End to end through the click CLI (CliRunner, real config, real SQLite, deterministic embedder):
every format is parsed back and compared with the JSON of the same command, so a renderer that
drops, reorders or mangles a field fails here. Hostile note text and file names check that no
format lets a control character through.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st

from search.cli import formats
from tests.conftest import synced_cli, write

# what the terminal must never receive raw: C0 but TAB/LF, DEL, C1, bidi controls, separators
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

EXTRA = {
    "devops/wireguard.md": "# WireGuard\n\nListenPort 51820/udp on gw.lan.\n\n## Peers\n\nphone, laptop, rpi\n",
    # 300 lines; a heading every 50 makes several chunks of one file
    "devops/long.md": "# Long\n\n"
    + "".join(f"## Part {i}\n" if i % 50 == 0 else f"line {i} wireguard\n" for i in range(3, 301)),
    "travel/deep/a.md": "# Deep A\n\nwireguard in a tent\n",
}

Run = Callable[..., Result]


@pytest.fixture
def run(config_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    write(notes, EXTRA)
    return synced_cli(config_path, monkeypatch)


def stdout_of(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output)
    return result.stdout


# ---- the formats, against JSON -----------------------------------------------------------------


def test_query_csv_parses_to_the_json_hits(run: Run) -> None:
    hits = json.loads(stdout_of(run("query", "wireguard", "-k", "6", "--json")))["results"]
    rows = list(csv.DictReader(io.StringIO(stdout_of(run("query", "wireguard", "-k", "6", "--format", "csv")))))
    assert len(hits) == len(rows) > 1
    assert list(rows[0]) == list(formats.QUERY_COLUMNS)
    for rank, (hit, row) in enumerate(zip(hits, rows, strict=True), 1):
        assert int(row["rank"]) == rank
        for column in ("ref", "source", "path", "breadcrumb", "text"):
            assert row[column] == hit[column], column
        assert (int(row["line"]), int(row["end_line"]), float(row["score"])) == (
            hit["line"],
            hit["end_line"],
            hit["score"],
        )
        assert row["rev"] == (hit["rev"] or "")
        for optional in ("match_line", "matched", "snippet"):  # empty until a hit carries the field
            assert row[optional] == ("" if hit.get(optional) is None else formats.block(hit[optional]))


def test_query_jsonl_is_one_hit_per_line(run: Run) -> None:
    hits = json.loads(stdout_of(run("query", "wireguard", "--json")))["results"]
    lines = stdout_of(run("query", "wireguard", "--format", "jsonl")).splitlines()
    assert [json.loads(line) for line in lines] == hits


def test_files_are_unique_and_in_rank_order(run: Run) -> None:
    hits = json.loads(stdout_of(run("query", "wireguard", "-k", "20", "--json")))["results"]
    names = [h["file"] for h in hits]  # workspace hits: the absolute path on disk
    assert all(name.startswith("/") for name in names)
    assert len(set(names)) < len(names)  # devops/long.md has several chunks: the test means something
    listed = stdout_of(run("query", "wireguard", "-k", "20", "--format", "files")).splitlines()
    assert listed == list(dict.fromkeys(names))
    # for piping: each line is a path `show` reads
    shown = json.loads(stdout_of(run("show", *listed, "--json")))
    refs = list(dict.fromkeys(f"{h['source']}:{h['path']}" for h in hits))
    assert [f"{v['source']}:{v['path']}" for v in shown["results"]] == refs


def test_query_md_names_every_hit_with_its_ref(run: Run) -> None:
    hits = json.loads(stdout_of(run("query", "wireguard", "-k", "4", "--json")))["results"]
    md = stdout_of(run("query", "wireguard", "-k", "4", "--format", "md"))
    headings = [line for line in md.splitlines() if re.match(r"## \d+\. ", line)]
    assert len(headings) == len(hits)
    for hit in hits:
        assert f"`{hit['ref']}`" in md


def test_query_md_counts_one_hit_in_the_singular(run: Run) -> None:
    first_line = stdout_of(run("query", "wireguard", "-k", "1", "--format", "md")).splitlines()[0]
    assert first_line.endswith(", 1 hit)"), first_line
    assert stdout_of(run("query", "wireguard", "-k", "2", "--format", "md")).splitlines()[0].endswith(", 2 hits)")


def test_json_flag_is_the_short_form_and_conflicts_with_another_format(run: Run) -> None:
    assert json.loads(stdout_of(run("query", "wireguard", "--json"))) == json.loads(
        stdout_of(run("query", "wireguard", "--format", "json"))
    )
    assert run("query", "wireguard", "--json", "--format", "json").exit_code == 0
    for command in (["query", "x"], ["grep", "x"], ["show", "notes:devops/wireguard.md"], ["status"]):
        clash = run(*command, "--json", "--format", "csv")
        assert clash.exit_code == 2 and "--json means --format json" in clash.stderr


def test_grep_formats_round_trip(run: Run) -> None:
    data = json.loads(stdout_of(run("grep", "wireguard", "-i", "--json")))
    hits = data["results"]
    assert len(hits) > 10
    rows = list(csv.DictReader(io.StringIO(stdout_of(run("grep", "wireguard", "-i", "--format", "csv")))))
    assert [(r["ref"], int(r["line"]), r["text"]) for r in rows] == [(h["ref"], h["line"], h["text"]) for h in hits]
    lines = stdout_of(run("grep", "wireguard", "-i", "--format", "jsonl")).splitlines()
    assert [json.loads(line) for line in lines] == hits
    files = stdout_of(run("grep", "wireguard", "-i", "--format", "files")).splitlines()
    assert files == list(dict.fromkeys(h["file"] for h in hits))
    md = stdout_of(run("grep", "wireguard", "-i", "--format", "md"))
    assert sum(line.startswith("| [`notes:") for line in md.splitlines()) == len(hits)  # linked to the file


def test_status_formats_round_trip(run: Run) -> None:
    report = json.loads(stdout_of(run("status", "--json")))
    lines = stdout_of(run("status", "--format", "jsonl")).splitlines()
    assert [json.loads(line) for line in lines] == report["sources"]
    [row] = csv.DictReader(io.StringIO(stdout_of(run("status", "--format", "csv"))))
    [source] = report["sources"]
    assert (row["source"], int(row["files"]), int(row["chunks"]), row["lags"]) == (
        source["id"],
        source["files"],
        source["chunks"],
        "false",
    )
    assert "| `notes` |" in stdout_of(run("status", "--format", "md"))
    refused = run("status", "--format", "files")  # status lists sources, not files
    assert refused.exit_code == 2 and "files" in refused.stderr


def test_show_formats_round_trip(run: Run) -> None:
    data = json.loads(stdout_of(run("show", "notes:devops/*.md", "--json")))
    assert data["omitted"] == [] and data["errors"] == []
    rows = list(csv.DictReader(io.StringIO(stdout_of(run("show", "notes:devops/*.md", "--format", "csv")))))
    assert [(r["path"], r["text"]) for r in rows] == [(v["path"], v["text"]) for v in data["results"]]
    lines = stdout_of(run("show", "notes:devops/*.md", "--format", "jsonl")).splitlines()
    assert [json.loads(line)["text"] for line in lines] == [v["text"] for v in data["results"]]
    md = stdout_of(run("show", "notes:devops/wireguard.md", "--format", "md"))
    assert "## `notes:devops/wireguard.md` (lines 1–7)" in md and "ListenPort 51820/udp" in md


# ---- hostile text ------------------------------------------------------------------------------


def test_no_format_prints_a_control_character(run: Run, notes: Path) -> None:
    hostile = "zzhostile \x1b]0;owned\x07 \x1b[2J back\rover \u202etxt.exe bell\x07 \x9b31m end"
    write(notes, {f"evil/na\x1bme\u202e{i}.md": f"# Head \x1b[31m {i}\n\n{hostile}\n" for i in range(2)})
    assert run("sync").exit_code == 0
    for command in (["query", "zzhostile"], ["grep", "zzhostile"], ["show", "notes:evil/*.md"]):
        for fmt in ("json", "jsonl", "md", "csv", "files", *(["lines"] if command[0] != "show" else [])):
            out = stdout_of(run(*command, "--format", fmt))
            assert "evil/" in out, (command, fmt)
            assert not CONTROL.search(out.replace("\r\n", "\n")), (command, fmt, CONTROL.search(out))
        # a file name or heading never starts a line of its own
        files = stdout_of(run(*command, "--format", "files")).splitlines()
        assert all(re.fullmatch(r"(notes:|/)\S.*\.md", name) for name in files)
    exact = json.loads(stdout_of(run("show", "notes:evil/*.md", "--format", "jsonl")).splitlines()[0])
    assert hostile in exact["text"]  # JSON keeps the exact text


def test_csv_shows_a_newline_in_a_name_as_the_text_output_does(run: Run, notes: Path) -> None:
    write(notes, {"evil/two\nlines.md": "# Two\n\nzzsplit first\nzzsplit second\n"})
    assert run("sync").exit_code == 0
    text = stdout_of(run("query", "zzsplit", "--mode", "lex"))
    assert "evil/two\\nlines.md" in text
    for command in (["query", "zzsplit", "--mode", "lex"], ["grep", "zzsplit"], ["show", "notes:evil/*.md"]):
        [row, *more] = csv.DictReader(io.StringIO(stdout_of(run(*command, "--format", "csv")), newline=""))
        named = {column: row[column] for column in ("ref", "path", "file") if column in row}
        assert all("two\\nlines.md" in cell and "\n" not in cell for cell in named.values()), (command, named)
        assert all(r["path"] == row["path"] for r in more)
    [hit] = csv.DictReader(io.StringIO(stdout_of(run("show", "notes:evil/*.md", "--format", "csv")), newline=""))
    assert "zzsplit first\nzzsplit second" in hit["text"]  # a note's lines stay lines in its cell


def test_markdown_fences_and_spans_hold_any_text() -> None:
    text = "a ```` fence\n``` and `ticks`"
    fenced = formats.md_block(text)
    fence = fenced.split("\n", 1)[0].removesuffix("text")
    assert fence == "`" * 5 and fenced.endswith("\n" + fence)
    assert formats.md_code("x `y` z") == "``x `y` z``"
    assert formats.md_code("`edge`") == "`` `edge` ``"
    assert formats.md_code("a|b", in_table=True) == "`a\\|b`"
    assert formats.md_text("*bold* <b> [x](y) a|b") == "\\*bold\\* \\<b\\> \\[x\\](y) a\\|b"
    assert formats.md_text("two\nlines") == "two\\\\nlines"  # Markdown shows the visible escape `\n`


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({"ref": st.text(), "text": st.text()}), max_size=4))
def test_csv_parses_back_to_the_printable_cells(rows: list[dict[str, str]]) -> None:
    """Any text: the csv module reads back what was written, cell for cell, and the printed
    document holds no control character (line breaks stay, inside quoted cells)."""
    out = formats.render_csv(("ref", "text"), rows)
    assert not CONTROL.search(out.replace("\r\n", "\n"))
    parsed = list(csv.DictReader(io.StringIO(out, newline="")))
    assert parsed == [{"ref": formats.one_line(row["ref"]), "text": formats.block(row["text"])} for row in rows]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_markdown_code_and_fences_survive_any_text(text: str) -> None:
    span = formats.md_code(text)
    fence = re.match("`+", span)
    assert fence is not None and span.endswith(fence.group()) and "\n" not in span
    assert fence.group() not in span[len(fence.group()) : -len(fence.group())]  # nothing inside closes it
    fenced = formats.md_block(text).split("\n")
    assert fenced[0].startswith("```") and fenced[-1] == fenced[0].removesuffix("text")
    assert not any(line.startswith(fenced[-1]) for line in fenced[1:-1])


def test_csv_cells_need_the_csv_module() -> None:
    rows = [{"ref": 'a,"b"', "text": "one\ntwo, three"}]
    out = formats.render_csv(("ref", "text"), rows)
    assert list(csv.DictReader(io.StringIO(out))) == rows


# ---- several files at once ----------------------------------------------------------------------


def test_show_globs_and_several_refs(run: Run) -> None:
    data = json.loads(stdout_of(run("show", "notes:devops/*.md", "notes:travel/**", "--json")))
    paths = [v["path"] for v in data["results"]]
    assert paths == [
        "devops/long.md",
        "devops/postgres.md",
        "devops/wireguard.md",
        "devops/zalohovani.md",
        "travel/deep/a.md",
        "travel/kazan.md",
    ]
    # `*` stays in one folder; a bare glob is every source's; a file named twice is read once
    top = json.loads(run("show", "*.md", "devops/postgres.md", "notes:devops/postgres.md", "--json").stdout)
    assert [v["path"] for v in top["results"]] == ["devops/postgres.md"]
    assert "no file matches" in top["errors"][0]["error"]
    text = stdout_of(run("show", "notes:devops/wire*.md"))
    assert text.startswith("==> notes:devops/wireguard.md <==\n# WireGuard\n")  # a glob names its file
    ranges = json.loads(stdout_of(run("show", "notes:devops/*.md:1:1", "--json")))
    assert {v["text"] for v in ranges["results"]} >= {"# WireGuard\n", "# Long\n"}


def test_show_caps_several_files_and_names_what_was_left_out(run: Run) -> None:
    # 300 + 3 lines fit 305; wireguard.md's 7 more would not: it and all after it are left out
    result = run("show", "notes:devops/**", "notes:travel/kazan.md", "--max-lines", "305", "--json")
    data = json.loads(stdout_of(result))
    assert [(v["path"], v["end_line"]) for v in data["results"]] == [("devops/long.md", 300), ("devops/postgres.md", 3)]
    assert data["omitted"] == ["notes:devops/wireguard.md", "notes:devops/zalohovani.md", "notes:travel/kazan.md"]
    assert "left out 3 files" in result.stderr and "notes:travel/kazan.md" in result.stderr
    # a first file larger than the cap alone: its head, and where the rest starts
    cut = run("show", "notes:devops/long.md", "notes:devops/postgres.md", "--max-lines", "10")
    assert stdout_of(cut).count("\n") == 1 + 10 and "line 10 wireguard" in cut.stdout
    assert "cut at line 10 of 300" in cut.stderr and "show notes:devops/long.md:11" in cut.stderr
    assert "left out 1 files" in cut.stderr
    by_bytes = json.loads(stdout_of(run("show", "notes:devops/*.md", "--max-bytes", "200", "--json")))
    [first] = by_bytes["results"]
    assert first["truncated"] and len(first["text"].encode()) <= 200 and len(by_bytes["omitted"]) == 3
    # one plain ref is read whole, as before: the cap is for several files
    assert (
        json.loads(stdout_of(run("show", "notes:devops/long.md", "--max-lines", "10", "--json")))["results"][0][
            "end_line"
        ]
        == 300
    )


def test_show_bad_refs_among_several(run: Run) -> None:
    result = run("show", "notes:devops/wireguard.md", "notes:nope.md", "notes:../x/*.md", "notes:devops/postgres.md")
    assert result.exit_code == 1
    assert "==> notes:devops/wireguard.md <==" in result.stdout and "Server poslouchá" in result.stdout
    errors = result.stderr.splitlines()  # in the order the refs were given
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors)
    assert "nope.md" in errors[0] and "outside the source root" in errors[1]
    as_json = run("show", "notes:devops/wireguard.md", "notes:nope.md", "--json")
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["errors"][0]["ref"] == "notes:nope.md"
    single = run("show", "notes:nope.md")  # one ref: the command's one-line error, as before
    assert single.exit_code == 1 and single.stderr.startswith("Error: ") and len(single.stderr.splitlines()) == 1


def test_show_bad_ref_after_the_cap_is_an_error_not_a_left_out_file(run: Run) -> None:
    # the cap is reached at the first file: a missing ref after it must still fail the command
    result = run("show", "notes:devops/long.md", "notes:nope.md", "notes:devops/postgres.md", "--max-lines", "10")
    assert result.exit_code == 1
    assert "error: notes:nope.md" in result.stderr
    as_json = run(
        "show", "notes:devops/long.md", "notes:nope.md", "notes:devops/postgres.md:99", "--max-lines", "10", "--json"
    )
    data = json.loads(as_json.stdout)
    assert as_json.exit_code == 1
    assert [item["ref"] for item in data["errors"]] == ["notes:nope.md", "notes:devops/postgres.md"]
    assert data["omitted"] == []
    left_out = json.loads(
        run("show", "notes:devops/long.md", "notes:devops/postgres.md", "--max-lines", "10", "--json").stdout
    )
    assert left_out["omitted"] == ["notes:devops/postgres.md"] and left_out["errors"] == []


def test_show_glob_keeps_the_single_show_confinement(run: Run, notes: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    write(secret, {"passwords.md": "# Secret\n\nTOPSECRET-4242\n"})
    (notes / "devops" / "leak.md").symlink_to(secret / "passwords.md")
    (notes / "outside").symlink_to(secret, target_is_directory=True)
    data = json.loads(stdout_of(run("show", "notes:**", "--json")))
    assert "TOPSECRET" not in json.dumps(data)
    refused = run("show", "notes:outside/*.md", "notes:devops/postgres.md")
    assert refused.exit_code == 1 and "TOPSECRET" not in refused.output


def test_a_file_named_with_glob_characters_is_read_by_its_own_name(run: Run, notes: Path) -> None:
    """`show 'notes:ideas/a*.md'` reads the file called `a*.md`, not every `a…md` beside it;
    a pattern that names no such file is still a pattern."""
    write(notes, {"ideas/a*.md": "# Star\n", "ideas/ab.md": "# Ab\n", "ideas/what?.md": "# Question\n"})
    assert run("sync").exit_code == 0
    exact = json.loads(stdout_of(run("show", "notes:ideas/a*.md", "--json")))
    assert [v["path"] for v in exact["results"]] == ["ideas/a*.md"]
    bare = json.loads(stdout_of(run("show", "ideas/what?.md:1:1", "--json")))
    assert [(v["path"], v["text"]) for v in bare["results"]] == [("ideas/what?.md", "# Question\n")]
    pattern = json.loads(stdout_of(run("show", "notes:ideas/a?.md", "--json")))
    assert [v["path"] for v in pattern["results"]] == ["ideas/a*.md", "ideas/ab.md"]


def test_the_server_memory_line_says_what_to_do_only_when_the_pool_is_too_small() -> None:
    fits = formats.server_memory_line({"searched_bytes": 900 * 2**20, "buffer_pool_bytes": 4 * 2**30, "fits": True})
    assert fits == "server memory: searches read 900 MB of tables and indexes, shared_buffers holds 4.0 GB"
    small = formats.server_memory_line(
        {"searched_bytes": int(9.3 * 2**30), "buffer_pool_bytes": 128 * 2**20, "fits": False}
    )
    assert small.startswith("server memory: searches read 9.3 GB of tables and indexes, shared_buffers holds 128 MB:")
    assert small.endswith("give shared_buffers 9.3 GB or more")


def test_lines_are_one_per_hit_with_the_ref_first(run: Run) -> None:
    hits = json.loads(stdout_of(run("query", "wireguard", "-k", "6", "--json")))["results"]
    rows = [
        line.split("\t") for line in stdout_of(run("query", "wireguard", "-k", "6", "--format", "lines")).splitlines()
    ]
    assert [row[0] for row in rows] == [f"{h['source']}:{h['path']}:{h['match_line']}" for h in hits]
    assert [row[1] for row in rows] == [h["breadcrumb"] for h in hits] and all(len(row) == 3 for row in rows)
    grep = json.loads(stdout_of(run("grep", "wireguard", "-i", "--json")))["results"]
    lines = stdout_of(run("grep", "wireguard", "-i", "--format", "lines")).splitlines()
    assert lines == [f"{h['ref']}\t{h['text']}" for h in grep]
    assert run("show", "notes:devops/wireguard.md", "--format", "lines").exit_code == 2  # hits only


def test_a_lines_field_holds_no_tab_and_no_control() -> None:
    hit = {"source": "n", "path": "a\tb.md", "match_line": 3, "breadcrumb": "x\ty\x1b[2J", "snippet": "one\ntwo\tthree"}
    (line,) = formats.query_lines({"results": [hit]}).splitlines()
    assert line.split("\t") == ["n:a b.md:3", "x y\\x1b[2J", "one two three"]
