"""What notes and folders hold that is not quite right, said per file through the real CLI:
broken or repeated front matter, `_meta.yaml` fields of the wrong type, Git LFS pointers, capped
titles; and messages that say what is true (an excluded file, a dangling remote HEAD, a prefix
that matches no collection)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from indexer.config import load_config
from indexer.store import MIGRATIONS, open_store
from search import cli as cli_module
from tests.conftest import make_config, write_tree
from tests.fakes import FakeEmbedder
from tests.gitutil import commit, init_upstream, snapshot
from tests.pg import both_backends

BROKEN_TITLE = "Monitoring: Prometheus a alerty"  # a colon in a plain scalar: invalid YAML
MONITORING = (
    f"---\ntitle: {BROKEN_TITLE}\ntags:\n  - devops\n  - monitoring\nupdated: 2024-03-01\n---\n"
    "# Monitoring\n\nAlertmanager routes pages to the on-call phone.\n"
)


LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"
)


@pytest.fixture
def run(config_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cli_module, "make_embedder", lambda config: FakeEmbedder(config))
    runner = CliRunner()

    def invoke(*args: str, config: Path = config_path) -> Result:
        return runner.invoke(cli_module.cli, ["--config", str(config), *args], catch_exceptions=False)

    return invoke


def git_config(tmp_path: Path, notes: Path, url: Path, branch: str | None = None) -> Path:
    """A config with the notes folder and one git source `team` reading `url`."""
    branch_key = f", branch: {branch}" if branch else ""
    mirror = tmp_path / "mirrors" / "team.git"
    return make_config(
        tmp_path,
        notes,
        extra_sources=f"  git:\n    team: {{url: {url}, mirror: {mirror}, paths: ['**']{branch_key}}}\n",
    )


def _status_problems(run) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    result = run("status", "--offline", "--json")
    assert result.exit_code == 0, result.output
    [source] = json.loads(result.stdout)["sources"]
    return list(source["front_matter_problems"])


# ------------------------------------------------------------------------------- front matter


@both_backends
def test_broken_front_matter_is_reported_and_its_tags_are_kept(run, notes: Path, config_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(notes, {"devops/monitoring.md": MONITORING})
    result = run("sync")
    assert result.exit_code == 0, result.output
    warning = (
        "warning: notes: devops/monitoring.md: front matter: invalid YAML (line 2, column 18): "
        "mapping values are not allowed "
    )
    [line] = [line for line in result.stderr.splitlines() if "front matter" in line]
    assert line.startswith(warning), result.stderr
    log = load_config(config_path).log.read_text(encoding="utf-8")
    assert "notes:devops/monitoring.md: front matter: invalid YAML (line 2, column 18)" in log
    # the tags and title were read line by line: the note is found by its tag
    tagged = json.loads(run("query", "alertmanager", "--tag", "monitoring", "--mode", "lex", "--json").stdout)
    [hit] = tagged["results"]
    assert hit["path"] == "devops/monitoring.md" and hit["breadcrumb"] == f"{BROKEN_TITLE} > Monitoring"
    # the raw block is metadata, never a snippet or chunk text
    assert hit["line"] == 8 and "tags:" not in hit["text"] and "title:" not in hit["snippet"]
    [problem] = _status_problems(run)
    assert problem["path"] == "devops/monitoring.md"
    assert problem["problem"].startswith("invalid YAML (line 2, column 18): ")
    text = run("status", "--offline").stdout
    assert "    front matter: devops/monitoring.md: invalid YAML (line 2, column 18): " in text
    sync_json = json.loads(run("sync", "--full", "--json").stdout)
    assert [p["path"] for p in sync_json["sources"][0]["front_matter_problems"]] == ["devops/monitoring.md"]
    # mended: the problem is gone from status
    write_tree(notes, {"devops/monitoring.md": MONITORING.replace(BROKEN_TITLE, f"'{BROKEN_TITLE}'")})
    mended = run("sync")
    assert "front matter" not in mended.stderr
    assert _status_problems(run) == []


@both_backends
def test_a_key_written_twice_is_a_front_matter_problem_and_the_first_wins(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(notes, {"ops/dns.md": "---\ntags: [dns]\ntitle: Resolver\ntags: [old]\n---\nunbound resolver\n"})
    result = run("sync")
    assert (
        "warning: notes: ops/dns.md: front matter: duplicate key 'tags' (lines 2 and 4): the first value is used"
        in (result.stderr)
    )
    assert [p["path"] for p in _status_problems(run)] == ["ops/dns.md"]
    found = json.loads(run("query", "unbound", "--tag", "dns", "--mode", "lex", "--json").stdout)["results"]
    assert [hit["path"] for hit in found] == ["ops/dns.md"]
    assert json.loads(run("query", "unbound", "--tag", "old", "--mode", "lex", "--json").stdout)["results"] == []


def test_status_of_a_folder_lists_only_its_own_front_matter_problems(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(notes, {"devops/monitoring.md": MONITORING, "travel/bad.md": "---\na: b: c\n---\nx\n"})
    run("sync")
    devops = json.loads(run("status", "notes:devops", "--offline", "--json").stdout)
    assert [p["path"] for p in devops["sources"][0]["front_matter_problems"]] == ["devops/monitoring.md"]
    assert {p["path"] for p in _status_problems(run)} == {"devops/monitoring.md", "travel/bad.md"}


def test_a_huge_front_matter_title_does_not_make_a_huge_hit(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(notes, {"huge.md": "---\ntitle: " + "T" * 1_000_000 + "\n---\nhugetitlemarker body\n"})
    assert run("sync").exit_code == 0
    result = run("query", "hugetitlemarker", "--mode", "lex")
    assert result.exit_code == 0 and "hugetitlemarker" in result.stdout
    assert len(result.stdout) < 5_000, len(result.stdout)
    [hit] = json.loads(run("query", "hugetitlemarker", "--mode", "lex", "--json").stdout)["results"]
    assert len(hit["breadcrumb"]) == 300 and hit["breadcrumb"].endswith("T…")


@pytest.mark.sqlite_only("it copies the configured SQLite index into another SQLite file")
def test_migrate_carries_the_front_matter_problems(run, notes: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(notes, {"devops/monitoring.md": MONITORING})
    assert run("sync").exit_code == 0
    copy = tmp_path / "copy" / "index.sqlite"
    assert run("migrate", "--to", str(copy)).exit_code == 0
    store = open_store(copy)
    try:
        [problem] = store.front_matter_problems("notes")
    finally:
        store.close()
    assert problem.path == "devops/monitoring.md" and problem.problem.startswith("invalid YAML (line 2, column 18)")


@pytest.mark.sqlite_only("it rewrites the SQLite file into an older schema")
def test_an_index_from_before_front_matter_problems_is_upgraded(run, config_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    db = load_config(config_path).db
    conn = apsw.Connection(str(db))
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    before = [step.name for step in MIGRATIONS].index("front_matter_problems")  # and every later step
    conn.execute("DROP INDEX idx_files_front_matter_problem")
    conn.execute("ALTER TABLE files DROP COLUMN front_matter_problem")
    conn.execute("DROP TABLE window_vectors")
    conn.execute("DROP TABLE window_lines")
    conn.execute(f"PRAGMA user_version = {before}")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(before),))
    conn.close()
    assert run("sync").exit_code == 0
    assert _status_problems(run) == []
    conn = apsw.Connection(str(db))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == version
    conn.close()


# ------------------------------------------------------------------------------- _meta.yaml

ALIAS_BOMB = (
    "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
)


def test_meta_fields_of_the_wrong_type_are_collection_problems(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(
        notes,
        {
            "devops/_meta.yaml": "name: [Dev, Ops]\ndescription: servers\n",
            "travel/_meta.yaml": ALIAS_BOMB + "name: *d\ndescription: {a: 1}\ntags: [trips, *a]\n",
            "cooking/_meta.yaml": "name: Kitchen\ntags: {a: 1}\n",
        },
    )
    result = run("sync")
    assert result.exit_code == 0, result.output
    warnings = sorted(line for line in result.stderr.splitlines() if "_meta.yaml" in line)
    assert warnings == [
        "warning: notes: cooking/_meta.yaml: `tags` is a mapping, not text or a list; the collection has no tags",
        "warning: notes: devops/_meta.yaml: `name` is a list, not text; the collection takes the folder's name",
        "warning: notes: travel/_meta.yaml: `description` is a mapping, not text; the collection has no description",
        "warning: notes: travel/_meta.yaml: `name` is a list, not text; the collection takes the folder's name",
        "warning: notes: travel/_meta.yaml: `tags` holds an entry that is not text; it is left out",
    ]
    collections = {c["name"]: c for c in json.loads(run("collections", "--json").stdout)["collections"]}
    assert set(collections) == {"devops", "travel", "Kitchen"}
    assert collections["devops"]["description"] == "servers"
    assert collections["travel"]["description"] == "" and collections["travel"]["tags"] == ["trips"]
    assert collections["Kitchen"]["tags"] == []
    problems = json.loads(run("sync", "--json").stdout)["sources"][0]["collection_problems"]
    assert sorted({p["path"] for p in problems}) == ["cooking/_meta.yaml", "devops/_meta.yaml", "travel/_meta.yaml"]


# ------------------------------------------------------------------------------- Git LFS pointers


def test_lfs_pointers_are_skipped_with_a_reason_in_workspace_and_git(run, tmp_path: Path, notes: Path) -> None:  # type: ignore[no-untyped-def]
    upstream = init_upstream(tmp_path / "upstream")
    commit(upstream, {"guide.md": "# Guide\n\nteamguidemarker\n", "diagram.md": LFS_POINTER}, time=1_700_000_000)
    write_tree(notes, {"scan.md": LFS_POINTER})
    config = git_config(tmp_path, notes, tmp_path / "upstream")
    before = snapshot(tmp_path / "upstream")
    result = run("sync", "--json", config=config)
    assert result.exit_code == 0, result.output
    reason = "a Git LFS pointer, not the note itself (the content lives in LFS storage)"
    skips = {s["id"]: s["skips"] for s in json.loads(result.stdout)["sources"]}
    assert skips == {
        "notes": [{"path": "scan.md", "reason": reason}],
        "team": [{"path": "diagram.md", "reason": reason}],
    }
    log = load_config(config).log.read_text(encoding="utf-8")
    assert f"notes:scan.md: skipped: {reason}" in log and f"team:diagram.md: skipped: {reason}" in log
    assert json.loads(run("query", "teamguidemarker", "--mode", "lex", "--json", config=config).stdout)["results"]
    # the pointer's object id is not searchable text
    assert json.loads(run("query", "git-lfs", "--mode", "lex", "--json", config=config).stdout)["results"] == []
    assert snapshot(tmp_path / "upstream") == before
    # a pointer replaced by the real note is indexed
    write_tree(notes, {"scan.md": "# Scan\n\nscannedmarker\n"})
    assert run("sync", config=config).exit_code == 0
    assert json.loads(run("query", "scannedmarker", "--mode", "lex", "--json", config=config).stdout)["results"]


def test_a_note_that_only_mentions_lfs_is_indexed(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(notes, {"lfs.md": "version https://git-lfs.github.com/spec/v1 is what a pointer starts with\n"})
    assert run("sync").exit_code == 0
    assert json.loads(run("query", "pointer", "--mode", "lex", "--json").stdout)["results"]


# ------------------------------------------------------------------------------- messages


def test_show_of_a_file_the_config_leaves_out_says_so(run, notes: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(notes, {"devops/hosts.txt": "db-01\n", "devops/sub/x.md": "# X\n"})
    assert run("sync").exit_code == 0
    result = run("show", "notes:devops/hosts.txt")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: notes:devops/hosts.txt: excluded by the config: `sources.workspace.notes.include` (*.md) does not admit it"
    )
    # a real folder is still called a folder, a missing file still missing
    assert "is a folder, not a file" in run("show", "notes:devops/sub").stderr
    assert "no such file" in run("show", "notes:devops/nothing.md").stderr
    # paths and exclude are named the same way
    config = make_config(tmp_path, notes, paths='["devops/**", "cooking/**"]')
    text = config.read_text(encoding="utf-8") + '      exclude: ["devops/secret*"]\n'
    config.write_text(text.replace("      paths:", "      include: ['*.md', '*.txt']\n      paths:"), encoding="utf-8")
    write_tree(notes, {"devops/secret.md": "# S\n"})
    assert (
        "`sources.workspace.notes.paths` (devops/**, cooking/**) does not reach it"
        in run("show", "notes:travel/kazan.md", config=config).stderr
    )
    assert (
        "`sources.workspace.notes.exclude` (devops/secret*) leaves it out"
        in run("show", "notes:devops/secret.md", config=config).stderr
    )


def test_an_obsidian_vaults_settings_and_trash_are_no_notes(run, notes: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`.trash/` holds the notes Obsidian deleted: found again, they came back from the dead."""
    write_tree(
        notes,
        {
            "howto/vpn.md": "# VPN\n\nwireguard peer setup\n",
            ".trash/vpn-old.md": "# VPN old\n\nwireguard obsolete peer\n",
            ".obsidian/snippets/vpn.md": "wireguard snippet\n",
        },
    )
    assert run("sync").exit_code == 0

    def found() -> list[str]:
        lexical = json.loads(run("query", "wireguard", "--mode", "lex", "--json").stdout)["results"]
        grep = json.loads(run("grep", "wireguard", "--json").stdout)["results"]
        assert sorted({hit["path"] for hit in grep}) == sorted({hit["path"] for hit in lexical})
        return sorted({hit["path"] for hit in lexical})

    assert found() == ["howto/vpn.md"]
    shown = run("show", "notes:.trash/vpn-old.md")
    assert shown.exit_code == 1 and shown.stderr.strip() == (
        "Error: notes:.trash/vpn-old.md: excluded by the config: .trash is hidden (its name starts "
        "with '.'); a pattern in `sources.workspace.notes.paths` that names it admits it"
    )
    # named, it is indexed; unnamed again, the next sync takes it out
    config = tmp_path / "notes-search.yaml"
    plain = config.read_text(encoding="utf-8")
    make_config(tmp_path, notes, paths='["**", ".trash/**"]')
    assert run("sync").exit_code == 0
    assert found() == [".trash/vpn-old.md", "howto/vpn.md"]
    config.write_text(plain, encoding="utf-8")
    assert run("sync").exit_code == 0
    assert found() == ["howto/vpn.md"]


def test_a_note_of_properties_only_is_found_by_them(run, notes: Path) -> None:  # type: ignore[no-untyped-def]
    write_tree(
        notes, {"people/jana.md": "---\ntitle: Jana Nováková\nrole: databázová specialistka\ntags: [lidé]\n---\n"}
    )
    assert run("sync").exit_code == 0
    hits = json.loads(run("query", "databázová specialistka", "--mode", "lex", "--json").stdout)["results"]
    assert [(hit["path"], hit["line"], hit["breadcrumb"]) for hit in hits] == [("people/jana.md", 2, "Jana Nováková")]
    tagged = json.loads(run("query", "Jana", "--tag", "lidé", "--mode", "lex", "--json").stdout)["results"]
    assert [hit["path"] for hit in tagged] == ["people/jana.md"]


def _bare_with_dangling_head(tmp_path: Path) -> Path:
    """A bare upstream whose HEAD names `refs/heads/master` while its only branches are `main`
    and `dev`: what renaming the default branch on a server leaves behind."""
    upstream = init_upstream(tmp_path / "work")
    commit(upstream, {"team.md": "# Team\n\ndanglingmarker\n"}, time=1_700_000_000)
    commit(upstream, {"dev.md": "# Dev\n"}, time=1_700_000_100, branch="dev")
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(tmp_path / "work"), str(bare)], check=True)
    subprocess.run(["git", "--git-dir", str(bare), "symbolic-ref", "HEAD", "refs/heads/master"], check=True)
    return bare


def test_a_remote_head_naming_a_missing_branch_is_diagnosed_and_names_branch(run, tmp_path: Path, notes: Path) -> None:  # type: ignore[no-untyped-def]
    bare = _bare_with_dangling_head(tmp_path)
    config = git_config(tmp_path, notes, bare)
    result = run("sync", config=config)
    assert result.exit_code == 1
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: git source 'team' (")]
    assert line.endswith(
        "ls-remote: the remote's HEAD names a branch, which does not exist; set `branch:` for this source "
        "(sources.git.team.branch) to one of its branches: dev, main"
    ), line
    assert "empty repository" not in result.stderr
    # the key it names fixes it
    fixed = git_config(tmp_path, notes, bare, branch="main")
    assert run("sync", config=fixed).exit_code == 0
    assert json.loads(run("query", "danglingmarker", "--mode", "lex", "--json", config=fixed).stdout)["results"]


def test_an_empty_remote_is_still_called_empty(run, tmp_path: Path, notes: Path) -> None:  # type: ignore[no-untyped-def]
    bare = tmp_path / "empty.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(bare)], check=True)
    result = run("sync", config=git_config(tmp_path, notes, bare))
    assert result.exit_code == 1
    assert "ls-remote: the remote has no commits (empty repository?)" in result.stderr


def test_collections_with_a_prefix_that_matches_none_says_so(run, notes: Path, config_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("sync").exit_code == 0
    empty = run("collections", "--prefix", "zzz")
    assert empty.exit_code == 0 and empty.stderr.startswith("no collections yet")
    write_tree(notes, {"devops/_meta.yaml": "name: devops\n", "travel/_meta.yaml": "name: travel\n"})
    assert run("sync").exit_code == 0
    result = run("collections", "--prefix", "zzz")
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr.strip() == (
        "no collection matches the prefix 'zzz' (2 collections in all: `collections` without a prefix lists them)"
    )
    assert run("collections", "--prefix", "dev").stdout.startswith("devops")
    # the MCP tool's notice is the service's, the same words
    from search.mcp_server import NotesTools
    from search.service import NotesService

    tools = NotesTools(NotesService.from_config_file(str(config_path)))
    assert tools.collections("zzz")["notice"] == result.stderr.strip()
    assert tools.collections(None)["notice"] is None
