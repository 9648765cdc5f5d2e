"""`show`, `grep` and `toc`: the two index-free layers plus file reading, end to end.

Git cases use real repositories made with the git command line and a real sync, so `show` and
`grep` are checked against the mirror at the indexed revision, not against the upstream.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from indexer.config import Config, load_config
from indexer.errors import NotesSearchError, PathOutsideSources, SourceError
from indexer.globs import FileSelection
from indexer.store import FileRow, Store
from indexer.sync import run_sync
from indexer.toc import render_toc, toc_path, write_tocs
from search import grep as grep_module
from search.cli import cli
from search.cli.files import grep as grep_command
from search.cli.files import show as show_command
from search.cli.files import toc as toc_command
from search.grep import GrepHit, grep
from search.refs import Ref, confine, parse_ref, read_text, sources_having
from search.service.reading import line_range
from tests.conftest import FAKE_EMBEDDING, NOTES, assert_one_line_error, open_index, write
from tests.fakes import FakeEmbedder

HAVE_RG = shutil.which("rg") is not None
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

EXTRA_NOTES = {
    "devops/flags.md": """
        # Flags

        Run the deploy with --dry-run first.
        Výstup je v /var/log/deploy.log.
        """,
    "secret/keys.md": """
        # Keys

        token db-01 hunter2
        """,
}

WIKI_V1 = {
    "guide.md": "# Guide\n\nThe wiki says version one.\nport 8080 db-01\n",
    "ops/runbook.md": "# Runbook\n\nRestart db-01 with care.\n",
    "drafts/wip.md": "# WIP\n\ndb-01 draft\n",
    "devops/postgres.md": "# PG in wiki\n\nport 5432 here too\n",
    "ru.md": "# Заметка\n\nКремль открыт с 8 утра.\n",
}


# ---- helpers ---------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write_config(tmp_path: Path, sources: str, db_url: str | None = None) -> Path:
    path = tmp_path / "notes-search.yaml"
    db_line = f'db: "{db_url}"\n' if db_url else ""
    path.write_text(f"root: {tmp_path}\n{db_line}{FAKE_EMBEDDING}sources:\n{sources}", encoding="utf-8")
    return path


def sync(config: Config) -> None:
    report = run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding))
    assert not report.failed, report.failed


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lead wires the commands into search.cli; until then the tests add them."""
    for command in (show_command, grep_command, toc_command):
        if command.name not in cli.commands:
            monkeypatch.setitem(cli.commands, str(command.name), command)


def build_world(base: Path, db_url: str | None) -> Path:
    """Two workspace sources (both have devops/postgres.md; `secret/` is excluded from `notes`)
    and a git source `wiki` (`drafts/` excluded) synced at its first commit. Returns the config."""
    write(base / "notes", {**NOTES, **EXTRA_NOTES})
    write(base / "other", {"devops/postgres.md": "# PostgreSQL elsewhere\n\nport 6432 via pgbouncer\n"})
    upstream = base / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    commit(upstream, WIKI_V1, "v1")
    config_path = write_config(
        base,
        f"""\
  workspace:
    notes:
      root: {base / "notes"}
      paths: ["**"]
      exclude: ["secret/**"]
    other:
      root: {base / "other"}
      paths: ["**"]
  git:
    wiki:
      url: {upstream}
      exclude: ["drafts/**"]
""",
        db_url,
    )
    sync(load_config(config_path))
    return config_path


def make_run(config_path: Path) -> Callable[..., Result]:
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(cli, ["--config", str(config_path), *args], catch_exceptions=False)

    return invoke


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_db_url: str | None) -> Path:
    """Shared by the tests that only read; a test that changes files builds its own."""
    return build_world(tmp_path_factory.mktemp("world"), module_db_url)


@pytest.fixture
def cfg(world: Path) -> Config:
    return load_config(world)


@pytest.fixture
def store(cfg: Config) -> Iterator[Store]:
    s = open_index(cfg, readonly=True)
    yield s
    s.close()


@pytest.fixture
def run(world: Path) -> Callable[..., Result]:
    return make_run(world)


@pytest.fixture(params=["rg", "python"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """grep through ripgrep, and through the pure-Python fallback (PATH without rg, with git)."""
    if request.param == "rg":
        if not HAVE_RG:
            pytest.skip("ripgrep (rg) is not installed")
        return "rg"
    bin_dir = tmp_path / "bin-without-rg"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("rg") is None
    return "python"


def where(hits: list[GrepHit]) -> list[str]:
    return [f"{h.source}:{h.path}:{h.line}" for h in hits]


# ---- refs --------------------------------------------------------------------------------------


def test_parse_ref_forms() -> None:
    ids = {"notes", "wiki"}
    assert parse_ref("a.md", ids) == Ref(None, "a.md")
    assert parse_ref("notes:dir/a.md", ids) == Ref("notes", "dir/a.md")
    assert parse_ref("notes:dir/a.md:12", ids) == Ref("notes", "dir/a.md", 12)
    assert parse_ref("wiki:a.md:12:5", ids) == Ref("wiki", "a.md", 12, 5)
    assert parse_ref("x:y.md", ids) == Ref(None, "x:y.md")  # 'x' is not a source: part of the path
    assert parse_ref("a:b.md:4", ids) == Ref(None, "a:b.md", 4)
    assert parse_ref("notes:12", ids) == Ref("notes", "12")  # a file named 12, no line
    assert parse_ref("dir\\a.md", ids) == Ref(None, "dir\\a.md")  # a backslash is part of a POSIX name
    for bad in ("/etc/passwd", "notes:/etc/passwd", "C:\\notes\\a.md", "C:/notes/a.md", "\\a.md", "a\0.md"):
        with pytest.raises(PathOutsideSources):
            parse_ref(bad, ids)
    for bad in ("a.md:0", "a.md:3:0", "", "notes:"):
        with pytest.raises(NotesSearchError):
            parse_ref(bad, ids)


def test_a_ref_spells_back_what_parse_ref_reads() -> None:
    """Every front end prints refs through `Ref`, so what it prints is what `show` takes back."""
    ids = {"notes", "wiki"}
    for text in ("a.md", "notes:dir/a.md", "notes:dir/a.md:12", "wiki:a.md:12:5", "a:b.md:4", "notes:12"):
        assert str(parse_ref(text, ids)) == text
    assert str(Ref("notes", "dir/a.md", 7)) == "notes:dir/a.md:7"
    assert str(Ref("notes", "dir/a.md")) == "notes:dir/a.md"


def test_confine_normalises_and_refuses_escapes(config: Config, notes: Path, tmp_path: Path) -> None:
    assert confine(config, "notes", "./devops//x/../postgres.md") == "devops/postgres.md"
    assert confine(config, "notes", "") == ""
    for bad in ("../x.md", "devops/../../x.md", "/etc/passwd", "a\0b"):
        with pytest.raises(PathOutsideSources):
            confine(config, "notes", bad)
    (tmp_path / "outside.md").write_text("secret\n", encoding="utf-8")
    (notes / "escape.md").symlink_to(tmp_path / "outside.md")
    (notes / "inside.md").symlink_to(notes / "devops" / "postgres.md")
    with pytest.raises(PathOutsideSources, match="outside the source root"):
        confine(config, "notes", "escape.md")
    assert confine(config, "notes", "inside.md") == "inside.md"


def test_read_text_and_sources_having(cfg: Config, store: Store) -> None:
    assert read_text(cfg, store, "notes", "devops/postgres.md").startswith("# PostgreSQL\n")
    assert read_text(cfg, store, "wiki", "ops/runbook.md") == WIKI_V1["ops/runbook.md"]
    assert sources_having(cfg, store, "devops/postgres.md") == ["wiki", "notes", "other"]  # config order
    assert sources_having(cfg, store, "guide.md") == ["wiki"]
    assert sources_having(cfg, store, "secret/keys.md") == []  # excluded from `notes`
    with pytest.raises(PathOutsideSources, match=r"excluded by the config: `sources\.workspace\.notes\.exclude`"):
        read_text(cfg, store, "notes", "secret/keys.md")
    with pytest.raises(SourceError, match="no such file"):
        read_text(cfg, store, "notes", "missing.md")
    with pytest.raises(SourceError, match="not found"):
        read_text(cfg, store, "wiki", "missing.md")


def test_git_source_never_synced_is_a_clear_error(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, f"  git:\n    wiki:\n      url: {tmp_path / 'nowhere'}\n"))
    with pytest.raises(SourceError, match="never synced"):
        read_text(config, None, "wiki", "a.md")
    alone = grep(config, None, "x", source_ids=["wiki"])
    with pytest.raises(SourceError, match=r"nothing could be searched: wiki .*never synced"):
        alone.check_searched()
    everything = grep(config, None, "x")  # wiki is the only source: named, not skipped
    assert everything == [] and [(u.source, u.path) for u in everything.unsearched] == [("wiki", None)]
    with pytest.raises(SourceError, match="nothing could be searched"):
        everything.check_searched()


# ---- show --------------------------------------------------------------------------------------


def test_show_whole_file_and_line_ranges(run: Callable[..., Result], cfg: Config) -> None:
    text = (cfg.root / "notes/devops/zalohovani.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    whole = run("show", "notes:devops/zalohovani.md")
    assert whole.exit_code == 0, whole.output
    assert whole.stdout == text
    ranged = run("show", "notes:devops/zalohovani.md:6:3")
    assert ranged.stdout.splitlines() == lines[5:8]
    to_end = run("show", "devops/zalohovani.md:10")  # bare path: only `notes` has it
    assert to_end.stdout.splitlines() == lines[9:]
    data = json.loads(run("show", "notes:devops/zalohovani.md:6:3", "--json").stdout)
    assert data["results"] == [
        {
            "source": "notes",
            "path": "devops/zalohovani.md",
            "rev": None,
            "start_line": 6,
            "end_line": 8,
            "truncated": False,
            "text": "\n".join(lines[5:8]) + "\n",
        }
    ]
    past = run("show", "notes:devops/zalohovani.md:999")
    assert past.exit_code == 1 and "past the end" in past.output


def test_line_range_numbers_lines_as_grep_and_keeps_the_file_ending() -> None:
    lf = line_range("one\ntwo\nthree\n", 2, 5)
    assert (lf.start, lf.end, lf.total, lf.lines, lf.line_ending) == (2, 3, 3, ("two", "three"), "\n")
    assert lf.text == "two\nthree\n"
    crlf = line_range("one\r\ntwo\r\nthree", 1, 2)  # the last line needs no break of its own
    assert (crlf.lines, crlf.line_ending, crlf.text) == (("one", "two"), "\r\n", "one\r\ntwo\r\n")
    old_mac = line_range("one\rtwo\r", 2)  # printed with "\n": a lone CR would be escaped on a terminal
    assert (old_mac.lines, old_mac.text) == (("two",), "two\n")
    mixed = line_range("one\r\ntwo\nthree\r\n")  # not every line ends in CRLF: "\n", and no stray CR
    assert (mixed.lines, mixed.line_ending) == (("one", "two", "three"), "\n")
    past = line_range("one\n", 3)
    assert (past.start, past.end, past.total, past.lines) == (3, 1, 1, ())
    assert line_range("", 1).total == 0


def test_show_and_get_of_a_crlf_file_give_the_same_lines(tmp_path: Path) -> None:
    """`show` prints a range as the file writes it (CRLF), `get` joins with "\n"; both hold the
    same lines, none with a stray "\r"."""
    from search.service import NotesService

    write(tmp_path / "notes", {"win.md": "# Windows\r\n\r\nfirst line\r\nsecond line\r\nthird\r\n"})
    service = NotesService.from_config_file(
        str(
            write_config(
                tmp_path,
                f"""\
  workspace:
    notes:
      root: {tmp_path / "notes"}
      paths: ["**"]
""",
            )
        )
    )
    (shown,) = service.show("notes:win.md:3:2")
    window = service.get("notes:win.md:3:2", None, 10, 65536)
    assert shown.range is not None and window.view.range is not None
    assert shown.range.lines == window.view.range.lines == ("first line", "second line")
    assert shown.text == "first line\r\nsecond line\r\n"  # as `show` printed it before: the file's bytes
    assert window.view.text == "first line\nsecond line"
    assert (window.truncated, window.view.range.total) == (True, 5)
    (whole,) = service.show("notes:win.md")
    assert whole.range is None and whole.text == "# Windows\r\n\r\nfirst line\r\nsecond line\r\nthird\r\n"


def test_show_bare_path_in_several_sources(run: Callable[..., Result]) -> None:
    result = run("show", "devops/postgres.md")
    assert result.exit_code == 0, result.output
    out = result.stdout
    headers = [line for line in out.splitlines() if line.startswith("==> ")]
    assert headers == [
        "==> wiki:devops/postgres.md <==",
        "==> notes:devops/postgres.md <==",
        "==> other:devops/postgres.md <==",
    ]
    assert "port 5432" in out and "port 6432" in out and "PG in wiki" in out
    data = json.loads(run("show", "devops/postgres.md:1:1", "--json").stdout)
    assert [(d["source"], d["text"]) for d in data["results"]] == [
        ("wiki", "# PG in wiki\n"),
        ("notes", "# PostgreSQL\n"),
        ("other", "# PostgreSQL elsewhere\n"),
    ]
    single = run("show", "notes:devops/postgres.md")
    assert "==>" not in single.stdout


def test_show_reads_the_mirror_at_the_indexed_rev(tmp_path: Path, db_url: str | None) -> None:
    config_path = build_world(tmp_path, db_url)
    cfg, run = load_config(config_path), make_run(config_path)
    store = open_index(cfg, readonly=True)
    indexed = store.source_state("wiki")[0]
    store.close()
    assert indexed is not None
    newer = commit(tmp_path / "upstream", {"guide.md": "# Guide\n\nversion two\n"}, "v2")
    assert newer != indexed
    result = run("show", "wiki:guide.md")
    assert result.exit_code == 0, result.output
    assert result.stdout == WIKI_V1["guide.md"]
    [data] = json.loads(run("show", "wiki:guide.md:3:1", "--json").stdout)["results"]
    assert data["rev"] == indexed and data["text"] == "The wiki says version one.\n"
    # after a sync the index and `show` move together
    sync(cfg)
    assert run("show", "wiki:guide.md").stdout == "# Guide\n\nversion two\n"


@pytest.mark.parametrize(
    "ref",
    [
        "../notes-search.yaml",
        "notes:../notes-search.yaml",
        "notes:devops/../../x.md",
        "/etc/passwd",
        "notes:/etc/passwd",
        "wiki:../upstream/guide.md",
    ],
)
def test_show_refuses_paths_outside_sources(run: Callable[..., Result], ref: str) -> None:
    result = run("show", ref)
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and len(result.output.strip().splitlines()) == 1
    said = ("outside the source root", "relative to a source root", "outside every source's folder")
    assert any(reason in result.output for reason in said)


def test_show_refuses_a_symlink_out_of_the_source(tmp_path: Path, db_url: str | None) -> None:
    run = make_run(build_world(tmp_path, db_url))
    (tmp_path / "private.md").write_text("# private\n", encoding="utf-8")
    (tmp_path / "notes" / "devops" / "escape.md").symlink_to(tmp_path / "private.md")
    for ref in ("notes:devops/escape.md", "devops/escape.md"):
        result = run("show", ref)
        assert result.exit_code == 1 and "outside the source root" in result.output, ref
        assert "private" not in result.stdout


def test_show_unknown_file_and_excluded_file(run: Callable[..., Result]) -> None:
    missing = run("show", "nope.md")
    assert missing.exit_code == 1 and "no such file in any source" in missing.output
    excluded = run("show", "notes:secret/keys.md")
    assert excluded.exit_code == 1 and "excluded by the config" in excluded.output and "hunter2" not in excluded.output


def error_of(result: Result) -> str:
    assert result.exit_code == 1, result.output
    return result.stderr.strip()


def test_show_suggests_indexed_files_for_a_bare_or_misplaced_name(run: Callable[..., Result]) -> None:
    """A file name without its folder (or with a typo) names the indexed files it may mean,
    from workspace sources and git mirrors alike; the excluded ones are never suggested."""
    assert error_of(run("show", "runbook.md")) == (
        "Error: 'runbook.md': no such file in any source (wiki, notes, other); did you mean wiki:ops/runbook.md?"
    )
    assert error_of(run("show", "Zalohovani")).endswith("did you mean notes:devops/zalohovani.md?")  # case, no .md
    several = error_of(run("show", "postgres.md:3"))
    assert several.endswith(
        "did you mean one of: wiki:devops/postgres.md, notes:devops/postgres.md, other:devops/postgres.md?"
    )
    assert error_of(run("show", "notes:postgress.md")) == (
        "Error: notes:postgress.md: no such file; did you mean notes:devops/postgres.md?"  # only that source
    )
    assert error_of(run("show", "wiki:runbook.md")).endswith("did you mean wiki:ops/runbook.md?")
    assert error_of(run("show", "keys.md")) == "Error: 'keys.md': no such file in any source (wiki, notes, other)"
    assert "did you mean" not in error_of(run("show", "nothing-like-it.md"))


def test_show_lists_a_few_of_many_similar_files(tmp_path: Path, db_url: str | None) -> None:
    write(tmp_path / "notes", {f"team{i}/readme.md": f"# Team {i}\n\nhello\n" for i in range(8)})
    config_path = write_config(
        tmp_path, f"  workspace:\n    notes:\n      root: {tmp_path / 'notes'}\n      paths: ['**']\n", db_url
    )
    sync(load_config(config_path))
    message = error_of(make_run(config_path)("show", "readme.md"))
    assert message.endswith(
        "did you mean one of: notes:team0/readme.md, notes:team1/readme.md, notes:team2/readme.md, "
        "notes:team3/readme.md, notes:team4/readme.md, … (8 in all)?"
    )


# ---- grep --------------------------------------------------------------------------------------


def test_grep_regex_fixed_and_case(engine: str, cfg: Config, store: Store) -> None:
    regex = grep(cfg, store, r"db-0\d", source_ids=["notes"])
    assert where(regex) == ["notes:devops/zalohovani.md:7"]
    assert regex[0].text == "Každou noc běží záloha databáze na `db-01.lan` přes restic." and regex[0].rev is None
    assert grep(cfg, store, r"db-0\d", source_ids=["notes"], fixed=True) == []
    assert where(grep(cfg, store, "db-01.lan", source_ids=["notes"], fixed=True)) == ["notes:devops/zalohovani.md:7"]
    assert grep(cfg, store, "postgresql", source_ids=["notes"]) == []
    assert where(grep(cfg, store, "postgresql", source_ids=["notes"], ignore_case=True)) == [
        "notes:devops/postgres.md:1"
    ]
    assert where(grep(cfg, store, "КРЕМЛЬ", source_ids=["notes"], ignore_case=True)) == ["notes:travel/kazan.md:3"]


def test_grep_pattern_starting_with_dash(engine: str, cfg: Config, store: Store, run: Callable[..., Result]) -> None:
    assert where(grep(cfg, store, "--dry-run", source_ids=["notes"])) == ["notes:devops/flags.md:3"]
    assert where(grep(cfg, store, "-", source_ids=["notes"], path="devops/flags.md", fixed=True)) == [
        "notes:devops/flags.md:3"
    ]
    result = run("grep", "--source", "notes", "--", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout == "notes:devops/flags.md:3: Run the deploy with --dry-run first.\n"


def test_grep_takes_patterns_as_e_options_and_any_of_several_matches(engine: str, run: Callable[..., Result]) -> None:
    """As ripgrep: `-e P` gives a pattern beginning with '-'; several `-e` print the lines
    matching any of them, in workspace files and in git mirrors alike."""
    one = run("grep", "--source", "notes", "-e", "--dry-run")
    assert one.exit_code == 0, one.output
    assert one.stdout == "notes:devops/flags.md:3: Run the deploy with --dry-run first.\n"
    several = run("grep", "-e", "--dry-run", "-e", "Restart db-0[1]", "--json")
    assert several.exit_code == 0, several.output
    data = json.loads(several.stdout)
    assert data["pattern"] == "--dry-run" and data["patterns"] == ["--dry-run", "Restart db-0[1]"]
    assert [hit["ref"] for hit in data["results"]] == ["wiki:ops/runbook.md:3", "notes:devops/flags.md:3"]
    fixed = run("grep", "-F", "-e", "db-0[1]", "-e", "--dry-run", "--source", "notes")
    assert fixed.stdout == "notes:devops/flags.md:3: Run the deploy with --dry-run first.\n"
    bad = run("grep", "--source", "notes", "-e", "fine", "-e", "(foo")
    assert bad.exit_code == 2 and "invalid regex" in bad.stderr and "(foo" in bad.stderr  # not "nothing matched"


def test_grep_usage_errors_name_both_ways_for_a_dash_pattern(run: Callable[..., Result]) -> None:
    dash = run("grep", "--console-address")
    assert dash.exit_code == 2 and dash.stdout == ""
    assert "No such option '--console-address'" in dash.stderr
    assert "grep -- --console-address, or " in dash.stderr
    assert "grep -e --console-address" in dash.stderr
    # a short-option cluster fails on its first letter; the hint quotes the word as typed
    single = run("grep", "-allow-newer-config")
    assert single.exit_code == 2 and "grep -e -allow-newer-config" in single.stderr
    # a near miss of a real option stays click's "did you mean", without the hint
    typo = run("grep", "--sourc", "x")
    assert typo.exit_code == 2 and "--source" in typo.stderr and " -e " not in typo.stderr
    both = run("grep", "-e", "x", "y")
    assert both.exit_code == 2 and "given twice" in both.stderr
    neither = run("grep", "--source", "notes")
    assert neither.exit_code == 2 and "Missing argument 'PATTERN' (or give it as -e PATTERN)" in neither.stderr


def test_grep_invalid_regex_is_one_line(engine: str, cfg: Config, store: Store, run: Callable[..., Result]) -> None:
    with pytest.raises(NotesSearchError, match=r"invalid regex '\(foo'"):
        grep(cfg, store, "(foo", source_ids=["notes"])
    result = run("grep", "--source", "notes", "(foo")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1  # as grep's: a usage error
    assert "invalid regex" in result.output
    empty = run("grep", "--source", "notes", "-e", "")
    assert empty.exit_code == 2 and empty.output.strip() == "Error: empty pattern"
    assert grep(cfg, store, "(foo", source_ids=["notes"], fixed=True) == []
    # an MCP client can send one (JSON "\u0000"); as an argument of rg or git it was a ValueError
    for fixed in (False, True):
        with pytest.raises(NotesSearchError, match="a pattern cannot contain a NUL byte"):
            grep(cfg, store, "db\0", source_ids=["notes"], fixed=fixed)
        # one argument of rg holds at most 128 KiB: past that it was "invalid regex '<the whole
        # pattern>'", a line of megabytes, though the pattern was fine
        with pytest.raises(NotesSearchError, match=r"^a pattern of 200000 characters is too long") as long:
            grep(cfg, store, "x" * 200_000, source_ids=["notes"], fixed=fixed)
        assert len(str(long.value)) < 200
        # rg and git split a pattern at its newlines into alternatives: "a\nb" matched every line
        # holding an a or a b, "\n" every line at all
        for pattern in ("\n", "db\nrestic", "db\r"):
            with pytest.raises(NotesSearchError, match="^a pattern cannot span lines"):
                grep(cfg, store, pattern, source_ids=["notes"], fixed=fixed)
    assert grep(cfg, store, "x" * 10_000, source_ids=["notes"], fixed=True) == []
    spans = run("grep", "--source", "notes", "db\nrestic")
    assert spans.exit_code == 2 and "cannot span lines" in spans.stderr


def test_grep_scope_source_path_and_exclude(engine: str, cfg: Config, store: Store) -> None:
    everywhere = where(grep(cfg, store, "db-01"))
    assert everywhere == ["wiki:guide.md:4", "wiki:ops/runbook.md:3", "notes:devops/zalohovani.md:7"]
    # secret/ is excluded from `notes`, drafts/ from `wiki`: never grepped
    assert not any("secret/" in w or "drafts/" in w for w in everywhere)
    assert where(grep(cfg, store, "port", path="devops")) == [
        "wiki:devops/postgres.md:3",
        "notes:devops/postgres.md:3",
        "other:devops/postgres.md:3",
    ]
    assert where(grep(cfg, store, "port", source_ids=["other"])) == ["other:devops/postgres.md:3"]
    assert where(grep(cfg, store, "port", path="devops/postgres.md", source_ids=["notes"])) == [
        "notes:devops/postgres.md:3"
    ]
    assert grep(cfg, store, "port", path="travel") == []
    assert grep(cfg, store, "hunter2", path="secret") == []
    with pytest.raises(PathOutsideSources):
        grep(cfg, store, "x", path="../other")


@pytest.mark.skipif(not HAVE_RG, reason="ripgrep (rg) is not installed")
def test_grep_rg_survives_a_file_vanishing(cfg: Config, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """rg exits 2 for a file deleted between the walk and the search: not a pattern error."""
    listed = grep_module._workspace_files
    monkeypatch.setattr(
        grep_module,
        "_workspace_files",
        lambda source, folder, problems: [("gone.md", "gone.md"), *listed(source, folder, problems)],
    )
    found = grep(cfg, store, "port", source_ids=["other"])
    assert where(found) == ["other:devops/postgres.md:3"]
    assert found.unsearched == []  # gone: nothing left to search, so nothing missed


def test_git_pathspecs_are_a_superset_of_the_scope() -> None:
    assert grep_module._pathspecs(FileSelection(paths=("notes/**", "docs/*.md", "notes/a/**")), "") == [
        ":(literal)docs",
        ":(literal)notes",
        ":(literal)notes/a",
    ]
    assert grep_module._pathspecs(FileSelection(paths=("README.md",)), "") == []  # a name at any depth
    assert grep_module._pathspecs(FileSelection(paths=("**",)), "ops") == [":(literal)ops"]


def test_grep_max_count_across_sources(engine: str, cfg: Config, store: Store) -> None:
    assert len(grep(cfg, store, "e", max_count=3)) == 3
    assert len(grep(cfg, store, "e", max_count=1000)) > 3


def test_grep_git_mirror_at_indexed_rev(tmp_path: Path, db_url: str | None) -> None:
    cfg = load_config(build_world(tmp_path, db_url))
    store = open_index(cfg, readonly=True)
    indexed = store.source_state("wiki")[0]
    commit(tmp_path / "upstream", {"guide.md": "# Guide\n\nversion two db-01\n", "new.md": "db-01 new\n"}, "v2")
    hits = grep(cfg, store, "db-01", source_ids=["wiki"])
    assert where(hits) == ["wiki:guide.md:4", "wiki:ops/runbook.md:3"]  # v1 content; drafts/ excluded
    assert {h.rev for h in hits} == {indexed}
    assert hits[0].text == "port 8080 db-01"
    assert where(grep(cfg, store, "VERSION ONE", source_ids=["wiki"], ignore_case=True)) == ["wiki:guide.md:3"]
    assert where(grep(cfg, store, "КРЕМЛЬ", source_ids=["wiki"], ignore_case=True)) == ["wiki:ru.md:3"]
    assert where(grep(cfg, store, "restart", source_ids=["wiki"], path="ops", ignore_case=True)) == [
        "wiki:ops/runbook.md:3"
    ]
    assert grep(cfg, store, "db-01", source_ids=["wiki"], path="drafts") == []
    assert where(grep(cfg, store, "--", source_ids=["wiki"], fixed=True)) == []
    with pytest.raises(NotesSearchError, match="invalid regex"):
        grep(cfg, store, "(foo", source_ids=["wiki"])
    store.close()


def test_grep_git_ignores_the_repository_a_hook_points_at(
    cfg: Config, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git hook runs us with GIT_DIR, GIT_OBJECT_DIRECTORY and the like set for its own
    repository: git grep must still read the mirror (the one git environment drops them)."""
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", str(elsewhere))
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(elsewhere / ".git" / "objects"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(elsewhere / ".git" / "index"))
    assert where(grep(cfg, store, "db-01", source_ids=["wiki"])) == ["wiki:guide.md:4", "wiki:ops/runbook.md:3"]


def test_grep_path_that_no_source_has_is_an_error_not_no_matches(run: Callable[..., Result]) -> None:
    """A typo in --path used to answer "no matches" (exit 1), as if the folder had been
    searched; `query --path` says the path does not exist, and so does grep now."""
    for path in ("devps", "wiki:nope/", "notes:trave"):  # trave: a prefix of travel/, no folder
        typo = run("grep", "port", "--path", path)
        assert typo.exit_code == 1 and typo.stdout == "" and "no matches" not in typo.stderr
        assert_one_line_error(typo, "no such file or folder")
    as_json = run("grep", "port", "--path", "devps", "--json")
    assert as_json.exit_code == 1 and as_json.stdout == "" and "--path 'devps'" in as_json.stderr
    # a path some source has: searched, and an empty answer is still "no matches" (exit 1)
    present = run("grep", "zzz-no-such-text", "--path", "devops")
    assert present.exit_code == 1 and "no matches" in present.stderr and "Error" not in present.stderr
    # in one source only (wiki:ops), with hits: unchanged
    assert run("grep", "db-01", "--path", "ops").stdout == "wiki:ops/runbook.md:3: Restart db-01 with care.\n"
    # a folder that exists on disk but the config excludes (secret/ in notes): searched, nothing admitted
    excluded = run("grep", "hunter2", "--path", "notes:secret")
    assert excluded.exit_code == 1 and "no matches" in excluded.stderr


def test_grep_cli_human_json_and_truncation(run: Callable[..., Result], store: Store, world: Path) -> None:
    human = run("grep", "db-01", "--path", "wiki:ops")
    assert human.exit_code == 0, human.output
    assert human.stdout == "wiki:ops/runbook.md:3: Restart db-01 with care.\n"
    data = json.loads(run("grep", "port", "--json", "--source", "other").stdout)
    assert data == {
        "pattern": "port",
        "patterns": ["port"],
        "truncated": False,
        "unsearched": [],
        "results": [
            {
                "source": "other",
                "path": "devops/postgres.md",
                "line": 3,
                "text": "port 6432 via pgbouncer",
                "rev": None,
                "file": str(load_config(world).sources["other"].root / "devops" / "postgres.md"),  # type: ignore[union-attr]
                "ref": "other:devops/postgres.md:3",
            }
        ],
    }
    capped = run("grep", "e", "--max-count", "2", "--json")
    body = json.loads(capped.stdout)
    assert len(body["results"]) == 2 and body["truncated"] is True and "--max-count" in capped.stderr
    none = run("grep", "zzz-no-such-text")
    assert none.exit_code == 1 and none.stdout == "" and "no matches" in none.stderr  # as grep


# ---- toc ---------------------------------------------------------------------------------------


def test_render_toc_groups_by_folder() -> None:
    rows = [
        FileRow("wiki", "b/two.md", "Two", (), ("Two", "Setup", "Setup", "Run"), "Bees", "", 0, 0.0),
        FileRow("wiki", "top.md", "Top\nline", ("x", "y z"), (), None, "", 0, 0.0),
        FileRow("wiki", "a/one.md", "One", ("ops",), ("One",), None, "", 0, 0.0),
        FileRow("wiki", "b/three.md", "", (), (), "Bees", "", 0, 0.0),
    ]
    assert render_toc("wiki", rows) == (
        "# Contents of source wiki\n\n"
        "4 files; generated by notes-search from its index. Paths are relative to the source root: "
        "read one with `notes-search show wiki:PATH`.\n\n"
        "## (top level)\n\n- top.md — Top line [tags: x, y z]\n\n"
        "## a/\n\n- a/one.md — One [tags: ops]\n\n"
        "## b/ — collection: Bees\n\n- b/three.md\n- b/two.md — Two — Setup; Run\n"
    )
    assert "No files indexed yet" in render_toc("empty", [])
    many = render_toc("x", [FileRow("x", "m.md", "M", (), tuple(f"H{i}" for i in range(20)), None, "", 0, 0.0)])
    assert "H11; …" in many and "H12" not in many


def test_write_tocs_and_toc_command(cfg: Config, store: Store, run: Callable[..., Result]) -> None:
    paths = write_tocs(cfg, store, ["notes", "wiki"])
    assert paths == [cfg.toc_dir / "notes.md", cfg.toc_dir / "wiki.md"]
    notes_toc = paths[0].read_text(encoding="utf-8")
    assert "- devops/zalohovani.md — Zálohování serveru [tags: devops, backup] — Obnova" in notes_toc
    assert "## travel/" in notes_toc and "secret/" not in notes_toc
    assert "- ops/runbook.md — Runbook" in paths[1].read_text(encoding="utf-8")
    mtime = paths[0].stat().st_mtime_ns
    write_tocs(cfg, store, ["notes"])
    assert paths[0].stat().st_mtime_ns == mtime  # unchanged content is not rewritten
    assert not list(cfg.toc_dir.glob(".*.tmp"))

    toc_path(cfg, "other").unlink(missing_ok=True)
    result = run("toc", "--source", "other")
    assert result.exit_code == 0, result.output
    assert result.stdout == toc_path(cfg, "other").read_text(encoding="utf-8")
    assert result.stdout.startswith("# Contents of source other\n")
    assert "- devops/postgres.md — PostgreSQL elsewhere" in result.stdout
    everything = run("toc").stdout
    assert [line for line in everything.splitlines() if line.startswith("# ")] == [
        "# Contents of source wiki",
        "# Contents of source notes",
        "# Contents of source other",
    ]
    assert run("toc", "--source", "nope").exit_code == 2
    data = json.loads(run("toc", "--json").stdout)
    assert [(r["source"], r["file"]) for r in data["results"]] == [
        (sid, str(toc_path(cfg, sid))) for sid in ("wiki", "notes", "other")
    ]
    assert data["results"][2]["text"] == toc_path(cfg, "other").read_text(encoding="utf-8")


def test_grep_finds_notes_whose_names_are_nfd_on_disk(engine: str, tmp_path: Path, db_url: str | None) -> None:
    """macOS stores names decomposed; the index keeps NFC. grep opens the disk name and reports
    the index path, as query and show do."""
    import unicodedata

    config_path = build_world(tmp_path / "w", db_url)
    cfg = load_config(config_path)
    notes = cfg.sources["notes"].root
    nfd_name = unicodedata.normalize("NFD", "zálohy-nfd.md")
    (notes / nfd_name).write_text("# Zálohy\n\nnfdmarker here\n", encoding="utf-8")
    sync(cfg)
    with closing(open_index(cfg, readonly=True)) as store:
        assert where(grep(cfg, store, "nfdmarker")) == ["notes:zálohy-nfd.md:3"]
        assert where(grep(cfg, store, "nfdmarker", path="zálohy-nfd.md")) == ["notes:zálohy-nfd.md:3"]


def test_python_fallback_stops_a_runaway_pattern(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str | None
) -> None:
    """Without rg, a catastrophically backtracking regex runs in a child that GREP_TIMEOUT kills:
    one clear error instead of a search (or an MCP worker) that never returns."""
    config_path = build_world(tmp_path / "w", db_url)
    cfg = load_config(config_path)
    (cfg.sources["notes"].root / "redos.md").write_text("a" * 40 + "!\n", encoding="utf-8")
    bin_dir = tmp_path / "bin-without-rg"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(grep_module, "GREP_TIMEOUT", 1.0)
    started = time.monotonic()
    with closing(open_index(cfg, readonly=True)) as store, pytest.raises(NotesSearchError, match="no answer within"):
        grep(cfg, store, "(a+)+$", source_ids=["notes"], path="redos.md")
    assert time.monotonic() - started < 30


def test_show_and_get_say_when_a_path_is_a_folder(run: Callable[..., Result], world: Path) -> None:
    from search.mcp_server import NotesTools
    from search.service import NotesService

    for ref in ("devops", "notes:devops", "devops/"):
        result = run("show", ref)
        assert result.exit_code == 1 and "is a folder, not a file" in result.stderr, (ref, result.output)
    assert "no such file" in run("show", "nope/x.md").stderr
    assert "is a folder" not in run("show", "notes:secret").stderr  # excluded: no hint about it
    with pytest.raises(NotesSearchError, match="is a folder, not a file"):
        NotesTools(NotesService.from_config_file(str(world))).get("devops", None, 10)
