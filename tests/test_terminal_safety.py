"""Hostile note text and file names never reach the terminal as control characters.

A note in a shared repository can hold ESC sequences (OSC retitles the window, CSI clears the
screen), CRs and backspaces that overwrite a line, bidi overrides that reverse text. Every
command's human output and every `Error:` line must show them as visible escapes; `--json`
keeps the exact text (json escapes) without a raw control character in the printed document.

Per-command regression tests use CliRunner with `color=True` (as on a terminal, where click
would otherwise strip CSI sequences itself and hide the bug); the only escape codes allowed in
the output are click's own SGR styles. A hypothesis property then writes notes of random text
or bytes under random names and checks query, show, grep (ripgrep and the Python fallback), toc
and status.

Rerun: .venv/bin/pytest tests/test_terminal_safety.py   (FUZZ_EXAMPLES=300 to fuzz deeper)
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.config import EmbeddingConfig, load_config
from indexer.safe_text import safe_for_terminal, safe_json
from indexer.toc import toc_path
from search import cli as cli_module
from search.logfile import SafeLogFormatter
from tests.conftest import FAKE_EMBEDDING, assert_one_line_error
from tests.fakes import FakeEmbedder

# Written out here, not imported: the test must not share a mistake with the code it checks.
UNSAFE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
CLICK_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # what click.style emits: colour, bold, reset
SYNC_PROGRESS = re.compile(r"\r(?:[a-z]+: [0-9/]+ *| {40}\r)")  # "\rembed: 2/2   ", then a blank-out
HAVE_RG = shutil.which("rg") is not None

OSC = "\x1b]0;HACKED\x07"
CSI = "\x1b[2J"
HOSTILE = {
    "osc.md": f"# t {OSC}\n\nhostilemarker {CSI} clears the screen\nline one\roverwritten\n",
    f"esc{CSI}name.md": "# Escaped name\n\nhostilemarker in a file whose name has CSI\n",
    "new\nline.md": "# Newline name\n\nhostilemarker in a file whose name has a newline\n",
    "bidi\u202etxt.md": "# Bidi \u2066name\u2069\n\nhostilemarker \u202ereversed\u202c and \x9b8-bit CSI\x7f\n",
    "crlf.md": "# CRLF\r\n\r\nhostilemarker windows line\r\nsecond\r\n",
}


def assert_terminal_safe(text: str, what: str = "output") -> None:
    """Lines separated by LF (a CRLF pair also ends a line), with no other control character
    except TAB, click's own styles and sync's progress line (its CRs carry no note text)."""
    plain = SYNC_PROGRESS.sub("", CLICK_STYLE.sub("", text)).replace("\r\n", "\n")
    for line in plain.split("\n"):
        bad = UNSAFE.search(line)
        assert bad is None, f"{what}: raw {bad.group()!r} in {line!r}"


def assert_result_safe(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert_terminal_safe(result.stdout, "stdout")
    assert_terminal_safe(result.stderr, "stderr")


def fake_embedder(config: EmbeddingConfig) -> FakeEmbedder:
    return FakeEmbedder(config)


def write_config(path: Path, root: Path, notes: Path, extra: str = "", db_url: str | None = None) -> Path:
    db_line = f'db: "{db_url}"\n' if db_url else ""
    path.write_text(
        f"root: {json.dumps(str(root))}\n{db_line}{FAKE_EMBEDDING}sources:\n  workspace:\n    notes:\n"
        f'      root: {json.dumps(str(notes))}\n      paths: ["**"]\n      exclude: ["drafts/**"]\n{extra}',
        encoding="utf-8",
    )
    return path


def make_runner(config: Path) -> Callable[..., Result]:
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli_module.cli, ["--config", str(config), *args], color=True, catch_exceptions=False)

    return run


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str | None) -> tuple[Callable[..., Result], Path]:
    monkeypatch.setattr(cli_module, "make_embedder", fake_embedder)
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in HOSTILE.items():
        (notes / name).write_bytes(text.encode())
    (notes / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    (notes / "drafts").mkdir()
    (notes / "drafts" / "wip.md").write_text("# WIP\n\nhostilemarker draft\n", encoding="utf-8")
    (notes / "ops").mkdir()
    (notes / "ops" / "_meta.yaml").write_text(
        json.dumps({"name": "ops", "description": f"Servers {OSC} and {CSI} backups"}), encoding="utf-8"
    )
    (notes / "ops" / "runbook.md").write_text("# Runbook\n\nrestart the servers\n", encoding="utf-8")
    run = make_runner(write_config(tmp_path / "notes-search.yaml", tmp_path, notes, db_url=db_url))
    assert run("sync").exit_code == 0
    return run, notes


# ---- the function itself ---------------------------------------------------------------------------


def test_controls_are_shown_as_escapes() -> None:
    assert safe_for_terminal(f"# t {OSC}") == "# t \\x1b]0;HACKED\\x07"
    assert safe_for_terminal(f"a{CSI}b\rc\x08d\x7f\x9b\x00") == "a\\x1b[2Jb\\rc\\x08d\\x7f\\x9b\\x00"
    assert (
        safe_for_terminal("rev\u202eersed \u2066iso\u2069 \u200f \u061c")
        == "rev\\u202eersed \\u2066iso\\u2069 \\u200f \\u061c"
    )
    assert safe_for_terminal("sep\u2028para\u2029") == "sep\\u2028para\\u2029"
    assert safe_for_terminal("name\udcff.md") == "name\\udcff.md"  # an undecodable file name byte
    assert safe_for_terminal("a\nb") == "a\\nb"
    # kept: what cannot move the cursor or reorder text
    for harmless in (
        "tab\there",
        "Zálohování, Кремль, 漢字",
        "family \U0001f468\u200d\U0001f469",
        "soft\u00adhyphen",
        "back\\slash",
    ):
        assert safe_for_terminal(harmless) == harmless


def test_multiline_keeps_lines_and_crlf_but_not_a_lone_cr() -> None:
    assert safe_for_terminal("one\ntwo\r\nthree\rover\x1b[2K\n", multiline=True) == "one\ntwo\r\nthree\\rover\\x1b[2K\n"


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.text())
def test_any_text_comes_out_safe_and_safe_text_unchanged(text: str) -> None:
    one_line = safe_for_terminal(text)
    assert UNSAFE.search(one_line) is None
    assert_terminal_safe(safe_for_terminal(text, multiline=True))
    assert safe_for_terminal(one_line) == one_line  # idempotent: escaping twice shows the same
    if UNSAFE.search(text) is None:
        assert one_line == text


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(
    st.recursive(
        st.text() | st.integers() | st.none(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    )
)
def test_json_stays_exact_and_printable(data: object) -> None:
    dumped = safe_json(json.dumps(data, ensure_ascii=False, indent=2))
    assert json.loads(dumped) == data
    assert_terminal_safe(dumped)


def test_plain_json_dumps_leaves_c1_and_bidi_raw() -> None:
    """Why safe_json exists: json.dumps(ensure_ascii=False) escapes C0 only."""
    assert "\x9b" in json.dumps("\x9b", ensure_ascii=False) and "\u202e" in json.dumps("\u202e", ensure_ascii=False)


# ---- every command -----------------------------------------------------------------------------------


def test_query_human_escapes_headings_text_and_names(hostile) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    result = run("query", "hostilemarker", "--mode", "lex", "-k", "20", "--explain")
    assert result.exit_code == 0, result.output
    assert_result_safe(result)
    out = CLICK_STYLE.sub("", result.stdout)
    assert "# t \\x1b]0;HACKED\\x07" in out or "t \\x1b]0;HACKED\\x07" in out
    assert "hostilemarker \\x1b[2J clears" in out
    assert "notes:esc\\x1b[2Jname.md:" in out and "notes:new\\nline.md:" in out  # each hit's ref
    assert "\\u202ereversed" in out and "\\x9b8-bit" in out


def test_query_json_is_exact_with_ref_and_printable(hostile) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    result = run("query", "hostilemarker", "--mode", "lex", "-k", "20", "--json")
    assert result.exit_code == 0, result.output
    assert_terminal_safe(result.stdout)
    hits = json.loads(result.stdout)["results"]
    by_path = {hit["path"]: hit for hit in hits}
    assert {f"esc{CSI}name.md", "new\nline.md", "osc.md", "bidi\u202etxt.md"} <= set(by_path)
    assert OSC in by_path["osc.md"]["breadcrumb"] and CSI in by_path["osc.md"]["text"]
    assert "\x9b" in by_path["bidi\u202etxt.md"]["text"]
    for hit in hits:
        assert hit["ref"] == f"{hit['source']}:{hit['path']}:{hit['line']}"


def test_show_keeps_lines_and_escapes_controls(hostile) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    result = run("show", "notes:osc.md")
    assert result.exit_code == 0, result.output
    assert_result_safe(result)
    assert result.stdout.split("\n") == [
        "# t \\x1b]0;HACKED\\x07",
        "",
        "hostilemarker \\x1b[2J clears the screen",
        "line one\\roverwritten",
        "",
    ]
    crlf = run("show", "notes:crlf.md")
    assert crlf.stdout_bytes == HOSTILE["crlf.md"].encode()  # CRLF line ends are line ends, shown as they are
    named = run("show", f"notes:esc{CSI}name.md:3")
    assert named.exit_code == 0 and named.stdout == "hostilemarker in a file whose name has CSI\n"
    both = run("show", "notes:bidi\u202etxt.md", "--json")
    assert_terminal_safe(both.stdout)
    assert json.loads(both.stdout)["results"][0]["text"] == HOSTILE["bidi\u202etxt.md"]


@pytest.mark.parametrize("engine", ["rg", "python"])
def test_grep_escapes_lines_and_names(
    hostile,
    engine: str,
    tmp_path: Path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, _ = hostile
    use_engine(engine, tmp_path, monkeypatch)
    result = run("grep", "hostilemarker|overwritten")
    assert result.exit_code == 0, result.output
    assert_result_safe(result)
    out = CLICK_STYLE.sub("", result.stdout)
    assert "notes:osc.md:3: hostilemarker \\x1b[2J clears the screen" in out
    assert "notes:osc.md:4: line one\\roverwritten" in out
    assert "notes:esc\\x1b[2Jname.md:3:" in out and "notes:new\\nline.md:3:" in out
    data = json.loads(run("grep", "hostilemarker", "--json").stdout)
    assert {hit["path"] for hit in data["results"]} >= {f"esc{CSI}name.md", "new\nline.md"}
    assert all(hit["ref"] == f"{hit['source']}:{hit['path']}:{hit['line']}" for hit in data["results"])


def use_engine(engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ripgrep as installed, or the pure-Python fallback (a PATH with git but without rg)."""
    if engine == "rg":
        if not HAVE_RG:
            pytest.skip("ripgrep (rg) is not installed")
        return
    bin_dir = tmp_path / "bin-without-rg"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "git").exists():
        (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("rg") is None


def test_toc_lines_stay_one_per_file_on_screen_and_on_disk(hostile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    result = run("toc")
    assert result.exit_code == 0, result.output
    assert_result_safe(result)
    lines = result.stdout.split("\n")
    assert "- new\\nline.md — Newline name" in lines
    assert "- osc.md — t \\x1b]0;HACKED\\x07" in lines
    assert any(line.startswith("- esc\\x1b[2Jname.md") for line in lines)
    assert "## ops/ — collection: ops" in lines
    files = [line for line in lines if line.startswith("- ")]
    assert len(files) == 6  # one line per indexed file: the newline in a name did not add one
    on_disk = toc_path(load_config(tmp_path / "notes-search.yaml"), "notes").read_text(encoding="utf-8")
    assert_terminal_safe(on_disk, "the TOC file")  # people `cat` it
    data = json.loads(run("toc", "--json").stdout)
    assert data["results"][0]["text"] == on_disk


def test_collections_and_route_escape_descriptions(hostile) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    for args in (("collections",), ("route", "servers"), ("collections", "--json"), ("route", "servers", "--json")):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert_result_safe(result)
        if "--json" not in args:
            assert "Servers \\x1b]0;HACKED\\x07 and \\x1b[2J backups" in result.stdout
    described = json.loads(run("collections", "--json").stdout)["collections"][0]["description"]
    assert described == f"Servers {OSC} and {CSI} backups"


def test_reindex_says_what_was_skipped_and_why(hostile) -> None:  # type: ignore[no-untyped-def]
    run, notes = hostile
    result = run("reindex", "notes:binary.md")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["notes: +0 ~0 -0, 1 skipped", "    skipped binary.md: binary or not UTF-8"]
    excluded = run("reindex", "drafts/wip.md")
    assert excluded.stdout.splitlines() == [
        "notes: +0 ~0 -0, 1 skipped",
        "    skipped drafts/wip.md: excluded by the config: `sources.workspace.notes.exclude` (drafts/**) leaves it out",
    ]
    (notes / "huge.md").write_text("# Huge\n" + "x" * 100, encoding="utf-8")
    config = notes.parent / "notes-search.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "max_file_bytes: 50\n", encoding="utf-8")
    too_large = run("reindex", "notes:huge.md", "--json")
    source = json.loads(too_large.stdout)["sources"][0]
    assert source["skipped"] == 1 and source["skips"][0]["path"] == "huge.md"
    assert source["skips"][0]["reason"].startswith("too large")
    (notes / f"bin{OSC}.md").write_bytes(b"\0binary")
    hostile_name = run("reindex", f"notes:bin{OSC}.md")
    assert_result_safe(hostile_name)
    assert "    skipped bin\\x1b]0;HACKED\\x07.md: binary or not UTF-8" in hostile_name.stdout.splitlines()


def test_error_lines_quote_names_escaped(hostile) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    for args in (
        ("show", f"notes:gone{OSC}.md"),
        ("show", f"nothing{CSI}\n.md:3"),
        ("query", "x", "--path", f"no{OSC}"),
        ("reindex", f"notes:missing{CSI}.md"),
        ("status", f"no{OSC}"),
        ("show", f"notes:osc.md:{9}"),
    ):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        assert_result_safe(result)
        assert_one_line_error(result)
    # click's own usage errors quote the argument too (exit 2)
    usage = run("query", "x", "--mode", f"lex{OSC}")
    assert usage.exit_code == 2 and "\\x1b]0;HACKED\\x07" in usage.stderr
    assert_result_safe(usage)
    unknown = run("grep", "x", "--source", f"no{CSI}")
    assert unknown.exit_code == 2 and "unknown source 'no\\x1b[2J'" in unknown.stderr, unknown.output
    assert_result_safe(unknown)


def test_show_negative_line_says_lines_start_at_1(hostile) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    line = assert_one_line_error(run("show", "notes:osc.md:-1"), "line -1", "numbered from 1")
    assert "no such file" not in line
    assert_one_line_error(run("show", "notes:osc.md:2:-5"), "count must be at least 1, not -5")
    assert_one_line_error(run("show", "notes:osc.md:0"), "line 0", "numbered from 1")


# ---- a root path with controls: status, sync, init, hooks ------------------------------------------


def git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "T",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "T",
        "GIT_COMMITTER_EMAIL": "t@e",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def test_status_sync_hooks_and_init_escape_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_module, "make_embedder", fake_embedder)
    monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: True)  # summary and progress
    root = tmp_path / f"root{OSC}{CSI}"
    notes = root / "notes"
    notes.mkdir(parents=True)
    (notes / f"a{CSI}.md").write_text("# A\n\ntext\n", encoding="utf-8")
    upstream = tmp_path / "up"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    (upstream / "w.md").write_text("# W\n\nwiki\n", encoding="utf-8")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "one")
    missing = tmp_path / f"gone{OSC}"
    extra = (
        f"  git:\n    wiki:\n      url: {json.dumps(str(upstream))}\n"
        f"    broken:\n      url: {json.dumps(str(missing))}\n"
    )
    config = write_config(root / "notes-search.yaml", root, notes, extra)
    run = make_runner(config)
    synced = run("sync")
    assert synced.exit_code == 1  # the broken source
    assert_result_safe(synced)
    assert "gone\\x1b]0;HACKED\\x07" in synced.stderr
    status = run("status", "--offline")
    assert status.exit_code == 0, status.output
    assert_result_safe(status)
    assert "root\\x1b]0;HACKED\\x07\\x1b[2J" in status.stdout
    assert_terminal_safe(run("status", "--json", "--offline").stdout)
    hooks = run("hooks", "install", "--source", "wiki")
    assert hooks.exit_code == 0, hooks.output
    assert_result_safe(hooks)
    assert "installed " in hooks.stdout and "root\\x1b]0;HACKED" in hooks.stdout
    fresh = root / "other.yaml"
    init = CliRunner().invoke(cli_module.cli, ["--config", str(fresh), "init", str(notes)], color=True)
    assert init.exit_code == 0, init.output
    assert_result_safe(init)
    assert "wrote " in init.stdout and "root\\x1b]0;HACKED" in init.stdout


def test_git_source_names_and_text_are_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str | None
) -> None:
    """Mirror files (git grep -z, blobs at the indexed rev) go through the same boundary."""
    monkeypatch.setattr(cli_module, "make_embedder", fake_embedder)
    upstream = tmp_path / "up"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    for name, text in HOSTILE.items():
        (upstream / name).write_bytes(text.encode())
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "hostile")
    notes = tmp_path / "notes"
    notes.mkdir()
    run = make_runner(
        write_config(
            tmp_path / "notes-search.yaml",
            tmp_path,
            notes,
            f"  git:\n    wiki:\n      url: {json.dumps(str(upstream))}\n",
            db_url,
        )
    )
    assert run("sync").exit_code == 0
    found = run("grep", "hostilemarker", "--source", "wiki")
    assert_result_safe(found)
    out = CLICK_STYLE.sub("", found.stdout)
    assert "wiki:new\\nline.md:3: hostilemarker in a file whose name has a newline" in out.split("\n")
    assert "wiki:esc\\x1b[2Jname.md:3: hostilemarker in a file whose name has CSI" in out.split("\n")
    shown = run("show", "wiki:osc.md")
    assert_result_safe(shown)
    assert shown.stdout.startswith("# t \\x1b]0;HACKED\\x07\n")
    for args in (("toc", "--source", "wiki"), ("query", "hostilemarker", "--mode", "lex", "--source", "wiki")):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert_result_safe(result)


def test_eval_report_escapes_questions(hostile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run, _ = hostile
    questions = tmp_path / "q.jsonl"
    # a miss (another file answers first), so the report prints the question and the expected path
    questions.write_text(
        json.dumps({"question": f"restart {OSC}\nservers", "path": f"esc{CSI}name.md"}) + "\n", encoding="utf-8"
    )
    result = run("eval", str(questions), "--mode", "lex")
    assert result.exit_code == 0, result.output
    assert_result_safe(result)
    assert "  [-] restart \\x1b]0;HACKED\\x07\\nservers" in result.stdout.split("\n")  # one line
    assert "      expected esc\\x1b[2Jname.md (not in top 10); first: notes:ops/runbook.md:1" in result.stdout
    assert_terminal_safe(run("eval", str(questions), "--mode", "lex", "--json").stdout)


def test_watch_log_lines_are_one_line_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The formatter `watch` puts on stderr: a record stays one line, a traceback keeps its lines."""
    formatter = SafeLogFormatter("%(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord(
        "notes_search.watch",
        logging.WARNING,
        __file__,
        1,
        "skipping %s: %s",
        (f"notes:a\n{CSI}.md", f"bad {OSC}"),
        None,
    )
    assert (
        formatter.format(record)
        == "WARNING notes_search.watch: skipping notes:a\\n\\x1b[2J.md: bad \\x1b]0;HACKED\\x07"
    )
    try:
        raise ValueError(f"boom {CSI}")
    except ValueError:
        failed = logging.LogRecord("n", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = formatter.format(failed)
    assert text.count("\n") >= 2 and "boom \\x1b[2J" in text
    assert_terminal_safe(text)

    # and `watch` installs it: a stand-in watcher logs a hostile line, then stops
    class OneLineWatcher:
        running = False
        failure = None

        def __init__(self, *args: object, **kwargs: object) -> None:
            self.stats = type("Stats", (), {"batches": 0, "reconciles": 0, "restarts": 0})()

        def start(self) -> None:
            logging.getLogger("notes_search.watch").warning("indexed %s", f"notes:x{CSI}\nfake line.md")

        def stop(self) -> None:
            pass

    import indexer.watch

    monkeypatch.setattr(indexer.watch, "Watcher", OneLineWatcher)
    notes = tmp_path / "notes"
    notes.mkdir()
    config = write_config(tmp_path / "notes-search.yaml", tmp_path, notes)
    result = CliRunner().invoke(cli_module.cli, ["--config", str(config), "watch"], color=True)
    assert_result_safe(result)
    assert "indexed notes:x\\x1b[2J\\nfake line.md" in result.stderr


def test_log_file_records_stay_one_line(hostile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run, notes = hostile
    (notes / f"fake\n2026-01-01 ERROR forged{OSC}.md").write_bytes(b"\0binary")
    assert run("sync").exit_code == 0
    log = load_config(tmp_path / "notes-search.yaml").log
    lines = log.read_text(encoding="utf-8").split("\n")
    assert not any(line.startswith("2026-01-01 ERROR forged") for line in lines)
    assert any("fake\\n2026-01-01 ERROR forged\\x1b]0;HACKED\\x07.md" in line for line in lines)
    assert_terminal_safe(log.read_text(encoding="utf-8"), "the log file")


def code_lines(path: Path) -> list[tuple[int, str]]:
    """A module's lines with string literals and comments blanked: a help text that shows a
    `print(...)` command is not output."""
    import tokenize

    lines: dict[int, list[str]] = {}
    with open(path, encoding="utf-8") as source:
        for token in tokenize.generate_tokens(source.readline):
            if token.type in (tokenize.STRING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                continue
            lines.setdefault(token.start[0], []).append(token.string)
    return [(number, "".join(parts)) for number, parts in sorted(lines.items())]


def test_no_output_bypasses_the_boundary() -> None:
    """Every print of the CLI goes through search.terminal (echo / styled / echo_json)."""
    repo = Path(__file__).resolve().parent.parent
    offenders = []
    for folder in ("search", "hooks"):
        for path in sorted((repo / folder).glob("*.py")):
            if path.name == "terminal.py":
                continue
            for number, line in code_lines(path):
                if re.search(r"click\.(echo|secho|style)\(|\bprint\(|sys\.std(out|err)\.write", line):
                    offenders.append(f"{path.relative_to(repo)}:{number}: {line.strip()}")
    assert not offenders, "raw output (use search.terminal.echo):\n" + "\n".join(offenders)


# ---- property: any bytes in a note or its name ---------------------------------------------------


EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
PIECES = [
    OSC,
    CSI,
    "\x1b[31m",
    "\x1b",
    "\r",
    "\n",
    "\r\n",
    "\x08",
    "\x00",
    "\x07",
    "\x0b",
    "\x0c",
    "\x7f",
    "\x85",
    "\x9b",
    "\x9d",
    "\u202e",
    "\u2066",
    "\u200f",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\t",
    "# ",
    "## ",
    "- ",
    "fuzzmark",
]
noteish = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=30).map("".join)
name_chars = st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",))
file_name = st.lists(
    st.one_of(st.sampled_from([p for p in PIECES if "\x00" not in p]), st.text(name_chars, max_size=4)),
    min_size=1,
    max_size=6,
).map(lambda parts: ("".join(parts)[:60].lstrip(".") or "x") + ".md")  # a hidden name is no note
body = st.one_of(noteish.map(str.encode), st.binary(max_size=200))


def safe_name(name: str) -> str:
    return "notes:" + safe_for_terminal(name)


@pytest.fixture(scope="module")
def fuzz_world(tmp_path_factory: pytest.TempPathFactory, module_db_url: str | None) -> Path:
    base = tmp_path_factory.mktemp("fuzz")
    (base / "notes").mkdir()
    return write_config(base / "notes-search.yaml", base, base / "notes", db_url=module_db_url)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=file_name, data=body)
def test_no_byte_of_a_note_or_its_name_reaches_the_terminal(
    fuzz_world: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, data: bytes
) -> None:
    monkeypatch.setattr(cli_module, "make_embedder", fake_embedder)
    notes = fuzz_world.parent / "notes"
    for old in notes.iterdir():
        old.unlink()
    try:
        (notes / name).write_bytes(data + b"\n\nfuzzmark end\n")
    except OSError:  # a name too long for the filesystem
        return
    run = make_runner(fuzz_world)
    assert_result_safe(run("sync"))
    ref = f"notes:{name}"
    for args in (
        ("query", "fuzzmark", "--mode", "lex"),
        ("show", ref),
        ("show", f"{ref}:2:3"),
        ("status", "--offline"),
        ("status", ref, "--offline"),
        ("reindex", ref),
    ):
        result = run(*args)
        assert result.exit_code in (0, 1), (args, result.output)
        assert_result_safe(result)
    toc = run("toc")
    assert_result_safe(toc)
    assert sum(line.startswith("- ") for line in toc.stdout.split("\n")) <= 1  # one line per file
    for engine in ("rg", "python") if HAVE_RG else ("python",):
        with monkeypatch.context() as patch:
            use_engine(engine, tmp_path, patch)
            grep = run("grep", "fuzzmark")
        assert_result_safe(grep)
        hits = [line for line in CLICK_STYLE.sub("", grep.stdout).split("\n") if line]
        assert all(line.startswith(f"{safe_name(name)}:") for line in hits), (engine, hits)  # one line per hit
    query = run("query", "fuzzmark", "--mode", "lex", "--json")
    assert_terminal_safe(query.stdout)
    if b"\0" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return
        paths = {hit["path"] for hit in json.loads(query.stdout)["results"]}
        assert paths == {name}, paths  # JSON names the exact file, escapes and all
