"""Honest errors: every unusable file or value met at start-up or during a sync ends in one line
naming the file or the config key, exit 1, never a traceback.

Permission cases run the CLI as a user the permissions apply to: as root (where chmod blocks
nothing) through `setpriv` as `nobody`, otherwise as the current user. A full disk is a real
tmpfs mounted in a user namespace (`unshare`). Each is skipped, with the reason, only where the
machine cannot do that.

Rerun: .venv/bin/pytest tests/test_errors.py
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from search import cli as cli_module
from tests.conftest import assert_one_line_error
from tests.embed_servers import closed_port_url
from tests.test_crash_safety import subprocess_env

pytestmark = pytest.mark.sqlite_only(
    "errors of the SQLite file and its folders (permissions, a full disk, a damaged file); a server that"
    " cannot be reached or lacks the index: test_postgres"
)

REPO = Path(__file__).resolve().parent.parent
RUN_CLI = "import sys; from search.cli import main; sys.argv[0] = 'notes-search'; main()"
TIMEOUT = 120  # seconds a child may take before the test fails instead of hanging


def cli(config: Path | str, *args: str) -> Result:
    return CliRunner().invoke(cli_module.cli, ["--config", str(config), *args])


def write_config(folder: Path, notes: Path, **top: object) -> Path:
    """A config whose embedder is unreachable (no retries): syncs index text, vectors stay pending."""
    data: dict[str, object] = {
        "root": str(folder),
        "embedding": {
            "provider": "ollama",
            "model": "fake:1",
            "endpoint": closed_port_url(),
            "dims": 8,
            "retries": 0,
            "timeout": 1,
        },
        "sources": {"workspace": {"notes": {"root": str(notes), "paths": ["**"]}}},
        **top,
    }
    path = folder / "notes-search.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    path.chmod(0o644)
    return path


def assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(("Error: ", "error: ")), proc.stderr
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


# ------------------------------------------------------------------ running as a non-root user


def _unprivileged_prefix() -> list[str] | None:
    """How to run a child for whom file permissions apply, or None when there is no way."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        return None
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import os; print(os.geteuid(), os.getegid())"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return prefix if probe.returncode == 0 and probe.stdout.split() == ["65534", "65534"] else None


@pytest.fixture(scope="module")
def as_user() -> list[str]:
    prefix = _unprivileged_prefix()
    if prefix is None:
        pytest.skip(
            "running as root without setpriv (or setpriv cannot drop the privileges): chmod would not block anything"
        )
    return prefix


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A folder the unprivileged child can reach (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="notes-search-errors-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(folder)


def writable_by_anyone(folder: Path) -> Path:
    """A folder the unprivileged child may write into (mkdir's mode is cut by the umask)."""
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    return folder


def run_as(prefix: list[str], config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-c", RUN_CLI, "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=subprocess_env(),
        cwd=config.parent,
        stdin=subprocess.DEVNULL,
    )


def notes_in(folder: Path) -> Path:
    notes = folder / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Backups\n\nrestic runs every night\n", encoding="utf-8")
    notes.chmod(0o755)
    (notes / "a.md").chmod(0o644)
    return notes


def test_db_folder_not_writable_is_one_line(as_user: list[str], shared: Path) -> None:
    locked = shared / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    config = write_config(
        shared, notes_in(shared), db=str(locked / "db" / "index.sqlite"), log=str(shared / "log" / "sync.log")
    )
    writable_by_anyone(shared / "log")
    assert_one_line(run_as(as_user, config, "sync"), str(locked / "db"), "Permission denied")
    assert not (locked / "db").exists()


def test_lock_in_a_folder_that_cannot_hold_files_is_one_line(as_user: list[str], shared: Path) -> None:
    config = write_config(shared, notes_in(shared), db="/proc/a.sqlite", log=str(shared / "log" / "s.log"))
    writable_by_anyone(shared / "log")
    assert_one_line(run_as(as_user, config, "sync"), "/proc/.notes-sync.lock")


def test_read_only_index_is_one_line(as_user: list[str], shared: Path) -> None:
    """Synced by its owner, then synced and read by a user who may not write it."""
    writable_by_anyone(shared / "db")
    config = write_config(
        shared, notes_in(shared), db=str(shared / "db" / "index.sqlite"), log=str(shared / "db" / "sync.log")
    )
    assert cli(config, "sync").exit_code == 0
    for name in ("sync.log", ".notes-sync.lock"):
        (shared / "db" / name).chmod(0o666)
    (shared / "db" / "index.sqlite").chmod(0o444)
    assert_one_line(run_as(as_user, config, "sync"), str(shared / "db" / "index.sqlite"), "read-only")
    # a scoped query still answers from what is indexed; its catch-up says why it could not run
    scoped = run_as(as_user, config, "query", "restic", "--source", "notes", "--mode", "lex", "--json")
    assert scoped.returncode == 0, scoped.stderr
    answer = json.loads(scoped.stdout)
    assert answer["results"][0]["path"] == "a.md"
    assert "could not be updated" in answer["notice"] and "read-only" in answer["notice"]
    # reading a WAL index needs its folder writable (for -shm): said as such, not a traceback
    for extra in (shared / "db").glob("index.sqlite-*"):
        extra.unlink()
    (shared / "db" / "index.sqlite").chmod(0o644)
    (shared / "db").chmod(0o755)
    assert_one_line(
        run_as(as_user, config, "query", "restic", "--mode", "lex"),
        str(shared / "db" / "index.sqlite"),
        "folder must be writable",
    )


def test_log_that_cannot_be_opened_is_one_line(as_user: list[str], shared: Path) -> None:
    locked = shared / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    writable_by_anyone(shared / "db")
    config = write_config(
        shared, notes_in(shared), db=str(shared / "db" / "i.sqlite"), log=str(locked / "log" / "sync.log")
    )
    assert_one_line(run_as(as_user, config, "sync"), str(locked / "log" / "sync.log"), "log")


# ------------------------------------------------------------------------ the index file itself


def test_db_that_is_a_folder_or_not_sqlite_is_one_line(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n", encoding="utf-8")
    (tmp_path / "folder.sqlite").mkdir()
    config = write_config(tmp_path, notes, db=str(tmp_path / "folder.sqlite"))
    for command in (["sync"], ["query", "x"], ["status", "--offline"]):
        assert_one_line_error(cli(config, *command), "folder.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"\x00not a database" * 500)
    config = write_config(tmp_path, notes, db=str(tmp_path / "junk.sqlite"))
    for command in (["sync"], ["query", "x"]):
        assert_one_line_error(cli(config, *command), "junk.sqlite", "not a usable SQLite index")


def _can_mount_tmpfs() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return None if probe.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {probe.stderr.strip()}"


def test_disk_full_during_sync_is_one_line(tmp_path: Path) -> None:
    """The index's folder is a 384 KiB tmpfs; the notes need several MiB of index."""
    reason = _can_mount_tmpfs()
    if reason:
        pytest.skip(reason)
    notes = tmp_path / "notes"
    notes.mkdir()
    for number in range(150):
        words = " ".join(f"word{number}x{i}" for i in range(1500))
        (notes / f"n{number}.md").write_text(f"# Note {number}\n\n{words}\n", encoding="utf-8")
    small = tmp_path / "small"
    small.mkdir()
    config = write_config(tmp_path, notes, db=str(small / "index.sqlite"), log=str(tmp_path / "sync.log"))
    script = f'mount -t tmpfs -o size=384k tmpfs "{small}" && exec "$@"'
    proc = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
            sys.executable,
            "-c",
            RUN_CLI,
            "--config",
            str(config),
            "sync",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=subprocess_env(),
        stdin=subprocess.DEVNULL,
    )
    assert_one_line(proc, str(small / "index.sqlite"), "disk is full")
    assert "disk is full" in (tmp_path / "sync.log").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- config and log


def test_read_only_commands_create_neither_log_folder_nor_index(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    config = write_config(tmp_path, notes, db="state/db/index.sqlite", log="state/log/sync.log")
    for command in (["status", "--offline"], ["query", "alpha"], ["toc"], ["collections"]):
        assert_one_line_error(cli(config, *command), "no index", "sync")
    show = cli(config, "show", "notes:a.md")
    assert show.exit_code == 0 and "alpha" in show.stdout  # workspace files need no index
    assert not (tmp_path / "state").exists()
    assert cli(config, "sync", "-q").exit_code == 0
    assert (tmp_path / "state" / "log" / "sync.log").is_file() and (
        tmp_path / "state" / "db" / "index.sqlite"
    ).is_file()


EMBEDDING = "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://127.0.0.1:9', dims: 4}\n"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null\n",
        EMBEDDING + "sources: {}\n",
        EMBEDDING + "sources: {workspace: {n: {root: notes, paths: []}}}\n",
        EMBEDDING + "sources: {workspace: {n: {root: notes, paths: }}}\n",
        EMBEDDING + "sources: {workspace: {n: {root: notes, paths: ['**'], include: []}}}\n",
    ],
    ids=["empty", "null", "no-sources", "no-paths", "null-paths", "no-include"],
)
def test_a_config_that_selects_nothing_warns(tmp_path: Path, text: str) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n", encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(text, encoding="utf-8")
    result = cli(config, "sync")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "selects nothing" in warnings[0], result.stderr
    assert "selects nothing" in (tmp_path / "log" / "notes_sync.log").read_text(encoding="utf-8")
    assert json.loads(cli(config, "sync", "--json").stdout)["changed"] is False
    assert cli(config, "sync", "-q").stderr == ""


def test_device_fifo_and_huge_configs_are_refused_at_once(tmp_path: Path) -> None:
    """Each in a child with a timeout: a FIFO that is opened for reading would block for ever."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.yaml"
    huge.write_text("root: .\n# " + "x" * (2 << 20) + "\n", encoding="utf-8")
    dev_before = sorted(os.listdir("/dev"))
    for path, needle in ((Path("/dev/null"), "not a regular file"), (fifo, "not a regular file"), (huge, "1 MiB")):
        proc = subprocess.run(
            [sys.executable, "-c", RUN_CLI, "--config", str(path), "sync"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=subprocess_env(),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )
        assert_one_line(proc, str(path), needle)
    assert sorted(os.listdir("/dev")) == dev_before  # `-c /dev/null` once created /dev/db/


def test_path_keys_expand_home_and_variables_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer.config import load_config

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NOTES_PLACE", str(tmp_path / "place"))
    config_path = tmp_path / "c.yaml"
    config_path.write_text(
        "root: $NOTES_PLACE\ndb: ~/db/i.sqlite\nlog: $HOME/log/s.log\n"
        "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 4}\n"
        "sources:\n  workspace:\n    w: {root: '${HOME}/notes', paths: ['**']}\n"
        "  git:\n    g: {url: 'https://example.invalid/r.git', mirror: '$HOME/m/$$g.git'}\n",
        encoding="utf-8",
    )
    config = load_config(config_path)
    home = tmp_path / "home"
    assert (config.root, config.db, config.log) == (tmp_path / "place", home / "db/i.sqlite", home / "log/s.log")
    assert config.sources["w"].root == home / "notes"  # type: ignore[union-attr]
    assert config.sources["g"].mirror == home / "m/$g.git"  # type: ignore[union-attr]
    for key, text in (
        ("log", "log: $NOT_SET_ANYWHERE/x\n"),
        ("db", "db: ${NOT_SET_ANYWHERE}/x\n"),
        ("sources.workspace.w.root", "sources: {workspace: {w: {root: $NOT_SET_ANYWHERE, paths: ['**']}}}\n"),
        ("root", "root: $EMPTY_ONE/x\n"),
    ):
        monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
        monkeypatch.setenv("EMPTY_ONE", "")
        config_path.write_text(text, encoding="utf-8")
        line = assert_one_line_error(cli(config_path, "status"), str(config_path), key)
        assert "NOT_SET_ANYWHERE is not set" in line or "EMPTY_ONE is empty" in line
    assert not (tmp_path / "$NOT_SET_ANYWHERE").exists()


# ------------------------------------------------------------------------------------ MCP token


@pytest.mark.parametrize(
    "token, needle",
    [("x", "at least 16"), ("short-but-12", "at least 16"), ("a token with spaces in it", "without spaces")],
)
def test_weak_mcp_token_beyond_loopback_is_refused(tmp_path: Path, token: str, needle: str) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    config = write_config(tmp_path, notes)
    result = cli(config, "mcp", "--http", "--host", "0.0.0.0", "--port", "9", "--token", token)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and "secrets.token_urlsafe(32)" in result.stderr
    assert not (tmp_path / "db").exists()


# ------------------------------------------------------------------------- CR-only line endings


def test_cr_only_note_has_lines_that_hits_and_show_agree_on(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    filler = " ".join(["sailing boats along the coast"] * 40)  # big enough to be a chunk of its own
    lines = ["# Old Mac note", "", filler, "", "## Harbour", "", "the lighthouse keeper logs ships", filler, ""]
    (notes / "mac.md").write_bytes("\r".join(lines).encode() + b"\r")
    config = write_config(tmp_path, notes)
    assert cli(config, "sync", "-q").exit_code == 0
    result = cli(config, "query", "lighthouse", "--json", "--mode", "lex")
    hit = json.loads(result.stdout)["results"][0]
    assert hit["breadcrumb"] == "Old Mac note > Harbour", hit  # not the whole text as the title
    assert (hit["line"], hit["end_line"]) == (5, 8), hit
    shown = cli(config, "show", f"notes:mac.md:{hit['line']}:{hit['end_line'] - hit['line'] + 1}")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[:3] == ["## Harbour", "", "the lighthouse keeper logs ships"], shown.stdout
    assert cli(config, "show", "notes:mac.md:7:1").stdout == "the lighthouse keeper logs ships\n"


def test_config_numbers_are_bounded() -> None:
    """Each out of range number is refused naming its key instead of failing deep in a sync."""
    from indexer.config import parse_config
    from indexer.errors import ConfigError

    base = "embedding: {provider: ollama, model: 'm:1', endpoint: 'http://x', dims: 4"
    cases = {
        "max_file_bytes": "max_file_bytes: 99999999999999999999999\nembedding: {}\n",
        "embedding.dims": base.replace("dims: 4", "dims: 100000") + "}\n",
        "embedding.batch": base + ", batch: 99999999999999999999}\n",
        "embedding.retries": base + ", retries: 1000000}\n",
        "embedding.timeout": base + ", timeout: .inf}\n",
        "embedding.keep_alive": base + ", keep_alive: .nan}\n",
    }
    for key, text in cases.items():
        with pytest.raises(ConfigError, match=f"^c.yaml: {key}: "):
            parse_config(text, "c.yaml")
    with pytest.raises(ConfigError, match="^c.yaml: embedding.timeout: "):
        parse_config(base + ", timeout: .nan}\n", "c.yaml")


def test_init_into_a_folder_that_is_not_writable_is_one_line(as_user: list[str], shared: Path) -> None:
    locked = shared / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    notes_in(shared)
    for target in (locked / "notes-search.yaml", locked / "sub" / "notes-search.yaml"):
        proc = subprocess.run(
            [*as_user, sys.executable, "-c", RUN_CLI, "--config", str(target), "init", "notes"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=subprocess_env(),
            cwd=shared,
            stdin=subprocess.DEVNULL,
        )
        assert_one_line(proc, str(target), "Permission denied")


def test_mirror_folder_not_writable_is_one_line(as_user: list[str], shared: Path) -> None:
    """The mirrors' folder is ours to write; when it cannot be, the git source fails with one
    line naming it (it was a PermissionError traceback from the clone)."""
    upstream = shared / "upstream"
    upstream.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(upstream)], check=True)
    (upstream / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    git = ["git", "-C", str(upstream), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "a.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    for path in [upstream, *upstream.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
        if os.geteuid() == 0:  # git refuses a repository of another owner ("dubious ownership")
            os.chown(path, 65534, 65534, follow_symlinks=False)
    locked = shared / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    for folder in ("db", "log"):
        writable_by_anyone(shared / folder)
    config = write_config(
        shared, notes_in(shared), db=str(shared / "db" / "index.sqlite"), log=str(shared / "log" / "sync.log")
    )
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["sources"] = {"git": {"team": {"url": str(upstream), "mirror": str(locked / "mirrors" / "team.git")}}}
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert_one_line(run_as(as_user, config, "sync"), "team", str(locked / "mirrors"), "Permission denied")
    assert not (locked / "mirrors").exists()


# ------------------------------------------------------- a damaged, locked or odd index file


def _many_notes(folder: Path, count: int = 400) -> Path:
    notes = folder / "notes"
    notes.mkdir()
    for number in range(count):
        words = " ".join(f"alpha{number}w{i}" for i in range(120))
        (notes / f"n{number}.md").write_text(f"# Note {number}\n\nalpha {words}\n", encoding="utf-8")
    return notes


def _damage(db: Path) -> None:
    """Noise over the pages of the tables every command reads (the header and the schema stay
    whole, so the file still opens: the damage shows up in the queries)."""
    import random

    import apsw

    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
    pages = [
        int(row[0])
        for row in conn.execute(
            "SELECT pageno FROM dbstat WHERE name IN ('files', 'chunks', 'chunks_fts_data', 'sources', 'meta')"
        )
    ]
    conn.close()
    noise = random.Random(11)
    with db.open("r+b") as handle:
        for page in pages:
            handle.seek((page - 1) * size)
            handle.write(noise.randbytes(size))


def test_damaged_index_is_one_line_in_every_command_mcp_and_watch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from indexer.config import load_config
    from indexer.watch import Watcher
    from search.mcp_server import NotesTools, ToolBox
    from search.service import NotesService
    from tests.fakes import FakeEmbedder

    notes = _many_notes(tmp_path)
    db = tmp_path / "db" / "i.sqlite"
    config = write_config(tmp_path, notes, db=str(db))
    assert cli(config, "sync", "-q").exit_code == 0
    _damage(db)
    for command in (
        ["sync"],
        ["sync", "--full"],
        ["status", "--offline"],
        ["query", "alpha", "--mode", "lex"],
        ["reindex", "notes:n1.md"],
        ["toc"],
    ):
        assert_one_line_error(cli(config, *command), str(db), "not a usable SQLite index")
    import anyio

    box = ToolBox(NotesTools(NotesService.from_config_file(str(config))))
    for name, arguments in (("search", {"query": "alpha", "k": 5, "mode": "lex"}), ("status", {})):
        result = anyio.run(box.call, name, arguments)
        assert result.is_error and "not a usable SQLite index" in result.content[0].text  # type: ignore[union-attr]
    watcher = Watcher(load_config(str(config)), FakeEmbedder)
    with caplog.at_level(logging.ERROR, logger="notes_search"):
        assert watcher.reconcile() is None
    failed = [r for r in caplog.records if "reconcile failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is None and "not a usable SQLite index" in failed[0].getMessage()


def test_index_locked_by_another_process_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `sqlite3` shell (here: a child) holds a write transaction open on the index."""
    from indexer.store import sqlite as sqlite_store

    notes = notes_in(tmp_path)
    db = tmp_path / "i.sqlite"
    config = write_config(tmp_path, notes, db=str(db))
    assert cli(config, "sync", "-q").exit_code == 0
    (notes / "a.md").write_text("# Backups\n\nrestic runs every hour\n", encoding="utf-8")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); c.execute('DELETE FROM meta WHERE 0'); print('held', flush=True); "
            "sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_MS", 100)
        assert_one_line_error(cli(config, "sync"), str(db), "locked by another process")
    finally:
        holder.communicate("", timeout=TIMEOUT)


def test_fifo_at_the_index_or_log_path_is_refused_at_once(tmp_path: Path) -> None:
    """In children with a timeout: opening a FIFO waits for ever for its other end."""
    notes = notes_in(tmp_path)

    def run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", RUN_CLI, "--config", str(config), *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=subprocess_env(),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )

    os.mkfifo(tmp_path / "db.fifo")
    config = write_config(tmp_path, notes, db=str(tmp_path / "db.fifo"))
    for command in (["status", "--offline"], ["query", "restic", "--mode", "lex"], ["sync"]):
        assert_one_line(run(config, *command), str(tmp_path / "db.fifo"), "not a regular file")
    os.mkfifo(tmp_path / "log.fifo")
    config = write_config(tmp_path, notes, db=str(tmp_path / "i.sqlite"), log=str(tmp_path / "log.fifo"))
    assert_one_line(run(config, "sync"), str(tmp_path / "log.fifo"), "not a regular file")
    config = write_config(tmp_path, notes, db=str(tmp_path / "i.sqlite"))
    assert run(config, "sync", "-q").returncode == 0
    config = write_config(tmp_path, notes, db=str(tmp_path / "i.sqlite"), log=str(tmp_path / "log.fifo"))
    query = run(config, "query", "restic", "--mode", "lex")  # read-only: goes on without the log
    assert query.returncode == 0 and "a.md" in query.stdout, query.stderr


def test_a_log_on_a_full_disk_gives_one_warning_and_the_command_goes_on(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    notes = notes_in(tmp_path)
    config = write_config(tmp_path, notes, db=str(tmp_path / "i.sqlite"), log="/dev/full")
    proc = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "--config", str(config), "sync", "--full"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=subprocess_env(),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Logging error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "cannot write log file" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "No space left" in warnings[0], proc.stderr
    assert cli(config, "query", "restic", "--mode", "lex").exit_code == 0  # the index was written


def test_index_below_a_file_or_of_another_program_is_named_so(tmp_path: Path) -> None:
    import sqlite3

    notes = notes_in(tmp_path)
    (tmp_path / "f").write_text("not a folder\n", encoding="utf-8")
    config = write_config(tmp_path, notes, db=str(tmp_path / "f" / "db.sqlite"))
    assert_one_line_error(cli(config, "sync"), f"{tmp_path / 'f'} is not a folder")
    foreign = tmp_path / "other.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE chunks (id INTEGER)")
        conn.execute("CREATE TABLE meta (key TEXT)")
    config = write_config(tmp_path, notes, db=str(foreign))
    for command in (["status", "--offline"], ["sync"], ["sync", "--full"]):
        assert_one_line_error(cli(config, *command), str(foreign), "not a notes-search index", "change `db:`")
    assert {row[0] for row in sqlite3.connect(foreign).execute("SELECT name FROM sqlite_master")} == {"chunks", "meta"}


def test_show_in_an_unreadable_workspace_says_so(as_user: list[str], shared: Path) -> None:
    """A note behind a folder this user may not search is not 'no such file': show names the
    permission problem, as grep and status do."""
    notes = notes_in(shared)
    for folder in ("db", "log"):
        writable_by_anyone(shared / folder)
    config = write_config(shared, notes, db=str(shared / "db" / "index.sqlite"), log=str(shared / "log" / "s.log"))
    notes.chmod(0o000)
    try:
        assert_one_line(run_as(as_user, config, "show", "notes:a.md"), "notes:a.md", "cannot read", "Permission denied")
    finally:
        notes.chmod(0o755)
