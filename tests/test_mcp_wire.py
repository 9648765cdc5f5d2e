"""What an agent pays for and is told, through the official client over stdio: strict
arguments with one-line errors, only the capabilities the server has, short one-line
descriptions, and answers within their byte budgets on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from pydantic import BaseModel

from search.mcp_server import GET_MAX_REFS
from tests.embed_servers import OllamaServer
from tests.test_mcp import NOTES_SEARCH, call, make_workspace, over_stdio, refused, server_env

TOOLS_LIST_MAX = 5_000
SEARCH_MAX = 12_000  # k=8, detail=text
SNIPPET_MAX = 4_000  # k=8, detail=snippet
QUERIES = (
    "záloha databáze restic",
    "Which host has 51820/udp forwarded?",
    "как сварить борщ",
    "home server disk failure",
    "wireguard",
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """examples/notes indexed once for the module: these tests only read (and refresh the TOC)."""
    server = OllamaServer({"fake-embed:latest": 64})
    try:
        yield make_workspace(tmp_path_factory.mktemp("wire"), server)
    finally:
        server.stop()


def wire_bytes(result: BaseModel) -> int:
    """A result as the client received it: every content block and field, as JSON."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def test_unknown_and_bad_arguments_are_one_line_tool_errors(workspace: Path, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        listed = (await session.list_tools()).tools
        assert all(tool.input_schema.get("additionalProperties") is False for tool in listed)
        for arguments in ({"query": "x", "source": "team"}, {"query": "x", "limit": 2}):
            message = await refused(session, "search", **arguments)
            unknown = next(name for name in arguments if name != "query")
            assert f"unknown argument '{unknown}'" in message
            assert "query, path, k, mode" in message  # the allowed ones, named
        typed = await refused(session, "search", query="x", k="lots")
        assert typed.startswith("search: k: ") and "integer" in typed
        for message in (typed, await refused(session, "search", query="x", k=0), await refused(session, "get")):
            assert "pydantic" not in message and "http" not in message and "validation error" not in message
        assert "path: required" in await refused(session, "get")
        odd = await refused(session, "status", **{"a\nb": 1})
        assert "'a\\nb'" in odd  # the client's name, quoted: still one line
        assert "unknown tool 'nope'" in (await session.call_tool("nope", {})).content[0].text  # type: ignore[union-attr]
        # a tag may still come as one string
        assert (await call(session, "search", query="wireguard", tags="vpn", mode="lex"))["results"]

    over_stdio(workspace, body, tmp_path / "server.log")


def test_only_tools_are_advertised_and_descriptions_are_one_line(workspace: Path, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        seen["tools"] = (await session.list_tools()).tools

    params = StdioServerParameters(
        command=str(NOTES_SEARCH), args=["--config", str(workspace), "mcp"], env=server_env(), cwd=str(tmp_path)
    )

    async def main() -> None:
        with (tmp_path / "server.log").open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                init = await session.initialize()
                seen["capabilities"] = init.capabilities
                await body(session)

    anyio.run(main)
    capabilities = seen["capabilities"]
    assert capabilities.tools is not None
    assert capabilities.resources is None and capabilities.prompts is None
    for tool in seen["tools"]:
        assert tool.description and "\n" not in tool.description and "  " not in tool.description, tool.name
        for name, prop in tool.input_schema["properties"].items():
            assert "title" not in prop, (tool.name, name)


def test_answers_fit_their_byte_budgets_on_the_wire(workspace: Path, tmp_path: Path) -> None:
    """tools/list <= 5 KB, a default search (k=8) <= 12 KB, detail=snippet <= 4 KB, in Czech,
    English and Russian alike; each answer is sent once (compact JSON text, no structured copy)."""

    async def body(session: ClientSession) -> None:
        assert wire_bytes(await session.list_tools()) <= TOOLS_LIST_MAX
        for query in QUERIES:
            full = await session.call_tool("search", {"query": query})
            short = await session.call_tool("search", {"query": query, "detail": "snippet"})
            assert full.structured_content is None and len(full.content) == 1
            hits = (await call(session, "search", query=query))["results"]
            assert len(hits) == 8, query
            assert wire_bytes(full) <= SEARCH_MAX, (query, wire_bytes(full))
            assert wire_bytes(short) <= SNIPPET_MAX, (query, wire_bytes(short))

    over_stdio(workspace, body, tmp_path / "server.log")


def test_toc_tool_caps_its_text_at_whole_lines(workspace: Path, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        whole = await call(session, "toc")
        [toc] = whole["tocs"]
        assert whole["notice"] is None and toc["text"].endswith("\n")
        cut = await call(session, "toc", source="notes", max_bytes=300)
        [part] = cut["tocs"]
        assert part["truncated"] and len(part["text"].encode()) <= 300
        assert toc["text"].startswith(part["text"]) and part["text"].endswith("\n")
        assert "max_bytes" in cut["notice"]
        assert "unknown source 'nope'" in await refused(session, "toc", source="nope")

    over_stdio(workspace, body, tmp_path / "server.log")


def test_a_hostile_glob_is_answered_at_once(workspace: Path, tmp_path: Path) -> None:
    """The red-team's `get` that froze the server: an answer now, and the server serves on."""

    async def body(session: ClientSession) -> None:
        assert "no file matches" in await refused(session, "get", path="notes:" + "**/" * 12 + "y.md")
        assert "no file matches" in await refused(session, "get", path="notes:devops/" + "*" * 16 + "Q.md")
        assert "at most 512" in await refused(session, "get", path="notes:" + "*" * 600)
        assert (await call(session, "status"))["sources"]

    over_stdio(workspace, body, tmp_path / "server.log")


def test_a_long_get_list_is_refused_and_a_failed_one_is_one_short_line(workspace: Path, tmp_path: Path) -> None:
    """20,000 refs took 10 s and came back as 2 MB of errors (or a 650 KB error line when none
    could be read): a list is capped, and a failure names the first few and counts the rest."""

    async def body(session: ClientSession) -> None:
        many = [f"notes:nope{i}.md" for i in range(GET_MAX_REFS + 1)]
        assert f"{GET_MAX_REFS + 1} refs; at most {GET_MAX_REFS}" in await refused(session, "get", path=many)
        failed = await refused(session, "get", path=many[:GET_MAX_REFS])
        assert len(failed) < 500 and failed.endswith(f"; and {GET_MAX_REFS - 3} more")
        assert failed.startswith("notes:nope0.md: no such file; notes:nope1.md: no such file")
        # at the cap the list is read, and what failed is listed in full beside what was read
        mixed = await call(session, "get", path=["notes:devops/wireguard.md:1:1", *many[: GET_MAX_REFS - 1]])
        assert mixed["count"] == 1 and len(mixed["errors"]) == GET_MAX_REFS - 1

    over_stdio(workspace, body, tmp_path / "server.log")
