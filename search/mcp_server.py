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
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from indexer.errors import NotesSearchError
from search.route import ROUTE_K
from search.service import GREP_MAX_HITS
from search.service.reading import MANY_MAX_BYTES, MANY_MAX_LINES

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp.server.models import InitializationOptions
    from mcp.types import CallToolResult, ListToolsResult, Tool, ToolAnnotations
    from pydantic import BaseModel, ValidationError
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
GREP_MOST_HITS = 1000  # lines one grep may ask for; the answer stays under MANY_MAX_BYTES of text
# what a hit leaves out for an agent: `text` holds the snippet's lines; with detail=snippet,
# `ref` stands for source, path and line
HIT_DROPS = {"text": ("snippet",), "snippet": ("source", "path", "line", "end_line", "text")}
REINDEX_LOCK_WAIT = 5.0  # seconds a reindex waits for a running sync before saying so
TOC_MAX_BYTES = 16 * 1024  # a source's overview, not the notes: enough for some 200 files
# refs in one `get` list (a glob names any number of files in one): 20,000 took 10 s and answered
# 2 MB of errors, or one error line of 650 KB
GET_MAX_REFS = 256
ERRORS_NAMED = 3  # a `get` that read nothing names this many failures, then counts the rest
# a call past this answers with an error (its thread may finish in the background): one slow
# call must never hold an agent for minutes
CALL_TIMEOUT = 30.0
# from SIGTERM/SIGINT to the end of the process, whatever still runs on a worker thread
SHUTDOWN_GRACE = 0.75
SERVER_INSTRUCTIONS = """\
Search the user's markdown notes. Cheapest first: `grep` for exact strings (hostnames, numbers,
error codes); `collections`/`route` to learn where a topic lives, `toc` for a source's files;
`search` (hybrid BM25 + vectors) for questions in any wording. Results carry `ref` =
source:path:line: read more with `get`.
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
    share it. The answers are the service's (the CLI's are the same); what is shaped here is
    the JSON an agent reads: `ref` first on every hit, what it can do without left out."""

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
        """`detail`: "text" (each hit's chunk around its match line) or "snippet" (the same hits
        with a few lines only, for an agent that reads on with `get`): `SearchOutcome.shortened`."""
        from search.service.scope import Filters
        from search.service.searching import check_detail

        check_detail(detail)
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
        data["notice"] = outcome.notice or outcome.nothing_found
        data["scope"] = outcome.target.label
        hits = []
        for hit, found in zip(data["results"], outcome.response.results, strict=True):  # type: ignore[call-overload]
            kept = {key: value for key, value in hit.items() if key not in HIT_DROPS[detail]}
            if kept.get("rev", "") is None:  # a workspace hit: only git hits have a revision
                del kept["rev"]
            kept[detail] = outcome.shortened(found, detail)
            hits.append({"ref": hit["ref"], **kept})  # the ref first: what `get` takes
        data["results"] = hits
        return data

    def status(self, path: str | None) -> dict[str, Any]:
        return self.service.status(path).to_json()

    def reindex(self, path: str, full: bool) -> dict[str, Any]:
        from search.service.indexing import source_report_json

        outcome = self.service.reindex(path, full=full, lock_wait=REINDEX_LOCK_WAIT)
        if outcome.locked:
            raise NotesSearchError(
                f"another sync is running (waited {REINDEX_LOCK_WAIT:g} s for its lock); try again shortly"
            )
        report = outcome.report
        return {
            "scope": outcome.target.label,
            "full": full,
            "sources": [source_report_json(s, place=place, shape="reindex") for place, s in outcome.sources],
            "embedded": report.embedded,
            "pending": report.pending,
            "seconds": report.seconds,
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
        window = self.service.get(path, from_line, max_lines or GET_MAX_LINES, max_bytes or MANY_MAX_BYTES)
        return _file_json(window.view, window.next_from_line, {"notice": window.notice})

    def get_many(self, refs: list[str], max_lines: int | None, max_bytes: int | None) -> dict[str, Any]:
        if not refs:
            raise NotesSearchError("path: an empty list names no file")
        if len(refs) > GET_MAX_REFS:
            raise NotesSearchError(f"path: {len(refs)} refs; at most {GET_MAX_REFS} in one call (or one glob)")
        many = self.service.read_many(refs, max_lines=max_lines, max_bytes=max_bytes)
        if many.nothing_read:
            more = len(many.failed) - ERRORS_NAMED
            named = "; ".join(item.error for item in many.failed[:ERRORS_NAMED])
            raise NotesSearchError(named + (f"; and {more} more" if more > 0 else ""))
        notices = [
            f"{cut.ref} cut at line {cut.end} of {cut.total}; get it with from_line={cut.rest.line} for more"
            for cut in many.cut_short
        ]
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
            "files": [_file_json(view, view.next_line) for view in many.views],
            "omitted": many.omitted,
            "errors": [item.to_json() for item in many.failed],
        }

    def grep(
        self, pattern: str, path: str | None, ignore_case: bool, fixed: bool, max_count: int = GREP_MAX_HITS
    ) -> dict[str, Any]:
        import json

        from search.grep import summary

        outcome = self.service.grep(pattern, path=path, ignore_case=ignore_case, fixed=fixed, max_count=max_count)
        results: list[dict[str, object]] = []
        size = 0
        for hit in outcome.hits:  # `e` over long lines was 200 lines of up to 1,000 characters each
            entry = hit.to_json()
            size += len(json.dumps(entry, ensure_ascii=False).encode("utf-8", errors="replace"))
            if results and size > MANY_MAX_BYTES:
                break
            results.append(entry)
        notices = []
        if len(results) < len(outcome.hits):
            notices.append(f"stopped at {len(results)} lines ({MANY_MAX_BYTES} bytes); narrow the path or the pattern")
        elif outcome.truncated:
            notices.append(f"stopped at {outcome.max_count} lines; narrow the path or the pattern, or raise max_count")
        if outcome.unsearched:
            notices.append(f"not searched ({len(outcome.unsearched)}, see unsearched): {summary(outcome.unsearched)}")
        return {
            "pattern": pattern,
            "scope": outcome.target.label,
            "count": len(results),
            "truncated": outcome.truncated or len(results) < len(outcome.hits),
            "notice": "; ".join(notices) or None,
            "hits": results,
            "unsearched": [item.to_json() for item in outcome.unsearched],
        }

    def collections(self, prefix: str | None) -> dict[str, Any]:
        listed = self.service.collections(prefix)
        return {**listed.to_json(), "notice": listed.notice}

    def route(self, question: str, k: int) -> dict[str, Any]:
        return self.service.route(question, k).to_json()

    def toc(self, source: str | None, max_bytes: int = TOC_MAX_BYTES) -> dict[str, Any]:
        """Each source's table of contents, whole lines up to `max_bytes` in all."""
        found = self.service.toc((source,) if source else (), max_bytes=max_bytes)
        tocs = [{"source": toc.source_id, "truncated": toc.truncated, "text": toc.text} for toc in found]
        cut = [toc.source_id for toc in found if toc.truncated]
        notice = None
        if cut:
            notice = (
                f"cut at {max_bytes} bytes ({', '.join(cut)}): ask for "
                + ("one source, " if source is None else "")
                + "a larger max_bytes, or search with path=FOLDER"
            )
        return {"count": len(tocs), "notice": notice, "tocs": tocs}


def _file_json(view: "FileView", next_from_line: int | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One file of `get`: a window of lines, and where the rest starts when there is more
    (`extra` goes before `rev` and `text`, where a one-file answer has its notice)."""
    from search.refs import Ref

    assert view.range is not None  # get always returns a window
    return {
        "source": view.source_id,
        "path": view.path,
        "ref": str(Ref(view.source_id, view.path, view.range.start)),
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

PATH_HELP = "A source id, collection, folder or file (`source:path`). Default: all."
WHEN_HELP = "Changed since: 2026-11-24, 2026-11-24T09:30, or 7d, 2w, 3m, 1y."


def _listed(value: Any) -> Any:
    """One tag given as a string is a list of one."""
    return [value] if isinstance(value, str) else value


def _tool_functions(tools: NotesTools) -> "list[tuple[Callable[..., dict[str, Any]], ToolAnnotations]]":
    """The tools, declared as typed functions: the name (without `_tool`), the arguments'
    schema (from the annotations) and the description (the docstring) are read from each.
    Every byte here is paid by an agent at every session start: descriptions stay short."""
    from mcp.types import ToolAnnotations
    from pydantic import BeforeValidator, Field

    registered: list[tuple[Callable[..., dict[str, Any]], ToolAnnotations]] = []

    def tool(
        annotations: ToolAnnotations,
    ) -> "Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]":
        def register(fn: "Callable[..., dict[str, Any]]") -> "Callable[..., dict[str, Any]]":
            registered.append((fn, annotations))
            return fn

        return register

    read_only = ToolAnnotations(read_only_hint=True)
    where = Field(description=PATH_HELP)

    @tool(read_only)
    def search_tool(
        query: Annotated[str, Field(description="A question or keywords, any language.")],
        path: Annotated[str | None, where] = None,
        k: Annotated[int, Field(ge=1, le=50, description="Hits.")] = 8,
        mode: Annotated[
            Literal["hybrid", "lex", "vec"], Field(description="lex: keywords only; vec: meaning only.")
        ] = "hybrid",
        tags: Annotated[
            list[str] | None, BeforeValidator(_listed), Field(description="Only notes with all these tags.")
        ] = None,
        since: Annotated[str | None, Field(description=WHEN_HELP)] = None,
        until: Annotated[str | None, Field(description="Changed before the end of this.")] = None,
        per_file: Annotated[int | None, Field(ge=1, description="At most this many hits per file.")] = None,
        min_similarity: Annotated[
            float | None, Field(ge=-1.0, le=1.0, description="Drop meaning-only hits below this cosine.")
        ] = None,
        detail: Annotated[
            Literal["text", "snippet"],
            Field(description="snippet: a short `snippet` instead of `text`."),
        ] = "text",
    ) -> dict[str, Any]:
        """Hybrid search (BM25 + vectors). A hit: `ref` = `source`:`path`:`line` (read on with `get`),
        `end_line`, `match_line`, `breadcrumb`, `score`, `matched` (keyword|meaning|both), `rev` (git),
        `file` (on disk), ~900 bytes of `text`. A folder scope indexes fresh edits first. `notice`:
        why keyword-only or empty."""
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

    @tool(read_only)
    def get_tool(
        path: Annotated[
            str | list[str],
            Field(description="A file or `ref`; several: a list or a glob (`notes:a/*.md`)."),
        ],
        from_line: Annotated[int | None, Field(ge=1, description="One file: first line.")] = None,
        max_lines: Annotated[
            int | None,
            Field(ge=1, le=MANY_MAX_LINES, description=f"Default {GET_MAX_LINES}; several: {MANY_MAX_LINES} in all."),
        ] = None,
        max_bytes: Annotated[
            int | None,
            Field(
                ge=1, le=MANY_MAX_BYTES, description=f"UTF-8 bytes, default {MANY_MAX_BYTES}; several files: in all."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Read a file or lines of it (git files at the indexed rev); `next_from_line` if there is more.
        Several: `files` up to the cap, `omitted`, `errors`."""
        return tools.get(path, from_line, max_lines, max_bytes)

    @tool(read_only)
    def grep_tool(
        pattern: Annotated[str, Field(description="A regular expression (a literal with fixed).")],
        path: Annotated[str | None, where] = None,
        ignore_case: bool = False,
        fixed: bool = False,
        max_count: Annotated[
            int, Field(ge=1, le=GREP_MOST_HITS, description=f"Lines at most (default {GREP_MAX_HITS}).")
        ] = GREP_MAX_HITS,
    ) -> dict[str, Any]:
        """Live exact search of the files (no index): hostnames, numbers, error codes. Each line
        cut at 1,000 characters, the hits 64 KiB in all; `unsearched`: what could not be searched."""
        return tools.grep(pattern, path, ignore_case, fixed, max_count)

    @tool(read_only)
    def toc_tool(
        source: Annotated[str | None, Field(description="One source id. Default: all.")] = None,
        max_bytes: Annotated[int, Field(ge=1, le=MANY_MAX_BYTES)] = TOC_MAX_BYTES,
    ) -> dict[str, Any]:
        """A source's table of contents: per folder, one line per file (title, tags, headings)."""
        return tools.toc(source, max_bytes)

    @tool(read_only)
    def collections_tool(
        prefix: Annotated[str | None, Field(description="Only names starting with this.")] = None,
    ) -> dict[str, Any]:
        """Collections (folders with _meta.yaml), described; a name is a `path`."""
        return tools.collections(prefix)

    @tool(read_only)
    def route_tool(
        question: Annotated[str, Field(description="The user's question.")],
        k: Annotated[int, Field(ge=1, le=20)] = ROUTE_K,
    ) -> dict[str, Any]:
        """Rank collections for a question; then search with path=<name>."""
        return tools.route(question, k)

    @tool(read_only)
    def status_tool(path: Annotated[str | None, where] = None) -> dict[str, Any]:
        """What is indexed and when; `lag` (behind the disk or mirror), `sync_running`, `incomplete`."""
        return tools.status(path)

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    def reindex_tool(
        path: Annotated[str, Field(description="A source id, collection, folder or file.")],
        full: Annotated[bool, Field(description="Re-read every file, not only changed ones.")] = False,
    ) -> dict[str, Any]:
        """Re-index now (a sync job normally does): added/updated/deleted, embedded, pending."""
        return tools.reindex(path, full)

    return registered


class ToolBox:
    """The tools as an MCP client meets them: strict arguments (an unknown one is an error that
    names the known ones), every call on a worker thread under a deadline (the event loop goes
    on serving other clients and signals), each answer one compact JSON text."""

    def __init__(self, tools: NotesTools, call_timeout: float = CALL_TIMEOUT) -> None:
        from mcp.types import ListToolsResult

        self.call_timeout = call_timeout
        self.db_url = tools.config.db_url
        self.specs = {spec.name: spec for spec in (_ToolSpec.of(fn, ann) for fn, ann in _tool_functions(tools))}
        self.listing: ListToolsResult = ListToolsResult(tools=[spec.tool for spec in self.specs.values()])

    def input_schema(self, name: str) -> dict[str, Any] | None:
        spec = self.specs.get(name)
        return None if spec is None else spec.schema

    async def call(self, name: str, arguments: dict[str, Any]) -> "CallToolResult":
        """Domain errors, bad arguments and a missed deadline come back as `isError` results with
        one line; the server goes on."""
        import functools

        import anyio

        spec = self.specs.get(name)
        if spec is None:
            return self.error(f"unknown tool {_quoted(name)} (the tools: {', '.join(self.specs)})")
        try:
            kwargs = spec.arguments(arguments)
            with anyio.move_on_after(self.call_timeout) as deadline:
                work = functools.partial(spec.fn, **kwargs)
                data = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except NotesSearchError as exc:
            return self.error(str(exc))
        except Exception as exc:  # a bug must not end the session: its one line, and the log
            log.debug("tool %s failed", name, exc_info=True)
            return self.error(f"{name} failed: {type(exc).__name__}: {exc}", log_it=True)
        if deadline.cancelled_caught:
            going_on = " (it goes on in the background)" if name == "reindex" else ""
            return self.error(
                f"{name} did not finish within {self.call_timeout:g} s{going_on}; narrow the path or the "
                "question, or start the server with a longer --call-timeout"
            )
        return tool_answer(data)

    def error(self, message: str, log_it: bool = False) -> "CallToolResult":
        """An `isError` result: one line, the index URL's password masked in any form."""
        from indexer.redaction import redact

        line = in_tool_words(redact(" ".join(message.split()), self.db_url))
        if log_it:
            log.error("%s", line)
        return tool_error(line)


# What the shared messages tell a CLI user to do, as an agent does it with these tools ("search
# it with --path" sent an agent looking for a flag it does not have)
TOOL_WORDS = (
    ("run `notes-search sync` first", 'call `reindex` with path "." first'),
    ("(run `notes-search sync`)", "(`reindex` computes them)"),
    ("run `notes-search sync`", "call `reindex`"),
    ("search it with --path", "search it with path="),
)


def in_tool_words(text: str) -> str:
    for cli_words, tool_words in TOOL_WORDS:
        text = text.replace(cli_words, tool_words)
    return text


def tool_answer(data: dict[str, Any]) -> "CallToolResult":
    """The answer once, as compact JSON text (no structured copy of the same data beside it),
    with the characters JSON leaves raw (C1, bidi controls) escaped: an agent's client may show
    the text to a person, and a note's U+202E must not reorder what they read."""
    import json

    from mcp.types import CallToolResult, TextContent

    from indexer.safe_text import safe_json

    if isinstance(data.get("notice"), str):
        data = {**data, "notice": in_tool_words(data["notice"])}
    text = safe_json(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return CallToolResult(content=[TextContent(type="text", text=text)])


def tool_error(line: str) -> "CallToolResult":
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=line)], is_error=True)


def _quoted(name: str, limit: int = 60) -> str:
    """A name a client sent, quoted and cut: it may hold anything, newlines included."""
    return repr(name if len(name) <= limit else name[:limit] + "…")


class _ToolSpec:
    """One tool: its function, the argument model read from its signature (no extra keys),
    and the `Tool` that `tools/list` shows."""

    def __init__(
        self, fn: Callable[..., dict[str, Any]], model: "type[BaseModel]", tool: "Tool", schema: dict[str, Any]
    ) -> None:
        self.name = tool.name
        self.fn = fn
        self.model = model
        self.tool = tool
        self.schema = schema

    @classmethod
    def of(cls, fn: Callable[..., dict[str, Any]], annotations: "ToolAnnotations") -> "_ToolSpec":
        import inspect

        from mcp.types import Tool
        from pydantic import ConfigDict, create_model

        name = fn.__name__.removesuffix("_tool")
        fields: dict[str, Any] = {
            param.name: (param.annotation, ... if param.default is param.empty else param.default)
            for param in inspect.signature(fn).parameters.values()
        }
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        schema = _compact_schema(model.model_json_schema())
        description = " ".join(inspect.cleandoc(fn.__doc__ or "").split())  # one line: no docstring indent
        tool = Tool(name=name, description=description, input_schema=schema, annotations=annotations)
        return cls(fn, model, tool, schema)

    def arguments(self, given: dict[str, Any]) -> dict[str, Any]:
        from pydantic import ValidationError

        try:
            checked = self.model.model_validate(given)
        except ValidationError as exc:
            raise NotesSearchError(f"{self.name}: {_problems(exc, list(self.model.model_fields))}") from None
        return {name: getattr(checked, name) for name in self.model.model_fields}


def _problems(error: "ValidationError", allowed: list[str]) -> str:
    """pydantic's report as one plain line: which arguments are unknown (and which exist), then
    each bad value's argument and why, without the links and input echoes."""
    unknown = [_quoted(str(e["loc"][0])) for e in error.errors() if e["type"] == "extra_forbidden"]
    problems = []
    if unknown:
        problems.append(f"unknown argument {', '.join(unknown)} (the arguments: {', '.join(allowed)})")
    seen = set()
    for e in error.errors():
        if e["type"] == "extra_forbidden":
            continue
        argument = str(e["loc"][0]) if e["loc"] else "arguments"
        if argument in seen:  # a union reports each of its members; the first says enough
            continue
        seen.add(argument)
        problems.append(f"{argument}: {'required' if e['type'] == 'missing' else e['msg']}")
    return "; ".join(problems)


def _compact_schema(schema: Any) -> Any:
    """The arguments' JSON schema without what only costs an agent bytes: titles, and `null` as
    an option (an optional argument is simply left out; the check still takes null)."""
    if isinstance(schema, list):
        return [_compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: _compact_schema(prop) for name, prop in value.items()}
        else:
            out[key] = _compact_schema(value)
    options = [option for option in out.pop("anyOf", []) if option != {"type": "null"}]
    if len(options) == 1:
        out.update(options[0])
    elif options:
        out["anyOf"] = options
    return out


def build_server(service: "NotesService", call_timeout: float = CALL_TIMEOUT) -> "Server[Any]":
    """The low-level SDK server with the tools only: no resources or prompts are advertised,
    since there are none."""
    from mcp.server.lowlevel import Server
    from mcp.types import CallToolRequestParams, PaginatedRequestParams

    from search.service.overview import package_version

    box = ToolBox(NotesTools(service), call_timeout)

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> "ListToolsResult":
        return box.listing

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> "CallToolResult":
        return await box.call(params.name, params.arguments or {})

    class NotesServer(Server[Any]):
        """Each session's instructions name the sources and collections as they are when it
        begins: an HTTP server runs for days, and one started before the first sync said "not
        synced yet" for its whole life."""

        def create_initialization_options(self, *args: Any, **kwargs: Any) -> "InitializationOptions":
            try:
                self.instructions = server_instructions(service.overview())
            except NotesSearchError as exc:  # the last good ones stand; the tools say what is wrong
                log.warning("instructions not refreshed: %s", exc)
            return super().create_initialization_options(*args, **kwargs)

    return NotesServer(
        "notes-search",
        version=package_version(),
        instructions=server_instructions(service.overview()),
        get_tool_input_schema=box.input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


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


def _exit_soon(code: int = 0) -> None:
    """End the process SHUTDOWN_GRACE seconds from now, whatever still runs: a tool call on a
    worker thread cannot be interrupted, and must not keep the process (and its port) alive."""
    import os
    import threading

    timer = threading.Timer(SHUTDOWN_GRACE, os._exit, (code,))
    timer.daemon = True
    timer.start()


_stopped_by: list[int] = []  # the signal that stopped serving, if one did


def _stop_requested(signum: int) -> None:
    """SIGTERM ends the server with exit 0 (a supervisor stopping it); Ctrl-C as it ends every
    command (`run` re-raises it once serving has stopped; 130 if a worker thread holds that up)."""
    import signal

    _stopped_by.append(signum)
    _exit_soon(128 + signal.SIGINT if signum == signal.SIGINT else 0)


def serve_stdio(server: "Server[Any]") -> None:
    """Serve one client over stdin/stdout until it closes them or a SIGTERM/SIGINT arrives."""
    import signal

    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with anyio.create_task_group() as group:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        _stop_requested(signum)
                        group.cancel_scope.cancel()

            group.start_soon(stop_on_signal)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            group.cancel_scope.cancel()

    anyio.run(main)


def serve_http(server: "Server[Any]", host: str, port: int, token: str | None) -> None:
    import uvicorn

    from search.terminal import echo

    class StopSoon(uvicorn.Server):
        """SIGTERM/SIGINT: stop taking requests and end the process within SHUTDOWN_GRACE (see
        `_stop_requested`; uvicorn would wait for every open event stream, then raise the signal
        again: `Aborted!` or death by SIGTERM; cancelling the streams instead logs a traceback each)."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            _stop_requested(sig)
            self.should_exit = True

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:  # said once listening, with the handlers above in place: a Ctrl-C
                # right after the line (before uvicorn took the signals) ended in a traceback
                echo(f"notes-search MCP (streamable HTTP) on http://{_url_host(host)}:{port}/mcp", err=True)

    app = HttpGuard(server.streamable_http_app(host=host), token)
    StopSoon(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def run(
    service: "NotesService",
    *,
    http: tuple[str, int, str | None] | None = None,
    call_timeout: float = CALL_TIMEOUT,
) -> None:
    """Serve until stopped: stdio, or `http` = (host, port, token) as streamable HTTP. Once
    serving ends, the process ends within SHUTDOWN_GRACE even if a call still runs."""
    import signal

    service.warm_up()
    server = build_server(service, call_timeout)
    if http is not None:
        serve_http(server, *http)
    else:
        serve_stdio(server)
    if signal.SIGINT in _stopped_by:
        from search.interrupt import interrupted

        interrupted()
    _exit_soon()
