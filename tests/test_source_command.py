"""`notes-search source add/list/remove` end to end: real config files (hand-commented), a real
git upstream, the real index on both stores."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pygit2
import pytest
from click.testing import CliRunner, Result

from indexer.config import load_config
from search import cli as cli_module
from tests.conftest import FAKE_EMBEDDING, assert_one_line_error, open_index, write
from tests.fakes import FakeEmbedder
from tests.gitutil import commit, init_upstream, snapshot
from tests.pg import both_backends

HAND_WRITTEN = """\
# my notes: edited by hand, then by `notes-search source`
root: {root}   # everything relative lives here
{db_line}{embedding}
sources:
    # the team's repositories
    git: {{}}
    workspace:
        # my own notes, the whole folder
        notes:
            root: {notes}
            paths:
              - "**"
            exclude: ['drafts/**']   # never the drafts
# the fusion constant, tuned by hand
search:
    rrf_k: 60
"""


@pytest.fixture
def hand_config(tmp_path: Path, notes: Path, db_url: str | None) -> Path:
    path = tmp_path / "notes-search.yaml"
    db_line = f'db: "{db_url}"\n' if db_url else ""
    path.write_text(HAND_WRITTEN.format(root=tmp_path, db_line=db_line, embedding=FAKE_EMBEDDING, notes=notes))
    return path


@pytest.fixture
def run(hand_config: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cli_module, "make_embedder", FakeEmbedder)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli_module.cli, ["--config", str(hand_config), *args])

    return invoke


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    path = tmp_path / "team"
    repo = init_upstream(path)
    commit(repo, {"wiki/dns.md": "# DNS\n\nThe resolver runs unbound on port 53.\n"}, time=1_700_000_000)
    return path


def comment_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "#" in line]


def test_add_and_remove_keep_every_comment_and_the_key_order(run, hand_config: Path, upstream: Path) -> None:  # type: ignore[no-untyped-def]
    before = hand_config.read_text()
    added = run("source", "add", "git", "team", str(upstream), "--branch", "main", "--paths", "wiki/**")
    assert added.exit_code == 0, added.output
    text = hand_config.read_text()
    assert comment_lines(before) == comment_lines(text)  # all of them, in order
    assert text.startswith(before.split("    git: {}")[0])  # untouched above the edit
    assert text.endswith(before.split("    workspace:")[1])  # and below it
    config = load_config(hand_config)
    assert list(config.sources) == ["team", "notes"]
    team = config.sources["team"]
    assert team.kind == "git" and team.url == str(upstream) and team.selection.paths == ("wiki/**",)
    (upstream.parent / "more").mkdir()
    assert run("source", "add", "workspace", "more", str(upstream.parent / "more")).exit_code == 0
    assert list(load_config(hand_config).sources) == ["team", "notes", "more"]
    assert comment_lines(before) == comment_lines(hand_config.read_text())
    # removing both brings back the file as written, but for the emptied `git: {}` group
    assert run("source", "remove", "more").exit_code == 0
    assert run("source", "remove", "team").exit_code == 0
    after = hand_config.read_text()
    assert after == before.replace("    git: {}\n", "")


def test_add_git_checks_a_local_repository_and_pins_its_branch(
    run, hand_config: Path, upstream: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """What can never sync is refused now, not by every cron tick after; a working copy's branch
    is written down, so a feature branch checked out later is not what gets indexed."""
    before = hand_config.read_text()
    (tmp_path / "plain").mkdir()
    for url, why in (
        (str(tmp_path / "nope"), "no such folder"),
        (str(tmp_path / "plain"), "not a git repository"),
    ):
        refused = run("source", "add", "git", "x", url)
        assert refused.exit_code == 1 and refused.output.strip() == f"Error: {url}: {why}", refused.output
    no_branch = run("source", "add", "git", "x", str(upstream), "--branch", "nope")
    assert no_branch.exit_code == 1 and "has no branch 'nope'" in no_branch.output
    assert hand_config.read_text() == before  # nothing written
    assert run("source", "add", "git", "team", str(upstream)).exit_code == 0
    team = load_config(hand_config).sources["team"]
    assert (team.branch, team.checkout) == ("main", upstream.resolve())  # type: ignore[union-attr]
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(upstream), str(bare)], check=True)
    assert run("source", "add", "git", "shared", f"file://{bare}").exit_code == 0
    shared = load_config(hand_config).sources["shared"]
    assert (shared.branch, shared.checkout, shared.url) == ("main", None, f"file://{bare}")  # type: ignore[union-attr]
    assert run("sync").exit_code == 0
    # another branch than the one checked out: indexed, but hits do not open in a tree showing another
    repo = pygit2.Repository(str(upstream))
    repo.branches.local.create("dev", repo.head.peel(pygit2.Commit))
    assert run("source", "add", "git", "dev", str(upstream), "--branch", "dev").exit_code == 0
    dev = load_config(hand_config).sources["dev"]
    assert (dev.branch, dev.checkout) == ("dev", None)  # type: ignore[union-attr]
    repo.set_head(repo.head.target)  # detached: which branch to index cannot be told
    detached = run("source", "add", "git", "y", str(upstream))
    assert detached.exit_code == 1 and "a detached HEAD): give --branch" in detached.output


def test_splicing_keeps_indentation_quotes_and_flow_entries(tmp_path: Path, notes: Path) -> None:
    from indexer import config_edit

    path = tmp_path / "c.yaml"
    original = (
        f"{FAKE_EMBEDDING}sources:\n"
        f"  workspace:\n"
        f"    a: {{root: '{notes}', paths: ['**']}}   # flow, single quotes\n"
        f"    # b is next\n"
        f'    b: {{root: "{notes}", paths: ["devops/**"]}}\n'
    )
    path.write_text(original)
    edit = config_edit.add_source(path, "workspace", "c", {"root": str(notes), "paths": ["**"]})
    assert edit.text.startswith(original)  # appended after b, nothing above rewritten
    assert edit.text[len(original) :] == f"    c:\n      root: {notes}\n      paths: ['**']\n"
    removed = config_edit.remove_source(path, "a")  # `# b is next` stays: it is b's
    assert removed.text == original.replace(f"    a: {{root: '{notes}', paths: ['**']}}   # flow, single quotes\n", "")


def test_a_config_without_sources_gets_them(tmp_path: Path, notes: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"# nothing yet\n{FAKE_EMBEDDING}")
    runner = CliRunner()
    result = runner.invoke(cli_module.cli, ["-c", str(path), "source", "add", "workspace", "n", str(notes)])
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert text.startswith(f"# nothing yet\n{FAKE_EMBEDDING}sources:\n  workspace:\n    n:\n")
    assert load_config(path).sources["n"].root == notes


@both_backends
def test_remove_takes_the_rows_and_the_mirror_never_the_notes(
    run, hand_config: Path, upstream: Path, notes: Path
) -> None:  # type: ignore[no-untyped-def]
    assert run("source", "add", "git", "team", str(upstream)).exit_code == 0
    assert run("sync").exit_code == 0
    config = load_config(hand_config)
    mirror = config.sources["team"].mirror  # type: ignore[union-attr]
    assert mirror.is_dir()
    notes_before, upstream_before = snapshot(notes), snapshot(upstream)
    listed = json.loads(run("source", "list", "--json").output)
    assert [s["id"] for s in listed["sources"]] == ["team", "notes"]
    assert listed["sources"][0]["url"] == str(upstream) and listed["sources"][1]["root"] == str(notes)
    result = run("source", "remove", "team", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["removed"] == "team" and data["index_rows_removed"] and data["mirror_removed"] == str(mirror)
    assert not mirror.exists()
    store = open_index(config, readonly=True)
    try:
        assert store.source_ids() == ["notes"]
        assert store.file_rows("team") == []
        assert "walked_files:notes" in store.meta()
    finally:
        store.close()
    removed = run("source", "remove", "notes")
    assert removed.exit_code == 0 and "removed notes" in removed.output
    store = open_index(config, readonly=True)
    try:
        assert store.source_ids() == [] and "walked_files:notes" not in store.meta()
    finally:
        store.close()
    assert snapshot(notes) == notes_before and snapshot(upstream) == upstream_before
    assert load_config(hand_config).sources == {}


def test_remove_keeps_a_mirror_path_that_is_not_ours(run, hand_config: Path, upstream: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    precious = tmp_path / "precious"
    write(precious, {"keep.md": "mine\n"})
    assert run("source", "add", "git", "team", str(upstream), "--mirror", str(precious)).exit_code == 0
    result = run("source", "remove", "team")
    assert result.exit_code == 0 and "the mirror was kept" in result.stderr
    assert (precious / "keep.md").read_text() == "mine\n"
    assert "team" not in load_config(hand_config).sources


# ':' and '/' break refs; a space or an escape makes an id that cannot be typed back unquoted
@pytest.mark.parametrize("name", ["a:b", "a/b", "", "bad name", "x\x1b[31m", "tab\tname", "rtl\u202e"])
def test_bad_names_are_usage_errors(run, hand_config: Path, notes: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    before = hand_config.read_text()
    result = run("source", "add", "workspace", name, str(notes))
    assert result.exit_code == 2 and "source id" in result.output
    assert "\x1b" not in result.output  # the refusal itself shows no escape
    assert hand_config.read_text() == before
    (notes.parent / "more").mkdir()
    assert run("source", "add", "workspace", "team-notes_2.old", str(notes.parent / "more")).exit_code == 0  # fine


def test_a_config_naming_a_source_with_a_control_character_is_refused(tmp_path: Path, notes: Path) -> None:
    """A hand-written config may name a source with a space, as it always could, but not with
    an escape or a bidi override, which would reach every listing."""
    from indexer.config import ConfigError

    spaced = tmp_path / "spaced.yaml"
    spaced.write_text(f'sources:\n  workspace:\n    "my notes": {{root: "{notes}", paths: ["**"]}}\n')
    assert "my notes" in load_config(spaced).sources
    for bad in ("x\\e[31m", "rtl\\u202e"):
        escaped = tmp_path / "escaped.yaml"
        escaped.write_text(f'sources:\n  workspace:\n    "{bad}": {{root: "{notes}", paths: ["**"]}}\n')
        with pytest.raises(ConfigError, match="source id must be"):
            load_config(escaped)


def test_errors_are_one_line_and_change_nothing(run, hand_config: Path, notes: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = hand_config.read_text()
    assert_one_line_error(run("source", "add", "workspace", "notes", str(notes)), "already exists")
    assert_one_line_error(run("source", "add", "workspace", "x", str(tmp_path / "nope")), "not a folder")
    assert_one_line_error(run("source", "remove", "nope"), "unknown source 'nope'")
    # a value the loader refuses: checked before anything is written
    assert_one_line_error(run("source", "add", "workspace", "x", str(notes), "--paths", "../up/**"), "paths")
    assert hand_config.read_text() == before


def test_a_folder_another_source_indexes_is_refused(run, hand_config: Path, notes: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Every note of it would be found twice, under two source names."""
    (notes / "drafts").mkdir(exist_ok=True)
    before = hand_config.read_text()
    assert_one_line_error(
        run("source", "add", "workspace", "again", str(notes)), f"source 'notes' ({notes}) indexes this folder already"
    )
    assert_one_line_error(
        run("source", "add", "workspace", "ops", str(notes / "devops")),
        f"source 'notes' ({notes}) holds this folder and indexes devops/ already; each note would be found "
        "twice (add `exclude: [devops/**]` to source 'notes' first)",
    )
    assert hand_config.read_text() == before
    assert run("source", "add", "workspace", "drafts", str(notes / "drafts")).exit_code == 0  # `notes` excludes it
    inner = tmp_path / "shared" / "team"
    inner.mkdir(parents=True)
    assert run("source", "add", "workspace", "team", str(inner)).exit_code == 0
    assert_one_line_error(
        run("source", "add", "workspace", "shared", str(inner.parent)),
        "lies inside it and indexes team/ already; each note would be found twice (leave it out with --exclude 'team/**')",
    )
    assert run("source", "add", "workspace", "shared", str(inner.parent), "--exclude", "team/**").exit_code == 0
    # one folder, paths that never meet: two sources, no note twice
    split = tmp_path / "split"
    (split / "work").mkdir(parents=True)
    assert run("source", "add", "workspace", "personal", str(split), "--paths", "personal/**").exit_code == 0
    assert run("source", "add", "workspace", "work", str(split), "--paths", "work/**").exit_code == 0
    assert_one_line_error(run("source", "add", "workspace", "all", str(split)), "indexes this folder already")


def test_a_git_checkout_a_workspace_source_indexes_is_refused(run, hand_config: Path, notes: Path) -> None:  # type: ignore[no-untyped-def]
    """A working copy inside the notes folder: its notes came from the mirror and from disk."""
    team = notes / "team"
    commit(init_upstream(team), {"t.md": "# T\n\nteammark\n"}, time=1_700_000_000)
    assert_one_line_error(
        run("source", "add", "git", "team", str(team)),
        f"source 'notes' ({notes}) holds this folder and indexes team/ already; each note would be found twice "
        "(add `exclude: [team/**]` to source 'notes' first)",
    )
    assert run("source", "add", "git", "team", str(team), "--branch", "main").exit_code == 1


def test_a_broken_config_is_not_edited(tmp_path: Path, notes: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("sources:\n  workspace:\n    a: {root: x}\n")  # no paths: refused by the loader
    result = CliRunner().invoke(cli_module.cli, ["-c", str(path), "source", "add", "workspace", "b", str(notes)])
    assert_one_line_error(result, "paths")
    assert path.read_text() == "sources:\n  workspace:\n    a: {root: x}\n"


def test_the_write_is_atomic_and_keeps_the_mode(run, hand_config: Path, notes: Path) -> None:  # type: ignore[no-untyped-def]
    os.chmod(hand_config, 0o600)
    link = hand_config.parent / "link.yaml"
    link.symlink_to(hand_config)
    (notes.parent / "more").mkdir()
    result = CliRunner().invoke(
        cli_module.cli, ["-c", str(link), "source", "add", "workspace", "w", str(notes.parent / "more")]
    )
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.stat(hand_config).st_mode & 0o777 == 0o600
    assert "w" in load_config(hand_config).sources
    assert not [p for p in hand_config.parent.iterdir() if p.name.endswith(".tmp")]


def test_list_text(run) -> None:  # type: ignore[no-untyped-def]
    result = run("source", "list")
    assert result.exit_code == 0
    assert result.output.splitlines()[0].split()[:2] == ["notes", "workspace"]
    assert "exclude drafts/**" in result.output
