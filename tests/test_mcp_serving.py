"""The MCP server under a slow call: other clients are served meanwhile, the call answers with
an error at its deadline, and SIGTERM/SIGINT end the process whatever still runs (over HTTP
and stdio). The slow call is a real one: `reindex` of a new note, whose embedding hangs in the
embedding server (tests/embed_servers.py, `delay`) as a stuck Ollama would, with the sync's
timeout (60 s) and retries. (A search would not do: its query embedding gives up after 2 s.)"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp.types import CallToolResult

from tests.conftest import wait_for
from tests.embed_servers import OllamaServer
from tests.test_mcp import NOTES_SEARCH, call, http_session, make_workspace, server_env, start_http_server

HANGS = 600.0  # the embedding server's delay: longer than any test, so a call on it never ends by itself
EXITS_WITHIN = 10.0  # a generous bound for "the process ended" on a loaded machine; the promise is 1 s


@pytest.fixture
def slow_embedder() -> Iterator[OllamaServer]:
    server = OllamaServer({"fake-embed:latest": 64})
    try:
        yield server
    finally:
        server.stop()  # wakes the delayed handlers


@pytest.fixture
def server_process() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The servers a test started; killed at the end if a test left one running."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def embedding_requested(embedder: OllamaServer, before: int) -> None:
    """Until the server has sent its query to the (hanging) embedding server."""
    await anyio.to_thread.run_sync(
        lambda: wait_for(lambda: len(embedder.embed_requests) > before, "the query embedding", timeout=60)
    )


def new_note(config: Path, name: str) -> str:
    """A note the index has not seen (its chunks need vectors); the ref a reindex takes."""
    (config.parent / "notes" / "devops" / f"slow-{name}.md").write_text(
        f"# Slow {name}\n\nA note whose vectors the embedder never returns ({name}).\n", encoding="utf-8"
    )
    return f"notes:devops/slow-{name}.md"


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.content
    [content] = result.content
    return content.text  # type: ignore[union-attr]


def test_a_slow_call_blocks_no_other_client_meets_its_deadline_and_sigterm_ends_the_server(
    tmp_path: Path, slow_embedder: OllamaServer, server_process: list[subprocess.Popen[bytes]]
) -> None:
    config = make_workspace(tmp_path, slow_embedder)
    log = tmp_path / "server.log"
    proc, url = start_http_server(config, log, "--call-timeout", "3")
    server_process.append(proc)
    slow_embedder.delay = HANGS
    slow_embedder.requests.clear()

    async def slow_reindex(name: str, answers: dict[str, Any]) -> None:
        try:
            async with http_session(url) as session:
                answers["result"] = await session.call_tool("reindex", {"path": new_note(config, name)})
        except Exception as exc:  # noqa: BLE001 - the server went away under it (the SIGTERM half): any error
            answers["error"] = exc

    async def while_one_call_hangs() -> None:
        answers: dict[str, Any] = {}
        async with anyio.create_task_group() as group:
            before = len(slow_embedder.embed_requests)
            group.start_soon(slow_reindex, "one", answers)
            await embedding_requested(slow_embedder, before)
            # the first call's embedding hangs (for HANGS s): a second client is served all the same
            async with http_session(url) as other:
                assert (await call(other, "status"))["sources"]
                assert (await call(other, "search", query="restic", mode="lex"))["results"]
            assert len(slow_embedder.embed_requests) == before + 1  # the hanging request was the only one
        message = error_text(answers["result"])
        assert "reindex did not finish within 3 s (it goes on in the background)" in message
        assert "--call-timeout" in message

    anyio.run(while_one_call_hangs)
    # the reindex still hangs on its worker thread: SIGTERM ends the process all the same
    assert len(slow_embedder.embed_requests) == 1 and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=EXITS_WITHIN) == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def _send(stdin: IO[bytes], message: dict[str, Any]) -> None:
    stdin.write(json.dumps(message).encode() + b"\n")
    stdin.flush()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stdio_server_busy_in_a_call_ends_on_a_signal(
    tmp_path: Path, slow_embedder: OllamaServer, server_process: list[subprocess.Popen[bytes]], signum: int
) -> None:
    """A signal to the server (what a client or a supervisor sends to stop it) ends it with a
    clean exit, though its worker thread still waits for the embedding server."""
    config = make_workspace(tmp_path, slow_embedder)
    err = (tmp_path / "server.err").open("wb")
    proc = subprocess.Popen(
        [str(NOTES_SEARCH), "--config", str(config), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        env=server_env(),
        cwd=str(tmp_path),
    )
    server_process.append(proc)
    assert proc.stdin is not None and proc.stdout is not None
    _send(
        proc.stdin,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
    )
    assert json.loads(proc.stdout.readline())["id"] == 1
    _send(proc.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    slow_embedder.delay = HANGS
    before = len(slow_embedder.embed_requests)
    _send(
        proc.stdin,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "hangs"}},
        },
    )
    wait_for(lambda: len(slow_embedder.embed_requests) > before, "the query embedding", timeout=60)
    proc.send_signal(signum)
    # SIGTERM: a clean stop, exit 0; Ctrl-C as it ends every command, the shell sees 130 (here
    # exit 130 itself: the call busy on a worker thread holds up the way out through SIGINT)
    assert proc.wait(timeout=EXITS_WITHIN) == (0 if signum == signal.SIGTERM else 130)
    err.close()
    stderr = (tmp_path / "server.err").read_text()
    assert "Traceback" not in stderr and "Aborted" not in stderr
