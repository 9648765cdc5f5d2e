"""Run every benchmark, print its tables and keep them in the bench cache (date, machine, tables).

    .venv/bin/python -m bench.run_all [--quick] [--only NAME]... [--out PATH]

Benchmarks are the modules `bench/bench_NAME.py` that follow the shared convention: a
`run(quick, with_machine)` function and `--quick` / `--no-machine` flags (foundation and search
first, then the others in name order), then the quality and scale runs over `../shared/eval/`
(`bench/beir.py`, `bench/corpora.py`; a missing data set is reported as skipped). Those embed
real text with the local model: the first full run takes hours on 2 cores, later runs reuse the
vector cache. Each runs in its own process (clean memory and module
state); its markdown goes to the terminal and into the results file. Generated corpora and
indexes are cached under ${XDG_CACHE_HOME:-~/.cache}/notes-search-bench, so only the first run
pays for building them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run_all.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.machine import REPO, cache_root, child_env, loadavg
from bench.report import machine_table

FIRST = ("foundation", "search")
QUALITY = (
    "beir",
    "crosslingual",
    "exact_ids",
    "corpora",
    "mixed_notes",
)  # bench/NAME.py: same convention, run after the latency benchmarks


def discover() -> list[str]:
    """bench_NAME.py modules that follow the convention (see the module docstring)."""
    names = []
    for path in sorted((REPO / "bench").glob("bench_*.py")):
        text = path.read_text(encoding="utf-8")
        if "def run(quick" in text and ("--no-machine" in text or "arg_parser(" in text):
            names.append(path.stem[len("bench_") :])
    ordered = sorted(names, key=lambda n: (FIRST.index(n) if n in FIRST else len(FIRST), n))
    return ordered + [name for name in QUALITY if (REPO / "bench" / f"{name}.py").exists()]


def module(name: str) -> str:
    return f"bench.{name}" if name in QUALITY else f"bench.bench_{name}"


BENCHES = discover()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    parser.add_argument("--only", choices=BENCHES, action="append", help="run only this benchmark (repeatable)")
    # bench/RESULTS.md holds the curated current figures per area; a run's raw tables go here
    parser.add_argument("--out", default=str(cache_root() / "last-run.md"), help="results file")
    args = parser.parse_args()
    started = time.perf_counter()
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        rev, dirty = "?", ""
    parts = [
        f"# notes-search benchmark results{' (quick)' if args.quick else ''}",
        "",
        f"Run {stamp} at commit `{rev}`{' with uncommitted changes' if dirty else ''}; "
        f"command `.venv/bin/python -m bench.run_all{' --quick' if args.quick else ''}`; "
        f"cache `{cache_root()}`.",
        "",
        "## Machine",
        "",
        machine_table(),
        "",
    ]
    failed = []
    for name in args.only or BENCHES:
        cmd = [sys.executable, "-m", module(name), "--no-machine"] + (["--quick"] if args.quick else [])
        print(f"== {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, text=True)
        print(proc.stdout, flush=True)
        print(f"== {name}: {time.perf_counter() - t:.0f} s, exit {proc.returncode}", file=sys.stderr, flush=True)
        if proc.returncode != 0:
            failed.append(name)
            parts += [f"## {name}: FAILED (exit {proc.returncode}; see the terminal output)", ""]
        parts += [proc.stdout.strip(), ""]
    total = time.perf_counter() - started
    parts += [f"_Total wall time {total:.0f} s; load average at the end: {loadavg()}._", ""]
    Path(args.out).write_text("\n".join(parts), encoding="utf-8")
    print(f"wrote {args.out} ({total:.0f} s)", file=sys.stderr)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
