"""The MCP server end to end, as an agent meets it: the official client drives a real
`notes-search mcp` process over stdio and over streamable HTTP. The server embeds through an
Ollama-protocol test server (64 d); the notes are a copy of examples/notes, indexed first."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import requests
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from indexer.config import load_config
from indexer.embedders import make_embedder
from indexer.hosts import is_loopback_host as is_loopback
from indexer.sync import run_sync
from search.mcp_server import LOCAL_ORIGIN, TOKEN_ENV
from search.service.searching import AGENT_SNIPPET_BYTES, AGENT_TEXT_BYTES
from tests.embed_servers import OllamaServer, free_port
from tests.pg import both_backends

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "notes"
NOTES_SEARCH = Path(sys.executable).parent / "notes-search"
TOOLS = {"search", "status", "reindex", "get", "grep", "toc", "collections", "route"}
TOKEN = "s3cret-token"

Session = Callable[[ClientSession], Awaitable[None]]


@pytest.fixture(scope="module")
def ollama() -> Iterator[OllamaServer]:
    server = OllamaServer({"fake-embed:latest": 64})
    try:
        yield server
    finally:
        server.stop()


def make_workspace(root: Path, ollama: OllamaServer, db: str | None = None) -> Path:
    """examples/notes with a secret outside the root and symlinks pointing at it, indexed (in
    the index `db` names, when given)."""
    shutil.copytree(EXAMPLES, root / "notes")
    (root / "secret").mkdir()
    (root / "secret" / "passwords.md").write_text("# Secret\n\nTOPSECRET-4242\n", encoding="utf-8")
    (root / "notes" / "devops" / "leak.md").symlink_to(root / "secret" / "passwords.md")
    (root / "notes" / "outside").symlink_to(root / "secret", target_is_directory=True)
    config = root / "notes-search.yaml"
    config.write_text(
        f"""\
root: {root}
{f'db: "{db}"' if db else ""}
embedding:
  provider: ollama
  model: fake-embed:latest
  endpoint: {ollama.url}
  dims: 64
sources:
  workspace:
    notes:
      root: notes
      paths: ["**"]
      exclude: ["drafts/**", "inbox.md"]
""",
        encoding="utf-8",
    )
    loaded = load_config(config)
    embedder = make_embedder(loaded.embedding)
    report = run_sync(loaded, embedder_factory=lambda: embedder)
    assert report.embedded > 0 and report.pending == 0
    return config


@pytest.fixture
def workspace(tmp_path: Path, ollama: OllamaServer, db_url: str | None) -> Path:
    return make_workspace(tmp_path, ollama, db_url)


def server_env() -> dict[str, str]:
    """The server imports this checkout (not whatever an editable install points at)."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["PYTHONPATH"] = str(REPO)
    return env


def over_stdio(config: Path, body: Session, errlog: Path) -> None:
    params = StdioServerParameters(
        command=str(NOTES_SEARCH), args=["--config", str(config), "mcp"], env=server_env(), cwd=str(config.parent)
    )

    async def main() -> None:
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await body(session)

    try:
        anyio.run(main)
    except BaseException:
        print(errlog.read_text(), file=sys.stderr)
        raise


async def call(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    """A tool's answer: one compact JSON text, sent once (no structured copy beside it)."""
    result = await session.call_tool(name, arguments)
    assert not result.is_error, (name, arguments, result.content)
    [content] = result.content
    assert result.structured_content is None and content.type == "text"
    assert "\n  " not in content.text  # compact: no indentation
    answer = json.loads(content.text)
    assert isinstance(answer, dict)
    return answer


def ref_path(hit: dict[str, Any]) -> str:
    """The path part of a hit's `ref` (source:path:line)."""
    return str(hit["ref"]).split(":", 1)[1].rsplit(":", 1)[0]


async def refused(session: ClientSession, name: str, **arguments: Any) -> str:
    result: CallToolResult = await session.call_tool(name, arguments)
    assert result.is_error, (name, arguments, result.structured_content)
    text = result.content[0].text  # type: ignore[union-attr]
    assert "\n" not in text.strip()
    return text


async def exercise_every_tool(session: ClientSession) -> None:
    """tools/list, then tools/call of every tool with a non-empty answer: an agent can use each one."""
    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    assert tools["search"].input_schema["required"] == ["query"]
    assert set(tools["search"].input_schema["properties"]["mode"]["enum"]) == {"hybrid", "lex", "vec"}

    everything = await call(session, "search", query="záloha databáze restic")
    assert everything["scope"] == "all sources" and not everything["degraded"]
    hit = everything["results"][0]
    assert set(hit) >= {"ref", "source", "path", "line", "end_line", "match_line", "breadcrumb", "score", "text"}
    assert "snippet" not in hit  # `text` holds its lines
    assert hit["ref"] == f"notes:{hit['path']}:{hit['line']}" and len(hit["text"].encode()) <= AGENT_TEXT_BYTES

    scoped = await call(session, "search", query="restic", path="devops", k=3, mode="lex")
    assert scoped["scope"] == "collection devops" and scoped["results"]
    assert all(ref_path(h).startswith("devops/") for h in scoped["results"])
    folder = await call(session, "search", query="kniha", path="reading")  # no _meta.yaml: a plain folder
    assert folder["scope"] == "notes:reading" and folder["results"]
    assert all(ref_path(h).startswith("reading/") for h in folder["results"])

    status = await call(session, "status")
    assert status["sources"][0]["files"] > 20 and status["sources"][0]["lag"]["lags"] is False
    part = await call(session, "status", path="notes:devops")
    assert 0 < part["sources"][0]["files"] < status["sources"][0]["files"]
    assert sum(status["languages"].values()) == status["sources"][0]["chunks"]  # chunks per language
    assert sum(part["languages"].values()) == part["sources"][0]["chunks"] < status["sources"][0]["chunks"]

    reindexed = await call(session, "reindex", path="devops", full=True)
    assert reindexed["sources"][0]["updated"] > 0

    got = await call(session, "get", path=hit["ref"], max_lines=3)
    line = int(hit["ref"].rsplit(":", 1)[1])
    assert got["from_line"] == line and got["text"] and got["truncated"] is True
    assert got["next_from_line"] == line + 3

    grepped = await call(session, "grep", pattern="5432")
    assert grepped["count"] > 0 and grepped["hits"][0]["ref"].startswith("notes:devops/postgresql.md:")

    listing = await call(session, "collections")
    assert listing["layout"] == "flat"
    assert {"cooking", "devops", "travel"} <= {c["name"] for c in listing["collections"]}

    routed = await call(session, "route", question="postgresql backups on the home server")
    assert routed["results"][0]["name"] == "devops"

    contents = await call(session, "toc", source="notes")
    [toc] = contents["tocs"]
    assert toc["source"] == "notes" and "# Contents of source notes" in toc["text"] and not toc["truncated"]
    assert "wireguard.md" in toc["text"]


# ---- stdio ----------------------------------------------------------------------------------


@both_backends
def test_stdio_lists_and_calls_every_tool(workspace: Path, tmp_path: Path) -> None:
    over_stdio(workspace, exercise_every_tool, tmp_path / "server.log")


def test_paths_are_confined_and_the_server_keeps_serving(workspace: Path, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        assert "outside" in await refused(session, "search", query="x", path="../secret")
        assert "absolute" in await refused(session, "search", query="x", path="/etc/passwd")
        assert "outside the source root" in await refused(session, "get", path="devops/leak.md")
        assert "outside the source root" in await refused(session, "get", path="notes:outside/passwords.md")
        assert "outside" in await refused(session, "get", path="notes:../../etc/passwd")
        assert "outside the source root" in await refused(session, "grep", pattern="TOPSECRET", path="outside")
        assert "outside" in await refused(session, "status", path="../")
        assert "outside" in await refused(session, "reindex", path="notes:devops/../../secret")
        assert "no such" in await refused(session, "search", query="x", path="no/such/folder")
        assert (await call(session, "grep", pattern="TOPSECRET"))["count"] == 0  # the walk skips the links
        assert (await call(session, "search", query="záloha"))["results"]  # still serving

    over_stdio(workspace, body, tmp_path / "server.log")


def test_detail_snippet_answers_the_same_hits_in_fewer_bytes(workspace: Path, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(listed["search"].input_schema["properties"]["detail"]["enum"]) == {"text", "snippet"}
        for query in ("Which host has 51820/udp forwarded?", "záloha databáze restic", "как сварить борщ"):
            full = await call(session, "search", query=query)
            short = await call(session, "search", query=query, detail="snippet")
            assert [(h["ref"], h["match_line"], h["score"]) for h in short["results"]] == [
                (h["ref"], h["match_line"], h["score"]) for h in full["results"]
            ]
            assert all("text" not in h and "path" not in h and h["snippet"] for h in short["results"])
            assert all(len(h["snippet"].encode()) <= AGENT_SNIPPET_BYTES for h in short["results"])
            assert len(json.dumps(short, ensure_ascii=False)) < len(json.dumps(full, ensure_ascii=False)) / 2
            for hit in full["results"]:
                line = int(hit["ref"].rsplit(":", 1)[1])
                assert line <= hit["match_line"] <= hit["end_line"] and len(hit["text"].encode()) <= AGENT_TEXT_BYTES
        wireguard = (await call(session, "search", query="51820/udp", mode="lex", detail="snippet"))["results"][0]
        assert wireguard["ref"].startswith("notes:devops/wireguard.md:") and "51820/udp" in wireguard["snippet"]
        # the tool's description and the detail argument's name every field of a hit
        described = listed["search"].description + listed["search"].input_schema["properties"]["detail"]["description"]
        fields = set(wireguard) | set(full["results"][0])
        assert all(f"`{key}`" in described for key in fields), (sorted(fields), described)
        missed = await call(session, "search", query="xyzzynotfound", mode="lex", detail="snippet")
        assert missed["results"] == [] and missed["notice"] == "nothing found in all sources; try other words or grep"
        bad = await session.call_tool("search", {"query": "x", "detail": "everything"})
        assert bad.is_error and "detail" in bad.content[0].text  # type: ignore[union-attr]

    over_stdio(workspace, body, tmp_path / "server.log")


def test_a_long_query_is_echoed_cut_at_a_character(workspace: Path, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        pasted = "restic záloha " * 8000  # 120,000 bytes
        answer = await call(session, "search", query=pasted, mode="lex", detail="snippet")
        assert answer["results"]
        head, marker = answer["query"].split("… ", 1)
        assert pasted.startswith(head) and len(head.encode()) == 2000
        assert marker == "[cut: the query has 120,000 bytes]"
        assert (await call(session, "search", query="restic záloha", mode="lex"))["query"] == "restic záloha"

    over_stdio(workspace, body, tmp_path / "server.log")


def test_an_append_is_found_by_the_next_scoped_search(workspace: Path, tmp_path: Path) -> None:
    note = workspace.parent / "notes" / "devops" / "wireguard.md"

    async def body(session: ClientSession) -> None:
        assert (await call(session, "search", query="QX7731", path="devops", mode="lex"))["results"] == []
        with note.open("a", encoding="utf-8") as f:  # what `echo ... >> note.md` does
            f.write("\nKvazarový převodník QX7731 visí na portu 51820.\n")
        lines = len(note.read_text(encoding="utf-8").splitlines())
        exact = await call(session, "search", query="QX7731", path="devops", mode="lex")
        assert [(ref_path(h), h["end_line"]) for h in exact["results"]] == [("devops/wireguard.md", lines)]
        hybrid = await call(session, "search", query="kvazarový převodník QX7731", path="devops")
        assert ("devops/wireguard.md", lines) in [(ref_path(h), h["end_line"]) for h in hybrid["results"]]
        assert not hybrid["degraded"] and hybrid["notice"] is None  # embedded in the same call

    over_stdio(workspace, body, tmp_path / "server.log")


# ---- streamable HTTP -------------------------------------------------------------------------


def wait_for_port(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"server did not listen on {port} within {timeout} s:\n{log.read_text()}")


def start_http_server(config: Path, log: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """`notes-search mcp --http` with the token on a free port, its output in `log`; the process
    (the caller ends it) and its URL, once it listens."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(str(NOTES_SEARCH), "--config", str(config), "mcp", "--http"),
                *("--port", str(port), "--token", TOKEN, *options),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(),
        )
    try:
        wait_for_port(proc, port, log)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def http_server(
    tmp_path_factory: pytest.TempPathFactory, ollama: OllamaServer, module_db_url: str | None
) -> Iterator[str]:
    root = tmp_path_factory.mktemp("http")
    config = make_workspace(root, ollama, module_db_url)
    proc, url = start_http_server(config, root / "server.log")
    try:
        yield url
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a server this test started: politely, then for good if it does not go."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    """An initialized session of the official client over streamable HTTP, with the token."""
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=120))
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def test_http_lists_and_calls_every_tool(http_server: str) -> None:
    async def main() -> None:
        async with http_session(http_server) as session:
            await exercise_every_tool(session)

    anyio.run(main)


def test_each_http_session_gets_instructions_as_the_index_is_now(workspace: Path, tmp_path: Path) -> None:
    """An HTTP server runs for days: its instructions were made once, when it started, and a
    collection added since (or a first sync) never reached an agent's new session."""
    from indexer.embedders import make_embedder

    async def instructions(url: str) -> str:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        async with (
            client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            return (await session.initialize()).instructions or ""

    proc, url = start_http_server(workspace, tmp_path / "server.log")
    try:
        before = anyio.run(instructions, url)
        assert "- devops — " in before and "- zahrada — Zelenina" not in before
        garden = workspace.parent / "notes" / "zahrada"
        garden.mkdir()
        (garden / "_meta.yaml").write_text("name: zahrada\ndescription: Zelenina a sklep\n", encoding="utf-8")
        (garden / "rajcata.md").write_text("# Rajčata\n\nVysadit v květnu.\n", encoding="utf-8")
        loaded = load_config(workspace)
        run_sync(loaded, embedder_factory=lambda: make_embedder(loaded.embedding))
        assert "- zahrada — Zelenina a sklep" in anyio.run(instructions, url)
    finally:
        _stop(proc)


INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_http_requires_the_bearer_token(http_server: str) -> None:
    missing = requests.post(http_server, json=INITIALIZE, headers=MCP_HEADERS, timeout=10)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = requests.post(
        http_server, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer nope"}, timeout=10
    )
    assert wrong.status_code == 401
    good = requests.post(
        http_server,
        json=INITIALIZE,
        headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"},
        timeout=10,
        stream=True,
    )
    assert good.status_code == 200
    good.close()


def test_http_refuses_foreign_origins(http_server: str) -> None:
    auth = {**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"}
    evil = requests.post(http_server, json=INITIALIZE, headers={**auth, "Origin": "http://evil.example"}, timeout=10)
    assert evil.status_code == 403
    rebound = requests.post(
        http_server, json=INITIALIZE, headers={**auth, "Origin": "http://localhost.evil.example:80"}, timeout=10
    )
    assert rebound.status_code == 403
    local = requests.post(
        http_server, json=INITIALIZE, headers={**auth, "Origin": "http://localhost:3000"}, timeout=10, stream=True
    )
    assert local.status_code == 200
    local.close()


def test_non_loopback_bind_without_token_is_refused(workspace: Path) -> None:
    result = subprocess.run(
        [
            str(NOTES_SEARCH),
            "--config",
            str(workspace),
            "mcp",
            "--http",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(),
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode != 0
    assert "--token" in result.stderr and TOKEN_ENV in result.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("myhost.lan", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:8765", True),
        ("http://localhost.evil.example", False),
        ("http://127.0.0.1.evil.example", False),
        ("null", False),
        ("https://example.com", False),
    ],
)
def test_local_origins(origin: str, allowed: bool) -> None:
    assert bool(LOCAL_ORIGIN.fullmatch(origin)) is allowed


def test_help_names_the_token_env() -> None:
    result = subprocess.run(
        [str(NOTES_SEARCH), "mcp", "--help"], capture_output=True, text=True, timeout=60, env=server_env()
    )
    assert result.returncode == 0 and TOKEN_ENV in result.stdout


def test_get_counts_lines_as_show_and_grep_do(config_path: Path, do_sync: Callable[..., object], notes: Path) -> None:
    """Form feeds, vertical tabs and U+2028 are not line breaks for `show`, grep or the chunker."""
    from search.mcp_server import NotesTools
    from search.service import NotesService

    (notes / "odd.md").write_text("one\ntwo \x0c still two\nthree \u2028 still three\nfour\r\nfive\n", encoding="utf-8")
    do_sync()
    tools = NotesTools(NotesService.from_config_file(str(config_path)))
    got = tools.get("notes:odd.md:5", None, 10)
    assert got["text"] == "five" and got["total_lines"] == 5
    assert tools.get("notes:odd.md", None, 10)["text"].split("\n")[3] == "four"
    hits = tools.grep("five", "notes:odd.md", False, True)["hits"]
    assert [h["line"] for h in hits] == [5]


def test_grep_is_truncated_only_when_more_lines_exist(
    config_path: Path, do_sync: Callable[..., object], notes: Path
) -> None:
    from search.mcp_server import NotesTools
    from search.service import GREP_MAX_HITS, NotesService

    (notes / "many.md").write_text("".join(f"zzmark {i}\n" for i in range(GREP_MAX_HITS)), encoding="utf-8")
    do_sync()
    tools = NotesTools(NotesService.from_config_file(str(config_path)))
    exact = tools.grep("zzmark", "notes:many.md", False, True)
    assert (exact["count"], exact["truncated"], exact["notice"]) == (GREP_MAX_HITS, False, None)
    (notes / "many.md").write_text("".join(f"zzmark {i}\n" for i in range(GREP_MAX_HITS + 1)), encoding="utf-8")
    more = tools.grep("zzmark", "notes:many.md", False, True)
    assert (more["count"], more["truncated"]) == (GREP_MAX_HITS, True)
    fewer = tools.grep("zzmark", "notes:many.md", False, True, max_count=5)
    assert (fewer["count"], fewer["truncated"]) == (5, True) and "raise max_count" in fewer["notice"]
    # lines of up to 1,000 characters: 200 of them were 200 KB for an agent's context
    (notes / "wide.md").write_text("".join(f"zzwide {i} " + "y" * 990 + "\n" for i in range(150)), encoding="utf-8")
    wide = tools.grep("zzwide", "notes:wide.md", False, True)
    assert wide["truncated"] and 40 <= wide["count"] < 66 and "65536 bytes" in wide["notice"]
    assert len(json.dumps(wide["hits"], ensure_ascii=False).encode()) <= 65536 + 2 * wide["count"]
    # short lines: each hit's ref, path and file weigh more than its text
    (notes / "short.md").write_text("".join(f"zzshort {i}\n" for i in range(1000)), encoding="utf-8")
    short = tools.grep("zzshort", "notes:short.md", False, True, max_count=1000)
    assert (
        short["truncated"] and len(json.dumps(short["hits"], ensure_ascii=False).encode()) <= 65536 + 2 * short["count"]
    )


def test_two_http_servers_on_two_hosts_query_one_postgres_index(
    tmp_path: Path, ollama: OllamaServer, pg_url: str
) -> None:
    """Two MCP servers, each with its own root (its own lock, TOC and outage folder, as on two
    hosts), answer from one PostgreSQL index; what one host's sync adds the other finds."""
    config_a = make_workspace(tmp_path / "a", ollama, pg_url)
    notes = tmp_path / "a" / "notes"
    config_b = tmp_path / "b" / "notes-search.yaml"
    config_b.parent.mkdir()
    config_b.write_text(
        config_a.read_text()
        .replace(f"root: {tmp_path / 'a'}", f"root: {tmp_path / 'b'}")
        .replace("root: notes", f"root: {notes}")
    )
    servers: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for config in (config_a, config_b):
            proc, url = start_http_server(config, config.parent / "server.log")
            servers.append(proc)
            urls.append(url)

        async def search_both(query: str) -> list[list[str]]:
            found = []
            for url in urls:
                async with http_session(url) as session:
                    answer = await call(session, "search", query=query, mode="hybrid")
                    found.append([ref_path(hit) for hit in answer["results"]])
            return found

        first = anyio.run(search_both, "záloha databáze restic")
        assert first[0] and first[0] == first[1]
        (notes / "devops" / "vpn.md").write_text("# VPN\n\nWireGuard listens on 51820/udp.\n", encoding="utf-8")
        loaded = load_config(config_a)
        embedder = make_embedder(loaded.embedding)
        assert run_sync(loaded, embedder_factory=lambda: embedder).sources[0].added == 1
        after = anyio.run(search_both, "WireGuard 51820")
        assert after[0][0] == after[1][0] == "devops/vpn.md"
    finally:
        for proc in servers:
            _stop(proc)


# ---- introduction and several files -----------------------------------------------------------


def test_initialize_carries_the_version_and_where_the_notes_are(workspace: Path, tmp_path: Path) -> None:
    """An agent learns the sources and collections from the handshake, before any call; the
    server's version is the package's."""
    from importlib.metadata import version

    params = StdioServerParameters(
        command=str(NOTES_SEARCH), args=["--config", str(workspace), "mcp"], env=server_env(), cwd=str(workspace.parent)
    )
    seen: dict[str, Any] = {}

    async def main() -> None:
        with (tmp_path / "server.log").open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                init = await session.initialize()
                seen["version"], seen["instructions"] = init.server_info.version, init.instructions

    anyio.run(main)
    assert seen["version"] == version("notes-search") != ""
    lines = seen["instructions"].splitlines()
    assert any(line.startswith("- notes — folder, ") and "files indexed" in line for line in lines)
    assert "- devops — Domácí servery a homelab" in seen["instructions"]
    assert {"- cooking", "- travel"} <= {line.split(" — ")[0] for line in lines}


def test_instructions_cap_the_lists_and_keep_each_entry_one_line() -> None:
    from search.mcp_server import INSTRUCTIONS_LISTED, server_instructions
    from search.service.overview import Named, Overview

    many = tuple(Named(f"c{i:02}", "line one\nline two \x1b[2J" + "x" * 300) for i in range(INSTRUCTIONS_LISTED + 5))
    text = server_instructions(Overview((Named("notes", "folder, 3 files indexed"),), many))
    entries = [line for line in text.splitlines() if line.startswith("- c")]
    assert len(entries) == INSTRUCTIONS_LISTED and all(len(line) < 140 for line in entries)
    assert "- and 5 more (see `collections`)" in text and "\x1b" not in text
    assert "line one line two" in entries[0]
    assert "Collections: none yet." in server_instructions(Overview((), ()))


def test_get_reads_a_list_or_a_glob_under_one_cap(workspace: Path, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        single = await call(session, "get", path="notes:devops/wireguard.md", max_lines=5)
        assert single["truncated"] and "files" not in single  # one path: the one-file answer, as before

        globbed = await call(session, "get", path="notes:devops/*.md")
        paths = [f["path"] for f in globbed["files"]]
        assert paths == sorted(paths) and "devops/wireguard.md" in paths and globbed["count"] == len(paths)
        assert "devops/leak.md" not in paths  # the symlink out of the root is not read
        assert globbed["bytes"] <= 64 * 1024 and globbed["errors"] == []

        capped = await call(session, "get", path=["notes:devops/wireguard.md", "notes:devops/*.md"], max_lines=100)
        assert capped["lines"] <= 100 and capped["omitted"] and capped["notice"]
        assert capped["files"][0]["path"] == "devops/wireguard.md"  # in the order asked, each file once
        read = {f["path"] for f in capped["files"]}
        assert not read & {name.split(":", 1)[1] for name in capped["omitted"]}

        tiny = await call(session, "get", path=["notes:devops/wireguard.md"], max_bytes=300)
        [cut] = tiny["files"]
        assert cut["truncated"] and cut["next_from_line"] == cut["to_line"] + 1 and len(cut["text"].encode()) <= 300

        partial = await call(session, "get", path=["notes:devops/wireguard.md:1:2", "notes:nope.md", "devops/leak.md"])
        assert [f["to_line"] for f in partial["files"]] == [2]
        assert {e["ref"] for e in partial["errors"]} == {"notes:nope.md", "devops/leak.md"}
        assert "outside the source root" in json.dumps(partial["errors"]) and "TOPSECRET" not in json.dumps(partial)

        assert "no such file" in await refused(session, "get", path=["notes:nope.md"])
        assert "no file matches" in await refused(session, "get", path="notes:zzz/*.md")
        assert "from_line is for one file" in await refused(session, "get", path=["a.md", "b.md"], from_line=3)
        assert "empty list" in await refused(session, "get", path=[])

    over_stdio(workspace, body, tmp_path / "server.log")


def test_get_caps_one_file_in_bytes_even_a_single_line(workspace: Path, tmp_path: Path) -> None:
    """A pasted log or an inline image is one line of a megabyte: paging by lines never made it
    smaller, and an agent's context took it whole (max_bytes was read for several files only)."""
    big = workspace.parent / "notes" / "big"
    big.mkdir()
    (big / "oneline.md").write_text("# Log\n" + "žluť " * 60_000 + "\nafter\n", encoding="utf-8")
    (big / "lines.md").write_text("".join(f"line {i} " + "x" * 90 + "\n" for i in range(1, 1001)), encoding="utf-8")
    (big / "bidi.md").write_text("# Bidi\n\nabc \u202edcba\u202c \u009b31m\n", encoding="utf-8")

    async def body(session: ClientSession) -> None:
        from search.service.reading import MANY_MAX_BYTES

        first = await call(session, "get", path="notes:big/oneline.md:2")
        assert len(first["text"].encode()) <= MANY_MAX_BYTES + 64 and first["text"].endswith("bytes]")
        assert first["text"].startswith("žluť žluť") and "[cut: the line has 420,000 bytes]" in first["text"]
        assert (first["from_line"], first["to_line"], first["next_from_line"]) == (2, 2, 3)
        assert "line 2 is cut at 65536 bytes" in first["notice"] and "from_line=3" in first["notice"]
        small = await call(session, "get", path="notes:big/lines.md", max_bytes=1000)
        assert small["to_line"] == 10 and small["next_from_line"] == 11 and len(small["text"].encode()) <= 1000
        assert small["notice"] == "showing lines 1-10 of 1000; call get with from_line=11 for more"
        tiny = await call(session, "get", path="notes:big/oneline.md:2", max_bytes=100)
        assert len(tiny["text"].encode()) <= 100 + 64
        several = await call(session, "get", path=["notes:big/oneline.md:2:1"], max_bytes=200)
        assert len(several["files"][0]["text"].encode()) <= 200 + 64
        # what JSON leaves raw (bidi controls, C1) reaches the client escaped, and decodes back
        raw = (await session.call_tool("get", {"path": "notes:big/bidi.md"})).content[0].text  # type: ignore[union-attr]
        assert "\u202e" not in raw and "\x9b" not in raw and "\\u202e" in raw and "\\u009b" in raw
        assert "abc \u202edcba\u202c \u009b31m" in json.loads(raw)["text"]

    over_stdio(workspace, body, tmp_path / "server.log")


def test_messages_name_what_an_agent_calls_not_cli_flags(workspace: Path, tmp_path: Path) -> None:
    """ "search it with --path" and "run `notes-search sync`" sent an agent looking for a flag or
    a shell it may not have: over MCP the same messages name the tools' own arguments."""

    async def body(session: ClientSession) -> None:
        folder = await refused(session, "get", path="notes:devops")
        assert "search it with path=" in folder and "--path" not in folder

    over_stdio(workspace, body, tmp_path / "server.log")
    empty = tmp_path / "empty"
    empty.mkdir()
    config = empty / "notes-search.yaml"
    config.write_text(workspace.read_text().replace(f"root: {workspace.parent}", f"root: {empty}"), encoding="utf-8")

    async def unsynced(session: ClientSession) -> None:
        answer = await session.call_tool("search", {"query": "wireguard"})
        text = answer.content[0].text  # type: ignore[union-attr]
        assert 'call `reindex` with path "." first' in text and "notes-search sync" not in text, text

    if "db:" not in workspace.read_text():  # a PostgreSQL index is there already
        over_stdio(config, unsynced, tmp_path / "server2.log")


def test_status_holds_a_git_source_against_its_remote(workspace: Path, tmp_path: Path) -> None:
    """The MCP `status` compared a git source with its mirror alone: a commit pushed since the
    last sync read `lags: false`, and an agent trusted a stale search."""
    from tests.gitutil import commit, init_upstream

    upstream = init_upstream(tmp_path / "team")
    commit(upstream, {"wiki/dns.md": "# DNS\n\nunbound on port 53\n"}, time=1_700_000_000)
    config = workspace
    config.write_text(config.read_text() + f"  git:\n    team: {{url: {tmp_path / 'team'}}}\n", encoding="utf-8")
    loaded = load_config(config)
    run_sync(loaded, embedder_factory=lambda: make_embedder(loaded.embedding))
    newer = commit(upstream, {"wiki/dns.md": "# DNS\n\nunbound on port 5353\n"}, time=1_700_000_100)

    async def body(session: ClientSession) -> None:
        [team] = (await call(session, "status", path="team"))["sources"]
        assert team["lag"]["lags"] is True and team["lag"]["remote_head"] == newer

    over_stdio(config, body, tmp_path / "server.log")


def test_hits_carry_their_file_and_get_takes_it(workspace: Path, tmp_path: Path) -> None:
    """`file` reaches an agent through search (both details) and grep; `get` reads that path."""
    wireguard = str(workspace.parent / "notes" / "devops" / "wireguard.md")

    async def body(session: ClientSession) -> None:
        for detail in ("text", "snippet"):
            hit = (await call(session, "search", query="51820/udp", mode="lex", detail=detail))["results"][0]
            assert hit["file"] == wireguard, detail
        assert {h["file"] for h in (await call(session, "grep", pattern="51820/udp"))["hits"]} == {wireguard}
        window = await call(session, "get", path=f"{wireguard}:1", max_lines=3)
        assert "wireguard.md" in json.dumps(window) and window["next_from_line"] == 4
        assert "absolute" in await refused(session, "get", path=str(workspace.parent / "secret" / "passwords.md"))
        # a hit's `file` and `ref` scope a search, a grep and a status to its note (they were
        # refused: "paths are relative", "no such file or folder")
        hit = (await call(session, "search", query="51820/udp", mode="lex"))["results"][0]
        for path in (hit["file"], hit["ref"], f"{wireguard}:3"):
            scoped = await call(session, "search", query="wireguard", mode="lex", path=path)
            assert {r["path"] for r in scoped["results"]} == {"devops/wireguard.md"}, path
            assert (await call(session, "grep", pattern="51820", path=path))["count"] >= 1
            [entry] = (await call(session, "status", path=path))["sources"]
            assert entry["path"] == "devops/wireguard.md" and entry["files"] == 1
        # what no source can hold is said as typed, naming no source the caller never named
        assert await refused(session, "search", query="x", path="../../etc/passwd") == (
            "../../etc/passwd: '..' leads outside the source root"
        )

    over_stdio(workspace, body, tmp_path / "server.log")
