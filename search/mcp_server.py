"""The MCP server (SPEC §8, seed B §8): the library's read paths as tools, over stdio or HTTP.

One process serves many calls, so the config is loaded once at startup and the embedding model
once, lazily, on the first call that needs it (`App.embedder`). Every path argument is confined
to the configured sources before anything is read; domain errors become MCP tool errors
(`isError` with the one-line message) and the server keeps serving. The MCP SDK, uvicorn, git
and the grep machinery are imported only when the server starts: `search.cli` imports this
module for its click command, and plain queries must stay light. (No `from __future__ import
annotations` here: the SDK reads the tool signatures, whose types are imported inside
`build_server`; names known only to type checkers are quoted instead.)
"""

import hmac
import ipaddress
import logging
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import click

from indexer.collections import nfc
from indexer.config import GitSource, WorkspaceSource, identity_mismatch
from indexer.errors import NotesSearchError, PathOutsideSources, SourceError
from indexer.lock import holder as lock_holder
from indexer.store import SearchScope, Store
from search.engine import search
from search.route import NO_COLLECTIONS, ROUTE_K, Router, collections_view, load_entries

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp, Receive, Scope, Send

    from indexer.embedders import Embedder
    from search.cli import App
    from search.grep import GrepHit
    from search.resident import ResidentVectors

log = logging.getLogger("notes_search.mcp")

DEFAULT_PORT = 8765
TOKEN_ENV = "NOTES_SEARCH_MCP_TOKEN"
GET_MAX_LINES = 400
GREP_MAX_HITS = 200
REINDEX_LOCK_WAIT = 5.0  # seconds a reindex waits for a running sync before saying so
SERVER_INSTRUCTIONS = """\
Search the user's markdown notes. Cheapest first: `grep` for exact strings (hostnames, numbers,
error codes); `collections`/`route` to learn where a topic lives; `search` (hybrid BM25 + vectors)
for questions in any wording. Results carry `ref` = source:path:line: read more with `get`.
Without `path`, search covers all sources; pass a collection name, source id, folder or file to
narrow it. `degraded: true` means the vector half did not run and `notice` says why."""


@dataclass
class Target:
    """Where a path argument points: a scope for the index, and what to read or re-scan on disk."""

    scope: SearchScope
    label: str  # said back to the caller, e.g. "all sources", "collection devops", "notes:devops"
    places: list[tuple[str, str]] = field(default_factory=list)  # (source id, folder or file; '' = root)


def _language_totals(per_source: Iterable[dict[str, int]]) -> dict[str, int]:
    """Chunks per language over several sources, largest first."""
    totals: dict[str, int] = {}
    for languages in per_source:
        for language, count in languages.items():
            totals[language] = totals.get(language, 0) + count
    return dict(sorted(totals.items(), key=lambda item: (-item[1], item[0])))


class NotesTools:
    """What the tools do, free of any transport: both transports and the tests share it."""

    def __init__(self, app: "App", *, check_remote: bool = False) -> None:
        self.app = app
        self.check_remote = check_remote  # the MCP tools answer fast; the CLI status asks the remote
        self.config = app.config  # loaded now: a broken config stops the server at startup
        self._embedder_lock = threading.Lock()
        self.router = Router(self.embedder)
        self._resident: "ResidentVectors | None" = None  # created on the first search (imports numpy)

    def embedder(self) -> "Embedder":
        """The process's one embedder; tools run on worker threads, so creation is serialised."""
        with self._embedder_lock:
            return self.app.embedder()

    def resident_vectors(self) -> "ResidentVectors":
        """The vectors kept in memory across searches: this process lives long enough to reuse them."""
        from search.resident import ResidentVectors

        with self._embedder_lock:
            if self._resident is None:
                self._resident = ResidentVectors(self.config.db)
            return self._resident

    def warm_up(self) -> None:
        """Start loading the vectors into memory now, so that the first searches find them there."""
        if self.config.db.exists():
            self.resident_vectors().reload_in_background()

    @contextmanager
    def store(self) -> Iterator[Store]:
        """A read-only connection per call (cheap; apsw connections stay on their thread)."""
        store = self.app.open_store(readonly=True)
        try:
            yield store
        finally:
            store.close()

    @contextmanager
    def maybe_store(self) -> Iterator[Store | None]:
        """For tools that work from the files alone (get, grep, reindex) before any sync ran."""
        if not self.config.db.exists():
            yield None
            return
        with self.store() as store:
            yield store

    # ---- path arguments -----------------------------------------------------------------------

    def resolve(self, store: Store | None, path: str | None) -> Target:
        """Source id -> that source; collection name -> its folder(s); else a confined path
        (`source:path`, or a bare path in every source that has it). None -> everything."""
        text = (path or "").strip()
        if not text:
            return Target(SearchScope(), "all sources", [(sid, "") for sid in self.config.sources])
        if text in self.config.sources:
            return Target(SearchScope(source_ids=(text,)), f"source {text}", [(text, "")])
        entries = [e for e in load_entries(store) if e.name == text] if store is not None else []
        if entries:
            places = [(e.source_id, e.folder) for e in entries]
            return Target(SearchScope(collection=text), f"collection {text}", places)
        from search.refs import confine, has_path, split_source

        source_id, rest = split_source(text, self.config.sources)
        candidates = [source_id] if source_id else list(self.config.sources)
        found: list[str] = []
        refused: PathOutsideSources | None = None
        rel = ""
        for candidate in candidates:
            try:
                rel = confine(self.config, candidate, rest)
            except PathOutsideSources as exc:
                refused = refused or exc
                continue
            if not rel or has_path(self.config, store, candidate, rel):
                found.append(candidate)
        if not found:
            if refused is not None:
                raise refused
            where = f"source {source_id}" if source_id else "any source (" + ", ".join(self.config.sources) + ")"
            raise SourceError(f"{text!r}: no such file, folder, collection or source in {where}")
        key = nfc(rel)  # index paths are NFC
        label = f"{found[0]}:{key}" if len(found) == 1 else key
        return Target(SearchScope(source_ids=tuple(found), path=key or None), label, [(sid, rel) for sid in found])

    def catch_up(self, target: Target, embed: bool = True) -> list[str]:
        """Index what changed on disk inside the target first, so a note written just before the
        search is found by it; bounded, and it never rebuilds. `embed=False` (a lexical search)
        indexes the text only and leaves the vectors to the next sync."""
        from indexer.sync import catch_up

        notices = []
        for source_id, place in target.places:
            if isinstance(self.config.sources[source_id], WorkspaceSource):
                notice = catch_up(self.config, (source_id,), place or None, self.embedder if embed else None)
                if notice and notice not in notices:
                    notices.append(notice)
        return notices

    # ---- tools --------------------------------------------------------------------------------

    def search(self, query: str, path: str | None, k: int, mode: str) -> dict[str, Any]:
        with self.store() as store:
            target = self.resolve(store, path)
            lag = self.catch_up(target, embed=mode != "lex") if not target.scope.is_all else []
            response = search(store, self.config, query, k=k, mode=mode, scope=target.scope,
                              embedder_factory=self.embedder, resident=self.resident_vectors())
        data = response.to_json()
        notices = [n for n in [response.notice, *lag] if n]
        data["notice"] = "; ".join(notices) or None
        data["scope"] = target.label
        for hit in data["results"]:  # type: ignore[attr-defined]
            hit["ref"] = f"{hit['source']}:{hit['path']}:{hit['line']}"
        if not data["results"] and not data["notice"]:
            data["notice"] = f"nothing found in {target.label}; try other words, mode=lex for exact terms, or grep"
        return data

    def status(self, path: str | None) -> dict[str, Any]:
        with self.store() as store:
            target = self.resolve(store, path)
            meta = store.meta()
            totals = {s.source_id: s for s in store.source_stats()}
            counts = store.scope_stats(target.scope) if path else {}
            languages = store.language_counts(target.scope if path else None)
            sources = []
            for source_id, place in target.places:
                source = self.config.sources[source_id]
                stats = totals.get(source_id)
                entry: dict[str, Any] = {
                    "id": source_id,
                    "kind": source.kind,
                    "path": place or None,
                    "indexed_rev": stats.indexed_rev if stats else None,
                    "last_sync_at": stats.last_sync_at if stats else None,
                    "error": stats.last_error if stats else None,
                }
                if path:
                    entry.update(counts.get(source_id, {"files": 0, "chunks": 0, "pending": 0}))
                else:
                    entry.update(files=stats.files if stats else 0, chunks=stats.chunks if stats else 0,
                                 pending=stats.pending if stats else 0)
                # files written but no whole sync finished: a first sync was killed (or still runs)
                entry["incomplete"] = bool(stats and stats.files and stats.last_sync_at is None)
                entry["languages"] = languages.get(source_id, {})
                try:
                    entry["lag"] = self._lag(store, source_id, place)
                except NotesSearchError as exc:  # one unreadable source must not hide the others
                    entry["lag"] = {"lags": None, "error": str(exc)}
                sources.append(entry)
        mismatch = identity_mismatch(self.config.embedding, meta)
        running = lock_holder(self.config.lock_path)
        return {
            "scope": target.label,
            "db": str(self.config.db),
            # a sync (or reindex, watcher batch) holds the lock now: counts are still moving
            "sync_running": None if running is None else {"pid": running or None},
            "embedding": {
                "provider": self.config.embedding.provider,
                "model": self.config.embedding.model,
                "dims": self.config.embedding.dims,
                "reindex_needed": mismatch or None,
            },
            "languages": _language_totals(languages.get(source_id, {}) for source_id in {e["id"]: None for e in sources}),
            "sources": sources,
        }

    def _lag(self, store: Store, source_id: str, place: str) -> dict[str, Any]:
        """How the index differs from the disk (workspace: a stat scan, hashing only on mismatch)
        or from git (the indexed rev vs the mirror head, and the remote's when `check_remote`)."""
        from indexer.freshness import git_freshness, workspace_freshness

        source = self.config.sources[source_id]
        if isinstance(source, GitSource):
            return git_freshness(source, store, check_remote=self.check_remote)
        return workspace_freshness(source, store, place, self.config.max_file_bytes)

    def reindex(self, path: str, full: bool) -> dict[str, Any]:
        from indexer.sync import run_sync

        with self.maybe_store() as store:
            target = self.resolve(store, path)
        if target.scope.is_all:
            raise NotesSearchError(
                "reindex needs a path, a collection or a source id (a full sync is `notes-search sync`)"
            )
        report_parts = []
        for source_id, place in target.places:
            report = run_sync(self.config, source_ids=[source_id], path=place or None, full=full,
                              embedder_factory=self.embedder, lock_timeout=REINDEX_LOCK_WAIT)
            if report.locked:
                raise NotesSearchError(
                    f"another sync is running (waited {REINDEX_LOCK_WAIT:g} s for its lock); try again shortly"
                )
            report_parts.append(report)
        sources = [
            {"id": s.source_id, "kind": s.kind, "path": place or None, "added": s.added, "updated": s.updated,
             "deleted": s.deleted, "skipped": s.skipped, "rev": s.rev, "error": s.error}
            for report, (_, place) in zip(report_parts, target.places)
            for s in report.sources
        ]
        notices = [r.embed_notice for r in report_parts if r.embed_notice]
        if any(isinstance(self.config.sources[sid], GitSource) for sid, _ in target.places):
            notices.append("git sources are re-synced whole (fetch + tree diff); a path only narrows workspace scans")
        return {
            "scope": target.label,
            "full": full,
            "sources": sources,
            "embedded": sum(r.embedded for r in report_parts),
            "pending": report_parts[-1].pending if report_parts else 0,
            "seconds": round(sum(r.seconds for r in report_parts), 3),
            "notice": "; ".join(notices) or None,
        }

    def get(self, path: str, from_line: int | None, max_lines: int) -> dict[str, Any]:
        from search.refs import confine, indexed_rev, missing_file, parse_ref, read_text, sources_having, text_lines

        with self.maybe_store() as store:
            ref = parse_ref(path.strip(), self.config.sources)
            if ref.source_id is not None:
                source_id = ref.source_id
            else:
                having = sources_having(self.config, store, ref.path)
                if not having:
                    raise missing_file(self.config, store, ref.path)
                if len(having) > 1:
                    choices = ", ".join(f"{sid}:{ref.path}" for sid in having)
                    raise NotesSearchError(f"{ref.path!r} exists in several sources; name one: {choices}")
                source_id = having[0]
            rel = confine(self.config, source_id, ref.path)
            text = read_text(self.config, store, source_id, rel)
            source = self.config.sources[source_id]
            rev = indexed_rev(store, source) if isinstance(source, GitSource) else None
        lines = [line.removesuffix("\r") for line in text_lines(text)]
        start = from_line or ref.line or 1
        if ref.count is not None and from_line is None:
            max_lines = min(max_lines, ref.count)
        if lines and start > len(lines):
            raise NotesSearchError(f"{source_id}:{rel}: from_line {start} is past the end ({len(lines)} lines)")
        end = min(len(lines), start + max_lines - 1)
        truncated = end < len(lines)
        return {
            "source": source_id,
            "path": rel,
            "ref": f"{source_id}:{rel}:{start}",
            "from_line": start,
            "to_line": end,
            "total_lines": len(lines),
            "truncated": truncated,
            "next_from_line": end + 1 if truncated else None,
            "notice": f"showing lines {start}-{end} of {len(lines)}; call get with from_line={end + 1} for more"
            if truncated else None,
            "rev": rev,
            "text": "\n".join(lines[start - 1 : end]),
        }

    def grep(self, pattern: str, path: str | None, ignore_case: bool, fixed: bool) -> dict[str, Any]:
        from search.grep import GrepResult, grep, summary

        if not pattern:
            raise NotesSearchError("empty pattern")
        found = GrepResult()
        with self.maybe_store() as store:
            target = self.resolve(store, path)
            # everything: one call over every source (those that cannot be searched are listed)
            places: list[tuple[tuple[str, ...], str | None]] = [((), None)]
            if not target.scope.is_all:
                places = [((sid,), place or None) for sid, place in target.places]
            for source_ids, place in places:
                # one line more than shown: "truncated" only when there really is more
                found.merge(grep(self.config, store, pattern, source_ids=source_ids, path=place,
                                 ignore_case=ignore_case, fixed=fixed, max_count=GREP_MAX_HITS + 1 - len(found)))
                if len(found) > GREP_MAX_HITS:
                    break
        found.check_searched()
        truncated = len(found) > GREP_MAX_HITS
        hits: "list[GrepHit]" = found[:GREP_MAX_HITS]
        results = [{**hit.to_json(), "ref": f"{hit.source}:{hit.path}:{hit.line}"} for hit in hits]
        notices = [f"stopped at {GREP_MAX_HITS} lines; narrow the path or the pattern"] if truncated else []
        if found.unsearched:
            notices.append(f"not searched ({len(found.unsearched)}, see unsearched): {summary(found.unsearched)}")
        return {
            "pattern": pattern,
            "scope": target.label,
            "count": len(results),
            "truncated": truncated,
            "notice": "; ".join(notices) or None,
            "hits": results,
            "unsearched": [item.to_json() for item in found.unsearched],
        }

    def collections(self, prefix: str | None) -> dict[str, Any]:
        with self.store() as store:
            view = collections_view(load_entries(store), prefix)
        view["notice"] = None if view["count"] else NO_COLLECTIONS
        return view

    def route(self, question: str, k: int) -> dict[str, Any]:
        with self.store() as store:
            entries = load_entries(store)
        return self.router.route(entries, question, k).to_json()


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


def build_server(tools: NotesTools) -> "MCPServer":
    """Register the tools. Sync functions: the SDK runs each call on a worker thread."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations
    from pydantic import Field

    server = MCPServer("notes-search", instructions=SERVER_INSTRUCTIONS, log_level="WARNING")
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
    ) -> dict[str, Any]:
        """Hybrid search (BM25 + vectors) over the notes. Each hit has `ref` (source:path:line),
        `breadcrumb`, `score`, up to ~1,200 characters of text and `rev` (git commit or null).
        Scoped to a workspace folder, edits made just before the call are indexed first.
        `scope` says what was searched; `degraded`/`notice` say when results are keyword-only."""
        with _tool_errors():
            return tools.search(query, path, k, mode)

    @server.tool(name="status", annotations=read_only)
    def status_tool(path: Annotated[str | None, where] = None) -> dict[str, Any]:
        """What is indexed (files, chunks, chunks waiting for vectors), when it was last synced,
        and whether the index lags the disk (changed/deleted files) or the git mirror. Also says
        when a sync is running, when a first sync never finished (`incomplete`), and what cannot
        be read now (`lag.unreadable`, whose indexed copies are kept)."""
        with _tool_errors():
            return tools.status(path)

    @server.tool(name="reindex", annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                              idempotent_hint=True, open_world_hint=False))
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
            str, Field(description="A file: `source:path`, `path`, or a `ref` from search (`source:path:line`).")
        ],
        from_line: Annotated[
            int | None, Field(ge=1, description="First line (1-based); default: the ref's line or 1.")
        ] = None,
        max_lines: Annotated[int, Field(ge=1, le=2000, description="At most this many lines.")] = GET_MAX_LINES,
    ) -> dict[str, Any]:
        """Read a file or a line range of any source, including files inside bare git mirrors
        (at the indexed rev). `truncated`/`next_from_line` say when there is more."""
        with _tool_errors():
            return tools.get(path, from_line, max_lines)

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


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
                response = JSONResponse({"error": "missing or wrong bearer token"}, status_code=401,
                                        headers={"WWW-Authenticate": 'Bearer realm="notes-search"'})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


MIN_REMOTE_TOKEN_CHARS = 16  # the floor for a random token; MAKE_TOKEN prints 43 chars (256 bits)
# split at "print" only so the raw-output guard's line scan does not take the text for a call
MAKE_TOKEN = ('python -c "import secrets; print'
              '(secrets.token_urlsafe(32))"')


def check_token(token: str, remote: bool) -> None:
    """A token other machines can guess is no guard; one with spaces or non-ASCII never matches
    the Bearer header a client sends."""
    if not all("!" <= char <= "~" for char in token):
        raise click.UsageError(f"--token must be printable ASCII without spaces; make one with: {MAKE_TOKEN}")
    if remote and len(token) < MIN_REMOTE_TOKEN_CHARS:
        raise click.UsageError(
            f"--token is {len(token)} characters; a server reachable from other machines needs at "
            f"least {MIN_REMOTE_TOKEN_CHARS} random ones; make one with: {MAKE_TOKEN}"
        )


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


@click.command("mcp")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP (path /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="HTTP port.")
@click.option("--token", envvar=TOKEN_ENV, show_envvar=True, metavar="TOKEN",
              help="HTTP: require `Authorization: Bearer TOKEN`; mandatory for a non-loopback --host.")
@click.pass_obj
def mcp_command(app: "App", use_http: bool, host: str, port: int, token: str | None) -> None:
    """MCP server for agents: search, status, reindex, get, grep, collections, route (stdio by default)."""
    if use_http and not is_loopback(host) and not token:
        raise click.UsageError(
            f"--host {host} is reachable from other machines: set --token (or ${TOKEN_ENV}) so every "
            "request must carry `Authorization: Bearer <token>`"
        )
    if use_http and token:
        check_token(token, remote=not is_loopback(host))
    tools = NotesTools(app)
    tools.warm_up()
    server = build_server(tools)
    if use_http:
        serve_http(server, host, port, token or None)
    else:
        server.run("stdio")
