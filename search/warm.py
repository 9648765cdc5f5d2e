"""The warm path: a CLI call handed to a running `notes-search serve` for its config.

The `notes-search` entry point starts here, before click or any heavy module is imported. For
`query`, `show`, `grep` and `status` it looks for the server of the config the call would use,
sends the arguments with the caller's working folder, environment and terminal facts, and writes
the bytes the server's run of the same click command printed, in the order it printed them, then
exits with its exit code. Anything unexpected (no socket, a dead or foreign server, another
version, no answer within the deadline, a server that dies mid-call) runs the command in process
instead: nothing has been printed by then, so the fallback prints exactly what it always did.

Protocol, over a unix stream socket, every frame a 4-byte big-endian length and a payload:
client hello (JSON: version, code, config) → server JSON {"ok": bool, "reason"}; client
request (JSON: argv, cwd, env, tty, size, encodings) → server heartbeats (empty frames) while
the request waits or runs, then JSON {"exit": code, "chunks": n} and n output frames, each a
stream byte (1 stdout, 2 stderr) followed by the bytes written.
"""

from __future__ import annotations

import gc
import json
import os
import stat
import struct
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing itself costs every warm call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    import socket
    from typing import Any

DISABLE_ENV = "NOTES_SEARCH_NO_DAEMON"  # set to anything but "" or "0": always run in process
WARM_COMMANDS = frozenset({"query", "show", "grep", "status"})  # read-only: safe to answer elsewhere
CONNECT_DEADLINE_S = 2.0  # connecting and the handshake; a busy server still answers in milliseconds
HEARTBEAT_S = 0.5  # the server says "still working" this often while a request waits or runs
# Silence longer than this once accepted means the server is stopped or wedged: run in process.
# A long request (a first model load, a slow embedder) keeps the heartbeats coming, so it is not cut.
SILENCE_DEADLINE_S = 5.0
MAX_FRAME = 64 << 20  # a `show` of a large file prints megabytes; nothing legitimate comes near this
STDOUT, STDERR = 1, 2
_LENGTH = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer broke the protocol or went away: the caller falls back in process."""


# ---- where the server listens -------------------------------------------------------------------


def socket_dir() -> Path:
    """Owner-only folder of the sockets: $XDG_RUNTIME_DIR (per user, tmpfs, short paths); without
    it (cron, some agent sandboxes) the same folder where the system made one, /run/user/UID,
    so that a client and a server started from different environments still meet; else one
    folder per uid in /tmp. (A data folder deep in a home directory can exceed the 107 bytes a
    unix socket path may have.)"""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "notes-search"
    uid = os.getuid()
    system_runtime = f"/run/user/{uid}"
    try:
        if os.stat(system_runtime).st_uid == uid:
            return Path(system_runtime) / "notes-search"
    except OSError:
        pass
    return Path("/tmp") / f"notes-search-{uid}"


def socket_path(config_path: Path) -> Path:
    """The socket of the server of the config at `config_path` (one server per config file)."""
    return socket_dir() / f"{_fnv1a64(os.fsencode(str(config_path))):016x}.sock"


def _fnv1a64(data: bytes) -> int:
    """A stable 64-bit hash of a path: a name, not a secret (the handshake compares the whole
    path), and no hashlib import (OpenSSL) on every call."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def config_file(config_option: str | None) -> Path:
    """The config a call uses, absolute, found as the in-process CLI finds it."""
    from indexer.configpaths import find_config

    return Path(os.path.realpath(find_config(config_option)))


def identity(config_path: Path) -> dict[str, str]:
    """What client and server must share: the config file, the package version and the code's
    location (two checkouts of one version differ in code; their answers could too)."""
    from search import __version__

    return {
        "config": str(config_path),
        "version": __version__,
        "code": str(Path(__file__).resolve().parent),
    }


def owner_problem(path: Path, uid: int) -> str | None:
    """Why the socket at `path` is not to be trusted by user `uid`, or None: its folder must be
    the user's own and closed to others, the socket the user's own."""
    try:
        folder = os.stat(path.parent, follow_symlinks=False)
        sock = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != uid or folder.st_mode & 0o077:
        return f"{path.parent} is not a folder that only uid {uid} can use"
    if not stat.S_ISSOCK(sock.st_mode) or sock.st_uid != uid:
        return f"{path} is not a socket owned by uid {uid}"
    return None


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end (the kernel's word, not the file's)."""
    import socket  # only with a server's socket found: most calls find none

    ucred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", ucred)[1])


# ---- frames ---------------------------------------------------------------------------------------


def send_frame(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(_LENGTH.pack(len(payload)) + payload)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    parts = bytearray()
    while len(parts) < size:
        got = conn.recv(min(size - len(parts), 1 << 20))
        if not got:
            raise ProtocolError("the peer closed the connection")
        parts += got
    return bytes(parts)


def recv_frame(conn: socket.socket) -> bytes:
    (size,) = _LENGTH.unpack(_recv_exactly(conn, _LENGTH.size))
    if size > MAX_FRAME:
        raise ProtocolError(f"a frame of {size} bytes")
    return _recv_exactly(conn, size)


def send_json(conn: socket.socket, value: Any) -> None:
    send_frame(conn, json.dumps(value).encode())


def recv_json(conn: socket.socket) -> Any:
    try:
        return json.loads(recv_frame(conn))
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None


# ---- the client -----------------------------------------------------------------------------------


def split_argv(argv: list[str]) -> tuple[str | None, str] | None:
    """(--config value, command) of a call the warm path may take, or None: only the group's
    --config option may precede one of WARM_COMMANDS (--help, --version and the rest run here)."""
    config: str | None = None
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        arg = argv[index]
        if arg in ("--config", "-c") and index + 1 < len(argv):
            config = argv[index + 1]
            index += 2
        elif arg.startswith("--config="):
            config = arg.removeprefix("--config=")
            index += 1
        elif arg.startswith("-c") and len(arg) > 2 and not arg.startswith("--"):
            config = arg[2:]
            index += 1
        else:
            return None
    if index >= len(argv) or argv[index] not in WARM_COMMANDS:
        return None
    return config, argv[index]


def _terminal_facts() -> dict[str, Any]:
    """What the command would learn from this process's streams, for the server to present."""
    size = None
    if sys.stdout.isatty():
        try:
            columns, lines = os.get_terminal_size(sys.stdout.fileno())
            size = [columns, lines]
        except OSError:
            size = None
    return {
        "tty": {"stdout": sys.stdout.isatty(), "stderr": sys.stderr.isatty(), "stdin": sys.stdin.isatty()},
        "size": size,
        "encoding": {
            "stdout": [sys.stdout.encoding, sys.stdout.errors],
            "stderr": [sys.stderr.encoding, sys.stderr.errors],
        },
    }


def _connect(path: Path, uid: int) -> socket.socket | None:
    """A connection to the trusted socket at `path`, or None."""
    import socket  # only with a server's socket found: most calls find none

    if owner_problem(path, uid) is not None:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(CONNECT_DEADLINE_S)
    try:
        conn.connect(str(path))
        if peer_uid(conn) != uid:
            conn.close()
            return None
    except OSError:  # a stale socket (no listener), a full backlog, a timeout
        conn.close()
        return None
    return conn


def forward(argv: list[str], *, uid: int | None = None) -> int | None:
    """Run `notes-search ARGV` on the server of its config and print what it printed; its exit
    code, or None when the call must run in process (nothing was printed then). `uid`: whose
    server is trusted (default: this process's user)."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None
    split = split_argv(argv)
    if split is None or sys.stdout is None or sys.stderr is None:  # no stream to copy into: as ever
        return None
    try:
        config_path = config_file(split[0])
        path = socket_path(config_path)
        if not os.path.exists(path):
            return None
        conn = _connect(path, os.getuid() if uid is None else uid)
        if conn is None:
            return None
        with conn:
            reply = _exchange(conn, config_path, argv)
    except (OSError, ProtocolError, ValueError, LookupError, TypeError):  # a reply of the wrong shape too
        return None
    if reply is None:
        return None
    code, chunks = reply
    try:
        _write_out(chunks)
    except BrokenPipeError:
        from search.interrupt import output_closed

        output_closed()
    return code


def _exchange(conn: socket.socket, config_path: Path, argv: list[str]) -> tuple[int, list[tuple[int, bytes]]] | None:
    send_json(conn, identity(config_path))
    hello = recv_json(conn)
    if not isinstance(hello, dict) or hello.get("ok") is not True:
        return None
    umask = os.umask(0o077)  # read by setting it: put back at once
    os.umask(umask)
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask, **_terminal_facts()}
    send_json(conn, request)
    conn.settimeout(SILENCE_DEADLINE_S)
    while True:
        frame = recv_frame(conn)
        if frame:  # empty frames are heartbeats
            break
    header = json.loads(frame)
    code, count = header["exit"], header["chunks"]
    if not isinstance(code, int) or not isinstance(count, int):
        raise ProtocolError(f"a bad reply header: {header!r}")
    chunks = []
    for _ in range(count):
        chunk = recv_frame(conn)
        if not chunk or chunk[0] not in (STDOUT, STDERR):
            raise ProtocolError("an output frame without its stream")
        chunks.append((chunk[0], chunk[1:]))
    return code, chunks


def _write_out(chunks: list[tuple[int, bytes]]) -> None:
    """The server's output, in the order the command wrote it (a terminal shows both streams)."""
    for stream, data in chunks:
        target = sys.stdout if stream == STDOUT else sys.stderr
        target.flush()
        target.buffer.write(data)
        target.buffer.flush()


def main() -> None:
    """The `notes-search` command: on the warm server when one answers, else in process."""
    try:
        code = forward(sys.argv[1:])
    except KeyboardInterrupt:  # as a command interrupted in process ends
        from search.interrupt import interrupted

        interrupted()
    if code is None:
        if split_argv(sys.argv[1:]) is not None:
            # a read command runs once and exits, keeping what it imports to the end: the cyclic
            # collector's dozens of passes over those objects find nothing to free
            gc.disable()
        from search.cli import main as in_process

        in_process()
        return
    sys.exit(code)
