"""Git hooks: install, quoting, never failing git, and the background re-index they start.

End-to-end tests run real command-line git (`git fetch` into the mirror, `git push` into a bare
upstream); the hook starts the installed `notes-search` in the background, which embeds through
an OllamaServer on 127.0.0.1. Nothing here calls `sync` by hand after the hook is installed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pygit2
import pytest
from click.testing import CliRunner, Result

from hooks.install import MARKER, hooks_path_override, install_hooks, pending_marker, run_hook_job
from indexer.embedders import Embedder
from indexer.lock import open_index_lock
from search import cli as cli_module
from tests.conftest import open_index
from tests.conftest import wait_for as shared_wait_for
from tests.embed_servers import OllamaServer
from tests.gitutil import commit, init_upstream
from tests.test_git_sync import DAY, T0, Index, index_backend, note, url  # noqa: F401 - index_backend: autouse

POLL_SECONDS = 15.0
WEIRD = "dir with spaces $(touch pwned) `touch pwned2`; 'q\" $HOME"


def hook_jobs(needle: str) -> list[int]:
    """Pids of processes whose command line mentions `needle` (the hook jobs of one test)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def wait_for(predicate: Callable[[], Any], what: str) -> Any:
    return shared_wait_for(predicate, what, timeout=POLL_SECONDS, interval=0.1)


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """Background jobs started by hooks must be finished before tmp_path goes away."""
    yield
    wait_for(lambda: not hook_jobs(str(tmp_path)), what="hook jobs to exit")


def cli(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli_module.cli, ["--config", str(config), *args], catch_exceptions=False)


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=check, stdin=subprocess.DEVNULL)


def timed_fetch(mirror: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    proc = git("--git-dir", str(mirror), "fetch", "--quiet", check=False)
    return proc, time.perf_counter() - started


@pytest.fixture
def upstream(tmp_path: Path) -> pygit2.Repository:
    repo = init_upstream(tmp_path / "upstream")
    commit(repo, {"a.md": note("Alpha", "first note")}, time=T0)
    return repo


@pytest.fixture
def index(tmp_path: Path, upstream: pygit2.Repository) -> Index:
    index = Index(tmp_path / "ix", {"notes": {"url": url(upstream)}})
    index.sync()
    return index


# ---- install ---------------------------------------------------------------------------------------


def test_install_writes_marked_executable_hooks(index: Index) -> None:
    result = cli(index.path, "hooks", "install")
    hook = index.mirror() / "hooks" / "reference-transaction"
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"installed {hook}"
    assert hook.stat().st_mode & stat.S_IXUSR
    text = hook.read_text()
    assert text.startswith("#!/bin/sh\n" + MARKER + ":")
    assert f"config={shlex.quote(str(index.path))}\n" in text and "source_id=notes\n" in text
    assert f"notes_search={shlex.quote(str(Path(sys.executable).with_name('notes-search')))}\n" in text
    assert not re.search(r"@[A-Z_]+@", text)
    syntax = subprocess.run(["sh", "-n", str(hook)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    git("--git-dir", str(index.mirror()), "config", "core.hooksPath", "/elsewhere")
    result = cli(index.path, "hooks", "install", "--source", "notes")  # ours: replaced
    assert result.exit_code == 0
    assert "warning: core.hooksPath is set (/elsewhere): git runs hooks from there" in result.stderr


def test_uninstall_and_source_remove_take_only_our_hooks(tmp_path: Path, upstream: pygit2.Repository) -> None:
    """`source remove` left the post-receive hook in the user's bare upstream: every push then
    logged "unknown source" for ever, and there was no command to take a hook away."""
    bare = tmp_path / "shared.git"
    pygit2.init_repository(str(bare), bare=True, initial_head="main")
    git("-C", url(upstream), "push", "--quiet", str(bare), "main")
    index = Index(tmp_path / "ix", {"team": {"url": str(bare)}, "other": {"url": url(upstream)}})
    index.sync()
    assert cli(index.path, "hooks", "install", "--upstream", "--source", "team").exit_code == 0
    assert cli(index.path, "hooks", "install", "--source", "other").exit_code == 0
    post_receive = bare / "hooks" / "post-receive"
    mirror_hook = index.mirror("team") / "hooks" / "reference-transaction"
    assert post_receive.is_file() and mirror_hook.is_file()

    removed = cli(index.path, "hooks", "uninstall", "--source", "team")
    assert removed.exit_code == 0 and removed.stdout == f"removed {mirror_hook}\n"
    assert post_receive.is_file()  # the upstream's only with --upstream
    assert cli(index.path, "hooks", "uninstall", "--source", "team").stdout == "no hook of this config to remove\n"
    assert cli(index.path, "hooks", "install", "--source", "team").exit_code == 0

    # another config's hook for a source of the same name stays
    other_config = tmp_path / "other.yaml"
    other_config.write_text(index.path.read_text())
    assert cli(other_config, "hooks", "uninstall", "--source", "team", "--upstream").stdout == (
        "no hook of this config to remove\n"
    )
    result = cli(index.path, "source", "remove", "team", "--json")
    assert result.exit_code == 0, result.output
    assert f"deleted its post-receive hook {post_receive}" in json.loads(result.stdout)["notices"]
    assert not post_receive.exists() and (bare / "hooks").is_dir()
    assert (index.mirror("other") / "hooks" / "reference-transaction").is_file()  # the other source's stays
    # --upstream where the upstream is a working copy (nothing was installed there): no error
    everything = cli(index.path, "hooks", "uninstall", "--upstream")
    assert everything.exit_code == 0, everything.output
    assert everything.stdout == f"removed {index.mirror('other') / 'hooks' / 'reference-transaction'}\n"


def test_install_refuses_what_it_must_not_touch(tmp_path: Path, upstream: pygit2.Repository, index: Index) -> None:
    hook = index.mirror() / "hooks" / "reference-transaction"
    hook.write_text("#!/bin/sh\necho the user's own hook\n")
    result = cli(index.path, "hooks", "install")
    assert result.exit_code == 1
    assert f"{hook} exists and was not written by notes-search" in result.stderr
    assert hook.read_text() == "#!/bin/sh\necho the user's own hook\n"

    folder = tmp_path / "folder"
    folder.mkdir()
    index.configure(
        {"notes": {"url": url(upstream)}, "later": {"url": url(upstream)}},
        {"ws": {"root": str(folder), "paths": ["**"]}},
    )
    for args, message in [
        (["--source", "later"], "no mirror at"),
        (["--source", "ws"], "is a workspace source"),
        (["--source", "notes", "--upstream"], "is not a bare repository"),  # a working copy: no pushes land there
    ]:
        hook.unlink(missing_ok=True)
        result = cli(index.path, "hooks", "install", *args)
        assert result.exit_code == 1 and message in result.stderr, (args, result.output)
        assert not hook.exists()  # all or nothing
    unknown = cli(index.path, "hooks", "install", "--source", "notes", "--source", "nope")
    assert unknown.exit_code == 2 and "unknown source 'nope'" in unknown.stderr, unknown.output  # a usage error
    assert not hook.exists()


# ---- quoting and robustness ----------------------------------------------------------------------------


def recorder(path: Path, out: Path) -> Path:
    """A stand-in notes-search executable that records its arguments."""
    path.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(out)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    path.chmod(0o755)
    return path


def test_paths_and_ids_with_shell_syntax_run_nothing(tmp_path: Path, upstream: pygit2.Repository) -> None:
    weird = tmp_path / WEIRD
    bare = weird / "pushed.git"
    pygit2.init_repository(str(bare), bare=True, initial_head="main")
    git("-C", url(upstream), "push", "--quiet", str(bare), "main")
    source_id = "x$(touch pwned3)"
    index = Index(weird, {source_id: {"url": str(bare).replace("$", "$$")}})  # `$$`: a literal `$`
    index.sync()
    record = weird / "argv $(touch pwned4).json"
    exe = recorder(weird / "notes-search $(touch pwned5)", record)
    expected = ["--config", str(index.path), "hooks", "run", "--source", source_id]

    def recorded() -> list[str]:
        text = wait_for(lambda: record.exists() and record.read_text(), what="the recorder")
        record.unlink()
        return json.loads(text)

    assert [p.name for p in install_hooks(index.config, [], executable=exe)] == ["reference-transaction"]
    shutil.rmtree(weird / "log")  # the hook falls back to /dev/null for the job's output
    commit(upstream, {"b.md": note("Beta", "pushed")}, time=T0 + DAY)
    git("-C", url(upstream), "push", "--quiet", str(bare), "main")
    proc, _ = timed_fetch(index.mirror(source_id))  # reference-transaction in the mirror
    assert proc.returncode == 0, proc.stderr
    assert recorded() == expected

    written = install_hooks(index.config, [], upstream=True, executable=exe)
    assert [p.name for p in written] == ["reference-transaction", "post-receive"]
    commit(upstream, {"c.md": note("Gamma", "pushed")}, time=T0 + 2 * DAY)
    git("-C", url(upstream), "push", "--quiet", str(bare), "main")  # post-receive in the bare upstream
    assert recorded() == expected
    for where in (tmp_path, weird, index.mirror(source_id), bare, Path.cwd()):
        assert not list(where.glob("pwned*")), where


def test_hook_never_fails_git(tmp_path: Path, upstream: pygit2.Repository, index: Index) -> None:
    install_hooks(index.config, [], executable=tmp_path / "missing")  # notes-search uninstalled since
    commit(upstream, {"b.md": note("Beta", "b")}, time=T0 + DAY)
    proc, _ = timed_fetch(index.mirror())
    assert (proc.returncode, proc.stderr) == (0, "")

    install_hooks(index.config, [])
    index.path.write_text("embedding: [this is: not a config\n")  # broken after install
    rev = commit(upstream, {"c.md": note("Gamma", "c")}, time=T0 + 2 * DAY)
    proc, seconds = timed_fetch(index.mirror())
    assert (proc.returncode, proc.stderr) == (0, "")
    assert str(pygit2.Repository(str(index.mirror())).head.target) == rev
    log = index.home / "log" / "notes_sync.log"  # the job's failure is recorded, not shown to git
    wait_for(lambda: log.exists() and "invalid YAML" in log.read_text(), what="the job's error in the log")
    print(f"\nfetch with a hook whose config is broken: {seconds * 1000:.0f} ms")


# ---- the job: coalescing and never losing a fire --------------------------------------------------------


def test_a_fire_during_a_running_sync_causes_one_more_sync(upstream: pygit2.Repository, index: Index) -> None:
    """Job A is inside its sync (held in the embedding step) when the next commit and fire B
    arrive: B returns at once, and A syncs once more after, so the second commit is indexed."""
    entered, release = threading.Event(), threading.Event()

    def slow_embedder() -> Embedder:
        entered.set()
        release.wait(10)
        return index.embedder

    config = index.config
    commit(upstream, {"b.md": note("Beta", "kumquat in the first push")}, time=T0 + DAY)
    result: dict[str, int] = {}
    job_a = threading.Thread(target=lambda: result.update(a=run_hook_job(config, "notes", slow_embedder, debounce=0.1)))
    job_a.start()
    assert entered.wait(10)
    assert index.search("kumquat") == {"b.md"}
    rev2 = commit(upstream, {"c.md": note("Gamma", "persimmon in the second push")}, time=T0 + 2 * DAY)
    started = time.monotonic()
    assert run_hook_job(config, "notes", lambda: index.embedder, debounce=0.1) == 0  # job B only leaves its mark
    assert time.monotonic() - started < 1.0
    release.set()
    job_a.join(20)
    assert result == {"a": 2}
    assert index.search("persimmon") == {"c.md"} and index.rev() == rev2
    assert not pending_marker(config, "notes").exists()


def test_a_burst_of_fires_costs_one_sync_that_waits_for_the_lock(upstream: pygit2.Repository, index: Index) -> None:
    config = index.config
    rev = commit(upstream, {"b.md": note("Beta", "burst")}, time=T0 + DAY)
    lock = open_index_lock(config)  # a cron sync holding the whole index (on PostgreSQL too)
    assert lock.acquire() and lock.claim_index()  # the job must wait for it, not give up
    counts: list[int] = []
    jobs = [
        threading.Thread(
            target=lambda: counts.append(run_hook_job(config, "notes", lambda: index.embedder, debounce=0.2))
        )
        for _ in range(6)
    ]
    for job in jobs:
        job.start()
        time.sleep(0.02)
    time.sleep(0.5)
    assert index.rev() != rev
    lock.release()
    for job in jobs:
        job.join(20)
    assert sorted(counts) == [0, 0, 0, 0, 0, 1]
    assert index.rev() == rev and index.search("burst") == {"b.md"}


# ---- end to end: command-line git moves the mirror, the hook re-indexes ------------------------------------


def ollama_index(home: Path, source_url: str, server: OllamaServer) -> Index:
    embedding = {"provider": "ollama", "model": "fake-embed:latest", "endpoint": server.url, "dims": 64}
    index = Index(home, {"notes": {"url": source_url}}, embedding=embedding)
    index.sync()
    return index


def wait_until_indexed(index: Index, word: str, path: str, server: OllamaServer, tmp_path: Path) -> float:
    started = time.monotonic()
    wait_for(lambda: index.search(word) == {path}, what=f"{word!r} to become searchable")
    seconds = time.monotonic() - started
    wait_for(lambda: not hook_jobs(str(tmp_path)), what="hook jobs to exit")
    with closing(open_index(index.config, readonly=True)) as store:
        assert store.counts()["pending"] == 0
    assert server.embed_requests  # the background job embedded through HTTP, not in this process
    return seconds


def move_four_branches(upstream: pygit2.Repository, day: int, main_change: dict[str, str]) -> str:
    """Commits on main and three side branches: one fetch then fires the hook once per ref."""
    for branch in ("side-1", "side-2", "side-3"):
        commit(upstream, {f"{branch}.md": note(branch, f"elsewhere {day}")}, time=T0 + day * DAY, branch=branch)
    return commit(upstream, main_change, time=T0 + day * DAY)


def test_command_line_fetch_reindexes_in_the_background(tmp_path: Path, upstream: pygit2.Repository) -> None:
    with OllamaServer() as server:
        index = ollama_index(tmp_path / "ix", url(upstream), server)
        move_four_branches(upstream, 1, {"b.md": note("Beta", "fetched without a hook")})
        _, without = timed_fetch(index.mirror())
        assert cli(index.path, "hooks", "install").exit_code == 0

        rev = move_four_branches(upstream, 2, {"c.md": note("Gamma", "zanzibarite arrived by fetch")})
        proc, with_hook = timed_fetch(index.mirror())
        assert proc.returncode == 0, proc.stderr
        seconds = wait_until_indexed(index, "zanzibarite", "c.md", server, tmp_path)
        assert index.rev() == rev and index.search("hook") == {"b.md"}
        syncs = (index.home / "log" / "notes_sync.log").read_text().count("hook: syncing source notes")
        print(
            f"\nfetch of 4 moved branches: without hook {without * 1000:.0f} ms, with hook {with_hook * 1000:.0f} ms; "
            f"searchable {seconds:.1f} s after the fetch; 4 hook fires -> {syncs} sync(s)"
        )
        assert 1 <= syncs < 4


def test_push_into_a_bare_upstream_reindexes_in_the_background(tmp_path: Path, upstream: pygit2.Repository) -> None:
    bare = tmp_path / "shared.git"
    pygit2.init_repository(str(bare), bare=True, initial_head="main")
    git("-C", url(upstream), "push", "--quiet", str(bare), "main")
    with OllamaServer() as server:
        index = ollama_index(tmp_path / "ix", str(bare), server)
        result = cli(index.path, "hooks", "install", "--upstream")
        assert result.exit_code == 0, result.output
        assert f"installed {bare / 'hooks' / 'post-receive'}" in result.stdout
        commit(upstream, {"p.md": note("Pushed", "quokkaberry came by push")}, time=T0 + DAY)
        started = time.perf_counter()
        git("-C", url(upstream), "push", "--quiet", str(bare), "main")
        pushed = time.perf_counter() - started
        seconds = wait_until_indexed(index, "quokkaberry", "p.md", server, tmp_path)
        print(f"\npush with post-receive {pushed * 1000:.0f} ms; searchable {seconds:.1f} s after the push")


# ---- git environment ------------------------------------------------------------------------------


def test_hooks_path_override_ignores_the_firing_repository_but_keeps_user_settings(
    tmp_path: Path,
    index: Index,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hook runs us with GIT_DIR set to the repository that fired it; the check must still read
    the mirror's config, while the user's global config (GIT_CONFIG_GLOBAL) stays in force."""
    elsewhere = tmp_path / "elsewhere.git"
    git("init", "--bare", "--quiet", str(elsewhere))
    git("--git-dir", str(elsewhere), "config", "core.hooksPath", "/from-the-firing-repository")
    monkeypatch.setenv("GIT_DIR", str(elsewhere))
    assert hooks_path_override(index.mirror()) is None

    global_config = tmp_path / "global-gitconfig"
    global_config.write_text("[core]\n\thooksPath = /from-the-user\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_config))
    assert hooks_path_override(index.mirror()) == "/from-the-user"


def test_post_receive_needs_an_upstream_on_this_machine(index: Index, upstream: pygit2.Repository) -> None:
    """Network urls (scp-style included) name no folder here; file:// and plain paths do."""
    for remote in ("ssh://host/notes.git", "git@host:notes.git", "https://host/notes.git"):
        index.configure({"notes": {"url": remote}})
        result = cli(index.path, "hooks", "install", "--source", "notes", "--upstream")
        assert result.exit_code == 1, result.output
        assert f"url {remote} is not on this machine" in result.stderr


def test_a_hooks_path_that_is_a_file_fails_that_source_alone(tmp_path: Path, upstream: pygit2.Repository) -> None:
    index = Index(tmp_path / "two", {"notes": {"url": url(upstream)}, "other": {"url": url(upstream)}})
    index.sync()
    blocked, fine = (index.config.sources[name].mirror for name in ("notes", "other"))
    shutil.rmtree(blocked / "hooks")
    (blocked / "hooks").write_text("not a folder\n")
    result = CliRunner().invoke(cli_module.cli, ["--config", str(index.path), "hooks", "install"])
    assert result.exit_code == 1 and result.exception is not None and isinstance(result.exception, SystemExit)
    assert result.stderr == (
        f"Error: cannot write hook {blocked / 'hooks' / 'reference-transaction'}: {blocked / 'hooks'} is not a folder\n"
    ), result.stderr
    assert result.stdout == f"installed {fine / 'hooks' / 'reference-transaction'}\n"
    assert (blocked / "hooks").read_text() == "not a folder\n"
    assert is_ours_file(fine / "hooks" / "reference-transaction")


def is_ours_file(path: Path) -> bool:
    return path.is_file() and MARKER in path.read_text() and os.access(path, os.X_OK)
