"""Git sources through the real sync (indexer.sync.run_sync): tree diffs into a real SQLite index.

Upstreams are local repositories built with pygit2 (explicit commit times), mirrored under
tmp_path by the driver. The reference for "correct" is always a fresh full index of the same
head built in another folder: an incremental index must be indistinguishable from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pygit2
import pytest
import yaml
from click.testing import CliRunner

from indexer.config import Config, EmbeddingConfig, GitSource, load_config
from indexer.freshness import git_freshness
from indexer.store import SearchScope, Store
from indexer.sync import SyncReport, run_reindex, run_sync
from search import cli as cli_module
from search.cli.context import CliContext
from search.mcp_server import NotesTools
from tests.conftest import keywords, open_index, wait_for, write
from tests.fakes import FakeEmbedder
from tests.gitutil import Symlink, commit, init_upstream
from tests.store_checks import (
    chunk_fingerprint,
    embedded_without_vector,
    fts_integrity_check,
    orphan_vectors,
    write_mark,
)

T0 = 1_600_000_000
DAY = 86_400
EMBEDDING = {"provider": "ollama", "model": "fake:1", "endpoint": "http://127.0.0.1:9", "dims": 64}


def note(title: str, body: str) -> str:
    return f"# {title}\n\n{body}\n"


class Index:
    """A config file in its own folder (db, log, mirrors inside) and a sync with a fake embedder."""

    # where each new index lives: None for the SQLite file in its folder; with
    # NOTES_SEARCH_TEST_BACKEND=postgres, `index_backend` hands out a schema of its own to each
    new_db_url: Callable[[], str | None] = staticmethod(lambda: None)

    def __init__(
        self,
        home: Path,
        git: dict[str, dict[str, Any]],
        workspace: dict[str, dict[str, Any]] | None = None,
        embedding: dict[str, Any] = EMBEDDING,
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.path = home / "notes-search.yaml"
        self.embedding = embedding
        self.embedder = FakeEmbedder(EmbeddingConfig(**embedding))
        self.db_url = type(self).new_db_url()
        self.configure(git, workspace)

    def configure(self, git: dict[str, dict[str, Any]], workspace: dict[str, dict[str, Any]] | None = None) -> None:
        sources: dict[str, Any] = {"git": git}
        if workspace:
            sources["workspace"] = workspace
        # `$$` is a literal `$` in config paths (a home folder may be named like a variable)
        root = str(self.home).replace("$", "$$")
        raw: dict[str, Any] = {"root": root, "embedding": self.embedding, "sources": sources}
        if self.db_url:
            raw["db"] = self.db_url
        self.path.write_text(yaml.safe_dump(raw))

    @property
    def config(self) -> Config:
        return load_config(self.path)

    def sync(self, **kwargs: Any) -> SyncReport:
        report = run_sync(self.config, embedder_factory=lambda: self.embedder, **kwargs)
        assert not report.locked
        return report

    def store(self) -> Store:
        return open_index(self.config)

    def state(self) -> tuple[list[tuple[object, ...]], list[dict[str, object]]]:
        """(chunk fingerprint, file rows): everything an index holds, id-independent."""
        with closing(self.store()) as store:
            return chunk_fingerprint(store), store.file_rows()

    def rev(self, source_id: str = "notes") -> str | None:
        with closing(self.store()) as store:
            return store.source_state(source_id)[0]

    def mirror(self, source_id: str = "notes") -> Path:
        return self.home / "mirrors" / f"{source_id}.git"

    def search(self, word: str) -> set[str]:
        """Paths of chunks that contain `word` (FTS), as a search would find them."""
        with closing(open_index(self.config, readonly=True)) as store:
            ids = [chunk_id for chunk_id, _ in store.fts_search(keywords(word), 50, SearchScope())]
            return {row.path for row in store.chunk_rows(ids).values()}


@pytest.fixture(autouse=True)
def index_backend(backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """On PostgreSQL every Index a test builds (a fresh one to compare with, say) gets its own."""
    if backend != "postgres":
        yield
        return
    server = request.getfixturevalue("pg_server")
    made: list[str] = []

    def new_db_url() -> str:
        made.append(server.create_index())
        return made[-1]

    monkeypatch.setattr(Index, "new_db_url", staticmethod(new_db_url))
    yield
    for url in made:
        server.drop_index(url)


@pytest.fixture
def upstream(tmp_path: Path) -> pygit2.Repository:
    return init_upstream(tmp_path / "upstream")


def url(repo: pygit2.Repository) -> str:
    return str(repo.workdir).rstrip("/")


@pytest.fixture
def index(tmp_path: Path, upstream: pygit2.Repository) -> Index:
    return Index(tmp_path / "ix", {"notes": {"url": url(upstream)}})


def fresh(tmp_path: Path, index: Index, name: str = "fresh") -> Index:
    """A from-scratch index of the same sources in another folder (own mirror, own DB)."""
    raw = yaml.safe_load(index.path.read_text())
    other = Index(tmp_path / name, raw["sources"]["git"], raw["sources"].get("workspace"))
    other.sync()
    return other


def assert_same_as_fresh(tmp_path: Path, index: Index, name: str = "fresh") -> None:
    expected = fresh(tmp_path, index, name).state()
    assert index.state() == expected
    with closing(index.store()) as store:
        assert orphan_vectors(store) == [] and embedded_without_vector(store) == []
        fts_integrity_check(store)


def paths(index: Index, source_id: str = "notes") -> set[str]:
    with closing(index.store()) as store:
        return {r.path for r in store.file_rows(source_id)}


# ---- first index and incremental changes -----------------------------------------------------------


def test_first_index_then_add_modify_delete_rename(tmp_path: Path, upstream: pygit2.Repository, index: Index) -> None:
    rev1 = commit(
        upstream,
        {
            "a.md": note("Alpha", "restic backup of db-01 every night"),
            "b.md": note("Beta", "WireGuard tunnel on port 51820"),
            "c.md": note("Gamma", "sourdough starter feeding"),
            "d.md": note("Delta", "kvas recipe with rye bread"),
        },
        time=T0,
    )
    report = index.sync()
    assert (report.sources[0].added, report.sources[0].rev, index.rev()) == (4, rev1, rev1)
    assert paths(index) == {"a.md", "b.md", "c.md", "d.md"}

    rev2 = commit(
        upstream,
        {
            "e.md": note("Epsilon", "new note about borsch"),
            "b.md": note("Beta", "WireGuard tunnel moved to port 51821"),
            "c.md": None,
            "d.md": None,
            "food/d.md": note("Delta", "kvas recipe with rye bread"),  # renamed, same content
        },
        time=T0 + DAY,
    )
    s = index.sync().sources[0]
    assert (s.added, s.updated, s.deleted, s.rev, index.rev()) == (2, 1, 2, rev2, rev2)
    assert paths(index) == {"a.md", "b.md", "e.md", "food/d.md"}
    assert_same_as_fresh(tmp_path, index)


def test_rename_reuses_vectors(upstream: pygit2.Repository, index: Index) -> None:
    text = note("Pelmeni", "dough, filling, freezing in batches\n\n## Filling\n\nbeef and pork, onion")
    commit(upstream, {"cooking/pelmeni.md": text, "other.md": note("Other", "x")}, time=T0)
    index.sync()
    embedded = index.embedder.texts_embedded
    assert embedded > 0
    commit(upstream, {"cooking/pelmeni.md": None, "archive/pelmeni-2024.md": text}, time=T0 + DAY)
    s = index.sync().sources[0]
    assert (s.added, s.deleted) == (1, 1)
    assert index.embedder.texts_embedded == embedded  # the vectors moved with the text
    with closing(index.store()) as store:
        assert store.counts()["pending"] == 0 and orphan_vectors(store) == []
        assert {r[1] for r in chunk_fingerprint(store)} == {"archive/pelmeni-2024.md", "other.md"}


def test_updated_at_is_the_commit_time_of_the_last_change(upstream: pygit2.Repository, index: Index) -> None:
    commit(upstream, {"a.md": note("A", "one"), "b.md": note("B", "two")}, time=T0)
    commit(upstream, {"b.md": note("B", "two, edited")}, time=T0 + DAY)
    index.sync()
    commit(upstream, {"c.md": note("C", "three")}, time=T0 + 2 * DAY)
    index.sync()
    with closing(index.store()) as store:
        times = {r.path: r.updated_at for r in store.file_rows("notes")}
    assert times == {"a.md": T0, "b.md": T0 + DAY, "c.md": T0 + 2 * DAY}


@pytest.mark.parametrize("gc_before_sync", [False, True], ids=["old-rev-kept", "old-rev-pruned"])
def test_force_push_ends_in_a_fresh_index(
    tmp_path: Path, upstream: pygit2.Repository, index: Index, gc_before_sync: bool
) -> None:
    base = commit(upstream, {"keep.md": note("Keep", "stays"), "edit.md": note("Edit", "v1")}, time=T0)
    commit(upstream, {"gone.md": note("Gone", "only on the old branch"), "edit.md": note("Edit", "v2")}, time=T0 + DAY)
    old = commit(upstream, {"keep.md": note("Keep", "stays, edited on the old branch")}, time=T0 + 2 * DAY)
    index.sync()
    assert index.rev() == old
    # history rewritten: a new tip on top of `base`, the old commits are no longer reachable
    new = commit(
        upstream,
        {"edit.md": note("Edit", "v3 after the rewrite"), "new.md": note("New", "x")},
        time=T0 + 3 * DAY,
        parents=[base],
    )
    if gc_before_sync:  # a mirror fetched by hand and gc'ed: the indexed rev is gone from it
        git = ["git", "--git-dir", str(index.mirror())]
        subprocess.run([*git, "fetch", "--quiet", "--prune", "--force", url(upstream), "+refs/*:refs/*"], check=True)
        subprocess.run([*git, "gc", "--quiet", "--prune=now"], check=True)
        assert not pygit2.Repository(str(index.mirror())).get(old)
    report = index.sync()
    assert report.sources[0].rev == new and index.rev() == new
    assert paths(index) == {"keep.md", "edit.md", "new.md"}
    assert_same_as_fresh(tmp_path, index)


# ---- scope -----------------------------------------------------------------------------------------


def test_scope_paths_include_exclude(tmp_path: Path, upstream: pygit2.Repository) -> None:
    commit(
        upstream,
        {
            "notes/a.md": note("A", "in scope"),
            "notes/b.txt": "not markdown",
            "notes/c.markdown": "# other extension",
            "notes/img.png": b"\x89PNG\r\n\x1a\n\x00",
            "notes/private/p.md": note("P", "exclude wins over paths"),
            "notes/moving.md": note("Moving", "leaves the scope next"),
            "outside/in.md": note("In", "enters the scope next"),
            "README.md": note("Readme", "outside paths"),
        },
        time=T0,
    )
    index = Index(
        tmp_path / "ix",
        {
            "notes": {
                "url": url(upstream),
                "paths": ["notes/**"],
                "exclude": ["notes/private/**"],
            }
        },
    )
    index.sync()
    assert paths(index) == {"notes/a.md", "notes/moving.md"}

    commit(
        upstream,
        {
            "notes/moving.md": None,
            "archive/moving.md": note("Moving", "leaves the scope next"),
            "outside/in.md": None,
            "notes/in.md": note("In", "enters the scope next"),
            "notes/private/p.md": note("P", "edited, still excluded"),
            "notes/b.txt": "still not markdown, edited",
        },
        time=T0 + DAY,
    )
    s = index.sync().sources[0]
    assert (s.added, s.updated, s.deleted) == (1, 0, 1)
    assert paths(index) == {"notes/a.md", "notes/in.md"}
    assert_same_as_fresh(tmp_path, index)


def test_scope_change_in_the_config_applies_without_a_new_commit(
    tmp_path: Path, upstream: pygit2.Repository, index: Index
) -> None:
    commit(upstream, {"a.md": note("A", "a"), "drafts/b.md": note("B", "b")}, time=T0)
    index.sync()
    assert paths(index) == {"a.md", "drafts/b.md"}
    index.configure({"notes": {"url": url(upstream), "exclude": ["drafts/**"]}})
    embedded = index.embedder.texts_embedded
    index.sync()
    assert paths(index) == {"a.md"}
    index.configure({"notes": {"url": url(upstream)}})
    index.sync()
    assert paths(index) == {"a.md", "drafts/b.md"}
    assert index.embedder.texts_embedded == embedded + 1  # only drafts/b.md's one chunk: a.md's vector is reused
    assert_same_as_fresh(tmp_path, index)


def test_hidden_files_an_older_index_holds_leave_it_without_a_new_commit(
    tmp_path: Path, upstream: pygit2.Repository, index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index made when hidden names were indexed (`.obsidian/`, committed by a vault's git
    plugin): the rule is part of the scope, so the next tick reads the tree whole and drops them
    (a tree diff only visits paths that changed)."""
    import indexer.sync
    from indexer.globs import FileSelection

    commit(upstream, {"a.md": note("A", "a"), ".obsidian/app.md": note("App", "settings")}, time=T0)
    with monkeypatch.context() as older:
        older.setattr(FileSelection, "hidden", lambda self, path: False)
        older.setattr(indexer.sync, "SELECTION_RULES", 1)
        index.sync()
        assert paths(index) == {"a.md", ".obsidian/app.md"}
    assert index.sync().sources[0].deleted == 1
    assert paths(index) == {"a.md"}
    assert_same_as_fresh(tmp_path, index)


# ---- several sources ---------------------------------------------------------------------------------


def test_sources_with_the_same_relative_path_stay_apart(tmp_path: Path, upstream: pygit2.Repository) -> None:
    other = init_upstream(tmp_path / "other-upstream")
    commit(upstream, {"same.md": note("Same", "from the first repository")}, time=T0)
    commit(other, {"same.md": note("Same", "from the second repository")}, time=T0)
    folder = tmp_path / "folder"
    write(folder, {"same.md": note("Same", "from the workspace folder")})
    index = Index(
        tmp_path / "ix",
        {"notes": {"url": url(upstream)}, "second": {"url": url(other)}},
        {"ws": {"root": str(folder), "paths": ["**"]}},
    )
    index.sync()

    def rows(source_id: str) -> list[tuple[object, ...]]:
        return [r for r in index.state()[0] if r[0] == source_id]

    before = {sid: rows(sid) for sid in ("second", "ws")}
    assert all(before.values())
    commit(upstream, {"same.md": note("Same", "first repository, edited")}, time=T0 + DAY)
    index.sync()
    assert "edited" in str(rows("notes")) and {sid: rows(sid) for sid in ("second", "ws")} == before
    commit(upstream, {"same.md": None, "else.md": note("Else", "x")}, time=T0 + 2 * DAY)
    index.sync()
    assert paths(index, "notes") == {"else.md"}
    assert {sid: rows(sid) for sid in ("second", "ws")} == before
    assert_same_as_fresh(tmp_path, index)


# ---- no-op ticks and errors --------------------------------------------------------------------------


def stamps(*paths: Path) -> dict[str, tuple[int, int] | None]:
    """(mtime_ns, size) of each path; None when it does not exist."""
    out: dict[str, tuple[int, int] | None] = {}
    for path in paths:
        try:
            st = path.stat()
            out[str(path)] = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            out[str(path)] = None
    return out


def test_identical_sync_fetches_nothing_and_writes_nothing(upstream: pygit2.Repository, index: Index) -> None:
    commit(upstream, {"a.md": note("A", "a")}, time=T0)
    index.sync()
    commit(upstream, {"b.md": note("B", "b")}, time=T0 + DAY)
    index.sync()  # a real fetch: FETCH_HEAD exists from here on
    mirror, db = index.mirror(), index.config.db
    watched = [
        mirror / "packed-refs",
        mirror / "FETCH_HEAD",
        mirror / "refs" / "heads",
        mirror / "objects" / "pack",
        db,
        db.with_name(db.name + "-wal"),
    ]
    assert (mirror / "FETCH_HEAD").exists()
    with closing(index.store()) as store:
        counts_before, state_before = store.counts(), store.source_stats()
    files_before, calls_before = stamps(*watched), index.embedder.calls
    written_before = write_mark(index.config.index_location)
    time.sleep(1.05)  # any write of a timestamp (second resolution) would now change the file

    report = index.sync()
    assert not report.changed and report.sources[0].rev == index.rev()
    assert stamps(*watched) == files_before
    assert write_mark(index.config.index_location) == written_before
    assert index.embedder.calls == calls_before
    with closing(index.store()) as store:
        assert (store.counts(), store.source_stats()) == (counts_before, state_before)


def cli_run(config: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    monkeypatch.setattr(cli_module, "make_embedder", lambda cfg: FakeEmbedder(cfg))
    return CliRunner().invoke(cli_module.cli, ["--config", str(config), *args], catch_exceptions=False)


def test_unreachable_remote_fails_only_its_source(
    tmp_path: Path, upstream: pygit2.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit(upstream, {"a.md": note("A", "reachable git note")}, time=T0)
    folder = tmp_path / "folder"
    write(folder, {"w.md": note("W", "workspace note")})
    index = Index(
        tmp_path / "ix",
        {"notes": {"url": url(upstream)}, "gone": {"url": str(tmp_path / "no-such-repo")}},
        {"ws": {"root": str(folder), "paths": ["**"]}},
    )
    result = cli_run(index.path, monkeypatch, "sync")
    assert result.exit_code == 1
    errors = result.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: git source 'gone' (") and "ls-remote" in errors[0]
    assert paths(index, "notes") == {"a.md"} and paths(index, "ws") == {"w.md"}
    # the next cron tick fails the same way: said once (one mail), the log and `status` keep it
    again = cli_run(index.path, monkeypatch, "sync")
    assert (again.exit_code, again.stderr) == (1, "")
    assert index.config.log.read_text(encoding="utf-8").count("source gone: git source 'gone'") == 2
    monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: True)  # a person at a terminal is told
    assert "error: git source 'gone' (" in cli_run(index.path, monkeypatch, "sync").stderr
    monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: False)
    # a failure a hook's sync (or a search's catch-up) met first was said to nobody: cron says it
    shutil.move(folder, tmp_path / "folder-moved")
    assert "ws" in {s.source_id for s in index.sync().failed}
    told = cli_run(index.path, monkeypatch, "sync").stderr.splitlines()
    assert len(told) == 1 and told[0].startswith("error: source ws: ")
    shutil.move(tmp_path / "folder-moved", folder)
    assert cli_run(index.path, monkeypatch, "sync").stderr == ""  # mended: nothing to say

    # a remote that was reachable and then went away keeps its indexed content
    moved = tmp_path / "moved-away"
    shutil.move(url(upstream), moved)
    report = index.sync()
    assert {s.source_id for s in report.failed} == {"notes", "gone"}
    assert paths(index, "notes") == {"a.md"}
    with closing(index.store()) as store:
        assert "ls-remote" in (next(s for s in store.source_stats() if s.source_id == "notes").last_error or "")


def test_a_stale_ref_lock_in_the_mirror_is_cleared_a_fresh_one_kept(upstream: pygit2.Repository, index: Index) -> None:
    """A git killed mid-fetch can leave `refs/heads/main.lock`: every later sync then failed with
    "cannot lock ref", until someone found the file. One older than any fetch of ours is ours to
    delete (the mirror is ours, and the index lock says no sync fetches now); a fresh one may
    be a user's own `git fetch` in the mirror, and stays."""
    commit(upstream, {"a.md": note("A", "a")}, time=T0)
    index.sync()
    lock = index.mirror() / "refs" / "heads" / "main.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    rev = commit(upstream, {"b.md": note("B", "b")}, time=T0 + DAY)
    [fresh] = index.sync().sources
    assert fresh.error is not None and "cannot lock ref" in fresh.error and lock.exists()
    old = time.time() - 3600
    os.utime(lock, (old, old))
    [cleared] = index.sync().sources
    assert cleared.error is None and not lock.exists()
    assert index.rev() == rev and paths(index) == {"a.md", "b.md"}


def test_a_remote_that_does_not_answer_never_holds_the_index_lock(
    tmp_path: Path, upstream: pygit2.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote that hangs (a host gone, a laptop on a train) held the lock for its whole timeout,
    once a minute: every other source, the watcher and each search's catch-up waited behind it.
    The remotes are asked before the lock is taken, all at once (by `sync` and by `status`)."""
    from indexer.lock import running_sync

    commit(upstream, {"a.md": note("A", "a")}, time=T0)
    calls = tmp_path / "calls"
    ssh = tmp_path / "hanging-ssh"
    ssh.write_text(f"#!/bin/sh\necho start >> {calls}\nsleep 1\necho end >> {calls}\nexit 255\n")
    ssh.chmod(0o755)
    far = {"url": "ssh://blackhole.invalid/n.git"}
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream)}, "far": far, "farther": far})
    # (the simple variant: git does not first run it with -G to learn which ssh it is)
    ssh_env = {"GIT_SSH_COMMAND": str(ssh), "GIT_SSH_VARIANT": "simple"}
    env = {**os.environ, **ssh_env, "PYTHONPATH": str(Path(__file__).parents[1])}
    sync = subprocess.Popen(
        [str(Path(sys.executable).parent / "notes-search"), "--config", str(index.path), "sync"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(calls.exists, "the remote to be asked", timeout=30)
        assert running_sync(index.config) is None  # the lock is free while the remotes are asked
    finally:
        _, stderr = sync.communicate(timeout=60)
    assert sync.returncode == 1 and b"git source 'far'" in stderr and b"git source 'farther'" in stderr
    assert paths(index, "notes") == {"a.md"}
    assert calls.read_text().split() == ["start", "start", "end", "end"]  # both asked at once
    calls.unlink()
    for name, value in ssh_env.items():
        monkeypatch.setenv(name, value)
    status = cli_run(index.path, monkeypatch, "status", "--json")
    assert status.exit_code == 0 and "ls-remote" in status.stdout
    assert calls.read_text().split() == ["start", "start", "end", "end"]


def test_ctrl_c_while_the_remotes_are_asked_leaves_no_git_behind(tmp_path: Path) -> None:
    """The remotes asked by helper threads: their git runs in a session of its own, and Ctrl-C
    left it (and its ssh) running under init."""
    calls = tmp_path / "calls"
    ssh = tmp_path / "hanging-ssh"
    ssh.write_text(f"#!/bin/sh\necho start >> {calls}\nsleep 60\n")  # no exec: its command line stays
    ssh.chmod(0o755)
    far = {"url": "ssh://blackhole.invalid/n.git"}
    index = Index(tmp_path / "ix", {"far": far, "farther": far, "farthest": far})
    env = {**os.environ, "GIT_SSH_COMMAND": str(ssh), "GIT_SSH_VARIANT": "simple"}
    env["PYTHONPATH"] = str(Path(__file__).parents[1])
    sync = subprocess.Popen(
        [str(Path(sys.executable).parent / "notes-search"), "--config", str(index.path), "sync"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(
        lambda: calls.exists() and len(calls.read_text().split()) == 3, "all three remotes to be asked", timeout=30
    )
    sync.send_signal(signal.SIGINT)
    assert sync.wait(timeout=30) != 0

    def left() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and str(ssh).encode() in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
        return found

    wait_for(lambda: not left(), "the helper threads' git and ssh to be gone", timeout=10)


def test_query_hits_of_git_sources_carry_the_indexed_rev(
    tmp_path: Path, upstream: pygit2.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    rev1 = commit(upstream, {"net.md": note("Network", "the router answers on 10.0.0.1")}, time=T0)
    folder = tmp_path / "folder"
    write(folder, {"w.md": note("Router", "router notes in the workspace")})
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream)}}, {"ws": {"root": str(folder), "paths": ["**"]}})

    def query() -> dict[str, str | None]:
        result = cli_run(index.path, monkeypatch, "query", "router", "--json")
        assert result.exit_code == 0, result.output
        return {hit["source"]: hit["rev"] for hit in json.loads(result.stdout)["results"]}

    assert cli_run(index.path, monkeypatch, "sync").exit_code == 0
    assert query() == {"notes": rev1, "ws": None}
    rev2 = commit(upstream, {"net.md": note("Network", "the router moved to 10.0.0.254")}, time=T0 + DAY)
    assert cli_run(index.path, monkeypatch, "sync").exit_code == 0
    assert query() == {"notes": rev2, "ws": None}


# ---- freshness (status) ------------------------------------------------------------------------------


def freshness(index: Index, check_remote: bool = True) -> dict[str, dict[str, Any]]:
    """Each git source's `git_freshness`; each workspace source's `lag` as `status` reports it."""
    config = index.config
    with closing(open_index(config, readonly=True)) as store:
        state = {
            sid: git_freshness(src, store, "", config.max_file_bytes, check_remote=check_remote).to_json()
            for sid, src in config.sources.items()
            if isinstance(src, GitSource)
        }
    # built as `notes-search mcp` builds it, with its log file
    report = NotesTools(CliContext(str(index.path)).service(check_remote=check_remote)).status(None)
    state.update({s["id"]: s["lag"] for s in report["sources"] if s["kind"] == "workspace"})
    return state


def test_freshness_of_git_sources(tmp_path: Path, upstream: pygit2.Repository) -> None:
    rev1 = commit(upstream, {"a.md": note("A", "a")}, time=T0)
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream)}, "gone": {"url": str(tmp_path / "nope")}})
    index.sync()
    state = freshness(index)
    assert state["notes"] == {
        "kind": "git",
        "indexed_rev": rev1,
        "mirror_head": rev1,
        "remote_head": rev1,
        "remote_error": None,
        "mirror_damaged": None,
        "lags": False,
    }
    gone = state["gone"]
    assert gone["lags"] is None and gone["remote_head"] is None and "ls-remote" in gone["remote_error"]

    rev2 = commit(upstream, {"b.md": note("B", "b")}, time=T0 + DAY)
    assert freshness(index)["notes"] == {
        "kind": "git",
        "indexed_rev": rev1,
        "mirror_head": rev1,
        "remote_head": rev2,
        "remote_error": None,
        "mirror_damaged": None,
        "lags": True,
    }
    assert freshness(index, check_remote=False)["notes"]["lags"] is False  # the mirror is all it knows
    subprocess.run(["git", "--git-dir", str(index.mirror()), "fetch", "--quiet"], check=True)
    assert freshness(index, check_remote=False)["notes"]["lags"] is True
    index.sync()
    assert freshness(index)["notes"]["lags"] is False


def test_freshness_of_workspace_sources(tmp_path: Path, upstream: pygit2.Repository) -> None:
    commit(upstream, {"a.md": note("A", "a")}, time=T0)
    folder = tmp_path / "folder"
    write(folder, {"one.md": note("One", "1"), "sub/two.md": note("Two", "2")})
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream)}}, {"ws": {"root": str(folder), "paths": ["**"]}})

    def ws() -> tuple[bool | None, list[str] | None]:
        entry = freshness(index, check_remote=False)["ws"]
        return entry["lags"], entry.get("paths")

    index.store().close()  # an empty index: the source was never synced
    assert ws() == (True, ["one.md", "sub/two.md"])
    index.sync()
    assert ws() == (False, [])
    os.utime(folder / "one.md", (time.time() + 5, time.time() + 5))  # same content, new mtime
    assert ws() == (False, [])
    (folder / "sub" / "two.md").write_text(note("Two", "2, edited"))
    assert ws() == (True, ["sub/two.md"])
    index.sync()
    (folder / "three.md").write_text(note("Three", "3"))
    assert ws() == (True, ["three.md"])
    index.sync()
    (folder / "one.md").unlink()
    assert ws() == (True, ["one.md"])
    (folder / "blob.md").write_bytes(b"\x00\xff binary")  # never indexable: not a lag, and not logged
    index.sync()
    assert ws() == (False, [])
    log_before = index.config.log.read_text(encoding="utf-8")
    assert ws() == (False, [])
    assert index.config.log.read_text(encoding="utf-8") == log_before
    shutil.rmtree(folder)
    entry = freshness(index, check_remote=False)["ws"]
    assert entry["lags"] is None and "does not exist" in entry["error"]


def test_collections_of_a_git_source_follow_its_meta_files(
    tmp_path: Path, upstream: pygit2.Repository, index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_meta.yaml` made a collection of a workspace folder only: in a git source `collections`
    said there were none, `--collection` refused the name and `route` had nothing to rank."""
    meta = "name: Operations\ndescription: Servers and backups\ntags: [ops]\n"
    commit(
        upstream,
        {
            "ops/_meta.yaml": meta,
            "ops/a.md": note("A", "restic"),
            "ops/deep/b.md": note("B", "borg"),
            "c.md": note("C", "x"),
        },
        time=T0,
    )
    index.sync()

    def collections() -> tuple[list[tuple[str, str, str]], dict[str, str | None]]:
        with closing(index.store()) as store:
            rows = [(r.name, r.folder, r.description) for r in store.collection_rows("notes")]
            return rows, {r.path: r.collection for r in store.file_rows("notes")}

    assert collections() == (
        [("Operations", "ops", "Servers and backups")],
        {"c.md": None, "ops/a.md": "Operations", "ops/deep/b.md": "Operations"},
    )
    found = cli_run(index.path, monkeypatch, "query", "restic", "--collection", "Operations", "--mode", "lex", "--json")
    assert found.exit_code == 0, found.output
    assert [hit["path"] for hit in json.loads(found.stdout)["results"]] == ["ops/a.md"]
    assert_same_as_fresh(tmp_path, index, "fresh1")

    commit(
        upstream,
        {"ops/new.md": note("New", "n"), "wiki/_meta.yaml": "name: Wiki\n", "wiki/w.md": note("W", "w")},
        time=T0 + DAY,
    )
    index.sync()
    assert collections()[1] == {
        "c.md": None,
        "ops/a.md": "Operations",
        "ops/deep/b.md": "Operations",
        "ops/new.md": "Operations",
        "wiki/w.md": "Wiki",
    }
    commit(upstream, {"ops/_meta.yaml": "name: Ops\n", "wiki/_meta.yaml": None}, time=T0 + 2 * DAY)
    index.sync()
    rows, files = collections()
    assert rows == [("Ops", "ops", "")] and files["ops/a.md"] == "Ops" and files["wiki/w.md"] is None
    assert_same_as_fresh(tmp_path, index, "fresh2")

    # an index made before git sources had collections reads them on its next tick, once
    with closing(index.store()) as store:
        store.replace_collections("notes", [])
        for path in store.known_files("notes"):
            store.set_file_collection("notes", path, None)
        store.delete_meta(["collections_rev:notes"])
    index.sync()
    assert collections() == (rows, files)
    assert_same_as_fresh(tmp_path, index, "fresh3")
    commit(upstream, {"bad/_meta.yaml": "name: [x]\n", "bad/n.md": note("N", "n")}, time=T0 + 3 * DAY)
    [report] = index.sync().sources
    assert report.collection_problems == [
        ("bad/_meta.yaml", "`name` is a list, not text; the collection takes the folder's name")
    ]
    assert collections()[1]["bad/n.md"] == "bad"


def test_status_names_what_the_index_leaves_out_and_why(
    tmp_path: Path, upstream: pygit2.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note someone knows is there but never finds: `status` says why, for a git source (read
    from the tree at the indexed rev) and a workspace one (its own scan), whole or one file."""
    commit(
        upstream,
        {
            "ok.md": note("Ok", "fine"),
            "notes/cp1250.md": "Příliš žluťoučký kůň".encode("cp1250"),
            "notes/big.md": "x" * 400,
            "link.md": Symlink("ok.md"),
            "todo.txt": "not a note",
        },
        time=T0,
    )
    folder = tmp_path / "folder"
    write(folder, {"one.md": note("One", "1"), "a.txt": "not a note"})
    (folder / "latin1.md").write_bytes("Café crème".encode("latin-1"))
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream)}}, {"ws": {"root": str(folder), "paths": ["**"]}})
    raw = yaml.safe_load(index.path.read_text())
    index.path.write_text(yaml.safe_dump({**raw, "max_file_bytes": 300}))
    index.sync()

    def left_out(*args: str) -> dict[str, Any]:
        result = cli_run(index.path, monkeypatch, "status", "--offline", *args, "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        return {s["id"] + (f":{s['path']}" if s["path"] else ""): s["not_indexed"] for s in data["sources"]}

    whole = left_out()
    assert whole["notes"] == {
        "count": 3,
        "files": [
            {"path": "link.md", "reason": "symlink (not followed)"},
            {"path": "notes/big.md", "reason": "too large (400 bytes > 300)"},
            {"path": "notes/cp1250.md", "reason": "invalid UTF-8"},
        ],
    }
    assert whole["ws"] == {"count": 1, "files": [{"path": "latin1.md", "reason": "binary or not UTF-8"}]}
    assert left_out("notes:notes/cp1250.md")["notes:notes/cp1250.md"]["files"] == [
        {"path": "notes/cp1250.md", "reason": "invalid UTF-8"}
    ]
    assert left_out("notes:ok.md")["notes:ok.md"] == {"count": 0, "files": []}
    assert left_out("ws:a.txt")["ws:a.txt"]["files"] == [
        {"path": "a.txt", "reason": "excluded by the config: `sources.workspace.ws.include` (*.md) does not admit it"}
    ]
    # a file of the tree the scope leaves out is no file of the source (not "a folder")
    outside = cli_run(index.path, monkeypatch, "show", "notes:todo.txt")
    assert outside.exit_code == 1 and "outside the source's scope" in outside.stderr, outside.output
    assert cli_run(index.path, monkeypatch, "query", "note", "--path", "notes:todo.txt").exit_code == 1
    human = cli_run(index.path, monkeypatch, "status", "--offline", "notes:notes")
    assert human.exit_code == 0, human.output
    assert (
        "    not indexed: notes/big.md (too large (400 bytes > 300)), notes/cp1250.md (invalid UTF-8)\n" in human.stdout
    )

    # mended: re-saved as UTF-8 (a new commit for the git note), the next sync takes them in
    commit(upstream, {"notes/cp1250.md": "Příliš žluťoučký kůň"}, time=T0 + DAY)
    (folder / "latin1.md").write_text("Café crème", encoding="utf-8")
    index.sync()
    whole = left_out()
    assert [f["path"] for f in whole["notes"]["files"]] == ["link.md", "notes/big.md"]
    assert whole["ws"] == {"count": 0, "files": []}


def test_excluded_folder_pattern_gives_the_same_index_incrementally_and_from_scratch(
    tmp_path: Path, upstream: pygit2.Repository
) -> None:
    """`archive/*` matches the folder `archive/`: the full walk prunes it, so the per-file
    check of an incremental diff must exclude everything below it too."""
    commit(upstream, {"keep.md": note("Keep", "k")}, time=T0)
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream), "exclude": ["archive/*"]}})
    index.sync()
    commit(
        upstream,
        {
            "archive/2023/old.md": note("Old", "o"),
            "archive/top.md": note("Top", "t"),
            "notes/archive.md": note("Not archived", "n"),
        },
        time=T0 + DAY,
    )
    index.sync()
    assert sorted(row.path for row in index.state()[1]) == ["keep.md", "notes/archive.md"]
    assert_same_as_fresh(tmp_path, index)


def test_a_file_name_that_is_not_utf8_is_skipped_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = tmp_path / "up"
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "ok.md").write_text(note("OK", "fine"))
    with open(os.path.join(os.fsencode(repo), b"caf\xe9.md"), "wb") as f:
        f.write(note("Cafe", "latin-1 name").encode())
    os.mkdir(os.path.join(os.fsencode(repo), b"d\xff"))  # a collection there crashed every sync
    with open(os.path.join(os.fsencode(repo), b"d\xff", b"_meta.yaml"), "wb") as f:
        f.write(b"name: Latin\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "names"], check=True)
    index = Index(tmp_path / "ix", {"notes": {"url": str(repo)}})
    report = index.sync()
    assert [s.error for s in report.sources] == [None]
    assert [row.path for row in index.state()[1]] == ["ok.md"]
    assert "not valid UTF-8" in caplog.text
    # listed with the other skips (`sync --json`, `reindex`), as a workspace scan lists it, and by `status`
    assert report.sources[0].skips == [("caf\\xe9.md", "its name is not valid UTF-8")]
    with closing(open_index(index.config, readonly=True)) as store:
        lag = git_freshness(index.config.sources["notes"], store, "", 5_000_000, check_remote=False)  # type: ignore[arg-type]
    assert lag.not_indexed.files == (("caf\\xe9.md", "its name is not valid UTF-8"),)
    assert_same_as_fresh(tmp_path, index)


def test_a_path_scoped_full_run_does_not_rebuild_git_sources(tmp_path: Path, upstream: pygit2.Repository) -> None:
    """`reindex PATH --full` re-reads that path; a git source (no notion of one path in a tree
    diff) is only brought to its head, not re-chunked file by file."""
    commit(upstream, {f"n{i}.md": note(f"N{i}", str(i)) for i in range(5)}, time=T0)
    folder = tmp_path / "folder"
    write(folder, {"a.md": note("A", "a")})
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream)}}, {"ws": {"root": str(folder), "paths": ["**"]}})
    index.sync()
    sources = list(index.config.sources)
    report = run_reindex(
        index.config, source_ids=sources, path="a.md", full=True, embedder_factory=lambda: index.embedder
    )
    by_id = {s.source_id: s for s in report.sources}
    assert by_id["notes"].updated == 0 and by_id["ws"].updated == 1
    assert index.sync(full=True).sources[0].updated == 5  # an unscoped --full still rebuilds
