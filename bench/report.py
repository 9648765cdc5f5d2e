"""How benchmarks report: statistics, markdown tables, the machine table and the run_all
report layout (header, sections with their progress on stderr)."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.machine import loadavg, machine_info


def machine_table() -> str:
    info = machine_info()
    return md_table(["", "value"], [[k, v] for k, v in info.items()])


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): an observed value, no interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Stats:
    n: int
    median: float
    p90: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        return cls(len(values), statistics.median(values), percentile(values, 90), min(values), max(values))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**MISSED**")


def header(title: str, quick: bool) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"## {title}{' (quick)' if quick else ''}\n\n_{stamp}, load average at start: {loadavg()}_\n"


def report(
    title: str, tag: str, sections: Sequence[tuple[str, Callable[[bool], str]]], quick: bool, with_machine: bool
) -> str:
    """A benchmark's markdown (the run_all convention): header, machine table, then each section,
    with its progress and duration on stderr."""
    parts = [header(title, quick)]
    if with_machine:
        parts += ["### Machine\n", machine_table(), ""]
    for name, fn in sections:
        eprint(f"[{tag}] {name} ...")
        started = time.perf_counter()
        parts += [fn(quick), ""]
        eprint(f"[{tag}] {name} done in {time.perf_counter() - started:.1f} s")
    return "\n".join(parts)


def arg_parser(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """The flags every benchmark takes: --quick and --no-machine."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--no-machine", action="store_true", help="omit the machine table")
    return parser


def emit(text: str, out: Path | None) -> None:
    """A benchmark's report on stdout, and into `out` (its --out) as well when given."""
    print(text)
    if out:
        out.write_text(text + "\n", encoding="utf-8")


def eprint(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)
