"""Ctrl-C through the real command in a subprocess: no `Aborted!`, no traceback, and the
process ends as SIGINT ends it (the shell sees 130), whatever the command was doing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import NOTES, wait_for, write
from tests.embed_servers import OllamaServer
from tests.test_degraded import write_config

ROOT = Path(__file__).resolve().parent.parent
MODEL = "fake-embed:latest"


@pytest.fixture(autouse=True)
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short $XDG_RUNTIME_DIR of the test's own, for the children a test starts: a `serve`
    socket below tmp_path (longer under a pytest-xdist worker's folder) can pass the 107 bytes
    a socket path may have."""
    folder = Path(tempfile.mkdtemp(prefix="ns-int-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[OllamaServer]:
    with OllamaServer({MODEL: 64}) as srv:
        yield srv


@pytest.fixture
def config_path(tmp_path: Path, server: OllamaServer) -> Path:
    notes = tmp_path / "notes"
    write(notes, NOTES)
    return write_config(tmp_path, notes, server.url)


def default_ctrl_c() -> None:
    """In the child before exec: Ctrl-C as a terminal's foreground job has it. A job started in
    the background by a shell without job control (`nohup … &`, as a CI script may run the suite)
    inherits SIGINT ignored, and a process that ignores it rightly keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(config_path: Path, tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """The installed entry point's code (the warm path first), as `notes-search -c CONFIG ARGS`
    runs it; a `serve` of this test has its socket in the test's runtime_dir."""
    stderr = tmp_path / f"{args[0]}-{len(list(tmp_path.glob('*.err')))}.err"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from search.warm import main; main()", "-c", str(config_path), *args],
            cwd=ROOT,
            env={**os.environ, "NOTES_SEARCH_NO_DAEMON": ""},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            preexec_fn=default_ctrl_c,
        )
    return proc, stderr


def interrupt(proc: subprocess.Popen[bytes], stderr: Path) -> str:
    """Send SIGINT; the process must end at once, killed by it, and say nothing of it."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = stderr.read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == -signal.SIGINT, (proc.returncode, text)
    assert "Aborted" not in text and "Traceback" not in text and "KeyboardInterrupt" not in text, text
    return text


def synced(config_path: Path, tmp_path: Path) -> None:
    proc, stderr = start(config_path, tmp_path, "sync", "--quiet")
    proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr.read_text()


def waiting_for_embedder(server: OllamaServer, before: int) -> bool:
    return len(server.embed_requests) > before


def test_ctrl_c_while_a_query_waits_for_the_embedder(config_path: Path, tmp_path: Path, server: OllamaServer) -> None:
    synced(config_path, tmp_path)
    server.delay = 60.0  # the question's vector never comes: the query hangs until interrupted
    before = len(server.embed_requests)
    proc, stderr = start(config_path, tmp_path, "query", "záloha")
    wait_for(lambda: waiting_for_embedder(server, before), "the query to ask for its vector", timeout=30.0)
    assert interrupt(proc, stderr) == ""


def test_ctrl_c_during_a_sync(config_path: Path, tmp_path: Path, server: OllamaServer) -> None:
    server.delay = 60.0
    proc, stderr = start(config_path, tmp_path, "sync")
    wait_for(lambda: waiting_for_embedder(server, 0), "the sync to embed", timeout=30.0)
    interrupt(proc, stderr)
    server.delay = 0.0
    synced(config_path, tmp_path)  # nothing left behind that stops the next run


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_ctrl_c_stops_the_mcp_http_server(config_path: Path, tmp_path: Path) -> None:
    synced(config_path, tmp_path)
    proc, stderr = start(config_path, tmp_path, "mcp", "--http", "--port", str(free_port()))
    wait_for(lambda: "/mcp" in stderr.read_text(), "the server to listen", timeout=30.0)
    text = interrupt(proc, stderr)
    assert text.startswith("notes-search MCP (streamable HTTP) on http://127.0.0.1:"), text


def test_ctrl_c_stops_the_mcp_stdio_server(config_path: Path, tmp_path: Path) -> None:
    synced(config_path, tmp_path)
    proc, stderr = start(config_path, tmp_path, "mcp")
    assert proc.stdin is not None and proc.stdout is not None
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    proc.stdin.write(json.dumps(hello).encode() + b"\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1  # serving
    interrupt(proc, stderr)


def test_ctrl_c_stops_watch_cleanly(config_path: Path, tmp_path: Path) -> None:
    proc, stderr = start(config_path, tmp_path, "watch")
    wait_for(lambda: "watching" in stderr.read_text(), "the watcher to start", timeout=30.0)
    assert "stopped:" in interrupt(proc, stderr)  # its summary, then ended as Ctrl-C ends a command


def test_ctrl_c_on_a_query_the_warm_server_runs_and_on_the_server(
    config_path: Path, tmp_path: Path, server: OllamaServer
) -> None:
    synced(config_path, tmp_path)
    daemon, daemon_err = start(config_path, tmp_path, "serve")
    try:
        wait_for(lambda: "notes-search serve:" in daemon_err.read_text(), "the server to listen", timeout=30.0)
        server.delay = 60.0
        before = len(server.embed_requests)
        proc, stderr = start(config_path, tmp_path, "query", "záloha")
        wait_for(lambda: waiting_for_embedder(server, before), "the server to run the query", timeout=30.0)
        assert interrupt(proc, stderr) == ""
        server.delay = 0.0
    finally:
        interrupt(daemon, daemon_err)


def test_ctrl_c_in_the_editor_belongs_to_the_editor(config_path: Path, tmp_path: Path) -> None:
    """The terminal sends Ctrl-C to `open` and the editor alike (one process group): the editor
    handles it (vim cancels a command with it), `open` must neither stop nor kill the editor,
    and exits with the editor's code once it quits."""
    synced(config_path, tmp_path)
    started, release = tmp_path / "editor-started", tmp_path / "editor-may-quit"
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import signal, sys, time, pathlib\n"
        "got = []\n"
        "signal.signal(signal.SIGINT, lambda *_: got.append(1))  # as vim: Ctrl-C cancels, never quits\n"
        f"pathlib.Path({str(started)!r}).write_text(' '.join(sys.argv[1:]))\n"
        f"while not pathlib.Path({str(release)!r}).exists():\n"
        "    time.sleep(0.02)\n"
        "sys.exit(3 if got else 4)\n",
        encoding="utf-8",
    )
    stderr = tmp_path / "open.err"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from search.warm import main; main()",
                "-c",
                str(config_path),
                "open",
                "notes:travel/kazan.md:3",
            ],
            cwd=ROOT,
            env={**os.environ, "EDITOR": f"{sys.executable} {editor}"},
            stdin=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
    try:
        wait_for(started.exists, "the editor to start", timeout=30.0)
        assert started.read_text().startswith("+3 ")
        os.killpg(proc.pid, signal.SIGINT)
        release.write_text("")
        assert proc.wait(timeout=20) == 3, stderr.read_text()  # the editor saw Ctrl-C and quit on its own
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in stderr.read_text() and "Aborted" not in stderr.read_text()
