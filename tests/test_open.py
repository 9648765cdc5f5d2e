"""From a hit to the note: every hit's `file` on disk (workspace files, a git source's
`checkout:`), the formats that carry it, absolute paths taken back by `show`, OSC 8 links on a
terminal only, and `open REF|RANK` with a fake $EDITOR that records what it was given.

A workspace source, a git source with the user's working copy as `checkout:` and a git source
without one; real repositories, the real SQLite index, the click CLI, and a pty for the links.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from indexer.config import load_config
from indexer.errors import ConfigError
from indexer.sync import run_sync
from tests.conftest import FAKE_EMBEDDING, cli_on, write
from tests.fakes import FakeEmbedder
from tests.test_progress import child_env, run_on_terminal

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "T",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "T",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
CLI_MAIN = "import sys; from search.cli import main; sys.argv[0] = 'notes-search'; main()"
OSC8 = re.compile(r"\x1b\]8;;([^\x1b]*)\x1b\\")

Run = Callable[..., Result]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def commit(repo: Path, files: dict[str, str]) -> None:
    write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change")


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    """notes (workspace), team (git, checkout: its upstream's working tree), wiki (git, none)."""
    write(tmp_path / "notes", {"devops/vpn.md": "# VPN\n\nintro\n\nThe quokkaport is 51820.\n"})
    repos = {}
    for name in ("team", "wiki"):
        repo = tmp_path / f"{name}-upstream"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        commit(repo, {f"ops/{name}.md": f"# {name.title()}\n\nline two\nquokkaport in {name}, version one\n"})
        repos[name] = repo
    config_path = tmp_path / "notes-search.yaml"
    config_path.write_text(
        f"root: {tmp_path}\n{FAKE_EMBEDDING}sources:\n"
        f"  workspace:\n    notes:\n      root: notes\n      paths: ['**']\n"
        f"  git:\n    team:\n      url: {repos['team']}\n      checkout: team-upstream\n"
        f"    wiki:\n      url: {repos['wiki']}\n",
        encoding="utf-8",
    )
    config = load_config(config_path)
    assert not run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding)).failed
    return {"root": tmp_path, "config": config_path, "repos": repos}


@pytest.fixture
def run(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_on(world["config"], monkeypatch)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output)
    return result.stdout


def by_source(hits: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {hit["source"]: hit for hit in hits}


# ---- every hit carries its file -------------------------------------------------------------


def test_query_and_grep_hits_carry_the_file_on_disk(run: Run, world: dict[str, Any]) -> None:
    root: Path = world["root"]
    expected = {
        "notes": str(root / "notes" / "devops" / "vpn.md"),
        "team": str(root / "team-upstream" / "ops" / "team.md"),  # the user's own working copy
        "wiki": None,  # no checkout: the ref and rev name the version in the mirror
    }
    query = by_source(json.loads(ok(run("query", "quokkaport", "--mode", "lex", "--json")))["results"])
    grep = by_source(json.loads(ok(run("grep", "quokkaport", "--json")))["results"])
    for hits in (query, grep):
        assert {source: hit["file"] for source, hit in hits.items()} == expected
        assert hits["wiki"]["rev"] and hits["wiki"]["ref"].startswith("wiki:ops/wiki.md:")
        assert hits["notes"]["rev"] is None
    lines = ok(run("query", "quokkaport", "--mode", "lex", "--format", "jsonl")).splitlines()
    assert {json.loads(line)["source"]: json.loads(line)["file"] for line in lines} == expected


def test_csv_has_file_as_its_last_column(run: Run, world: dict[str, Any]) -> None:
    for command in (["query", "quokkaport", "--mode", "lex"], ["grep", "quokkaport"]):
        rows = list(csv.DictReader(io.StringIO(ok(run(*command, "--format", "csv")))))
        assert list(rows[0])[-1] == "file"
        files = {row["source"]: row["file"] for row in rows}
        assert files["notes"] == str(world["root"] / "notes" / "devops" / "vpn.md") and files["wiki"] == ""


def test_md_links_refs_to_their_files(run: Run, world: dict[str, Any]) -> None:
    url = (world["root"] / "notes" / "devops" / "vpn.md").as_uri()
    for command in (["query", "quokkaport", "--mode", "lex"], ["grep", "quokkaport"]):
        md = ok(run(*command, "--format", "md"))
        assert "[`notes:devops/vpn.md:" in md and f"]({url})" in md
        assert "[`wiki:" not in md and "`wiki:ops/wiki.md:" in md  # nothing on disk to link to


def test_files_format_prints_paths_that_show_and_open_take(run: Run, world: dict[str, Any]) -> None:
    listed = ok(run("query", "quokkaport", "--mode", "lex", "--format", "files")).splitlines()
    assert sorted(listed) == sorted(
        [
            str(world["root"] / "notes" / "devops" / "vpn.md"),
            str(world["root"] / "team-upstream" / "ops" / "team.md"),
            "wiki:ops/wiki.md",
        ]
    )
    shown = ok(run("show", *listed))
    assert shown.count("quokkaport") == 3
    line = ok(run("show", f"{world['root'] / 'notes' / 'devops' / 'vpn.md'}:5:1"))
    assert line == "The quokkaport is 51820.\n"


def test_an_absolute_path_outside_the_sources_is_still_refused(run: Run, world: dict[str, Any]) -> None:
    (world["root"] / "secret.md").write_text("# Secret\n", encoding="utf-8")
    for path in (str(world["root"] / "secret.md"), "/etc/passwd", str(world["root"] / "notes" / ".." / "secret.md")):
        refused = run("show", path)
        assert refused.exit_code == 1 and "absolute" in refused.stderr, refused.output


def test_checkout_must_be_an_existing_folder(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"{FAKE_EMBEDDING}sources:\n  git:\n    team:\n      url: /nowhere\n      checkout: ~/no-such-checkout\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"sources\.git\.team\.checkout: not an existing folder: .*no-such-checkout"):
        load_config(config)


def test_explain_names_the_file(run: Run, world: dict[str, Any]) -> None:
    text = ok(run("query", "quokkaport", "--mode", "lex", "--explain"))
    assert f"    file {world['root'] / 'notes' / 'devops' / 'vpn.md'}" in text
    assert "    file (in the mirror at " in text


# ---- terminal links -------------------------------------------------------------------------


def test_refs_are_hyperlinks_on_a_terminal_only(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    hostile = world["root"] / "notes" / "evil\x1b[31m name.md"
    hostile.write_text("# Evil\n\nquokkaport again\n", encoding="utf-8")
    config = load_config(world["config"])
    assert not run_sync(config, embedder_factory=lambda: FakeEmbedder(config.embedding)).failed
    monkeypatch.delenv("NO_COLOR", raising=False)
    vpn_url = (world["root"] / "notes" / "devops" / "vpn.md").as_uri()
    for args in (["query", "quokkaport", "--mode", "lex"], ["grep", "quokkaport"]):
        code, shown = run_on_terminal("--config", str(world["config"]), *args)
        urls = OSC8.findall(shown)
        assert code == 0 and vpn_url in urls, shown
        assert (world["root"] / "team-upstream" / "ops" / "team.md").as_uri() in urls
        assert not any("wiki" in url for url in urls)  # no file on disk: no link
        assert "%1B%5B31m%20name.md" in " ".join(urls)  # the name's escape is percent-encoded in the URL
        # ... and visible in the text: the only ESC bytes left are the links' and the styles'
        assert "\\x1b[31m name.md" in shown
        assert not re.search(r"\x1b(?!\]8;;|\\|\[[0-9;]*m)", shown), shown
        assert "\x1b]8;;\x1b\\" in shown  # every link is closed
        with monkeypatch.context() as plain_env:
            plain_env.setenv("NO_COLOR", "1")
            _, plain = run_on_terminal("--config", str(world["config"]), *args)
        assert "\x1b]8" not in plain and "quokkaport" in plain
        piped = subprocess.run(
            [sys.executable, "-c", CLI_MAIN, "--config", str(world["config"]), *args],
            env=child_env(),
            capture_output=True,
            text=True,
        )
        assert piped.returncode == 0 and "\x1b" not in piped.stdout and "notes:devops/vpn.md:" in piped.stdout


# ---- open -----------------------------------------------------------------------------------


@pytest.fixture
def editor(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], dict[str, Any]]:
    """A fake $EDITOR recording its arguments, whether the file is writable, and its text."""
    record = tmp_path / "editor-record.json"
    script = tmp_path / "fake-editor"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "path = sys.argv[-1]\n"
        f"json.dump({{'argv': sys.argv[1:], 'writable': os.access(path, os.W_OK), "
        f"'mode': os.stat(path).st_mode & 0o777, 'text': open(path, encoding='utf-8').read()}}, "
        f"open({str(record)!r}, 'w'))\n"
        "sys.exit(int(os.environ.get('FAKE_EDITOR_EXIT', '0')))\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", f"{script} --wait")
    # the read-only copies `open` leaves for the editor go to pytest's folders, not the real /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("editor-copies")))

    def recorded() -> dict[str, Any]:
        data: dict[str, Any] = json.loads(record.read_text(encoding="utf-8"))
        record.unlink()
        return data

    return recorded


def test_open_a_workspace_ref_in_place_at_its_line(run: Run, world: dict[str, Any], editor: Any) -> None:
    opened = run("open", "notes:devops/vpn.md:5")
    assert opened.exit_code == 0 and opened.stderr == "", opened.output
    assert editor()["argv"] == ["--wait", "+5", str(world["root"] / "notes" / "devops" / "vpn.md")]
    assert run("open", "devops/vpn.md").exit_code == 0  # a bare path; no line: no +N
    assert editor()["argv"] == ["--wait", str(world["root"] / "notes" / "devops" / "vpn.md")]


def test_a_name_macos_stored_decomposed_opens_as_spelled_on_disk(run: Run, world: dict[str, Any], editor: Any) -> None:
    """The index holds NFC paths; a folder and file named in NFD (notes synced from a Mac) are
    given to the editor, `--format files` and JSON as they are on disk: the NFC path does not
    exist, and an editor opened an empty new note there."""
    notes: Path = world["root"] / "notes"
    folder = notes / unicodedata.normalize("NFD", "Účty")
    folder.mkdir()
    on_disk = folder / unicodedata.normalize("NFD", "faktura-září.md")
    on_disk.write_text("# Faktura\n\nthe fakturamark of September\n", encoding="utf-8")
    ok(run("sync"))
    hits = json.loads(ok(run("query", "fakturamark", "--mode", "lex", "--json")))["results"]
    assert [(hit["path"], hit["file"]) for hit in hits] == [("Účty/faktura-září.md", str(on_disk))]
    assert ok(run("query", "fakturamark", "--mode", "lex", "--format", "files")).splitlines() == [str(on_disk)]
    assert ok(run("grep", "fakturamark", "--format", "files")).splitlines() == [str(on_disk)]
    assert run("open", "1").exit_code == 0
    assert editor()["argv"] == ["--wait", "+3", str(on_disk)]
    assert run("open", "notes:Účty/faktura-září.md").exit_code == 0
    assert editor()["argv"] == ["--wait", str(on_disk)]


def test_open_a_git_hit_from_its_checkout(run: Run, world: dict[str, Any], editor: Any) -> None:
    opened = run("open", "team:ops/team.md:4")
    assert opened.exit_code == 0 and opened.stderr == "", opened.output
    seen = editor()
    assert seen["argv"] == ["--wait", "+4", str(world["repos"]["team"] / "ops" / "team.md")] and seen["writable"]
    # the working copy moved on since the sync: opened there all the same, and said so
    write(world["repos"]["team"], {"ops/team.md": "# Team\n\nnew first line\nline two\n"})
    moved = run("open", "team:ops/team.md:4")
    assert moved.exit_code == 0 and editor()["argv"][-1] == str(world["repos"]["team"] / "ops" / "team.md")
    assert moved.stderr.startswith("notice: ") and "differs from the indexed version" in moved.stderr


def test_open_a_git_hit_without_checkout_as_a_read_only_copy(run: Run, world: dict[str, Any], editor: Any) -> None:
    commit(world["repos"]["wiki"], {"ops/wiki.md": "# Wiki\n\nversion two, not indexed yet\n"})
    opened = run("open", "wiki:ops/wiki.md:3")
    assert opened.exit_code == 0, opened.output
    seen = editor()
    copy = Path(seen["argv"][-1])
    assert seen["argv"][:2] == ["--wait", "+3"] and copy.name == "wiki.md"
    assert seen["text"] == "# Wiki\n\nline two\nquokkaport in wiki, version one\n"  # the indexed version
    assert seen["mode"] == 0o444 and stat.S_IMODE(copy.parent.stat().st_mode) == 0o700
    assert not str(copy).startswith(str(world["root"]))  # never a file of the mirror or the upstream
    assert opened.stderr.count("\n") == 1 and "read-only copy" in opened.stderr and str(copy) in opened.stderr
    assert "checkout" in opened.stderr


def test_open_rank_opens_that_hit_of_the_last_query(run: Run, world: dict[str, Any], editor: Any) -> None:
    hits = json.loads(ok(run("query", "quokkaport", "--mode", "lex", "--json")))["results"]
    remembered = world["root"] / "db" / "last-query.json"
    assert stat.S_IMODE(remembered.stat().st_mode) == 0o600
    for rank, hit in enumerate(hits, 1):
        assert run("open", str(rank)).exit_code == 0
        argv = editor()["argv"]
        assert argv[1] == f"+{hit['match_line']}", (rank, hit)
        assert argv[2] == (hit["file"] or argv[2]) and argv[2].endswith(hit["path"].rsplit("/", 1)[-1])
    text = ok(run("query", "quokkaport", "--mode", "lex"))  # the text output names each hit's rank
    assert all(f"  #{rank}" in text for rank in range(1, len(hits) + 1))


def test_bad_rank_and_bad_refs_are_one_line_errors(run: Run, world: dict[str, Any], editor: Any) -> None:
    never = run("open", "1")
    assert never.exit_code == 1 and never.stderr.startswith("Error: no query to take hit 1 from"), never.output
    assert run("query", "quokkaport", "--mode", "lex").exit_code == 0
    past = run("open", "99")
    assert past.exit_code == 1 and past.stderr == "Error: no hit 99: the last query ('quokkaport') had hits 1-3\n"
    assert run("open", "0").exit_code == 2
    assert run("open", "-1").exit_code == 2
    assert run("open").exit_code == 2
    for bad in ("notes:nope.md", "notes:../x.md", "/etc/passwd"):
        failed = run("open", bad)
        assert failed.exit_code == 1 and failed.stderr.startswith("Error:") and failed.stderr.count("\n") == 1, bad
    assert not (world["root"] / "editor-record.json").exists()  # no editor was started for any of them


def test_a_long_last_query_is_named_cut_in_the_error(run: Run, world: dict[str, Any], editor: Any) -> None:
    assert run("query", "quokkaport " * 10_000, "--mode", "lex").exit_code == 0  # 110,000 bytes
    past = run("open", "99")
    assert past.exit_code == 1 and past.stderr.count("\n") == 1, past.output[:300]
    assert past.stderr.startswith("Error: no hit 99: the last query ('quokkaport quokkaport ")
    assert past.stderr.endswith("… [cut: the query has 110,000 bytes]') had hits 1-3\n") and len(past.stderr) < 2100


def test_an_absolute_path_is_refused_for_where_it_lies(run: Run, world: dict[str, Any], editor: Any) -> None:
    left_out = world["root"] / "notes" / "devops" / "vpn.txt"  # inside the folder, not *.md
    left_out.write_text("quokkaport\n", encoding="utf-8")
    for command in ("open", "show"):
        outside = run(command, "/etc/passwd")
        assert outside.exit_code == 1 and outside.stderr == (
            "Error: '/etc/passwd': outside every source's folder"
            " (an absolute path is taken only inside a source's root or checkout)\n"
        ), outside.output
        inside = run(command, f"{left_out}:1")
        assert inside.exit_code == 1, inside.output
        assert inside.stderr == (
            "Error: notes:devops/vpn.txt: excluded by the config: `sources.workspace.notes.include` (*.md) does not admit it\n"
        ), inside.output
    assert not (world["root"] / "editor-record.json").exists()


def test_editors_that_read_plus_n_as_a_file_get_the_line_their_way(
    run: Run, world: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`code -w +5 FILE` made VS Code open an empty file named "+5" beside the note. A script
    recording its arguments, installed under each editor's name, sees what that editor gets."""
    note = str(world["root"] / "notes" / "devops" / "vpn.md")
    record = tmp_path / "argv.json"
    (tmp_path / "bin").mkdir()
    monkeypatch.delenv("VISUAL", raising=False)

    def opened_with(name: str, ref: str) -> list[str]:
        script = tmp_path / "bin" / name
        script.write_text(
            f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
        )
        script.chmod(0o755)
        monkeypatch.setenv("EDITOR", f"{script} -w")
        assert run("open", ref).exit_code == 0
        argv: list[str] = json.loads(record.read_text())
        return argv

    assert opened_with("code", "notes:devops/vpn.md:5") == ["-w", "-g", f"{note}:5"]
    assert opened_with("codium", "notes:devops/vpn.md:5") == ["-w", "-g", f"{note}:5"]
    assert opened_with("subl", "notes:devops/vpn.md:5") == ["-w", f"{note}:5"]
    assert opened_with("nvim", "notes:devops/vpn.md:5") == ["-w", "+5", note]
    assert opened_with("code", "notes:devops/vpn.md") == ["-w", note]  # no line: the file alone


def test_visual_wins_and_the_editors_exit_code_is_kept(
    run: Run, world: dict[str, Any], editor: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VISUAL", os.environ["EDITOR"].replace("--wait", "--visual"))
    monkeypatch.setenv("FAKE_EDITOR_EXIT", "3")
    assert run("open", "notes:devops/vpn.md").exit_code == 3
    assert editor()["argv"][0] == "--visual"
    monkeypatch.setenv("VISUAL", str(world["root"] / "no-such-editor"))
    missing = run("open", "notes:devops/vpn.md")
    assert missing.exit_code == 1 and "cannot start the editor" in missing.stderr


# ---- the fzf recipe in README ---------------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"


def fzf_recipe() -> dict[str, str]:
    """The recipe's three commands as README writes them: reload, preview, enter."""
    block = re.search(r"```sh\n(fzf --disabled.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert block, "README lost its fzf recipe"
    text = block[1]
    return {
        "reload": re.search(r"change:reload:(.*?)'", text)[1],  # type: ignore[index]
        "preview": re.search(r"--preview '(.*?)'", text)[1],  # type: ignore[index]
        "enter": re.search(r"enter:become\((.*?)\)'", text)[1],  # type: ignore[index]
    }


def test_the_fzf_recipes_commands_give_what_fzf_parses(world: dict[str, Any], editor: Any, tmp_path: Path) -> None:
    """fzf itself is not run: its placeholders are filled as fzf fills them (quoted), and each
    command runs in a shell as fzf runs it, against the real CLI."""
    import shlex

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "notes-search"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{CLI_MAIN}" "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "NOTES_SEARCH_CONFIG": str(world["config"]),
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "NOTES_SEARCH_NO_DAEMON": "1",
        "TMPDIR": tempfile.gettempdir(),  # the editor fixture's folder for read-only copies
    }
    recipe = fzf_recipe()

    def shell(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, check=False)

    typed = "quokkaport"
    listed = shell(recipe["reload"].replace("{q}", shlex.quote(typed)))
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert len(rows) == 3 and all(len(row) == 3 for row in rows)  # ref, breadcrumb, snippet
    assert all(re.fullmatch(r"(notes|team|wiki):\S+\.md:[0-9]+", row[0]) for row in rows)
    assert all(typed in row[2] for row in rows)
    for ref, _, _ in rows:
        preview = shell(recipe["preview"].replace("{1}", shlex.quote(ref)))
        assert preview.returncode == 0 and typed in preview.stdout.splitlines()[0], preview.stderr
        opened = shell(recipe["enter"].replace("{1}", shlex.quote(ref)))
        assert opened.returncode == 0, opened.stderr
        assert editor()["argv"][1] == f"+{ref.rsplit(':', 1)[1]}"
    # a query that looks like a flag, an empty one, and one that finds nothing keep the list usable
    for odd in ("--mode", "", "xyzzynotfound"):
        shown = shell(recipe["reload"].replace("{q}", shlex.quote(odd)))
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, (odd, shown.stderr)
