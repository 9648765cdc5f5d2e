"""What a sync cannot read must not be taken for deleted, and broken state must heal itself.

* an unreadable folder (`chmod 000`, or readable without search permission) keeps the notes
  indexed under it through `sync`, the watcher's reconcile and batches, and the catch-up before
  a scoped search; the log says so once, `status` (human, --json, the MCP tool) names it, and
  the notes are picked up again once it is readable;
* a source root that vanished, cannot be read or is suddenly empty (a drive not mounted) fails
  that source with one line and keeps its index;
* a git mirror whose pack is damaged is cloned again (hooks carried over), swapped in and
  indexed like after a force-push; a fetch that fails for a reason that may be the network
  never causes a clone;
* `status` says when a sync is running, and marks an index whose first sync was killed as
  incomplete; every skipped file is logged once per sync.

Permission cases run the real CLI in a subprocess where permission bits bind: directly as a
non-root user; as root under `setpriv` with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH removed
from the bounding set (root otherwise reads through `chmod 000`). They are skipped, saying so,
only where neither is possible. Embedding goes to a closed port: chunks stay pending, and the
lexical index is compared with a clean one built from the same notes.

Rerun: .venv/bin/pytest tests/test_recovery.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pygit2
import pytest
import yaml
from click.testing import CliRunner
from mcp import ClientSession, StdioServerParameters, stdio_client

from hooks.install import install_hooks
from indexer.config import GitSource, load_config
from indexer.errors import SourceError
from indexer.globs import FileSelection
from indexer.lock import SyncLock
from indexer.sources import git
from indexer.sync import run_sync
from search import cli as cli_module
from tests.conftest import write_tree
from tests.embed_servers import closed_port_url
from tests.gitutil import Symlink, commit, init_upstream
from tests.test_crash_safety import (
    KILL_DRIVER,
    NOTES_SEARCH,
    PYTHON,
    index_state,
    subprocess_env,
    tree_digest,
    write_config,
)
from tests.test_mcp import call

CLOSED = closed_port_url()  # nothing listens: every sync stores chunks without vectors
T0 = 1_700_000_000

NOTES = {
    "a.md": "# Alpha\n\nalpha outside the folder\n",
    "sub/_meta.yaml": "name: Subnotes\ndescription: notes in the sub folder\n",
    "sub/b.md": "# Bravo\n\nbravo inside the folder\n",
    "sub/deep/c.md": "# Charlie\n\ncharlie two levels down\n",
}


# ------------------------------------------------------------------------------------ helpers


@pytest.fixture(scope="module")
def unprivileged() -> list[str]:
    """A command prefix under which `chmod 000` stops reads (empty when not running as root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: root reads through chmod 000, so no folder is unreadable")
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
    with tempfile.TemporaryDirectory() as tmp:
        locked = Path(tmp, "locked")
        locked.mkdir(mode=0)
        probe = subprocess.run(
            [*prefix, PYTHON, "-c", f"import os; os.listdir({str(locked)!r})"],
            capture_output=True,
            text=True,
            check=False,
        )
        locked.chmod(0o700)
    if "PermissionError" not in probe.stderr:
        pytest.skip(f"setpriv cannot drop root's file capabilities here: {probe.stderr.strip()[-200:]}")
    return prefix


def ns(prefix: list[str], config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess (under `prefix`)."""
    return subprocess.run(
        [*prefix, NOTES_SEARCH, "--config", str(config), *args],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def synced(prefix: list[str], config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = ns(prefix, config, "sync", *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def status_json(prefix: list[str], config: Path) -> dict[str, Any]:
    proc = ns(prefix, config, "status", "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def log_lines(config: Path) -> list[str]:
    log = load_config(config).log
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def comparable(config: Path) -> dict[str, Any]:
    """The index without what differs between two homes (meta keeps the scope keys equal)."""
    return index_state(load_config(config).db)


def workspace_home(tmp_path: Path, name: str = "home") -> tuple[Path, Path]:
    notes = tmp_path / f"{name}-notes"
    write_tree(notes, NOTES)  # type: ignore[arg-type]
    return notes, write_config(tmp_path / name, CLOSED, notes=notes, retries=0)


def clean_index(tmp_path: Path, notes: Path) -> dict[str, Any]:
    """A fresh index of the notes as they are now, built in another home."""
    config = write_config(tmp_path / "clean", CLOSED, notes=notes, retries=0)
    synced([], config)
    return comparable(config)


# -------------------------------------------------------------------- unreadable workspace folders


@pytest.mark.parametrize("mode", [0o000, 0o600], ids=["chmod-000", "no-search-permission"])
def test_unreadable_folder_keeps_its_index_says_so_and_recovers(
    tmp_path: Path, unprivileged: list[str], mode: int
) -> None:
    notes, config = workspace_home(tmp_path)
    synced(unprivileged, config)
    before = comparable(config)
    assert len(before["files"]) == 3 and before["collections"], before
    log_before = len(log_lines(config))

    (notes / "sub").chmod(mode)
    try:
        synced(unprivileged, config)
        assert comparable(config) == before, "files or collections under the unreadable folder were dropped"
        new_lines = log_lines(config)[log_before:]
        about = [line for line in new_lines if "sub" in line]
        assert len(about) == 1 and "cannot read" in about[0] and "keeping its 2 indexed files" in about[0], new_lines

        data = status_json(unprivileged, config)
        [entry] = data["sources"]
        assert entry["files"] == 3 and entry["lag"]["unreadable"] == ["sub/"] and entry["lag"]["lags"] is False, entry
        human = ns(unprivileged, config, "status", "--offline")
        assert human.returncode == 0 and "cannot read: sub/" in human.stdout, human.stdout
        # edited while unreadable: the next readable sync must pick the new text up
        (notes / "sub" / "b.md").write_text("# Bravo\n\nbravo rewritten while locked\n", encoding="utf-8")
    finally:
        (notes / "sub").chmod(0o755)
    synced(unprivileged, config)
    assert comparable(config) == clean_index(tmp_path, notes)
    assert status_json(unprivileged, config)["sources"][0]["lag"]["unreadable"] == []


def test_mcp_status_tool_names_the_unreadable_folder(tmp_path: Path, unprivileged: list[str]) -> None:
    notes, config = workspace_home(tmp_path)
    synced(unprivileged, config)
    (notes / "sub").chmod(0)
    found: dict[str, Any] = {}
    params = StdioServerParameters(
        command=(unprivileged or [NOTES_SEARCH])[0],
        args=[*unprivileged[1:], *([NOTES_SEARCH] if unprivileged else []), "--config", str(config), "mcp"],
        env=subprocess_env(),
        cwd=str(tmp_path),
    )

    async def main() -> None:
        with (tmp_path / "server.log").open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                found.update(await call(session, "status"))

    try:
        anyio.run(main)
    finally:
        (notes / "sub").chmod(0o755)
    [entry] = found["sources"]
    assert entry["lag"]["unreadable"] == ["sub/"] and entry["files"] == 3, entry


WATCH_AND_CATCH_UP = r"""
import json, sys
from indexer.config import load_config
from indexer.embedders import make_embedder
from indexer.sync import catch_up
from indexer.watch import Watcher

config = load_config(sys.argv[1])
embedder = make_embedder(config.embedding)
watcher = Watcher(config, lambda: embedder, reconcile_on_start=False)
report = watcher.reconcile()
out = {"reconcile": [s.unreadable for s in report.sources]}
watcher._queue({("notes", "sub"), ("notes", "sub/b.md"), ("notes", "sub/deep")})
batch = watcher.flush()
out["batch"] = [batch.deleted, batch.errors, batch.retried]
out["catch_up"] = [catch_up(config, ("notes",), "sub", lambda: embedder), catch_up(config, (), None, lambda: embedder)]
print(json.dumps(out))
"""


def test_watcher_and_catch_up_keep_an_unreadable_folder(tmp_path: Path, unprivileged: list[str]) -> None:
    notes, config = workspace_home(tmp_path)
    synced(unprivileged, config)
    before = comparable(config)
    (notes / "sub").chmod(0)
    try:
        proc = subprocess.run(
            [*unprivileged, PYTHON, "-c", WATCH_AND_CATCH_UP, str(config)],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        (notes / "sub").chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["reconcile"] == [["sub"]] and out["batch"] == [0, [], []], out
    assert comparable(config) == before


@pytest.mark.parametrize("loss", ["vanished", "unreadable", "empty"])
def test_a_lost_source_root_keeps_its_index(tmp_path: Path, loss: str, request: pytest.FixtureRequest) -> None:
    prefix: list[str] = request.getfixturevalue("unprivileged") if loss == "unreadable" else []
    notes, config = workspace_home(tmp_path)
    synced(prefix, config)
    before = comparable(config)
    away = tmp_path / "away"
    if loss == "vanished":
        notes.rename(away)
    elif loss == "unreadable":
        notes.chmod(0)
    else:  # the mount point of a drive that is not mounted: an empty folder
        away.mkdir()
        for entry in notes.iterdir():
            entry.rename(away / entry.name)
    try:
        proc = ns(prefix, config, "sync")
        assert proc.returncode == 1, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        expected = {
            "vanished": "does not exist",
            "unreadable": "cannot read folder",
            "empty": "is empty but 3 indexed",
        }[loss]
        assert len(errors) == 1 and expected in errors[0] and "index is kept" in errors[0], proc.stderr
        assert comparable(config) == before
        [entry] = status_json(prefix, config)["sources"]
        assert entry["files"] == 3 and expected in entry["error"], entry
    finally:
        if loss == "unreadable":
            notes.chmod(0o755)
        elif loss == "vanished":
            away.rename(notes)
        else:
            for entry in away.iterdir():
                entry.rename(notes / entry.name)
    synced(prefix, config)
    assert comparable(config) == before
    assert status_json(prefix, config)["sources"][0]["error"] is None


def test_an_emptied_root_is_accepted_by_sync_full(tmp_path: Path) -> None:
    notes, config = workspace_home(tmp_path)
    synced([], config)
    shutil.rmtree(notes)
    notes.mkdir()
    assert ns([], config, "sync").returncode == 1
    synced([], config, "--full")  # the notes really are gone: --full says so
    assert comparable(config)["files"] == []


# ------------------------------------------------------------------------------ damaged mirrors


def git_home(tmp_path: Path, upstream: Path, name: str = "home") -> tuple[Path, Path]:
    config = write_config(tmp_path / name, CLOSED, git_url=upstream, retries=0)
    return config, tmp_path / name / "mirrors" / "repo.git"


def filler(i: int) -> str:
    """Text that compresses poorly, so every blob spans many bytes of the pack."""
    return " ".join(f"w{(i * 7919 + k * 104729) % 100003}" for k in range(400))


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, pygit2.Repository]:
    path = tmp_path / "user-repo"
    repo = init_upstream(path)
    commit(repo, {f"n{i}.md": f"# Note {i}\n\n{filler(i)}\n" for i in range(6)}, time=T0)
    commit(repo, {"deep/x.md": "# Deep\n\nkernel module notes\n"}, time=T0 + 60)
    return path, repo


def pack_of(mirror: Path) -> Path:
    [pack] = (mirror / "objects" / "pack").glob("*.pack")
    return pack


def damage_everywhere(mirror: Path) -> None:
    """Flip bytes all through the pack: commits, trees and blobs all fail to inflate."""
    pack = pack_of(mirror)
    pack.chmod(0o644)
    data = bytearray(pack.read_bytes())
    for offset in range(200, len(data) - 100, 50):
        data[offset] ^= 0xFF
    pack.write_bytes(bytes(data))


def damage_one_blob(mirror: Path) -> None:
    """Flip a byte inside one blob's compressed data: refs, commits and trees still read."""
    pack = pack_of(mirror)
    listing = subprocess.run(
        ["git", "verify-pack", "-v", str(pack.with_suffix(".idx"))], capture_output=True, text=True, check=True
    ).stdout
    blobs = [line.split() for line in listing.splitlines() if re.match(r"^[0-9a-f]{40} blob ", line)]
    _, _, size, packed, offset = max(blobs, key=lambda fields: int(fields[3]))[:5]
    pack.chmod(0o644)
    data = bytearray(pack.read_bytes())
    data[int(offset) + int(packed) // 2] ^= 0xFF
    pack.write_bytes(bytes(data))
    assert int(size) > 1000


def mirror_digest(mirror: Path) -> dict[str, tuple[object, ...]]:
    """Every file of the mirror but FETCH_HEAD, which a failing fetch itself rewrites."""
    return {k: v for k, v in tree_digest(mirror).items() if k != "FETCH_HEAD"}


def leftovers(mirror: Path) -> list[str]:
    return sorted(p.name for p in mirror.parent.iterdir() if p.name != mirror.name)


@pytest.mark.parametrize("damage", ["pack-before-a-fetch", "one-blob-found-while-indexing"])
def test_a_damaged_mirror_is_cloned_again_and_indexed_like_a_fresh_one(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository], damage: str
) -> None:
    url, repo = upstream
    config, mirror = git_home(tmp_path, url)
    synced([], config)
    exe = tmp_path / "notes-search-stand-in"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    [hook] = install_hooks(load_config(config), [], executable=exe)
    hook_text = hook.read_text()
    if damage == "pack-before-a-fetch":
        damage_everywhere(mirror)
        commit(repo, {"n1.md": "# Note 1\n\nrewritten after the damage\n", "n2.md": None}, time=T0 + 120)
        data = status_json([], config)
        assert data["sources"][0]["lag"]["mirror_damaged"], data
        human = ns([], config, "status", "--offline").stdout
        assert "mirror damaged" in human and "clones it again" in human, human
        args: tuple[str, ...] = ()
    else:
        damage_one_blob(mirror)
        args = ("--full",)  # nothing new upstream: only a full re-read meets the damaged blob
    proc = ns([], config, "sync", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    [report] = json.loads(proc.stdout)["sources"]
    assert report["recloned"] and report["error"] is None, report
    log = "\n".join(log_lines(config))
    assert "is damaged" in log and "cloned again" in log, log

    clean_config, _ = git_home(tmp_path, url, "clean")
    synced([], clean_config)
    assert comparable(config) == comparable(clean_config)
    assert hook.read_text() == hook_text and os.access(hook, os.X_OK), "the installed hook was lost"
    assert leftovers(mirror) == []
    subprocess.run(["git", "--git-dir", str(mirror), "fsck", "--no-progress"], check=True, capture_output=True)
    [entry] = status_json([], config)["sources"]
    assert entry["lag"]["mirror_damaged"] is None and entry["error"] is None and entry["lag"]["lags"] is False, entry


def test_a_damaged_mirror_with_the_remote_unreachable_is_left_alone(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository]
) -> None:
    url, _ = upstream
    config, mirror = git_home(tmp_path, url)
    synced([], config)
    before = comparable(config)
    damage_everywhere(mirror)
    damaged = mirror_digest(mirror)
    data = yaml.safe_load(config.read_text())
    data["sources"]["git"]["repo"]["url"] = closed_port_url() + "/repo.git"
    config.write_text(yaml.safe_dump(data))
    proc = ns([], config, "sync")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "ls-remote" in errors[0], proc.stderr
    # the driver itself, past ls-remote: the fetch fails, the remote does not answer, no clone
    offline = GitSource("repo", data["sources"]["git"]["repo"]["url"], mirror, "main", FileSelection())
    with pytest.raises(SourceError, match=r"\): fetch: ") as failure:
        git.update_mirror(offline)
    assert not isinstance(failure.value, git.MirrorDamaged) and "clon" not in str(failure.value)
    assert mirror_digest(mirror) == damaged and leftovers(mirror) == []  # no clone was even tried
    assert comparable(config) == before


class _RefsOnlyHandler(BaseHTTPRequestHandler):
    """Smart HTTP that advertises refs (ls-remote works) and fails every pack request (HTTP 500),
    like a proxy that drops the transfer: a failure that is not the mirror's fault."""

    repo = ""

    def do_GET(self) -> None:
        refs = subprocess.run(
            ["git", "upload-pack", "--stateless-rpc", "--advertise-refs", self.repo], capture_output=True, check=True
        ).stdout
        head = b"# service=git-upload-pack\n"
        body = b"%04x" % (len(head) + 4) + head + b"0000" + refs
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.send_error(500, "upstream dropped the transfer")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refs_only_server(upstream: tuple[Path, pygit2.Repository]) -> Iterator[str]:
    handler = type("Handler", (_RefsOnlyHandler,), {"repo": str(upstream[0])})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/repo.git"
    finally:
        server.shutdown()
        server.server_close()


def test_a_fetch_failing_for_another_reason_never_reclones(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository], refs_only_server: str
) -> None:
    url, repo = upstream
    source = GitSource("repo", str(url), tmp_path / "mirrors" / "repo.git", "main", FileSelection())
    git.sync_mirror(source)  # a healthy mirror, cloned from the local upstream
    commit(repo, {"new.md": "# New\n"}, time=T0 + 120)  # something to fetch
    healthy = mirror_digest(source.mirror)
    flaky = GitSource("repo", refs_only_server, source.mirror, "main", FileSelection())
    assert git.remote_head(flaky) == str(repo.references["refs/heads/main"].target)  # ls-remote works
    with pytest.raises(SourceError, match=r"\): fetch: ") as failure:
        git.update_mirror(flaky)
    assert not isinstance(failure.value, git.MirrorDamaged) and "clon" not in str(failure.value)
    assert mirror_digest(source.mirror) == healthy and leftovers(source.mirror) == []


# --------------------------------------------------------------------------------------- status


def test_status_says_when_a_sync_is_running(tmp_path: Path) -> None:
    _, config_path = workspace_home(tmp_path)
    config = load_config(config_path)
    synced([], config_path)
    config.lock_path.unlink()  # probing must not create it
    runner = CliRunner()
    result = runner.invoke(cli_module.cli, ["--config", str(config_path), "status", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["sync_running"] is None, result.output
    assert not config.lock_path.exists(), "status created the lock file"
    lock = SyncLock(config.lock_path)
    assert lock.acquire()
    try:
        result = runner.invoke(cli_module.cli, ["--config", str(config_path), "status", "--json"])
        assert json.loads(result.stdout)["sync_running"] == {"pid": os.getpid()}
        human = runner.invoke(cli_module.cli, ["--config", str(config_path), "status"]).stdout
        assert f"sync running (pid {os.getpid()})" in human, human
    finally:
        lock.release()
    result = runner.invoke(cli_module.cli, ["--config", str(config_path), "status", "--json"])
    assert json.loads(result.stdout)["sync_running"] is None


def kill_sync_at(config: Path, kill_point: str) -> None:
    proc = subprocess.run(
        [PYTHON, "-c", KILL_DRIVER, kill_point, "--config", str(config), "sync", "--quiet"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, f"kill point {kill_point} never reached: {proc.stderr[-2000:]}"


@pytest.mark.parametrize("kind", ["workspace", "git"])
def test_a_killed_first_sync_leaves_the_index_marked_incomplete(
    tmp_path: Path, kind: str, upstream: tuple[Path, pygit2.Repository]
) -> None:
    if kind == "workspace":
        _, config = workspace_home(tmp_path)
    else:
        config, _ = git_home(tmp_path, upstream[0])
    kill_sync_at(config, "call@indexer.store:Store.mark_synced@1")  # every file written, not yet marked
    [entry] = status_json([], config)["sources"]
    assert entry["files"] > 0 and entry["incomplete"] is True, entry
    human = ns([], config, "status", "--offline").stdout
    assert "incomplete: the first sync did not finish" in human, human
    if kind == "workspace":
        # a scoped catch-up (a search with --path) indexes one folder: the index is still incomplete
        proc = ns([], config, "query", "bravo", "--path", "sub", "--mode", "lex")
        assert proc.returncode == 0, proc.stderr
        assert status_json([], config)["sources"][0]["incomplete"] is True
    synced([], config)
    assert status_json([], config)["sources"][0]["incomplete"] is False


# ------------------------------------------------------------------------------------ skip logs


def test_each_skip_is_logged_once_per_sync(tmp_path: Path, upstream: tuple[Path, pygit2.Repository]) -> None:
    url, repo = upstream
    commit(repo, {"blob.md": b"PK\x00\x03 binary", "link.md": Symlink("n1.md")}, time=T0 + 120)
    notes = tmp_path / "notes"
    write_tree(
        notes,
        {
            "ok.md": "# Ok\n\nfine\n",
            "nul.md": b"# x\n\x00\x01",
            "latin1.md": "# Caf\xe9\n".encode("latin-1"),
            "huge.md": "# Huge\n\n" + "x" * 3000,
            "coll/_meta.yaml": "name: [unclosed\n",
            "coll/y.md": "# Y\n",
        },
    )
    config = write_config(tmp_path / "home", CLOSED, notes=notes, git_url=url, retries=0)
    data = yaml.safe_load(config.read_text())
    data["max_file_bytes"] = 2000
    config.write_text(yaml.safe_dump(data))
    synced([], config)
    log = log_lines(config)
    for name in ("nul.md", "latin1.md", "huge.md", "_meta.yaml", "blob.md", "link.md"):
        hits = [line for line in log if name in line]
        assert len(hits) == 1, f"{name} logged {len(hits)} times: {hits}"


def test_a_long_lived_process_reads_the_reclone_not_the_damaged_pack(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository]
) -> None:
    """libgit2 shares open packs by path and the re-cloned pack has the damaged one's name: an
    MCP server or watcher that syncs in process must not go on reading the old one."""
    url, _ = upstream
    config_path, mirror = git_home(tmp_path, url)
    config = load_config(config_path)
    assert not run_sync(config, embedder_factory=None).failed
    source = config.sources["repo"]
    assert isinstance(source, GitSource)
    rev = git.mirror_head(source)
    assert rev is not None
    texts = {path: git.read_blob(source, rev, path) for path in sorted(git.tree_paths(source, rev))}
    damage_one_blob(mirror)
    report = run_sync(config, full=True, embedder_factory=None)
    assert not report.failed and report.sources[0].recloned, report
    assert {path: git.read_blob(source, rev, path) for path in texts} == texts


@pytest.mark.parametrize("exchange", ["renameat2", "two-renames"])
def test_swap_puts_the_new_folder_in_place_and_the_old_one_aside(
    tmp_path: Path, exchange: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if exchange == "two-renames":  # a kernel or libc without RENAME_EXCHANGE

        def no_libc(*args: object, **kwargs: object) -> None:
            raise OSError("no renameat2")

        monkeypatch.setattr(git.ctypes, "CDLL", no_libc)
    old, new = tmp_path / "repo.git", tmp_path / ".repo.git.x.clone"
    write_tree(old, {"HEAD": "old\n"})
    write_tree(new, {"HEAD": "new\n"})
    git._swap(new, old)
    assert (old / "HEAD").read_text() == "new\n" and (new / "HEAD").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".repo.git.x.clone", "repo.git"]


# ------------------------------------------------------------- damage no sync reads, lost mirrors


def test_a_blob_that_show_finds_damaged_is_reported_and_recloned_by_the_next_plain_sync(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository]
) -> None:
    """An incremental sync reads only changed blobs, so it cannot notice a damaged old one: the
    read that meets it marks the mirror, status says so, and the next plain sync clones again."""
    url, repo = upstream
    config, mirror = git_home(tmp_path, url)
    synced([], config)
    damage_one_blob(mirror)
    commit(repo, {"new.md": "# New\n\nadded after the damage\n"}, time=T0 + 120)
    [report] = json.loads(synced([], config, "--json").stdout)["sources"]
    assert report["recloned"] is None, report  # nothing this sync read was broken
    assert status_json([], config)["sources"][0]["lag"]["mirror_damaged"] is None

    shown = {name: ns([], config, "show", f"repo:{name}") for name in sorted(NOTE_NAMES)}
    broken = [name for name, proc in shown.items() if proc.returncode != 0]
    assert len(broken) == 1 and "is damaged" in shown[broken[0]].stderr, shown
    [entry] = status_json([], config)["sources"]
    assert entry["lag"]["mirror_damaged"], entry
    human = ns([], config, "status", "--offline").stdout
    assert "mirror damaged" in human and "clones it again" in human, human

    [report] = json.loads(synced([], config, "--json").stdout)["sources"]
    assert report["recloned"] and report["error"] is None, report
    assert ns([], config, "show", f"repo:{broken[0]}").returncode == 0
    assert status_json([], config)["sources"][0]["lag"]["mirror_damaged"] is None
    assert not (mirror / git.DAMAGE_MARK).exists() and leftovers(mirror) == []


def test_a_grep_that_meets_damaged_objects_marks_the_mirror_for_the_next_sync(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository]
) -> None:
    """`grep` reads every blob: when git grep fails on a damaged one, it says so, status reports
    the damage and the next plain sync clones the mirror again."""
    url, _ = upstream
    config, mirror = git_home(tmp_path, url)
    synced([], config)
    damage_one_blob(mirror)
    found = ns([], config, "grep", "-i", "e")
    assert found.returncode == 1 and "the mirror is damaged" in found.stderr, (found.stdout, found.stderr)
    assert status_json([], config)["sources"][0]["lag"]["mirror_damaged"]
    [report] = json.loads(synced([], config, "--json").stdout)["sources"]
    assert report["recloned"] and report["error"] is None, report
    assert ns([], config, "grep", "-i", "e").returncode == 0


NOTE_NAMES = [f"n{i}.md" for i in range(6)]


def test_a_git_grep_failing_on_damaged_objects_marks_the_mirror(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository]
) -> None:
    """What `grep` calls when git grep fails (note_git_failure): damage marks, other failures do not."""
    url, _ = upstream
    source = GitSource("repo", str(url), tmp_path / "mirrors" / "repo.git", "main", FileSelection())
    head = git.sync_mirror(source)
    assert git.note_git_failure(source, "fatal: bad revision 'nope'\nremote: packfile is corrupt\n") is None
    assert git.mirror_damage(source) is None
    subprocess.run(["git", "--git-dir", str(source.mirror), "gc", "-q"], check=True)
    damage_one_blob(source.mirror)
    proc = subprocess.run(
        ["git", "--git-dir", str(source.mirror), "grep", "-e", "w", head, "--"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode not in (0, 1), proc  # git grep met the broken blob
    line = git.note_git_failure(source, proc.stderr)
    assert line and git.mirror_damage(source) == line
    assert git.mirror_head(source) is None  # no base for "nothing changed": the sync fetches
    assert git.update_mirror(source) == (head, line)
    assert git.mirror_damage(source) is None and git.mirror_head(source) == head


def test_a_missing_mirror_shows_in_status_and_sync_clones_it_again(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository]
) -> None:
    url, _ = upstream
    config, mirror = git_home(tmp_path, url)
    synced([], config)
    shutil.move(mirror, mirror.with_name("gone.git"))
    [entry] = status_json([], config)["sources"]
    assert entry["lag"]["mirror_damaged"] == f"the mirror {mirror} is missing", entry
    human = ns([], config, "status", "--offline").stdout
    assert f"the mirror {mirror} is missing" in human and "`notes-search sync` clones it again" in human, human
    synced([], config)
    assert ns([], config, "show", "repo:deep/x.md").returncode == 0
    [entry] = status_json([], config)["sources"]
    assert entry["lag"]["mirror_damaged"] is None and entry["lag"]["lags"] is False, entry


@pytest.mark.parametrize("what", ["a-file", "a-folder-of-other-files"])
def test_a_mirror_path_that_is_not_ours_gets_one_answer(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository], what: str
) -> None:
    """status, sync and hooks install all say what sync does: move it away or change `mirror:`."""
    url, _ = upstream
    config, _ = git_home(tmp_path, url)
    foreign = tmp_path / "not-a-mirror"
    if what == "a-file":
        foreign.write_text("notagit\n")
    else:
        write_tree(foreign, {"junk": "x\n"})
    data = yaml.safe_load(config.read_text())
    data["sources"]["git"]["repo"]["mirror"] = str(foreign)
    config.write_text(yaml.safe_dump(data))
    refusal = f"{foreign} exists but is not a bare git mirror; refusing to replace it"
    sync = ns([], config, "sync")
    after = ns([], config, "status", "--offline")
    hooks = ns([], config, "hooks", "install")
    assert sync.returncode == 1 and refusal in sync.stderr, sync.stderr
    assert after.returncode == 0 and refusal in after.stdout and "clones it again" not in after.stdout, after.stdout
    assert hooks.returncode == 1 and refusal in hooks.stderr and "no mirror" not in hooks.stderr, hooks.stderr
    assert foreign.is_file() if what == "a-file" else sorted(os.listdir(foreign)) == ["junk"]


def test_hooks_install_into_a_read_only_hooks_folder_says_which_and_installs_the_rest(
    tmp_path: Path, upstream: tuple[Path, pygit2.Repository], unprivileged: list[str]
) -> None:
    url, _ = upstream
    config, mirror = git_home(tmp_path, url)
    data = yaml.safe_load(config.read_text())
    other = tmp_path / "home" / "mirrors" / "other.git"
    data["sources"]["git"]["other"] = {"url": str(url), "mirror": str(other)}
    config.write_text(yaml.safe_dump(data))
    synced([], config)
    (mirror / "hooks").chmod(0o555)
    try:
        proc = ns(unprivileged, config, "hooks", "install")
    finally:
        (mirror / "hooks").chmod(0o755)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and errors == [
        f"Error: cannot write hook {mirror / 'hooks' / 'reference-transaction'}: Permission denied"
    ], proc.stderr
    assert proc.stdout.strip() == f"installed {other / 'hooks' / 'reference-transaction'}", proc.stdout
    assert sorted(p.name for p in (mirror / "hooks").iterdir() if not p.name.endswith(".sample")) == []
