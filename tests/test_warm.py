"""The warm path end to end: real `notes-search serve` processes, real clients as subprocesses,
compared byte for byte with the same call run in process (NOTES_SEARCH_NO_DAEMON=1).

Each client records on exit whether it answered warm (click never imported) or in process, so a
test knows which path gave the output it compares.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from pathlib import Path

import pytest

from indexer.config import Config
from search import warm
from tests.conftest import wait_for
from tests.embed_servers import OllamaServer
from tests.test_architecture import HEAVY, REPO
from tests.test_crash_safety import subprocess_env
from tests.test_degraded import synced, write_config

# what the warm client must not load: each costs milliseconds of every call (yaml, the config
# module and package metadata alone cost ~60 ms of a 120 ms call under load)
NOT_ON_THE_WARM_PATH = (
    *HEAVY,
    "click",
    "yaml",
    "indexer.config",
    "importlib.metadata",
    "dataclasses",
    "typing",
    "hashlib",
)

# the installed entry point, plus a note of the path taken and of the unwanted modules it loaded
CLIENT = """\
import atexit, json, sys
sys.argv[0] = "notes-search"
def note():
    loaded = sorted(m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in {heavy!r}))
    path = "process" if "click" in sys.modules else "warm"
    with open({mark!r}, "a") as out:
        out.write(json.dumps([path, loaded]) + "\\n")
atexit.register(note)
from search.warm import main
main()
"""


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    path: str  # "warm" or "process"
    heavy: list[str]  # the modules of NOT_ON_THE_WARM_PATH the client process loaded


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A short $XDG_RUNTIME_DIR of the test's own (socket paths are limited to 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="ns-warm-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def embed_server() -> Iterator[OllamaServer]:
    with OllamaServer({"fake-embed:latest": 64}) as running:
        yield running


@pytest.fixture
def indexed(tmp_path: Path, notes: Path, embed_server: OllamaServer) -> Config:
    return synced(tmp_path, notes, embed_server, None)


class Harness:
    """Starts servers and runs clients for one config, in one runtime folder."""

    def __init__(self, config: Config, runtime: Path, tmp_path: Path) -> None:
        assert config.path is not None
        self.config_path = config.path
        self.runtime = runtime
        self.tmp_path = tmp_path
        self.servers: list[subprocess.Popen[str]] = []
        self.marks = 0

    def env(self, **extra: str) -> dict[str, str]:
        return subprocess_env({"XDG_RUNTIME_DIR": str(self.runtime), **extra})

    def socket(self, config_path: Path | None = None) -> Path:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("XDG_RUNTIME_DIR", str(self.runtime))
            return warm.socket_path(Path(os.path.realpath(config_path or self.config_path)))

    def start(self, *options: str, config_path: Path | None = None) -> subprocess.Popen[str]:
        config = config_path or self.config_path
        server = subprocess.Popen(
            [sys.executable, "-c", "from search.warm import main; main()", "--config", str(config), "serve", *options],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.servers.append(server)
        assert server.stderr is not None
        line = server.stderr.readline()  # written once the socket listens and the server is warm
        assert line.startswith("notes-search serve:"), line + server.stderr.read()
        return server

    def run(
        self, *args: str, no_daemon: bool = False, cwd: Path | None = None, stdout: int | None = None, **env: str
    ) -> Run:
        """`stdout`: a file descriptor for the client's output (its `stdout` is then "")."""
        self.marks += 1
        mark = self.tmp_path / f"mark-{self.marks}"
        extra = {**env, **({warm.DISABLE_ENV: "1"} if no_daemon else {})}
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                CLIENT.format(heavy=NOT_ON_THE_WARM_PATH, mark=str(mark)),
                "--config",
                str(self.config_path),
                *args,
            ],
            env=self.env(**extra),
            cwd=cwd or self.tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
        path, heavy = json.loads(mark.read_text())
        return Run(proc.returncode, proc.stdout or "", proc.stderr, path, heavy)

    def both(self, *args: str) -> tuple[Run, Run]:
        """The call warm and in process."""
        return self.run(*args), self.run(*args, no_daemon=True)

    def stop(self) -> None:
        for server in self.servers:
            if server.poll() is None:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            if server.stderr is not None:
                server.stderr.close()


@pytest.fixture
def harness(indexed: Config, runtime_dir: Path, tmp_path: Path) -> Iterator[Harness]:
    running = Harness(indexed, runtime_dir, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def same(warm_run: Run, in_process: Run) -> None:
    assert in_process.path == "process"
    assert warm_run.path == "warm", "the server did not answer"
    assert (warm_run.code, warm_run.stdout, warm_run.stderr) == (in_process.code, in_process.stdout, in_process.stderr)


CALLS = [
    ("query", "5432"),  # hybrid: the query embedding comes from the embed server through the warm server
    ("query", "zálohování serveru", "--json"),
    ("query", "zzqqxxnothing", "--mode", "lex"),  # nothing found
    ("query", "restart pooleru", "--explain"),
    ("show", "devops/postgres.md"),
    ("show", "no/such/note.md"),  # an error: one line, exit 1
    ("grep", "ERR_CONN"),
    ("grep", "zzqqxxnothing"),  # no match
    ("grep", "--json", "Kreml"),
    ("status",),
    ("status", "--json"),
    ("query",),  # a usage error: exit 2
]


def test_a_running_server_answers_exactly_as_the_process_would(harness: Harness) -> None:
    harness.start()
    codes = set()
    for call in CALLS:
        warm_run, in_process = harness.both(*call)
        same(warm_run, in_process)
        codes.add(warm_run.code)
    assert codes >= {0, 1, 2}  # answers, errors and usage errors all came through
    assert harness.run("query", "5432").heavy == []  # the warm client loads none of NOT_ON_THE_WARM_PATH


def test_calls_reuse_the_config_until_it_is_edited(harness: Harness, indexed: Config) -> None:
    """The server reads its config once per version of the file, not once per call, and a call
    after an edit answers from the edited config, exactly as the process would."""
    harness.start()

    def reads() -> int:
        return indexed.log.read_text(encoding="utf-8").count(f"read the config {harness.config_path} ")

    assert reads() == 1  # the server's own start
    before = harness.run("status", "--json")
    assert before.path == "warm" and harness.run("query", "5432").path == "warm"
    assert reads() == 1  # neither call read or parsed it again
    text = harness.config_path.read_text(encoding="utf-8")
    harness.config_path.write_text(text.replace("    notes:\n", "    jottings:\n"), encoding="utf-8")
    after, in_process = harness.both("status", "--json")
    same(after, in_process)
    assert "jottings" in after.stdout and "jottings" not in before.stdout
    assert reads() == 2
    harness.config_path.write_text(text, encoding="utf-8")  # and back: read again, answered as before
    assert harness.run("status", "--json").stdout == before.stdout
    assert reads() == 3


def test_the_environment_and_the_working_folder_are_the_callers(harness: Harness, notes: Path) -> None:
    harness.start()
    # a path relative to the caller's folder, and NO_COLOR / COLUMNS as the caller has them
    for env in ({}, {"NO_COLOR": "1", "COLUMNS": "50"}):
        warm_run = harness.run("show", "devops/postgres.md", cwd=notes, **env)
        same(warm_run, harness.run("show", "devops/postgres.md", cwd=notes, no_daemon=True, **env))


def on_terminal(harness: Harness, *args: str, no_daemon: bool = False) -> tuple[int, bytes, str]:
    """(exit code, what the terminal received, path taken) of a client whose stdout and stderr
    are one pseudo-terminal of 77 columns: colours, the width and the interleaving all show."""
    main_fd, terminal_fd = pty.openpty()
    fcntl.ioctl(terminal_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 77, 0, 0))
    harness.marks += 1
    mark = harness.tmp_path / f"mark-{harness.marks}"
    env = harness.env(TERM="xterm-256color", **({warm.DISABLE_ENV: "1"} if no_daemon else {}))
    for name in ("NO_COLOR", "COLUMNS", "LINES"):
        env.pop(name, None)
    client = [sys.executable, "-c", CLIENT.format(heavy=NOT_ON_THE_WARM_PATH, mark=str(mark))]
    proc = subprocess.Popen(
        [*client, "--config", str(harness.config_path), *args],
        env=env,
        cwd=harness.tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=terminal_fd,
        stderr=terminal_fd,
    )
    os.close(terminal_fd)
    received = bytearray()
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        received += data
    os.close(main_fd)
    code = proc.wait(timeout=120)
    return code, bytes(received), json.loads(mark.read_text())[0]


def test_a_terminal_sees_the_same_bytes(harness: Harness) -> None:
    harness.start()
    for call in (("query", "5432"), ("status",), ("show", "no/such/note.md"), ("query",)):
        code, received, path = on_terminal(harness, *call)
        expected = on_terminal(harness, *call, no_daemon=True)
        assert (path, expected[2]) == ("warm", "process")
        assert (code, received) == expected[:2], call
    assert b"\x1b[" in on_terminal(harness, "query", "5432")[1]  # styled: the server knew it was a terminal


def test_a_reader_that_went_away_ends_the_call_with_0_and_says_nothing(harness: Harness) -> None:
    """`notes-search query X | head -1`, fzf's next reload: the reader closes the pipe. The warm
    client printed a BrokenPipeError traceback, and in process click exited 1, which for query
    and grep means "nothing matched". Now 0 and silence, as ripgrep ends, on both paths."""
    harness.start()
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the first line: every write fails
    try:
        for args in (("query", "5432", "--mode", "lex"), ("grep", "ERR_CONN"), ("status",)):
            for run in (harness.run(*args, stdout=write_end), harness.run(*args, stdout=write_end, no_daemon=True)):
                assert (run.code, run.stderr) == (0, ""), (args, run)
            assert run.path == "process"
        assert harness.run("query", "5432", "--mode", "lex", stdout=write_end).path == "warm"
        # nothing to print: the exit code still says so
        nothing = harness.run("query", "zzqqxxnothing", "--mode", "lex", stdout=write_end)
        assert nothing.code == 1 and "no results" in nothing.stderr
    finally:
        os.close(write_end)


def test_without_a_server_or_when_disabled_the_call_runs_in_process(harness: Harness) -> None:
    assert harness.run("status").path == "process"  # no server at all
    harness.start()
    assert harness.run("status", NOTES_SEARCH_NO_DAEMON="1").path == "process"
    assert harness.run("--version").path == "process"  # not a warm command
    assert harness.run("status").path == "warm"


@pytest.mark.parametrize("fate", ["killed", "stopped"])
def test_a_server_killed_or_stopped_mid_call_leaves_the_call_to_the_process(
    harness: Harness, embed_server: OllamaServer, fate: str
) -> None:
    """Killed: the connection closes. Stopped (SIGSTOP: a wedged server, a suspended laptop
    process): the heartbeats stop, and after the silence deadline the client gives up on it."""
    expected = harness.run("query", "5432", no_daemon=True)
    server = harness.start()
    before = len(embed_server.embed_requests)
    embed_server.delay = 30.0  # the warm server's query embedding hangs until it is killed
    client = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CLIENT.format(heavy=NOT_ON_THE_WARM_PATH, mark=str(harness.tmp_path / "mark-killed")),
            "--config",
            str(harness.config_path),
            "query",
            "5432",
        ],
        env=harness.env(),
        cwd=harness.tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: len(embed_server.embed_requests) > before, "the warm server's embed request", timeout=60)
    os.kill(server.pid, signal.SIGKILL if fate == "killed" else signal.SIGSTOP)
    embed_server.delay = 0.0
    try:
        stdout, stderr = client.communicate(timeout=120)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    path, _ = json.loads((harness.tmp_path / "mark-killed").read_text())
    assert path == "process"
    assert (client.returncode, stdout, stderr) == (expected.code, expected.stdout, expected.stderr)


def test_a_stale_socket_falls_back_and_a_new_server_replaces_it(harness: Harness) -> None:
    path = harness.socket()
    path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: a server that died without cleaning up
    assert harness.run("status").path == "process"
    harness.start()
    same(harness.run("status"), harness.run("status", no_daemon=True))


def test_a_server_of_another_config_is_not_used(harness: Harness, tmp_path: Path, notes: Path) -> None:
    other_folder = tmp_path / "other"
    other_folder.mkdir()
    other = write_config(other_folder, notes, "http://127.0.0.1:9")
    server = harness.start(config_path=other)
    harness.socket(other).rename(harness.socket())  # its socket where this config's is looked for
    run = harness.run("status")
    assert run.path == "process" and run.code == 0
    assert server.poll() is None  # refused the call, still serving its own config


def test_a_server_of_another_version_is_not_used(harness: Harness) -> None:
    harness.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(harness.socket()))
        mine = warm.identity(Path(os.path.realpath(harness.config_path)))
        warm.send_json(conn, {**mine, "version": "0.0.1", "code": "/elsewhere"})
        reply = warm.recv_json(conn)
    assert reply["ok"] is False and "runs notes-search" in reply["reason"]
    assert harness.run("status").path == "warm"  # the server serves on for its own version


def test_an_upgrade_under_a_running_server_makes_it_exit(harness: Harness) -> None:
    server = harness.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(harness.socket()))
        mine = warm.identity(Path(os.path.realpath(harness.config_path)))
        warm.send_json(conn, {**mine, "version": "99.0"})  # the same code, a newer version
        assert warm.recv_json(conn)["ok"] is False
    assert server.wait(timeout=30) == 75  # "start me again": the service manager brings the new version
    assert not harness.socket().exists()


def test_a_socket_of_another_user_is_not_trusted(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.start()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(harness.runtime))
    argv = ["--config", str(harness.config_path), "status"]
    assert warm.forward(argv, uid=os.getuid() + 1) is None  # another user's server: not used
    assert capsys.readouterr().out == ""
    if os.getuid() != 0:
        return
    # as root, the real thing: the socket file handed to another user
    os.chown(harness.socket(), 65534, 65534)
    run = harness.run("status")
    assert run.path == "process" and run.code == 0


def test_a_server_that_does_not_answer_is_given_up_on(harness: Harness) -> None:
    path = harness.socket()
    path.parent.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen(4)  # connections are queued, never accepted: no hello ever comes back
        run = harness.run("status")
    assert run.path == "process" and run.code == 0


def test_the_server_exits_after_its_idle_timeout(harness: Harness) -> None:
    server = harness.start("--idle-timeout", "1")
    assert harness.run("status").path == "warm"
    assert server.wait(timeout=60) == 0
    assert not harness.socket().exists()
    assert harness.run("status").path == "process"


def test_a_second_server_for_the_same_config_refuses_to_start(harness: Harness) -> None:
    harness.start()
    second = subprocess.run(
        [sys.executable, "-c", "from search.warm import main; main()", "--config", str(harness.config_path), "serve"],
        env=harness.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 1 and "already runs" in second.stderr
    assert harness.run("status").path == "warm"


def test_the_socket_and_its_folder_are_owner_only(harness: Harness) -> None:
    harness.start()
    path = harness.socket()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_split_argv_takes_only_the_warm_commands() -> None:
    assert warm.split_argv(["query", "x"]) == (None, "query")
    assert warm.split_argv(["-c", "a.yaml", "status"]) == ("a.yaml", "status")
    assert warm.split_argv(["--config=a.yaml", "grep", "x"]) == ("a.yaml", "grep")
    assert warm.split_argv(["-ca.yaml", "show", "x"]) == ("a.yaml", "show")
    for argv in (["sync"], ["--version"], ["--help"], [], ["-c"], ["--config", "a.yaml"], ["mcp", "--http"]):
        assert warm.split_argv(argv) is None


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    unit = (REPO / "docs" / "notes-search-serve.service").read_text(encoding="utf-8")
    assert "/.venv/bin/notes-search serve" in unit
    executable = Path(sys.executable).parent / "notes-search"  # the unit's example path, made real here
    (tmp_path / "notes-search-serve.service").write_text(
        unit.replace("%h/notes-search/.venv/bin/notes-search", str(executable)), encoding="utf-8"
    )
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "notes-search-serve.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stderr


def test_the_socket_folder_without_xdg_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients and servers started from different environments (cron has no XDG_RUNTIME_DIR) meet."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/elsewhere")
    assert warm.socket_dir() == Path("/run/elsewhere/notes-search")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/ignored")
    system = Path(f"/run/user/{os.getuid()}")
    expected = system / "notes-search" if system.is_dir() else Path(f"/tmp/notes-search-{os.getuid()}")
    assert warm.socket_dir() == expected
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert warm.socket_dir() == expected


@pytest.mark.parametrize(
    "reply",
    [
        [b"[1, 2]"],  # a hello answer that is not an object
        [b'{"ok": true}', b'["exit", 0]'],  # a reply header that is not an object
        [b'{"ok": true}', b'{"exit": 0, "chunks": 1}', b"\x07garbage"],  # output of no stream
        [b'{"ok": true}', b'{"exit": 0, "chunks": 2}', b"\x01half"],  # closed before the end
    ],
)
def test_a_server_that_breaks_the_protocol_is_not_believed(harness: Harness, reply: list[bytes]) -> None:
    path = harness.socket()
    path.parent.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)

    def serve_once() -> None:
        conn, _ = listener.accept()
        with conn:
            warm.recv_frame(conn)  # the hello
            for number, frame in enumerate(reply):
                if number == 1:
                    warm.recv_frame(conn)  # the request
                warm.send_frame(conn, frame)

    server = threading.Thread(target=serve_once)
    server.start()
    try:
        run = harness.run("status")
    finally:
        server.join(timeout=30)
        listener.close()
    assert run.path == "process"
    assert (run.code, run.stdout, run.stderr) == astuple(harness.run("status", no_daemon=True))[:3]


def test_a_call_runs_in_the_callers_folder_environment_umask_and_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_call presents the caller's process to the command, and gives the server its own back."""
    import click

    from search.cli import daemon_server

    @click.command()
    def probe() -> None:
        Path("made-here").write_text("x")
        click.echo(f"{os.getcwd()} {os.environ.get('PROBE')} {sys.stdout.isatty()} {sys.stdin.isatty()}")
        click.echo("ünïcode", err=True)
        sys.exit(3)

    monkeypatch.setattr("search.cli.cli", probe)
    server_env, server_cwd = dict(os.environ), os.getcwd()
    server_umask = os.umask(0o022)
    try:
        request = {
            "argv": [],
            "cwd": str(tmp_path),
            "env": {"PROBE": "caller's"},
            "umask": 0o077,
            "tty": {"stdout": True, "stderr": False, "stdin": True},
            "encoding": {"stdout": ["utf-8", "strict"], "stderr": ["latin-1", "replace"]},
        }
        code, chunks = daemon_server.run_call(request)
        assert (os.umask(0o022), os.getcwd(), dict(os.environ)) == (0o022, server_cwd, server_env)
    finally:
        os.umask(server_umask)
    assert code == 3
    assert chunks == [
        (warm.STDOUT, f"{tmp_path} caller's True True\n".encode()),
        (warm.STDERR, "ünïcode\n".encode("latin-1")),
    ]
    assert (tmp_path / "made-here").stat().st_mode & 0o777 == 0o600
