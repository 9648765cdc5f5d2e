"""The warm path's server: the owner-only unix socket, the accept loop, and each call run
through the same click command as the client's process would run it, with the caller's
arguments, working folder, environment and terminal facts, its output captured in the order
written. Calls run one at a time: the working folder, the environment and the standard streams
are the process's own. The command is `search.cli.daemon`; the client is `search.warm`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import stat
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from indexer.errors import NotesSearchError
from search import warm

log = logging.getLogger("notes_search.serve")
ACCEPT_POLL_S = 0.5  # how often the accept loop looks at the stop flag and the idle clock
SEND_DEADLINE_S = 30.0  # a client that stops reading its answer is dropped, not waited on for ever


def warm_up(service: Any) -> None:
    """Load now what the first call would otherwise wait for."""
    from indexer import language
    from search.cli import cli

    language.preload()
    with click.Context(cli) as group:
        for name in sorted(warm.WARM_COMMANDS):
            cli.get_command(group, name)
    if service.config.embedding.provider == "local":  # a server-side model needs no loading here
        service.embedder().embed_query("warm up")


class WarmServer:
    """The socket, the accept loop and the calls; `stop` ends `serve_forever`."""

    def __init__(self, config_path: Path, *, idle_timeout: float | None) -> None:
        self.config_path = config_path
        self.path = warm.socket_path(config_path)
        self.identity = warm.identity(config_path)
        self.idle_timeout = idle_timeout
        self.stop = threading.Event()
        self.stop_reason = "stopped by a signal"
        self.upgraded = False
        self._listener: socket.socket | None = None
        self._inode = 0
        self._run_lock = threading.Lock()  # one call at a time: they share cwd, environ, streams
        self._state_lock = threading.Lock()
        self._active = 0
        self._last_call = time.monotonic()

    # ---- the socket ---------------------------------------------------------------------------

    def bind(self) -> None:
        """Listen on the config's socket, replacing a stale one; fail if a server answers there."""
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(folder, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise NotesSearchError(f"cannot serve: {folder} is not a folder of this user")
        if info.st_mode & 0o077:
            os.chmod(folder, 0o700)
        if os.path.lexists(self.path):
            if self._answers():
                raise NotesSearchError(f"a server for {self.config_path} already runs on {self.path}")
            os.unlink(self.path)  # stale: its server died without cleaning up
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous = os.umask(0o177)  # born 0600: no moment in which another user could connect
        try:
            listener.bind(str(self.path))
        except OSError as exc:
            listener.close()
            raise NotesSearchError(f"cannot serve on {self.path}: {exc.strerror}") from None
        finally:
            os.umask(previous)
        listener.listen(16)
        listener.settimeout(ACCEPT_POLL_S)
        self._listener = listener
        self._inode = os.stat(self.path).st_ino

    def _answers(self) -> bool:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(warm.CONNECT_DEADLINE_S)
        try:
            probe.connect(str(self.path))
        except OSError:
            return False
        finally:
            probe.close()
        return True

    def close(self) -> None:
        """Close the listener and remove the socket, unless another server has replaced it."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(OSError):
            if os.stat(self.path, follow_symlinks=False).st_ino == self._inode:
                os.unlink(self.path)

    # ---- the loop -----------------------------------------------------------------------------

    def serve_forever(self) -> None:
        assert self._listener is not None, "bind() first"
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                if self._idle():
                    self.stop_reason = f"idle for {self.idle_timeout:g} s"
                    self.stop.set()
                continue
            except OSError:
                if self.stop.is_set():  # closed under us by a signal
                    break
                raise
            threading.Thread(target=self._handle, args=(conn,), name="notes-search-call", daemon=True).start()

    def _idle(self) -> bool:
        with self._state_lock:
            return (
                self.idle_timeout is not None
                and self._active == 0
                and time.monotonic() - self._last_call > self.idle_timeout
            )

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        with self._state_lock:
            self._active += 1
        try:
            yield
        finally:
            with self._state_lock:
                self._active -= 1
                self._last_call = time.monotonic()

    def _handle(self, conn: socket.socket) -> None:
        with conn, self._call():
            try:
                self._converse(conn)
            except (OSError, warm.ProtocolError) as exc:  # the client gave up or went away
                log.debug("call dropped: %s", exc)

    def _converse(self, conn: socket.socket) -> None:
        conn.settimeout(warm.CONNECT_DEADLINE_S)
        if warm.peer_uid(conn) != os.getuid():
            return  # the folder is owner-only; only root gets here, and root has its own server
        hello = warm.recv_json(conn)
        problem = self._mismatch(hello)
        warm.send_json(conn, {"ok": problem is None, "reason": problem})
        if problem is not None:
            log.info("refused a call: %s", problem)
            return
        request = warm.recv_json(conn)
        conn.settimeout(SEND_DEADLINE_S)
        done = threading.Event()
        beats = threading.Thread(target=_heartbeats, args=(conn, done), name="notes-search-heartbeat", daemon=True)
        beats.start()
        try:
            with self._run_lock:
                code, chunks = run_call(request)
        finally:
            done.set()
            beats.join()
        warm.send_json(conn, {"exit": code, "chunks": len(chunks)})
        for stream, data in chunks:
            warm.send_frame(conn, bytes([stream]) + data)

    def _mismatch(self, hello: Any) -> str | None:
        """Why this server must not answer the client, or None."""
        if not isinstance(hello, dict):
            return "a malformed hello"
        mine = self.identity
        if hello.get("config") != mine["config"]:
            return f"this server serves {mine['config']}, not {hello.get('config')}"
        if hello.get("code") == mine["code"] and hello.get("version") != mine["version"]:
            # the installation was upgraded under this server: make way for the new version
            # (a service manager restarts it); the client runs in process meanwhile
            self.stop_reason = f"notes-search {hello.get('version')} was installed over {mine['version']}"
            self.upgraded = True
            self.stop.set()
            return self.stop_reason
        if hello.get("code") != mine["code"] or hello.get("version") != mine["version"]:
            return f"this server runs notes-search {mine['version']} from {mine['code']}"
        return None


def _heartbeats(conn: socket.socket, done: threading.Event) -> None:
    """Empty frames while the call waits or runs: the client tells slow from dead by them."""
    while not done.wait(warm.HEARTBEAT_S):
        try:
            warm.send_frame(conn, b"")
        except OSError:
            return


# ---- one call ------------------------------------------------------------------------------------


class _Capture(io.RawIOBase):
    """One standard stream of the caller: records what is written, says whether it is a terminal."""

    def __init__(self, stream: int, chunks: list[tuple[int, bytes]], tty: bool) -> None:
        self.stream = stream
        self.chunks = chunks
        self.tty = tty

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        if data:
            self.chunks.append((self.stream, data))
        return len(data)

    def isatty(self) -> bool:
        return self.tty


class _NoInput(io.BytesIO):
    def __init__(self, tty: bool) -> None:
        super().__init__(b"")
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _text(raw: io.RawIOBase | io.BytesIO, encoding: Any) -> io.TextIOWrapper:
    name, errors = encoding if isinstance(encoding, list) and len(encoding) == 2 else (None, None)
    return io.TextIOWrapper(
        raw,  # type: ignore[arg-type]  # a raw stream that writes whole: no buffer needed
        encoding=name or "utf-8",
        errors=errors or "strict",
        write_through=True,
    )


def _coalesce(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Consecutive writes to one stream as one frame; joined once per run, not re-copied per
    write (a `show` of a large file writes line by line)."""
    runs: list[tuple[int, list[bytes]]] = []
    for stream, data in chunks:
        if runs and runs[-1][0] == stream:
            runs[-1][1].append(data)
        else:
            runs.append((stream, [data]))
    return [(stream, b"".join(parts)) for stream, parts in runs]


def run_call(request: dict[str, Any]) -> tuple[int, list[tuple[int, bytes]]]:
    """Run `notes-search ARGV` as the client's process would: its cwd, environment and streams.
    Returns the exit code and the output chunks in the order written."""
    from search.cli import cli

    tty = request.get("tty") or {}
    env = {str(key): str(value) for key, value in (request.get("env") or {}).items()}
    size = request.get("size")
    if tty.get("stdout") and isinstance(size, list) and len(size) == 2:
        # shutil.get_terminal_size reads these first, then the process's own stdout
        env.setdefault("COLUMNS", str(size[0]))
        env.setdefault("LINES", str(size[1]))
    encodings = request.get("encoding") or {}
    chunks: list[tuple[int, bytes]] = []
    stdout = _text(_Capture(warm.STDOUT, chunks, bool(tty.get("stdout"))), encodings.get("stdout"))
    stderr = _text(_Capture(warm.STDERR, chunks, bool(tty.get("stderr"))), encodings.get("stderr"))
    stdin = _text(_NoInput(bool(tty.get("stdin"))), None)
    umask = request.get("umask")
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_umask = os.umask(umask if isinstance(umask, int) and 0 <= umask <= 0o777 else 0o022)  # files it writes
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    try:
        os.chdir(str(request["cwd"]))
        _replace_environ(env)
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        code = _run(cli, [str(arg) for arg in request["argv"]])
        stdout.flush()
        stderr.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        _replace_environ(saved_env)
        os.umask(saved_umask)
        os.chdir(saved_cwd)
    return code, _coalesce(chunks)


def _replace_environ(env: dict[str, str]) -> None:
    for key in [key for key in os.environ if key not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _run(cli: click.Command, argv: list[str]) -> int:
    """The exit code the process would end with, having printed what it would print."""
    try:
        cli.main(args=argv, prog_name="notes-search", standalone_mode=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)  # as the interpreter does with a non-integer code
        return 1
    except Exception:  # noqa: BLE001 - what would end the process with a traceback, printed as it would be
        traceback.print_exc()
        return 1
    return 0
