"""Degraded mode: what a search costs while the embedder is down, against a lexical search.

    .venv/bin/python -m bench.bench_degraded [--quick] [--no-machine]

A private copy of bench_foundation's cached 1,000-file workspace (`scratch-degraded-PID`,
deleted afterwards) is searched with a config whose embedder is an OpenAI-compatible endpoint on
a closed 127.0.0.1 port (connection refused; the configured 3 retries that a sync would use).
Five new notes in `area-07/` are written first, so scoped searches catch up real changes and the
index holds pending chunks, as it does while the embedder is down.

Rows (the same query list for each, interleaved query by query so load hits every row alike):
- CLI: `notes-search -c CFG query Q` as whole processes: `--mode lex`, hybrid (degraded), and
  both with `--path area-07` (a workspace folder: the query first runs its catch-up). Hybrid
  rows are steady state (the outage is remembered next to the index); the *first* degraded
  process after the outage window (state file removed) is timed apart.
- In process (what the MCP server runs per call): `NotesTools.search` for the same four.

Target: degraded hybrid and degraded scoped within 20 % of the matching lexical row (median).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fakes, when run as a script

from bench.corpus_text import queries
from bench.machine import CLI, cache_root, child_env, run_timed
from bench.report import Stats, arg_parser, eprint, md_table, ms, report, verdict
from bench.workspaces import Workspace, synced_workspace

SCOPE = "area-07"
TARGET_RATIO = 1.2
NEW_NOTES = 5


def scratch(base: Workspace) -> Workspace:
    """A writable copy (mtimes kept, so its index is current) with a down embedder in its config."""
    import os

    from tests.embed_servers import closed_port_url

    for stale in cache_root().glob("scratch-degraded-*"):  # left by a killed run
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    dest = cache_root() / f"scratch-degraded-{os.getpid()}"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(base.root, dest, symlinks=True, ignore=shutil.ignore_patterns(".notes-sync.lock", "*.tmp"))
    ws = Workspace(dest, base.files, base.chunks)
    # the index's embedding identity (model, dims, prefixes) with a server nobody listens on
    ws.config_path.write_text(
        f"""\
root: "{dest}"
db: "{ws.db}"
log: "{dest / "log" / "sync.log"}"
embedding:
  provider: openai
  model: multilingual-e5-small
  endpoint: {closed_port_url()}/v1
  dims: 384
  query_prefix: "query: "
  passage_prefix: "passage: "
sources:
  workspace:
    notes:
      root: notes
      paths: ["**"]
      include: ["*.md"]
      exclude: []
""",
        encoding="utf-8",
    )
    for i in range(NEW_NOTES):
        (ws.notes / SCOPE / f"degraded-{i}.md").write_text(
            f"# Výpadek {i}\n\nEmbedder neběží; poznámka {i} se najde podle slov restic a záloha.\n", encoding="utf-8"
        )
    return ws


def outage_file(ws: Workspace) -> Path:
    from indexer.embed_health import STATE_FILE

    return ws.db.parent / STATE_FILE


ROWS = (
    ("lex", ["--mode", "lex"]),
    ("hybrid, degraded", []),
    ("scoped lex", ["--mode", "lex", "--path", SCOPE]),
    ("scoped hybrid, degraded", ["--path", SCOPE]),
)
PAIRS = (("hybrid, degraded", "lex"), ("scoped hybrid, degraded", "scoped lex"))


def cli_rows(ws: Workspace, qs: list[str]) -> tuple[dict[str, list[float]], dict[str, list[float]], list[float]]:
    """Whole-process wall and CPU seconds per row, and first-after-the-window degraded processes."""
    env = child_env()
    base = [CLI, "-c", str(ws.config_path), "query"]
    wall: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    cpu: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    run_timed([*base, "warm-up", "--path", SCOPE], env=env)  # the first catch-up indexes the new notes
    first: list[float] = []
    for q in qs:
        for name, extra in ROWS:
            w, c = run_timed([*base, q, "-k", "8", *extra], env=env)
            wall[name].append(w)
            cpu[name].append(c)
    for q in qs[: max(3, len(qs) // 4)]:
        outage_file(ws).unlink(missing_ok=True)  # as if the window were over
        first.append(run_timed([*base, q, "-k", "8"], env=env)[0])
    return wall, cpu, first


def in_process_rows(ws: Workspace, qs: list[str], reps: int) -> dict[str, list[float]]:
    """`NotesTools.search` (one MCP tool call without the transport), per-query medians."""
    from search.mcp_server import NotesTools
    from search.service import NotesService

    tools = NotesTools(NotesService.from_config_file(str(ws.config_path)))
    calls = {
        "lex": lambda q: tools.search(q, None, 8, "lex"),
        "hybrid, degraded": lambda q: tools.search(q, None, 8, "hybrid"),
        "scoped lex": lambda q: tools.search(q, f"notes:{SCOPE}", 8, "lex"),
        "scoped hybrid, degraded": lambda q: tools.search(q, f"notes:{SCOPE}", 8, "hybrid"),
    }
    first = calls["hybrid, degraded"](qs[0])
    if not first["degraded"]:
        raise RuntimeError("the embedder answered: the benchmark needs it down")
    for q in qs[:3]:
        for call in calls.values():
            call(q)
    out: dict[str, list[float]] = {name: [] for name in calls}
    for q in qs:
        for name, call in calls.items():
            samples = []
            for _ in range(reps):
                started = time.perf_counter()
                call(q)
                samples.append(time.perf_counter() - started)
            out[name].append(statistics.median(samples))
    return out


def table(wall: dict[str, list[float]], cpu: dict[str, list[float]] | None) -> str:
    rows = []
    for name, _ in ROWS:
        s = Stats.of(wall[name])
        row = [name, s.n, ms(s.median), ms(s.p90), ms(s.min), ms(s.max)]
        if cpu is not None:
            row.append(ms(statistics.median(cpu[name])))
        rows.append(row)
    headers = ["row", "n", "median ms", "p90", "min", "max"] + (["CPU ms (median)"] if cpu is not None else [])
    return md_table(headers, rows)


def ratios(where: str, times: dict[str, list[float]]) -> list[list[object]]:
    out = []
    for degraded, lexical in PAIRS:
        ratio = statistics.median(times[degraded]) / statistics.median(times[lexical])
        out.append(
            [where, f"{degraded} / {lexical}", f"{ratio:.2f}", f"≤ {TARGET_RATIO:.2f}", verdict(ratio <= TARGET_RATIO)]
        )
    return out


def measure(quick: bool) -> str:
    base = synced_workspace("ws-1000", files=1000, log=eprint)
    ws = scratch(base)
    try:
        qs = queries(10 if quick else 20)
        eprint(f"[degraded] CLI: {len(qs)} queries x {len(ROWS)} rows")
        wall, cpu, first = cli_rows(ws, qs)
        eprint("[degraded] in process")
        inproc = in_process_rows(ws, queries(20 if quick else 50), 3 if quick else 5)
    finally:
        shutil.rmtree(ws.root, ignore_errors=True)
    cold = Stats.of(first)
    parts = [
        f"1,000-file workspace ({base.chunks} chunks) plus {NEW_NOTES} new notes in `{SCOPE}/`; embedder: "
        "OpenAI-compatible endpoint on a closed 127.0.0.1 port, 3 retries configured.",
        "",
        "**CLI, whole process** (wall; CPU user+sys next to it):",
        "",
        table(wall, cpu),
        "",
        f"First degraded hybrid process after the outage window (nothing remembered; it loads the HTTP "
        f"client, is refused once and records the outage): median {ms(cold.median)} ms "
        f"(n {cold.n}, max {ms(cold.max)}).",
        "",
        "**In process** (`NotesTools.search`, what an MCP call runs; per-query medians):",
        "",
        table(inproc, None),
        "",
        md_table(
            ["where", "ratio (medians)", "measured", "target", "verdict"],
            ratios("CLI wall", wall) + ratios("CLI CPU", cpu) + ratios("in process", inproc),
        ),
        "",
        "Wall time of a whole process swings with the machine's load (other processes share the 2 "
        "cores); its CPU time measures the work itself.",
    ]
    return "\n".join(parts)


def run(quick: bool, with_machine: bool) -> str:
    """The run_all convention."""
    return report("Degraded mode (embedder down)", "degraded", (("queries", measure),), quick, with_machine)


def main() -> int:
    args = arg_parser(__doc__, "10 CLI queries per row instead of 20, fewer in-process repetitions").parse_args()
    markdown = run(args.quick, not args.no_machine)
    print(markdown)
    return 1 if "**MISSED**" in markdown else 0


if __name__ == "__main__":
    sys.exit(main())
