"""The MCP server: the service's operations as tools, over stdio or HTTP.

One process serves many calls, so the config is loaded once at startup and the embedding model
once, lazily, on the first call that needs it (`NotesService.embedder`). Every path argument is
confined to the configured sources before anything is read; domain errors become MCP tool
errors (`isError` with the one-line message) and the server keeps serving. The MCP SDK, uvicorn,
git and the grep machinery are imported only when the server starts: `notes-search --help`
imports this module for the `mcp` command's options, and must stay light. (No `from __future__
import annotations` here: the SDK reads the tool signatures at run time, whose types are
imported inside `build_server`; names known only to type checkers are quoted instead.)
"""

import hmac
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from indexer.errors import NotesSearchError
from search.route import ROUTE_K
from search.service.reading import MANY_MAX_BYTES, MANY_MAX_LINES

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp, Receive, Scope, Send

    from indexer.embedders import Embedder
    from search.resident import ResidentVectors
    from search.service import NotesService
    from search.service.overview import Named, Overview
    from search.service.reading import FileView

log = logging.getLogger("notes_search.mcp")

DEFAULT_PORT = 8765
TOKEN_ENV = "NOTES_SEARCH_MCP_TOKEN"
GET_MAX_LINES = 400
GREP_MAX_HITS = 200
DETAILS = ("text", "snippet")
# detail=snippet: 8 hits in about 4 KB, Latin or Cyrillic notes alike (bench/bench_snippets.py)
AGENT_SNIPPET_BYTES = 200
SNIPPET_DETAIL_DROPS = ("text", "source", "path", "line", "end_line")
REINDEX_LOCK_WAIT = 5.0  # seconds a reindex waits for a running sync before saying so
SERVER_INSTRUCTIONS = """\
Search the user's markdown notes. Cheapest first: `grep` for exact strings (hostnames, numbers,
error codes); `collections`/`route` to learn where a topic lives; `search` (hybrid BM25 + vectors)
for questions in any wording. Results carry `ref` = source:path:line: read more with `get`.
Without `path`, search covers all sources; pass a collection name, source id, folder or file to
narrow it. `degraded: true` means the vector half did not run and `notice` says why."""


INSTRUCTIONS_LISTED = 20  # sources, and collections, named in the instructions; the tools list all
DESCRIPTION_CHARS = 120


def server_instructions(overview: "Overview") -> str:
    """SERVER_INSTRUCTIONS and where the notes are: every source and collection with its
    description (capped), so an agent can pick a `path` before its first call."""
    from indexer.safe_text import safe_for_terminal

    def listing(title: str, items: "tuple[Named, ...]", more: str) -> list[str]:
        lines = [title]
        for item in items[:INSTRUCTIONS_LISTED]:
            # one line each: a description from a shared repository cannot start lines of its own
            text = safe_for_terminal(" ".join(item.description.split()))
            if len(text) > DESCRIPTION_CHARS:
                text = text[: DESCRIPTION_CHARS - 1].rstrip() + "…"
            lines.append(f"- {safe_for_terminal(item.name)} — {text}" if text else f"- {safe_for_terminal(item.name)}")
        if len(items) > INSTRUCTIONS_LISTED:
            lines.append(f"- and {len(items) - INSTRUCTIONS_LISTED} more ({more})")
        return lines

    parts = [SERVER_INSTRUCTIONS, ""]
    parts += listing("Sources (a source id as `path` searches only it):", overview.sources, "see `status`")
    if overview.collections:
        parts += ["", *listing("Collections (a name as `path`):", overview.collections, "see `collections`")]
    else:
        parts += ["", "Collections: none yet."]
    return "\n".join(parts)


class NotesTools:
    """The tools' answers as MCP JSON, over one `NotesService`: both transports and the tests
    share it. What only an agent is told (`ref` on every hit, the "nothing found" hint, the
    grep limit) is worded here; the work is the service's."""

    def __init__(self, service: "NotesService") -> None:
        self.service = service
        self.config = service.config

    def embedder(self) -> "Embedder":
        return self.service.embedder()

    def resident_vectors(self) -> "ResidentVectors":
        return self.service.resident_vectors()

    def warm_up(self) -> None:
        self.service.warm_up()

    def search(
        self,
        query: str,
        path: str | None,
        k: int,
        mode: str,
        tags: list[str] | str | None = None,
        since: str | None = None,
        until: str | None = None,
        per_file: int | None = None,
        min_similarity: float | None = None,
        detail: str = "text",
    ) -> dict[str, Any]:
        """`detail`: "text" (each hit's ~1,200 characters) or "snippet" (the same hits with their
        few lines only: about a third of the bytes, for an agent that reads on with `get`)."""
        from search.service.scope import Filters

        if detail not in DETAILS:
            raise NotesSearchError(f"unknown detail {detail!r} (use one of {', '.join(DETAILS)})")
        filters = Filters((tags,) if isinstance(tags, str) else tuple(tags or ()), since, until)
        outcome = self.service.search(
            query,
            path=path,
            k=k,
            mode=mode,
            resident=True,
            filters=filters,
            per_file=per_file,
            min_similarity=min_similarity,
        )
        data = outcome.response.to_json()
        data["notice"] = outcome.notice
        data["scope"] = outcome.target.label
        for hit in data["results"]:  # type: ignore[attr-defined]
            hit["ref"] = f"{hit['source']}:{hit['path']}:{hit['line']}"
        if detail == "snippet":
            from search.snippets import snippet_in_bytes, snippet_terms

            terms = snippet_terms(query)
            short = []
            for hit, found in zip(data["results"], outcome.response.results, strict=True):  # type: ignore[call-overload]
                kept = {key: value for key, value in hit.items() if key not in SNIPPET_DETAIL_DROPS}
                kept["snippet"] = snippet_in_bytes(
                    terms, found.chunk_text, found.line, found.match_line, AGENT_SNIPPET_BYTES
                )
                short.append({"ref": kept.pop("ref"), **kept})  # `ref` holds source, path and line
            data["results"] = short
        if not data["results"] and not data["notice"]:
            other_mode = ", mode=lex for exact terms," if mode != "lex" else ""
            data["notice"] = f"nothing found in {outcome.target.label}; try other words{other_mode} or grep"
        return data

    def status(self, path: str | None) -> dict[str, Any]:
        return self.service.status(path).to_json()

    def reindex(self, path: str, full: bool) -> dict[str, Any]:
        from search.service.indexing import source_report_json

        outcome = self.service.reindex(path, full=full, lock_wait=REINDEX_LOCK_WAIT, whole_sources=False)
        if outcome.locked:
            raise NotesSearchError(
                f"another sync is running (waited {REINDEX_LOCK_WAIT:g} s for its lock); try again shortly"
            )
        reports = [run.report for run in outcome.runs]
        return {
            "scope": outcome.target.label,
            "full": full,
            "sources": [
                source_report_json(s, place=place, shape="reindex")
                for run in outcome.runs
                for place in run.places
                for s in run.report.sources
            ],
            "embedded": sum(r.embedded for r in reports),
            "pending": reports[-1].pending if reports else 0,
            "seconds": round(sum(r.seconds for r in reports), 3),
            "notice": "; ".join(outcome.notices) or None,
        }

    def get(
        self, path: str | list[str], from_line: int | None, max_lines: int | None, max_bytes: int | None = None
    ) -> dict[str, Any]:
        """One file (a window of it), or with a list or a glob several under one size cap."""
        from search.service.reading import asks_for_several

        if isinstance(path, list) or asks_for_several([path]):
            if from_line is not None:
                raise NotesSearchError("from_line is for one file; give each ref its line instead (source:path:LINE)")
            return self.get_many(path if isinstance(path, list) else [path], max_lines, max_bytes)
        window = self.service.get(path, from_line, max_lines or GET_MAX_LINES)
        return _file_json(window.view, window.next_from_line, {"notice": window.notice})

    def get_many(self, refs: list[str], max_lines: int | None, max_bytes: int | None) -> dict[str, Any]:
        if not refs:
            raise NotesSearchError("path: an empty list names no file")
        many = self.service.read_many(refs, max_lines=max_lines, max_bytes=max_bytes)
        if not many.views and many.failed:  # nothing read: the reasons are the answer
            raise NotesSearchError("; ".join(item.error for item in many.failed))
        notices = []
        for view in many.views:
            if view.truncated and view.range is not None:
                notices.append(
                    f"{view.source_id}:{view.path} cut at line {view.range.end} of {view.range.total}; "
                    f"get it with from_line={view.range.end + 1} for more"
                )
        if many.omitted:
            notices.append(
                f"left out {len(many.omitted)} files past the cap ({many.max_lines} lines / {many.max_bytes} bytes "
                "in all; see omitted): ask for them in another call"
            )
        if many.failed:
            notices.append(f"{len(many.failed)} of the refs could not be read (see errors)")
        return {
            "count": len(many.views),
            "lines": many.lines,
            "bytes": many.bytes,
            "notice": "; ".join(notices) or None,
            "files": [
                _file_json(view, view.range.end + 1 if view.truncated and view.range else None) for view in many.views
            ],
            "omitted": many.omitted,
            "errors": [item.to_json() for item in many.failed],
        }

    def grep(self, pattern: str, path: str | None, ignore_case: bool, fixed: bool) -> dict[str, Any]:
        from search.grep import summary

        with self.service.reading_if_indexed() as store:
            target = self.service.resolve(path, store)
        outcome = self.service.grep(
            pattern, target=target, ignore_case=ignore_case, fixed=fixed, max_count=GREP_MAX_HITS
        )
        results = [{**hit.to_json(), "ref": f"{hit.source}:{hit.path}:{hit.line}"} for hit in outcome.hits]
        notices = [f"stopped at {GREP_MAX_HITS} lines; narrow the path or the pattern"] if outcome.truncated else []
        if outcome.unsearched:
            notices.append(f"not searched ({len(outcome.unsearched)}, see unsearched): {summary(outcome.unsearched)}")
        return {
            "pattern": pattern,
            "scope": outcome.target.label,
            "count": len(results),
            "truncated": outcome.truncated,
            "notice": "; ".join(notices) or None,
            "hits": results,
            "unsearched": [item.to_json() for item in outcome.unsearched],
        }

    def collections(self, prefix: str | None) -> dict[str, Any]:
        listed = self.service.collections(prefix)
        return {**listed.to_json(), "notice": listed.notice}

    def route(self, question: str, k: int) -> dict[str, Any]:
        return self.service.route(question, k).to_json()


def _file_json(view: "FileView", next_from_line: int | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One file of `get`: a window of lines, and where the rest starts when there is more
    (`extra` goes before `rev` and `text`, where a one-file answer has its notice)."""
    assert view.range is not None  # get always returns a window
    return {
        "source": view.source_id,
        "path": view.path,
        "ref": f"{view.source_id}:{view.path}:{view.range.start}",
        "from_line": view.range.start,
        "to_line": view.range.end,
        "total_lines": view.range.total,
        "truncated": next_from_line is not None,
        "next_from_line": next_from_line,
        **(extra or {}),
        "rev": view.rev,
        "text": "\n".join(view.range.lines),
    }


# ---- the MCP server -----------------------------------------------------------------------------

PATH_HELP = (
    "A source id, a collection name, or a folder or file relative to a source root "
    "(`source:path` names one source). Omitted: all sources."
)


@contextmanager
def _tool_errors() -> Iterator[None]:
    """Domain errors become `isError` results with their one-line message; the server goes on."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except NotesSearchError as exc:
        raise ToolError(str(exc)) from None


def build_server(service: "NotesService") -> "MCPServer":
    """Register the tools. Sync functions: the SDK runs each call on a worker thread."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations
    from pydantic import Field

    from search.service.overview import package_version

    tools = NotesTools(service)
    server = MCPServer(
        "notes-search",
        instructions=server_instructions(service.overview()),
        version=package_version(),
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    where = Field(description=PATH_HELP)

    @server.tool(name="search", annotations=read_only)
    def search_tool(
        query: Annotated[str, Field(description="The question or keywords, in any language.")],
        path: Annotated[str | None, where] = None,
        k: Annotated[int, Field(ge=1, le=50, description="How many hits.")] = 8,
        mode: Annotated[
            Literal["hybrid", "lex", "vec"],
            Field(description="hybrid (default), lex = keywords/BM25 only, vec = meaning only."),
        ] = "hybrid",
        tags: Annotated[
            list[str] | str | None,
            Field(description="Only notes whose front matter has every one of these tags (case and '#' ignored)."),
        ] = None,
        since: Annotated[
            str | None,
            Field(
                description="Only notes last changed at or after this (file mtime, or git commit time of the "
                "last change): a date 2026-11-24, a local datetime 2026-11-24T09:30, or back from now: 7d, 2w, 3m, 1y."
            ),
        ] = None,
        until: Annotated[
            str | None,
            Field(
                description="Only notes last changed before the end of this; same forms (a date includes the whole day)."
            ),
        ] = None,
        per_file: Annotated[
            int | None, Field(ge=1, description="At most this many hits from one file (default: no limit).")
        ] = None,
        min_similarity: Annotated[
            float | None,
            Field(
                ge=-1.0,
                le=1.0,
                description="Drop meaning-only hits below this cosine similarity (e.g. 0.8); keyword hits "
                "stay, so with mode=lex it changes nothing.",
            ),
        ] = None,
        detail: Annotated[
            Literal["text", "snippet"],
            Field(
                description="text (default): ~1,200 characters per hit; snippet: ref, match_line, "
                "breadcrumb, score, rev, matched, file and a short snippet per hit (same hits, about a third of the bytes)."
            ),
        ] = "text",
    ) -> dict[str, Any]:
        """Hybrid search (BM25 + vectors) over the notes. Each hit has `ref` (source:path:line of
        its chunk), `match_line` (the line that matches best), `snippet` (a few lines around it),
        `breadcrumb`, `score`, `rev` (git commit or null), `matched` (keyword, meaning or both;
        `notice` says when no keyword matched) and, unless detail=snippet, `text` (~1,200
        characters of the chunk around match_line).
        Scoped to a workspace folder, edits made just before the call are indexed first.
        `scope` says what was searched; `degraded`/`notice` say when results are keyword-only."""
        with _tool_errors():
            return tools.search(
                query,
                path,
                k,
                mode,
                tags,
                since,
                until,
                per_file=per_file,
                min_similarity=min_similarity,
                detail=detail,
            )

    @server.tool(name="status", annotations=read_only)
    def status_tool(path: Annotated[str | None, where] = None) -> dict[str, Any]:
        """What is indexed (files, chunks, chunks waiting for vectors), when it was last synced,
        and whether the index lags the disk (changed/deleted files) or the git mirror. Also says
        when a sync is running, when a first sync never finished (`incomplete`), and what cannot
        be read now (`lag.unreadable`, whose indexed copies are kept)."""
        with _tool_errors():
            return tools.status(path)

    @server.tool(
        name="reindex",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )
    def reindex_tool(
        path: Annotated[
            str, Field(description="A folder or file (`source:path` allowed), a collection, or a source id.")
        ],
        full: Annotated[bool, Field(description="Re-read and re-chunk every file, not only changed ones.")] = False,
    ) -> dict[str, Any]:
        """Re-index one file, folder, collection or source now (normally a sync job does this).
        Returns added/updated/deleted counts, vectors embedded and pending."""
        with _tool_errors():
            return tools.reindex(path, full)

    @server.tool(name="get", annotations=read_only)
    def get_tool(
        path: Annotated[
            str | list[str],
            Field(
                description="A file: `source:path`, `path`, or a `ref` from search (`source:path:line`). "
                "Several at once: a list of them, or a glob (`notes:devops/*.md`, `**` spans folders)."
            ),
        ],
        from_line: Annotated[
            int | None, Field(ge=1, description="One file: first line (1-based); default: the ref's line or 1.")
        ] = None,
        max_lines: Annotated[
            int | None,
            Field(
                ge=1,
                le=MANY_MAX_LINES,
                description=f"At most this many lines (one file: default {GET_MAX_LINES}; "
                f"several: in all, default {MANY_MAX_LINES}).",
            ),
        ] = None,
        max_bytes: Annotated[
            int | None,
            Field(
                ge=1,
                le=MANY_MAX_BYTES,
                description=f"Several files: at most this many bytes in all (default {MANY_MAX_BYTES}).",
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Read a file or a line range of any source, including files inside bare git mirrors
        (at the indexed rev). `truncated`/`next_from_line` say when there is more. With a list
        or a glob: `files` in order up to the size cap; `omitted` names the files left out
        (not read), `errors` the refs that could not be read."""
        with _tool_errors():
            return tools.get(path, from_line, max_lines, max_bytes)

    @server.tool(name="grep", annotations=read_only)
    def grep_tool(
        pattern: Annotated[str, Field(description="A regular expression (or a literal string with fixed=true).")],
        path: Annotated[str | None, where] = None,
        ignore_case: Annotated[bool, Field(description="Case-insensitive match.")] = False,
        fixed: Annotated[bool, Field(description="Treat the pattern as a literal string.")] = False,
    ) -> dict[str, Any]:
        """Live exact search over the note files, no index: always current. Best for hostnames,
        numbers, error codes, tags. Each hit has `ref` (source:path:line) and the matching line;
        `unsearched` names any source, folder or file that could not be searched."""
        with _tool_errors():
            return tools.grep(pattern, path, ignore_case, fixed)

    @server.tool(name="collections", annotations=read_only)
    def collections_tool(
        prefix: Annotated[str | None, Field(description="Only names starting with this (or in this group).")] = None,
    ) -> dict[str, Any]:
        """List collections (folders with _meta.yaml) with name, description, tags, folder and file
        count: a flat list up to 50, grouped by name prefix beyond. Pass a name as `path` to search."""
        with _tool_errors():
            return tools.collections(prefix)

    @server.tool(name="route", annotations=read_only)
    def route_tool(
        question: Annotated[str, Field(description="The user's question, in any language.")],
        k: Annotated[int, Field(ge=1, le=20, description="How many collections.")] = ROUTE_K,
    ) -> dict[str, Any]:
        """Rank collections for a question (BM25 over name/description/tags + embedding similarity,
        fused by RRF). Then call search with path=<collection name>."""
        with _tool_errors():
            return tools.route(question, k)

    return server


# ---- HTTP guard ---------------------------------------------------------------------------------

LOCAL_ORIGIN = re.compile(r"https?://(localhost|127(\.[0-9]{1,3}){3}|\[::1\])(:[0-9]{1,5})?", re.IGNORECASE)


class HttpGuard:
    """ASGI middleware in front of the MCP app: a browser page on another origin may not talk to
    the server (DNS rebinding), and with a token every request must carry it as a Bearer."""

    def __init__(self, app: "ASGIApp", token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: "Scope", receive: "Receive", send: "Send") -> None:
        if scope["type"] == "http":
            from starlette.datastructures import Headers
            from starlette.responses import JSONResponse

            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not LOCAL_ORIGIN.fullmatch(origin):
                await JSONResponse({"error": f"origin {origin} is not allowed"}, status_code=403)(scope, receive, send)
                return
            if self.token is not None and not _bearer_matches(headers.get("authorization"), self.token):
                response = JSONResponse(
                    {"error": "missing or wrong bearer token"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="notes-search"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


MIN_REMOTE_TOKEN_CHARS = 16  # the floor for a random token; MAKE_TOKEN prints 43 chars (256 bits)
# split at "print" only so the raw-output guard's line scan does not take the text for a call
MAKE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


def token_problem(token: str, remote: bool) -> str | None:
    """Why `token` is no guard, or None: one other machines can guess is none, and one with
    spaces or non-ASCII never matches the Bearer header a client sends."""
    if not all("!" <= char <= "~" for char in token):
        return f"--token must be printable ASCII without spaces; make one with: {MAKE_TOKEN}"
    if remote and len(token) < MIN_REMOTE_TOKEN_CHARS:
        return (
            f"--token is {len(token)} characters; a server reachable from other machines needs at "
            f"least {MIN_REMOTE_TOKEN_CHARS} random ones; make one with: {MAKE_TOKEN}"
        )
    return None


def _bearer_matches(header: str | None, token: str) -> bool:
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def serve_http(server: "MCPServer", host: str, port: int, token: str | None) -> None:
    import uvicorn

    from search.terminal import echo

    app = HttpGuard(server.streamable_http_app(host=host), token)
    echo(f"notes-search MCP (streamable HTTP) on http://{_url_host(host)}:{port}/mcp", err=True)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def run(service: "NotesService", *, http: tuple[str, int, str | None] | None = None) -> None:
    """Serve until stopped: stdio, or `http` = (host, port, token) as streamable HTTP."""
    service.warm_up()
    server = build_server(service)
    if http is not None:
        serve_http(server, *http)
    else:
        server.run("stdio")
