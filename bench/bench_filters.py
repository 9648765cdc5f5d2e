"""Tag and time filters: latency of the store's scoped reads and exactness of the top-k inside
filters that keep 0.1-50 % of a 100k-chunk index.

    .venv/bin/python -m bench.bench_filters [--quick]

The index is built here (a temporary folder, ~15 s): 20,000 files of 5 chunks (4,000 files at
--quick), random unit vectors of 384 d, words drawn from a Zipf-like vocabulary, tags and
update times spread so that each filter keeps a known share. Each row times, per query, what a
hybrid search asks the store for its candidates (fts_search(50), vec_search(50),
count_pending) and checks the vector half against a brute-force top-50 over the scope's own
vectors (numpy), and the lexical half against the unscoped ranking with the chunks outside
the filter struck out. Target: a 1 % filter costs no more than the 1 % folder scope's
target (fts + vec + count ≤ 20 ms, median), and every row is exact.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # `python bench/bench_filters.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.report import Stats, arg_parser, md_table, ms, report, verdict

DIMS = 384
CHUNKS_PER_FILE = 5
DEPTH = 50
PARTS = ("fts", "vec", "count")
TARGET_MS = 20.0
BASE = 1_700_000_000.0
VOCABULARY = [f"w{i}" for i in range(3000)]
MANY_TAGS = [f"r{i}" for i in range(61)]  # the 1 % also hold these: 64 tags at once (the most a search takes)


def build(db: Path, files: int) -> dict[str, object]:
    """The index, and per chunk id what it was written with (the truth rows are checked against)."""
    from indexer.config import EmbeddingConfig
    from indexer.model import Chunk, FileVersion, ParsedDocument
    from indexer.store import Store

    rng = np.random.default_rng(11)
    weights = 1.0 / np.arange(1, len(VOCABULARY) + 1)
    weights /= weights.sum()
    store = Store.open(db)
    store.reset_vectors(
        DIMS, EmbeddingConfig(provider="ollama", model="b:1", endpoint="http://x", dims=DIMS).identity()
    )
    store.ensure_source("s", "workspace")
    with store.transaction():
        for i in range(files):
            tags = ["common", f"t{i % 10}"] + (["rare", *MANY_TAGS] if i % 100 == 7 else [])
            chunks = [
                Chunk(j, f"n{i} > {j}", " ".join(rng.choice(VOCABULARY, 40, p=weights)), j + 1, j + 1)
                for j in range(CHUNKS_PER_FILE)
            ]
            updated = BASE + 60.0 * i
            store.write_file(
                "s",
                FileVersion(f"d{i % 100:02d}/n{i}.md", "", str(i), 1, updated, updated),
                ParsedDocument(title=f"n{i}", tags=tags, chunks=chunks),
            )
    pending = store.pending_chunks(10**7)
    matrix = rng.normal(size=(len(pending), DIMS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    for start in range(0, len(pending), 5000):
        store.store_vectors([p.id for p in pending[start : start + 5000]], matrix[start : start + 5000])
    ids = np.array([p.id for p in pending])
    store.close()
    return {"ids": ids, "matrix": matrix}


def scopes(files: int) -> dict[str, tuple[object, Callable[[int], bool]]]:
    """name -> (scope, does file number i pass)."""
    from indexer.store import SearchScope

    cut = files - files // 100
    window = (files // 2, files // 2 + files // 100)
    return {
        "all": (SearchScope(), lambda i: True),
        "1 % folder (--path d07)": (SearchScope(path="d07"), lambda i: i % 100 == 7),
        "1 % tag (--tag rare)": (SearchScope(tags=("rare",)), lambda i: i % 100 == 7),
        "1 % newest (--since)": (SearchScope(updated_since=BASE + 60.0 * cut), lambda i: i >= cut),
        "1 % window (--since --until)": (
            SearchScope(updated_since=BASE + 60.0 * window[0], updated_before=BASE + 60.0 * window[1]),
            lambda i: window[0] <= i < window[1],
        ),
        "1 % two tags (--tag t7 --tag rare)": (SearchScope(tags=("t7", "rare")), lambda i: i % 100 == 7),
        "1 % 64 tags (--tag common --tag rare ...)": (
            SearchScope(tags=("common", "t7", "rare", *MANY_TAGS)),
            lambda i: i % 100 == 7,
        ),
        "1 % broad tag + narrow time (--tag common --since)": (
            SearchScope(tags=("common",), updated_since=BASE + 60.0 * cut),
            lambda i: i >= cut,
        ),
        "0.1 % tag + folder + time": (
            SearchScope(tags=("rare",), path="d07", updated_since=BASE + 60.0 * (files - files // 10)),
            lambda i: i % 100 == 7 and i >= files - files // 10,
        ),
        "10 % tag (--tag t3)": (SearchScope(tags=("t3",)), lambda i: i % 10 == 3),
        "50 % (--since; vec0 above 20,000 chunks)": (
            SearchScope(updated_since=BASE + 60.0 * (files // 2)),
            lambda i: i >= files // 2,
        ),
    }


def measure(quick: bool) -> str:
    from indexer.keywords import KeywordQuery, Phrase
    from indexer.store import SearchScope, Store
    from search.querybuild import keyword_query

    files = 4000 if quick else 20_000
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory(prefix="bench-filters-") as folder:
        db = Path(folder) / "index.sqlite"
        started = time.perf_counter()
        truth = build(db, files)
        built = time.perf_counter() - started
        ids: np.ndarray = truth["ids"]  # type: ignore[assignment]
        matrix: np.ndarray = truth["matrix"]  # type: ignore[assignment]
        store = Store.open(db, readonly=True)
        file_of = {}
        for start in range(0, len(ids), 10_000):
            for cid, row in store.chunk_rows(ids[start : start + 10_000].tolist()).items():
                file_of[cid] = int(row.path.rsplit("/n", 1)[1].removesuffix(".md"))
        file_numbers = np.array([file_of[int(cid)] for cid in ids])
        n_queries = 10 if quick else 20
        texts = [" ".join(rng.choice(VOCABULARY[50:600], 3)) for _ in range(n_queries)]
        matches = [keyword_query(text) or KeywordQuery((Phrase(("w1",)),)) for text in texts]
        vectors = rng.normal(size=(n_queries, DIMS)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        unscoped = [[cid for cid, _ in store.fts_search(m, 100_000, SearchScope())] for m in matches]
        table = scopes(files)
        wanted = {name: np.array([keep(int(i)) for i in file_numbers]) for name, (_, keep) in table.items()}
        samples = {name: {part: [[] for _ in range(n_queries)] for part in PARTS} for name in table}
        exact = dict.fromkeys(table, True)
        reps = 1 if quick else 3
        # query by query, every scope in turn: a burst of load on the machine hits all rows alike
        for rep in range(reps):
            for q in range(n_queries):
                for name, (scope, _) in table.items():
                    t = time.perf_counter()
                    lexical = store.fts_search(matches[q], DEPTH, scope)  # type: ignore[arg-type]
                    samples[name]["fts"][q].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    vector = store.vec_search(vectors[q], DEPTH, scope)  # type: ignore[arg-type]
                    samples[name]["vec"][q].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    store.count_pending(scope)  # type: ignore[arg-type]
                    samples[name]["count"][q].append(time.perf_counter() - t)
                    if rep == 0:
                        keep_mask = wanted[name]
                        similarity = np.where(keep_mask, matrix @ vectors[q], -np.inf)
                        top = ids[np.argsort(-similarity, kind="stable")[: min(DEPTH, int(keep_mask.sum()))]]
                        kept_ids = set(ids[keep_mask].tolist())
                        exact[name] &= [cid for cid, _ in vector] == top.tolist()
                        exact[name] &= [cid for cid, _ in lexical] == [c for c in unscoped[q] if c in kept_ids][:DEPTH]
        rows = []
        for name in table:
            fts, vec, count = (Stats.of([statistics.median(runs) for runs in samples[name][part]]) for part in PARTS)
            total = fts.median + vec.median + count.median
            target = name.startswith("1 %")
            rows.append(
                [
                    name,
                    f"{wanted[name].sum():,}",
                    ms(fts.median),
                    ms(vec.median),
                    ms(count.median),
                    ms(total),
                    f"≤ {TARGET_MS:.0f}" if target else "",
                    verdict(total * 1000 <= TARGET_MS) if target else "",
                    verdict(exact[name]),
                ]
            )
        store.close()
    title = (
        f"### Filtered store reads @ {len(ids):,} chunks ({files:,} files; built in {built:.0f} s; "
        f"per-query median of {1 if quick else 3} runs, scopes interleaved, then the median over {n_queries} "
        "queries; sum = of the three medians; ms)"
    )
    headers = [
        "scope",
        "chunks kept",
        "fts_search(50)",
        "vec_search(50)",
        "count_pending",
        "sum",
        "target",
        "",
        "exact",
    ]
    return "\n".join([title, "", md_table(headers, rows)])


def run(quick: bool, with_machine: bool) -> str:
    """The run_all convention."""
    return report("Filters (tags, since/until)", "filters", (("reads", measure),), quick, with_machine)


def main() -> int:
    args = arg_parser(__doc__, "4,000 files (20k chunks), one run per query").parse_args()
    markdown = run(args.quick, not args.no_machine)
    print(markdown)
    return 1 if "**MISSED**" in markdown else 0


if __name__ == "__main__":
    sys.exit(main())
