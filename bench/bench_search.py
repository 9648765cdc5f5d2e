"""Search latency at 10k and 100k chunks (issue "Search" targets), plus a scoped-KNN correctness check.

    .venv/bin/python -m bench.bench_search [--quick] [--corpus realistic [--data /work/shared/eval]]

In-process latency calls `search.engine.search` on an open read-only Store with a precomputed
query vector (query embedding excluded). Whole-process latency runs the `notes-search` CLI.
Targets: hybrid p50 <= 30 ms @10k and <= 60 ms @100k; scoped (1 % by --path folder) @100k
<= 20 ms; `query --mode lex` process @10k <= 0.3 s; hybrid with the real local model process
@10k <= 0.6 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # `python bench/bench_search.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.corpus_real import CORPUS_KINDS, DEFAULT_DATA, DENSE_CORPUS, Corpus, corpus_of
from bench.corpus_text import AREAS, TOPICS_PER_AREA, note_path, query_vector
from bench.machine import CLI, PYTHON, REPO, child_env, run_process, run_timed
from bench.report import Stats, eprint, header, machine_table, md_table, ms, verdict
from bench.workspaces import Workspace, store_built_workspace

if TYPE_CHECKING:
    from indexer.embedders import Embedder

TARGETS_MS = {  # (size, mode, scoped) -> p50 target
    (10_000, "hybrid", False): 30.0,
    (100_000, "hybrid", False): 60.0,
    (100_000, "hybrid", True): 20.0,
}
CLI_LEX_TARGET_S = 0.3
CLI_HYBRID_TARGET_S = 0.6
K = 8
BUDGET_S = 10.0  # per measured configuration; see per_query
WARMUP = 3


class FixedQueryEmbedder:
    """Stands in for the embedder: embed_query returns the query's precomputed vector, and
    `cut_by` (the embedder that built the index, if at hand) tells where a long chunk's windows
    begin; without it a hit found by a further window keeps its chunk's head."""

    def __init__(self, vectors: dict[str, np.ndarray], cut_by: Embedder | None = None) -> None:
        self.vectors = vectors
        self.cut_by = cut_by

    def embed_query(self, text: str) -> np.ndarray:
        return self.vectors[text]

    def window_lines(self, breadcrumb: str, text: str) -> list[int]:
        return self.cut_by.window_lines(breadcrumb, text) if self.cut_by is not None else []

    def interactive(self) -> FixedQueryEmbedder:
        return self


def per_query(qs: list[str], fn: Callable[[str], object], reps: int, budget: float = BUDGET_S) -> list[float]:
    """Median seconds of each query over `reps` runs, after a warm-up of the first few queries.

    Measuring stops once `budget` seconds are spent (pathologically slow configurations): then
    only the queries measured so far count, and the `queries`/`n` column shows how many."""
    for q in qs[:WARMUP]:
        fn(q)
    deadline = time.perf_counter() + budget
    samples: dict[str, list[float]] = {q: [] for q in qs}
    for _ in range(reps):
        for q in qs:
            if time.perf_counter() > deadline:
                break
            t = time.perf_counter()
            fn(q)
            samples[q].append(time.perf_counter() - t)
    return [statistics.median(v) for v in samples.values() if v]


def incremental_writes(ws: Workspace, label: str, corpus: Corpus = DENSE_CORPUS) -> list[list[object]]:
    """Cost of writing one file into the existing index (what every changed file costs a sync
    before embedding). Everything is rolled back."""
    import hashlib

    from indexer.chunker import parse_markdown
    from indexer.model import FileVersion
    from indexer.store import Store

    def version(rel: str, text: str) -> FileVersion:
        data = text.encode()
        return FileVersion(
            path=rel, text=text, sha256=hashlib.sha256(data).hexdigest(), size=len(data), mtime=1.0, updated_at=1.0
        )

    new = []
    for i in range(900_000, 900_010):  # notes beyond the corpus: new paths, new text
        rel = "incoming/" + note_path(i)
        text = corpus.note_text(i)
        new.append((version(rel, text), parse_markdown(text, rel)))
    existing = []
    for i in range(0, ws.files, max(1, ws.files // 10))[:10]:  # same text again: vectors reused
        rel = note_path(i)
        text = (ws.notes / rel).read_text(encoding="utf-8")
        existing.append((version(rel, text), parse_markdown(text, rel)))
    rows = []
    store = Store.open(ws.db)
    try:
        for case, docs in (("new file", new), ("unchanged file rewritten", existing)):
            times = []
            store.conn.execute("BEGIN IMMEDIATE")
            try:
                for fv, doc in docs:
                    t = time.perf_counter()
                    store.write_file("notes", fv, doc)
                    times.append(time.perf_counter() - t)
            finally:
                store.conn.execute("ROLLBACK")
            s = Stats.of(times)
            chunks = statistics.mean(len(d.chunks) for _, d in docs)
            rows.append([label, case, s.n, f"{chunks:.1f}", ms(s.median), ms(s.max)])
    finally:
        store.close()
    return rows


def _scopes():
    from indexer.store import SearchScope

    area = 7
    topic = 2
    one_file = note_path(area + AREAS * topic)  # the first note of area-07/topic-2
    return {
        "all": SearchScope(),
        "1% (--path area-07)": SearchScope(path=f"area-{area:02d}"),
        f"{100 / AREAS / TOPICS_PER_AREA:.1f}% (--path area-07/topic-2)": SearchScope(
            path=f"area-{area:02d}/topic-{topic}"
        ),
        "1 file": SearchScope(path=one_file),
    }


def bench_size(
    ws: Workspace, quick: bool, label: str, target_size: int | None, corpus: Corpus = DENSE_CORPUS
) -> tuple[list[list[object]], list[list[object]], list[list[object]]]:
    from indexer.store import Store
    from indexer.store.sqlite import scope_condition
    from search.engine import search
    from search.querybuild import keyword_query
    from search.resident import ResidentVectors

    config = ws.config()
    store = Store.open(ws.db, readonly=True)
    qs = corpus.queries(20 if quick else 50)
    topics = AREAS * TOPICS_PER_AREA
    vectors = {q: query_vector(i, topics) for i, q in enumerate(qs)}
    embedder = FixedQueryEmbedder(vectors)
    factory = lambda: embedder  # noqa: E731
    reps = 1 if quick or ws.chunks > 50_000 else 3
    scopes = _scopes()
    latency_rows: list[list[object]] = []
    breakdown_rows: list[list[object]] = []
    resident = ResidentVectors(ws.db)
    try:
        t = time.perf_counter()
        resident.reload_in_background()  # what the MCP server starts at launch
        if not resident.wait():
            raise RuntimeError("the vectors could not be loaded into memory (see the log)")
        load_ms = (time.perf_counter() - t) * 1000
        resident_mib = resident.nbytes / 1024 / 1024
        plan = [
            ("hybrid", "all", None),
            ("hybrid", "all", resident),
            ("lex", "all", None),
            ("vec", "all", None),
            ("vec", "all", resident),
            ("hybrid", "1% (--path area-07)", None),
            ("lex", "1% (--path area-07)", None),
            ("vec", "1% (--path area-07)", None),
        ]
        for mode, scope_name, kept in plan:
            scope = scopes[scope_name]

            def run(q: str, mode: str = mode, scope=scope, kept=kept) -> None:
                resp = search(store, config, q, k=K, mode=mode, scope=scope, embedder_factory=factory, resident=kept)
                if resp.degraded:
                    raise RuntimeError(f"degraded search in the benchmark: {resp.notice}")

            values = per_query(qs, run, reps)
            s = Stats.of(values)
            scoped = scope_name != "all"
            target = TARGETS_MS.get((target_size, mode, scoped)) if target_size else None
            process = "—" if mode == "lex" or scoped else ("long-lived" if kept else "one-shot")
            latency_rows.append(
                [
                    label,
                    mode,
                    scope_name,
                    process,
                    s.n,
                    ms(s.median),
                    ms(s.p90),
                    ms(s.min),
                    ms(s.max),
                    f"≤ {target:.0f}" if target else "",
                    f"{s.median * 1000 / target:.2f}" if target else "",
                    verdict(s.median * 1000 <= target) if target else "",
                ]
            )
        # where a hybrid query's time goes: the store calls it makes, one by one
        depth = 50

        def scope_ids(scope):
            where, params = scope_condition(scope, "c")
            return store.conn.execute(f"SELECT c.id FROM chunks c WHERE {where}", params).fetchall()

        matches = {q: keyword_query(q) for q in qs}
        lexq = [q for q in qs if matches[q]]
        for scope_name in ("all", "1% (--path area-07)"):
            scope = scopes[scope_name]
            ids_of = {
                q: {c for c, _ in store.fts_search(matches[q], depth, scope)}
                | {c for c, _ in store.vec_search(vectors[q], depth, scope)}
                for q in lexq
            }
            parts = [
                ("fts_search(50)", lambda q, scope=scope: store.fts_search(matches[q], depth, scope), lexq),
                ("vec_search(50)", lambda q, scope=scope: store.vec_search(vectors[q], depth, scope), qs),
                *(
                    [("resident knn(50) (long-lived)", lambda q: resident.knn(store, vectors[q], depth), qs)]
                    if scope.is_all
                    else []
                ),
                ("count_pending", lambda q, scope=scope: store.count_pending(scope), qs),
                ("chunk_rows(≤100 ids)", lambda q, ids_of=ids_of: store.chunk_rows(ids_of[q]), lexq),
                ("meta (identity check)", lambda q: store.meta(), qs),
            ]
            if not scope.is_all:
                parts.append(("scope ids subquery alone", lambda q, scope=scope: scope_ids(scope), qs))
            for name, fn, subset in parts:
                s = Stats.of(per_query(subset, fn, reps))
                breakdown_rows.append([label, scope_name, name, s.n, ms(s.median), ms(s.p90), ms(s.max)])
        check_rows = scoped_knn_check(store, scopes, label, topics)
    finally:
        store.close()
    write_rows = incremental_writes(ws, label, corpus)
    note = f"{label}: the long-lived process loaded its vectors in {load_ms:.0f} ms ({resident_mib:.0f} MiB resident)"
    return latency_rows, breakdown_rows, check_rows, note, write_rows


def scoped_knn_check(store, scopes, label: str, topics: int) -> list[list[object]]:
    """The scoped vector search returns exactly min(k, scope size) hits, all inside the scope,
    and they are the true top-k (compared with brute force over the scope's vectors)."""
    from indexer.store.sqlite import scope_condition

    rows = []
    for scope_name, scope in scopes.items():
        if scope_name == "all":
            continue
        where, params = scope_condition(scope, "c")
        ids = [
            r[0]
            for r in store.conn.execute(
                f"SELECT c.id FROM chunks c WHERE {where} AND c.embedded_at IS NOT NULL", params
            )
        ]
        id_set = set(ids)
        matrix = np.empty((len(ids), 384), dtype=np.float32)
        for pos, (rowid, blob) in enumerate(
            store.conn.execute(f"SELECT rowid, embedding FROM vec_chunks WHERE rowid IN ({','.join(map(str, ids))})")
        ):
            matrix[pos] = np.frombuffer(blob, dtype=np.float32)
            ids[pos] = rowid  # keep rows and ids aligned in the order vec0 returned them
        for k in (K, 50):
            ok_count = ok_inside = ok_exact = 0
            trials = 10
            for i in range(trials):
                q = query_vector(1000 + i, topics)
                hits = store.vec_search(q, k, scope)
                want = min(k, len(ids))
                ok_count += len(hits) == want
                ok_inside += all(h in id_set for h, _ in hits)
                dist = 1.0 - matrix @ q
                best = np.sort(dist)[:want]
                got = np.array(sorted(d for _, d in hits))
                ok_exact += len(got) == want and bool(np.allclose(got, best, atol=1e-5))
            good = ok_count == ok_inside == ok_exact == trials
            rows.append(
                [
                    label,
                    scope_name,
                    len(ids),
                    k,
                    f"{ok_count}/{trials}",
                    f"{ok_inside}/{trials}",
                    f"{ok_exact}/{trials}",
                    "**ok**" if good else "**WRONG**",
                ]
            )
    return rows


def bench_cli(ws: Workspace, quick: bool, corpus: Corpus = DENSE_CORPUS) -> str:
    cfg = str(ws.config_path)
    env = child_env()
    for var in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        env.pop(var, None)  # the embedder's own defaults
    qs = corpus.queries(10 if quick else 12)
    run_process([CLI, "-c", cfg, "query", qs[0], "--mode", "lex"], env=env)  # warm the page cache
    lex = [run_timed([CLI, "-c", cfg, "query", q, "--mode", "lex"], env=env) for q in qs]
    run_process([CLI, "-c", cfg, "query", qs[0]], env=env)  # model file into the page cache
    n_hyb = 5 if quick else 10
    hyb = [run_timed([CLI, "-c", cfg, "query", q], env=env) for q in qs[:n_hyb]]
    hyb1 = [run_timed([CLI, "-c", cfg, "query", q], env=dict(env, OMP_NUM_THREADS="1")) for q in qs[:n_hyb]]
    hybp = [run_timed([CLI, "-c", cfg, "query", q], env=dict(env, OMP_WAIT_POLICY="PASSIVE")) for q in qs[:n_hyb]]
    # an empty value keeps the code from setting a policy and makes libgomp use its default
    # (spin, then sleep); libgomp prints a warning about the empty value, which is harmless here
    hybs = [run_timed([CLI, "-c", cfg, "query", q], env=dict(env, OMP_WAIT_POLICY="")) for q in qs[:n_hyb]]
    helps = [run_timed([CLI, "--help"], env=env) for _ in range(3)]
    interp = [run_timed([PYTHON, "-c", "pass"], env=env) for _ in range(3)]
    imp_lex = _import_seconds([PYTHON, "-X", "importtime", CLI, "-c", cfg, "query", qs[1], "--mode", "lex"], env)
    imp_hyb = _import_seconds([PYTHON, "-X", "importtime", CLI, "-c", cfg, "query", qs[1]], env)
    rows = []
    for name, timed_runs, target, imports in (
        ("`query --mode lex`", lex, CLI_LEX_TARGET_S, imp_lex),
        ("`query` (hybrid, real local model, as the code runs it)", hyb, CLI_HYBRID_TARGET_S, imp_hyb),
        ("&nbsp;&nbsp;same, OMP_NUM_THREADS=1", hyb1, CLI_HYBRID_TARGET_S, None),
        ("&nbsp;&nbsp;same, OMP_WAIT_POLICY=PASSIVE", hybp, CLI_HYBRID_TARGET_S, None),
        ("&nbsp;&nbsp;same, libgomp's default wait (spin)", hybs, CLI_HYBRID_TARGET_S, None),
        ("baseline: `notes-search --help`", helps, None, None),
        ("baseline: `python -c pass`", interp, None, None),
    ):
        s = Stats.of([w for w, _ in timed_runs])
        cpu = Stats.of([c for _, c in timed_runs])
        rows.append(
            [
                name,
                s.n,
                ms(s.median),
                ms(s.p90),
                ms(s.min),
                ms(s.max),
                ms(cpu.median),
                ms(imports) if imports else "",
                f"≤ {ms(target)}" if target else "",
                f"{s.median / target:.2f}" if target else "",
                verdict(s.median <= target) if target else "",
            ]
        )
    return "\n".join(
        [
            f"### Whole-process query latency @ {ws.chunks} chunks (`notes-search -c cfg query TEXT ...`)\n",
            md_table(
                [
                    "command",
                    "n",
                    "median ms",
                    "p90 ms",
                    "min ms",
                    "max ms",
                    "CPU median ms",
                    "imports ms",
                    "target",
                    "median/target",
                    "verdict",
                ],
                rows,
            ),
            "",
            "Wall times; `CPU` is user+sys of the process (what the wall time approaches on an idle "
            "machine, for single-threaded work); imports from one `python -X importtime` run of the same "
            "command (sum of top-level imports). The OMP rows only change the environment of the "
            "process: they show what the local model's OpenMP threads cost (see the README).",
        ]
    )


def _import_seconds(args: list[str], env: dict[str, str]) -> float:
    _, proc = run_process(args, env=env)
    total = 0
    for line in proc.stderr.decode().splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            _, cum, name = line.split(":", 1)[1].split("|")
            if not name.startswith("  "):
                total += int(cum)
    return total / 1e6


def run(quick: bool, with_machine: bool = True, corpus: Corpus = DENSE_CORPUS) -> str:
    sizes = [10_000, 30_000] if quick else [10_000, 100_000]
    parts = [header("Search", quick)]
    if corpus is not DENSE_CORPUS:
        parts += [f"Corpus: {corpus.kind} (generator version {corpus.version}).", ""]
    if with_machine:
        parts += ["### Machine\n", machine_table(), ""]
    latency, breakdown, checks, loads, writes = [], [], [], [], []
    small = None
    for size in sizes:
        ws = store_built_workspace(corpus.name("search", size), chunks=size, log=eprint, corpus=corpus)
        small = small or ws
        eprint(f"[search] {size}: {ws.files} files, {ws.chunks} chunks ...")
        t = time.perf_counter()
        label = f"{ws.chunks / 1000:.0f}k"
        target_size = size if size in (10_000, 100_000) else None
        a, b, c, d, e = bench_size(ws, quick, label, target_size, corpus)
        writes += e
        latency += a
        breakdown += b
        checks += c
        loads.append(d)
        eprint(f"[search] {size} done in {time.perf_counter() - t:.1f} s")
        db_mb = sum(p.stat().st_size for p in (ws.db, Path(f"{ws.db}-wal")) if p.exists()) / 1024 / 1024
        parts_note = f"- {label}: {ws.files} files, {ws.chunks} chunks, index {db_mb:.0f} MiB"
        parts.append(parts_note)
    parts += [
        "",
        f"### In-process latency (engine `search()`, k={K}, query vector precomputed; per-query median of "
        f"{'1 run' if quick else '3 runs (1 at 100k)'} after warming up on {WARMUP} queries, then p50/p90 over "
        f"the queries; at most {BUDGET_S:.0f} s per row, so a pathological row has fewer queries)\n",
        "process: 'one-shot' is a CLI query (vec0 scans every vector for an unscoped KNN); "
        "'long-lived' is the MCP server, which keeps the vectors in memory (search.resident) and "
        "reloads them in the background after a sync changed them (vec0 answers meanwhile). "
        + "; ".join(loads)
        + ".\n",
        md_table(
            [
                "index",
                "mode",
                "scope",
                "process",
                "queries",
                "p50 ms",
                "p90 ms",
                "min ms",
                "max ms",
                "target ms",
                "p50/target",
                "verdict",
            ],
            latency,
        ),
        "",
        "### Where the time goes: the store calls of one hybrid query, timed separately\n",
        md_table(["index", "scope", "call", "queries", "p50 ms", "p90 ms", "max ms"], breakdown),
        "",
        "### Scoped KNN correctness (10 query vectors per row)\n",
        md_table(
            [
                "index",
                "scope",
                "chunks in scope",
                "k",
                "count = min(k, scope)",
                "all inside scope",
                "exact top-k (vs brute force)",
                "verdict",
            ],
            checks,
        ),
        "",
        "### Incremental write: `Store.write_file` of one file into the existing index (rolled back)\n",
        "What each changed file costs a sync before embedding (old vectors are deleted by rowid: "
        "vec0 answers `rowid IN (subquery)` with a scan of every vector).\n",
        md_table(["index", "file", "files", "chunks/file", "median ms/file", "max ms"], writes),
        "",
    ]
    eprint("[search] CLI ...")
    parts += [bench_cli(small, quick, corpus), ""]
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10k and 30k chunks, fewer queries and runs")
    parser.add_argument("--no-machine", action="store_true", help="omit the machine table")
    parser.add_argument(
        "--corpus", choices=CORPUS_KINDS, default="dense", help="which benchmark corpus (default dense)"
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help=f"eval data for --corpus realistic (default {DEFAULT_DATA})"
    )
    args = parser.parse_args()
    os.chdir(REPO)
    print(run(args.quick, with_machine=not args.no_machine, corpus=corpus_of(args.corpus, args.data)))


if __name__ == "__main__":
    main()
