"""The warm path against a one-shot process and the MCP round trip (issue 31, item 2).

    .venv/bin/python -m bench.bench_warm [--quick] [--no-machine] [--out FILE]

A private copy of the README's example notes (examples/notes) is indexed once with the real
local model (multilingual-e5-small) under the bench cache. Then three ways of asking the same
question run side by side, alternating query by query over examples/questions.yaml:

1. `notes-search query Q --json` as a process with NOTES_SEARCH_NO_DAEMON=1 (in process, cold);
2. the same command while `notes-search serve` runs for the config (the warm path);
3. `tools/call search` over streamable HTTP to `notes-search mcp --http`, one session, the
   official MCP client (the round trip an agent with the MCP server pays);

and, as the floor under any Python command, `python -c pass` from the same environment.

Medians of wall time per call, the client's CPU and (for the servers) the server's CPU per call.
Target: the warm path's median <= 150 ms and <= 3x the MCP round trip. The machine is shared: the
load average is printed with every table.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/bench_warm.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.bench_mcp import cpu_seconds
from bench.machine import CLI, PYTHON, REPO, cache_root, child_env, loadavg, run_timed
from bench.report import Stats, arg_parser, emit, eprint, md_table, ms, report, verdict

WARM_TARGET_S = 0.150
MCP_RATIO_TARGET = 3.0
K = 8


def example_index() -> Path:
    """The config of a private copy of examples/, synced with the local model (a no-op when current)."""
    root = cache_root() / "warm-example"
    notes = root / "notes"
    if not notes.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(REPO / "examples" / "notes", notes)
        shutil.copy(REPO / "examples" / "notes-search.yaml", root / "notes-search.yaml")
    config = root / "notes-search.yaml"
    eprint(f"[warm] syncing {root} (the first time embeds every chunk with the local model) ...")
    subprocess.run([CLI, "-c", str(config), "sync", "--quiet"], env=env(), check=True)
    return config


def questions(n: int) -> list[str]:
    import yaml

    items = yaml.safe_load((REPO / "examples" / "questions.yaml").read_text(encoding="utf-8"))
    texts = [str(item["question"]) for item in items]
    return [texts[i % len(texts)] for i in range(n)]


def env(**extra: str) -> dict[str, str]:
    """The children's environment, with a runtime folder of this run for the warm server's socket."""
    children = child_env(XDG_RUNTIME_DIR=str(runtime_dir()), **extra)
    # an installation keeps its .pyc files; without them every process compiles our modules again
    children.pop("PYTHONDONTWRITEBYTECODE", None)
    return children


def runtime_dir() -> Path:
    folder = cache_root() / f"run-{os.getpid()}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(args: list[str], ready: str) -> subprocess.Popen[str]:
    """A server process, once it has printed the line that says it serves."""
    proc = subprocess.Popen(args, env=env(), cwd=REPO, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"{' '.join(args)} exited {proc.wait()} before serving")
        if ready in line:
            return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def side_by_side(config: Path, qs: list[str], mcp_url: str, warm_pid: int, mcp_pid: int) -> dict[str, Any]:
    import anyio
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    wall: dict[str, list[float]] = {"floor": [], "process": [], "warm": [], "mcp": []}
    cpu: dict[str, list[float]] = {"floor": [], "process": [], "warm": [], "warm server": [], "mcp server": []}
    same = 0

    def one_shot(question: str, **extra: str) -> tuple[float, float]:
        return run_timed([CLI, "-c", str(config), "query", question, "-k", str(K), "--json"], env=env(**extra))

    client = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120))
    async with (
        client,
        streamable_http_client(mcp_url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for question in qs[:3]:  # the first calls load what the server had not yet
            await session.call_tool("search", {"query": question, "k": K})
            await anyio.to_thread.run_sync(lambda q=question: one_shot(q))
        for question in qs:
            seconds, used = await anyio.to_thread.run_sync(lambda: run_timed([PYTHON, "-c", "pass"], env=env()))
            wall["floor"].append(seconds)
            cpu["floor"].append(used)

            seconds, used = await anyio.to_thread.run_sync(lambda q=question: one_shot(q, NOTES_SEARCH_NO_DAEMON="1"))
            wall["process"].append(seconds)
            cpu["process"].append(used)

            before = cpu_seconds(warm_pid)
            seconds, used = await anyio.to_thread.run_sync(lambda q=question: one_shot(q))
            wall["warm"].append(seconds)
            cpu["warm"].append(used)
            cpu["warm server"].append(cpu_seconds(warm_pid) - before)

            before = cpu_seconds(mcp_pid)
            started = time.perf_counter()
            result = await session.call_tool("search", {"query": question, "k": K})
            wall["mcp"].append(time.perf_counter() - started)
            cpu["mcp server"].append(cpu_seconds(mcp_pid) - before)
            same += not result.is_error
    return {"wall": wall, "cpu": cpu, "answered": same}


def bench_side_by_side(quick: bool) -> str:
    import anyio

    config = example_index()
    qs = questions(10 if quick else 30)
    load_before = loadavg()
    cli = [CLI, "-c", str(config)]
    warm = start([*cli, "serve"], "notes-search serve:")
    port = free_port()
    mcp = start([*cli, "mcp", "--http", "--port", str(port)], "notes-search MCP")
    try:
        eprint(f"[warm] {len(qs)} queries, each in process, warm and over MCP HTTP ...")
        out = anyio.run(side_by_side, config, qs, f"http://127.0.0.1:{port}/mcp", warm.pid, mcp.pid)
    finally:
        stop(warm)
        stop(mcp)
        shutil.rmtree(runtime_dir(), ignore_errors=True)
    wall, cpu = out["wall"], out["cpu"]
    warm_median, mcp_median = statistics.median(wall["warm"]), statistics.median(wall["mcp"])
    ratio = warm_median / mcp_median
    rows = []
    for name, label, client_cpu, server_cpu in (
        ("floor", "floor: `python -c pass` (the interpreter and its site packages, nothing of ours)", "floor", None),
        ("process", "one-shot CLI, in process (NOTES_SEARCH_NO_DAEMON=1)", "process", None),
        ("warm", "one-shot CLI, warm path (`serve` running)", "warm", "warm server"),
        ("mcp", "MCP `search` over HTTP (one session)", None, "mcp server"),
    ):
        s = Stats.of(wall[name])
        rows.append(
            [
                label,
                s.n,
                ms(s.median),
                ms(s.p90),
                ms(statistics.fmean(cpu[client_cpu])) if client_cpu else "—",
                ms(statistics.fmean(cpu[server_cpu])) if server_cpu else "—",
            ]
        )
    table = md_table(
        ["path (hybrid, k=8, examples/ index, local model)", "n", "p50 ms", "p90 ms", "client CPU ms", "server CPU ms"],
        rows,
    )
    targets = md_table(
        ["target", "measured", "verdict"],
        [
            [
                f"warm path p50 ≤ {WARM_TARGET_S * 1000:.0f} ms",
                f"{warm_median * 1000:.1f} ms",
                verdict(warm_median <= WARM_TARGET_S),
            ],
            [
                f"warm path ≤ {MCP_RATIO_TARGET:g}× the MCP round trip",
                f"{ratio:.2f}×",
                verdict(ratio <= MCP_RATIO_TARGET),
            ],
            [
                "the warm path above the floor (what the client and the server add to a Python process)",
                f"{(warm_median - statistics.median(wall['floor'])) * 1000:.1f} ms",
                "(reported)",
            ],
            [
                "speed-up of the warm path over the process",
                f"{statistics.median(wall['process']) / warm_median:.1f}×",
                "(reported)",
            ],
        ],
    )
    return (
        f"### Warm path, one-shot process and MCP round trip side by side\n\n"
        f"_load average: {load_before} at the start, {loadavg()} at the end; MCP answers without error: "
        f"{out['answered']}/{len(qs)}_\n\n{table}\n\n{targets}\n"
    )


def run(quick: bool, with_machine: bool = True) -> str:
    return report("Warm path (issue 31)", "warm", [("side by side", bench_side_by_side)], quick, with_machine)


def main() -> None:
    parser = arg_parser(__doc__, "10 queries instead of 30")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    emit(run(args.quick, not args.no_machine), args.out)


if __name__ == "__main__":
    main()
